"""verify over several processes and a real Dask cluster: the same result as the serial run."""

from __future__ import annotations

import contextlib
import dataclasses
import json
import os
import re
import shutil
import signal
import socket
import subprocess
import sys
import threading
import time
from pathlib import Path

import pytest
from click.testing import CliRunner
from conftest import terminal_dispositions

from sectorbench import families
from sectorbench.check import distribute
from sectorbench.check import verify as verify_module
from sectorbench.check.verify import BatchPlan, LocalJudge, VerifyConfig, verify
from sectorbench.cli import main
from sectorbench.errors import SectorbenchError
from sectorbench.native.build import KERNELS_DIR, BuildConfig

PACKAGE = Path(distribute.__file__).resolve().parent.parent

DATA = Path(__file__).parent / "data"
BROKEN = BuildConfig.parse("-O2", extra_sources=(DATA / "broken_kernels.c",))
#: Small batches, so that a small run has several (each judged wherever the pool puts it).
CONFIG = VerifyConfig(
    kernels=("radius_le", "lane_dependent", "basic", "sse2_nosqrt"),
    builds=(BROKEN,),
    cases=400,
    show=4,
    batch_rows=1 << 15,
    jobs=1,
)


def without_env(result) -> str:
    data = result.to_dict()
    data.pop("env")
    return json.dumps(data, sort_keys=True)


@pytest.fixture(scope="module")
def serial():
    result = verify(CONFIG)
    assert result.cases > 4 * CONFIG.batch_rows  # several batches to spread
    return result


def test_two_processes_give_the_serial_result(serial):
    pooled = verify(dataclasses.replace(CONFIG, jobs=2))
    assert pooled.env["jobs"] == 2 and serial.env["jobs"] == 1
    assert without_env(pooled) == without_env(serial)
    assert not serial.passed and any(k.failing for k in serial.kernels)  # failing rows, merged in order


def test_a_dask_cluster_gives_the_serial_result(serial):
    distributed = pytest.importorskip("distributed")
    with distributed.LocalCluster(n_workers=2, threads_per_worker=1, processes=True, dashboard_address=":0") as cluster:
        clustered = verify(dataclasses.replace(CONFIG, scheduler=cluster.scheduler_address, jobs=None))
    assert without_env(clustered) == without_env(serial)
    workers = clustered.env["workers"]
    assert len(workers) == 2 and all(w["refused"] is None for w in workers.values())
    assert sum(w["batches"] for w in workers.values()) >= 2  # the batches ran on the cluster
    assert all(w["compilers"] and w["cpu_features"] for w in workers.values())


def test_what_a_kernel_prints_where_its_batches_are_judged_is_in_its_note():
    """A row's "printed N lines" note counted only what the client's own sessions saw: with the
    batches judged in pool processes or on Dask workers, a kernel printing on every call
    (chatty, 2 825 172 lines at --cases 20000) was "printed 175 lines", what the loop checks
    printed, and the JSON was not the serial run's."""
    distributed = pytest.importorskip("distributed")
    build = BuildConfig.parse("-O2", extra_sources=(DATA / "unruly_kernels.c",))
    config = dataclasses.replace(CONFIG, kernels=("chatty", "basic"), builds=(build,))
    serial = verify(config)
    (chatty,) = [k for k in serial.kernels if k.kernel == "chatty"]
    assert any(note.startswith("printed ") for note in chatty.notes), chatty.notes
    pooled = verify(dataclasses.replace(config, jobs=2))
    with distributed.LocalCluster(n_workers=2, threads_per_worker=1, processes=True, dashboard_address=":0") as cluster:
        clustered = verify(dataclasses.replace(config, scheduler=cluster.scheduler_address, jobs=None))
    assert without_env(pooled) == without_env(serial)
    assert without_env(clustered) == without_env(serial)


def test_workers_whose_cpu_features_differ_are_refused():
    """A worker that may not use AVX2 (here: disabled in its environment) would judge other code."""
    distributed = pytest.importorskip("distributed")
    if "avx2" not in distribute.fingerprint(["cc"])["cpu_features"]:
        pytest.skip("this CPU has no AVX2 to take away")
    with distributed.LocalCluster(
        n_workers=1,
        threads_per_worker=1,
        processes=True,
        dashboard_address=":0",
        env={"SECTORBENCH_DISABLE_ISA": "avx2"},
    ) as cluster:
        with pytest.raises(SectorbenchError, match="no worker of the Dask cluster .* lacks avx2"):
            verify(dataclasses.replace(CONFIG, scheduler=cluster.scheduler_address))


def test_refusal_names_what_differs():
    mine = distribute.fingerprint(["cc"])
    assert distribute.refusal(mine, mine) is None
    other_cc = {**mine, "compilers": {"cc": {"version": "gcc (Other) 99.1\nmore", "march_native": None}}}
    assert "cc is 'gcc (Other) 99.1'" in distribute.refusal(mine, other_cc)
    more_cpu = {**mine, "cpu_features": [*mine["cpu_features"], "imaginary_feature"]}
    assert "CPU features differ from the client's: it has imaginary_feature too" in distribute.refusal(mine, more_cpu)
    older = {**mine, "sectorbench": "0.0.1"}
    assert "sectorbench 0.0.1" in distribute.refusal(mine, older)
    edited = {**mine, "code": "0" * 16}
    assert f"code differs from the client's (hash {'0' * 16}" in distribute.refusal(mine, edited)


