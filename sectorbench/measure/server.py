"""The worker process: loads one build's library and runs its timed loops on request.

Forked by the fork server (measure/forkserver.py) for worker.Worker, which runs
main([LIBRARY, "--channel", FD, "--answers", FD2, "--parent", PID, ("--peers"), ("--reference",
REFERENCE)]) in the new process: it reads typed requests (measure/messages.py) from the private
channel FD and answers each there, verify's answers as .npy in the file FD2 (the parent's).
REFERENCE, given for a build with --source files, is the same build without them: the FP
environment its loading leaves is the build's.  Its stdout and stderr are files the parent
reads for the rows' notes: whatever a kernel prints is never taken for a reply.  Whatever a
kernel does to this process (FTZ/DAZ from a fast-math library, a crash, a hang) stays here:
the parent kills it at a deadline, and it dies with the fork server, which dies with the
parent (PR_SET_PDEATHSIG).  It creates, changes and removes no file (refuse_file_writes).
See docs/worker.md.
"""

from __future__ import annotations

import contextlib
import ctypes
import errno
import io
import math
import mmap
import os
import resource
import signal
import sys
import threading
import time
from concurrent.futures import ThreadPoolExecutor
from dataclasses import replace
from multiprocessing.connection import Connection
from pathlib import Path

import numpy as np

from ..model.kernels import disabled_features
from ..native.loader import interface
from . import messages, process_state
from .loops import BroadphaseLoop, CRowLoop, PeerLoop, TimedLoop, WroteOutsideItsAnswers
from .worker import LIBRARY_REFUSED_STATUS, load_scene

#: prctl(2) option: the signal this process gets when its parent dies.
PR_SET_PDEATHSIG = 1
#: prctl(2) option: orphans among this process's descendants become its children.
PR_SET_CHILD_SUBREAPER = 36
#: prctl(2) options and mode of a seccomp filter (refuse_signals_beyond_group).
PR_SET_NO_NEW_PRIVS = 38
PR_SET_SECCOMP = 22
SECCOMP_MODE_FILTER = 2
#: Cycles of one 32-bit `imul` in sb_dependent_multiplies' chain: its latency on every x86-64
#: core since Nehalem (Intel) and Zen (AMD), where no renamer can fold it.
MULTIPLY_CYCLES = 3
#: Names of sb_fpenv.rounding's codes.
ROUNDING = {0: "to nearest", 1: "downward", 2: "upward", 3: "toward zero", -1: "unknown"}
#: Bits of sb_fpenv.traps.
TRAPS = {1: "invalid", 2: "divide-by-zero", 4: "overflow", 8: "underflow", 16: "inexact"}


def fp_environment() -> dict:
    """Whether this process flushes subnormal results / treats subnormal inputs as zero."""
    return {"denormals_are_zero": 5e-324 + 0.0 == 0.0, "flush_to_zero": 2.2250738585072014e-308 / 2 == 0.0}


def die_with_parent(parent_pid: int) -> None:
    """SIGKILL this process when its parent dies (Linux), and exit now if it already has."""
    try:
        libc = ctypes.CDLL(None, use_errno=True)
        libc.prctl(PR_SET_PDEATHSIG, signal.SIGKILL, 0, 0, 0)
    except (OSError, AttributeError):  # not Linux: the parent's process-group kill still applies
        pass
    if os.getppid() != parent_pid:  # the parent died before prctl took effect
        os._exit(1)


def adopt_orphans() -> None:
    """Become the parent of every descendant orphaned under this process (Linux's child
    subreaper), not init: a kernel's child that left the process group (setsid, a daemon's
    double fork) stays where the worker's snapshot sees it and the fork server ends it."""
    with contextlib.suppress(OSError, AttributeError):  # not Linux: such a child escapes
        ctypes.CDLL(None, use_errno=True).prctl(PR_SET_CHILD_SUBREAPER, 1, 0, 0, 0)


#: x86-64 system call numbers that reach another process (kill and its relatives by pid), and
#: those that reach one without a pid to check (a pidfd, a tracee, another's memory).
SIGNALS_BY_PID = {"kill": 62, "tkill": 200, "tgkill": 234, "rt_sigqueueinfo": 129, "rt_tgsigqueueinfo": 297}
REACHES_ANY = {"pidfd_send_signal": 424, "ptrace": 101, "process_vm_writev": 311}
AUDIT_ARCH_X86_64 = 0xC000003E
#: x32 system calls (another numbering, same kernel): refused rather than told apart.
X32_SYSCALL_BIT = 0x40000000


def no_core_dumps() -> None:
    """A crashing kernel dumps no core: one that raised its soft limit to the hard one and
    aborted left a 28 MB `core` in the directory the user ran sectorbench in (core_pattern
    "core").  The hard limit is 0 too, so no kernel can raise it again."""
    with contextlib.suppress(ValueError, OSError):
        resource.setrlimit(resource.RLIMIT_CORE, (0, 0))


