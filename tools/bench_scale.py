"""make bench-scale: the game-scale benchmark, saved as results/bench-scale-<UTC>.json.

1. game and clustered 20 000 x 200 000, each in one `run` (same interleaved rounds): the
   broadphases (grid, morton) end to end against the brute-force SIMD kernels of the same
   -O2 build and the kdtree peer; hit counts must be identical.
2. game 10 000 x 1 000 000 end to end through sectorbench.query (grid), the sectors given as a
   game gives them, one pair of sizes (r2, cos_theta: given both pairs, query also checks that
   they agree, ~0.5 ms more at 10 000 sectors), in a fresh process,
   with its peak memory (VmHWM, reset after the scene is made); then, in another fresh
   process and in interleaved rounds, the query on 1 and 2 threads (index build apart), the
   floor (a streaming loop reading the points and writing the hits' size once, timed in the
   same rounds) and scipy's cKDTree (the kdtree peer, tree build included); hits identical.
   Warm-up runs the index's first builds, which time both ways of scattering the points and
   keep the faster (kernels_c/sector/broadphase/index.c): the rounds measure the choice.
3. How time grows with N, M and the cone size (query, grid and morton, medians).

Ratios are within one run; on a shared machine the absolute times move, the ratios less.
Prints a summary; exits 1 if the hits differ.  Usage: python tools/bench_scale.py [--repeat R] [--quick];
python tools/bench_scale.py --plot results/bench-scale-X.json --out docs/bench-scale.png draws the scaling.
"""

from __future__ import annotations

import argparse
import json
import os
import statistics
import subprocess
import sys
import time
from datetime import UTC, datetime
from pathlib import Path

from sectorbench.measure.runner import RunConfig, run
from sectorbench.measure.timing import TimingConfig
from sectorbench.model.results import RESULTS_DIR, write_atomic, write_text_atomic
from sectorbench.native.build import BuildConfig

#: The brute-force kernels in the comparison: the SIMD no-sqrt ones, the fastest of each ISA
#: (the scalar ones take 10+ s per pass at this size and could not win).
BRUTE_FORCE = ("avx512_nosqrt", "avx512_nosqrt_b4", "avx2_nosqrt", "sse2_nosqrt")
BUILD = BuildConfig.parse("-O2")


def scale_run(kind: str, n: int, m: int, repeat: int) -> dict:
    config = RunConfig(
        scene=kind,
        sectors=n,
        points=m,
        seed=1,
        kernels=(*BRUTE_FORCE, "kdtree"),
        broadphases=("none", "grid", "morton"),
        builds=(BUILD,),
        timing=TimingConfig(repeat=repeat, min_sample_s=0.01),
    )
    result = run(config)
    ok = [r for r in result.results if r.status == "ok"]
    best = lambda rows: min(rows, key=lambda r: r.median_s)  # noqa: E731
    broad = best([r for r in ok if r.broadphase])
    brute = best([r for r in ok if r.kernel in BRUTE_FORCE])
    kdtree = next((r for r in ok if r.kernel == "kdtree"), None)
    summary = {
        "hits": {r.kernel: r.hits for r in ok},
        "identical_hits": len({r.hits for r in ok}) == 1,
        "best_broadphase": broad.kernel,
        "best_broadphase_median_s": broad.median_s,
        "best_broadphase_index_build_s": broad.index_build_s,
        "best_brute_force": brute.kernel,
        "best_brute_force_median_s": brute.median_s,
        "speedup_vs_brute_force": brute.median_s / broad.median_s,
        "speedup_vs_brute_force_net": brute.net_s / broad.median_s if brute.net_s else None,
        "kdtree_median_s": kdtree.median_s if kdtree else None,
        "speedup_vs_kdtree": kdtree.median_s / broad.median_s if kdtree else None,
        "medians_s": {r.kernel: r.median_s for r in ok},
        "index_build_s": {r.kernel: r.index_build_s for r in ok if r.broadphase},
        "candidates": {r.kernel: r.candidates for r in ok if r.broadphase},
    }
    return {"summary": summary, "run": result.to_dict()}


