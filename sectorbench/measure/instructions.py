"""Instruction counts (--metric instructions): each timed loop run once under valgrind.

Timings on a shared CI runner move with its neighbours; an instruction count does not.
kernels_c/drivers/instructions.c (built by build.build_driver where valgrind's headers
exist) dlopens a build, reads the scene this module writes, and runs each loop -- the
kernel's and its NoOperation twin -- with callgrind's instrumentation switched on only
around the loop (client requests), one dump per loop.  The count is valgrind's "Ir" of
that dump: the same library and scene give the same count, to the instruction.

What it is not: a time.  A divide or a square root counts one, like an add; so counts
rank versions of a kernel within one compiler and flag set, never gcc against clang or a
fast-math build against a strict one (docs/ci.md).
"""

from __future__ import annotations

import contextlib
import functools
import os
import re
import shutil
import signal
import subprocess
import time
from collections.abc import Callable, Iterable
from dataclasses import dataclass, replace
from pathlib import Path

import numpy as np

from ..errors import SectorbenchError
from ..interrupts import kill_session, scratch_directory, signals_held
from ..model.results import KernelResult, RunResult
from ..native.build import BuildConfig, build, build_driver, valgrind_include_dir
from ..native.environment import uses_native
from .deadlines import DEFAULT_DEADLINES, NO_BUDGET, AwakeClock, Budget, Deadlines

#: The metrics --metric takes: time is always measured; instructions adds valgrind's counts.
METRICS = ("time", "instructions")
VALGRIND = "valgrind"
#: Said once when valgrind is missing (Debian's valgrind package has its headers too).
INSTALL_HINT = "valgrind is not installed: apt-get install valgrind (it brings the headers too)"
#: Said once when valgrind runs but its headers are not where a compiler looks: a valgrind built
#: from source into a prefix of its own was told "not installed".
HEADERS_HINT = (
    "valgrind's headers (valgrind/callgrind.h) are not in /usr/include or /usr/local/include: "
    "install them with valgrind (apt-get install valgrind, or its source's make install)"
)
#: Under callgrind a loop runs 20 to 100 times slower: counting stops at about this many tests
#: (whole shapes, a multiple of SHAPE_BLOCK), about 10 s a loop; per test it is the same loop.
MAX_COUNTED_TESTS = 20_000_000
#: The widest shape block of any kernel: a counted share of the shapes is a multiple of it.
SHAPE_BLOCK = 16
#: The driver's parent, as it should be (kernels_c/drivers/instructions.c): it dies with it.
PARENT_PID_ENV = "SB_PARENT_PID"
#: valgrind cannot run these instructions (3.19 to 3.23 decode no EVEX): their kernels are skipped.
UNSUPPORTED_ISA_PREFIX = "avx512"


#: What `valgrind --version` prints first: "valgrind-3.19.0".
_VERSION = re.compile(r"valgrind-\d+\.\d+")
#: Seconds `valgrind --version` may take (it answers in milliseconds).
VERSION_TIMEOUT_S = 10.0


def unavailable() -> str | None:
    """Why instructions cannot be counted here (one line), or None."""
    path = shutil.which(VALGRIND)
    if path is None:
        return INSTALL_HINT
    if valgrind_include_dir() is None:
        return HEADERS_HINT
    return _not_valgrind(path)


@functools.cache
def _not_valgrind(path: str) -> str | None:
    """Why the `valgrind` found at `path` cannot count (it does not say its version), or None.

    A broken one (a wrapper script that exits 1, a partial install) was found only after the
    timing, each row's reason "valgrind exited with status 1: " and nothing more; a gate whose
    rounds were too few for the rows it then left to time was refused only then."""
    try:
        said = subprocess.run(
            [path, "--version"], stdin=subprocess.DEVNULL, capture_output=True, timeout=VERSION_TIMEOUT_S
        )
    except subprocess.TimeoutExpired:
        return f"`valgrind --version` did not answer in {VERSION_TIMEOUT_S:g} s: valgrind on PATH is no working one"
    except OSError as exc:
        return f"`valgrind --version` could not start ({exc.strerror}): valgrind on PATH is no working one"
    first = (said.stdout.decode(errors="replace").strip().splitlines() or [""])[0]
    if said.returncode != 0 or not _VERSION.match(first):
        what = f"exited with status {said.returncode}" if said.returncode else f"printed {first[:60]!r}"
        home = str(Path.home())  # the reason is saved with the results: no home directory in it
        shown = "~" + path[len(home) :] if path.startswith(home + os.sep) else path
        return f"{shown} is no working valgrind: `valgrind --version` {what}, not its version"
    return None


