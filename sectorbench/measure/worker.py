"""The parent's side of a build's worker process (the worker itself is server.py, forked by
measure/forkserver.py).

Each build runs in its own process: a -ffast-math library built by gcc switches the
whole process to flush-to-zero / denormals-are-zero when it is loaded, and a kernel
may crash, hang or print.  The parent keeps a clean floating-point environment and survives.

Protocol: typed messages (measure/messages.py) on a private socket pair, each request with a
deadline (measure/deadlines.py).  The worker's stdout and stderr are files: what a kernel
prints is reported in its row's notes (Printed), never read as a reply.  The worker runs in
its own process group and dies with its parent (through the fork server).  See docs/worker.md.
"""

from __future__ import annotations

import contextlib
import errno
import json
import os
import signal
import socket
import subprocess
import tempfile
from dataclasses import dataclass, field, replace
from multiprocessing.connection import Connection
from pathlib import Path

import numpy as np

from ..errors import SectorbenchError
from ..model.kernels import DISABLE_ISA_ENV, Kernel, disabled_features
from . import messages
from .deadlines import (
    DEFAULT_DEADLINES,
    LISTING_PAST_BUDGET_S,
    NO_BUDGET,
    STARTUP_S,
    WAIT_SLICE_S,
    AwakeClock,
    Budget,
    Deadlines,
)
from .forkserver import spawn_worker
from .messages import LoopRef
from .process_state import stat_fields

PACKAGE_PARENT = str(Path(__file__).resolve().parent.parent.parent)
#: Saved scenes name a family's extra arrays with this prefix (apart from its columns).
EXTRA_PREFIX = "extra:"
#: Lines of a kernel's output kept for its row's note (the rest are only counted).
PRINTED_LINES_KEPT = 3
#: Bytes of output read for those lines; beyond them the output is only counted.
PRINTED_BYTES_READ = 64 * 1024
#: A reply longer than this is not one (a kernel writing to the channel): the worker is dropped.
MAX_REPLY_BYTES = 64 * 1024 * 1024
#: Output of the worker's start-up and scenes (library constructors, imports), not of a kernel.
BUILD_OUTPUT = "(build)"
#: Set in every worker's environment.  numpy's OpenBLAS starts a thread per core at import,
#: which spins for ~0.1 s of CPU beside the worker (0.30 s of CPU a worker start with it,
#: 0.20 without: tools/worker_startup.py) and would compete with a timed loop on a small
#: machine; no loop of a worker calls BLAS.
WORKER_ENV = {"OPENBLAS_NUM_THREADS": "1"}


#: Libraries whose load failed in this process (a --source constructor crashed, exited or
#: hung), with the rows' status and reason: later sessions of the build go straight to its
#: reference, rather than crash or wait out the start-up allowance again.
FAILED_LOADS: dict[Path, tuple[str, str]] = {}


class WorkerCrashed(SectorbenchError):
    """The worker process died (a kernel crashed, or it was killed)."""


class WorkerTimedOut(SectorbenchError):
    """A request outlasted its deadline: the worker was killed."""


#: The worker's exit status when the dynamic loader refuses its library (an undefined symbol,
#: a missing dependency): nothing of the library ran, so its rows did not crash.
LIBRARY_REFUSED_STATUS = 4


class LibraryRefused(WorkerCrashed):
    """The dynamic loader refused the build's library: its rows are "build-failed", as a build
    that did not link (a --source kernel calling a function no file defines links into a shared
    library, and the loader refuses it)."""


def failure_status(exc: WorkerCrashed | WorkerTimedOut) -> str:
    """The status of the rows a worker's failure ended."""
    if isinstance(exc, WorkerTimedOut):
        return "timed-out"
    return "build-failed" if isinstance(exc, LibraryRefused) else "crashed"


class WorkerError(SectorbenchError):
    """The worker reported an error it caught."""


