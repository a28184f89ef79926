"""verify beyond one core and one machine: its case batches judged by a process pool or a Dask cluster.

The client generates the batches (seeded per block, cases.batches), runs the loop checks,
and merges the batches' verdicts in batch order; where a batch is judged (the client
itself, one of `jobs` local processes, a Dask worker) and in which order batches finish
change nothing in the result.  Each process judges with build sessions of its own: a
local process builds (from the shared build cache) and starts its own workers; a Dask
worker receives the user's C sources and the headers beside them as text, builds its own
library from them and the kernels shipped in its installed sectorbench, and first reports
its environment fingerprint (compilers, CPU features): a worker whose compilers or CPU
features differ from the client's would judge other code on other hardware, so it is
refused, with the reason, and gets no batch.
"""

from __future__ import annotations

import asyncio
import atexit
import collections
import contextlib
import functools
import hashlib
import multiprocessing
import os
import platform
import socket
import tempfile
import threading
import uuid
from collections.abc import Callable, Iterable, Iterator
from concurrent.futures import CancelledError, ProcessPoolExecutor
from dataclasses import dataclass, field, replace
from pathlib import Path

from ..errors import SectorbenchError
from ..interrupts import open_scratch_directory, remove_scratch_directory
from ..version import __version__

#: Batches in flight per process: enough to keep every process busy while the client
#: generates the next batch, few enough to bound memory (each holds cases.BATCH_ROWS rows).
IN_FLIGHT_PER_JOB = 2
#: Seconds a Dask scheduler has to accept the connection and answer as one (the handshake and
#: an identity request included: a web server or a dashboard's port accepted and never answered).
CONNECT_TIMEOUT_S = 20
#: Local processes start by spawning: a forked child would inherit the client's pipes to its
#: own build workers and keep them open (they would never see end of input and exit).
START_METHOD = "spawn"
#: Seconds between checks, while the client waits for a batch judged on a cluster, that one of
#: the workers its batches are restricted to is still there: once every accepted worker has left
#: (killed; a nanny restarts it under another address, which no fingerprint accepted), the
#: batches would wait for ever (verify hung with no word).
WORKER_CHECK_S = 2.0
#: Seconds to gather a judged batch's outcome (a few kB) before looking again whether it was lost
#: with its worker.
GATHER_TIMEOUT_S = 10.0


def default_jobs() -> int:
    """One process per CPU this process may run on."""
    return len(os.sched_getaffinity(0)) if hasattr(os, "sched_getaffinity") else os.cpu_count() or 1


def check_jobs(jobs: int | None) -> None:
    if jobs is not None and jobs < 1:
        raise SectorbenchError(f"--jobs must be at least 1 (got {jobs})")


def outcomes(plan, batches: Iterable, local, live: dict, progress: Callable[..., None], alongside) -> Iterator:
    """Each batch's BatchOutcome, in batch order: judged by `local` (the client's own sessions)
    when one process is asked for or there is one batch, else by a process pool or a cluster.

    `alongside` (the loop checks, on the client's sessions) runs once, and has finished before
    the first outcome is yielded: first when the client judges, else while the batches are
    judged elsewhere, so that its work overlaps theirs; there its stop() (from the main thread)
    ends it early.  Close the iterator to leave early: the batches under way are abandoned."""
    config = plan.config
    batches = iter(batches)
    first = next(batches, None)
    second = next(batches, None) if first is not None else None
    numbered = enumerate(_chain(first, second, batches))
    jobs = config.jobs or default_jobs()
    if first is None or (not config.scheduler and (jobs == 1 or second is None)):
        alongside()
        for index, case_set in numbered:
            progress(f"batch {index + 1}: exact oracle and kernels")
            yield local.judge(index, case_set, live)
        return
    if config.scheduler:
        judged = _on_cluster(plan, numbered, live, config.scheduler, progress)
    else:
        judged = _in_processes(plan, numbered, live, jobs, progress, local.scratch)
    yield from _after(alongside, judged)