#: /proc/PID/oom_score_adj's highest value: the process the kernel's OOM killer ends first.
OOM_FIRST = 1000


def first_out_of_memory() -> None:
    """A kernel that takes more memory than the machine has ends its own worker, not the user's
    sectorbench or another process of theirs: the OOM killer chooses by memory held, adjusted
    by this (an unprivileged process may raise its own), and the worker's children inherit it."""
    with contextlib.suppress(OSError):
        Path("/proc/self/oom_score_adj").write_text(f"{OOM_FIRST}\n")


def _own_signals_filter(pid: int) -> list[tuple[int, int, int, int]]:
    """The classic BPF program of `refuse_signals_beyond_group` as (code, jt, jf, k) rows."""
    load, jeq, jge, ret = 0x20, 0x15, 0x35, 0x06  # BPF_LD|W|ABS, BPF_JMP|JEQ|K, BPF_JMP|JGE|K, BPF_RET|K
    allow, refuse = 0x7FFF0000, 0x00050000 | 1  # SECCOMP_RET_ALLOW, SECCOMP_RET_ERRNO | EPERM
    nr, arch, arg0, arg1 = 0, 4, 16, 24  # struct seccomp_data: the low halves of args[0], args[1]
    own, group = pid & 0xFFFFFFFF, -pid & 0xFFFFFFFF
    by_pid, anyone = list(SIGNALS_BY_PID.values()), list(REACHES_ANY.values())
    # Laid out backwards from the two returns so that every jump is a forward offset.
    tail = [
        (load, 0, 0, arg0),  # BY_PID: kill's pid, or the thread group's
        (jeq, 5, 0, own),
        (jeq, 4, 0, 0),  # kill(0, ...): its own process group; for the others no process is 0
        (jeq, 3, 0, group),  # kill(-pid, ...): its group by id (the worker leads it)
        (load, 0, 0, arg1),
        (jeq, 1, 0, 0),  # kill(pid, 0) asks whether pid exists and sends nothing
        (ret, 0, 0, refuse),
        (ret, 0, 0, allow),
    ]
    head = [(load, 0, 0, arch), (jeq, 1, 0, AUDIT_ARCH_X86_64), (ret, 0, 0, refuse), (load, 0, 0, nr)]
    head.append((jge, 0, 1, X32_SYSCALL_BIT))
    head.append((ret, 0, 0, refuse))
    checks = len(by_pid) + len(anyone)
    for i, number in enumerate(by_pid):  # to BY_PID, past the rest of the checks and the allow
        head.append((jeq, checks - i - 1 + 2, 0, number))
    for i, number in enumerate(anyone):  # to the refuse right after the allow
        head.append((jeq, len(anyone) - i - 1 + 1, 0, number))
    return [*head, (ret, 0, 0, allow), (ret, 0, 0, refuse), *tail]


def refuse_signals_beyond_group() -> str | None:
    """Let the kernels run in this process signal only it and its process group: kill() and its
    relatives of any other pid fail with EPERM, and so do pidfd_send_signal, ptrace and
    process_vm_writev (a seccomp filter, inherited by every child).  A kernel that stopped the
    run's own process (SIGSTOP to the fork server's parent) hung it for ever, and kill(-1, ...)
    reaches every process the user owns.  Linux x86-64 only; returns why not where it is not."""
    # a 32-bit or x32 process on an x86-64 kernel makes other system calls: the filter would refuse them all
    if not sys.platform.startswith("linux") or os.uname().machine != "x86_64" or sys.maxsize < 2**63 - 1:
        return "only for 64-bit processes on Linux x86-64"

    class SockFilter(ctypes.Structure):
        _fields_ = [("code", ctypes.c_uint16), ("jt", ctypes.c_uint8), ("jf", ctypes.c_uint8), ("k", ctypes.c_uint32)]

    class SockFprog(ctypes.Structure):
        _fields_ = [("len", ctypes.c_uint16), ("filter", ctypes.POINTER(SockFilter))]

    rows = _own_signals_filter(os.getpid())
    program = (SockFilter * len(rows))(*(SockFilter(*row) for row in rows))
    prog = SockFprog(len(rows), program)
    libc = ctypes.CDLL(None, use_errno=True)
    libc.prctl.argtypes = [ctypes.c_int, ctypes.c_ulong, ctypes.c_void_p, ctypes.c_ulong, ctypes.c_ulong]
    # no new privileges: what an unprivileged process needs to install a filter (a setuid
    # program a kernel runs gains none)
    if (
        libc.prctl(PR_SET_NO_NEW_PRIVS, 1, None, 0, 0) != 0
        or libc.prctl(PR_SET_SECCOMP, SECCOMP_MODE_FILTER, ctypes.addressof(prog), 0, 0) != 0
    ):
        return f"seccomp: {os.strerror(ctypes.get_errno())}"
    return None


