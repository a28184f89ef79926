"""The command line's frame: the group, one-line errors, consoles and progress.

The CLI (this package) is the only part of sectorbench that prints or chooses exit
codes: 0 ok, 1 a check failed (verify, regress), 2 usage, build or internal error.
"""

from __future__ import annotations

import contextlib
import errno
import io
import json
import os
import resource
import signal
import sys
import threading
import time
import warnings
from collections.abc import Callable
from contextlib import contextmanager
from pathlib import Path

import click
from rich.console import Console
from rich.progress import BarColumn, Progress, TextColumn, TimeElapsedColumn

from ..errors import SectorbenchError
from ..families import all_families
from ..interrupts import ENDING_SIGNALS
from ..measure.timing import duration
from ..model.results import (
    RESCUE_SUFFIX,
    RESULTS_DIR,
    WriteFailed,
    guard_command_files,
    save,
    save_new,
    text_writer,
    write_rescue,
    write_text_atomic,
)
from ..model.text import shown_line, shown_path
from ..version import __version__
from .endings import ending_line

#: Tables going to a file or pipe are not squeezed into 80 columns.
PIPED_WIDTH = 160
#: The narrowest a terminal is taken to be: COLUMNS=0 made rich print nothing at all, and 10
#: left the table's rows blank; narrower terminals wrap the lines instead.
MIN_WIDTH = 40
#: With stderr piped (a CI log), one progress line this often, so a long step is not silence.
HEARTBEAT_S = 5.0
#: The exit status when stdout was closed before everything was printed (`sectorbench run … | head`):
#: a shell's for a process killed by SIGPIPE, never 1 ("a check failed") nor 0.  Any other failing
#: stdout (a full disk, /dev/full) is an output error: 2.
BROKEN_PIPE_EXIT = 128 + signal.SIGPIPE


def _console(**options) -> Console:
    console = Console(**options)
    return console if console.width >= MIN_WIDTH else Console(width=MIN_WIDTH, **options)


stderr = _console(stderr=True)


class Terminated(BaseException):
    """A signal of ENDING_SIGNALS arrived: unwind, cleaning up."""

    def __init__(self, signum: int = signal.SIGTERM):
        super().__init__(signum)
        self.signum = signum


def _on_ending_signal(signum, frame):
    for other in ENDING_SIGNALS:  # a second one must not interrupt the cleanup
        if signal.getsignal(other) is not signal.SIG_IGN:  # (nohup's stays as it is)
            signal.signal(other, _already_ending)
    raise Terminated(signum)


def _already_ending(signum, frame):
    """An ending signal after the first: the cleanup goes on.  A handler that does nothing rather
    than SIG_IGN: a second signal that arrived with the first (caught, its handler not yet run when
    the first one's set SIG_IGN) made Python print "OSError: Signal 15 ignored due to race
    condition" and a traceback above the exit line."""


def note(text: str) -> None:
    """One line on stderr, never wrapped, shown as written: it names kernels, flags and paths
    (a kernel named "[/]" in a saved file was rich markup, and a traceback)."""
    stderr.print(text, soft_wrap=True, highlight=False, markup=False, emoji=False)


def note_cache_fallback() -> None:
    """One line when builds go to the temp folder's private cache, not the user's
    (native.build.cache_choice: a CI container's user with no writable home): a CI step that
    saves ~/.cache or $XDG_CACHE_HOME for the next job does not save that one."""
    from ..native.build import cache_choice

    folder, why = cache_choice()
    if why is not None:
        note(
            f"note: build cache {shown_line(str(folder))} ({shown_line(why)}): "
            "set SECTORBENCH_CACHE or XDG_CACHE_HOME to keep it elsewhere"
        )


#: OSErrors that say the machine ran out of something (disk, quota, a file-size limit, memory,
#: file descriptors) or refuses writes: a one-line error, not an internal one.
MACHINE_LIMITS = frozenset(
    {errno.ENOSPC, errno.EDQUOT, errno.EFBIG, errno.EROFS, errno.ENOMEM, errno.EMFILE, errno.ENFILE}
)