def _after(alongside, judged: Iterator) -> Iterator:
    """`judged`'s items, the first one only once `alongside`, run in a thread meanwhile, is done.

    Ended early (an interrupt, a failure), `judged` is closed at once (the pool or cluster
    abandons its batches) and `alongside.stop()` cuts the thread short: an interrupted verify
    waited for every loop check (tens of seconds) and for the batches under way."""
    failure: list[BaseException] = []
    # Waited for instead of the thread: a join() interrupted by a signal's exception marks the
    # thread ended (CPython 3.11), so the next join() returned at once and the client closed its
    # sessions under the running loop checks (EBADF: "internal error").
    done = threading.Event()

    def run():
        try:
            alongside()
        except BaseException as exc:  # re-raised in the caller's thread
            failure.append(exc)
        finally:
            done.set()

    threading.Thread(target=run, name="sectorbench-loop-checks").start()
    try:
        with contextlib.closing(judged):
            for number, item in enumerate(judged):  # the first next() sets the pool or cluster up and feeds it
                if number == 0:
                    done.wait()
                    if failure:
                        raise failure[0]
                yield item
    except BaseException:
        alongside.stop()
        raise
    finally:
        done.wait()  # the client's sessions close after this: the loop checks must be done with them
    if failure:
        raise failure[0]


def _chain(first, second, rest):
    if first is None:
        return
    yield first
    if second is not None:
        yield second
        yield from rest


def _in_order(submit: Callable, numbered, limit: int, progress, result: Callable = lambda f: f.result()) -> Iterator:
    """Submit every batch (at most `limit` in flight) and yield their outcomes in batch order
    (`result(future)` waits for one)."""
    pending: collections.deque = collections.deque()
    for index, case_set in numbered:
        pending.append(submit(index, case_set))
        while len(pending) >= limit:
            yield _done(pending.popleft(), progress, result)
    while pending:
        yield _done(pending.popleft(), progress, result)


def _done(future, progress, result):
    outcome = result(future)
    progress(f"batch {outcome.index + 1} judged")
    return outcome


# ---------------------------------------------------------------- local processes

_process_judge = None  # this pool process's LocalJudge


def _open_process_judge(plan, failed_loads: dict, client_scratch: Path, client_pid: int) -> None:
    global _process_judge
    from ..interrupts import ignore_ending_signals
    from ..measure.server import die_with_parent
    from ..measure.worker import FAILED_LOADS
    from .verify import LocalJudge

    ignore_ending_signals()  # the client ends this process (_abandon): a signal must not stop it half-way
    # ... and a client that cannot (SIGKILL, a crash) ends it too: it judged on, a hung kernel's
    # batch until its deadline, with no one to answer to
    die_with_parent(client_pid)
    FAILED_LOADS.update(failed_loads)  # the parent's: a failed load is not tried again here

    # In the client's scratch directory: a process the client kills leaves its files to the client's removal.
    scratch = tempfile.TemporaryDirectory(prefix="sectorbench-verify-job-", dir=client_scratch)
    _process_judge = LocalJudge.open(plan, Path(scratch.name))
    atexit.register(scratch.cleanup)
    atexit.register(_process_judge.close)


def _judge_in_process(index: int, case_set, live: dict):
    return _process_judge.judge(index, case_set, live)


