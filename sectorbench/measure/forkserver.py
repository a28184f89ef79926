"""Where build workers come from: a fork server, one per parent process.

A worker started as a new interpreter spends ~0.2 s of CPU importing numpy, cffi and the
families and parsing the C interface before it serves anything (tools/worker_startup.py);
a run starts one per build, and one more after every crash or timeout.  The fork server is
that interpreter, started once (on the first worker) and never given a library: each worker
is a fork of it, so it starts with those imports done and with the fork server's clean
state, never with anything of another worker's (no library has been loaded, no kernel has
run, the floating-point environment is the default one).

Protocol, on a private SOCK_SEQPACKET pair: the parent sends one request per worker (JSON:
the library, --peers, the reference library (server.main), the parent's environment and
working directory) with five file descriptors (the worker's channel, stdout, stderr, answers
file, and the write end of a status pipe); the fork server forks, answers the worker's pid, and when the
worker ends writes its wait status into that pipe: the parent's `WorkerProcess` reads it
(poll/wait), as it would a child's.
The fork server dies with its parent, and each worker with the fork server (PR_SET_PDEATHSIG),
so a parent killed by SIGKILL leaves nothing behind.  Each worker runs in its own process
group, as before.

A kernel can change its worker's parent, the fork server (getppid(): sched_setaffinity,
setpriority, sched_setscheduler, prlimit), and every worker forked after it would inherit the
change (a 1 s RLIMIT_CPU killed later innocent rows).  Not every change can be undone (a
lowered hard limit, a raised nice value), so the fork server compares what a fork inherits
from it with its start-up snapshot (measure/process_state.py) before each fork, and when it
changed it forks nothing more: it answers "changed", and the parent retires it (it stays to
reap the workers it forked, and exits after the last) and starts a fresh one.  The worker's
own snapshot reads its parent's state too, so the change is charged to the row that made it.
See docs/worker.md.
"""

from __future__ import annotations

import atexit
import contextlib
import json
import os
import select
import signal
import socket
import struct
import subprocess
import sys
import tempfile
import threading
import time
import traceback

from ..errors import SectorbenchError
from .deadlines import STARTUP_S

#: Bytes of a request (its JSON; the environment is most of it) the fork server reads at most.
MAX_REQUEST_BYTES = 1 << 20
#: What the fork server's pipe carries when a worker ends: its wait status (os.waitpid).
STATUS = struct.Struct("i")


#: How often a wait for the fork server sends it SIGCONT (a kernel may have stopped it).
CONTINUE_EVERY_S = 1.0
#: Signals the fork server ignores: a kernel may send them to its parent (getppid() is the fork
#: server), and the fork server's death would kill every worker, not only the kernel's.  Its own
#: ends are the parent's: EOF on its control socket, SIGKILL, the parent's death.
IGNORED_SIGNALS = tuple(
    getattr(signal, name)
    for name in (
        "SIGTERM",
        "SIGINT",
        "SIGHUP",
        "SIGQUIT",
        "SIGUSR1",
        "SIGUSR2",
        "SIGALRM",
        "SIGTSTP",
        "SIGTTIN",
        "SIGTTOU",
    )
    if hasattr(signal, name)
)


def _continue(pid: int) -> None:
    with contextlib.suppress(OSError):
        os.kill(pid, signal.SIGCONT)


class ForkServerError(SectorbenchError):
    """The fork server could not be started, or stopped answering."""


class ForkServerChanged(ForkServerError):
    """The fork server's own state changed since it started (a kernel changed its parent): it
    forks no worker from it."""


class WorkerProcess:
    """A worker forked by the fork server: what subprocess.Popen offers of a child (pid, poll,
    wait, kill, returncode), its exit status read from the pipe the fork server writes."""

    def __init__(self, pid: int, status_fd: int, fork_server_pid: int):
        self.pid = pid
        self.returncode: int | None = None
        self._status_fd = status_fd
        self._fork_server_pid = fork_server_pid

    def poll(self) -> int | None:
        if self.returncode is None and select.select([self._status_fd], [], [], 0)[0]:
            self._read_status()
        return self.returncode

    def wait(self, timeout: float | None = None) -> int:
        """The worker's exit status, once the fork server has reaped it.  A kernel may stop its
        parent, the fork server (kill(getppid(), SIGSTOP)): each second without the status, the
        fork server is continued, so no wait hangs on it."""
        deadline = None if timeout is None else time.monotonic() + timeout
        while self.returncode is None:
            slice_s = CONTINUE_EVERY_S if deadline is None else min(CONTINUE_EVERY_S, deadline - time.monotonic())
            if select.select([self._status_fd], [], [], max(slice_s, 0.0))[0]:
                self._read_status()
            elif deadline is not None and time.monotonic() >= deadline:
                raise subprocess.TimeoutExpired(f"worker {self.pid}", timeout)
            else:
                _continue(self._fork_server_pid)
        return self.returncode

    def kill(self) -> None:
        if self.poll() is None:
            try:
                os.kill(self.pid, signal.SIGKILL)
            except ProcessLookupError:
                pass

    def _read_status(self) -> None:
        data = os.read(self._status_fd, STATUS.size)
        os.close(self._status_fd)
        self._status_fd = -1
        # Nothing: the fork server died first, and its workers were killed with it.
        self.returncode = os.waitstatus_to_exitcode(STATUS.unpack(data)[0]) if data else -signal.SIGKILL

    def __del__(self):
        if self._status_fd >= 0:
            os.close(self._status_fd)