#: At most this many of a compiler's lines are quoted under a build error's line.
QUOTED_COMPILER_LINES = 30


def error_text(exc: SectorbenchError) -> str:
    """An error's line; a build error's is its first line and the compiler's first error
    (failure_line), with the compiler's own messages quoted under it, indented, as it wrote
    them (their lines escaped as shown_line escapes one)."""
    from ..native.build import BuildError, failure_line

    message = str(exc)
    if not isinstance(exc, BuildError) or "\n" not in message.strip():
        return shown_line(message)
    said = [line.rstrip() for line in message.strip().splitlines()[1:] if line.strip()]
    headline = shown_line(failure_line(message))
    if len(said) == 1 and headline.endswith(shown_line(said[0].strip())):
        return headline  # the compiler's one line is the headline's cause: not said twice
    quoted = ["  " + shown_line(line) for line in said[:QUOTED_COMPILER_LINES]]
    if len(said) > QUOTED_COMPILER_LINES:
        quoted.append(f"  ({len(said) - QUOTED_COMPILER_LINES} more lines)")
    return "\n".join([headline, *quoted])


def stdout() -> Console:
    console = _console()
    return console if console.is_terminal else Console(width=PIPED_WIDTH)


class GuardedStream:
    """sys.stdout (or sys.stderr) while a command runs: a write or flush that fails (a closed
    pipe, a full disk) is remembered instead of raised, and the stream's descriptor then points
    at /dev/null, so that the command goes on to write its files (which a traceback, or click's
    and rich's own broken-pipe exit 1, used to skip) and the interpreter's last flush is quiet."""

    def __init__(self, stream):
        self._stream = stream
        self.failure: OSError | None = None

    def write(self, text):
        if self.failure is None:
            try:
                return self._stream.write(text)
            except OSError as exc:
                self._failed(exc)
        return len(text)

    def flush(self) -> None:
        if self.failure is None:
            try:
                self._stream.flush()
            except OSError as exc:
                self._failed(exc)

    def _failed(self, exc: OSError) -> None:
        self.failure = exc
        try:
            devnull = os.open(os.devnull, os.O_WRONLY)
            os.dup2(devnull, self._stream.fileno())
            os.close(devnull)
        except (OSError, ValueError):  # no descriptor (a test's captured stream): nothing to redirect
            pass

    def __getattr__(self, name):
        return getattr(self._stream, name)


class ClosedStream(io.TextIOBase):
    """sys.stdout or sys.stderr when its descriptor was closed as the process started (`1>&-`),
    where Python leaves None: every write fails as a write to a closed descriptor does (EBADF),
    which GuardedStream then remembers, as for any failing stream."""

    def write(self, text):
        raise OSError(errno.EBADF, os.strerror(errno.EBADF))

    def isatty(self) -> bool:
        return False


#: The soft limit on open files a command raises itself to (never past the hard limit): a run
#: holds a few descriptors a worker, compiler and scene file, and a soft `ulimit -n` of 20-24
#: ended `run --threads all` in whichever of them came first ("Too many open files:
#: .../unit-aabr.c", "compiler 'cc' does not run").  The soft limit is the process's to raise,
#: as Go's runtime does for every program.
OPEN_FILES_WANTED = 4096


def raise_open_files_limit() -> None:
    soft, hard = resource.getrlimit(resource.RLIMIT_NOFILE)
    wanted = OPEN_FILES_WANTED if hard == resource.RLIM_INFINITY else min(OPEN_FILES_WANTED, hard)
    if soft != resource.RLIM_INFINITY and soft < wanted:
        with contextlib.suppress(ValueError, OSError):  # a sandbox that forbids it: the limit stays
            resource.setrlimit(resource.RLIMIT_NOFILE, (wanted, hard))


def open_files_hint() -> str:
    """What limits open files, for a "Too many open files" that still happens (a hard limit
    below what the command needs)."""
    soft, hard = resource.getrlimit(resource.RLIMIT_NOFILE)
    return f" (this process may open {soft} files, its hard limit {hard}: raise ulimit -n)"