def _in_processes(plan, numbered, live: dict, jobs: int, progress, scratch: Path) -> Iterator:
    progress(f"judging batches in {jobs} processes")
    context = multiprocessing.get_context(START_METHOD)
    from ..interrupts import children_start_deaf
    from ..measure.worker import FAILED_LOADS

    def submit(index, case_set):
        with children_start_deaf():  # a submit may start a process: whole, and deaf until it ignores them
            return pool.submit(_judge_in_process, index, case_set, live)

    judges = dict(initializer=_open_process_judge, initargs=(plan, dict(FAILED_LOADS), scratch, os.getpid()))
    with children_start_deaf():  # it starts multiprocessing's resource tracker, which ignores only INT and
        pool = ProcessPoolExecutor(jobs, mp_context=context, **judges)  # TERM: HUP or QUIT killed it (tracebacks)
    with pool:
        try:
            yield from _in_order(submit, numbered, IN_FLIGHT_PER_JOB * jobs, progress)
        except BaseException:
            _abandon(pool)
            raise


def _abandon(pool: ProcessPoolExecutor) -> None:
    """End the pool at once: the batches not started are cancelled, and those under way are not
    waited for (shutdown waited for each, and for the one each process had queued: 34 s after a
    Ctrl-C with the default kernels here): their processes are killed, and with them their fork
    servers and build workers (PR_SET_PDEATHSIG); their scratch files are in the client's."""
    processes = list((pool._processes or {}).values())  # no public way before Python 3.14's kill_workers
    # The pipe's read end closed, as CPython does itself from 3.11.7 (gh-94777): once the
    # processes are dead, the pool's feeder thread, blocked writing the next batch (megabytes)
    # into it, is released; before that, the shutdown below waited on it for ever (Debian 12's
    # Python 3.11.2: a Ctrl-C hung verify).  Before the kill: after it, the pool's own thread
    # closes it too, and two closes at once (EBADF) ended an interrupted verify as an internal
    # error (1 run of ~5 000 tests under make test).
    with contextlib.suppress(OSError):
        pool._call_queue._reader.close()
    for process in processes:
        process.kill()
    pool.shutdown(wait=True, cancel_futures=True)  # prompt now: it reaps the killed processes


# ---------------------------------------------------------------- environment fingerprint


def code_hash() -> str:
    """A hash of the installed sectorbench's code: its Python files and kernels_c (the family
    kernels a worker builds).  The version string alone is fixed between releases: a worker
    installed from another commit (a kernel's < made <=) judged other code and was accepted.
    Hashed once per state of the files (paths, sizes, modification times: a stat each), so a
    checkout edited while a process lives is hashed as it is now, as its builds will read it
    (the Python modules it imported before are not: edited_since_loaded)."""
    from ..native.build import KERNELS_DIR

    kernels = Path(KERNELS_DIR).resolve()
    # kernels_c's own files (its __init__.py) once, as kernels_c's: a wheel installs kernels_c inside
    # the package, a checkout holds it beside, and the same commit hashed apart in the two (a
    # worker installed from the wheel was refused by a client run from the checkout)
    files = [(name, p) for name, p in _python_files() if kernels not in p.parents]
    files += [(f"kernels_c/{p.relative_to(kernels).as_posix()}", p) for p in kernels.rglob("*") if p.is_file()]
    return _hashed(_state(files))


def _python_files() -> list[tuple[str, Path]]:
    package = Path(__file__).resolve().parent.parent
    return [(f"sectorbench/{p.relative_to(package).as_posix()}", p) for p in package.rglob("*.py")]


def _state(files: list[tuple[str, Path]]) -> tuple:
    state = []
    for name, path in sorted(files):
        if "__pycache__" not in path.parts:
            found = path.stat()
            state.append((name, str(path), found.st_size, found.st_mtime_ns))
    return tuple(state)


#: The package's Python files as this process imported them (a Dask worker imports this module
#: first, with the fingerprint): code_hash reads the files as they are now, and a worker started
#: before its checkout was updated (or its package reinstalled) matched a client started after
#: and was accepted, running the Python it had loaded (here an internal error, "'BatchOutcome'
#: object has no attribute 'output'"; another edit would have judged on silently).
_LOADED_PYTHON = _state(_python_files())


