"""pyperf's JSON (a BenchmarkSuite, file format version "1.0"), which `python -m pyperf
compare_to a.json b.json` and `pyperf show` read.

Layout as psf/pyperf's _bench.py writes and loads it: {"version": "1.0", "metadata":
{...}, "benchmarks": [{"metadata": {"name", "unit", "loops", "inner_loops"}, "runs":
[{"values": [...]}]}]}.  A value is seconds per inner loop: here per test, with loops =
the passes one sample timed and inner_loops = the scene's tests, so that a value times
loops times inner_loops is the sample's time, as in pyperf.  Each round is one run of
one value: rounds are independent, calibrated samples, as pyperf's worker processes.
"""

from __future__ import annotations

import json
from datetime import datetime

from ...model.results import RunResult

#: The file format version pyperf 2 writes and reads (_bench._JSON_VERSION).
PYPERF_JSON_VERSION = "1.0"


def render(result: RunResult) -> str:
    from . import exported_rows

    cpu = ((result.env or {}).get("machine") or {}).get("cpu") or {}
    suite = {}
    date = pyperf_date(result.created)
    if date is not None:
        suite["date"] = date
    if cpu.get("model_name"):
        suite["cpu_model_name"] = cpu["model_name"]
    if cpu.get("logical_cores"):
        suite["cpu_count"] = int(cpu["logical_cores"])
    benchmarks = [
        {
            "metadata": {
                "name": name,
                "unit": "second",
                "loops": max(1, int(row.calls)),
                "inner_loops": max(1, int(row.tests)),
            },
            "runs": [{"values": [seconds / max(1, row.tests)]} for seconds in row.samples_s],
        }
        for name, row in exported_rows(result)
    ]
    return json.dumps({"version": PYPERF_JSON_VERSION, "metadata": suite, "benchmarks": benchmarks}, indent=1) + "\n"


def pyperf_date(created) -> str | None:
    """The run's time as pyperf reads it (datetime.fromisoformat, in `pyperf stats`), or None:
    a saved result's `created` is any string, and one that is not an ISO time ("yesterday")
    made `pyperf stats` stop with a traceback.  Written again by isoformat, so that a pyperf
    on an older Python (whose fromisoformat reads only that form) reads it too."""
    try:
        return datetime.fromisoformat(created).isoformat()
    except (TypeError, ValueError):
        return None
