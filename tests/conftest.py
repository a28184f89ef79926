"""Shared fixtures: one private build cache and one -O2 worker for the whole session."""

from __future__ import annotations

import errno
import io
import os
import re
import shutil
import signal
import subprocess
from dataclasses import dataclass, field
from pathlib import Path

import pytest
from rich.console import Console

from sectorbench.measure.worker import Worker
from sectorbench.native.build import OBJECTS_DIR, BuildConfig, build

DATA = Path(__file__).parent / "data"

#: A test whose premise is gcc's own behaviour names gcc, whatever $CC the suite runs under: gcc's
#: -ffast-math shared libraries switch FTZ/DAZ on as they load (crtfastmath.o), clang's do not.
needs_gcc = pytest.mark.skipif(shutil.which("gcc") is None, reason="gcc is not installed")


def terminal_dispositions() -> None:
    """For a child's preexec_fn: SIGINT, SIGQUIT and SIGHUP at their default actions, as a
    terminal's foreground job has them.  A shell's background job inherits SIGINT and SIGQUIT
    ignored, and a suite run under nohup SIGHUP; sectorbench keeps a signal its caller ignores
    ignored, as it should, and a test that sent one waited for an end that never came."""
    for number in (signal.SIGINT, signal.SIGQUIT, signal.SIGHUP):
        signal.signal(number, signal.SIG_DFL)


def rendered(table) -> str:
    """A rich renderable as the plain text a wide console without colour prints."""
    console = Console(width=400, file=io.StringIO(), color_system=None, force_terminal=False)
    console.print(table)
    return console.file.getvalue()


@pytest.fixture(scope="session", autouse=True)
def private_cache(tmp_path_factory, worker_id):
    """Builds go to a fresh cache, so the tests really run the compiler; under pytest-xdist
    the workers share it (builds are written under a temporary name and renamed, so two
    workers building one library at once is safe), so each library is built about once."""
    if worker_id == "master":
        cache = tmp_path_factory.mktemp("build-cache")
    else:
        cache = tmp_path_factory.getbasetemp().parent / "build-cache"
        cache.mkdir(exist_ok=True)
    previous = os.environ.get("SECTORBENCH_CACHE")
    os.environ["SECTORBENCH_CACHE"] = str(cache)
    yield cache
    if previous is None:
        os.environ.pop("SECTORBENCH_CACHE", None)
    else:
        os.environ["SECTORBENCH_CACHE"] = previous


@pytest.fixture(scope="session", autouse=True)
def one_verify_process_per_pytest_worker(worker_id):
    """Under pytest-xdist the workers already keep every core busy: verify's default, a pool of
    one process per core (each with its own build workers), would only add processes to start
    (2.8 s of CPU more per mutation score, 9.5 s against 6.7, for the same wall time).  The pool
    itself is tested with explicit jobs (tests/test_verify_distribute.py), and the result does
    not depend on the process count."""
    if worker_id == "master":
        yield
        return
    from sectorbench.check import distribute

    previous, distribute.default_jobs = distribute.default_jobs, lambda: 1
    yield
    distribute.default_jobs = previous


@pytest.fixture(scope="session", autouse=True)
def no_heartbeat_in_process():
    """In-process CLI tests read stderr line by line: no heartbeat lines during a cold build.

    tests/test_progress.py tests the heartbeat itself, with its own interval; commands run
    as subprocesses keep the real one.
    """
    from sectorbench.cli import app

    previous, app.HEARTBEAT_S = app.HEARTBEAT_S, 3600.0
    yield
    app.HEARTBEAT_S = previous


@pytest.fixture(scope="session")
def o2_library(private_cache) -> Path:
    return build(BuildConfig.parse("-O2"))


@pytest.fixture(scope="session")
def o2_worker(o2_library):
    with Worker(o2_library) as worker:
        yield worker


@pytest.fixture(scope="session")
def o2_kernels(o2_worker):
    kernels, _ = o2_worker.describe()
    return kernels


@pytest.fixture(scope="session")
def scratch(tmp_path_factory) -> Path:
    return tmp_path_factory.mktemp("scratch")


@pytest.fixture
def seeded_cache(private_cache):
    """seeded_cache(path, *flag_sets): a fresh private cache at `path` holding the session's
    objects of kernels_c/ for those flag sets (built once into the shared cache), so that a
    test about a library (its checksum, its path, its first-use message) links it instead of
    compiling every file again.  The library itself is not there: it is still built."""

    def seed(path: Path, *flag_sets: str) -> Path:
        objects = path / OBJECTS_DIR
        objects.mkdir(parents=True, exist_ok=True)
        for flags in flag_sets:
            build(BuildConfig.parse(flags), private_cache)
        for source in (private_cache / OBJECTS_DIR).iterdir():
            os.link(source, objects / source.name)
        return path

    return seed


#: A user kernel as a --source file holds it (run --against tests, the A/B on counts).
USER_KERNEL = """#include "sb_common.h"
static inline int mine(float cx, float cy, float ux, float uy, float r2, float k, float px, float py) {
    const float dx = px - cx, dy = py - cy;
    const float s = dx * dx + dy * dy, a = dx * ux + dy * uy;
    return (s < r2) & (a > 0.0f) & (a * a > s * (k * k));
}
SB_KERNEL(mine, SCALAR, 1, (cx, cy, ux, uy, r2, cos_theta), .family = "sector", .summary = "user kernel");
"""


@dataclass
class Strangers:
    """What process_changers.c's signals_strangers found: it SIGKILLs `sentinel` (a process of
    the test's) and SIGUSR2s this process (caught in `received`), writing each kill()'s
    "returned errno" to `results`."""

    sentinel: subprocess.Popen
    results: Path
    received: list[int] = field(default_factory=list)

    def refused(self, printed: str = "") -> list[str]:
        """Asserts that no signal arrived and that every kill() failed with EPERM; its lines, from
        `results` or, where it may write no file (a worker), from its row's note (`printed`)."""
        assert self.sentinel.poll() is None and not self.received
        attempts = self.results.read_text().split("\n")[:-1] if self.results.exists() else []
        attempts += re.findall(r"-?\d+ \d+", printed.partition(": ")[2])
        assert attempts and set(attempts) == {f"-1 {errno.EPERM}"}, attempts
        return attempts


@pytest.fixture
def strangers(tmp_path, monkeypatch):
    """The targets signals_strangers is told of, through its environment, for the test's length."""
    found = Strangers(subprocess.Popen(["sleep", "600"]), tmp_path / "kills")
    previous = signal.signal(signal.SIGUSR2, lambda number, frame: found.received.append(number))
    monkeypatch.setenv("SB_TEST_SENTINEL_PID", str(found.sentinel.pid))
    monkeypatch.setenv("SB_TEST_RUN_PID", str(os.getpid()))
    monkeypatch.setenv("SB_TEST_SIGNAL_RESULT", str(found.results))
    try:
        yield found
    finally:
        signal.signal(signal.SIGUSR2, previous)
        found.sentinel.kill()
        found.sentinel.wait()