#: landlock(7)'s system calls (one number on every architecture) and what create_ruleset's
#: flag asks: the ABI version this kernel has.
SYS_LANDLOCK_CREATE_RULESET, SYS_LANDLOCK_ADD_RULE, SYS_LANDLOCK_RESTRICT_SELF = 444, 445, 446
LANDLOCK_CREATE_RULESET_VERSION = 1
LANDLOCK_RULE_PATH_BENEATH = 1
#: Landlock's rights to write a file (WRITE_FILE), and with it every right of ABI 1 that creates
#: or removes one (REMOVE_DIR .. MAKE_SYM, bits 4-12); then ABI 2's REFER, ABI 3's TRUNCATE.
LANDLOCK_WRITE_FILE = 1 << 1
LANDLOCK_WRITES = LANDLOCK_WRITE_FILE | sum(1 << bit for bit in range(4, 13))
LANDLOCK_REFER, LANDLOCK_TRUNCATE = 1 << 13, 1 << 14


class _LandlockRuleset(ctypes.Structure):
    _fields_ = [("handled_access_fs", ctypes.c_uint64)]


class _LandlockPathBeneath(ctypes.Structure):
    _pack_ = 1  # the kernel's struct is packed: 12 bytes
    _fields_ = [("allowed_access", ctypes.c_uint64), ("parent_fd", ctypes.c_int32)]


def landlock_abi() -> int:
    """This kernel's Landlock ABI version; 0 where it has none, or has it disabled."""
    libc = ctypes.CDLL(None, use_errno=True)
    version = ctypes.c_uint32(LANDLOCK_CREATE_RULESET_VERSION)
    return max(0, libc.syscall(SYS_LANDLOCK_CREATE_RULESET, None, ctypes.c_size_t(0), version))


def refuse_file_writes() -> str | None:
    """Let the kernels run in this process (and every process they start) create, change or
    remove no file but /dev/null (Landlock; reading is unchanged, and so are the descriptors
    already open: the worker's stdout, stderr and answers file).  A kernel removed the run's
    scratch scenes (every row crashed, verify ended as a whole), rewrote verify's scene under the
    other kernels (correct kernels FAILed, unexplained), took the --json path before the run
    could, replaced the build cache's libraries with its own (later runs without --source loaded
    it), and wrote into the run's memory or terminal through /proc/PID/mem and /proc/PID/fd/1.
    Returns why not where it is not (a kernel without Landlock, or with it disabled)."""
    abi = landlock_abi()
    if not abi:
        return "no Landlock in this kernel"
    libc = ctypes.CDLL(None, use_errno=True)
    syscall = libc.syscall
    truncate = LANDLOCK_TRUNCATE if abi >= 3 else 0
    handled = _LandlockRuleset(LANDLOCK_WRITES | (LANDLOCK_REFER if abi >= 2 else 0) | truncate)
    ruleset = syscall(SYS_LANDLOCK_CREATE_RULESET, ctypes.byref(handled), ctypes.c_size_t(ctypes.sizeof(handled)), 0)
    if ruleset < 0:
        return f"Landlock: {os.strerror(ctypes.get_errno())}"
    try:
        null = os.open(os.devnull, os.O_PATH | os.O_CLOEXEC)
        try:  # a kernel may still send its output to /dev/null (the snapshot names the dup2)
            rule = _LandlockPathBeneath(LANDLOCK_WRITE_FILE | truncate, null)
            if syscall(SYS_LANDLOCK_ADD_RULE, ruleset, LANDLOCK_RULE_PATH_BENEATH, ctypes.byref(rule), 0) != 0:
                return f"Landlock: {os.strerror(ctypes.get_errno())}"
        finally:
            os.close(null)
        # what an unprivileged process needs to restrict itself (set by the seccomp filter too)
        if libc.prctl(PR_SET_NO_NEW_PRIVS, 1, 0, 0, 0) != 0 or syscall(SYS_LANDLOCK_RESTRICT_SELF, ruleset, 0) != 0:
            return f"Landlock: {os.strerror(ctypes.get_errno())}"
    finally:
        os.close(ruleset)
    return None


#: What lets an ordinary user count their own processes' instructions and cycles (perf_event_open(2)).
PERF_EVENT_PARANOID = Path("/proc/sys/kernel/perf_event_paranoid")


def counters_unavailable(error: int) -> str:
    """Why the hardware counters cannot be read, in perf_event_open's words, and the setting
    that decides it when the kernel refused (Debian's kernels refuse users at 3: "Permission
    denied" alone did not say what to change)."""
    reason = f"perf_event_open: {os.strerror(error)}"
    if error in (errno.EACCES, errno.EPERM):
        try:
            level = PERF_EVENT_PARANOID.read_text().strip()
        except OSError:
            return reason
        reason += f" (kernel.perf_event_paranoid is {level}; 2 or lower lets a user count their own processes)"
    return reason


class LoaderRefused(Exception):
    """The dynamic loader refused a library, in its own words."""