def fill_closed_standard_descriptors() -> None:
    """Put /dev/null on each of descriptors 0, 1 and 2 that is closed: else the next file
    opened (an output's temporary file, a scene's) takes its number, and whatever writes to
    descriptor 1 or 2 (a compiler or a worker, which inherit them) writes into that file.  In
    ascending order, so that each open takes the number being filled."""
    for fd in (0, 1, 2):
        try:
            os.fstat(fd)
        except OSError:
            opened = os.open(os.devnull, os.O_RDWR)
            if opened != fd:
                os.dup2(opened, fd)
                os.close(opened)


def escape_what_stdout_cannot_encode(stream) -> None:
    """Characters stdout's encoding lacks are written as escapes (\\u03b1), as Python writes them
    to stderr: under a Latin-1 or ASCII locale the gate's table (alpha, the en dash of Hodges-Lehmann)
    was "internal error: UnicodeEncodeError" after all the rounds, its verdict lost."""
    if stream is not None and getattr(stream, "errors", None) in ("strict", "surrogateescape"):
        with contextlib.suppress(AttributeError, ValueError, OSError):  # not a TextIOWrapper (a test's)
            stream.reconfigure(errors="backslashreplace")


def stdout_failure(failure: OSError) -> tuple[str, int]:
    """The line and exit status for a stdout that failed during a command that otherwise succeeded."""
    if failure.errno == errno.EPIPE:
        return "stdout was closed before everything was printed (broken pipe); files said saved are complete", (
            BROKEN_PIPE_EXIT
        )
    reason = failure.strerror or str(failure)
    return f"error: cannot write to stdout ({reason}); files said saved are complete", 2


#: click >= 8.2 raises this for a group called with no command (8.1 printed the help and exited 0).
_NO_COMMAND = getattr(click.exceptions, "NoArgsIsHelpError", ())