MEMORY_CHILD = r"""
import json, sys, time
import sectorbench
from sectorbench.families import scene_kinds as scenes
from sectorbench.families.sector.broadphase import SECTOR_COLUMNS
from sectorbench.families.sector.query import engine
def status(key):
    for line in open("/proc/self/status"):
        if line.startswith(key):
            return int(line.split()[1]) * 1024
n, m, repeat, broadphase = int(sys.argv[1]), int(sys.argv[2]), int(sys.argv[3]), sys.argv[4]
scene = scenes.generate("game", n, m, seed=1)
columns = {k: scene.column(k) for k in scene.arrays}
sectors = {k: columns[k] for k in SECTOR_COLUMNS}  # one pair of sizes, as a game gives them
points = {"px": columns["px"], "py": columns["py"]}
engine()
sectorbench.query(sectors, {"px": columns["px"][:100], "py": columns["py"][:100]})  # warm
before = status("VmRSS")
open("/proc/self/clear_refs", "w").write("5")
start = time.perf_counter(); hits = sectorbench.query(sectors, points, broadphase=broadphase)
first = time.perf_counter() - start
peak = status("VmHWM")
times, builds = [first], [hits.index_build_s]
for _ in range(repeat - 1):
    del hits
    start = time.perf_counter(); hits = sectorbench.query(sectors, points, broadphase=broadphase)
    times.append(time.perf_counter() - start); builds.append(hits.index_build_s)
print(json.dumps({"n": n, "m": m, "broadphase": broadphase, "times_s": times, "index_build_s": builds,
  "hits": hits.total, "rss_before_bytes": before, "peak_bytes": peak,
  "csr_bytes": hits.offsets.nbytes + hits.indices.nbytes}))
"""


def memory_run(n: int, m: int, repeat: int, broadphase: str = "grid") -> dict:
    out = subprocess.run(
        [sys.executable, "-c", MEMORY_CHILD, str(n), str(m), str(repeat), broadphase],
        capture_output=True,
        text=True,
        check=True,
    )
    data = json.loads(out.stdout)
    data["median_s"] = statistics.median(data["times_s"])
    data["peak_over_before_mib"] = (data["peak_bytes"] - data["rss_before_bytes"]) / 2**20
    return data


LARGE_CHILD = r"""
import json, os, statistics, sys, time
import numpy as np
import sectorbench
from sectorbench.families import scene_kinds as scenes
from sectorbench.families.sector.broadphase import SECTOR_COLUMNS
from sectorbench.families.sector.peers import KdtreePeer
from sectorbench.families.sector.query import engine
n, m, rounds, kdtree_rounds = (int(a) for a in sys.argv[1:5])
scene = scenes.generate("game", n, m, seed=1)
columns = {k: scene.column(k) for k in scene.arrays}
sectors = {k: columns[k] for k in SECTOR_COLUMNS}  # one pair of sizes, as a game gives them
points = {"px": columns["px"], "py": columns["py"]}
runner = engine()
reference = sectorbench.query(sectors, points)  # warm: the build, the pool, the pages
for threads in (1, 2):  # and the index's first builds, which time both ways of scattering
    runner.warm("grid", columns, m, threads=threads)
floor_out = np.empty(reference.total, dtype=np.int32)
runner.stream_floor(columns["px"], columns["py"], floor_out)
times = {"threads_1": [], "threads_2": [], "floor": []}
index = {"threads_1": [], "threads_2": []}
identical = True
for r in range(rounds):
    order = (1, 2) if r % 2 == 0 else (2, 1)
    for threads in order:
        start = time.perf_counter()
        hits = sectorbench.query(sectors, points, threads=threads)
        times[f"threads_{threads}"].append(time.perf_counter() - start)
        index[f"threads_{threads}"].append(hits.index_build_s)
        identical &= hits.same_as(reference)
        del hits
    times["floor"].append(runner.stream_floor(columns["px"], columns["py"], floor_out))
kdtree = []
for _ in range(kdtree_rounds):
    start = time.perf_counter()
    sector, point = KdtreePeer().hits(columns, 0, n)
    kdtree.append(time.perf_counter() - start)
    identical &= bool(np.array_equal(point, reference.indices))
    identical &= bool(np.array_equal(np.bincount(sector, minlength=n), reference.counts))
print(json.dumps({"n": n, "m": m, "rounds": rounds, "times_s": times, "index_build_s": index,
  "kdtree_times_s": kdtree, "hits": reference.total, "candidates": reference.candidates,
  "identical_hits": bool(identical), "narrow_phase": runner.narrow_phase(),
  "scatter_way": {f"threads_{t}": runner.scatter_way(t, m) for t in (1, 2)},
  "floor_bytes": 8 * m + 4 * reference.total, "load": os.getloadavg()}))
"""