def _dlopen(ffi, path: str, flags: int):
    """ffi.dlopen, failing in the dynamic loader's words ("undefined symbol: lib_scale"): where
    the loader refuses a library, cffi asks ctypes.util.find_library, which writes scratch files
    that the worker's sandbox refuses, and every failed load was said as "No usable temporary
    directory found"."""
    try:
        return ffi.dlopen(path, flags)
    except OSError:
        try:
            ctypes.CDLL(path, mode=flags)  # the loader's own error (nothing was loaded: none again)
        except OSError as exc:
            said = str(exc).removeprefix(f"{path}: ")  # the cache's path says nothing to the user
            raise LoaderRefused(f"the dynamic loader refused the build's library: {said}") from None
        raise


class Server:
    """One build's timed loops (its C rows and its families' broadphases), or, with peers=True,
    the families' peers (the library then only serves the clock and counters: a plain -O2
    build, never fast-math).  `reference`: the library of the same build without its --source
    files, loaded first (and closed) to read the build's FP environment from."""

    def __init__(self, library: str, peers: bool = False, reference: str | None = None, answers_fd: int = -1):
        from ..families import all_families

        self.pid = os.getpid()
        self.answers_fd = answers_fd
        self.ffi = interface()
        self.fpenv = self.ffi.new("sb_fpenv *")
        #: How loading the library changed the build's FP environment (None: it did not); restored.
        self.fp_change_at_load: str | None = None
        if reference is not None:
            # The build's FP environment is the one its flags make at load (a gcc fast-math
            # library's crtfastmath constructor sets FTZ/DAZ), read from the same build without
            # the --source files: their constructors run in the library's dlopen, before any
            # kernel, and cannot be told apart from crtfastmath's there.
            probe = _dlopen(self.ffi, reference, self.ffi.RTLD_NOW)
            probe.sb_fpenv_save(self.fpenv)
            self.ffi.dlclose(probe)
        before = process_state.snapshot() if reference is not None else None
        # never unmapped, not even at exit: the broadphase keeps threads parked in it (Engine)
        self.lib = _dlopen(self.ffi, library, self.ffi.RTLD_NOW | self.ffi.RTLD_NODELETE)
        if before is not None:
            _refuse_a_changed_process(before)
        if reference is None:  # no --source file: whatever the library left at load is the build's
            self.lib.sb_fpenv_save(self.fpenv)
        else:
            self.fp_change_at_load = self._fp_change()
            self.lib.sb_fpenv_restore(self.fpenv)  # every kernel starts from the build's environment
        self.disabled = disabled_features()
        self.loops: dict[str, TimedLoop] = {}
        #: rows whose name an earlier row of the build already has ("name (/a/first.c:L and /b/second.c:L)")
        self.name_clashes: list[str] = []
        if peers:
            for peer in (p for family in all_families() for p in family.peers()):
                self.loops[peer.name] = PeerLoop(self, peer)
        else:
            count = self.ffi.new("size_t *")
            table = self.lib.sb_kernel_table(count)
            rows = sorted((table[i] for i in range(count[0])), key=lambda r: (self.ffi.string(r.source), r.line))
            defined_at: dict[str, str] = {}  # whole paths: two files of one name in two folders clash too
            # A broadphase is found by name in self.loops (a C row of its name stood in for it: the
            # broadphase row ran the C kernel), a peer by name in --kernels (the peer ran in the C
            # row's place): their names are taken, as a built-in kernel's is.
            families = all_families()
            broadphases = [(family, name) for family in families for name in family.broadphases() if name != "none"]
            defined_at |= {name: f"the {name} broadphase" for _, name in broadphases}
            defined_at |= {peer.name: f"the {peer.name} peer" for family in families for peer in family.peers()}
            for row in rows:
                loop = CRowLoop(self, row)
                here = f"{self.ffi.string(row.source).decode(errors='replace')}:{row.line}"
                if loop.kernel.name in defined_at:  # a --source row named as another: said, not shadowed
                    self.name_clashes.append(f"{loop.kernel.name} ({defined_at[loop.kernel.name]} and {here})")
                    continue
                defined_at[loop.kernel.name] = here
                self.loops[loop.kernel.name] = self._checked(loop)
            for family, name in broadphases:
                self.loops[name] = BroadphaseLoop(self, family, name)
        self.scene = None
        self._scene_pages: process_state.ScenePages | None = None
        self._indexes: dict[str, tuple] = {}  # kernel -> (loop, prepared index, build seconds, bytes)
        self._c_scenes: dict[tuple, list] = {}
        #: Every sb_scene handed out for the current scene, with its bytes as they were made.
        self._handed_out: list[tuple] = []
        self._keep_alive: list = []
        self._pools: dict[int, ThreadPoolExecutor] = {}
        self._thread_state = threading.local()
        self._request = 0
        self.counters_error = self.lib.sb_counters_open()

    def _checked(self, loop: CRowLoop) -> CRowLoop:
        """The row, marked not runnable when its name cannot be selected or its family refuses
        it (unknown arrays, family)."""
        from ..families import get
        from ..model.kernels import name_problem

        kernel = loop.kernel
        try:
            problem = name_problem(kernel.name) or get(kernel.family).check_kernel(kernel)
        except Exception as exc:  # an unknown family: the row cannot run, the others can
            problem = str(exc)
        if problem and kernel.runnable:
            loop.kernel = replace(kernel, skip_reason=f"row error: {problem}")
        return loop

    def family(self):
        from ..families import get

        return get(self.scene.family)

    def _loop(self, name: str) -> TimedLoop:
        loop = self.loops.get(name)
        if loop is None:
            raise KeyError(f"no kernel {name!r} in this build")
        if not loop.kernel.runnable:
            raise RuntimeError(f"kernel {name} is not runnable here: {loop.kernel.skip_reason}")
        if self.scene is None:
            raise RuntimeError("no scene loaded")
        return loop

    def _timed_loop(self, ref: messages.LoopRef) -> TimedLoop:
        loop = self._loop(ref.kernel)
        if not ref.noop:
            return loop
        twin = loop.twin()
        if twin is None:
            raise ValueError(f"{ref.kernel} has no NoOperation loop: {loop.kernel.noop_reason}")
        return twin

    # ---------------------------------------------------------------- scenes as C sees them

    def c_scenes(self, loop: CRowLoop, parts: list[tuple[int, int]]) -> list:
        """The scene as the row reads it (its shape arrays in the order of its `takes`), as one
        sb_scene per part [begin, end) of the shapes; a prepared row's index is built once."""
        kernel = loop.kernel
        key = (kernel.takes, tuple(parts), kernel.name if loop.prepared else None)
        if key not in self._c_scenes:
            scene = self.scene
            made = []
            for begin, end in parts:
                c_scene = self.ffi.new("sb_scene *")
                c_scene.n_shapes = scene.n_shapes
                c_scene.n_points = scene.n_points
                c_scene.stride = scene.stride
                c_scene.shape_begin, c_scene.shape_end = begin, end
                c_scene.never = float("inf")  # loaded at run time, so no compiler can fold the NoOperation
                for k, name in enumerate(scene.point_arrays):
                    c_scene.point[k] = self._pointer(scene.arrays[name])
                for k, name in enumerate(kernel.takes):
                    c_scene.shape[k] = self._pointer(scene.arrays[name])
                for k, name in enumerate(scene.extra):
                    c_scene.extra[k] = self._pointer(scene.extra[name], "char[]")
                self._keep_alive.append(c_scene)
                made.append(c_scene)
            if loop.prepared:
                if kernel.name not in self._indexes:
                    self._indexes[kernel.name] = (loop, *loop.prepare(made[0]))
                for c_scene in made:
                    c_scene.prepared = self._indexes[kernel.name][1]
            self._c_scenes[key] = made
            self._handed_out += [(c_scene, bytes(self.ffi.buffer(c_scene))) for c_scene in made]
        return self._c_scenes[key]

    def _scene_writes(self) -> str | None:
        """What a kernel wrote into the sb_scene structs it was handed (its pointer's const cast
        away: `s->n_points /= 2`), each restored at once, or None.  One struct serves every row of
        a loop shape and their NoOperation twins: a change halved every later row's hits, or
        made every NoOperation count.  ~1 us for the few dozen structs of a scene."""
        changes = []
        for c_scene, made in self._handed_out:
            now = self.ffi.buffer(c_scene)
            if now[:] != made:
                was = self.ffi.new("sb_scene *")
                self.ffi.buffer(was)[:] = made
                changes += [_field_change(name, was, c_scene) for name in SCENE_FIELDS if _differs(name, was, c_scene)]
                now[:] = made
        return ", ".join(dict.fromkeys(changes)) or None

    def index_of(self, name: str) -> tuple[float, int | None] | None:
        """(build seconds, bytes) of the kernel's prepared index on the current scene, if built."""
        index = self._indexes.get(name)
        return None if index is None else (index[2], index[3])

    def _pointer(self, array, ctype: str = "float[]"):
        pointer = self.ffi.from_buffer(ctype, array)
        self._keep_alive.append(pointer)
        return pointer

    def _release_indexes(self) -> None:
        """What the parent did not release kernel by kernel (worker.Worker.use_scene): at load."""
        for loop, index, _, _ in self._indexes.values():
            loop.release(index)
        self._indexes = {}

    # ---------------------------------------------------------------- the FP environment

    def _fp_change(self) -> str | None:
        """How the calling thread's FP environment differs from the build's, or None."""
        if not self.lib.sb_fpenv_changed(self.fpenv):
            return None
        now = self.ffi.new("sb_fpenv *")
        self.lib.sb_fpenv_save(now)
        return describe_fp_change(self.fpenv, now)

    def _guarded(self, function, changes: list):
        """`function` for pool threads: each thread starts the request from the build's FP
        environment, and a thread a kernel left changed is noted and restored at once."""
        state, request = self._thread_state, self._request

        def guarded(part):
            if getattr(state, "request", None) != request:
                self.lib.sb_fpenv_restore(self.fpenv)
                state.request = request
            result = function(part)
            if self.lib.sb_fpenv_changed(self.fpenv):
                changes.append(self._fp_change())
                self.lib.sb_fpenv_restore(self.fpenv)
            return result

        return guarded

    # ---------------------------------------------------------------- timing

    def time(self, function, parts: list, calls: int) -> messages.Timed:
        """Seconds per call and the hits, over `calls` calls; with several parts, one thread
        per part (cffi releases the GIL around each call), all joined per call."""
        pool = self.pool(len(parts)) if len(parts) > 1 else None
        changes: list[str] = []
        if pool is not None:
            function = self._guarded(function, changes)
        self.lib.sb_fpenv_restore(self.fpenv)
        cycles0, instructions0 = self._counters()
        # Every call's count is seen, not the last one's alone: a kernel wrong on its second call
        # (or on every other one) was timed and shown as agreeing when each sample's last call was
        # right.  Its extremes are kept, the counts farthest off (two comparisons a call, which
        # its NoOperation twin pays alike; a set of every count would grow with the calls).
        lowest, highest = math.inf, -math.inf
        start = time.perf_counter_ns()
        for _ in range(calls):
            if pool is None:
                hits = function(parts[0])
            else:
                hits = sum(pool.map(function, parts))
            if hits < lowest:
                lowest = hits
            if hits > highest:
                highest = hits
        elapsed = time.perf_counter_ns() - start
        cycles1, instructions1 = self._counters()
        change = self._fp_change()
        self.lib.sb_fpenv_restore(self.fpenv)
        counted = self.counters_error == 0 and pool is None
        return messages.Timed(
            seconds=elapsed / 1e9 / calls,
            hits=int(hits),
            calls=calls,
            hits_seen=sorted({int(lowest), int(highest)} - {int(hits)}),
            cycles=(cycles1 - cycles0) / calls if counted else None,
            instructions=(instructions1 - instructions0) / calls if counted else None,
            fp_change=change or (changes[0] if changes else None),
        )

    def _counters(self) -> tuple[int, int]:
        cycles, instructions = self.ffi.new("uint64_t *"), self.ffi.new("uint64_t *")
        self.lib.sb_counters_read(cycles, instructions)
        return cycles[0], instructions[0]

    def pool(self, threads: int) -> ThreadPoolExecutor:
        if threads not in self._pools:
            self._pools[threads] = ThreadPoolExecutor(threads, thread_name_prefix="sectorbench")
        return self._pools[threads]

    # ---------------------------------------------------------------- requests

    def describe(self, request: messages.Describe) -> messages.Described:
        return messages.Described(
            kernels=[loop.kernel.to_dict() for loop in self.loops.values()],
            fp_environment=fp_environment_of(self.fpenv),
            fp_change_at_load=self.fp_change_at_load,
            counters={
                "available": self.counters_error == 0,
                "reason": None if self.counters_error == 0 else counters_unavailable(self.counters_error),
            },
            cpus=len(os.sched_getaffinity(0)) if hasattr(os, "sched_getaffinity") else os.cpu_count(),
            cpu_features=[f for f in self.ffi.string(self.lib.sb_cpu_features()).decode().split(",") if f],
            name_clashes=self.name_clashes,
        )

    def load(self, request: messages.LoadScene) -> messages.SceneLoaded:
        self._release_indexes()
        self.scene = load_scene(Path(request.path))
        self._c_scenes, self._keep_alive, self._handed_out = {}, [self.scene], []
        arrays = [*self.scene.arrays.values(), *self.scene.extra.values()]
        page = mmap.PAGESIZE
        self._scene_pages = process_state.ScenePages(
            [(a.ctypes.data & -page, a.ctypes.data + a.nbytes - (a.ctypes.data & -page)) for a in arrays if a.nbytes]
        )
        return messages.SceneLoaded(tests=self.scene.tests)

    def release(self, request: messages.Release) -> messages.Released:
        """The kernel's prepared index on the current scene, released in a request of its own
        (charged to the kernel: a .release() that crashes is its row's crash, not the next load's)."""
        index = self._indexes.pop(request.kernel, None)
        if index is not None:
            index[0].release(index[1])
        return messages.Released(released=index is not None)

    def calibrate(self, request: messages.Calibrate) -> messages.Timed:
        return self._timed_loop(request.loop).calibrate(request.loop, request.min_time_s)

    def sample(self, request: messages.Sample) -> messages.Timed:
        return self._timed_loop(request.loop).run(request.loop, request.calls)

    def evaluate(self, request: messages.Evaluate) -> messages.Evaluated:
        loop = self._loop(request.kernel)
        if request.count_mode is not None and not isinstance(loop, CRowLoop):
            raise ValueError(f"{request.kernel} has no count loops of a C row to count rows with")
        self.lib.sb_fpenv_restore(self.fpenv)
        result = loop.answers(request.shapes) if request.count_mode is None else loop.row_counts(request.count_mode)
        self.end_if_forked_child()  # before the answers are written: the child's would be the parent's file
        change = self._fp_change()
        self.lib.sb_fpenv_restore(self.fpenv)
        try:
            self._write_answers(result)
        except OSError as exc:
            raise AnswersUnwritten(f"its answers could not be written: {type(exc).__name__}: {exc}") from None
        return messages.Evaluated(answers=int(result.size), fp_change=change)

    def _write_answers(self, result: np.ndarray) -> None:
        """The answers as .npy from the start of the answers file, through pwrite: the parent,
        whose file it is, reads them from there (no file is created, and the offset that both
        processes share is not moved)."""
        buffer = io.BytesIO()
        np.save(buffer, result)
        data = buffer.getbuffer()
        os.ftruncate(self.answers_fd, 0)
        done = 0
        while done < len(data):
            done += os.pwrite(self.answers_fd, data[done:], done)

    def clock(self, request: messages.Clock) -> messages.ClockRead:
        """Clock in MHz from dependent multiplies (MULTIPLY_CYCLES each): the best of twelve
        ~0.3 ms runs.

        Short runs: on a shared or virtual machine one of them is likely to run
        undisturbed, and the undisturbed one is the clock (see runner._cycles)."""
        iterations = 400_000
        best = min(self._timed_multiplies(iterations) for _ in range(12))
        return messages.ClockRead(mhz=iterations * MULTIPLY_CYCLES / best / 1e6)

    def _timed_multiplies(self, iterations: int) -> float:
        start = time.perf_counter_ns()
        self.lib.sb_dependent_multiplies(iterations)
        return (time.perf_counter_ns() - start) / 1e9

    def end_if_forked_child(self) -> None:
        """A kernel's fork() returned here in its child: it ends before doing anything of ours
        (writing an answer, replying), unflushed (the parent's buffers are the parent's)."""
        if os.getpid() != self.pid:
            os._exit(0)

    def handle(self, request):
        self._request += 1
        handler = {
            messages.Describe: self.describe,
            messages.LoadScene: self.load,
            messages.Calibrate: self.calibrate,
            messages.Sample: self.sample,
            messages.Evaluate: self.evaluate,
            messages.Clock: self.clock,
            messages.Release: self.release,
        }.get(type(request))
        if handler is None:
            raise ValueError(f"not a request: {type(request).__name__}")
        if not self._runs_a_c_row(request):  # our broadphase keeps its threads, a peer JIT's pool too
            return handler(request)
        before = self._snapshot()
        try:
            reply = handler(request)
        except Exception as exc:  # writing its answers failed after it took every descriptor, say
            change = self._change_since(before)
            if change is None and isinstance(exc, AnswersUnwritten | WroteOutsideItsAnswers):  # the kernel's doing
                change = str(exc)
            if change is None:
                raise
            return messages.Failure(error=f"{type(exc).__name__}: {exc}", process_change=change)
        written = self._scene_writes()
        change = self._change_since(before)
        if written:  # the row read a scene it changed: its answers and times are not the scene's
            change = ", ".join(filter(None, [f"wrote into the sb_scene it was given: {written}", change]))
            return messages.Failure(error="its scene changed under it", process_change=change)
        return replace(reply, process_change=change) if change else reply

    def _snapshot(self) -> process_state.ProcessState:
        return process_state.snapshot(scene=self._scene_pages)

    def _change_since(self, before: process_state.ProcessState) -> str | None:
        """What the request changed in the process, or None.  A kernel can make the snapshot
        itself fail (a seccomp filter refusing getitimer): that is its change too, or every
        later row would fail with the same error in a worker never replaced."""
        try:
            return process_state.describe_change(before, self._snapshot())
        except Exception as exc:
            return f"the process state could not be read after it: {type(exc).__name__}: {exc}"

    def _runs_a_c_row(self, request) -> bool:
        if isinstance(request, messages.Evaluate | messages.Release):
            name = request.kernel
            if isinstance(request, messages.Release) and name not in self._indexes:
                return False  # nothing of the kernel's runs
        elif isinstance(request, messages.Calibrate | messages.Sample):
            name = request.loop.kernel
        else:
            return False
        return isinstance(self.loops.get(name), CRowLoop)


