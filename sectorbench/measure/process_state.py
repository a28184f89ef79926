"""What a kernel can change in its worker process besides the FP environment, and which the
kernels after it would inherit: threads or child processes left running, timers armed (POSIX
timers too), files left open, resource limits, signal handlers and blocked signals, the CPU
affinity, priority, scheduling policy or capabilities of any thread, the user and group ids,
the root and working directories, the umask, the scene's pages (unmapped or made unreadable);
and what it can change in its parent, the fork server, which every later worker would
inherit: its CPU affinity, priority, scheduling policy and resource limits.

The worker takes a snapshot when its scene is loaded and compares after every request that
runs a C row (server.Server.handle); a difference is the row's note, and the parent replaces
the worker before the next request (worker.Worker.ask), since not every change can be undone
(a lowered hard limit, a raised nice value) and a timer or a thread would act on whichever
kernel runs next.  The fork server compares its own state with its start-up snapshot before
each fork (measure/forkserver.py).  docs/worker.md.
"""

from __future__ import annotations

import ctypes
import errno
import functools
import mmap
import os
import platform
import resource
import signal
import threading
from dataclasses import dataclass, replace
from pathlib import Path

from ..model.scenes import SCENE_MEMFD

TIMERS = {"ITIMER_REAL": signal.ITIMER_REAL, "ITIMER_VIRTUAL": signal.ITIMER_VIRTUAL, "ITIMER_PROF": signal.ITIMER_PROF}
#: Each limit once, by its first name (RLIMIT_OFILE is RLIMIT_NOFILE's other name).
_FIRST_NAMES = {getattr(resource, n): n for n in sorted(dir(resource), reverse=True) if n.startswith("RLIMIT_")}
LIMITS = {name: which for which, name in _FIRST_NAMES.items()}


#: Every named signal but the two no handler can take, by number.
SIGNALS = {sig.value: sig.name for sig in signal.Signals if sig not in (signal.SIGKILL, signal.SIGSTOP)}
_GLIBC = platform.libc_ver()[0] == "glibc"
#: How the scene pages' mappings are named in /proc/self/maps.
_SCENE_MAPPING = f"/memfd:{SCENE_MEMFD} ".encode()


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
    #: each descriptor with the device and inode of what it points at; None: none left to list them with
    open_files: frozenset[tuple[int, int, int]] | None
    timers: tuple[str, ...]  # the armed ones
    limits: tuple[tuple[str, tuple[int, int]], ...]
    handlers: tuple[tuple[str, tuple[int, int, int]], ...]  # each signal's handler, mask and flags
    blocked: frozenset[str]  # each thread's blocked-signal mask (SigBlk), each once
    affinities: frozenset[frozenset[int]]  # the CPU sets of the process's threads, each once
    nices: frozenset[int]  # ... and their nice values
    policies: frozenset[int]  # ... and their scheduling policies
    cwd: str | None
    umask: int
    posix_timers: frozenset[str]  # timer_create()'s timers, by id (/proc/self/timers lists them)
    ids: tuple[tuple[int, int, int], tuple[int, int, int], tuple[int, ...]]  # real/effective/saved uid, gid; groups
    capabilities: frozenset[str]  # each thread's effective capabilities (CapEff), each once
    root: tuple[int, int] | None  # the root directory's device and inode (chroot); None: unreadable
    scene_pages: tuple[bytes, ...]  # (): all readable; else the scene memfd's mappings, "start-end perms"
    parent: tuple | None  # the fork server's (getppid()) affinity, nice, policy, limits; None: not read


#: What a fork does not inherit from the fork server, or that changes as it serves: its threads,
#: its children (the workers) and its descriptors (their status pipes); a worker takes its
#: working directory from the request, and the fork server's parent is the run.
_NOT_INHERITED = {
    "native_threads": frozenset(),
    "children": frozenset(),
    "open_files": frozenset(),
    "cwd": None,
    "parent": None,
}


def inherited(state: ProcessState) -> ProcessState:
    """The part of the fork server's state every worker forked from it inherits."""
    return replace(state, **_NOT_INHERITED)


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


def child_processes() -> frozenset[int]:
    """This process's children, running or not yet reaped (Linux; elsewhere none)."""
    return _children(_threads())