class OneLineErrors(click.Group):
    """Report every user error as one line on stderr with exit status 2, never a traceback."""

    def format_help_text(self, ctx, formatter):
        """The group's text, then the families registered here: one added by its registration
        line or $SECTORBENCH_FAMILIES shows without an edit of this text."""
        super().format_help_text(ctx, formatter)
        with formatter.indentation():
            formatter.write_paragraph()
            formatter.write_text(
                f"Families: {', '.join(family.name for family in all_families())} "
                "(`sectorbench kernels` lists their kernels; docs/extending.md adds one)."
            )

    def invoke(self, ctx):
        try:
            return super().invoke(ctx)
        except BrokenPipeError as exc:  # not stdout's (guarded): click's handler would exit 1, "a check failed"
            raise SectorbenchError(f"a pipe closed unexpectedly ({exc.strerror})") from None

    def main(self, args=None, prog_name="sectorbench", complete_var=None, standalone_mode=True, **extra):
        fill_closed_standard_descriptors()
        raise_open_files_limit()
        given = sys.stdout, sys.stderr  # None where closed as the process started
        escape_what_stdout_cannot_encode(given[0])
        out, err = (GuardedStream(stream if stream is not None else ClosedStream()) for stream in given)
        sys.stdout, sys.stderr = out, err
        # args None: the process's own command line (the console script, python -m sectorbench),
        # which exits after it; click's runner and tests pass theirs and go on
        exiting = standalone_mode and args is None
        try:
            code = self._main(args, prog_name, complete_var, exiting, **extra)
        finally:
            sys.stdout, sys.stderr = given
        if out.failure is not None and code in (None, 0, 1):
            # the command's files are written (a failing stdout no longer stops it); its exit
            # status must not read as success, nor as 1 ("a regression") when that is unknown
            line, code = stdout_failure(out.failure)
            # Through a guard: a stderr failing too (`2>&1 | head`) kept the line in its buffer,
            # Python's last flush failed on it again, and the exit status became 120, not this
            # one (unless PYTHONUNBUFFERED was set); the guard points it at /dev/null instead.
            last = GuardedStream(sys.stderr if sys.stderr is not None else ClosedStream())
            last.write(f"sectorbench: {line}\n")
            last.flush()
        if standalone_mode:
            sys.exit(code if isinstance(code, int) else 0)
        return code

    def _smaller(self, args) -> str:
        """What to make smaller after a MemoryError: the sizes, where the command takes them;
        else its input files, where it reads some (regress of files of 30 000 samples a row had
        been told to use a smaller -n/-m, which it has not); else the limit, where one is set
        (verify, which holds a batch of cases at a time, was told "smaller input files?")."""
        from ..model.scenes import address_space_limit

        words = sys.argv[1:] if args is None else list(args)
        command = self.commands.get(next((word for word in words if word in self.commands), ""))
        params = command.params if command is not None else []
        if any("-n" in param.opts for param in params):
            return "a smaller -n/-m?"
        if any(isinstance(param, click.Argument) for param in params):
            return "smaller input files?"
        limit = address_space_limit()
        if limit is not None:
            return f"this process may use {limit >> 20:,} MiB: raise ulimit -v"
        return "the machine's memory is taken"

    def _main(self, args, prog_name, complete_var, exiting=False, **extra):
        in_main_thread = threading.current_thread() is threading.main_thread()
        # A signal the caller ignores (nohup's SIGHUP, a shell's SIGINT for a background job) stays ignored.
        caught = [sig for sig in ENDING_SIGNALS if signal.getsignal(sig) is not signal.SIG_IGN]
        previous = {sig: signal.signal(sig, _on_ending_signal) for sig in caught} if in_main_thread else {}
        try:
            with warnings.catch_warnings():
                # A warning (numpy's RuntimeWarning, a DeprecationWarning) is not a result: it
                # would be an extra, unexplained line; the code avoids their causes instead.
                warnings.simplefilter("ignore")
                guard_command_files(())  # a command sets its own (check_outputs); none left from another
                with rescuing():  # an output that could not be written leaves a rescue copy
                    code = super().main(args, prog_name, complete_var, standalone_mode=False, **extra)
        except click.exceptions.Abort:  # an interrupt outside the main thread's handler (none expected)
            click.echo("sectorbench: interrupted", err=True)
            code = 128 + signal.SIGINT
        except Terminated as stop:
            click.echo(ending_line(stop.signum), err=True)
            code = 128 + stop.signum
        except _NO_COMMAND as exc:  # `sectorbench` alone asks for the help, as --help does
            click.echo(exc.ctx.get_help())
            code = 0
        except click.ClickException as exc:  # click lists a choice's values one a line: joined
            click.echo(f"sectorbench: error: {' '.join(exc.format_message().split())}", err=True)
            code = 2
        except SectorbenchError as exc:
            click.echo(f"sectorbench: error: {error_text(exc)}", err=True)
            code = 2
        except MemoryError as exc:  # the machine's limit, not a bug; files written before it stay
            if os.environ.get("SECTORBENCH_DEBUG"):
                raise
            said = shown_line(str(exc)) or "an allocation failed"
            click.echo(f"sectorbench: error: out of memory: {said} ({self._smaller(args)})", err=True)
            code = 2
        except Exception as exc:  # a bug: one line unless asked for the traceback
            if os.environ.get("SECTORBENCH_DEBUG"):
                raise
            if isinstance(exc, OSError) and exc.errno in MACHINE_LIMITS:
                # a write no named output made (a scratch file) hit the machine's limits: the
                # user's to fix, not a bug of ours
                where = f": {shown_line(os.fsdecode(exc.filename))}" if exc.filename is not None else ""
                hint = open_files_hint() if exc.errno == errno.EMFILE else ""
                click.echo(f"sectorbench: error: {exc.strerror}{where}{hint}", err=True)
            else:
                click.echo(
                    f"sectorbench: internal error: {type(exc).__name__}: {shown_line(str(exc))} "
                    "(set SECTORBENCH_DEBUG=1 for the traceback)",
                    err=True,
                )
            code = 2
        finally:
            for sig, handler in previous.items():
                # Exiting, the command's work is done and its status decided: a signal while the
                # process exits (its fork server closing, Python's teardown: ~0.1 s) is ignored.
                # The default actions were back there, and a Ctrl-C or SIGTERM right after
                # "saved out.json" killed the process (-SIGINT, -SIGTERM), its status lost.
                signal.signal(sig, signal.SIG_IGN if exiting else handler)
        return code