def test_a_worker_with_another_numpy_or_python_is_refused():
    """The fingerprint did not compare numpy: a worker with numpy 1.26.4 (a second venv, the
    client's 2.4) was accepted, could not unpickle its first batch ("No module named
    'numpy._core.numeric'"), dropped from the cluster, and verify ended in "every Dask worker
    accepted to judge batches has left", naming no cause."""
    import platform

    import numpy

    mine = distribute.fingerprint(["cc"])
    assert mine["numpy"] == numpy.__version__ and mine["python"] == platform.python_version()
    older = {**mine, "numpy": "1.26.4"}
    assert f"numpy 1.26.4, the client's {numpy.__version__}" in distribute.refusal(mine, older)
    other = {**mine, "python": "3.12.1"}
    assert f"Python 3.12.1, the client's {platform.python_version()}" in distribute.refusal(mine, other)


def test_bad_jobs_and_unreachable_scheduler_are_one_line(monkeypatch):
    result = CliRunner().invoke(main, ["verify", "--jobs", "0"])
    assert result.exit_code == 2 and "--jobs" in result.output
    monkeypatch.setattr(distribute, "CONNECT_TIMEOUT_S", 2)
    result = CliRunner().invoke(main, ["verify", "--cases", "200", "--scheduler", "tcp://127.0.0.1:9"])
    assert result.exit_code == 2 and len(result.output.strip().splitlines()) == 1, result.output
    assert "tcp://127.0.0.1:9" in result.output


@contextlib.contextmanager
def tcp_server(answer: bytes | None):
    """A TCP port that is no Dask scheduler: it accepts, sends `answer` (if any) and never closes
    (as a dashboard's or a web server's port holds a connection); its tcp:// address."""
    listener = socket.create_server(("127.0.0.1", 0))
    held = []

    def serve():
        with contextlib.suppress(OSError):
            while True:
                connection, _ = listener.accept()
                held.append(connection)
                if answer is not None:
                    connection.sendall(answer)

    threading.Thread(target=serve, daemon=True).start()
    try:
        yield f"tcp://127.0.0.1:{listener.getsockname()[1]}"
    finally:
        listener.close()
        for connection in held:
            connection.close()


def verify_in_thread(arguments: list[str], within_s: float):
    """The CLI's verify with `arguments`, run in a thread: its result, or a failure if it has
    not ended within `within_s` (it used to hang for ever; the thread is left behind then)."""
    ended = []
    thread = threading.Thread(target=lambda: ended.append(CliRunner().invoke(main, arguments)), daemon=True)
    thread.start()
    thread.join(within_s)
    assert ended, f"verify {' '.join(arguments)} did not end within {within_s} s"
    return ended[0]


@pytest.mark.parametrize(
    "address, says",
    [
        ("", "--scheduler is empty"),
        ("foo:bar", "--scheduler foo:bar: not a Dask address"),
        ("tcp://127.0.0.1:9", "--scheduler tcp://127.0.0.1:9: cannot connect"),
        (b"HTTP/1.0 400 Bad request\r\n\r\n" * 4, "is not a Dask scheduler: its answer is not Dask's"),
        (b"\xff" * 64, "is not a Dask scheduler: its answer is not Dask's"),  # a frame of 2^64 bytes: MemoryError
        (None, "is not a Dask scheduler: no Dask answer within 2 s"),  # accepts and never answers: hung for ever
    ],
)
def test_an_address_that_is_no_dask_schedulers_is_one_line_before_any_build(monkeypatch, address, says):
    """Said within CONNECT_TIMEOUT_S, before anything is built (foo:bar was said after the build,
    "" judged locally, a port that accepted and never answered hung verify for ever, one that
    answered garbage gave 'internal error: MemoryError')."""
    pytest.importorskip("distributed")
    monkeypatch.setattr(distribute, "CONNECT_TIMEOUT_S", 2)
    monkeypatch.setattr(verify_module, "build", lambda *_, **__: pytest.fail("built before the address was checked"))
    with contextlib.nullcontext(address) if isinstance(address, str) else tcp_server(address) as scheduler:
        result = verify_in_thread(["verify", "--cases", "200", "--scheduler", scheduler], within_s=30)
    assert result.exit_code == 2 and len(result.output.strip().splitlines()) == 1, result.output
    assert says in result.output and "internal error" not in result.output


@pytest.mark.parametrize(
    "bad, says",
    [
        (["--kernels", "nonesuch"], "unknown kernel nonesuch"),
        (["--input", str(DATA / "broken_kernels.c")], "broken_kernels.c: not an .npz file"),
    ],
)
def test_bad_input_is_said_before_the_scheduler_is_asked(monkeypatch, bad, says):
    """The address check (up to CONNECT_TIMEOUT_S on a port that accepts and never answers) ran
    before the kernels' names were resolved and the --input file read: a misspelt kernel was
    said as the scheduler's fault, after the wait.  One line naming the bad input, exit 2."""
    pytest.importorskip("distributed")
    monkeypatch.setattr(distribute, "CONNECT_TIMEOUT_S", 2)  # undone, the wrong line comes soon too
    with tcp_server(None) as scheduler:  # accepts and never answers
        result = verify_in_thread(["verify", *bad, "--scheduler", scheduler], within_s=60)
    assert result.exit_code == 2 and len(result.output.strip().splitlines()) == 1, result.output
    assert says in result.output and "Dask" not in result.output, result.output