class ChangedAtLoad(RuntimeError):
    """A --source file's constructor changed the worker process as its library loaded."""


def _refuse_a_changed_process(before: process_state.ProcessState) -> None:
    """The library's load must leave the process as it found it.  A --source constructor runs
    before any kernel, and what it changes reaches every kernel of the build: a timer armed at
    load killed every row with SIGALRM, RLIMIT_NOFILE 12 ended the run as a whole ("Too many
    open files" as the scene loaded), a thread it started spun beside every row unnoted.  A
    changed kernel's worker is replaced; a load cannot be, so it fails: the file's rows crash
    with the change named, and the build's workers load it without the file (worker.FAILED_LOADS)."""
    try:
        change = process_state.describe_change(before, process_state.snapshot())
    except Exception as exc:  # a limit it lowered can keep the snapshot itself from being read
        change = f"the process state could not be read after it: {type(exc).__name__}: {exc}"
    if change:
        raise ChangedAtLoad(f"its constructors changed the worker process: {change}")


class AnswersUnwritten(OSError):
    """The worker could not write a kernel's answers (a kernel that changed its uid, chroot()ed,
    took every descriptor): the kernel's row crashes, never verify as a whole."""


#: sb_scene's fields (sb_abi.h), as a change to one is named.
SCENE_FIELDS = (
    "n_shapes",
    "n_points",
    "stride",
    "shape_begin",
    "shape_end",
    *(f"point[{k}]" for k in range(4)),
    *(f"shape[{k}]" for k in range(8)),
    *(f"extra[{k}]" for k in range(4)),
    "prepared",
    "never",
)


