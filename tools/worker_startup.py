"""What starting a build worker costs: start, describe the build, close, N times (default 10);
the CPU of every process that took (the fork server's start, shared by the N, and each
worker, counted once the fork server has ended and reaped them all) and the wall time per
worker.  Usage: python tools/worker_startup.py [N]"""

from __future__ import annotations

import resource
import sys
import time

from sectorbench.measure.forkserver import close_fork_server
from sectorbench.measure.worker import Worker
from sectorbench.native.build import BuildConfig, build


def children_cpu_s() -> float:
    usage = resource.getrusage(resource.RUSAGE_CHILDREN)
    return usage.ru_utime + usage.ru_stime


def main() -> int:
    workers = int(sys.argv[1]) if len(sys.argv) > 1 else 10
    library = build(BuildConfig.parse("-O2"))
    cpu_before, started = children_cpu_s(), time.perf_counter()
    for _ in range(workers):
        with Worker(library) as worker:
            worker.describe()
    wall_s = time.perf_counter() - started
    close_fork_server()
    cpu_s = children_cpu_s() - cpu_before
    print(f"per worker: {cpu_s / workers:.3f} s of CPU, {wall_s / workers:.3f} s wall ({workers} workers)")
    return 0


if __name__ == "__main__":
    sys.exit(main())