def edited_since_loaded() -> list[str]:
    """The package's Python files added, removed or changed since this process imported this module."""
    before = {name: rest for name, *rest in _LOADED_PYTHON}
    now = {name: rest for name, *rest in _state(_python_files())}
    return sorted(name for name in before.keys() | now.keys() if before.get(name) != now.get(name))


@functools.lru_cache(maxsize=4)
def _hashed(state: tuple) -> str:
    digest = hashlib.sha256()
    for name, path, _, _ in state:
        data = Path(path).read_bytes()
        digest.update(f"{name}\0{len(data)}\0".encode() + data)
    return digest.hexdigest()[:16]


def fingerprint(compilers: Iterable[str]) -> dict:
    """What decides whether a machine judges batches as the client would: its sectorbench (version
    and code_hash), its compilers and the CPU features its kernels may use (less those disabled
    with $SECTORBENCH_DISABLE_ISA)."""
    import numpy

    from ..model.kernels import disabled_features
    from ..native import environment

    cpu = environment.machine_fingerprint()["cpu"]
    compiled = {}
    for cc in sorted(set(compilers)):
        found = environment.compiler_fingerprint(cc)
        compiled[cc] = {
            "version": found.get("version_text") or found.get("error"),
            "march_native": (found.get("march_native") or {}).get("features"),
        }
    return {
        "host": platform.node(),
        "sectorbench": __version__,
        "code": code_hash(),
        "edited_since_loaded": edited_since_loaded(),
        "python": platform.python_version(),
        "numpy": numpy.__version__,
        "cpu_model": cpu.get("model_name"),
        "cpu_features": sorted(set(cpu.get("isa") or ()) - disabled_features()),
        "compilers": compiled,
    }


def refusal(client: dict, worker: dict) -> str | None:
    """Why a worker with fingerprint `worker` may not judge the client's batches, or None."""
    reasons = []
    if worker.get("sectorbench") != client.get("sectorbench"):
        reasons.append(f"sectorbench {worker.get('sectorbench')}, the client {client.get('sectorbench')}")
    elif worker.get("code") != client.get("code"):
        reasons.append(
            f"its sectorbench code differs from the client's (hash {worker.get('code')}, the client's "
            f"{client.get('code')}: installed from another commit, or edited?)"
        )
    if worker.get("edited_since_loaded"):
        edited = worker["edited_since_loaded"]
        shown = ", ".join(edited[:3]) + (f" and {len(edited) - 3} more" if len(edited) > 3 else "")
        reasons.append(
            f"its sectorbench Python files changed after that worker process loaded them ({shown}): "
            "it runs the code it loaded; restart it"
        )
    # The batches travel pickled, and the oracle computes with numpy: a worker with numpy 1.26 (the
    # client's 2.4) was accepted and could not read its first batch ("No module named
    # 'numpy._core.numeric'"), its connection dropped, and verify said only that every accepted
    # worker had left.
    for package, name in (("python", "Python"), ("numpy", "numpy")):
        if worker.get(package) != client.get(package):
            reasons.append(f"{name} {worker.get(package) or 'unknown'}, the client's {client.get(package)}")
    lacks = sorted(set(client["cpu_features"]) - set(worker["cpu_features"]))
    extra = sorted(set(worker["cpu_features"]) - set(client["cpu_features"]))
    if lacks or extra:
        parts = [f"lacks {', '.join(lacks)}" if lacks else "", f"has {', '.join(extra)} too" if extra else ""]
        reasons.append("CPU features differ from the client's: it " + " and ".join(p for p in parts if p))
    for cc, mine in client["compilers"].items():
        theirs = worker["compilers"].get(cc, {})
        if theirs.get("version") != mine["version"]:
            first = (theirs.get("version") or "missing").splitlines()[0]
            reasons.append(f"{cc} is {first!r}, the client's {mine['version'].splitlines()[0]!r}")
        elif theirs.get("march_native") != mine["march_native"]:
            reasons.append(f"{cc} -march=native means other features than at the client")
    return "; ".join(reasons) or None