def large_run(n: int, m: int, rounds: int, kdtree_rounds: int) -> dict:
    """Game n x m through sectorbench.query on 1 and 2 threads, the floor and cKDTree, in
    interleaved rounds of one fresh process; medians, and the ratios taken within the run."""
    out = subprocess.run(
        [sys.executable, "-c", LARGE_CHILD, str(n), str(m), str(rounds), str(kdtree_rounds)],
        capture_output=True,
        text=True,
        check=True,
    )
    data = json.loads(out.stdout)
    median = {key: statistics.median(values) for key, values in data["times_s"].items()}
    data["median_s"] = median
    data["index_build_median_s"] = {key: statistics.median(v) for key, v in data["index_build_s"].items()}
    data["kdtree_median_s"] = statistics.median(data["kdtree_times_s"]) if data["kdtree_times_s"] else None
    data["speedup_2_threads"] = median["threads_1"] / median["threads_2"]
    data["ratio_to_floor"] = {key: median[key] / median["floor"] for key in ("threads_1", "threads_2")}
    data["floor_bandwidth_gb_s"] = data["floor_bytes"] / median["floor"] / 1e9
    if data["kdtree_median_s"]:
        data["speedup_vs_kdtree"] = data["kdtree_median_s"] / median["threads_1"]
    return data


def scaling(repeat: int, quick: bool) -> list[dict]:
    """Medians of end-to-end query time as N, M and the cone size vary (game scenes)."""
    from sectorbench import query
    from sectorbench.families import scene_kinds as scenes
    from sectorbench.families.sector.broadphase import SECTOR_COLUMNS

    cases = [("N", n, 200_000, (2.0, 20.0)) for n in (5_000, 10_000, 20_000, 40_000)]
    cases += [("M", 10_000, m, (2.0, 20.0)) for m in (100_000, 200_000, 500_000, 1_000_000)]
    cases += [("r", 20_000, 200_000, r) for r in ((0.5, 5.0), (1.0, 10.0), (2.0, 20.0), (4.0, 40.0))]
    if quick:
        cases = cases[:2]
    rows = []
    for varied, n, m, (rmin, rmax) in cases:
        scene = scenes.generate("game", n, m, seed=1, options={"rmin": rmin, "rmax": rmax})
        sectors = {k: scene.column(k) for k in SECTOR_COLUMNS}  # one pair of sizes, as a game gives them
        points = {"px": scene.column("px"), "py": scene.column("py")}
        row = {"varied": varied, "n": n, "m": m, "rmin": rmin, "rmax": rmax}
        for broadphase in ("grid", "morton"):
            times = []
            for _ in range(repeat):
                start = time.perf_counter()
                hits = query(sectors, points, broadphase=broadphase)
                times.append(time.perf_counter() - start)
            row[f"{broadphase}_median_s"] = statistics.median(times)
            row["hits"] = hits.total
        rows.append(row)
    return rows


def plot_scaling(record: dict, out: Path) -> None:
    """Log-log: end-to-end time against N, M and the mean cone radius, grid and morton."""
    import matplotlib

    matplotlib.use("Agg")
    import matplotlib.pyplot as plt

    fig, axes = plt.subplots(1, 3, figsize=(11, 3.4), constrained_layout=True)
    for ax, (varied, label, x_of) in zip(
        axes,
        (
            ("N", "N sectors (M = 200 000)", lambda r: r["n"]),
            ("M", "M points (N = 10 000)", lambda r: r["m"]),
            ("r", "mean radius (20 000 x 200 000)", lambda r: (r["rmin"] + r["rmax"]) / 2),
        ),
    ):
        rows = [r for r in record["scaling"] if r["varied"] == varied]
        for broadphase, marker in (("grid", "o-"), ("morton", "s--")):
            ax.loglog(
                [x_of(r) for r in rows], [r[f"{broadphase}_median_s"] * 1e3 for r in rows], marker, label=broadphase
            )
        ax.set_xlabel(label)
        ax.set_ylabel("ms end to end (median)")
        ax.grid(True, which="both", alpha=0.3)
    axes[0].legend()
    fig.suptitle(f"sectorbench query, game scenes ({record['created']}, load {record['machine_load_before'][0]:.1f})")
    out.parent.mkdir(parents=True, exist_ok=True)
    write_atomic(out, lambda stream: fig.savefig(stream, format=out.suffix.lstrip(".")), overwrite=True)


