"""make bench-aabr: the aabr crossover — from how many vertices is the BCS faster
than scanning? — saved as results/bench-aabr-<date>.json and a plot next to it.

Usage: python tools/bench_aabr.py [--repeat 9] [--sizes 4,8,...] [--out results]
Prints a markdown table (for the README) and the crossovers; no timing is asserted.
"""

from __future__ import annotations

import argparse
import dataclasses
import json
import os
import time
from pathlib import Path

from aabr_bench import SEQUENCES, BenchConfig, crossovers, measure

from sectorbench.model.results import SCHEMA_VERSION
from sectorbench.native import environment

KERNELS = ("scan", "scan_avx2", "scan_avx512", "hill", "bcs_search", "bcs_coherent")
RATIOS = ("search/scan", "search/best simd", "search/hill", "coherent/scan", "coherent/best simd", "coherent/search")


def table(rows) -> str:
    lines = []
    for sequence in SEQUENCES:
        lines.append(
            f"\n{sequence} rotations: net ns per (polygon, rotation); speed-ups = medians of per-round ratios\n"
        )
        head = ["n", *KERNELS, *RATIOS, "BCS build µs", "BCS bytes"]
        lines.append("| " + " | ".join(head) + " |")
        lines.append("|" + "---:|" * len(head))
        for r in (r for r in rows if r.sequence == sequence):
            cells = [str(r.vertices)]
            cells += [f"{r.ns[k]:.1f}" if k in r.ns else "–" for k in KERNELS]
            cells += [f"{r.ratio[k]:.2f}" if r.ratio.get(k) else "–" for k in RATIOS]
            cells.append(f"{r.index_build_us_per_polygon:.1f}" if r.index_build_us_per_polygon else "–")
            cells.append(f"{r.index_bytes_per_polygon:.0f}" if r.index_bytes_per_polygon else "–")
            lines.append("| " + " | ".join(cells) + " |")
    return "\n".join(lines)


def plot(rows, path: Path) -> None:
    import matplotlib

    matplotlib.use("Agg")
    import matplotlib.pyplot as plt

    figure, axes = plt.subplots(1, 2, figsize=(12, 4.5), sharey=True)
    for axis, sequence in zip(axes, SEQUENCES):
        mine = [r for r in rows if r.sequence == sequence]
        for kernel in KERNELS:
            points = [(r.vertices, r.ns[kernel]) for r in mine if r.ns.get(kernel, 0) > 0]
            if points:
                axis.plot(*zip(*points), marker="o", label=kernel)
        axis.set(xscale="log", yscale="log", xlabel="vertices", title=f"{sequence} rotations")
        axis.set_xticks([r.vertices for r in mine], [str(r.vertices) for r in mine])
        axis.grid(True, which="both", alpha=0.3)
    axes[0].set_ylabel("net ns per (polygon, rotation)")
    axes[1].legend()
    figure.suptitle("aabr: extreme vertices of a rotated convex polygon (sectorbench, -O2)")
    figure.tight_layout()
    figure.savefig(path, dpi=110)


def main() -> int:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--repeat", type=int, default=BenchConfig.repeat)
    parser.add_argument("--sizes", default=",".join(map(str, BenchConfig.sizes)))
    parser.add_argument("--seed", type=int, default=0)
    parser.add_argument("--out", type=Path, default=Path("results"))
    args = parser.parse_args()
    config = BenchConfig(tuple(int(s) for s in args.sizes.split(",")), args.repeat, seed=args.seed)
    started = time.time()
    load_before = os.getloadavg()
    rows = measure(config, progress=lambda what: print("…", what, flush=True))
    found = crossovers(rows)
    stamp = time.strftime("%Y%m%d-%H%M%S", time.gmtime())
    args.out.mkdir(parents=True, exist_ok=True)
    path = args.out / f"bench-aabr-{stamp}.json"
    document = {
        "schema_version": SCHEMA_VERSION,
        "what": "aabr crossover: aabr kernels, net ns per (polygon, rotation), -O2",
        "config": dataclasses.asdict(config),
        "load_average": {"before": load_before, "after": os.getloadavg()},
        "seconds": time.time() - started,
        "machine": environment.machine_fingerprint(),
        "rows": [dataclasses.asdict(r) for r in rows],
        "crossovers": found,
    }
    path.write_text(json.dumps(document, indent=1))
    print(table(rows))
    print("\ncrossovers (fewest vertices from which the faster kernel wins at every larger size):")
    print(json.dumps(found, indent=1))
    print(f"load average before / after: {load_before} / {os.getloadavg()}")
    try:
        plot(rows, path.with_suffix(".png"))
        print(f"saved {path} and {path.with_suffix('.png')}")
    except ImportError:
        print(f"saved {path} (no plot: matplotlib is not installed)")
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