def _host_has_avx512() -> bool:
    try:
        text = Path("/proc/cpuinfo").read_text()
    except OSError:
        return False
    return any(line.startswith("flags") and "avx512f" in line.split() for line in text.splitlines())


def skip_reason(isa: Iterable[str], flags: Iterable[str], host_avx512: bool | None = None) -> str | None:
    """Why valgrind cannot count this kernel of this build, or None."""
    unsupported = [f for f in isa if f.startswith(UNSUPPORTED_ISA_PREFIX)]
    if unsupported:
        return f"needs {', '.join(unsupported)}, which valgrind cannot run"
    flags = list(flags)
    if any(f.startswith("-mavx512") for f in flags):
        return "built with AVX-512 flags, which valgrind cannot run"
    if host_avx512 is None:
        host_avx512 = _host_has_avx512()
    if host_avx512 and uses_native(flags):
        return "a -march=native build on an AVX-512 host may use AVX-512, which valgrind cannot run"
    return None


def write_scene(scene, path: Path, shapes: int | None = None) -> Path:
    """The scene as the driver reads it: SBSCENE1, int64 N, M, stride, count, then each array
    (kind byte p/s/e, name, bytes).  `shapes`: the first shapes only (the counted share)."""
    n_shapes = scene.n_shapes if shapes is None else shapes
    records = [(b"p", name, scene.arrays[name]) for name in scene.point_arrays]
    records += [(b"s", name, scene.arrays[name]) for name in scene.arrays if name not in scene.point_arrays]
    records += [(b"e", name, scene.extra[name]) for name in scene.extra]
    with open(path, "wb") as out:
        out.write(b"SBSCENE1")
        out.write(np.array([n_shapes, scene.n_points, scene.stride, len(records)], dtype="<i8").tobytes())
        for kind, name, values in records:
            data = np.ascontiguousarray(values).tobytes()
            out.write(kind + np.array([len(name)], dtype="<i8").tobytes() + name.encode())
            out.write(np.array([len(data)], dtype="<i8").tobytes() + data)
    return path


