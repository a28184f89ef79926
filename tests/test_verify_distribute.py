"""verify over several processes and a real Dask cluster: the same result as the serial run."""

from __future__ import annotations

import contextlib
import dataclasses
import json
import os
import re
import shutil
import socket
import subprocess
import sys
import threading
import time
from pathlib import Path

import pytest
from click.testing import CliRunner

from sectorbench.check import distribute
from sectorbench.check import verify as verify_module
from sectorbench.check.verify import VerifyConfig, verify
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
    with distributed.LocalCluster(n_workers=2, threads_per_worker=1, processes=True, dashboard_address=None) as cluster:
        clustered = verify(dataclasses.replace(CONFIG, scheduler=cluster.scheduler_address, jobs=None))
    assert without_env(clustered) == without_env(serial)
    workers = clustered.env["workers"]
    assert len(workers) == 2 and all(w["refused"] is None for w in workers.values())
    assert sum(w["batches"] for w in workers.values()) >= 2  # the batches ran on the cluster
    assert all(w["compilers"] and w["cpu_features"] for w in workers.values())


def test_workers_whose_cpu_features_differ_are_refused():
    """A worker that may not use AVX2 (here: disabled in its environment) would judge other code."""
    distributed = pytest.importorskip("distributed")
    if "avx2" not in distribute.fingerprint(["cc"])["cpu_features"]:
        pytest.skip("this CPU has no AVX2 to take away")
    with distributed.LocalCluster(
        n_workers=1,
        threads_per_worker=1,
        processes=True,
        dashboard_address=None,
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
    with distributed.LocalCluster(n_workers=1, threads_per_worker=1, processes=True, dashboard_address=None) as cluster:
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


@pytest.fixture(scope="module")
def scheduler():
    """A scheduler with no workers of its own: a test starts the ones it needs (outside_worker)."""
    distributed = pytest.importorskip("distributed")
    with distributed.LocalCluster(n_workers=0, processes=True, dashboard_address=None) as cluster:
        yield cluster


@contextlib.contextmanager
def outside_worker(cluster, pythonpath: Path | None = None):
    """A `dask worker` process of its own (no nanny) joining `cluster`, importing sectorbench from
    `pythonpath` first when given (a worker installed from elsewhere); its address."""
    before = set(cluster.scheduler.workers)
    env = {**os.environ, "PYTHONPATH": str(pythonpath)} if pythonpath else os.environ
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


def test_a_worker_running_other_code_of_the_same_version_is_refused(scheduler, tmp_path):
    """The fingerprint compared only __version__ ("0.1.0" between releases): a worker installed
    from another commit, here with one family C file edited, was accepted and judged other code."""
    copy = package_copy(tmp_path)
    edited = next((copy / "sectorbench" / "kernels_c" / "sector").glob("*.c"))
    edited.write_text(edited.read_text() + "\n/* edited on this worker */\n")
    with outside_worker(scheduler, copy) as address:
        with pytest.raises(SectorbenchError, match=f"{re.escape(address)}: its sectorbench code differs"):
            verify(dataclasses.replace(CONFIG, scheduler=scheduler.scheduler_address, jobs=None))
