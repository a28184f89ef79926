"""What a kernel can change in its worker process besides the FP environment, and which the
kernels after it would inherit: threads left running, timers armed, resource limits, the
CPU affinity or priority of any thread, the working directory, the umask.

The worker takes a snapshot when its scene is loaded and compares after every request that
runs a C row (server.Server.handle); a difference is the row's note, and the parent replaces
the worker before the next request (worker.Worker.ask), since not every change can be undone
(a lowered hard limit, a raised nice value) and a timer or a thread would act on whichever
kernel runs next.  docs/worker.md.
"""

from __future__ import annotations

import os
import resource
import signal
import threading
from dataclasses import dataclass

TIMERS = {"ITIMER_REAL": signal.ITIMER_REAL, "ITIMER_VIRTUAL": signal.ITIMER_VIRTUAL, "ITIMER_PROF": signal.ITIMER_PROF}
#: Each limit once, by its first name (RLIMIT_OFILE is RLIMIT_NOFILE's other name).
_FIRST_NAMES = {getattr(resource, n): n for n in sorted(dir(resource), reverse=True) if n.startswith("RLIMIT_")}
LIMITS = {name: which for which, name in _FIRST_NAMES.items()}


@dataclass(frozen=True)
class ProcessState:
    native_threads: frozenset[int]  # threads Python did not start (a kernel's pthreads, OpenMP's pool)
    timers: tuple[str, ...]  # the armed ones
    limits: tuple[tuple[str, tuple[int, int]], ...]
    affinities: frozenset[frozenset[int]]  # the CPU sets of the process's threads, each once
    nices: frozenset[int]  # ... and their nice values
    cwd: str | None
    umask: int


def _threads() -> list[int]:
    try:
        return sorted(int(tid) for tid in os.listdir("/proc/self/task"))
    except OSError:  # not Linux: the process only
        return [0]


def _cwd() -> str | None:
    try:
        return os.getcwd()
    except OSError:
        return None


def _per_thread(read, tids: list[int]) -> frozenset:
    found = set()
    for tid in tids:
        try:
            found.add(read(tid))
        except OSError:  # ended meanwhile
            pass
    return frozenset(found)


def snapshot() -> ProcessState:
    tids = _threads()
    python_threads = {t.native_id for t in threading.enumerate()}
    umask = os.umask(0o022)
    os.umask(umask)
    return ProcessState(
        native_threads=frozenset(tid for tid in tids if tid not in python_threads and tid != 0),
        timers=tuple(name for name, which in TIMERS.items() if signal.getitimer(which)[0] > 0),
        limits=tuple((name, resource.getrlimit(which)) for name, which in LIMITS.items()),
        affinities=_per_thread(lambda tid: frozenset(os.sched_getaffinity(tid)), tids)
        if hasattr(os, "sched_getaffinity")  # Linux's
        else frozenset(),
        nices=_per_thread(lambda tid: os.getpriority(os.PRIO_PROCESS, tid), tids),
        cwd=_cwd(),
        umask=umask,
    )


def _cpus(cpus: frozenset[int]) -> str:
    return ",".join(str(cpu) for cpu in sorted(cpus))


def describe_change(before: ProcessState, after: ProcessState) -> str | None:
    """What a request changed, as a row's note says it ("left 2 threads running, RLIMIT_CPU
    (-1, -1) -> (3, -1)"), or None.  Threads and timers count only when new; a thread's CPU
    affinity or nice value shows as a value the threads did not have before."""
    changes = []
    left = after.native_threads - before.native_threads
    if left:
        changes.append(f"left {len(left)} thread{'s' if len(left) > 1 else ''} running")
    armed = [name for name in after.timers if name not in before.timers]
    if armed:
        changes.append(f"left a timer armed ({', '.join(armed)})")
    old_limits = dict(before.limits)
    changes += [
        f"{name} {old_limits[name]} -> {value}" for name, value in after.limits if old_limits.get(name) != value
    ]
    if after.affinities != before.affinities:
        sets = [" / ".join(_cpus(cpus) for cpus in state.affinities) for state in (before, after)]
        changes.append(f"CPU affinity {sets[0]} -> {sets[1]}")
    if after.nices != before.nices:
        changes.append(
            f"nice {' / '.join(map(str, sorted(before.nices)))} -> {' / '.join(map(str, sorted(after.nices)))}"
        )
    if after.cwd != before.cwd:
        changes.append(f"working directory {before.cwd} -> {after.cwd or '(removed)'}")
    if after.umask != before.umask:
        changes.append(f"umask {before.umask:03o} -> {after.umask:03o}")
    return ", ".join(changes) or None