class Reporter:
    """Progress on stderr: a live bar on a terminal, else a heartbeat line every HEARTBEAT_S.

    update(what, left_s): what is being done (e.g. "calibrating basic [-O2, inline]") and
    the seconds expected to be left, when known.
    """

    def __init__(self, console: Console | None = None, heartbeat_s: float | None = None):
        self.console = console or stderr
        self.heartbeat_s = heartbeat_s or HEARTBEAT_S
        self.what, self.left_s, self.updated = "starting", None, time.monotonic()
        self.started = self.updated
        self._bar: Progress | None = None
        self._stop = threading.Event()
        self._thread: threading.Thread | None = None

    def __enter__(self) -> Reporter:
        if self.console.is_terminal:
            self._bar = Progress(
                TextColumn("{task.description}", markup=False),  # it names kernels and flags: as written
                BarColumn(),
                TextColumn("{task.fields[left]}"),
                TimeElapsedColumn(),
                console=self.console,
                transient=True,
            )
            self._bar.__enter__()
            self._task = self._bar.add_task(self.what, total=None, left="")
        else:
            self._thread = threading.Thread(target=self._beat, daemon=True)
            self._thread.start()
        return self

    def __exit__(self, *exc) -> None:
        self._stop.set()
        if self._thread is not None:
            self._thread.join()
        if self._bar is not None:
            self._bar.__exit__(*exc)

    def __call__(self, what: str, left_s: float | None = None, **_) -> None:
        self.update(what, left_s)

    def update(self, what: str, left_s: float | None = None) -> None:
        self.what, self.left_s, self.updated = what, left_s, time.monotonic()
        if self._bar is not None:
            elapsed = self.updated - self.started
            total = None if left_s is None else elapsed + left_s
            left = "" if left_s is None else f"about {duration(left_s)} left"
            self._bar.update(self._task, description=what, total=total, completed=elapsed, left=left)

    def status(self) -> str:
        now = time.monotonic()
        text = f"sectorbench: {self.what} ({duration(now - self.started)} elapsed"
        if self.left_s is not None:
            text += f", about {duration(max(0.0, self.left_s - (now - self.updated)))} left"
        return text + ")"

    def _beat(self) -> None:
        while not self._stop.wait(self.heartbeat_s):
            click.echo(self.status(), err=True)


@click.group(cls=OneLineErrors, context_settings={"help_option_names": ["-h", "--help"]})
@click.version_option(__version__, prog_name="sectorbench")
def main():
    """Benchmark and verify small float32 geometric kernels written in C (point in sector,
    point in triangle, a rotated polygon's bounding vertices)."""
    all_families()  # a family module that fails to import stops here, in one line


class OutputFailed(SectorbenchError):
    """An output could not be written after the work was done; the results went to a rescue file."""


@contextmanager
def rescuing(results_json: Callable[[], str] | None = None, near: Path | None = None):
    """Writes of outputs after the work: if one fails, a rescue file is written and the error
    names both paths; exit status 2, as for any output error.  Nothing computed is lost to a
    full disk or a file that appeared meanwhile.

    With `results_json`, any error inside is rescued with the results (`results_json()`,
    beside `near`): a run's every output can be remade from them.  Without, a failed
    write_atomic (WriteFailed) is rescued with what that output would have held, beside it
    and with its suffix; OneLineErrors wraps every command in this, so no output is left out."""
    try:
        yield
    except OutputFailed:
        raise
    except SectorbenchError as exc:
        if results_json is not None:
            write, suffix = text_writer(results_json()), RESCUE_SUFFIX
        elif isinstance(exc, WriteFailed):
            write, near, suffix = exc.write, exc.path, exc.path.suffix
        else:
            raise
        try:
            where = write_rescue(write, near, suffix)
        except SectorbenchError as lost:
            raise OutputFailed(f"{exc}; {lost}") from None
        raise OutputFailed(f"{exc}; the results are saved in {shown_path(where)}") from None