def test_dask_workers_compile_the_headers_beside_the_source(tmp_path):
    """A source including an edited copy of a family header (nosqrt.h, its arc test made <=):
    the workers used to receive the .c alone, resolve "nosqrt.h" to kernels_c/sector's and
    judge the right kernel (verify FAIL locally, passed on the cluster)."""
    distributed = pytest.importorskip("distributed")
    family_header = (KERNELS_DIR / "sector" / "nosqrt.h").read_text()
    assert family_header.count("_mm_cmplt_ps(squared_length, r2)") == 1
    (tmp_path / "nosqrt.h").write_text(
        family_header.replace("_mm_cmplt_ps(squared_length, r2)", "_mm_cmple_ps(squared_length, r2)")
    )
    source = tmp_path / "edited.c"
    source.write_text(
        '#include "sb_common.h"\n#include "nosqrt.h"\n'
        "SB_SSE2_ATTR static inline __m128 edited_nosqrt(__m128 cx, __m128 cy, __m128 ux, __m128 uy, __m128 r2,\n"
        "                                                __m128 k, __m128 px, __m128 py) {\n"
        "    return sse2_nosqrt(cx, cy, ux, uy, r2, k, px, py);\n}\n"
        'SB_KERNEL(edited_nosqrt, SSE2, 1, (cx, cy, ux, uy, r2, cos_theta), .family = "sector",\n'
        '          .summary = "test: sse2_nosqrt from an edited nosqrt.h beside it");\n'
    )
    config = dataclasses.replace(
        CONFIG, kernels=("edited_nosqrt",), builds=(BuildConfig.parse("-O2", extra_sources=(source,)),)
    )
    local = verify(config)
    assert not local.passed and local.kernels[0].mismatches["logic-bug"] > 0
    with distributed.LocalCluster(n_workers=1, threads_per_worker=1, processes=True, dashboard_address=":0") as cluster:
        clustered = verify(dataclasses.replace(config, scheduler=cluster.scheduler_address, jobs=None))
    assert sum(w["batches"] for w in clustered.env["workers"].values()) >= 2  # judged on the cluster
    assert without_env(clustered) == without_env(local)


def test_the_kernel_timeout_reaches_the_pool_processes():
    """naps sleeps 5 s on the first NaN px a process meets (only case batches hold one): with
    kernel_timeout=1 it must time out there too.  The pool processes started their build
    workers without the run's deadlines and waited the default 60 s, so under jobs=2 it passed
    where jobs=1 timed it out."""
    unruly = BuildConfig.parse("-O2", extra_sources=(DATA / "unruly_kernels.c",))
    config = dataclasses.replace(CONFIG, kernels=("naps",), builds=(unruly,), kernel_timeout=1.0, jobs=2)
    (naps,) = verify(config).kernels
    assert naps.status == "timed-out", naps
    assert re.match(r"no answer within 1\.\d* s \(--kernel-timeout sets the floor\)", naps.reason), naps.reason


def _tree(pid: int) -> list[int]:
    """Every live process under `pid`: its pool processes, and each one's fork server and build
    workers (in sessions of their own, found by their parents)."""
    parents = {}
    for entry in Path("/proc").iterdir():
        with contextlib.suppress(OSError, IndexError, ValueError):
            parents[int(entry.name)] = int((entry / "stat").read_text().rsplit(")", 1)[1].split()[1])
    found = {pid}
    while more := {child for child, parent in parents.items() if parent in found and child not in found}:
        found |= more
    return sorted(found - {pid})


def _running(pid: int) -> bool:
    try:
        return Path(f"/proc/{pid}/stat").read_text().rsplit(")", 1)[1].split()[0] not in ("Z", "X")
    except OSError:
        return False