@dataclass
class Printed:
    """What a worker wrote to its stdout and stderr while serving one kernel."""

    lines: int = 0
    first: list[str] = field(default_factory=list)

    def add(self, text: bytes, counted_lines: int) -> None:
        self.lines += counted_lines
        for line in text.decode(errors="replace").splitlines():
            if len(self.first) < PRINTED_LINES_KEPT and line.strip():
                self.first.append(line.strip()[:120])

    def merge(self, other: Printed) -> None:
        """Add what `other` holds, printed after what this one holds."""
        self.lines += other.lines
        self.first = (self.first + other.first)[:PRINTED_LINES_KEPT]

    def note(self) -> str | None:
        """The row's note: "printed 40 lines: debug: call 1 / debug: call 2 …"."""
        if not self.lines:
            return None
        more = " …" if self.lines > len(self.first) else ""
        plural = "" if self.lines == 1 else "s"
        return f"printed {self.lines} line{plural}: {' / '.join(self.first)}{more}"


class _Capture:
    """One of the worker's output files, read from where the last read stopped."""

    def __init__(self):
        self.file = tempfile.TemporaryFile()
        self.offset = 0

    def take(self, printed: Printed) -> None:
        size = os.fstat(self.file.fileno()).st_size
        if size <= self.offset:
            return
        self.file.seek(self.offset)
        head = self.file.read(min(size - self.offset, PRINTED_BYTES_READ))
        lines = head.count(b"\n")
        while self.file.tell() < size:  # beyond the head: count lines only, a chunk at a time
            lines += self.file.read(min(size - self.file.tell(), 1 << 20)).count(b"\n")
        if not head.endswith(b"\n") and self.file.tell() >= size:
            lines += 1  # an unterminated last line
        printed.add(head, lines)
        self.offset = size

    def empty(self) -> None:
        """Drop what was taken (only: a constructor's lines before the first request stay to be
        taken): a kernel printing on every call wrote 2.7 GB of deleted files into $TMPDIR in
        one run; now the files hold one request's output at most.  Called between requests,
        when the worker (which flushed before replying) writes nothing."""
        if self.offset and os.fstat(self.file.fileno()).st_size <= self.offset:
            self.file.seek(0)
            self.file.truncate()
            self.offset = 0