class ForkServer:
    """The parent's side: starts the fork server, asks it for workers."""

    def __init__(self, env: dict[str, str]):
        self._owner = os.getpid()
        self._lock = threading.Lock()
        self._requests = 0
        ours, theirs = socket.socketpair(socket.AF_UNIX, socket.SOCK_SEQPACKET)
        self._said = tempfile.TemporaryFile()  # its own start-up errors, if any
        command = [sys.executable, "-m", "sectorbench.measure.forkserver"]
        command += ["--control", str(theirs.fileno()), "--parent", str(os.getpid())]
        try:
            self._process = subprocess.Popen(
                command,
                stdin=subprocess.DEVNULL,
                stdout=self._said,
                stderr=self._said,
                env=env,
                pass_fds=(theirs.fileno(),),
                # The terminal's ^C is the parent's to handle, and in a session of their own
                # the workers have no terminal a kernel could open (/dev/tty) and leave changed.
                start_new_session=True,
            )
        finally:
            theirs.close()
        ours.settimeout(STARTUP_S)  # a fork server that stops answering is an error, not a hang
        self._control = ours

    @property
    def ended(self) -> bool:
        return self._process.poll() is not None

    @property
    def ending(self) -> bool:
        """Ended, or on its way (a kernel SIGKILLed its parent, the fork server: poll() says
        nothing until it has exited, and its socket is closed before that)."""
        from .process_state import ending

        return self.ended or ending(self._process.pid) is not None

    @property
    def usable(self) -> bool:
        """Started by this process (not inherited through a fork) and still running."""
        return self._owner == os.getpid() and self._process.poll() is None

    def spawn(
        self,
        library: str,
        peers: bool,
        channel_fd: int,
        stdout_fd: int,
        stderr_fd: int,
        answers_fd: int,
        env: dict[str, str],
        reference: str | None = None,
    ) -> WorkerProcess:
        status_read, status_write = os.pipe()
        _continue(self._process.pid)  # a kernel may have stopped it (see WorkerProcess.wait)
        try:
            with self._lock:
                self._requests += 1
                request = {"id": self._requests, "library": library, "peers": peers, "reference": reference}
                request |= {"env": env, "cwd": _cwd()}
                try:
                    fds = [channel_fd, stdout_fd, stderr_fd, answers_fd, status_write]
                    socket.send_fds(self._control, [json.dumps(request).encode()], fds)
                    answer = {}
                    while answer.get("id") != request["id"]:  # a reply to a request interrupted earlier: not ours
                        reply = self._control.recv(256)
                        if not reply:
                            raise ForkServerError(f"the workers' fork server ended: {self._last_words()}")
                        answer = json.loads(reply)
                except OSError as exc:
                    raise ForkServerError(f"the workers' fork server stopped answering: {exc}") from None
            if "changed" in answer:
                raise ForkServerChanged(answer["changed"])
            if "error" in answer:
                raise ForkServerError(f"the workers' fork server could not fork: {answer['error']}")
        except BaseException:
            os.close(status_read)
            raise
        finally:
            os.close(status_write)
        return WorkerProcess(int(answer["pid"]), status_read, self._process.pid)

    def _last_words(self) -> str:
        self._said.seek(0)
        lines = self._said.read().decode(errors="replace").strip().splitlines()
        return lines[-1] if lines else f"exit status {self._process.poll()}"

    def close(self) -> None:
        """End the fork server (its workers go with it)."""
        if self._owner != os.getpid():
            return
        self._control.close()  # it reads EOF and exits
        try:
            self._process.wait(timeout=10)
        except subprocess.TimeoutExpired:
            self._process.kill()
        except BaseException:  # interrupted meanwhile: it is not left running
            self._process.kill()
            raise
        finally:
            self._process.wait()
            self._said.close()