@pytest.mark.skipif(not sys.platform.startswith("linux"), reason="/proc and PR_SET_PDEATHSIG are Linux's")
@pytest.mark.parametrize(
    "signum",
    [signal.SIGINT, signal.SIGTERM, signal.SIGHUP, signal.SIGKILL],
    ids=["SIGINT", "SIGTERM", "SIGHUP", "KILL"],
)
def test_an_interrupted_pooled_verify_abandons_its_batches_and_loop_checks(signum, tmp_path):
    """Ctrl-C (the terminal's SIGINT reaches the whole group), SIGTERM or SIGHUP of `verify --jobs 2`
    while a kernel takes its time (hangs: 3600 s a call, the deadline) both in the batches the
    pool processes judge and in the loop checks the client runs meanwhile.  The client waited
    for the batches under way (and the next each process had queued) and for every loop check:
    12-34 s with ordinary kernels, here the deadline.  Now it ends within seconds, as a one-job
    verify does, with its usual line and status, and leaves no process and no file behind (a
    SIGHUP or SIGQUIT to the group killed multiprocessing's resource tracker, and the one started
    in its place printed a KeyError traceback per semaphore after the last line).  A client
    killed alone (SIGKILL, no word from it) left its pool processes judging on, a hung batch
    until its deadline: they end with it now.  Enough cases for four batches of megabytes: the
    pool's feeder thread is then blocked writing the next into its pipe, where the shutdown
    waited for ever before Python 3.11.7 (Debian 12's 3.11.2)."""
    scratch = tmp_path / "tmp"
    scratch.mkdir()
    command = [sys.executable, "-m", "sectorbench", "verify", "--jobs", "2", "--cases", "800000"]
    command += ["--source", str(DATA / "unruly_kernels.c"), "--kernels", "hangs", "--kernel-timeout", "3600"]
    process = subprocess.Popen(
        command,
        env={**os.environ, "TMPDIR": str(scratch)},
        stdout=subprocess.DEVNULL,
        stderr=subprocess.PIPE,
        text=True,
        start_new_session=True,  # a process group of its own, signalled as a terminal signals its foreground job
        preexec_fn=terminal_dispositions,  # a background job inherits SIGINT ignored, nohup SIGHUP
    )
    tree: list[int] = []
    try:
        deadline = time.monotonic() + 240
        while not list(scratch.glob("**/batch-*")):  # a pool process is judging a batch (it hangs there)
            assert process.poll() is None and time.monotonic() < deadline, process.stderr.read()
            time.sleep(0.1)
        time.sleep(1.0)  # into the kernel's call
        tree = _tree(process.pid)
        assert len(tree) >= 5, tree  # the client's fork server and worker, two pool processes and theirs
        if signum == signal.SIGKILL:
            os.kill(process.pid, signum)  # the client alone: its processes are left to end by themselves
        else:
            os.killpg(process.pid, signum)
        code = process.wait(timeout=60)  # before: the 3600 s deadline
        # (all of it: a resource tracker's last words come after the client's; a killed client's
        # processes, left running, would hold it open)
        stderr = process.stderr.read() if signum != signal.SIGKILL else ""
        deadline = time.monotonic() + 10  # the fork servers and workers die after their parents (PDEATHSIG)
        while any(_running(pid) for pid in tree) and time.monotonic() < deadline:
            time.sleep(0.1)
        left = [pid for pid in tree if _running(pid)]
    finally:
        with contextlib.suppress(ProcessLookupError):
            os.killpg(process.pid, signal.SIGKILL)
        for pid in [*tree, *_tree(process.pid)]:
            with contextlib.suppress(OSError):
                os.kill(pid, signal.SIGKILL)
        process.wait()
    if signum == signal.SIGKILL:
        assert code == -signum and left == [], f"left running: {left}"
        return
    said = "interrupted" if signum == signal.SIGINT else f"terminated ({signal.Signals(signum).name})"
    assert code == 128 + signum, stderr
    assert stderr.splitlines()[-1] == f"sectorbench: {said}; scratch files removed", stderr
    assert "Traceback" not in stderr and "KeyboardInterrupt" not in stderr and "internal error" not in stderr
    assert left == [], f"left running: {left}"
    assert list(scratch.iterdir()) == []


def test_a_pool_process_starts_with_the_ending_signals_blocked():
    """A pool process's start-up (imports: a second or more) came before its initializer could
    ignore Ctrl-C, and every pool process that was starting printed a KeyboardInterrupt
    traceback: it now starts with them blocked (a mask survives exec), the client's unchanged."""
    from sectorbench.interrupts import ENDING_SIGNALS, children_start_deaf

    mask = "import signal; print(sorted(int(s) for s in signal.pthread_sigmask(signal.SIG_BLOCK, [])))"
    before = signal.pthread_sigmask(signal.SIG_BLOCK, [])
    with children_start_deaf():
        inside = subprocess.run([sys.executable, "-c", mask], capture_output=True, text=True, check=True)
    outside = subprocess.run([sys.executable, "-c", mask], capture_output=True, text=True, check=True)
    assert set(ENDING_SIGNALS) <= set(json.loads(inside.stdout))
    assert not set(ENDING_SIGNALS) & set(json.loads(outside.stdout))
    assert signal.pthread_sigmask(signal.SIG_BLOCK, []) == before


@pytest.fixture(scope="module")
def scheduler():
    """A scheduler with no workers of its own: a test starts the ones it needs (outside_worker)."""
    distributed = pytest.importorskip("distributed")
    with distributed.LocalCluster(n_workers=0, processes=True, dashboard_address=":0") as cluster:
        yield cluster


@contextlib.contextmanager
def outside_worker(cluster, pythonpath: Path | None = None, tmpdir: Path | None = None):
    """A `dask worker` process of its own (no nanny) joining `cluster`, importing sectorbench from
    `pythonpath` first when given (a worker installed from elsewhere), its temporary files in
    `tmpdir` when given; its address."""
    before = set(cluster.scheduler.workers)
    env = {**os.environ, **({"PYTHONPATH": str(pythonpath)} if pythonpath else {})}
    env.update({"TMPDIR": str(tmpdir)} if tmpdir else {})
    command = [sys.executable, "-m", "distributed.cli.dask_worker", cluster.scheduler_address]
    command += ["--nthreads", "1", "--no-nanny", "--no-dashboard"]
    process = subprocess.Popen(command, cwd=pythonpath or PACKAGE.parent, env=env, stderr=subprocess.DEVNULL)
    try:
        deadline = time.monotonic() + 60
        while not set(cluster.scheduler.workers) - before:
            assert process.poll() is None and time.monotonic() < deadline, "the worker did not join"
            time.sleep(0.1)
        (address,) = set(cluster.scheduler.workers) - before
        yield address
    finally:
        process.kill()
        process.wait()
        deadline = time.monotonic() + 30
        while set(cluster.scheduler.workers) - before and time.monotonic() < deadline:
            time.sleep(0.1)