def _children(tids: list[int]) -> frozenset[int]:
    found: set[int] = set()
    for tid in tids:
        try:  # Linux with CONFIG_PROC_CHILDREN (every distribution's); elsewhere none are seen
            found.update(int(pid) for pid in Path(f"/proc/self/task/{tid}/children").read_text().split())
        except (OSError, ValueError):
            pass
    return frozenset(found)


def _open_files() -> frozenset[tuple[int, int, int]] | None:
    try:
        listed = [int(name) for name in os.listdir("/proc/self/fd")]
    except OSError as exc:  # EMFILE: every descriptor taken; else not Linux, none compared
        return None if exc.errno == errno.EMFILE else frozenset()
    still_open = set()
    for descriptor in listed:
        try:
            status = os.fstat(descriptor)
        except OSError:  # the listing's own descriptor, closed since
            continue
        still_open.add((descriptor, status.st_dev, status.st_ino))
    return frozenset(still_open)


def _descriptor_changes(before: frozenset | None, after: frozenset | None) -> list[str]:
    """Descriptors a request left open, closed, or pointed at something else (dup2 onto the
    worker's stdout or its channel: the next kernel's output went there)."""
    if after is None:
        return ["left no file descriptor free"] if before is not None else []
    was, now = {fd: (dev, ino) for fd, dev, ino in before or ()}, {fd: (dev, ino) for fd, dev, ino in after}
    changes = []
    if opened := now.keys() - was.keys():
        changes.append(f"left {_plural(len(opened), 'file')} open")
    if closed := sorted(was.keys() - now.keys()):
        changes.append(f"closed {_plural(len(closed), 'descriptor')} ({', '.join(map(str, closed))})")
    if moved := sorted(fd for fd in now.keys() & was.keys() if now[fd] != was[fd]):
        changes.append(f"pointed {_plural(len(moved), 'descriptor')} ({', '.join(map(str, moved))}) elsewhere")
    return changes


@functools.cache
def _libc():
    return ctypes.CDLL(None, use_errno=True)


def _handlers() -> tuple[tuple[str, tuple[int, int, int]], ...]:
    """Python's signal.getsignal() sees only Python's handlers: a kernel's sigaction() is read
    from the C library (glibc's layout: elsewhere none are compared)."""
    if not _GLIBC:
        return ()
    sigaction = _libc().sigaction
    found = []
    action = _SigAction()
    for number, name in SIGNALS.items():
        if sigaction(number, None, ctypes.byref(action)) == 0:
            found.append((name, (action.handler or 0, action.mask[0], action.flags)))
    return tuple(found)


def _status_field(status: bytes, name: bytes) -> str:
    start = status.find(b"\n" + name)
    if start < 0:
        return ""
    start += len(name) + 1
    return status[start : status.find(b"\n", start)].strip().decode()


def _thread_status(tid: int) -> tuple[str, str]:
    """The thread's blocked signals (SigBlk) and effective capabilities (CapEff), in one read."""
    with open(f"/proc/self/task/{tid}/status", "rb") as file:
        status = file.read()
    return _status_field(status, b"SigBlk:"), _status_field(status, b"CapEff:")


def _posix_timers() -> frozenset[str]:
    try:  # Linux with CONFIG_CHECKPOINT_RESTORE (every distribution's); elsewhere none are seen
        with open("/proc/self/timers", "rb") as file:
            listing = file.read()
    except OSError:
        return frozenset()
    return frozenset(line[3:].strip().decode() for line in listing.splitlines() if line.startswith(b"ID:"))


class _IoVec(ctypes.Structure):
    _fields_ = [("base", ctypes.c_void_p), ("length", ctypes.c_size_t)]


#: iovecs one process_vm_readv call takes at most (IOV_MAX).
_IOV_MAX = 1024


