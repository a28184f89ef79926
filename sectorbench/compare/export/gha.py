"""github-action-benchmark's `customSmallerIsBetter`: [{name, unit, value, range, extra}].

benchmark-action/github-action-benchmark's extract.ts reads the file with
`JSON.parse(output)` and maps each entry's name, value, unit, range and extra: value a
number (smaller is better), range and extra free strings shown in its charts' tooltips.
value: the median gross ns per test; range: half the width of its 95 % interval;
extra: the net time per test (a broadphase row: that it is end to end) and the rounds.
A row with instructions per test (hardware counters, or valgrind's count of --metric
instructions) has a second entry, "NAME (instructions)" in instructions/test: the action
charts each name apart and alerts on its ratio alike, and a job that gates on counts because
its runner's times are noisy wants those charted.
"""

from __future__ import annotations

import json

from ...model.results import RunResult
from ..stats import median_interval

CONFIDENCE = 0.95


def _counted_by(row) -> str:
    if row.instructions_per_test is not None:
        return "hardware counters, the whole loop (NoOperation not subtracted)"
    return "valgrind (--metric instructions), the whole loop (NoOperation not subtracted)"


def render(result: RunResult) -> str:
    from . import exported_rows, gross_ns_per_test, instructions_per_test

    entries = []
    for name, row in exported_rows(result):
        interval = median_interval(gross_ns_per_test(row), CONFIDENCE)
        extra = [f"rounds: {len(row.samples_s)}"]
        if row.broadphase:  # its net time is its gross one: there is no NoOperation loop to subtract
            extra.insert(0, "end to end (index build + query): no NoOperation loop subtracted")
        elif row.ns_per_test is not None:
            extra.insert(0, f"net: {row.ns_per_test:.4g} ns/test (NoOperation loop subtracted)")
        entries.append(
            {
                "name": name,
                "unit": "ns/test",
                "value": interval.estimate,
                "range": f"± {(interval.high - interval.low) / 2:.3g}",
                "extra": "\n".join(extra),
            }
        )
        if (instructions := instructions_per_test(row)) is not None:
            entries.append(
                {
                    "name": f"{name} (instructions)",
                    "unit": "instructions/test",
                    "value": instructions,
                    "extra": _counted_by(row),
                }
            )
    return json.dumps(entries, indent=1) + "\n"