# ---------------------------------------------------------------- a Dask cluster


@dataclass(frozen=True)
class ShippedPlan:
    """A BatchPlan whose user C sources travel as text (a cluster worker may not share the client's
    files), with the headers beside each (native.build.local_headers): the ones its build's
    identity counts, and the ones its quoted #include finds first.  Without them a header named
    like one of the family's (an edited nosqrt.h) resolved on the worker to the shipped
    kernels_c's, and the worker judged another kernel."""

    plan: object
    sources: tuple[tuple[str, str], ...]  # (the client's path, its text)
    headers: tuple[tuple[str, str], ...] = ()  # (the client's path, its text): *.h beside a source
    run: str = field(default_factory=lambda: uuid.uuid4().hex)  # the client's run: its judges are one plan's


def ship(plan) -> ShippedPlan:
    from ..native.build import local_headers

    paths = dict.fromkeys(str(p) for build, _, _ in plan.sessions for p in build.extra_sources)
    headers = dict.fromkeys(str(h) for path in paths for h in local_headers(Path(path)))
    return ShippedPlan(
        plan,
        tuple((path, Path(path).read_text()) for path in paths),
        tuple((path, Path(path).read_text()) for path in headers),
    )


def _unpack(shipped: ShippedPlan, directory: Path) -> dict[str, Path]:
    """Write the shipped files into `directory`, each client folder's files into a folder of
    their own (so a source's quoted #include finds the headers that were beside it, and two
    sources of one name from two folders do not meet); the worker's path of each source."""
    folders: dict[str, Path] = {}
    written = {}
    for path, text in (*shipped.sources, *shipped.headers):
        client_folder = str(Path(path).parent)
        folder = folders.setdefault(client_folder, directory / str(len(folders)))
        folder.mkdir(exist_ok=True)
        local = folder / Path(path).name
        local.write_text(text)
        written[path] = local
    return written


#: Each worker thread's judge: thread id -> (the run it judges for, its LocalJudge, (its folder, that folder's lock)).
#: A thread judging for another run closes and removes its old judge; the client's end removes
#: its run's (_forget_run), and the worker's exit every one (a judge holds build worker
#: processes, its folder the shipped sources and the batch files).
_judges: dict[int, tuple] = {}
_judges_lock = threading.Lock()
_ended_runs: set[str] = set()
#: The threads judging a batch now: their judges are theirs to close, when the batch is done.
_busy: set[int] = set()


#: The prefix of a Dask worker's folder for one verify run's files (its builds' --source files).
WORKER_SCRATCH_PREFIX = "sectorbench-verify-worker-"


def _judge_on_worker(shipped: ShippedPlan, index: int, case_set, live: dict):
    from distributed import get_worker

    thread = threading.get_ident()
    with _judges_lock:
        if shipped.run in _ended_runs:  # a batch the client no longer waits for
            raise SectorbenchError("this verify run has ended")
        if not _ended_runs:  # once per worker process: its exit closes whatever is left
            _ended_runs.add("")
            atexit.register(_forget_run, None)
        _busy.add(thread)
    mine = None
    try:
        mine = _open_judge(shipped, thread)
        outcome = mine[1].judge(index, case_set, live)
    finally:
        with _judges_lock:
            _busy.discard(thread)
            ended = shipped.run in _ended_runs and mine is not None and _judges.get(thread) is mine
            if ended:  # the client ended the run under this batch: its _forget_run left the judge to this thread
                del _judges[thread]
        if ended:
            _close(mine)
    if ended:
        raise SectorbenchError("this verify run has ended")
    outcome.worker = {get_worker().address: {"batches": 1}}
    return outcome