class ScenePages:
    """The scene's pages (page-aligned ranges, model/scenes.read_only_copy), checked readable:
    a kernel that unmaps them or takes their PROT_READ crashes whichever kernel reads the scene
    next.  Reading /proc/self/maps costs 0.15-0.6 ms in a worker (more than the rest of a
    snapshot), so one byte of each page is read through process_vm_readv, which fails at the
    first page that is not mapped readable instead of faulting (~1 us for a few hundred pages);
    only then are the memfd's lines of /proc/self/maps read, to say what became of them."""

    def __init__(self, ranges: list[tuple[int, int]]):
        page = mmap.PAGESIZE
        starts = [start for address, length in ranges for start in range(address, address + length, page)]
        self._chunks = []
        for first in range(0, len(starts), _IOV_MAX):
            chunk = starts[first : first + _IOV_MAX]
            remote = (_IoVec * len(chunk))(*((start, 1) for start in chunk))
            buffer = ctypes.create_string_buffer(len(chunk))
            local = _IoVec(ctypes.cast(buffer, ctypes.c_void_p), len(chunk))
            self._chunks.append((remote, local, buffer))

    def state(self) -> tuple[bytes, ...]:
        """(): every page readable (or no way to tell); else the memfd's mappings, "start-end perms"."""
        read = getattr(_libc(), "process_vm_readv", None)
        if read is None:
            return ()
        read.restype = ctypes.c_ssize_t
        pid = os.getpid()
        for remote, local, _ in self._chunks:
            done = read(pid, ctypes.byref(local), 1, remote, len(remote), 0)
            if 0 <= done < len(remote) or done < 0 and ctypes.get_errno() == errno.EFAULT:
                return _scene_mappings() or (b"none",)
        return ()


def _scene_mappings() -> tuple[bytes, ...]:
    """The scene memfd's mappings as /proc/self/maps lists them ("start-end perms")."""
    try:
        with open("/proc/self/maps", "rb") as file:
            maps = file.read()
    except OSError:
        return ()
    found = []
    end = maps.find(_SCENE_MAPPING)
    while end >= 0:
        start = maps.rfind(b"\n", 0, end) + 1
        found.append(b" ".join(maps[start:end].split()[:2]))
        end = maps.find(_SCENE_MAPPING, end + 1)
    return tuple(found)


def _root() -> tuple[int, int] | None:
    try:
        about = os.stat("/")
    except OSError:
        return None
    return about.st_dev, about.st_ino


def _ids() -> tuple:
    if not hasattr(os, "getresuid"):
        return (os.getuid(), os.geteuid(), os.getuid()), (os.getgid(), os.getegid(), os.getgid()), ()
    return os.getresuid(), os.getresgid(), tuple(sorted(os.getgroups()))


def _parent() -> tuple | None:
    """What a kernel can change in its parent, the fork server, through getppid() (affinity,
    nice, policy, limits: sched_setaffinity, setpriority, sched_setscheduler, prlimit), which
    every worker forked after it would inherit, and whether it is being ended (kill(getppid(),
    SIGKILL)); None where it cannot be read."""
    parent = os.getppid()
    try:
        return (
            frozenset(os.sched_getaffinity(parent)),
            os.getpriority(os.PRIO_PROCESS, parent),
            os.sched_getscheduler(parent),
            tuple(resource.prlimit(parent, which) for which in LIMITS.values()),
            ending(parent),
        )
    except (OSError, AttributeError):
        return None


#: The kernel's task flag (/proc/PID/stat, field 9) of a process past the start of its exit.
PF_EXITING = 0x4
#: SIGKILL's bit in /proc/PID/status's pending-signal masks.
SIGKILL_PENDING = 1 << (signal.SIGKILL - 1)


def ending(pid: int) -> str | None:
    """How process `pid` is ending ("SIGKILL pending", "exiting", "a zombie"), None if it is not.
    A kernel that SIGKILLs its parent, the fork server, returns before the fork server has died,
    and its worker dies only then (PR_SET_PDEATHSIG): read after the call, this is what tells that
    worker's next kernel from the one that ended it (a loaded machine let the next one crash)."""
    try:
        state, flags = stat_fields(pid, 0, 6)
        status = Path(f"/proc/{pid}/status").read_text().splitlines()
    except (OSError, IndexError):  # gone (then getppid() has changed too), or not Linux
        return None
    if state in ("Z", "X"):
        return "a zombie"
    if int(flags) & PF_EXITING:
        return "exiting"
    pending = 0
    for line in status:
        if line.startswith(("SigPnd:", "ShdPnd:")):
            pending |= int(line.split()[1], 16)
    return "SIGKILL pending" if pending & SIGKILL_PENDING else None