def package_copy(directory: Path) -> Path:
    """A copy of the installed sectorbench, kernels_c inside it (as a wheel installs it)."""
    ignore = shutil.ignore_patterns("__pycache__")
    shutil.copytree(PACKAGE, directory / "sectorbench", ignore=ignore)
    shutil.copytree(KERNELS_DIR, directory / "sectorbench" / "kernels_c", ignore=ignore, dirs_exist_ok=True)
    return directory


def test_a_worker_installed_as_a_wheel_of_the_clients_code_is_accepted(serial, scheduler, tmp_path):
    """A wheel puts kernels_c inside the package, a checkout beside it: kernels_c/__init__.py was
    hashed twice in a wheel (as a Python file and as a kernel file), and a worker installed from
    the wheel of the client's own commit was refused ("its sectorbench code differs from the
    client's ...: installed from another commit, or edited?")."""
    copy = package_copy(tmp_path)
    with outside_worker(scheduler, copy) as address:
        clustered = verify(dataclasses.replace(CONFIG, scheduler=scheduler.scheduler_address, jobs=None))
    assert clustered.env["workers"][address]["refused"] is None
    assert clustered.env["workers"][address]["batches"] > 0
    assert without_env(clustered) == without_env(serial)


def test_a_worker_running_other_code_of_the_same_version_is_refused(scheduler, tmp_path):
    """The fingerprint compared only __version__ ("0.1.0" between releases): a worker installed
    from another commit, here with one family C file edited, was accepted and judged other code."""
    copy = package_copy(tmp_path)
    edited = next((copy / "sectorbench" / "kernels_c" / "sector").glob("*.c"))
    edited.write_text(edited.read_text() + "\n/* edited on this worker */\n")
    with outside_worker(scheduler, copy) as address:
        with pytest.raises(SectorbenchError, match=f"{re.escape(address)}: its sectorbench code differs"):
            verify(dataclasses.replace(CONFIG, scheduler=scheduler.scheduler_address, jobs=None))


def test_a_worker_whose_files_changed_after_it_loaded_them_is_refused(scheduler, tmp_path):
    """The code hash is of the files as they are now: a worker started before its checkout was
    updated hashed the new files, matched the client, and was accepted while it ran the Python
    code it had loaded (verify then failed with an internal error on a field the old code did
    not have; another edit would have judged silently)."""
    copy = package_copy(tmp_path)
    loaded = copy / "sectorbench" / "check" / "distribute.py"
    current = loaded.read_text()
    loaded.write_text(current + "\n# the code this worker loads, edited since\n")
    with outside_worker(scheduler, copy) as address:
        with distributed_client(scheduler) as client:  # the worker imports the edited module
            found = client.run(distribute.fingerprint, ["cc"], workers=[address])[address]
        assert found["code"] != distribute.code_hash() and not found.get("edited_since_loaded")
        loaded.write_text(current)  # now its files are the client's again, not the code it runs
        expected = f"{re.escape(address)}: its sectorbench Python files changed after that worker process loaded "
        with pytest.raises(SectorbenchError, match=expected + r"them \(sectorbench/check/distribute.py\)"):
            verify(dataclasses.replace(CONFIG, scheduler=scheduler.scheduler_address, jobs=None))


def test_a_worker_without_sectorbench_is_refused_and_the_others_judge(scheduler, tmp_path):
    """Its fingerprint raised ImportError, which ended the whole run ('internal error:
    Exception: ImportError(...)', naming no worker) instead of refusing that worker."""
    (tmp_path / "sectorbench").mkdir()
    (tmp_path / "sectorbench" / "__init__.py").write_text("raise ImportError('no sectorbench here')\n")
    with outside_worker(scheduler, tmp_path) as bad, outside_worker(scheduler) as good:
        saved = tmp_path / "verify.json"
        arguments = ["verify", "--kernels", "basic", "--cases", "200", "--json", str(saved)]
        result = CliRunner().invoke(main, [*arguments, "--scheduler", scheduler.scheduler_address])
    assert result.exit_code == 0, result.output
    refused = f"Dask worker {bad}: refused, it judged no batch: its fingerprint failed: "
    assert refused in result.output and "ImportError('no sectorbench here')" in result.output
    workers = json.loads(saved.read_text())["env"]["workers"]
    assert "no sectorbench here" in workers[bad]["refused"] and workers[bad]["batches"] == 0
    assert workers[good]["refused"] is None and workers[good]["batches"] > 0


def test_a_dask_worker_keeps_no_folder_or_build_worker_of_a_finished_run(scheduler, tmp_path):
    """Each worker thread's judge kept its folder (the shipped sources, and every batch's scenes,
    ~13 MB a batch) and its build workers after the client left: /tmp held 405 such folders.
    Nor does it keep one a worker killed with SIGKILL left (a cluster torn down): its folder
    holds a lock, as a command's scratch directories do, and the next judge removes it."""
    from sectorbench.check.distribute import WORKER_SCRATCH_PREFIX
    from sectorbench.interrupts import ABANDONED_AFTER_S

    killed = subprocess.run(
        [sys.executable, "-c", "import os, signal\nfrom sectorbench.interrupts import open_scratch_directory\n"
         f"open_scratch_directory({WORKER_SCRATCH_PREFIX!r})\nos.kill(os.getpid(), signal.SIGKILL)"],
        env={**os.environ, "TMPDIR": str(tmp_path)},
    )  # fmt: skip
    assert killed.returncode == -signal.SIGKILL
    (left,) = tmp_path.glob(f"{WORKER_SCRATCH_PREFIX}*")
    long_ago = time.time() - 2 * ABANDONED_AFTER_S
    os.utime(left, (long_ago, long_ago))
    with outside_worker(scheduler, tmpdir=tmp_path) as address:
        clustered = verify(dataclasses.replace(CONFIG, scheduler=scheduler.scheduler_address, jobs=None))
        assert clustered.env["workers"][address]["batches"] >= 2
        assert not list(tmp_path.glob("sectorbench-verify-worker-*"))
        with distributed_client(scheduler) as client:
            worker = client.run(os.getpid, workers=[address])[address]
        assert _build_workers(worker) == []