class Worker:
    """A running worker for one shared library."""

    def __init__(
        self,
        library: Path,
        disable_isa: tuple[str, ...] = (),
        peers: bool = False,
        deadlines: Deadlines = DEFAULT_DEADLINES,
        budget: Budget = NO_BUDGET,
        reference: Path | None = None,
    ):
        self.library = Path(library)
        self.disabled = disabled_features(disable_isa)
        self.deadlines, self.budget = deadlines, budget
        self.tests = 0  # of the current scene: what an uncalibrated request's deadline scales with
        self.printed: dict[str, Printed] = {}
        #: What a kernel changed in the worker process (process_state), by kernel: its worker was replaced.
        self.process_changes: dict[str, str] = {}
        #: A kernel whose .release() crashed or hung (at the next scene's load), by kernel.
        self.release_failures: dict[str, WorkerCrashed | WorkerTimedOut] = {}
        #: How the fork server had changed when this worker's process was replaced (forkserver.spawn_worker).
        self.fork_server_replaced: list[str] = []
        #: The kernels run on the current scene: each may hold a prepared index to release.
        self._ran_on_scene: set[str] = set()
        self._stdout, self._stderr = _Capture(), _Capture()
        # verify's answers come back in a file of ours, not one the worker creates: a worker may
        # create, change or remove no file (server.refuse_file_writes)
        self._answers = tempfile.TemporaryFile()
        self._env = {
            **os.environ,
            **WORKER_ENV,
            "PYTHONPATH": os.pathsep.join(filter(None, [PACKAGE_PARENT, os.environ.get("PYTHONPATH")])),
            DISABLE_ISA_ENV: ",".join(sorted(self.disabled)),
        }
        self._peers, self._reference = peers, None if reference is None else str(reference)  # see reference_library
        self._scene_path: Path | None = None
        self._request_id = 0
        self._start_process()

    def _start_process(self) -> None:
        ours, theirs = socket.socketpair()
        try:  # forked in its own process group: killed as one, never by the terminal's ^C first
            files = (theirs.fileno(), self._stdout.file.fileno(), self._stderr.file.fileno(), self._answers.fileno())
            self._process, fork_server_change = spawn_worker(
                str(self.library), self._peers, files, self._env, self._reference
            )
            if fork_server_change:  # a kernel changed it, through getppid(): no worker inherits that
                self.fork_server_replaced.append(fork_server_change)
        except BaseException:
            ours.close()
            raise
        finally:
            theirs.close()
        self._channel = Connection(ours.detach())

    def _replace_process(self) -> None:
        """A fresh process for the same library and scene: what a kernel changed in the old one
        (a thread left running, a timer, a resource limit) reaches no other kernel."""
        self.kill()
        self._channel.close()
        self._start_process()
        if self._scene_path is not None:
            self.use_scene(self._scene_path)

    # ---------------------------------------------------------------- the channel

    def ask(self, request, deadline_s: float, who: str = BUILD_OUTPUT, past_budget_s: float = 0.0):
        """Send a typed request; its typed reply within deadline_s (and the run's budget, or
        past_budget_s if that is longer).

        WorkerTimedOut (the worker is killed), WorkerCrashed, WorkerError (it caught one)."""
        left = max(self.budget.left_s(), past_budget_s)
        if left <= 0:  # the run is over its --max-minutes: nothing more is asked
            raise WorkerTimedOut(f"the run's --max-minutes {self.budget.minutes:g} ran out before this request")
        self._stdout.empty()
        self._stderr.empty()
        self._request_id += 1
        clock = AwakeClock()
        end = clock.last + left  # --max-minutes is the clock's, stopped or not
        try:
            self._channel.send_bytes(messages.encode(request, self._request_id))
            ready = False
            while not ready and clock.awake_s < deadline_s and clock.last < end:
                wait_s = min(WAIT_SLICE_S, deadline_s - clock.awake_s, end - clock.last)
                ready = self._channel.poll(wait_s)
                clock.tick(wait_s)
        except OSError:
            ready = True  # a dead worker: recv says so
        if not ready:
            stopped = _stopped(self._process.pid)
            self.kill()
            self._take_output(who)
            if clock.awake_s < deadline_s:
                raise WorkerTimedOut(f"the run's --max-minutes {self.budget.minutes:g} ran out during this request")
            # start-up (the library's load, its constructors included) has its own allowance
            why = "the start-up allowance" if deadline_s == STARTUP_S else "--kernel-timeout sets the floor"
            if stopped:
                why += "; it was stopped (SIGSTOP, SIGTSTP: a kernel that stopped its process or group?)"
            raise WorkerTimedOut(f"no answer within {deadline_s:.3g} s ({why}{clock.stopped_note()}): killed")
        try:
            data = self._channel.recv_bytes(MAX_REPLY_BYTES)
        except (EOFError, ConnectionResetError):  # reset: it died before reading the request
            self._take_output(who)
            notice, code = self._death_notice()
            raise (LibraryRefused if code == LIBRARY_REFUSED_STATUS else WorkerCrashed)(notice) from None
        except OSError as exc:  # a frame too long or torn: not our worker's reply
            self.kill()
            self._take_output(who)
            raise WorkerCrashed(f"the worker's channel carried something else: {exc}") from None
        self._take_output(who)
        try:
            answers, reply = messages.decode(data)
        except messages.ProtocolError as exc:
            self.kill()
            raise WorkerCrashed(f"the worker's channel carried something else: {exc}") from None
        if answers != self._request_id or self._channel.poll(0):
            self.kill()  # a second writer on the channel (a forked child, a forged reply): end it here
            raise WorkerCrashed("the worker's channel carried a reply this request did not ask for (a forked child?)")
        if isinstance(request, messages.Calibrate | messages.Sample | messages.Evaluate):
            self._ran_on_scene.add(who)
        change = getattr(reply, "process_change", None)
        if change:
            self.process_changes.setdefault(who, change)
            self._replace_process()
        if isinstance(reply, messages.Failure):
            if change and change in reply.error:  # the error is the change (its answers unwritten, overrun)
                raise WorkerCrashed(reply.error)
            if change:  # the row's own doing: its crash, not the worker's error
                raise WorkerCrashed(f"{reply.error} (the kernel changed its worker process: {change})")
            raise WorkerError(reply.error)
        return reply

    def _take_output(self, who: str) -> None:
        printed = self.printed.setdefault(who, Printed())
        self._stdout.take(printed)
        self._stderr.take(printed)

    def _death_notice(self) -> tuple[str, int]:
        """What the dead worker's exit says (its last words), and its exit status."""
        try:
            code = self._process.wait(timeout=30)
        except subprocess.TimeoutExpired:  # it closed the channel but lives on: end it
            self.kill()
            code = self._process.returncode
        size = os.fstat(self._stderr.file.fileno()).st_size
        self._stderr.file.seek(max(0, size - PRINTED_BYTES_READ))  # its last words, however much it printed
        lines = self._stderr.file.read().decode(errors="replace").strip().splitlines()
        # A Python traceback: its last line says what happened; frames are for SECTORBENCH_DEBUG.
        tail = lines[-1:] if any(line.startswith("Traceback") for line in lines) else lines[-3:]
        if code == LIBRARY_REFUSED_STATUS and tail:
            return tail[-1], code
        how = f"killed by signal {-code}" if code < 0 else f"exited with status {code}"
        return f"worker {how}" + (f": {' / '.join(tail)}" if tail else ""), code

    # ---------------------------------------------------------------- requests

    def use_scene(self, path: Path) -> int:
        """Make the saved scene at `path` the worker's current scene; its tests."""
        self._release_indexes()
        reply = self.ask(messages.LoadScene(str(path)), STARTUP_S)
        self.tests, self._scene_path = reply.tests, Path(path)
        return reply.tests

    def _release_indexes(self) -> None:
        """Each kernel's prepared index on the current scene, released in a request charged to
        the kernel: a .release() that crashed at the next scene's load killed verify as a whole
        ("worker killed by signal 6").  A failure is the kernel's (release_failures), and a fresh
        worker, with no index left to release, loads the scene."""
        ran, self._ran_on_scene = self._ran_on_scene, set()
        # The scene is being left: a process replaced on the way (a .release() that changed it)
        # loads none, since the scene's file may be gone (verify deletes each batch's once judged).
        self._scene_path = None
        for kernel in sorted(ran):
            process = self._process
            try:
                self.ask(messages.Release(kernel), self.deadlines.pass_s(self.tests), kernel)
            except (WorkerCrashed, WorkerTimedOut, WorkerError) as exc:
                self.release_failures.setdefault(kernel, type(exc)(f"{exc} (as its prepared index was released)"))
                self.kill()
                self._channel.close()
                self._start_process()
                return
            if self._process is not process:  # replaced after a change: no index is left in it
                return

    def load(self, scene, scratch: Path) -> None:
        """Make `scene` the worker's current scene."""
        self.use_scene(save_scene(scene, scratch))

    def calibrate(self, loop: LoopRef, min_time_s: float) -> messages.Timed:
        deadline = self.deadlines.calibration_s(self.tests, min_time_s)
        return self.ask(messages.Calibrate(loop, min_time_s), deadline, loop.kernel)

    def sample(self, loop: LoopRef, calls: int, expected_s: float | None = None) -> messages.Timed:
        """`calls` passes of the loop; expected_s (from calibration) sets the deadline."""
        if expected_s is None:
            deadline = self.deadlines.pass_s(self.tests, calls)
        else:
            deadline = self.deadlines.sample_s(expected_s)
        return self.ask(messages.Sample(loop, calls), deadline, loop.kernel)

    def evaluate(self, kernel: str, shapes: tuple[int, int] | None = None) -> np.ndarray:
        """The kernel's raw answers on the current scene: (N, M) for a grid (rows `shapes`
        only, if given), (M,) for pairs."""
        return self.evaluate_with_fp(kernel, shapes)[0]

    def evaluate_with_fp(
        self, kernel: str, shapes: tuple[int, int] | None = None, count_mode: str | None = None
    ) -> tuple:
        """evaluate(), and how the kernel changed the FP environment (None: it did not).  With
        count_mode, a pairs scene's rows each counted by that count loop instead."""
        deadlines = self.deadlines
        deadline_s = deadlines.pass_s(self.tests) if count_mode is None else deadlines.row_counts_s(self.tests)
        reply = self.ask(messages.Evaluate(kernel, shapes, count_mode), deadline_s, kernel)
        try:
            self._answers.seek(0)  # the worker wrote from 0 with pwrite, leaving the offset alone
            answers = np.load(self._answers)
        except (OSError, ValueError, EOFError) as exc:  # what the kernel's worker wrote is not its answers
            self.kill()
            raise WorkerCrashed(f"its answers could not be read: {type(exc).__name__}: {exc}") from None
        return answers, reply.fp_change

    def clock_mhz(self) -> float:
        return self.ask(messages.Clock(), STARTUP_S).mhz

    def describe(self, past_budget_s: float = 0.0) -> tuple[list[Kernel], messages.Described]:
        """The build's kernels (every timed loop's record), and what else the worker found:
        fp_environment, counters, cpus; within past_budget_s even when the run's budget is over.

        SectorbenchError if a --disable-isa feature is not one the build knows."""
        reply = self.ask(messages.Describe(), STARTUP_S, past_budget_s=past_budget_s)
        if reply.name_clashes:  # the second row would be silently replaced by the first: its results with it
            raise SectorbenchError(
                f"two kernels are named {reply.name_clashes[0]}: each kernel needs a name of its own (rename yours)"
            )
        unknown = sorted(self.disabled - set(reply.cpu_features))
        if unknown:
            raise SectorbenchError(
                f"unknown CPU feature {', '.join(unknown)} in --disable-isa/${DISABLE_ISA_ENV}; "
                f"known: {', '.join(reply.cpu_features) or 'none (not an x86 build)'}"
            )
        return [Kernel.from_dict(row) for row in reply.kernels], reply

    # ---------------------------------------------------------------- lifetime

    def kill(self) -> None:
        """Stop the worker (and anything it started) at once; close() still releases the rest."""
        if self._process.poll() is None:
            try:
                os.killpg(self._process.pid, signal.SIGKILL)
            except (ProcessLookupError, PermissionError):
                self._process.kill()
            self._process.wait()

    def interrupt(self) -> None:
        """SIGKILL to the worker's process group, and nothing else: safe from another thread
        while this worker's own thread waits for a reply (kill() from there raced that thread
        for the exit status: EBADF on the status pipe, read and closed twice); that thread
        sees the worker die, as after a crash."""
        if self._process.returncode is None:
            with contextlib.suppress(ProcessLookupError, PermissionError):
                os.killpg(self._process.pid, signal.SIGKILL)

    def close(self) -> None:
        if self._process.poll() is None:
            self._channel.close()  # the worker's recv sees EOF and exits
            try:
                self._process.wait(timeout=10)
            except subprocess.TimeoutExpired:
                self.kill()
        self._channel.close()
        self._stdout.file.close()
        self._stderr.file.close()
        self._answers.close()

    def __enter__(self) -> Worker:
        return self

    def __exit__(self, *exc) -> None:
        self.close()


