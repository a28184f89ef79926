"""Google Benchmark's JSON (--benchmark_format=json), one object per repetition.

What google/benchmark's tools/gbench/report.py (compare.py) needs of a benchmark object:
name, time_unit, real_time and cpu_time; it pairs the objects of one name in order and
runs its U test over them when each side has at least 2.  github-action-benchmark's
`googlecpp` reads name, real_time, time_unit, iterations, cpu_time and threads.  Each
round is one object with run_type "iteration", repetitions and repetition_index, as
`--benchmark_repetitions=N` writes them; no aggregate rows (mean, median, stddev),
which a consumer would otherwise compare as if they were repetitions.

real_time is the round's gross ns per test, iterations the tests it timed (passes x
tests).  sectorbench measures wall time only: cpu_time repeats it.  The net time per
test of the round is a user counter, `net_ns_per_test`, as Google Benchmark writes
counters: an extra number on the object; so are the row's instructions per test, where it
has them (hardware counters, or valgrind's count of --metric instructions), as
`instructions_per_test` on each of its objects.
"""

from __future__ import annotations

import json

from ...model.results import RunResult


def render(result: RunResult) -> str:
    from . import exported_rows, gross_ns_per_test, instructions_per_test

    cpu = ((result.env or {}).get("machine") or {}).get("cpu") or {}
    context = {
        "date": result.created,
        "executable": "sectorbench",
        "num_cpus": cpu.get("logical_cores") or 0,
        "mhz_per_cpu": round(cpu.get("measured_mhz") or cpu.get("nominal_mhz") or 0),
        "cpu_scaling_enabled": False,
        "caches": [],
        "library_build_type": "release",
    }
    benchmarks = []
    for family_index, (name, row) in enumerate(exported_rows(result)):
        gross = gross_ns_per_test(row)
        net = [seconds / max(1, row.tests) * 1e9 for seconds in row.net_samples_s]
        instructions = instructions_per_test(row)
        for index, value in enumerate(gross):
            entry = {
                "name": name,
                "family_index": family_index,
                "per_family_instance_index": 0,
                "run_name": name,
                "run_type": "iteration",
                "repetitions": len(gross),
                "repetition_index": index,
                "threads": row.threads,
                "iterations": max(1, row.calls) * max(1, row.tests),
                "real_time": value,
                "cpu_time": value,
                "time_unit": "ns",
            }
            if len(net) == len(gross):
                entry["net_ns_per_test"] = net[index]
            if instructions is not None:
                entry["instructions_per_test"] = instructions
            benchmarks.append(entry)
    return json.dumps({"context": context, "benchmarks": benchmarks}, indent=1) + "\n"
