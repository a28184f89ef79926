"""Fork beside a thread that queries: does every child's query finish?

    python tools/fork_stress.py [FORKS]

A thread queries 200 sectors x 20 000 points in a loop (a game's worker, every frame) while
the main thread forks FORKS times (default 6 000); each child queries once under a 5 s alarm.
Before alloc.c's fork handlers a child could copy the buffer pool's lock held by the other
thread and hang for ever (docs/game-scale.md).  Prints the first fork whose child hung, or
that none did.
"""

from __future__ import annotations

import os
import signal
import sys
import threading

import numpy as np

import sectorbench


def main(forks: int) -> int:
    rng = np.random.default_rng(7)
    n, m = 200, 20_000
    angle = rng.uniform(0, 2 * np.pi, n)
    sectors = {
        "cx": rng.uniform(0, 1000, n).astype(np.float32),
        "cy": rng.uniform(0, 1000, n).astype(np.float32),
        "ux": np.cos(angle).astype(np.float32),
        "uy": np.sin(angle).astype(np.float32),
        "r": rng.uniform(2, 20, n).astype(np.float32),
        "theta": rng.uniform(0.1, 1.5, n).astype(np.float32),
    }
    points = rng.uniform(0, 1000, (m, 2)).astype(np.float32)
    sectorbench.query(sectors, points)
    stop = threading.Event()

    def every_frame():
        while not stop.is_set():
            sectorbench.query(sectors, points)

    frames = threading.Thread(target=every_frame)
    frames.start()
    try:
        for fork in range(forks):
            pid = os.fork()
            if pid == 0:
                signal.alarm(5)
                sectorbench.query(sectors, points)
                os._exit(0)
            if os.waitstatus_to_exitcode(os.waitpid(pid, 0)[1]) == -signal.SIGALRM:
                print(f"fork {fork}: the child's query hung")
                return 1
    finally:
        stop.set()
        frames.join()
    print(f"{forks} forks: every child's query finished")
    return 0


if __name__ == "__main__":
    sys.exit(main(int(sys.argv[1]) if len(sys.argv) > 1 else 6000))
