"""make gate-power: the A/B gate's measured power and false alarms, with a CPU hog on every core.

A benchmark, not a test: it times real kernels on a deliberately loaded machine.

  * slow:      a user --source kernel with a little added work (one multiply and one add a
               test, about 8 % by llvm-mca's bound) against its own previous version, by
               `run --against-source`: how often the timing gate catches it (target >= 9 of 10);
  * identical: the same file against a copy of itself: how often it raises an alarm (target 0);
  * instructions: the slow pair again with --metric instructions: caught every time, and the
               count ratio the same in every trial (0 variance).

One busy process per core (`python -c "while True: pass"`) runs through every trial.
Nothing stops other jobs from using the machine meanwhile: the load average before and
after is saved with the figures.  Writes results/gate-power-<UTC>.json.
"""

from __future__ import annotations

import argparse
import json
import os
import statistics
import subprocess
import sys
import tempfile
import time
from datetime import UTC, datetime
from pathlib import Path

REPO = Path(__file__).resolve().parent.parent
SECTORBENCH = [sys.executable, "-m", "sectorbench"]
TRIALS = int(os.environ.get("GATE_POWER_TRIALS", "10"))
#: The scene and the gate's settings of every timing trial (a CI job's size).
SCENE = ["-n", "200", "-m", "20000", "--flags", "-O2", "--kernels", "probe"]
TIMING = ["--repeat", "15", "--min-time", "0.05", "--threshold", "0.05"]
#: The instruction trials gate on counts: a smaller scene (valgrind runs a loop 20-100x slower;
#: a count per test does not need many tests), and their timing is only the run's, kept short.
COUNTING_SCENE = ["-n", "64", "-m", "10000", "--flags", "-O2", "--kernels", "probe"]
COUNTING = ["--repeat", "3", "--min-time", "0.01", "--threshold", "0.05", "--metric", "instructions"]
#: The probe's files live here between runs: a build's cache key holds its sources' paths, so a
#: fixed folder lets a rerun reuse the three builds (each compiles all of kernels_c/).
SOURCES_DIR = Path(os.environ.get("GATE_POWER_DIR", Path(tempfile.gettempdir()) / "sectorbench-gate-power"))

PROBE = """#include "sb_common.h"
/* gate-power's probe: the nosqrt test written plainly. */
static inline int probe(float cx, float cy, float ux, float uy, float r2, float k, float px, float py) {
    const float dx = px - cx, dy = py - cy;
    const float s = dx * dx + dy * dy, a = dx * ux + dy * uy;
    return (s < r2) & (a > 0.0f) & (a * a > s * (k * k));
}
SB_KERNEL(probe, SCALAR, 1, (cx, cy, ux, uy, r2, cos_theta), .family = "sector", .summary = "gate-power probe");
"""
#: The added work: 0 * dx is not 0 for an infinite dx, so without fast math it is computed.
SLOWER = ("dx * dx + dy * dy,", "dx * dx + dy * dy + 0.0f * dx,")


def load_average() -> list[float]:
    return [round(x, 2) for x in os.getloadavg()]


def trial(kind: str, old: Path, new: Path, scratch: Path, index: int, options: list[str], scene=SCENE) -> dict:
    out = scratch / f"{kind}-{index}.json"
    command = [*SECTORBENCH, "run", *scene, *options, "--source", str(new), "--against-source", str(old)]
    started = time.monotonic()
    done = subprocess.run([*command, "--json", str(out)], capture_output=True, text=True, cwd=scratch)
    if done.returncode not in (0, 1):
        raise SystemExit(f"gate-power: {kind} trial {index} failed ({done.returncode}): {done.stderr.strip()[-400:]}")
    rows = {r["side"]: r for r in json.loads(out.read_text())["results"]}
    base, head = rows["base"], rows["head"]
    record = {
        "kind": kind,
        "exit": done.returncode,
        "flagged": done.returncode == 1,
        "seconds": round(time.monotonic() - started, 1),
        "median_ratio": statistics.median(head["samples_s"]) / statistics.median(base["samples_s"]),
        "confirm": [line for line in done.stderr.splitlines() if line.startswith("confirm:")],
    }
    if head.get("instructions") is not None and base.get("instructions") is not None:
        net = [(r["instructions"] - r["overhead_instructions"]) for r in (base, head)]
        record.update(base_net_instructions=net[0], head_net_instructions=net[1], count_ratio=net[1] / net[0])
    print(
        f"gate-power: {kind} {index + 1}/{TRIALS}: exit {done.returncode}, median ratio {record['median_ratio']:.3f}"
        + (f", count ratio {record['count_ratio']:.6f}" if "count_ratio" in record else ""),
        flush=True,
    )
    return record