def _open_judge(shipped: ShippedPlan, thread: int) -> tuple:
    """This thread's judge for the client's run (opened if it has none, or another run's)."""
    from .verify import LocalJudge

    with _judges_lock:
        mine, old = _judges.get(thread), None
        if mine is not None and mine[0] != shipped.run:  # another run's, taken out before it is closed: a
            mine, old = None, _judges.pop(thread)  # _forget_run of that run on another thread must not close it too
    if old is not None:
        _close(old)
    if mine is None:
        # locked, as a command's scratch directories are: those of a worker killed with SIGKILL
        # (a cluster torn down) were left in its TMPDIR for ever
        directory, lock = open_scratch_directory(WORKER_SCRATCH_PREFIX)
        try:
            written = _unpack(shipped, directory)
            plan = shipped.plan
            sessions = tuple(
                (replace(build, extra_sources=tuple(written[str(p)] for p in build.extra_sources)), peers, names)
                for build, peers, names in plan.sessions
            )
            mine = (shipped.run, LocalJudge.open(replace(plan, sessions=sessions), directory), (directory, lock))
        except BaseException:
            remove_scratch_directory(directory, lock)
            raise
        with _judges_lock:  # the open took seconds (a build): the client may have ended the run meanwhile,
            ended = shipped.run in _ended_runs  # and its _forget_run found nothing of this judge to close
            if not ended:
                _judges[thread] = mine
        if ended:
            _close(mine)
            raise SectorbenchError("this verify run has ended")
    return mine


def _forget_run(run: str | None) -> int:
    """Close and remove the judges (build workers, folders) of the client's run `run` (None:
    every run's); run on each worker when the client is done.  The number closed."""
    with _judges_lock:
        if run is not None:
            _ended_runs.add(run)
        ended = [thread for thread, (judged, _, _) in _judges.items() if run is None or judged == run]
        # A judge judging a batch now is closed by its own thread once the batch is done: closed
        # from here, under the batch's request (a kernel that hangs), the close failed (EBADF: two
        # threads on one build worker) and the judging thread, seeing that worker gone as after a
        # crash, started another that no one closed.  Its request is cut short instead.
        judging = [_judges[thread] for thread in ended if run is not None and thread in _busy]
        closing = [_judges.pop(thread) for thread in ended if run is None or thread not in _busy]
    for judge in judging:
        judge[1].interrupt()
    for judge in closing:
        _close(judge)
    return len(closing)


def _close(judge: tuple) -> None:
    _, local, (directory, lock) = judge
    try:
        local.close()
    finally:
        remove_scratch_directory(directory, lock)


def _distributed():
    try:
        import distributed
    except ImportError:
        raise SectorbenchError(
            "--scheduler needs dask.distributed, which is not installed: pip install 'sectorbench[cluster]'"
        ) from None
    return distributed