def load_plain(path: Path):
    """A saved run; of an A/B run (run --against) its head rows, said in one line: its rows come
    in pairs, one a side, which a gate or an export met twice ("duplicate row")."""
    from ..model.results import head_rows, load

    result, said = head_rows(load(path), str(path))
    if said:
        note(said)
    return result


def result_json(result) -> Callable[[], str]:
    return lambda: json.dumps(result.to_dict(), indent=1) + "\n"


def run_gate(
    baseline,
    current,
    config,
    markdown_path,
    force,
    baseline_label,
    current_label,
    *,  # by name: a positional revise once landed in rescue's place
    rescue: Callable[[], str] | None = None,
    revise=None,
) -> None:
    """revise(report) -> report, if given, runs between the gate and its output (instruction
    counts, --confirm's re-measurement)."""
    from ..compare.gate import gate, row_label
    from ..model.results import shows_cc
    from ..present.report import fit, gate_drop, gate_markdown, gate_table

    report = gate(baseline, current, config)
    if revise is not None:
        report = revise(report)
    console = stdout()
    console.print(fit(gate_table(report, baseline_label, current_label), console.width, gate_drop(report)))
    if markdown_path is not None:
        with rescuing(rescue, markdown_path):
            write_text_atomic(markdown_path, gate_markdown(report, baseline_label, current_label), overwrite=force)
        note(f"saved {shown_path(markdown_path)}")
    show_cc = shows_cc([r.key for r in report.rows] + [f.key for f in report.failures])
    names = ", ".join(row_label(r.key, show_cc) for r in report.regressions)
    failed = ", ".join(f"{row_label(f.key, show_cc)} {f.status}" for f in report.failures)
    note(
        (f"{len(report.failures)} failure(s): {failed}; " if failed else "")
        + f"{len(report.regressions)} regression(s)"
        + (f": {names}" if names else "")
        + f", {len(report.improvements)} improvement(s)"
    )
    click.get_current_context().exit(report.exit_code)


def write_exports(result, exports, force: bool, gated: bool = False, saved: list[Path] = ()) -> None:
    """Each --export FORMAT=PATH, atomically (its path was checked before the run); one that
    fails leaves the results in a rescue file, from which `export` makes it again.

    gated: a gate follows.  When no row ran (each crashed, timed out or was skipped) there is
    nothing to export, and the gate fails on exactly that, naming the rows: the exports are
    then left unwritten with one line each, and the gate decides (its "nothing to export",
    exit 2, came first and the gate, its exit 1 and its Markdown never did)."""
    from ..compare.export import nothing_to_export, render

    if not exports:
        return
    reason = nothing_to_export(result)
    if gated and reason:  # the gate fails on those rows, naming them
        for fmt, path in exports:
            note(f"not saved {shown_path(path)} ({fmt}): {reason}; the gate says why")
        return
    if saved and reason:
        # the results are in the file just saved (`saved`): a rescue copy of them said, wrongly,
        # that they were saved nowhere else
        raise SectorbenchError(f"{reason} (the results are saved in {shown_path(saved[0])})")
    say_rows_left_out(result)
    for fmt, path in exports:
        with rescuing(result_json(result), path):
            note(f"saved {shown_path(write_text_atomic(path, render(result, fmt), overwrite=force))} ({fmt})")


def say_rows_left_out(result) -> None:
    """A line for each row an export leaves out because its answers differ."""
    from ..compare.export import rows_left_out

    for name, why in rows_left_out(result):
        note(f"not exported: {name}: {why}")


def write_json(
    result, json_path: Path | None, force: bool, save_to_results: bool = False, label: str = "run"
) -> list[Path]:
    """The results JSON where asked; the paths written."""
    saved = []
    if json_path is not None:
        with rescuing(result_json(result), json_path):
            saved.append(save(result, json_path, overwrite=force))
            note(f"saved {shown_path(saved[-1])}")
    if save_to_results:
        with rescuing(result_json(result), RESULTS_DIR / "x"):
            saved.append(save_new(result, RESULTS_DIR, label))
            note(f"saved {shown_path(saved[-1])}")
    return saved
