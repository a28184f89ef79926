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
import fcntl
import os
import shutil
import signal
import stat
import subprocess
import tempfile
import threading
import time
from collections.abc import Callable, Iterator
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


#: A lock file in each scratch directory of TMPDIR, held (flock) while its command runs: the
#: kernel lets it go when the process ends, however it ends.
SCRATCH_LOCK = ".sectorbench-lock"
#: A scratch directory of TMPDIR whose lock no process holds, untouched this long, was left by
#: a command killed with SIGKILL (a CI job's timeout; nothing of ours runs then), and the next
#: command removes it.  Its lock is taken microseconds after the directory is made: the wait
#: only covers that moment.
ABANDONED_AFTER_S = 60.0


@contextlib.contextmanager
def scratch_directory(prefix: str, parent: Path | None = None, suffix: str | None = None) -> Iterator[Path]:
    """A new temporary directory, removed whole when the block ends, however it ends.  In
    TMPDIR (no `parent`) it holds a lock while the block runs, and those left by a command
    killed with SIGKILL are removed first (remove_abandoned): a run's scene files, verify's
    ~20 case scenes were left for ever on a CI runner whose job timeouts kill."""
    path = lock = None
    try:
        with signals_held():
            path, lock = open_scratch_directory(prefix, parent, suffix)
        yield path
    finally:
        if path is not None:
            with signals_held():
                remove_scratch_directory(path, lock)


def open_scratch_directory(
    prefix: str, parent: Path | None = None, suffix: str | None = None
) -> tuple[Path, int | None]:
    """scratch_directory's directory for a holder that outlives a block (a Dask worker's judge,
    kept between batches), and its lock's descriptor (None outside TMPDIR); give both to
    remove_scratch_directory.  Those of a process killed with SIGKILL are removed first."""
    if parent is None:
        remove_abandoned(Path(tempfile.gettempdir()), lambda entry: _scratch_lock(entry, prefix), is_dir=True)
    path = Path(tempfile.mkdtemp(suffix=suffix, prefix=prefix, dir=parent))
    return path, locked_or_none(path / SCRATCH_LOCK, os.O_CREAT) if parent is None else None


def remove_scratch_directory(path: Path, lock: int | None) -> None:
    shutil.rmtree(path, ignore_errors=True)
    if lock is not None:
        os.close(lock)


def _scratch_lock(entry: os.DirEntry, prefix: str) -> Path | None:
    return Path(entry.path) / SCRATCH_LOCK if entry.name.startswith(prefix) else None


def locked_or_none(path: Path, flags: int = 0) -> int | None:
    """An open descriptor of `path` holding its exclusive lock; None where another holds it."""
    fd = os.open(path, os.O_RDWR | os.O_CLOEXEC | os.O_NOFOLLOW | flags, 0o600)
    try:
        fcntl.flock(fd, fcntl.LOCK_EX | fcntl.LOCK_NB)
    except OSError:
        os.close(fd)
        return None
    return fd


def remove_abandoned(parent: Path, lock_of: Callable[[os.DirEntry], Path | None], is_dir: bool) -> None:
    """Remove this user's entries of `parent` (directories, or regular files) whose lock,
    `lock_of(entry)` (None: not one of ours), no process holds and which are untouched for
    ABANDONED_AFTER_S: what a command killed with SIGKILL left.  An entry without its lock
    file (of a version that made none) is left alone."""
    try:
        entries = list(os.scandir(parent))
    except OSError:
        return
    for entry in entries:
        lock_path = lock_of(entry)
        if lock_path is None:
            continue
        try:
            status = entry.stat(follow_symlinks=False)
            kind_ok = stat.S_ISDIR(status.st_mode) if is_dir else stat.S_ISREG(status.st_mode)
            if not kind_ok or status.st_uid != os.getuid() or time.time() - status.st_mtime < ABANDONED_AFTER_S:
                continue
            lock = locked_or_none(lock_path)
        except OSError:  # no lock file, or gone meanwhile
            continue
        if lock is None:  # held: a live command's
            continue
        try:
            with signals_held():
                if is_dir:
                    shutil.rmtree(entry.path, ignore_errors=True)
                else:
                    os.unlink(entry.path)
        except OSError:
            pass
        finally:
            os.close(lock)


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