def _scene_field(c_scene, name: str):
    if "[" not in name:
        return getattr(c_scene, name)
    array, k = name[:-1].split("[")
    return getattr(c_scene, array)[int(k)]


def _differs(name: str, was, now) -> bool:
    return _scene_field(was, name) != _scene_field(now, name)


def _field_change(name: str, was, now) -> str:
    """ "n_points 300 -> 150"; a pointer: "shape[2] moved"."""
    old, new = _scene_field(was, name), _scene_field(now, name)
    return f"{name} {old} -> {new}" if isinstance(old, int | float) else f"{name} moved"


def fp_environment_of(env) -> dict:
    """An sb_fpenv as the results JSON records it (the two subnormal modes keep their old names)."""
    return {
        "denormals_are_zero": bool(env.denormals_are_zero),
        "flush_to_zero": bool(env.flush_to_zero),
        "rounding": ROUNDING.get(env.rounding, "unknown"),
        "traps": [name for bit, name in TRAPS.items() if env.traps & bit],
    }


def describe_fp_change(before, after) -> str:
    """What differs between two sb_fpenv, as a row's note says it: "rounding upward"."""
    changes = []
    if after.rounding != before.rounding:
        changes.append(f"rounding {ROUNDING.get(after.rounding, 'unknown')}")
    for field, name in (("flush_to_zero", "flush-to-zero"), ("denormals_are_zero", "denormals-are-zero")):
        if getattr(after, field) != getattr(before, field):
            changes.append(f"{name} {'on' if getattr(after, field) else 'off'}")
    for bit, name in TRAPS.items():
        if (after.traps ^ before.traps) & bit:
            changes.append(f"{name} trap {'enabled' if after.traps & bit else 'disabled'}")
    if not changes:
        changes.append(f"MXCSR {before.mxcsr:#06x} -> {after.mxcsr:#06x}")
    return ", ".join(changes)