def _stopped(pid: int) -> bool:
    """The process is stopped by a signal (its state in /proc is T; False where unknown)."""
    try:
        return stat_fields(pid, 0) == ["T"]
    except (OSError, IndexError):
        return False


class BuildSession:
    """A build's library and its worker on one scene, restarted after a crash or a timeout:
    the one home of starting a build's worker, for run and verify alike."""

    def __init__(
        self,
        config,
        library: Path,
        scene_path: Path | None = None,
        disable_isa: tuple[str, ...] = (),
        peers: bool = False,
        deadlines: Deadlines = DEFAULT_DEADLINES,
        budget: Budget = NO_BUDGET,
        side: str | None = None,
    ):
        self.config, self.library, self.scene_path = config, library, scene_path
        self.disable_isa, self.peers = disable_isa, peers
        #: run --against: "base" or "head", the side of the A/B comparison its rows are on; else None.
        self.side = side
        self.deadlines, self.budget = deadlines, budget
        self.worker: Worker | None = None
        self.kernels: list[Kernel] = []
        self.info: messages.Described | None = None  # fp_environment, counters, cpus: see server.Server.describe
        self.reference = reference_library(config)
        #: Why the build's own library could not be loaded (a --source file's constructor crashed,
        #: exited or hung), else None.  Its workers then load `reference` (the same build without
        #: the --source files): the built-in kernels run, the --source kernels' rows fail with this.
        self.load_failure: str | None = None
        self._unloaded: list[Kernel] = []  # the --source files' kernels, when load_failure says why
        #: What each kernel printed over every worker of this session (BUILD_OUTPUT: start-up).
        self.printed: dict[str, Printed] = {}
        #: What a kernel changed in its worker process, over every worker of this session.
        self.process_changes: dict[str, str] = {}
        #: A kernel whose .release() crashed or hung, over every worker of this session.
        self.release_failures: dict[str, WorkerCrashed | WorkerTimedOut] = {}
        #: How the fork server had changed each time a worker of this session had to replace it.
        self._fork_server_changes: list[str] = []
        self.restart()

    def restart(self) -> None:
        """A fresh worker with this session's scene loaded (the previous one, if any, is closed)."""
        if self.worker is not None:
            self._keep_printed()
            self.worker.close()
            self.worker = None
        if self.load_failure is None and self.library in FAILED_LOADS:  # said once a process, not waited for again
            self._loaded_without_sources(*FAILED_LOADS[self.library])
        try:
            self.kernels, self.info = self._start(self.load_failure is None)
        except (WorkerCrashed, WorkerTimedOut) as exc:  # no kernel has run yet: the load itself failed
            if self.load_failure is not None or self.reference is None:
                without = " without its --source files" if self.load_failure else ""
                raise type(exc)(f"{exc} while loading the {self.config.label} build{without}") from None
            # Only the --source files' constructors can tell the two loads apart: their rows pay for it.
            sources = ", ".join(Path(s).name for s in self.config.extra_sources)
            why = f"{exc} while loading the {self.config.label} build"
            if "undefined symbol" not in str(exc):  # else the loader said why, and no constructor ran
                why += f" (a constructor in {sources}?)"
            FAILED_LOADS[self.library] = (failure_status(exc), why)
            self._loaded_without_sources(*FAILED_LOADS[self.library])
            self.restart()
            return
        self.kernels = self._marked_from_source(self.kernels) + self._unloaded
        if self.scene_path is not None and self.budget.left_s() > 0:  # else no kernel will run on it
            self.worker.use_scene(self.scene_path)

    def _marked_from_source(self, kernels: list[Kernel]) -> list[Kernel]:
        """The kernels, those of the --source files (the rows the build without them lacks) marked."""
        from ..native.build import kernel_index

        if not self.config.extra_sources:
            return kernels
        built_in = kernel_index(replace(self.config, extra_sources=())) or {}
        return [k if k.name in built_in else replace(k, from_source=True) for k in kernels]

    @property
    def loaded_library(self) -> Path:
        """The library this session's workers load: the build's own, or, when a --source
        constructor failed in its load, the same build without the --source files."""
        return self.reference if self.load_failure else self.library

    def _start(self, own_library: bool) -> tuple[list[Kernel], messages.Described]:
        """A worker of the build's own library (own_library) or of its reference, described."""
        # The reference's environment at load is the build's: loaded alone, nothing to compare it with.
        library, reference = (self.library, self.reference) if own_library else (self.loaded_library, None)
        self.worker = Worker(library, self.disable_isa, self.peers, self.deadlines, self.budget, reference)
        # A library without --source files runs no constructor of the user's: listing its kernels
        # may outlast a budget that such a constructor used up, so that their rows say it ran out
        # (else the run ended in an error and wrote nothing)
        ours = not own_library or not self.config.extra_sources
        return self.worker.describe(LISTING_PAST_BUDGET_S if ours else 0.0)

    def _loaded_without_sources(self, status: str, why: str) -> None:
        """From now on the workers load the reference; the --source files' kernels (the build's
        rows its reference lacks, read by the preprocessor: kernel_index) are rows that cannot
        run, with the load's failure as their reason and `status`."""
        from ..native.build import kernel_index

        self.load_failure = why
        own, built_in = kernel_index(self.config), kernel_index(replace(self.config, extra_sources=()))
        if own is None or built_in is None:  # unreadable now: the rows cannot be named
            return
        source = ", ".join(Path(s).name for s in self.config.extra_sources)
        self._unloaded = [
            Kernel(
                name=name,
                family=family,
                takes=(),
                isa=(),
                loop="",
                summary="",
                source=source,
                lanes=1,
                block=1,
                known_bad=False,
                rounding_bound=0.0,
                tolerance=0.0,
                skip_reason=why,
                unrun_status=status,
                from_source=True,
            )
            for name, family in own.items()
            if name not in built_in
        ]

    def _keep_printed(self) -> None:
        for who, printed in self.worker.printed.items():
            self.printed.setdefault(who, Printed()).merge(printed)
        self.worker.printed = {}
        for who, change in self.worker.process_changes.items():
            self.process_changes.setdefault(who, change)
        self.worker.process_changes = {}
        for who, failure in self.worker.release_failures.items():
            self.release_failures.setdefault(who, failure)
        self.worker.release_failures = {}
        self._fork_server_changes += self.worker.fork_server_replaced
        self.worker.fork_server_replaced = []

    def take_output(self, who: str) -> tuple[Printed | None, str | None]:
        """What `who` printed, and how it changed its worker process, so far, taken out of this
        session: a batch judged in a pool process or on a Dask worker hands them to the client's
        session (add_output), whose notes, alone, said what the kernel did in the loop checks."""
        self._keep_printed()
        return self.printed.pop(who, None), self.process_changes.pop(who, None)

    def add_output(self, who: str, printed: Printed | None, change: str | None) -> None:
        """Add what take_output took from a session (this one, or another process's), after what this one holds."""
        self._keep_printed()  # its current worker's output first: it came before
        if printed is not None:
            self.printed.setdefault(who, Printed()).merge(printed)
        if change is not None:
            self.process_changes.setdefault(who, change)

    def printed_note(self, who: str) -> str | None:
        """What `who` printed, as its row's note (None: nothing)."""
        self._keep_printed()
        return self.printed.get(who, Printed()).note()

    def process_note(self, who: str) -> str | None:
        """What `who` changed in its worker process (process_state), as its row's note (None: nothing)."""
        self._keep_printed()
        change = self.process_changes.get(who)
        return f"changes its worker process: {change} (a fresh worker ran every other kernel)" if change else None

    def fork_server_replaced(self) -> list[str]:
        """How the fork server had changed each time one of this session's workers replaced it
        before forking (a kernel changed it through getppid(); its row says so when the worker's
        snapshot saw it): "fork server changed: nice 0 -> 19"."""
        self._keep_printed()
        return [
            f"fork server changed: {change}; a fresh one forked this build's workers"
            for change in self._fork_server_changes
        ]

    def release_failure(self, who: str) -> WorkerCrashed | WorkerTimedOut | None:
        """How `who`'s .release() crashed or hung (the row's failure), or None."""
        self._keep_printed()
        return self.release_failures.get(who)

    def use(self, scene_path: Path) -> None:
        """Make `scene_path` this session's scene (also after a restart)."""
        self.scene_path = scene_path
        self.worker.use_scene(scene_path)

    def close(self) -> None:
        if self.worker is not None:
            self.worker.close()

    def kill(self) -> None:
        if self.worker is not None:
            self.worker.kill()

    def interrupt(self) -> None:
        """Worker.interrupt, from another thread than the session's own."""
        worker = self.worker  # once: the session's thread may be replacing it
        if worker is not None:
            worker.interrupt()

    def kernel(self, name: str) -> Kernel:
        return next(k for k in self.kernels if k.name == name)