def check_scheduler(address: str) -> None:
    """Refuse, in one line and within CONNECT_TIMEOUT_S, an address that is no Dask scheduler's:
    malformed, where nothing listens, or where something else answers (a web server, the
    dashboard's port).  verify calls it in check_config, after the cheap checks (a kernel's name,
    the --input file), which would otherwise wait on an address that never answers, and before
    anything is built; and again just before connecting."""
    if not address.strip():
        raise SectorbenchError("--scheduler is empty: give a scheduler's address (tcp://host:8786) or leave it out")
    _distributed()
    from distributed.comm import parse_address, parse_host_port
    from distributed.comm.registry import get_backend

    where = f"--scheduler {address}"
    try:
        scheme, location = parse_address(address)
        get_backend(scheme)
        host, port = parse_host_port(location) if scheme in ("tcp", "tls") else (None, None)
    except (ValueError, TypeError) as exc:
        raise SectorbenchError(f"{where}: not a Dask address ({exc}); a scheduler's reads tcp://host:8786") from None
    if host is not None:  # nothing listening is said at once (Dask's connect retries until its timeout)
        try:
            socket.create_connection((host, port), timeout=CONNECT_TIMEOUT_S).close()
        except TimeoutError:
            raise SectorbenchError(f"{where}: no answer within {CONNECT_TIMEOUT_S} s") from None
        except OSError as exc:
            raise SectorbenchError(f"{where}: cannot connect ({exc.strerror or exc})") from None
    answer: list = []

    def ask():
        try:
            answer.append(asyncio.run(asyncio.wait_for(_identity(address), CONNECT_TIMEOUT_S)))
        except BaseException as exc:  # a reply that is no Dask message can raise anything (MemoryError too)
            answer.append(exc)

    thread = threading.Thread(target=ask, name="sectorbench-scheduler-check", daemon=True)
    thread.start()
    thread.join(CONNECT_TIMEOUT_S + 5)  # the thread is a daemon: a connection that never ends is left behind
    found = answer[0] if answer else TimeoutError()
    if isinstance(found, dict) and found.get("type") == "Scheduler":
        return
    if isinstance(found, dict) and found.get("type"):
        raise SectorbenchError(f"{where} is a Dask {found['type'].lower()}, not a scheduler")
    if isinstance(found, TimeoutError | asyncio.TimeoutError):
        why = f"no Dask answer within {CONNECT_TIMEOUT_S} s"
    else:
        why = f"its answer is not Dask's ({type(found).__name__})"
    raise SectorbenchError(
        f"{where} is not a Dask scheduler: {why} (a dashboard's or a web server's port? the scheduler's is "
        "the tcp:// address `dask scheduler` prints, port 8786 by default)"
    )


async def _identity(address: str) -> dict:
    """The identity a Dask server at `address` gives (its "type": Scheduler, Worker, ...)."""
    from distributed.comm import connect

    comm = await connect(address, timeout=CONNECT_TIMEOUT_S)
    try:
        await comm.write({"op": "identity", "reply": True})
        return await comm.read()
    finally:
        comm.abort()


def _on_cluster(plan, numbered, live: dict, address: str, progress) -> Iterator:
    Client = _distributed().Client
    progress(f"connecting to the Dask scheduler at {address}")
    # check_config found a scheduler answering there before the build (minutes, maybe): asked
    # again, bounded, since the Client's own handshake has no deadline if it stopped answering
    check_scheduler(address)
    try:
        client = Client(address, timeout=CONNECT_TIMEOUT_S)
    except Exception as exc:
        raise SectorbenchError(f"--scheduler {address}: cannot connect ({type(exc).__name__}: {exc})") from None
    with client:
        compilers = [build.cc for build, _, _ in plan.sessions]
        mine = fingerprint(compilers)
        # A worker that cannot report (no sectorbench there: ImportError) is refused, not fatal.
        theirs = client.run(fingerprint, compilers, on_error="return")
        refused, workers = {}, {}
        for worker in sorted(theirs):
            found = theirs[worker]
            if isinstance(found, dict):
                refused[worker] = refusal(mine, found)
            else:
                found, refused[worker] = {}, f"its fingerprint failed: {type(found).__name__}: {found}"
            workers[worker] = {**found, "refused": refused[worker]}
        accepted = sorted(worker for worker, reason in refused.items() if reason is None)
        if not accepted:
            reasons = "; ".join(f"{worker}: {reason}" for worker, reason in refused.items()) or "it has no workers"
            raise SectorbenchError(f"no worker of the Dask cluster at {address} can judge batches: {reasons}")
        # By value with each batch, not scattered: scattered data lives on a worker (the
        # scheduler keeps one replica), and a killed worker took the plan with it
        # ("lose scattered data, which can't be recovered": FutureCancelledError).
        shipped = ship(plan)
        progress(f"judging batches on {len(accepted)} Dask workers ({len(theirs) - len(accepted)} refused)")
        try:
            yield from _judged_on(client, shipped, numbered, live, accepted, workers, progress)
        finally:
            with contextlib.suppress(Exception):  # the run's judges on every worker: processes and folders
                alive = set(client.scheduler_info().get("workers", {}))  # a killed one cannot be asked
                client.run(_forget_run, shipped.run, workers=[w for w in accepted if w in alive], on_error="return")