def counted_shapes(n_shapes: int, n_points: int, max_tests: int = MAX_COUNTED_TESTS) -> int:
    """How many shapes (from the first) are counted: all, or whole blocks up to max_tests tests."""
    if n_shapes * n_points <= max_tests:
        return n_shapes
    return min(n_shapes, max(SHAPE_BLOCK, max_tests // n_points // SHAPE_BLOCK * SHAPE_BLOCK))


class LoopStalled(SectorbenchError):
    """count_loops stopped valgrind: `job` ran past its allowance, or the run's --max-minutes
    ran out (`out_of_time`); `counted` holds the jobs done before it."""

    def __init__(self, message: str, job: str, counted: dict[str, int], out_of_time: bool):
        super().__init__(message)
        self.job, self.counted, self.out_of_time = job, counted, out_of_time


#: How often a counting valgrind is looked at: a job's end is its dump file appearing.
WATCH_S = 0.05


def count_loops(
    library: Path,
    scene_path: Path,
    jobs: list[str],
    cc: str,
    scratch: Path,
    job_s: float = DEFAULT_DEADLINES.counting_s(MAX_COUNTED_TESTS),
    budget: Budget = NO_BUDGET,
) -> dict[str, int]:
    """valgrind's instruction count of each job ("kernel:mode:count|noop") on the scene, by job.

    One valgrind process for all the jobs, in a folder of its own (`scratch`): each job ends
    with its dump file, so each is given job_s from the end of the one before, within the
    run's budget; LoopStalled past either, SectorbenchError (with valgrind's last words) if
    valgrind fails."""
    driver = build_driver("instructions", cc)
    scratch = Path(scratch)
    # valgrind's own words in a file of their own, what its children say (a kernel's fork) not
    # in it; the driver's stderr apart (its own messages, and valgrind's before its log opens).
    # The kernels' output goes to /dev/null (the driver's keep_own_streams): in one file with
    # valgrind's, a kernel printing "Process terminating with default action of signal 11" was
    # given that reason, and one printing on every test filled $TMPDIR.
    out, log, stderr = scratch / "callgrind.out", scratch / "valgrind.log", scratch / "driver.log"
    command = [
        VALGRIND,
        "--tool=callgrind",
        f"--log-file={log}",
        "--child-silent-after-fork=yes",
        # No gdbserver: its FIFOs and shared memory file, made in $TMPDIR as valgrind starts, are
        # removed only by valgrind's own exit, and one killed (a stalled loop, an interrupted run)
        # left three files in $TMPDIR each time.  Nothing here attaches a debugger.
        "--vgdb=no",
        "--instr-atstart=no",
        "--collect-atstart=no",
        f"--callgrind-out-file={out}",
        str(driver),
        str(library),
        str(scene_path),
        *jobs,
    ]
    # SB_PARENT_PID: the driver ends if this process died before it asked to die with it.
    # TMPDIR: valgrind writes its client's command line file there as it starts, and a TMPDIR
    # that does not exist or cannot be written (a CI job's, set to the runner's path outside
    # its container), which Python's tempfile passes over silently, was "valgrind: Startup or
    # configuration error: Can't create client cmdline file": every row gated on time instead.
    environment = {**os.environ, PARENT_PID_ENV: str(os.getpid()), "TMPDIR": str(scratch)}
    with open(stderr, "wb") as said, signals_held():  # in `process` before any signal acts
        process = subprocess.Popen(
            command,
            stdin=subprocess.DEVNULL,
            stdout=subprocess.DEVNULL,  # one line a loop, its answer: read by no one
            stderr=said,
            env=environment,
            start_new_session=True,
        )
    try:
        done, since = 0, AwakeClock()  # a run stopped or frozen with its valgrind: not the loop's time
        while not _exited(process):
            dumped = len(list(scratch.glob(f"{out.name}.*")))
            if dumped > done:
                done, since = dumped, AwakeClock()
            out_of_time = budget.left_s() <= 0
            if out_of_time or since.awake_s > job_s:
                kill_session(process)
                job = jobs[min(done, len(jobs) - 1)]
                why = (
                    f"the run's --max-minutes {budget.minutes:g} ran out while valgrind counted it"
                    if out_of_time
                    else f"its {job.rsplit(':', 1)[1]} loop did not end under valgrind within {job_s:.0f} s "
                    f"(--kernel-timeout sets the floor{since.stopped_note()})"
                )
                raise LoopStalled(why, job, parse_dumps(scratch, out.name), out_of_time)
            time.sleep(WATCH_S)
            since.tick(WATCH_S)
    except BaseException:
        if process.returncode is None:  # not reaped (_exited leaves it so): its group is still its own
            kill_session(process)
        raise
    # valgrind has exited but is not reaped yet, so its pid, its group's id, is not reused: what
    # a kernel forked there and left running (a child under valgrind too) ends now.  Reaped
    # first, such a child outlived the run, adopted by init, a valgrind.bin of its own.
    kill_session(process)
    counts = parse_dumps(scratch, out.name)
    if process.returncode != 0:
        logged = _read(log)
        unrecognised = unrecognised_instruction(logged)
        if unrecognised:
            raise SectorbenchError(unrecognised)
        running = next((job for job in jobs if job not in counts), None)
        killed = killed_by_signal(logged, process.returncode, running)
        if killed:
            raise SectorbenchError(killed)
        # why the driver stopped, in its words; else valgrind's last (which are its totals)
        said = [line for line in _read(stderr).splitlines() if line.strip()]
        last = (said or [line for line in logged.splitlines() if line.strip()])[-3:]
        raise SectorbenchError(f"valgrind exited with status {process.returncode}: {' / '.join(last)}")
    missing = [job for job in jobs if job not in counts]
    if missing:
        raise SectorbenchError(f"valgrind wrote no count for {', '.join(missing)}")
    return counts


def _read(path: Path) -> str:
    """A log's text; "" if it was never written (valgrind that failed before it opened its log)."""
    try:
        return path.read_text(errors="replace")
    except FileNotFoundError:
        return ""


def _exited(process: subprocess.Popen) -> bool:
    """Whether `process` has exited, leaving it unreaped (WNOWAIT): its group can still be killed."""
    return os.waitid(os.P_PID, process.pid, os.WEXITED | os.WNOHANG | os.WNOWAIT) is not None


#: What valgrind's log says when its decoder meets an instruction it does not know (it then
#: raises SIGILL), and the function it was in.
_UNHANDLED = re.compile(r"vex amd64->IR: unhandled instruction bytes: ((?:0x[0-9A-Fa-f]{2} ?)+)")
_WHERE = re.compile(r"Unrecognised instruction at address \S+\s*\n==\d+==\s+at \S+: (\S+)")
#: In 64-bit code a first byte 0x62 is EVEX, the encoding of every AVX-512 instruction.
_EVEX = "0x62"


def unrecognised_instruction(log: str) -> str | None:
    """Why valgrind stopped, when its decoder met an instruction it cannot run, or None.

    Its last lines are then only the totals ("Collected : 525297 / I refs: 525,297"), which a
    row gave as its reason: a build that uses AVX-512 through its -march (x86-64-v4,
    sapphirerapids, znver4...) or a target pragma is not caught by skip_reason's flags."""
    unhandled = _UNHANDLED.search(log)
    if unhandled is None:
        return None
    code = unhandled.group(1).split()
    where = _WHERE.search(log)
    place = f" in {where.group(1)}" if where else ""
    what = "an AVX-512 (EVEX) instruction" if code[0].lower() == _EVEX else "an instruction"
    return f"valgrind cannot run {what}{place} (bytes {' '.join(code[:6])}...)"


#: What valgrind's log says when the program it runs dies of a signal (a kernel that crashes),
#: then the stack: "at ADDRESS: FUNCTION (...)", "by ADDRESS: FUNCTION (...)", down to main.
_TERMINATING = re.compile(r"Process terminating with default action of signal (\d+) \((\w+)\)")
_FRAME = re.compile(r"^==\d+==\s+(?:at|by) \S+: (\S+)")


def killed_by_signal(log: str, status: int, job: str | None) -> str | None:
    """Why valgrind ended, when a signal ended it (a kernel that crashed under it), or None.

    Its last lines are then only its totals ("Collected : 30 / I refs: 30"), which a crashing
    kernel's row gave as its reason, with "exited with status -11".  Named: the loop that was
    running (`job`), the signal, and the function the driver called, the frame above main."""
    terminating = _TERMINATING.search(log)
    if terminating is None and status >= 0:
        return None
    if terminating is not None:
        number, name = int(terminating.group(1)), terminating.group(2)
        frames = []
        for line in log[terminating.end() :].splitlines()[1:]:
            frame = _FRAME.match(line)
            if frame is None and frames:
                break
            if frame is not None:
                frames.append(frame.group(1))
        # the frame above main is what the driver called: the kernel's loop, prepare, dlopen
        entry = frames[frames.index("main") - 1] if "main" in frames[1:] else frames[0] if frames else None
    else:  # killed from outside (the OOM killer): valgrind said nothing
        number, entry = -status, None
        try:
            name = signal.Signals(number).name
        except ValueError:
            name = ""
    what = f"{name} (signal {number})" if name else f"signal {number}"
    if job is None:
        return f"valgrind was killed by {what}"
    return f"its {job.rsplit(':', 1)[1]} loop was killed by {what} under valgrind" + (f", in {entry}" if entry else "")


def parse_dumps(folder: Path, stem: str) -> dict[str, int]:
    """Each callgrind dump's trigger (the job the driver named it after) and its total Ir."""
    counts = {}
    for path in sorted(folder.glob(f"{stem}.*")):
        trigger = total = None
        for line in path.read_text().splitlines():
            if line.startswith("desc: Trigger: Client Request: "):
                trigger = line.split("Client Request: ", 1)[1].strip()
            elif line.startswith("totals:"):
                total = int(line.split()[1])
        if trigger is not None and total is not None:
            counts[trigger] = total
    return counts


@dataclass(frozen=True)
class CountedBuild:
    """A build whose rows get counts: its config and the side its rows carry (None outside A/B)."""

    config: BuildConfig
    side: str | None = None


def annotate(
    result: RunResult,
    builds: Iterable[CountedBuild],
    scene,
    progress: Callable[[str], None] = lambda what: None,
    deadlines: Deadlines = DEFAULT_DEADLINES,
    budget: Budget = NO_BUDGET,
) -> RunResult:
    """`result` with every row's instruction counts (or the reason it has none).  Each loop
    has deadlines.counting_s, all of them the run's `budget`: a loop that does not end costs
    its own kernel's counts, and the rows not counted when the budget ends say so."""
    problem = unavailable()
    if problem is not None:
        return _with_reason(result, lambda row: problem)
    from .worker import BuildSession

    host_avx512 = _host_has_avx512()
    rows = list(result.results)
    shapes = counted_shapes(scene.n_shapes, scene.n_points)
    tests = shapes * scene.n_points
    with scratch_directory("sectorbench-instructions-") as scratch:
        scene_path = write_scene(scene, scratch / "scene.bin", shapes)
        for counted in builds:
            config = counted.config
            flags = " ".join(config.flags)
            mine = [
                i
                for i, r in enumerate(rows)
                if r.cc == config.cc and r.flags == flags and r.side == counted.side and r.status == "ok"
            ]
            if not mine:
                continue
            with contextlib.closing(BuildSession(config, build(config))) as session:
                kernels = {k.name: k for k in session.kernels}
                library = session.loaded_library  # without the --source files if their constructor failed
            reasons, jobs = {}, []
            for i in mine:
                row = rows[i]
                kernel = kernels.get(row.kernel)
                if row.broadphase or kernel is None:
                    reasons[i] = "timed end to end (an index build and a query): not a loop valgrind counts"
                    continue
                reason = skip_reason(kernel.isa, config.flags, host_avx512)
                if reason:
                    reasons[i] = reason
                    continue
                for loop in ("count", "noop"):
                    job = f"{row.kernel}:{row.mode}:{loop}"
                    if job not in jobs:
                        jobs.append(job)
            progress(
                f"counting instructions under valgrind: {config.label}" + (f" ({counted.side})" if counted.side else "")
            )
            counts, failures = _counted(
                library, scene_path, jobs, config.cc, scratch, deadlines.counting_s(tests), budget
            )
            for i in mine:
                row = rows[i]
                if i in reasons or row.kernel in failures:
                    rows[i] = replace(row, instructions_reason=reasons.get(i) or failures[row.kernel])
                    continue
                rows[i] = replace(
                    row,
                    instructions=counts[f"{row.kernel}:{row.mode}:count"],
                    overhead_instructions=counts[f"{row.kernel}:{row.mode}:noop"],
                    instructions_tests=tests,
                )
    return replace(result, results=rows, config={**result.config, "instructions_tests": tests})


def _counted(
    library: Path, scene_path: Path, jobs: list[str], cc: str, scratch: Path, job_s: float, budget: Budget
) -> tuple[dict[str, int], dict[str, str]]:
    """Each job's count, and why each kernel whose jobs have none has none.  A loop that does
    not end costs its kernel alone: valgrind goes on from the next kernel's jobs; when valgrind
    fails otherwise, one kernel may be what it cannot run, so each is counted alone."""

    def kernel_of(job: str) -> str:
        return job.split(":")[0]

    counts: dict[str, int] = {}
    failures: dict[str, str] = {}
    remaining = list(jobs)
    while remaining:
        try:
            with scratch_directory("counted-", scratch) as folder:
                counts.update(count_loops(library, scene_path, remaining, cc, folder, job_s, budget))
            break
        except LoopStalled as stalled:
            counts.update(stalled.counted)
            stopped = {kernel_of(job) for job in remaining if stalled.out_of_time and job not in counts}
            for kernel in stopped | {kernel_of(stalled.job)}:
                failures[kernel] = str(stalled)
            remaining = [job for job in remaining if job not in counts and kernel_of(job) not in failures]
        except SectorbenchError:
            for kernel in dict.fromkeys(kernel_of(job) for job in remaining if job not in counts):
                own = [job for job in remaining if kernel_of(job) == kernel]
                try:
                    with scratch_directory("alone-", scratch) as alone:
                        counts.update(count_loops(library, scene_path, own, cc, alone, job_s, budget))
                except SectorbenchError as exc:
                    failures[kernel] = str(exc)
            break
    return counts, failures


def _with_reason(result: RunResult, reason: Callable[[KernelResult], str]) -> RunResult:
    rows = [replace(r, instructions_reason=reason(r)) if r.status == "ok" else r for r in result.results]
    return replace(result, results=rows)