def _build_workers(pid: int) -> list:
    """The build workers under process `pid`: forks of its fork server (measure/forkserver.py),
    which stays to serve the next run."""
    import psutil

    return [p.cmdline() for p in psutil.Process(pid).children(recursive=True) if p.ppid() != pid]


@contextlib.contextmanager
def distributed_client(cluster):
    distributed = pytest.importorskip("distributed")
    with distributed.Client(cluster.scheduler_address, timeout=30) as client:
        yield client


def test_a_judge_leaves_no_file_of_a_batch_behind(tmp_path):
    """A judge's scratch (a pool process's, a Dask worker's) gained every batch's scenes."""
    plan = BatchPlan(dataclasses.replace(CONFIG, family="sector"), ((BROKEN, False, ("basic",)),))
    judge = LocalJudge.open(plan, tmp_path)
    try:
        batches = families.get("sector").case_batches(CONFIG.cases, CONFIG.seed, CONFIG.batch_rows)
        for index, case_set in zip(range(2), batches):
            assert judge.judge(index, case_set, {0: ["basic"]}).rows == len(case_set)
            assert list(tmp_path.iterdir()) == []
    finally:
        judge.close()


@pytest.fixture
def worker_judges(monkeypatch):
    """distribute's per-thread judges and ended runs, fresh for a test calling _judge_on_worker in
    this process as a Dask worker's thread would; whatever a failing test left is closed."""
    pytest.importorskip("distributed")
    monkeypatch.setattr(distribute, "_judges", {})
    monkeypatch.setattr(distribute, "_ended_runs", set())
    monkeypatch.setattr(distribute, "_busy", set())
    yield
    distribute._forget_run(None)


def test_a_run_ended_while_a_dask_worker_opens_its_judge_leaves_nothing_behind(worker_judges, monkeypatch):
    """The client's end of the run (_forget_run) can come while a worker thread opens its judge
    (a build: seconds).  It found nothing to close, the thread then stored the judge, and its
    build workers and folder stayed until the Dask worker exited."""
    plan = BatchPlan(dataclasses.replace(CONFIG, family="sector"), ((BROKEN, False, ("basic",)),))
    shipped = distribute.ship(plan)
    opened = []
    real_open = LocalJudge.open.__func__

    def open_then_end(cls, plan, scratch):
        judge = real_open(cls, plan, scratch)
        opened.append((judge, Path(scratch)))
        assert distribute._forget_run(shipped.run) == 0  # the client's end: nothing stored yet
        return judge

    monkeypatch.setattr(LocalJudge, "open", classmethod(open_then_end))
    case_set = next(iter(families.get("sector").case_batches(CONFIG.cases, CONFIG.seed, CONFIG.batch_rows)))
    with pytest.raises(SectorbenchError, match="this verify run has ended"):
        distribute._judge_on_worker(shipped, 0, case_set, {0: ["basic"]})
    ((judge, folder),) = opened
    assert distribute._judges == {}
    assert not folder.exists()
    assert all(session.worker._process.poll() is not None for session in judge.sessions)  # build workers ended


def test_a_dask_worker_thread_closes_its_previous_runs_judge_once(worker_judges, monkeypatch, tmp_path):
    """A thread judging for a new run closed its previous run's judge while it was still listed:
    the client's _forget_run of that run, on another thread meanwhile, closed it a second time."""
    closes = []

    class Previous:
        def close(self):
            closes.append(distribute._forget_run("previous"))  # the client's end of that run, meanwhile

    distribute._judges[threading.get_ident()] = ("previous", Previous(), (tmp_path / "previous", None))

    class Opened(Exception):
        pass

    def stop(cls, plan, scratch):
        raise Opened

    monkeypatch.setattr(LocalJudge, "open", classmethod(stop))
    shipped = distribute.ShippedPlan(BatchPlan(dataclasses.replace(CONFIG, family="sector"), ()), ())
    with pytest.raises(Opened):
        distribute._judge_on_worker(shipped, 0, None, {})
    assert closes == [0]  # closed once, by its thread; the run's end found nothing left to close


#: The batch a worker is killed in (of the run's five or more: CONFIG's cases over its batch_rows).
KILLED_BATCH = 2