def main() -> int:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--repeat", type=int, default=5)
    parser.add_argument("--quick", action="store_true", help="small sizes: a smoke test of this script")
    parser.add_argument("--large-rounds", type=int, default=31, help="interleaved rounds of the 10k x 1M query")
    parser.add_argument("--only-large", action="store_true", help="only the 10k x 1M query (threads, floor, kdtree)")
    parser.add_argument("--plot", type=Path, help="only draw the scaling plot of this saved JSON (to --out)")
    parser.add_argument("--out", type=Path, default=Path("docs/bench-scale.png"))
    args = parser.parse_args()
    if args.plot:
        plot_scaling(json.loads(args.plot.read_text()), args.out)
        print(f"saved {args.out}")
        return 0
    n, m, big_n, big_m = (20_000, 200_000, 10_000, 1_000_000) if not args.quick else (500, 5_000, 500, 20_000)
    load_before = os.getloadavg()
    if args.only_large:
        record = {
            "created": datetime.now(UTC).isoformat(timespec="seconds"),
            "schema": 1,
            "machine_load_before": load_before,
            "game_large_threads": large_run(big_n, big_m, args.large_rounds, 3),
            "machine_load_after": os.getloadavg(),
        }
        return report_large(record, big_n, big_m)
    record = {
        "created": datetime.now(UTC).isoformat(timespec="seconds"),
        "schema": 1,
        "machine_load_before": load_before,
        "game": scale_run("game", n, m, args.repeat),
        "clustered": scale_run("clustered", n, m, args.repeat),
        "game_large": memory_run(big_n, big_m, args.repeat),
        "game_large_threads": large_run(big_n, big_m, args.large_rounds, 3),
        "scaling": scaling(3, args.quick),
        "machine_load_after": os.getloadavg(),
    }
    stamp = datetime.now(UTC).strftime("%Y%m%dT%H%M%SZ")
    path = RESULTS_DIR / f"bench-scale-{stamp}.json"
    write_text_atomic(path, json.dumps(record, indent=1) + "\n")
    big = record["game_large"]
    for kind in ("game", "clustered"):
        s = record[kind]["summary"]
        print(f"{kind} {n} x {m}: {s['best_broadphase']} {s['best_broadphase_median_s'] * 1e3:.1f} ms end to end")
        print(f"  (index {s['best_broadphase_index_build_s'] * 1e3:.2f} ms), {s['best_brute_force']}")
        print(f"  {s['best_brute_force_median_s'] * 1e3:.0f} ms: x{s['speedup_vs_brute_force']:.1f}", end="")
        if s["speedup_vs_kdtree"]:
            print(f"; kdtree {s['kdtree_median_s'] * 1e3:.0f} ms: x{s['speedup_vs_kdtree']:.1f}", end="")
        print(f"; identical hits: {s['identical_hits']} {s['hits']}")
    print(f"game {big_n} x {big_m}: grid {big['median_s'] * 1e3:.1f} ms end to end (median of {args.repeat}),")
    print(f"  peak memory +{big['peak_over_before_mib']:.1f} MiB over the process holding the scene")
    print(f"  (CSR {big['csr_bytes'] / 2**20:.1f} MiB), {big['hits']} hits")
    for row in record["scaling"]:
        print(
            f"  {row['varied']}: N={row['n']} M={row['m']} r=[{row['rmin']}, {row['rmax']}]: "
            f"grid {row['grid_median_s'] * 1e3:.1f} ms, morton {row['morton_median_s'] * 1e3:.1f} ms, "
            f"{row['hits']} hits"
        )
    print_large(record["game_large_threads"])
    print(f"load average before {load_before}, after {record['machine_load_after']}; saved {path}")
    ok = all(record[kind]["summary"]["identical_hits"] for kind in ("game", "clustered"))
    return 0 if ok and record["game_large_threads"]["identical_hits"] else 1


def print_large(large: dict) -> None:
    median, index = large["median_s"], large["index_build_median_s"]
    print(f"game {large['n']} x {large['m']} via sectorbench.query, medians of {large['rounds']} interleaved rounds:")
    for threads in (1, 2):
        key = f"threads_{threads}"
        way = large.get("scatter_way", {}).get(key, "not recorded")  # older records lack it
        print(
            f"  {threads} thread(s): {median[key] * 1e3:.2f} ms end to end (index {index[key] * 1e3:.2f} ms, "
            f"{way} scatter), {large['ratio_to_floor'][key]:.1f}x the floor"
        )
    print(
        f"  2 threads: x{large['speedup_2_threads']:.2f}; floor {median['floor'] * 1e3:.2f} ms "
        f"({large['floor_bytes'] / 2**20:.1f} MiB at {large['floor_bandwidth_gb_s']:.1f} GB/s)"
    )
    if large.get("kdtree_median_s"):
        print(f"  cKDTree {large['kdtree_median_s'] * 1e3:.0f} ms: grid x{large['speedup_vs_kdtree']:.0f}", end="")
    print(f"; {large['hits']} hits, identical: {large['identical_hits']}; load {large['load']}")


def report_large(record: dict, n: int, m: int) -> int:
    stamp = datetime.now(UTC).strftime("%Y%m%dT%H%M%SZ")
    path = RESULTS_DIR / f"bench-scale-{stamp}.json"
    write_text_atomic(path, json.dumps(record, indent=1) + "\n")
    print_large(record["game_large_threads"])
    print(f"load average before {record['machine_load_before']}, after {record['machine_load_after']}; saved {path}")
    return 0 if record["game_large_threads"]["identical_hits"] else 1


if __name__ == "__main__":
    sys.exit(main())
