"""Bencher Metric Format: {benchmark: {measure: {"value", "lower_value", "upper_value"}}}.

As https://bencher.dev/docs/reference/bencher-metric-format describes it: "latency",
the built-in measure in nanoseconds, holds the median gross ns per test with the 95 %
distribution-free interval of that median (min..max when the rounds are too few for
it); "instructions" holds instructions per test where the row has them: the hardware
counters' (instructions_per_test), else valgrind's count (--metric instructions) over the
tests it was counted on.  Both are gross, the whole loop's, as the latency is.
`bencher run --adapter json --file PATH` reads it.
"""

from __future__ import annotations

import json

from ...model.results import RunResult
from ..stats import median_interval

#: The interval lower_value/upper_value give: the confidence the run table's intervals use.
CONFIDENCE = 0.95


def render(result: RunResult) -> str:
    from . import exported_rows, gross_ns_per_test, instructions_per_test

    out = {}
    for name, row in exported_rows(result):
        interval = median_interval(gross_ns_per_test(row), CONFIDENCE)
        measures = {"latency": {"value": interval.estimate, "lower_value": interval.low, "upper_value": interval.high}}
        if (instructions := instructions_per_test(row)) is not None:
            measures["instructions"] = {"value": instructions}
        out[name] = measures
    return json.dumps(out, indent=1) + "\n"