#: What verify says when the client lost its scheduler mid-run.
SCHEDULER_LOST = (
    "the connection to the Dask scheduler was lost mid-run (it stopped, or the network did): "
    "no verdict; run verify again"
)


def _cluster_result(client, accepted: list, future):
    """The batch's outcome, once judged; SectorbenchError if every accepted worker has left before
    (a batch runs only on those: a killed one's batches go to the others, while there are any),
    or if the client lost its scheduler."""
    try:
        return _awaited(client, accepted, future)
    except CancelledError as exc:
        # The client cancels every future when its connection to the scheduler drops (a scheduler
        # killed or restarted mid-run: its tasks are gone with it), which ended verify as
        # "internal error: FuturesCancelledError: 1 Future cancelled:\nReasons:...".
        if "scheduler-connection-lost" in str(exc) or client.status != "running":
            raise SectorbenchError(SCHEDULER_LOST) from None
        first = next((line.strip() for line in str(exc).splitlines() if line.strip()), type(exc).__name__)
        raise SectorbenchError(f"Dask cancelled a batch mid-run ({first}): no verdict; run verify again") from None


def _awaited(client, accepted: list, future):
    distributed = _distributed()
    wait = distributed.wait  # waiting by future.result(timeout=) left a gather task behind each time
    while True:
        try:
            wait([future], timeout=WORKER_CHECK_S)
        except TimeoutError:
            pass
        except OSError:  # the client's connection to the scheduler, not the batch
            raise SectorbenchError(SCHEDULER_LOST) from None
        else:
            if future.status == "error":  # its own error (a TimeoutError too), said as the batch's
                return future.result()
            try:
                # Judged, but its outcome is on its worker: killed before the gather, the outcome
                # is lost and the client reschedules the batch, and a plain result() waited for
                # ever for a worker that may judge it (the suite saw it, under load).
                return future.result(timeout=GATHER_TIMEOUT_S)
            except TimeoutError:
                pass
            except OSError as exc:
                # The gather's connection closed under it (CommClosedError): its worker killed,
                # and the client reschedules the batch; or the scheduler is lost, which the next
                # wait says (a CancelledError) unless the client has already stopped talking.
                if client.status != "running" or not isinstance(exc, distributed.comm.CommClosedError):
                    raise SectorbenchError(SCHEDULER_LOST) from None
        try:
            workers = client.nthreads()
        except OSError:  # "Timed out trying to connect to tcp://...": the scheduler is gone
            raise SectorbenchError(SCHEDULER_LOST) from None
        if not set(accepted) & set(workers) and not future.done():
            raise SectorbenchError(
                f"every Dask worker accepted to judge batches has left ({', '.join(accepted)}): no verdict; "
                "a worker that joined since (one a nanny restarted) has no accepted fingerprint: run verify again"
            )


def _judged_on(client, shipped: ShippedPlan, numbered, live: dict, accepted: list, workers: dict, progress):
    """Each batch's outcome, judged on the accepted workers, in batch order."""
    outcomes = _in_order(
        lambda index, case_set: client.submit(
            _judge_on_worker,
            shipped,
            index,
            case_set,
            live,
            workers=accepted,
            allow_other_workers=False,
            pure=False,
        ),
        numbered,
        IN_FLIGHT_PER_JOB * len(accepted),
        progress,
        functools.partial(_cluster_result, client, accepted),
    )
    for number, outcome in enumerate(outcomes):
        ran = {}
        for worker, count in outcome.worker.items():
            ran[worker] = {**workers[worker], "batches": count["batches"]}
        if number == 0:  # every worker's fingerprint (and why some were refused) is reported once
            ran = {**{worker: {**info, "batches": 0} for worker, info in workers.items()}, **ran}
        outcome.worker = ran
        yield outcome
