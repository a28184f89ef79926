"""sectorbench.query on one thread and on two, the two ways a phase's parts can go, alternated
in one process (kernels_c/sector/broadphase/parallel.c): "claimed" (the default: whichever
thread comes first runs a part, the caller those no kept thread has started) and "fixed" (the
caller one part, the kept thread the other: as before parts were claimed).  Game scenes from
1 000 x 10 000 to 10 000 x 1 000 000; medians of --rounds calls each.  Run it beside other work
(a build, a test suite) to see what a busy host does to two threads.

Usage: python tools/query_threads.py [--rounds 31]
"""

from __future__ import annotations

import argparse
import os
import statistics
import time

import sectorbench
from sectorbench.families import scene_kinds as scenes
from sectorbench.families.sector.broadphase import SECTOR_COLUMNS
from sectorbench.families.sector.query import engine

SIZES = ((1_000, 10_000), (10_000, 100_000), (1_000, 300_000), (10_000, 300_000), (10_000, 1_000_000))
WAYS = {"1 thread": (1, 0), "2 claimed": (2, 0), "2 fixed": (2, 1)}  # threads, sb_bp_parts_way


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--rounds", type=int, default=31)
    args = parser.parse_args()
    sectorbench.prepare()
    lib = engine().lib
    print(f"load {os.getloadavg()[0]:.1f}; medians of {args.rounds} calls, ms")
    for n, m in SIZES:
        scene = scenes.generate("game", n, m, seed=1)
        sectors = {k: scene.column(k) for k in SECTOR_COLUMNS}
        points = {"px": scene.column("px"), "py": scene.column("py")}
        times: dict[str, list[float]] = {way: [] for way in WAYS}

        def call(way: str, sectors=sectors, points=points) -> float:
            threads, parts_way = WAYS[way]
            lib.sb_bp_parts_way(parts_way)
            start = time.perf_counter()
            sectorbench.query(sectors, points, threads=threads)
            return time.perf_counter() - start

        for _ in range(8):  # the index's first builds choose how they scatter
            for way in WAYS:
                call(way)
        for _ in range(args.rounds):
            for way in WAYS:
                times[way].append(call(way))
        lib.sb_bp_parts_way(0)
        ms = {way: statistics.median(values) * 1e3 for way, values in times.items()}
        cells = "  ".join(f"{way} {value:7.3f}" for way, value in ms.items())
        print(f"{n:>6} x {m:>9}: {cells}  1 thread / 2 claimed x{ms['1 thread'] / ms['2 claimed']:.2f}", flush=True)


if __name__ == "__main__":
    main()
