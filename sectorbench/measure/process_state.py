"""What a kernel can change in its worker process besides the FP environment, and which the
kernels after it would inherit: threads or child processes left running, timers armed, files
left open, resource limits, signal handlers and blocked signals, the CPU affinity, priority
or scheduling policy of any thread, the working directory, the umask.

The worker takes a snapshot when its scene is loaded and compares after every request that
runs a C row (server.Server.handle); a difference is the row's note, and the parent replaces
the worker before the next request (worker.Worker.ask), since not every change can be undone
(a lowered hard limit, a raised nice value) and a timer or a thread would act on whichever
kernel runs next.  docs/worker.md.
"""

from __future__ import annotations

import ctypes
import errno
import os
import platform
import resource
import signal
import threading
from dataclasses import dataclass
from pathlib import Path

TIMERS = {"ITIMER_REAL": signal.ITIMER_REAL, "ITIMER_VIRTUAL": signal.ITIMER_VIRTUAL, "ITIMER_PROF": signal.ITIMER_PROF}
#: Each limit once, by its first name (RLIMIT_OFILE is RLIMIT_NOFILE's other name).
_FIRST_NAMES = {getattr(resource, n): n for n in sorted(dir(resource), reverse=True) if n.startswith("RLIMIT_")}
LIMITS = {name: which for which, name in _FIRST_NAMES.items()}


#: Every named signal but the two no handler can take, by number.
SIGNALS = {sig.value: sig.name for sig in signal.Signals if sig not in (signal.SIGKILL, signal.SIGSTOP)}
_GLIBC = platform.libc_ver()[0] == "glibc"


class _SigAction(ctypes.Structure):
    """glibc's struct sigaction on Linux; of sa_mask, only the kernel's 64 signals are filled in."""

    _fields_ = [
        ("handler", ctypes.c_void_p),
        ("mask", ctypes.c_uint64 * 16),
        ("flags", ctypes.c_int),
        ("restorer", ctypes.c_void_p),
    ]


@dataclass(frozen=True)
class ProcessState:
    native_threads: frozenset[int]  # threads Python did not start (a kernel's pthreads, OpenMP's pool)
    children: frozenset[int]  # child processes, running or not yet reaped
    open_files: frozenset[int] | None  # descriptors; None: none left to list them with
    timers: tuple[str, ...]  # the armed ones
    limits: tuple[tuple[str, tuple[int, int]], ...]
    handlers: tuple[tuple[str, tuple[int, int, int]], ...]  # each signal's handler, mask and flags
    blocked: frozenset[str]  # each thread's blocked-signal mask (SigBlk), each once
    affinities: frozenset[frozenset[int]]  # the CPU sets of the process's threads, each once
    nices: frozenset[int]  # ... and their nice values
    policies: frozenset[int]  # ... and their scheduling policies
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


def _children(tids: list[int]) -> frozenset[int]:
    found: set[int] = set()
    for tid in tids:
        try:  # Linux with CONFIG_PROC_CHILDREN (every distribution's); elsewhere none are seen
            found.update(int(pid) for pid in Path(f"/proc/self/task/{tid}/children").read_text().split())
        except (OSError, ValueError):
            pass
    return frozenset(found)


def _open_files() -> frozenset[int] | None:
    try:
        listed = [int(name) for name in os.listdir("/proc/self/fd")]
    except OSError as exc:  # EMFILE: every descriptor taken; else not Linux, none compared
        return None if exc.errno == errno.EMFILE else frozenset()
    still_open = set()
    for descriptor in listed:
        try:
            os.fstat(descriptor)
        except OSError:  # the listing's own descriptor, closed since
            continue
        still_open.add(descriptor)
    return frozenset(still_open)


def _handlers() -> tuple[tuple[str, tuple[int, int, int]], ...]:
    """Python's signal.getsignal() sees only Python's handlers: a kernel's sigaction() is read
    from the C library (glibc's layout: elsewhere none are compared)."""
    if not _GLIBC:
        return ()
    sigaction = ctypes.CDLL(None).sigaction
    found = []
    for number, name in SIGNALS.items():
        action = _SigAction()
        if sigaction(number, None, ctypes.byref(action)) == 0:
            found.append((name, (action.handler or 0, action.mask[0], action.flags)))
    return tuple(found)