def load_notes(at_load: str | None) -> list[str]:
    """The note every row of a build carries when loading it changed the FP environment
    (`at_load`: BuildSession.info.fp_change_at_load)."""
    if not at_load:
        return []
    return [
        "loading this build changed the floating-point environment (a constructor in a --source file?): "
        f"{at_load}; restored before any kernel ran"
    ]


def row_fp_change(kernel_change: str | None, at_load: str | None) -> str | None:
    """A row's fp_environment_change: how its kernel changed the FP environment, else how
    loading its build did ("at load: rounding upward"), else None."""
    return kernel_change or (f"at load: {at_load}" if at_load else None)


def reference_library(config) -> Path | None:
    """The library of `config` without its --source files, for a build that has some: the FP
    environment loading it leaves is the build's (a gcc -ffast-math library sets FTZ/DAZ at
    load), so a change beyond it in the build's own library is a --source file's constructor's.
    None without --source files (their library's environment at load is the build's)."""
    from ..native.build import build

    if not config.extra_sources:
        return None
    return build(replace(config, extra_sources=()))


#: The clock's reference loop (sb_dependent_multiplies) is read in a library built with these
#: flags and the run's compiler, whatever builds the run measures: at -O0 the loop of additions
#: it replaced kept its counter in memory and ran at ~0.4 adds a cycle (a "1424 MHz" clock where
#: -O2 read 3690).
CLOCK_FLAGS = ("-O2",)