def stat_fields(pid: int, *fields: int) -> list[str]:
    """Fields of /proc/PID/stat after the command's name (which may hold spaces), counted from 0
    (0: the state); OSError where there is no such file, IndexError where it is not one."""
    after_name = Path(f"/proc/{pid}/stat").read_text().rsplit(")", 1)[1].split()
    return [after_name[field] for field in fields]


def _per_thread(read, tids: list[int]) -> frozenset:
    found = set()
    for tid in tids:
        try:
            found.add(read(tid))
        except OSError:  # ended meanwhile
            pass
    return frozenset(found)


def snapshot(parent: bool = True, scene: ScenePages | None = None) -> ProcessState:
    """The process's state; with `parent`, its parent's too (a worker's: the fork server's);
    with `scene`, whether the scene's pages are still readable."""
    tids = _threads()
    python_threads = {t.native_id for t in threading.enumerate()}
    umask = os.umask(0o022)
    os.umask(umask)
    linux = hasattr(os, "sched_getaffinity")
    statuses = _per_thread(_thread_status, tids) if linux else frozenset()
    return ProcessState(
        native_threads=frozenset(tid for tid in tids if tid not in python_threads and tid != 0),
        children=_children(tids),
        open_files=_open_files(),
        timers=tuple(name for name, which in TIMERS.items() if signal.getitimer(which)[0] > 0),
        limits=tuple((name, resource.getrlimit(which)) for name, which in LIMITS.items()),
        handlers=_handlers(),
        blocked=frozenset(blocked for blocked, _ in statuses),
        affinities=_per_thread(lambda tid: frozenset(os.sched_getaffinity(tid)), tids) if linux else frozenset(),
        nices=_per_thread(lambda tid: os.getpriority(os.PRIO_PROCESS, tid), tids),
        policies=_per_thread(os.sched_getscheduler, tids) if linux else frozenset(),
        cwd=_cwd(),
        umask=umask,
        posix_timers=_posix_timers(),
        ids=_ids(),
        capabilities=frozenset(capabilities for _, capabilities in statuses),
        root=_root(),
        scene_pages=scene.state() if scene is not None else (),
        parent=_parent() if parent and linux else None,
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
    changes += _descriptor_changes(before.open_files, after.open_files)
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
    created = after.posix_timers - before.posix_timers
    if created:
        changes.append(f"left {_plural(len(created), 'POSIX timer')} (timer_create)")
    for (name, old), new in zip(zip(("uid", "gid", "groups"), before.ids), after.ids):
        if old != new:
            changes.append(f"{name} {_ids_text(old)} -> {_ids_text(new)}")
    if after.capabilities and before.capabilities and after.capabilities != before.capabilities:
        sets = [" / ".join(sorted(state.capabilities)) for state in (before, after)]
        changes.append(f"effective capabilities {sets[0]} -> {sets[1]}")
    if after.root != before.root:
        changes.append("changed its root directory (chroot)")
    if after.scene_pages != before.scene_pages:
        now = ", ".join(mapping.decode() for mapping in after.scene_pages) or "readable again"
        changes.append(f"unmapped or protected the scene's pages (its mappings now: {now})")
    if after.parent != before.parent and before.parent is not None:
        changes.append(
            f"changed its parent, the fork server (getppid()): {_parent_change(before.parent, after.parent)}"
        )
    return ", ".join(changes) or None


def _ids_text(ids: tuple[int, ...]) -> str:
    return "/".join(map(str, ids)) or "none"


def _parent_change(before: tuple, after: tuple | None) -> str:
    if after is None:
        return "no longer readable"
    if after[4]:  # what else differs is the dying process's
        return f"ended it ({after[4]})"
    changes = []
    if after[0] != before[0]:
        changes.append(f"CPU affinity {_cpus(before[0])} -> {_cpus(after[0])}")
    if after[1] != before[1]:
        changes.append(f"nice {before[1]} -> {after[1]}")
    if after[2] != before[2]:
        changes.append(f"scheduling policy {_policy_name(before[2])} -> {_policy_name(after[2])}")
    changes += [f"{name} {old} -> {new}" for name, old, new in zip(LIMITS, before[3], after[3]) if old != new]
    return ", ".join(changes)
