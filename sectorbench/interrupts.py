"""What a signal must not cut in half: starting a process, and removing scratch files; and
the one way to run a short command that must not outlive us.

sectorbench ends on Ctrl-C and on the signals the CLI unwinds on like it (cli/app.py): their
handler raises, and the Python code running at that moment stops where it is.  Two things
must not stop half-way: starting a process (one started and not yet returned would run on
with nothing to kill it) and removing a scratch directory (an interrupted rmtree leaves it
half deleted, while the exit line says "scratch files removed").  Here they run with those
signals held: one that arrives meanwhile is raised again as soon as the step is whole.
"""

from __future__ import annotations

import contextlib
import os
import shutil
import signal
import subprocess
import tempfile
import threading
from collections.abc import Iterator
from pathlib import Path

#: The signals sectorbench ends on, each by unwinding (scratch files removed) to exit status
#: 128 + the signal: Ctrl-C (INT, 130), a CI runner cancelling (TERM, 143), a closed terminal or
#: ssh session (HUP), Ctrl-\ (QUIT, whose default would dump core and leave /tmp/sectorbench-*
#: behind).  The CLI catches Ctrl-C as these rather than as click's Abort, which prints an empty
#: line first.
ENDING_SIGNALS = (signal.SIGINT, signal.SIGTERM, signal.SIGHUP, signal.SIGQUIT)


@contextlib.contextmanager
def signals_held() -> Iterator[None]:
    """The ending signals are noted while the block runs and raised again when it ends (only
    the main thread receives signals: elsewhere this holds nothing)."""
    if threading.current_thread() is not threading.main_thread():
        yield
        return
    held: list[int] = []
    previous = {}
    for sig in ENDING_SIGNALS:
        handler = signal.getsignal(sig)
        if handler is not signal.SIG_IGN:  # ignored (nohup): stays ignored
            previous[sig] = signal.signal(sig, lambda signum, frame: held.append(signum))
    try:
        yield
    finally:
        for sig, handler in previous.items():
            signal.signal(sig, handler)
        if held:
            signal.raise_signal(held[0])


@contextlib.contextmanager
def children_start_deaf() -> Iterator[None]:
    """Processes started in the block (by this thread) begin with the ending signals blocked,
    held here meanwhile (signals_held).  A blocked mask survives exec where a handler does not:
    a child that its parent ends (a verify pool process) decides what the signals do to it
    (ignore_ending_signals) before one can stop it half-way through its start-up, where Ctrl-C
    printed a KeyboardInterrupt traceback from every pool process that was importing."""
    with signals_held():
        blocked = signal.pthread_sigmask(signal.SIG_BLOCK, ENDING_SIGNALS)
        try:
            yield
        finally:
            signal.pthread_sigmask(signal.SIG_SETMASK, blocked)


def ignore_ending_signals() -> None:
    """For a process its parent ends (by SIGKILL, which it cannot ignore): the terminal's Ctrl-C
    reaches the whole process group, and it must not stop a child half-way while its parent
    tidies up; one that came while it started (children_start_deaf) is dropped."""
    for sig in ENDING_SIGNALS:
        signal.signal(sig, signal.SIG_IGN)
    signal.pthread_sigmask(signal.SIG_UNBLOCK, ENDING_SIGNALS)


@contextlib.contextmanager
def scratch_directory(prefix: str, parent: Path | None = None, suffix: str | None = None) -> Iterator[Path]:
    """A new temporary directory, removed whole when the block ends, however it ends."""
    path = None
    try:
        with signals_held():
            path = Path(tempfile.mkdtemp(suffix=suffix, prefix=prefix, dir=parent))
        yield path
    finally:
        if path is not None:
            with signals_held():
                shutil.rmtree(path, ignore_errors=True)


def run_in_own_session(
    command: list[str], timeout: float, cwd: str | Path | None = None, env: dict | None = None
) -> subprocess.CompletedProcess:
    """One short command, output captured as text, in a session of its own: no terminal it
    could open, and on timeout (subprocess.TimeoutExpired) or when this process is interrupted
    it goes with every process it started (a `--cc` wrapper's children, what a kernel run
    under valgrind forked).  OSError if it does not run.

    Its output goes to memory files, not pipes, and the command is done when it exits: a
    wrapper that leaves a helper holding what it inherited (an sccache-like server started on
    first use) had `cc --version` wait for the helper's end, 60 s and then "does not run", and
    for ever where the helper had left the session, out of reach of the kill."""
    process = None
    with _capture_file() as out, _capture_file() as err:
        try:
            with signals_held():
                process = subprocess.Popen(
                    command,
                    cwd=cwd,
                    env=env,
                    stdin=subprocess.DEVNULL,
                    stdout=out,
                    stderr=err,
                    start_new_session=True,
                )
            process.wait(timeout=timeout)
        except BaseException:
            if process is not None:
                kill_session(process)
            raise
        said = [_read_back(stream) for stream in (out, err)]
    return subprocess.CompletedProcess(command, process.returncode, *said)


def _capture_file():
    """An anonymous file for a command's output: in memory where Linux offers it (a full or
    read-only TMPDIR is then no concern), else in TMPDIR."""
    if hasattr(os, "memfd_create"):
        return os.fdopen(os.memfd_create("sectorbench-output", os.MFD_CLOEXEC), "w+b")
    return tempfile.TemporaryFile()


def _read_back(stream) -> str:
    stream.seek(0)
    return stream.read().decode(errors="replace")


def kill_session(process: subprocess.Popen) -> None:
    """Kill a process started in its own session, and every process of its group."""
    with contextlib.suppress(ProcessLookupError, PermissionError):
        os.killpg(process.pid, signal.SIGKILL)
    process.communicate()  # every writer of its pipes was in the group: they reach EOF