def clock_session(sessions: list[BuildSession], cc: str, progress=lambda what, left_s=None: None) -> BuildSession:
    """The session to read the clock from: one of `sessions` if it is exactly the clock's build
    (CLOCK_FLAGS, `cc`, no user sources), else a worker of its own (the caller closes it)."""
    from ..native.build import BuildConfig, build

    config = BuildConfig(CLOCK_FLAGS, cc)
    for session in sessions:
        if session.config == config:
            return session
    progress(f"building the clock's reference ({config.label})")
    return BuildSession(config, build(config))


def save_scene(scene, directory: Path) -> Path:
    """Write a scene where a worker can load it (arrays unpadded; the worker re-pads)."""
    path = Path(directory) / f"scene-{scene.digest()[:16]}.npz"
    if not path.exists():
        meta = {"kind": scene.kind, "family": scene.family, "seed": scene.seed, "layout": scene.layout}
        meta["options"] = dict(scene.options)
        extra = {EXTRA_PREFIX + name: values for name, values in scene.extra.items()}
        columns = {name: scene.column(name) for name in scene.arrays}
        # under another name until whole: a write cut short (a full disk) must not leave a
        # damaged scene where the next session of this run would take it as written
        partial = path.with_name(f".{path.name}.partial")
        try:
            with open(partial, "wb") as out:
                np.savez(out, __meta__=np.array(json.dumps(meta)), **columns, **extra)
            os.replace(partial, path)
        except OSError as exc:
            with contextlib.suppress(OSError):
                partial.unlink()
            cause = "the file-size limit, ulimit -f" if exc.errno == errno.EFBIG else "TMPDIR chooses that folder"
            raise SectorbenchError(
                f"cannot write the scene for the workers into {path.parent}: {exc.strerror or exc} ({cause})"
            ) from None
    return path


def load_scene(path: Path):
    from ..families.scene_kinds import make_scene

    with np.load(path) as data:
        meta = json.loads(str(data["__meta__"]))
        columns = {name: data[name] for name in data.files if name != "__meta__" and not name.startswith(EXTRA_PREFIX)}
        extra = {name[len(EXTRA_PREFIX) :]: data[name] for name in data.files if name.startswith(EXTRA_PREFIX)}
        options = meta.get("options")
        return make_scene(meta["kind"], meta["family"], columns, meta["seed"], meta["layout"], extra, options)
