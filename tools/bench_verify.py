"""make bench-verify: verify's speedup on local processes (issue 20, part 6).

Runs `sectorbench verify --cases N --jobs J` for each J, rounds interleaved (J = 1, 2, 1, 2, ...)
so that a change of the machine's load hits every J alike, and reports per J the median wall
time, the speedup over one process and the cases judged per second per core, with the load
average before and after.  A benchmark, not a test: the figures go to
results/bench-verify-<UTC>.json and into docs/verify.md by hand, with the command.
On a machine others use, the wall-time speedup is meaningful only when it is otherwise idle
(Linux's sched_autogroup shares the CPUs between sessions, so a session's extra processes
take nothing from the others): the CPU seconds per run are reported too.
Usage: python tools/bench_verify.py [--cases N] [--jobs 1 --jobs 2] [--rounds R]
"""

from __future__ import annotations

import argparse
import json
import os
import resource
import statistics
import subprocess
import sys
import tempfile
import time
from datetime import UTC, datetime
from pathlib import Path

ROOT = Path(__file__).resolve().parent.parent
#: The issue's figure: a million rows per random generator.
DEFAULT_CASES = 1_000_000
#: Rounds per J; the median of 3 resists one disturbed round on a shared machine.
DEFAULT_ROUNDS = 3


def commit() -> str:
    done = subprocess.run(["git", "rev-parse", "--short", "HEAD"], cwd=ROOT, capture_output=True, text=True)
    return done.stdout.strip() or "unknown"


def one_run(cases: int, jobs: int, json_path: Path) -> tuple[float, dict]:
    command = [sys.executable, "-m", "sectorbench", "verify", "--cases", str(cases), "--jobs", str(jobs)]
    command += ["--json", str(json_path), "--force"]
    before = resource.getrusage(resource.RUSAGE_CHILDREN)
    start = time.perf_counter()
    done = subprocess.run(command, capture_output=True, text=True)
    seconds = time.perf_counter() - start
    after = resource.getrusage(resource.RUSAGE_CHILDREN)
    if done.returncode not in (0, 1):
        raise SystemExit(f"{' '.join(command)} failed ({done.returncode}): {done.stderr.strip()}")
    result = json.loads(json_path.read_text())
    # CPU seconds of verify and every process under it: what the run cost, whatever else the
    # machine ran (with sched_autogroup, a busy machine caps a session's share of the CPUs).
    result["cpu_s"] = (after.ru_utime - before.ru_utime) + (after.ru_stime - before.ru_stime)
    return seconds, result


def main() -> int:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--cases", type=int, default=DEFAULT_CASES)
    parser.add_argument("--jobs", type=int, action="append", help="repeatable; default 1 and 2")
    parser.add_argument("--rounds", type=int, default=DEFAULT_ROUNDS)
    args = parser.parse_args()
    jobs_list = args.jobs or [1, 2]
    load_before = os.getloadavg()
    seconds: dict[int, list[float]] = {jobs: [] for jobs in jobs_list}
    cpu_seconds: dict[int, list[float]] = {jobs: [] for jobs in jobs_list}
    results: dict[int, dict] = {}
    with tempfile.TemporaryDirectory() as scratch:
        for round_index in range(args.rounds):
            for jobs in jobs_list if round_index % 2 == 0 else reversed(jobs_list):
                wall, result = one_run(args.cases, jobs, Path(scratch) / f"verify-{jobs}.json")
                seconds[jobs].append(wall)
                cpu_seconds[jobs].append(result.pop("cpu_s"))
                results[jobs] = result
                print(
                    f"round {round_index + 1}, --jobs {jobs}: {wall:.2f} s, {cpu_seconds[jobs][-1]:.2f} CPU s",
                    flush=True,
                )
    load_after = os.getloadavg()
    rows = results[jobs_list[0]]["cases"]
    kernels = sum(1 for k in results[jobs_list[0]]["kernels"] if k["status"] == "ok")
    base = statistics.median(seconds[jobs_list[0]])
    report = {
        "kind": "bench-verify",
        "command": f"sectorbench verify --cases {args.cases} --jobs J (J in {jobs_list}), {args.rounds} rounds",
        "commit": commit(),
        "utc": datetime.now(UTC).strftime("%Y-%m-%dT%H:%M:%SZ"),
        "cpus": os.cpu_count(),
        "load_average_before": load_before,
        "load_average_after": load_after,
        "rows": rows,
        "kernels": kernels,
        "jobs": {},
    }
    same = all(
        {k: v for k, v in results[j].items() if k != "env"}
        == {k: v for k, v in results[jobs_list[0]].items() if k != "env"}
        for j in jobs_list
    )
    print(f"{rows:,} rows x {kernels} kernels; load average {load_before[0]:.2f} before, {load_after[0]:.2f} after")
    autogroup = Path("/proc/sys/kernel/sched_autogroup_enabled")
    report["sched_autogroup"] = autogroup.read_text().strip() == "1" if autogroup.exists() else None
    for jobs in jobs_list:
        median = statistics.median(seconds[jobs])
        entry = {
            "seconds": seconds[jobs],
            "median_s": median,
            "speedup": base / median,
            "rows_per_s_per_core": rows / median / jobs,
            "cpu_s": cpu_seconds[jobs],
            "rows_per_cpu_s": rows / statistics.median(cpu_seconds[jobs]),
        }
        report["jobs"][str(jobs)] = entry
        print(
            f"--jobs {jobs}: median {median:.2f} s, speedup {entry['speedup']:.2f}x, "
            f"{entry['rows_per_s_per_core']:,.0f} rows/s per core, {entry['rows_per_cpu_s']:,.0f} rows per CPU second"
        )
    print(f"results identical for every --jobs: {same}")
    report["identical"] = same
    out = ROOT / "results" / f"bench-verify-{report['utc'].replace(':', '')}.json"
    out.write_text(json.dumps(report, indent=1) + "\n")
    print(f"saved {out.relative_to(ROOT)}")
    return 0 if same else 1


if __name__ == "__main__":
    sys.exit(main())