def test_killing_a_dask_worker_mid_run_reruns_its_batch_on_another(serial, scheduler, tmp_path):
    """A worker is killed (SIGKILL) while it judges a batch: the batch runs again on the other
    worker and the result is the serial run's.  Each worker's judge waits at KILLED_BATCH while
    a flag file exists (_wait_at_batch, put in by client.run), so the kill always lands
    mid-batch: the test used to poll for a worker judging alone, and under load there was none.
    (The plan, now sent by value with each batch, was scattered, and a killed worker holding its
    one replica lost it: 'FutureCancelledError: ... already forgotten'.  This test does not
    recreate that: the scheduler may still hold other replicas when the worker dies.)"""
    flag, log = tmp_path / "hold", tmp_path / "log"
    flag.touch()
    log.mkdir()
    ended = []
    with outside_worker(scheduler) as first, outside_worker(scheduler) as second:
        pids, run = _verify_until_a_worker_waits(scheduler, [first, second], flag, log, ended)
        (waiting,) = log.glob("waiting-*")  # the other waits only for a batch given to it after the kill
        killed = int(waiting.name.removeprefix("waiting-"))
        os.kill(killed, signal.SIGKILL)
        flag.unlink()
        run.join(300)
    assert ended and not isinstance(ended[0], BaseException), ended
    assert without_env(ended[0]) == without_env(serial)
    (survivor,) = set(pids.values()) - {killed}
    judged = sorted(p.name for p in log.glob(f"judged-{KILLED_BATCH}-*"))
    assert judged == [f"judged-{KILLED_BATCH}-{survivor}"]  # run again on the other worker, and only there


def test_killing_the_only_accepted_dask_worker_mid_run_is_one_clear_error(scheduler, tmp_path):
    """The batches are restricted to the workers whose fingerprints were accepted: with the last of
    them killed (or restarted by its nanny under another address), verify waited for ever, with
    no word.  Now it stops with an error once no accepted worker is left, and gives no verdict."""
    flag, log = tmp_path / "hold", tmp_path / "log"
    flag.touch()
    log.mkdir()
    ended = []
    with outside_worker(scheduler) as only:
        pids, run = _verify_until_a_worker_waits(scheduler, [only], flag, log, ended)
        os.kill(pids[only], signal.SIGKILL)
        run.join(90)  # a check every distribute.WORKER_CHECK_S
    assert ended, "verify still waits for batches that no worker may judge"
    assert isinstance(ended[0], SectorbenchError), ended
    assert f"every Dask worker accepted to judge batches has left ({only})" in str(ended[0])


def test_a_scheduler_killed_mid_run_is_one_clear_error(tmp_path):
    """The client cancels every future when it loses its scheduler: verify ended as "internal
    error: FuturesCancelledError: 1 Future cancelled:\\nReasons:..." (the scheduler of a real
    cluster killed with SIGKILL while a worker judged a batch).  Now one clear error, no verdict."""
    distributed = pytest.importorskip("distributed")
    file, flag, log = tmp_path / "scheduler.json", tmp_path / "hold", tmp_path / "log"
    flag.touch()
    log.mkdir()
    ended, processes = [], []
    command = [sys.executable, "-m", "distributed.cli.dask_scheduler", "--port", "0", "--dashboard-address", ":0"]
    try:
        processes.append(subprocess.Popen([*command, "--scheduler-file", str(file)], stderr=subprocess.DEVNULL))
        deadline = time.monotonic() + 60
        while not file.exists() or not file.read_text():
            assert processes[0].poll() is None and time.monotonic() < deadline, "the scheduler did not start"
            time.sleep(0.1)
        address = json.loads(file.read_text())["address"]
        worker = [sys.executable, "-m", "distributed.cli.dask_worker", address, "--nthreads", "1", "--no-nanny"]
        processes.append(subprocess.Popen([*worker, "--no-dashboard"], cwd=PACKAGE.parent, stderr=subprocess.DEVNULL))
        with distributed.Client(address, timeout=30) as client:
            client.wait_for_workers(1, timeout=60)
            (only,) = client.scheduler_info()["workers"]
        cluster = type("Cluster", (), {"scheduler_address": address})
        _, run = _verify_until_a_worker_waits(cluster, [only], flag, log, ended)
        processes[0].kill()  # while the worker judges a batch
        run.join(120)
    finally:
        for process in processes:
            process.kill()
            process.wait()
    assert ended, "verify still waits after its scheduler was killed"
    assert isinstance(ended[0], SectorbenchError), ended
    assert "the connection to the Dask scheduler was lost mid-run" in str(ended[0])


@pytest.mark.skipif(
    not sys.platform.startswith("linux") or os.uname().machine != "x86_64",
    reason="reads x86-64 Linux's /proc/PID/syscall",
)
def test_an_interrupted_client_leaves_no_build_worker_on_a_dask_worker_judging_a_batch(scheduler, tmp_path):
    """Ctrl-C of the client while a Dask worker judges a batch: the client's clean-up (_forget_run)
    closed that batch's judge from another thread, under the request of a kernel that hangs: the
    close failed ('Run Failed ... OSError: [Errno 9] Bad file descriptor' in the worker's log),
    and the judging thread, seeing its build worker gone as after a crash, started another that
    no one closed (a sleeping build worker per interrupted run, for the Dask worker's life).  The
    judge is now its thread's to close once the batch is done; the clean-up only stops its request."""
    import psutil

    scratch = tmp_path / "tmp"
    scratch.mkdir()
    with outside_worker(scheduler, tmpdir=scratch) as address, distributed_client(scheduler) as client:
        pid = client.run(os.getpid, workers=[address])[address]
        command = [sys.executable, "-m", "sectorbench", "verify", "--source", str(DATA / "unruly_kernels.c")]
        command += ["--kernels", "hangs", "--cases", "200", "--kernel-timeout", "600"]
        verifying = subprocess.Popen([*command, "--scheduler", scheduler.scheduler_address], stderr=subprocess.PIPE)
        deadline = time.monotonic() + 300
        while not any(_sleeping(child) for child in psutil.Process(pid).children(recursive=True)):
            assert verifying.poll() is None and time.monotonic() < deadline, "no batch hangs on the worker"
            time.sleep(0.1)
        verifying.send_signal(signal.SIGINT)  # while the worker's build worker runs `hangs`
        _, stderr = verifying.communicate(timeout=120)
        assert verifying.returncode == 130, stderr
        while _run_by_value(client, _executing, workers=[address])[address]:
            assert time.monotonic() < deadline, "the worker still judges the batch"
            time.sleep(0.1)
        assert _build_workers(pid) == []
        assert not list(scratch.glob(f"{distribute.WORKER_SCRATCH_PREFIX}*"))