def _cwd() -> str | None:
    """The working directory a worker takes over (None: the parent's was removed)."""
    try:
        return os.getcwd()
    except OSError:
        return None


_server: ForkServer | None = None
_server_lock = threading.Lock()
#: Fork servers that refused to fork after their state changed: not ended, since a fork server's
#: workers die with it (other builds' workers may still be running); each exits after its last
#: worker (a kernel that changes it on every call retired hundreds in one verify, 36 MB each).
_retired: list[ForkServer] = []


def fork_server(env: dict[str, str]) -> ForkServer:
    """This process's fork server, started on first use (again if it died, or if this process
    is a fork of the one that started it)."""
    global _server
    with _server_lock:
        if _server is None or not _server.usable:
            if _server is not None:
                _server.close()  # a dead one's pipes (nothing, if another process started it)
            _server = ForkServer(env)
            atexit.register(_close_at_exit, _server)
        return _server


def _close_at_exit(server: ForkServer) -> None:
    """The fork server, as the process exits: a Ctrl-C meanwhile ends it at once, with no
    traceback (a program using the library; the CLI ignores the signals by then: its work is
    done, its exit status stands)."""
    with contextlib.suppress(KeyboardInterrupt):
        server.close()


def spawn_worker(
    library: str, peers: bool, files: tuple[int, int, int, int], env: dict[str, str], reference: str | None
) -> tuple[WorkerProcess, str | None]:
    """A worker from this process's fork server (see ForkServer.spawn; `files`: its channel,
    stdout, stderr and answers file), and how the fork server had changed if it was replaced first (else None)."""
    server = fork_server(env)
    try:
        return server.spawn(library, peers, *files, env, reference), None
    except ForkServerChanged as exc:
        _give_up(server, retire=True)
        return fork_server(env).spawn(library, peers, *files, env, reference), str(exc)
    except ForkServerError:
        if not server.ending:  # it stopped answering for a reason of its own: that error stands
            raise
        # A kernel killed it just now (kill(getppid(), SIGKILL)): its end is that kernel's row's
        # note (process_state.ending), and a fresh fork server forks this worker.
        _give_up(server, retire=False)
        return fork_server(env).spawn(library, peers, *files, env, reference), None


def _give_up(server: ForkServer, retire: bool) -> None:
    """No more workers from `server`: the next fork_server() starts a fresh one.  A changed one
    is retired (its workers, other builds' among them, die with it: it exits after its last),
    a dying one closed."""
    global _server
    with _server_lock:
        for ended in [old for old in _retired if old.ended]:  # each holds two descriptors
            ended.close()
            _retired.remove(ended)
        if _server is server:  # not the fresh one another thread, refused too, started meanwhile
            if retire:
                _retired.append(server)
            else:
                server.close()
            _server = None


def close_fork_server() -> None:
    """End this process's fork server, if it has one (the next worker starts another)."""
    global _server
    with _server_lock:
        if _server is not None:
            _server.close()
            _server = None


# ---------------------------------------------------------------- the fork server itself


def _warm() -> None:
    """Import and parse what every worker needs, once, before any fork."""
    from ..families import all_families
    from ..native.loader import interface
    from . import server  # noqa: F401  (imported here, once, for every worker forked later)

    all_families()
    interface()