def main() -> int:
    # no options: --help says what it does and how long it takes before any hog starts
    argparse.ArgumentParser(
        description=__doc__.splitlines()[0], epilog="It takes about 3 minutes and loads every core meanwhile."
    ).parse_args()
    commit = subprocess.run(["git", "rev-parse", "HEAD"], cwd=REPO, capture_output=True, text=True).stdout.strip()
    cores = os.cpu_count() or 1
    SOURCES_DIR.mkdir(parents=True, exist_ok=True)
    base, slow, same = SOURCES_DIR / "base.c", SOURCES_DIR / "slow.c", SOURCES_DIR / "same.c"
    for path, text in ((base, PROBE), (same, PROBE), (slow, PROBE.replace(*SLOWER))):
        if not path.exists() or path.read_text() != text:
            path.write_text(text)
    with tempfile.TemporaryDirectory(prefix="gate-power-") as folder:
        scratch = Path(folder)
        load_before = load_average()
        hogs = [subprocess.Popen([sys.executable, "-c", "while True: pass"]) for _ in range(cores)]
        try:
            trials = []
            for index in range(TRIALS):
                trials.append(trial("slow", base, slow, scratch, index, TIMING))
                trials.append(trial("identical", base, same, scratch, index, TIMING))
            for index in range(TRIALS):
                trials.append(trial("instructions", base, slow, scratch, index, COUNTING, COUNTING_SCENE))
        finally:
            for hog in hogs:
                hog.kill()
                hog.wait()
        load_after = load_average()

    def of(kind):
        return [t for t in trials if t["kind"] == kind]

    ratios = [t["count_ratio"] for t in of("instructions")]
    summary = {
        "slow_caught": sum(t["flagged"] for t in of("slow")),
        "identical_alarms": sum(t["flagged"] for t in of("identical")),
        "instructions_caught": sum(t["flagged"] for t in of("instructions")),
        "trials": TRIALS,
        "instruction_ratio_variance": statistics.pvariance(ratios) if ratios else None,
        "instruction_ratio": ratios[0] if ratios else None,
        "slow_median_ratio": statistics.median(t["median_ratio"] for t in of("slow")),
        "identical_median_ratio": statistics.median(t["median_ratio"] for t in of("identical")),
    }
    result = {
        "what": "make gate-power (tools/gate_power.py)",
        "commit": commit,
        "created": datetime.now(UTC).isoformat(timespec="seconds"),
        "hogs": cores,
        "load_average_before": load_before,
        "load_average_after": load_after,
        "commands": {
            "timing": " ".join(["sectorbench", "run", *SCENE, *TIMING, "--source NEW.c --against-source OLD.c"]),
            "instructions": " ".join(
                ["sectorbench", "run", *COUNTING_SCENE, *COUNTING, "--source NEW.c --against-source OLD.c"]
            ),
        },
        "summary": summary,
        "trials": trials,
    }
    out = REPO / "results" / f"gate-power-{datetime.now(UTC).strftime('%Y%m%dT%H%M%SZ')}.json"
    out.write_text(json.dumps(result, indent=1) + "\n")
    print(json.dumps(summary, indent=1))
    print(f"gate-power: saved {out.relative_to(REPO)} (load average {load_before} before, {load_after} after)")
    return 0


if __name__ == "__main__":
    sys.exit(main())