def flush_stdio() -> None:
    """Push what a kernel printed into the capture files now, so the parent sees it with the reply."""
    try:
        ctypes.CDLL(None).fflush(None)
    except (OSError, AttributeError):
        pass
    for stream in (sys.stdout, sys.stderr):
        try:
            stream.flush()
        except (OSError, ValueError):
            pass


def main(argv: list[str]) -> int:
    library, options = argv[0], argv[1:]
    channel_fd = int(options[options.index("--channel") + 1])
    die_with_parent(int(options[options.index("--parent") + 1]))
    adopt_orphans()
    refuse_signals_beyond_group()  # before the library loads: its constructors are kernels' code too
    first_out_of_memory()  # a write to /proc: before refuse_file_writes
    refuse_file_writes()
    no_core_dumps()
    channel = Connection(channel_fd)
    try:
        reference = options[options.index("--reference") + 1] if "--reference" in options else None
        answers_fd = int(options[options.index("--answers") + 1])
        server = Server(library, peers="--peers" in options, reference=reference, answers_fd=answers_fd)
    except LoaderRefused as exc:  # nothing of the library ran
        print(exc, file=sys.stderr)
        return LIBRARY_REFUSED_STATUS
    except Exception as exc:  # one line for the parent's report, not a traceback
        print(f"cannot load {Path(library).name}: {type(exc).__name__}: {exc}", file=sys.stderr)
        return 3
    while True:
        try:
            data = channel.recv_bytes()
        except (EOFError, OSError):  # the parent closed the channel: done
            return 0
        request_id = 0
        try:
            request_id, request = messages.decode(data)
            reply = server.handle(request)
        except Exception as exc:  # reported to the parent, which decides what it means
            reply = messages.Failure(error=f"{type(exc).__name__}: {exc}")
        server.end_if_forked_child()
        flush_stdio()
        channel.send_bytes(messages.encode(reply, request_id))