def _blocked(tid: int) -> str:
    for line in Path(f"/proc/self/task/{tid}/status").read_text().splitlines():
        if line.startswith("SigBlk:"):
            return line.split()[1]
    return ""


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
    linux = hasattr(os, "sched_getaffinity")
    return ProcessState(
        native_threads=frozenset(tid for tid in tids if tid not in python_threads and tid != 0),
        children=_children(tids),
        open_files=_open_files(),
        timers=tuple(name for name, which in TIMERS.items() if signal.getitimer(which)[0] > 0),
        limits=tuple((name, resource.getrlimit(which)) for name, which in LIMITS.items()),
        handlers=_handlers(),
        blocked=_per_thread(_blocked, tids) if linux else frozenset(),
        affinities=_per_thread(lambda tid: frozenset(os.sched_getaffinity(tid)), tids) if linux else frozenset(),
        nices=_per_thread(lambda tid: os.getpriority(os.PRIO_PROCESS, tid), tids),
        policies=_per_thread(os.sched_getscheduler, tids) if linux else frozenset(),
        cwd=_cwd(),
        umask=umask,
    )


def _plural(count: int, noun: str) -> str:
    return f"{count} {noun}{'s' if count > 1 else ''}"


def _signal_names(mask: str) -> str:
    bits = int(mask or "0", 16)
    names = [SIGNALS.get(number, str(number)) for number in range(1, 65) if bits >> (number - 1) & 1]
    return "+".join(names) or "none"


def _policy_name(policy: int) -> str:
    names = {getattr(os, n): n for n in dir(os) if n.startswith("SCHED_") and n not in ("SCHED_RESET_ON_FORK",)}
    return names.get(policy, str(policy))


def _cpus(cpus: frozenset[int]) -> str:
    return ",".join(str(cpu) for cpu in sorted(cpus))


def describe_change(before: ProcessState, after: ProcessState) -> str | None:
    """What a request changed, as a row's note says it ("left 2 threads running, RLIMIT_CPU
    (-1, -1) -> (3, -1)"), or None.  Threads and timers count only when new; a thread's CPU
    affinity or nice value shows as a value the threads did not have before."""
    changes = []
    left = after.native_threads - before.native_threads
    if left:
        changes.append(f"left {_plural(len(left), 'thread')} running")
    children = after.children - before.children
    if children:
        changes.append(f"left {_plural(len(children), 'child process')} (pid {', '.join(map(str, sorted(children)))})")
    if after.open_files is None and before.open_files is not None:
        changes.append("left no file descriptor free")
    elif opened := (after.open_files or frozenset()) - (before.open_files or frozenset()):
        changes.append(f"left {_plural(len(opened), 'file')} open")
    armed = [name for name in after.timers if name not in before.timers]
    if armed:
        changes.append(f"left a timer armed ({', '.join(armed)})")
    old_limits = dict(before.limits)
    changes += [
        f"{name} {old_limits[name]} -> {value}" for name, value in after.limits if old_limits.get(name) != value
    ]
    old_handlers = dict(before.handlers)
    handled = [name for name, action in after.handlers if old_handlers.get(name, action) != action]
    if handled:
        changes.append(f"changed the handling of {', '.join(handled)}")
    if after.blocked and before.blocked and after.blocked != before.blocked:  # empty: /proc unreadable
        masks = [" / ".join(sorted(map(_signal_names, state.blocked))) for state in (before, after)]
        changes.append(f"blocked signals {masks[0]} -> {masks[1]}")
    if after.affinities != before.affinities:
        sets = [" / ".join(_cpus(cpus) for cpus in state.affinities) for state in (before, after)]
        changes.append(f"CPU affinity {sets[0]} -> {sets[1]}")
    if after.nices != before.nices:
        changes.append(
            f"nice {' / '.join(map(str, sorted(before.nices)))} -> {' / '.join(map(str, sorted(after.nices)))}"
        )
    if after.policies != before.policies:
        policies = [" / ".join(sorted(map(_policy_name, state.policies))) for state in (before, after)]
        changes.append(f"scheduling policy {policies[0]} -> {policies[1]}")
    if after.cwd != before.cwd:
        changes.append(f"working directory {before.cwd} -> {after.cwd or '(removed)'}")
    if after.umask != before.umask:
        changes.append(f"umask {before.umask:03o} -> {after.umask:03o}")
    return ", ".join(changes) or None