def _serve(control: socket.socket) -> int:
    from . import process_state, server

    wake_read, wake_write = os.pipe()
    os.set_blocking(wake_write, False)
    signal.set_wakeup_fd(wake_write)
    signal.signal(signal.SIGCHLD, lambda *_: None)  # the wakeup fd says a worker ended
    statuses: dict[int, int] = {}  # worker pid -> write end of its status pipe
    fork_server_pid = os.getpid()
    started = process_state.inherited(process_state.snapshot(parent=False))
    changed = None  # how this fork server's state changed since it started: it forks no more
    while True:
        readable = select.select([control, wake_read], [], [])[0]
        if wake_read in readable:
            os.read(wake_read, 4096)
        _reap(statuses)
        _end_strays(process_state, statuses)
        if changed and not statuses:  # retired, and its last worker is gone: nothing left to serve
            return 0
        if control not in readable:
            continue
        try:
            data, fds, _, _ = socket.recv_fds(control, MAX_REQUEST_BYTES, 5)
        except OSError:
            return 0
        if not data:  # the parent closed its end: done (running workers finish on their own)
            return 0
        channel_fd, stdout_fd, stderr_fd, answers_fd, status_fd = fds
        request = json.loads(data)
        changed = changed or _change_since(process_state, started)
        if changed:  # never fork from a damaged parent: the parent starts a fresh fork server
            for fd in fds:
                os.close(fd)
            control.send(json.dumps({"id": request["id"], "changed": changed}).encode())
            if not statuses:
                return 0
            continue
        try:
            pid = os.fork()
        except OSError as exc:
            for fd in fds:
                os.close(fd)
            control.send(json.dumps({"id": request["id"], "error": str(exc)}).encode())
            continue
        if pid == 0:  # the worker: never returns to this loop
            code = 1
            try:
                os.setpgid(0, 0)
                signal.set_wakeup_fd(-1)
                for number in (signal.SIGCHLD, *IGNORED_SIGNALS):  # a worker's signals are as a child's
                    signal.signal(number, signal.SIG_DFL)
                for fd in (wake_read, wake_write, status_fd, *statuses.values()):
                    os.close(fd)
                control.close()
                null = os.open(os.devnull, os.O_RDONLY)
                for source, target in ((null, 0), (stdout_fd, 1), (stderr_fd, 2)):
                    os.dup2(source, target)
                    os.close(source)
                if request["cwd"] is not None:
                    with contextlib.suppress(OSError):  # removed since: stay, as a child would
                        os.chdir(request["cwd"])
                os.environ.clear()
                os.environ.update(request["env"])
                options = ["--channel", str(channel_fd), "--answers", str(answers_fd), "--parent", str(fork_server_pid)]
                options += ["--peers"] if request["peers"] else []
                options += ["--reference", request["reference"]] if request["reference"] else []
                code = server.main([request["library"], *options])
            except BaseException:
                traceback.print_exc()
            finally:
                server.flush_stdio()  # os._exit flushes nothing: what was printed last is kept
                os._exit(code)
        try:
            os.setpgid(pid, pid)  # as the worker does itself: whichever runs first
        except OSError:
            pass
        for fd in (channel_fd, stdout_fd, stderr_fd, answers_fd):
            os.close(fd)
        statuses[pid] = status_fd
        control.send(json.dumps({"id": request["id"], "pid": pid}).encode())


def _change_since(process_state, started) -> str | None:
    """How what a worker forked now would inherit of this process differs from what it was at
    start-up (process_state.inherited), or None."""
    try:
        return process_state.describe_change(started, process_state.inherited(process_state.snapshot(parent=False)))
    except Exception as exc:  # unreadable now: no fork from here either
        return f"its state could not be read: {type(exc).__name__}: {exc}"


def _end_strays(process_state, statuses: dict[int, int]) -> None:
    """End every child of this fork server that is not a worker it forked: what a kernel left
    running outside its worker's process group (setsid, a daemon's double fork), adopted
    (server.adopt_orphans) when that worker died.  Its deaths wake the serve loop, which reaps them."""
    for pid in process_state.child_processes() - statuses.keys():
        with contextlib.suppress(OSError):  # the group it leads (setsid), if it does
            os.killpg(pid, signal.SIGKILL)
        with contextlib.suppress(OSError):
            os.kill(pid, signal.SIGKILL)


def _reap(statuses: dict[int, int]) -> None:
    while True:  # workers, and the strays adopted from them
        try:  # an ended worker, left unreaped for now (WNOWAIT)
            ended = os.waitid(os.P_ALL, 0, os.WEXITED | os.WNOHANG | os.WNOWAIT)
        except ChildProcessError:
            return
        if ended is None:
            return
        pid = ended.si_pid
        if pid in statuses:
            # What a kernel started and left in the worker's process group (a system("... &"))
            # ends with it.  Safe while the worker is unreaped: its pid, the group's id, is not reused.
            with contextlib.suppress(OSError):
                os.killpg(pid, signal.SIGKILL)
        _, status = os.waitpid(pid, 0)
        fd = statuses.pop(pid, None)
        if fd is not None:
            try:
                os.write(fd, STATUS.pack(status))
            except OSError:  # the parent no longer waits for it
                pass
            os.close(fd)


def main(argv: list[str]) -> int:
    from .server import adopt_orphans, die_with_parent

    control = socket.socket(fileno=int(argv[argv.index("--control") + 1]))
    for number in IGNORED_SIGNALS:
        signal.signal(number, signal.SIG_IGN)
    die_with_parent(int(argv[argv.index("--parent") + 1]))
    adopt_orphans()
    _warm()
    from . import process_state

    try:
        return _serve(control)
    finally:  # what it adopted goes with it, never to init (its workers die with it anyway)
        _end_strays(process_state, {})


if __name__ == "__main__":
    sys.exit(main(sys.argv[1:]))