def _sleeping(process) -> bool:
    """Whether `process` waits in (clock_)nanosleep: a build worker running `hangs` (sleep(1000))."""
    with contextlib.suppress(OSError):
        number = Path(f"/proc/{process.pid}/syscall").read_text().split()[0]
        return number in ("35", "230")  # x86-64's nanosleep and clock_nanosleep
    return False


def _run_by_value(client, function, *args, **kwargs):
    """client.run(function, ...), `function` pickled with its code (the workers cannot import this file)."""
    import cloudpickle

    cloudpickle.register_pickle_by_value(sys.modules[__name__])
    try:
        return client.run(function, *args, **kwargs)
    finally:
        cloudpickle.unregister_pickle_by_value(sys.modules[__name__])


def _executing(dask_worker) -> int:
    """Run in a Dask worker (client.run, which passes the worker): how many tasks it runs now."""
    return dask_worker.state.executing_count


def _verify_until_a_worker_waits(scheduler, workers: list, flag: Path, log: Path, ended: list):
    """verify on `scheduler` in a thread (its outcome appended to `ended`), each of `workers`
    judging through _wait_at_batch, until one waits at KILLED_BATCH: (the workers' pids, the thread)."""
    import cloudpickle

    with distributed_client(scheduler) as client:
        cloudpickle.register_pickle_by_value(sys.modules[__name__])  # the workers cannot import this file
        try:
            pids = client.run(_wait_at_batch, KILLED_BATCH, str(flag), str(log), workers=workers)
        finally:
            cloudpickle.unregister_pickle_by_value(sys.modules[__name__])
    config = dataclasses.replace(CONFIG, scheduler=scheduler.scheduler_address, jobs=None)
    run = threading.Thread(target=lambda: ended.append(_outcome(config)), daemon=True)
    run.start()
    deadline = time.monotonic() + 300
    while not list(log.glob("waiting-*")):
        assert run.is_alive() and time.monotonic() < deadline, f"no worker reached batch {KILLED_BATCH}: {ended}"
        time.sleep(0.05)
    return pids, run


def _wait_at_batch(batch: int, flag: str, log: str) -> int:
    """Run in a Dask worker process (client.run): from now on its judge, at batch `batch`, says
    so (waiting-PID in `log`) and waits while `flag` exists; every batch it judges is logged
    (judged-INDEX-PID).  This process's pid."""
    import os
    import time
    from pathlib import Path

    from sectorbench.check.verify import LocalJudge

    judge = LocalJudge.judge

    def judging(self, batch_index, case_set, live):
        if batch_index == batch:
            Path(log, f"waiting-{os.getpid()}").touch()
            while Path(flag).exists():
                time.sleep(0.01)
        outcome = judge(self, batch_index, case_set, live)
        Path(log, f"judged-{batch_index}-{os.getpid()}").touch()
        return outcome

    LocalJudge.judge = judging
    return os.getpid()


def _outcome(config):
    try:
        return verify(config)
    except BaseException as exc:
        return exc


class _LoopChecksEndingLate:
    """Loop checks whose step under way ends 0.5 s after stop(), as a killed request's is handled."""

    def __init__(self):
        self.stopping, self.finished = threading.Event(), False

    def __call__(self):
        self.stopping.wait(60)
        time.sleep(0.5)
        self.finished = True

    def stop(self):
        self.stopping.set()


class _Interrupted(Exception):
    pass


def test_an_interrupt_while_waiting_for_the_loop_checks_still_waits_for_their_end():
    """A join() interrupted by a signal handler's exception marks the thread ended in CPython
    3.11: the client's second join() returned at once and it closed its sessions under the
    running loop checks (EBADF, "internal error", 2 of ~30 interrupted runs)."""

    def judged():
        yield "first batch"

    def interrupt(signum, frame):
        raise _Interrupted

    checks = _LoopChecksEndingLate()
    previous = signal.signal(signal.SIGALRM, interrupt)
    try:
        signal.setitimer(signal.ITIMER_REAL, 0.3)  # while the client waits for the checks, before the first outcome
        with pytest.raises(_Interrupted):
            list(distribute._after(checks, judged()))
    finally:
        signal.setitimer(signal.ITIMER_REAL, 0)
        signal.signal(signal.SIGALRM, previous)
    assert checks.stopping.is_set() and checks.finished  # stopped, and waited for
