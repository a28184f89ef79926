"""The worker's promises (docs/worker.md): a private channel, deadlines, a clean FP environment
per kernel, death with its parent, split shape ranges that add up, and the clock's build.

The misbehaving kernels are real C (tests/data/unruly_kernels.c), run in real workers."""

from __future__ import annotations

import errno
import json
import os
import re
import resource
import shutil
import signal
import subprocess
import sys
import time
from dataclasses import replace
from pathlib import Path

import numpy as np
import pytest
from conftest import DATA, needs_gcc, rendered

from sectorbench.check.verify import VerifyConfig, verify
from sectorbench.families.scene_kinds import generate
from sectorbench.measure import forkserver, messages, server
from sectorbench.measure.messages import LoopRef
from sectorbench.measure.runner import RunConfig, run
from sectorbench.measure.timing import TimingConfig
from sectorbench.measure.worker import Worker, WorkerCrashed
from sectorbench.model.split import shape_ranges
from sectorbench.native.build import BuildConfig, build
from sectorbench.present.report import run_table, verify_table

UNRULY = DATA / "unruly_kernels.c"
FPENV_AT_LOAD = DATA / "fpenv_at_load.c"
FAST = TimingConfig(repeat=2, min_sample_s=0.001)
#: A generous wait for something that must happen on its own (never a timing assertion).
PATIENCE_S = 120


@pytest.fixture(scope="module")
def unruly_build(private_cache) -> BuildConfig:
    config = BuildConfig.parse("-O2", extra_sources=(UNRULY,))
    build(config)
    return config


def small_run(build_config: BuildConfig, kernels: tuple[str, ...], **fields) -> RunConfig:
    return RunConfig(sectors=12, points=300, kernels=kernels, builds=(build_config,), timing=FAST, **fields)


def printed(row) -> str:
    """What the row's kernel printed, as its note quotes it ("printed 2 lines: a / b"), or ""."""
    return next((w for w in row.warnings if w.startswith("printed ")), "")


def printed_pids(row, word: str) -> list[int]:
    """The pids a test kernel printed as "WORD PID" (it may write no file: server.refuse_file_writes)."""
    pids = [int(pid) for pid in re.findall(rf"\b{word} (\d+)", printed(row))]
    assert pids, row.warnings
    return pids


# ---------------------------------------------------------------- typed messages


def test_messages_round_trip_and_anything_else_is_refused():
    request = messages.Sample(LoopRef("basic", "call", noop=True, threads=2, shapes=(3, 9)), calls=5)
    assert messages.decode(messages.encode(request, 4)) == (4, request)
    reply = messages.Timed(0.5, 7, 3, extras=messages.LoopExtras(jit_s=0.1, broadphase="grid"))
    assert messages.decode(messages.encode(reply, 4)) == (4, reply)
    unnumbered = b'{"type": "ClockRead", "mhz": 1}'
    for junk in (b'{"mhz": 1}', b"debug: call 1", b'{"type": "Timed", "seconds": 1, "oops": 2}', b"[]", unnumbered):
        with pytest.raises(messages.ProtocolError):
            messages.decode(junk)


# ---------------------------------------------------------------- shape ranges


@pytest.mark.parametrize("parts", [1, 2, 3, 7])
def test_count_loops_over_split_shape_ranges_add_up_to_the_whole(o2_worker, scratch, parts):
    o2_worker.load(generate("uniform", 23, 301, 4), scratch)
    for kernel, mode in (("basic", "inline"), ("sse2", "call"), ("avx2_nosqrt_fma", "inline")):
        whole = o2_worker.sample(LoopRef(kernel, mode), calls=1).hits
        split = [o2_worker.sample(LoopRef(kernel, mode, shapes=r), calls=1).hits for r in shape_ranges(23, parts)]
        assert sum(split) == whole > 0, (kernel, mode, split)
        threaded = o2_worker.sample(LoopRef(kernel, mode, threads=2, shapes=(5, 20)), calls=1).hits
        assert threaded == o2_worker.sample(LoopRef(kernel, mode, shapes=(5, 20)), calls=1).hits


def test_grid_evaluation_over_split_shape_ranges_is_the_whole_grid(o2_worker, scratch):
    o2_worker.load(generate("uniform", 17, 45, 5), scratch)
    whole = o2_worker.evaluate("sse2_nosqrt")
    parts = [o2_worker.evaluate("sse2_nosqrt", shapes=r) for r in shape_ranges(17, 4)]
    assert [p.shape[0] for p in parts] == [b - a for a, b in shape_ranges(17, 4)]
    assert np.array_equal(np.concatenate(parts), whole)
    with pytest.raises(Exception, match="outside the scene"):
        o2_worker.evaluate("basic", shapes=(3, 18))


def test_a_peer_over_split_shape_ranges_adds_up_too(o2_library, scratch):
    with Worker(o2_library, peers=True) as worker:
        worker.load(generate("uniform", 9, 120, 6), scratch)
        whole = worker.sample(LoopRef("numpy"), calls=1).hits
        assert sum(worker.sample(LoopRef("numpy", shapes=r), calls=1).hits for r in shape_ranges(9, 3)) == whole
        grid = worker.evaluate("numpy")
        assert np.array_equal(np.concatenate([worker.evaluate("numpy", r) for r in shape_ranges(9, 2)]), grid)


# ---------------------------------------------------------------- the private channel


def test_a_printing_kernel_is_measured_and_its_output_is_in_its_row(unruly_build):
    result = run(small_run(unruly_build, ("chatty", "naive")))
    rows = {r.kernel: r for r in result.results}
    chatty = rows["chatty"]
    assert chatty.status == "ok" and rows["naive"].status == "ok"
    assert chatty.hits == rows["naive"].hits != 7  # its JSON-looking lines were never a reply
    note = printed(chatty)
    assert "debug: call 1" in note
    assert not any(w.startswith("printed ") for w in rows["naive"].warnings)
    # The constructor's lines are the build's, recorded with it.
    build_entry = result.env["builds"][0]
    assert "chatty: library loaded" in build_entry["printed"]
    # What it printed is quoted in the table with its terminal escape shown, never sent.
    shown = rendered(run_table(result))
    assert "\\x1b[31m(red)" in shown and "\x1b" not in shown


def test_a_printing_kernel_is_verified_like_any_other(unruly_build):
    result = verify(VerifyConfig(kernels=("chatty", "basic"), builds=(unruly_build,), cases=500))
    verdicts = {v.kernel: v for v in result.kernels}
    assert verdicts["chatty"].status == "ok" and verdicts["chatty"].mismatches == verdicts["basic"].mismatches
    assert any("debug: grid of" in note for note in verdicts["chatty"].notes)
    shown = rendered(verify_table(result))
    assert "\\x1b]0;title\\x07" in shown and "\x1b" not in shown and "\a" not in shown


@pytest.mark.parametrize("scribbler", ["rotates_in_place", "unprotects_and_rotates"])
def test_a_kernel_that_writes_into_its_input_crashes_its_own_row_and_no_other(private_cache, scribbler):
    """The scene is in read-only pages: a kernel rotating its polygon in place used to change
    the polygons of every kernel after it in the worker (all then failed verify as logic bugs).
    The pages' file is sealed: mprotect() cannot make them writable again (it could, and hill
    and the BCS kernels failed verify with hundreds of logic bugs)."""
    build_config = BuildConfig.parse("-O2", extra_sources=(DATA / "scribbling_kernel.c",))
    checked = verify(
        VerifyConfig(kernels=(scribbler, "scan", "hill"), builds=(build_config,), cases=500, seed=5, jobs=1)
    )
    verdicts = {v.kernel: v for v in checked.kernels}
    assert verdicts[scribbler].status == "crashed", verdicts[scribbler]
    assert "killed by signal 11" in verdicts[scribbler].reason
    for neighbour in ("scan", "hill"):
        assert verdicts[neighbour].status == "ok" and verdicts[neighbour].verdict != "FAIL", verdicts[neighbour]

    def timed(kernels):
        config = RunConfig(
            scene="polygons16", sectors=6, points=200, kernels=kernels, builds=(build_config,), timing=FAST
        )
        return {r.kernel: r for r in run(config).results}

    rows, alone = timed((scribbler, "scan")), timed(("scan",))
    assert rows[scribbler].status == "crashed" and rows["scan"].status == "ok"
    assert rows["scan"].hits == alone["scan"].hits


@pytest.mark.parametrize(
    ("overrun", "reason"),
    [("overruns_by_8", "wrote past the end of its answers (8 bytes"), ("overruns_by_4k", "killed by signal 11")],
)
def test_a_kernel_that_writes_past_its_answers_crashes_its_own_row_and_no_other(private_cache, overrun, reason):
    """A row's answers went into a numpy array on the heap: 8 bytes written past its end went
    unnoticed (the row passed verify), a few dozen broke malloc's records and aborted the worker
    in whichever allocation met them next.  The buffer is in pages of its own between pages no
    one may touch, the rest of its last page checked after the call."""
    build_config = BuildConfig.parse("-O2", extra_sources=(DATA / "answer_overruns.c",))

    def verdicts(kernels):
        checked = verify(VerifyConfig(kernels=kernels, builds=(build_config,), cases=500, seed=3, jobs=1))
        return {v.kernel: v for v in checked.kernels}

    rows, alone = verdicts((overrun, "basic", "naive")), verdicts(("basic", "naive"))
    assert rows[overrun].status == "crashed" and reason in rows[overrun].reason, rows[overrun]
    for neighbour in ("basic", "naive"):
        assert rows[neighbour].status == "ok" and rows[neighbour].verdict != "FAIL", rows[neighbour]
        assert rows[neighbour].mismatches == alone[neighbour].mismatches


def test_a_source_rows_noop_twin_stands_for_itself_alone(private_cache):
    """A --source row's NoOperation counted hits (its twins were its count loops); run shared it
    with every row of its loop shape, and basic's net fell twentyfold."""
    build_config = BuildConfig.parse("-O2", extra_sources=(DATA / "loop_blind_spots.c",))
    rows = {r.kernel: r for r in run(small_run(build_config, ("counting_twin", "basic"))).results}
    twin, basic = rows["counting_twin"], rows["basic"]
    assert twin.overhead_kernel == "noop[scalar b1, 6 arrays] of counting_twin" and twin.net_s is None
    assert any("counted" in w and "not 0: it is not a NoOperation" in w for w in twin.warnings), twin.warnings
    assert basic.overhead_kernel == "noop[scalar b1, 6 arrays]" and basic.net_s is not None
    assert not any("not a NoOperation" in w for w in basic.warnings)


CHANGES = {
    "arms_timer": "left a timer armed (ITIMER_REAL)",
    "leaves_thread": "left 1 thread running",
    "lowers_file_limit": "RLIMIT_NOFILE",
    "forks_and_returns": "left 1 child process",
    "forks_a_spinner": "left 1 child process",
    "escapes_with_setsid": "left 1 child process",  # adopted by its worker (a child subreaper)
    "leaves_files_open": "left 3 files open",
    "points_stdout_elsewhere": "pointed 1 descriptor (1) elsewhere",
    "closes_stdin": "closed 1 descriptor (0)",
    "handles_segv": "changed the handling of SIGSEGV",
    "blocks_signals": "blocked signals none -> SIGALRM+SIGTERM",
    "goes_idle": "scheduling policy SCHED_OTHER -> SCHED_IDLE",
    "takes_every_descriptor": "left no file descriptor free",
    "arms_posix_timer": "left 1 POSIX timer (timer_create)",
    "refuses_getitimer": "the process state could not be read after it: itimer_error",
    "renices_parent": "changed its parent, the fork server (getppid()): nice",
    "idles_parent": "changed its parent, the fork server (getppid()): scheduling policy SCHED_OTHER -> SCHED_IDLE",
    "limits_parent_cpu": "changed its parent, the fork server (getppid()): RLIMIT_CPU",
}
if len(os.sched_getaffinity(0)) > 1:  # pinned to CPU 0: a change only where there are others
    CHANGES["pins_parent"] = "changed its parent, the fork server (getppid()): CPU affinity"
if os.geteuid() == 0:  # otherwise they change nothing
    CHANGES["becomes_nobody"] = "uid 0/0/0 -> 65534/65534/65534"
    CHANGES["chroots"] = "changed its root directory (chroot)"
CHANGERS = (*CHANGES, "stops_parent", "terminates_parent")


@pytest.fixture(scope="module")
def changers_build(private_cache) -> BuildConfig:
    config = BuildConfig.parse("-O2", extra_sources=(DATA / "process_changers.c",))
    build(config)
    return config


@pytest.mark.parametrize("changer", CHANGERS)
def test_a_kernel_that_changes_its_worker_process_costs_no_other_row(changers_build, changer):
    """Each changed the process the build's other kernels ran in after it: a timer's SIGALRM
    crashed the next kernel, a lowered file limit failed verify as a whole, a stopped fork server
    hung the run for ever.  Now the change is named in its row and a fresh worker runs the rest."""
    rows = {
        r.kernel: r for r in run(small_run(changers_build, (changer, "naive", "basic"), kernel_timeout=10.0)).results
    }
    assert all(row.status == "ok" for row in rows.values()), rows
    assert rows["naive"].hits == rows["basic"].hits == rows[changer].hits
    notes = [w for w in rows[changer].warnings if w.startswith("changes its worker process")]
    if changer in CHANGES:
        assert notes and CHANGES[changer] in notes[0], rows[changer].warnings
    for other in ("naive", "basic"):
        assert not any("worker process" in w for w in rows[other].warnings)
    checked = verify(VerifyConfig(kernels=(changer, "basic"), builds=(changers_build,), cases=500, jobs=1))
    verdicts = {v.kernel: v for v in checked.kernels}
    assert verdicts["basic"].status == "ok" and verdicts["basic"].verdict != "FAIL", verdicts["basic"]
    # Judged too, even one that takes every descriptor, a new uid or a new root: verify died as a
    # whole ("PermissionError ... eval-becomes_nobody.npy") when the worker created its answers
    # file; they go into the parent's now, already open
    assert verdicts[changer].status == "ok", verdicts[changer]


@pytest.mark.skipif(not sys.platform.startswith("linux"), reason="a child subreaper is Linux's")
def test_a_spinner_that_left_its_workers_process_group_is_ended(changers_build):
    """A kernel's child in a session of its own (setsid), its parent gone, outlived the kill of
    its worker's process group: it spun on beside every later row, and after the run.  Its
    worker adopts it (the row says so), and the fork server ends it once that worker is gone."""
    rows = {r.kernel: r for r in run(small_run(changers_build, ("escapes_with_setsid", "basic"))).results}
    assert any("left 1 child process" in w for w in rows["escapes_with_setsid"].warnings), rows
    assert rows["basic"].status == "ok" and not any("worker process" in w for w in rows["basic"].warnings)
    escapees = printed_pids(rows["escapes_with_setsid"], "escapee")  # the first workers' that ran it
    deadline = time.monotonic() + PATIENCE_S
    while any(_alive(pid) for pid in escapees) and time.monotonic() < deadline:
        time.sleep(0.05)
    assert not [pid for pid in escapees if _alive(pid)], escapees


@pytest.mark.skipif(
    not sys.platform.startswith("linux") or os.uname().machine != "x86_64", reason="the filter is Linux x86-64's"
)
def test_a_kernel_cannot_signal_a_process_beyond_its_worker(changers_build, strangers):
    """A kernel that stopped the run's own process (SIGSTOP to its worker's grandparent) hung the
    run for ever, and one kill(-1, ...) reaches every process its user owns.  Its kill() of a
    process of the test's and of the run itself (this process: SIGUSR2, caught here) fails with
    EPERM, and its row and the others are measured as ever."""
    rows = {r.kernel: r for r in run(small_run(changers_build, ("signals_strangers", "basic"))).results}
    attempts = strangers.refused(printed(rows["signals_strangers"]))
    assert len(attempts) % 2 == 0, attempts  # each worker tried both
    assert all(row.status == "ok" for row in rows.values()), rows
    assert rows["signals_strangers"].hits == rows["basic"].hits


@pytest.mark.skipif(not server.landlock_abi(), reason="no Landlock in this kernel: a worker can write files here")
def test_a_kernel_can_create_change_or_remove_no_file(changers_build, tmp_path, monkeypatch):
    """A kernel removed the run's scratch scene (every row crashed), rewrote verify's scene under
    the other kernels (correct ones FAILed), took the --json path before the run, replaced the
    build cache's libraries, opened the run's memory through /proc.  Each fails with EACCES, and
    its row and the others are measured as ever."""
    (tmp_path / "precious").write_text("the user's")
    (tmp_path / "doomed").write_text("kept")
    monkeypatch.setenv("SB_TEST_FILES", str(tmp_path))
    monkeypatch.setenv("SB_TEST_RUN_PID", str(os.getpid()))
    rows = {r.kernel: r for r in run(small_run(changers_build, ("writes_files", "basic"))).results}
    assert all(row.status == "ok" for row in rows.values()), rows
    assert rows["writes_files"].hits == rows["basic"].hits
    denied = os.strerror(errno.EACCES)
    tried = f"create: {denied}, rewrite: {denied}, remove: {denied}, memory: {denied}"
    assert tried in printed(rows["writes_files"]), rows["writes_files"].warnings
    assert sorted(path.name for path in tmp_path.iterdir()) == ["doomed", "precious"]
    assert (tmp_path / "precious").read_text() == "the user's"


@pytest.mark.parametrize("changer", ["kills_parent", "terminates_parent"])
def test_the_clock_is_read_again_after_a_kernel_ends_the_fork_server(changers_build, changer):
    """The clock's worker went with the fork server: every round's reading failed, and every
    other row lost its cycles a test, with nothing saying why.  It is read again in a fresh one."""
    result = run(small_run(changers_build, (changer, "naive", "basic"), kernel_timeout=10.0))
    cpu = result.env["machine"]["cpu"]
    assert cpu["measured_mhz"], cpu
    rows = {r.kernel: r for r in result.results}
    assert rows["naive"].cycles_per_test and rows["basic"].cycles_per_test, rows


def test_answers_that_cannot_be_written_are_the_kernels_crash_not_verifys(o2_library, scratch):
    """A worker unable to write a kernel's answers failed verify as a whole ("PermissionError
    ... eval-bad.npy", after a kernel's new uid or chroot, when the worker created the file):
    now it is that kernel's crash, and a fresh worker goes on.  The answers file is the
    parent's, handed to the worker; here it is /dev/full, a disk with no room left."""
    with Worker(o2_library) as worker, open("/dev/full", "r+b") as full:
        worker.load(generate("uniform", 5, 40, 7), scratch)
        answers, worker._answers = worker._answers, full
        worker._replace_process()
        with pytest.raises(WorkerCrashed, match="its answers could not be written: OSError"):
            worker.evaluate("basic")
        assert worker.process_changes["basic"].startswith("its answers could not be written")
        worker._answers = answers
        worker._replace_process()
        assert worker.evaluate("basic").shape == (5, 40)


FORK_SERVER_CHANGERS = [
    n for n in ("pins_parent", "renices_parent", "idles_parent", "limits_parent_cpu") if n in CHANGES
]


def _inheritable(pid: int) -> tuple:
    """What a process forked from `pid` would inherit of what a kernel can change in it through getppid()."""
    return (
        os.sched_getaffinity(pid),
        os.getpriority(os.PRIO_PROCESS, pid),
        os.sched_getscheduler(pid),
        resource.prlimit(pid, resource.RLIMIT_CPU),
    )


@pytest.mark.parametrize("changer", FORK_SERVER_CHANGERS)
def test_a_kernel_that_changes_the_fork_server_reaches_no_later_worker(changers_build, changer):
    """A kernel that changed its parent, the fork server (getppid()), changed every worker forked
    after it: a probe's spy in a later worker read nice 19, SCHED_IDLE or one CPU, and a CPU
    limit killed innocent rows.  The fork server is replaced before it forks again."""
    retired_before = list(forkserver._retired)
    result = run(small_run(changers_build, (changer, "basic")))
    rows = {r.kernel: r for r in result.results}
    assert any(CHANGES[changer] in w for w in rows[changer].warnings), rows[changer].warnings
    with Worker(build(changers_build)) as worker:
        assert _inheritable(worker._process.pid) == _inheritable(os.getpid())
    assert any(CHANGES[changer].split(": ", 1)[1] in r for r in result.env["builds"][0]["fork_server_replaced"])
    # A retired fork server exits after its last worker; whether it has ended cannot be checked
    # here: under pytest -n, workers of this process's other tests (module fixtures) were forked
    # from the server this test retires and keep it alive, as they should.
    assert [retired for retired in forkserver._retired if all(retired is not old for old in retired_before)]


@pytest.fixture(scope="module")
def scene_changers_build(private_cache) -> BuildConfig:
    config = BuildConfig.parse("-O2", extra_sources=(DATA / "scene_changers.c",))
    build(config)
    return config


@pytest.mark.parametrize("writer", ["halves_its_scene", "moves_never"])
def test_a_kernel_that_writes_into_its_sb_scene_crashes_its_own_row_and_no_other(scene_changers_build, writer):
    """One sb_scene struct serves every row of a loop shape and their NoOperation twins: a kernel
    that halved its n_points halved every later row's hits (and verify failed them all), one that
    set `never` to -inf left every later row without a net time."""
    rows = {r.kernel: r for r in run(small_run(scene_changers_build, (writer, "naive", "basic"))).results}
    alone = {r.kernel: r for r in run(small_run(scene_changers_build, ("basic",))).results}
    assert rows[writer].status == "crashed" and "wrote into the sb_scene it was given" in rows[writer].reason
    assert rows["naive"].hits == rows["basic"].hits == alone["basic"].hits
    for other in ("naive", "basic"):
        assert rows[other].status == "ok" and rows[other].net_s is not None, rows[other]
    checked = verify(VerifyConfig(kernels=(writer, "naive", "basic"), builds=(scene_changers_build,), cases=500))
    verdicts = {v.kernel: v for v in checked.kernels}
    assert verdicts[writer].status == "crashed", verdicts[writer]
    for other in ("naive", "basic"):
        assert verdicts[other].status == "ok" and verdicts[other].verdict != "FAIL", verdicts[other]


@pytest.mark.parametrize("unmapper", ["unmaps_its_scene", "protects_its_scene"])
def test_a_kernel_that_unmaps_its_scene_costs_no_other_row(scene_changers_build, unmapper):
    """verify runs a build's kernels one after another in one worker: the kernel after one that
    unmapped the scene's pages (or made them PROT_NONE) after its evaluation crashed on them."""
    checked = verify(VerifyConfig(kernels=(unmapper, "naive", "basic"), builds=(scene_changers_build,), cases=500))
    verdicts = {v.kernel: v for v in checked.kernels}
    for other in ("naive", "basic"):
        assert verdicts[other].status == "ok" and verdicts[other].verdict != "FAIL", verdicts[other]
    assert any("unmapped or protected the scene's pages" in note for note in verdicts[unmapper].notes), verdicts[
        unmapper
    ]


def test_a_release_that_crashes_at_the_next_scene_costs_its_own_row(scene_changers_build):
    """A prepared index is released when the next scene is loaded: a .release() that aborted
    there killed verify as a whole ("worker killed by signal 6")."""
    checked = verify(
        VerifyConfig(kernels=("release_crashes", "naive", "basic"), builds=(scene_changers_build,), cases=500)
    )
    verdicts = {v.kernel: v for v in checked.kernels}
    crashed = verdicts["release_crashes"]
    assert crashed.status == "crashed" and "as its prepared index was released" in crashed.reason, crashed
    assert "killed by signal 6" in crashed.reason
    for other in ("naive", "basic"):
        assert verdicts[other].status == "ok" and verdicts[other].verdict != "FAIL", verdicts[other]


def test_a_release_that_changes_its_process_costs_no_other_row(scene_changers_build):
    """A .release() that changed its process (at the next batch's scene) had the worker
    replaced, and the replacement reloaded the scene it was leaving, whose file verify had
    deleted once that batch was judged: verify ended ("No such file or directory")."""
    config = VerifyConfig(
        kernels=("release_changes_umask", "naive", "basic"),
        builds=(scene_changers_build,),
        cases=500,
        batch_rows=20_000,
    )
    verdicts = {v.kernel: v for v in verify(config).kernels}
    assert any("-> 077" in note for note in verdicts["release_changes_umask"].notes), verdicts
    for kernel in ("release_changes_umask", "naive", "basic"):
        assert verdicts[kernel].status == "ok" and verdicts[kernel].verdict != "FAIL", verdicts[kernel]


def test_a_reply_a_kernel_writes_into_the_channel_crashes_its_own_row(changers_build):
    """A reply the worker did not send for this request (a kernel writing into the channel, a
    forked child answering) is the row's crash: every row after it was answered by the reply
    meant for the row before."""
    rows = {r.kernel: r for r in run(small_run(changers_build, ("naive", "forges_reply", "basic"))).results}
    assert rows["forges_reply"].status == "crashed", rows["forges_reply"]
    assert "a reply this request did not ask for" in rows["forges_reply"].reason
    assert rows["naive"].status == rows["basic"].status == "ok"
    assert rows["naive"].hits == rows["basic"].hits > 0


def test_a_kernel_that_stops_its_worker_times_out_saying_so(changers_build):
    rows = {r.kernel: r for r in run(small_run(changers_build, ("stops_itself", "basic"), kernel_timeout=1.0)).results}
    assert rows["stops_itself"].status == "timed-out" and "it was stopped (SIGSTOP" in rows["stops_itself"].reason
    assert rows["basic"].status == "ok"


def test_two_kernels_of_one_name_in_files_of_one_name_are_told_apart(tmp_path):
    """Two --source files both called k.c, in two folders, defining one kernel: the refusal
    said "(k.c:4 and k.c:4)"."""
    text = (DATA / "shadowing_kernel.c").read_text().replace("basic", "twice")
    for folder in ("a", "b"):
        (tmp_path / folder).mkdir()
        (tmp_path / folder / "k.c").write_text(text)
    command = [sys.executable, "-m", "sectorbench", "kernels", "--flags", "-O2"]
    command += ["--source", str(tmp_path / "a" / "k.c"), "--source", str(tmp_path / "b" / "k.c")]
    completed = subprocess.run(command, capture_output=True, text=True, timeout=PATIENCE_S)
    assert completed.returncode == 2
    assert "two kernels are named twice" in completed.stderr
    assert str(tmp_path / "a" / "k.c") in completed.stderr and str(tmp_path / "b" / "k.c") in completed.stderr


@pytest.mark.parametrize(
    "name, args, said",
    [
        # the broadphase row ran the C kernel grid, so the run (and its exports) held it twice
        (
            "grid",
            ["run", "--scene", "game", "--kernels", "grid", "--broadphase", "none", "--broadphase", "grid"],
            "the grid broadphase and ",
        ),
        # the numpy peer ran in the C kernel numpy's place, which never ran
        ("numpy", ["run", "--kernels", "numpy"], "the numpy peer and "),
        ("numpy", ["kernels"], "the numpy peer and "),
    ],
)
def test_a_source_kernel_named_as_a_broadphase_or_a_peer_is_refused(tmp_path, name, args, said):
    """A --source kernel named as a broadphase or a peer was silently taken for it, or it for the
    kernel: the refusal a kernel named as a built-in one gets applies to them too."""
    source = tmp_path / f"{name}.c"
    source.write_text((DATA / "shadowing_kernel.c").read_text().replace("basic", name))
    command = [sys.executable, "-m", "sectorbench", *args, "--flags", "-O2", "--source", str(source)]
    if args[0] == "run":
        command += ["-n", "50", "-m", "500", "--repeat", "3", "--min-time", "0.001"]
    completed = subprocess.run(command, capture_output=True, text=True, timeout=PATIENCE_S, cwd=tmp_path)
    assert completed.returncode == 2, completed.stdout + completed.stderr
    assert f"two kernels are named {name} ({said}" in completed.stderr
    assert completed.stderr.count("\n") == 1 and "Traceback" not in completed.stderr


def test_workers_have_no_terminal_a_kernel_could_open(unruly_build, scratch):
    """A kernel that opened /dev/tty wrote into the user's terminal and left its echo off."""
    with Worker(build(unruly_build)) as worker:
        assert os.getsid(worker._process.pid) != os.getsid(0)
        tty_nr = int(Path(f"/proc/{worker._process.pid}/stat").read_text().rsplit(")", 1)[1].split()[4])
        assert tty_nr == 0


def test_counters_refused_by_the_kernel_name_the_setting_that_decides():
    """perf_event_open refused ("Permission denied", a Debian kernel's paranoid level 3 for a
    user): the reason names kernel.perf_event_paranoid and its value, read from /proc."""
    from sectorbench.measure.server import PERF_EVENT_PARANOID, counters_unavailable

    level = PERF_EVENT_PARANOID.read_text().strip()
    assert counters_unavailable(errno.EACCES) == (
        f"perf_event_open: Permission denied (kernel.perf_event_paranoid is {level}; "
        "2 or lower lets a user count their own processes)"
    )
    assert counters_unavailable(errno.ENOENT) == "perf_event_open: No such file or directory"  # no counters at all


def test_the_oom_killer_takes_a_worker_first(o2_worker):
    """A kernel that touches more memory than the machine has: the worker, whose kernels are
    untrusted code, is the OOM killer's first choice, never sectorbench or the user's shell."""
    from sectorbench.measure.server import OOM_FIRST

    o2_worker.describe()  # answered: the worker is past its start-up
    assert int(Path(f"/proc/{o2_worker._process.pid}/oom_score_adj").read_text()) == OOM_FIRST
    assert int(Path("/proc/self/oom_score_adj").read_text()) < OOM_FIRST


def test_a_crashing_kernel_dumps_no_core_into_the_users_directory(o2_worker):
    """A kernel that raised its core limit to the hard one and aborted left a 28 MB `core` in
    the directory sectorbench ran in (core_pattern "core"): a worker's limit is 0, hard too."""
    o2_worker.describe()  # answered: the worker is past its start-up
    limits = Path(f"/proc/{o2_worker._process.pid}/limits").read_text().splitlines()
    core = next(line for line in limits if line.startswith("Max core file size"))
    assert core.split()[4:6] == ["0", "0"], core


def test_what_a_kernel_printed_leaves_the_disk_once_read(unruly_build, scratch):
    """A kernel printing on every call filled $TMPDIR with gigabytes of captured output over a
    run; the capture files now hold one request's output at most."""

    def on_disk(worker) -> int:
        return sum(os.fstat(c.file.fileno()).st_size for c in (worker._stdout, worker._stderr))

    with Worker(build(unruly_build)) as worker:
        worker.load(generate("uniform", 12, 300, 0), scratch)
        worker.sample(LoopRef("chatty"), calls=20)
        printed = on_disk(worker)
        worker.sample(LoopRef("basic"), calls=1)
        assert printed > 0 and on_disk(worker) == 0
        assert worker.printed["chatty"].lines == 2 * 20  # two lines a call, every one counted


# ---------------------------------------------------------------- deadlines


def test_a_kernel_that_never_returns_is_timed_out_and_the_others_are_measured(unruly_build):
    result = run(small_run(unruly_build, ("naive", "hangs", "basic"), kernel_timeout=1.0))
    rows = {r.kernel: r for r in result.results}
    assert rows["hangs"].status == "timed-out" and "no answer within" in rows["hangs"].reason
    assert rows["naive"].status == "ok" and rows["basic"].status == "ok"
    assert rows["naive"].net_s is not None and rows["basic"].overhead_s is not None


@pytest.mark.parametrize(
    ("how", "status", "reason"),
    [
        ("crash", "crashed", "worker killed by signal 11 while loading the -O2 build"),
        ("exit", "crashed", "worker exited with status 3 while loading the -O2 build"),
        ("hang", "timed-out", "no answer within 5 s (the start-up allowance): killed while loading the -O2 build"),
        # returning, having changed the process every kernel of the build would run in
        ("timer", "crashed", "worker exited with status 3: cannot load"),
        ("nofile", "crashed", "worker exited with status 3: cannot load"),
        ("thread", "crashed", "worker exited with status 3: cannot load"),
    ],
)
def test_a_constructor_that_fails_costs_its_own_rows_not_the_build(private_cache, monkeypatch, how, status, reason):
    """A --source constructor that crashes, exits or hangs while the build loads: its kernel's
    row fails, saying so; the build's built-in kernels run in the same build without the file."""
    import sectorbench.measure.worker as worker_module

    monkeypatch.setenv("SB_TEST_CONSTRUCTOR", how)
    monkeypatch.setattr(worker_module, "STARTUP_S", 5.0)  # the start-up allowance, short for the hang
    monkeypatch.setattr(worker_module, "FAILED_LOADS", {})  # each way fails afresh (one library for all three)
    config = BuildConfig.parse("-O2", extra_sources=(DATA / "unruly_constructor.c",))
    result = run(small_run(config, ("naive", "never_reached", "basic")))
    rows = {r.kernel: r for r in result.results}
    assert rows["never_reached"].status == status
    assert rows["never_reached"].reason.startswith(reason)
    assert rows["never_reached"].reason.endswith("(a constructor in unruly_constructor.c?)")
    change = {"timer": "left a timer armed (ITIMER_REAL)", "nofile": "RLIMIT_NOFILE", "thread": "left 1 thread running"}
    assert change.get(how, "") in rows["never_reached"].reason
    assert rows["naive"].status == rows["basic"].status == "ok"
    assert rows["naive"].hits == rows["basic"].hits > 0
    assert result.env["builds"][0]["load_failure"] == rows["never_reached"].reason
    # In two judging processes (spawned: the load the parent found failing is not tried there again).
    checked = verify(
        VerifyConfig(kernels=("never_reached", "basic"), builds=(config,), cases=300, jobs=2, batch_rows=50_000)
    )
    verdicts = {v.kernel: v for v in checked.kernels}
    assert (verdicts["never_reached"].status, verdicts["never_reached"].verdict) == (status, "FAIL")
    assert verdicts["basic"].status == "ok" and verdicts["basic"].verdict != "FAIL"


def test_a_library_the_loader_refuses_is_said_in_the_loaders_words(private_cache, monkeypatch, tmp_path):
    """A --source kernel calling a function nothing defines: the build links (-shared), the
    loader refuses it (RTLD_NOW), and cffi's fallback, ctypes.util.find_library, then failed on
    the worker's write sandbox: the row said "No usable temporary directory found".  Nothing of
    the library ran: the row's build failed, it did not crash (it said "crashed: worker exited
    with status 3: cannot load sectorbench-<hash>.so: OSError: <its path>: undefined ...")."""
    import sectorbench.measure.worker as worker_module

    monkeypatch.setattr(worker_module, "FAILED_LOADS", {})
    source = tmp_path / "undefined.c"
    source.write_text(
        '#include "sb_common.h"\n#include "basic_predicate.h"\nfloat nowhere_defined(void);\n'
        "static inline int undefined(float cx, float cy, float ux, float uy, float r2, float k, float px, float py) {\n"
        "    return basic_predicate(cx, cy, ux, uy, r2 * nowhere_defined(), k, px, py);\n}\n"
        'SB_KERNEL(undefined, SCALAR, 1, (cx, cy, ux, uy, r2, cos_theta), .family = "sector", .summary = "x");\n'
    )
    shutil.copy(DATA / "basic_predicate.h", tmp_path)
    result = run(small_run(BuildConfig.parse("-O2", extra_sources=(source,)), ("undefined", "basic")))
    rows = {r.kernel: r for r in result.results}
    refused = "the dynamic loader refused the build's library: undefined symbol: nowhere_defined"
    assert rows["undefined"].reason.startswith(refused), rows["undefined"].reason
    assert rows["undefined"].status == "build-failed"
    assert "temporary directory" not in rows["undefined"].reason and rows["basic"].status == "ok"
    assert "a constructor in" not in rows["undefined"].reason  # the loader said why: no guess
    monkeypatch.setattr(worker_module, "FAILED_LOADS", {})
    config = BuildConfig.parse("-O2", extra_sources=(source,))
    verdicts = {
        v.kernel: v for v in verify(VerifyConfig(kernels=("undefined", "basic"), builds=(config,), cases=300)).kernels
    }
    assert (verdicts["undefined"].status, verdicts["undefined"].verdict) == ("build-failed", "FAIL")
    assert verdicts["undefined"].reason.startswith(refused) and verdicts["basic"].status == "ok"


def test_a_constructor_that_hangs_past_max_minutes_leaves_rows_that_say_so(private_cache, monkeypatch):
    """The hang took the run's whole --max-minutes: the load of the build without the file got
    none of it, and the run ended in an error with nothing written.  Listing the built-in
    kernels may outlast the budget: every row says the budget ran out, and the run returns."""
    import sectorbench.measure.worker as worker_module

    monkeypatch.setenv("SB_TEST_CONSTRUCTOR", "hang")
    monkeypatch.setattr(worker_module, "FAILED_LOADS", {})
    config = BuildConfig.parse("-O2", extra_sources=(DATA / "unruly_constructor.c",))
    result = run(small_run(config, ("naive", "never_reached", "basic"), max_minutes=0.05))  # 3 s
    rows = {r.kernel: r for r in result.results}
    assert rows["never_reached"].status == "timed-out", rows["never_reached"]
    assert "(a constructor in unruly_constructor.c?)" in rows["never_reached"].reason
    for name in ("naive", "basic"):
        assert rows[name].status == "timed-out" and "--max-minutes 0.05 ran out" in rows[name].reason, rows[name]


def test_every_listing_of_a_build_names_the_kernels_its_failed_load_cost(private_cache):
    """The commands that only list a build's kernels (kernels, the Python API's verify, the
    instruction counts) start its worker too: a crashing constructor is a row there as well."""
    import sectorbench

    source = DATA / "unruly_constructor.c"
    listing = subprocess.run(
        [sys.executable, "-m", "sectorbench", "kernels", "--flags", "-O2", "--source", str(source)],
        capture_output=True,
        text=True,
        timeout=PATIENCE_S,
    )
    assert listing.returncode == 0, listing.stderr
    rows = {line.split("│")[1].strip(): line for line in listing.stdout.splitlines() if line.count("│") > 2}
    assert "no: worker killed by signal 11" in rows["never_reached"] and "unruly_constructor.c?" in listing.stdout
    assert "│ yes " in rows["basic"]
    report = sectorbench.verify(source=source, kernels="never_reached,basic", cases=300)
    assert not report.passed
    assert report.kernel("never_reached").verdict == "crashed" and not report.kernel("never_reached").passed
    assert report.kernel("basic").passed


def test_verify_times_out_a_kernel_that_never_returns_and_checks_the_others(unruly_build):
    result = verify(VerifyConfig(kernels=("hangs", "basic"), builds=(unruly_build,), cases=300, kernel_timeout=1.0))
    verdicts = {v.kernel: v for v in result.kernels}
    assert verdicts["hangs"].status == "timed-out"
    assert verdicts["basic"].status == "ok" and verdicts["basic"].verdict != "FAIL"


def _running(pid: int) -> bool:
    """Whether `pid` is alive (a zombie, killed and awaiting its reaper, is not)."""
    try:
        return Path(f"/proc/{pid}/stat").read_text().rsplit(")", 1)[1].split()[0] != "Z"
    except OSError:
        return False


def test_a_process_a_kernel_leaves_behind_ends_with_its_worker(unruly_build):
    result = run(small_run(unruly_build, ("forks", "basic")))
    assert {r.kernel: r.status for r in result.results} == {"forks": "ok", "basic": "ok"}
    child = printed_pids(next(r for r in result.results if r.kernel == "forks"), "forked")[0]
    deadline = time.monotonic() + PATIENCE_S
    while _running(child) and time.monotonic() < deadline:
        time.sleep(0.05)
    assert not _running(child)


def test_max_minutes_holds_during_a_hang(unruly_build, tmp_path):
    """A kernel timeout longer than the run's limit: --max-minutes cuts the hang, the run ends."""
    out = tmp_path / "hang.json"
    command = [sys.executable, "-m", "sectorbench", "run", "-n", "12", "-m", "300", "--repeat", "2"]
    command += ["--min-time", "0.001", "--flags", "-O2", "--source", str(UNRULY), "--kernels", "naive,hangs"]
    command += ["--kernel-timeout", "3600", "--max-minutes", "0.15", "--json", str(out)]
    completed = subprocess.run(command, capture_output=True, text=True, timeout=PATIENCE_S)
    assert completed.returncode == 0, completed.stderr
    rows = {r["kernel"]: r for r in json.loads(out.read_text())["results"]}
    assert rows["hangs"]["status"] == "timed-out" and "--max-minutes" in rows["hangs"]["reason"]
    assert rows["naive"]["status"] in ("ok", "timed-out")


def test_a_kernel_too_slow_for_max_minutes_costs_its_own_rows(unruly_build):
    """Calibrated over --max-minutes, the run was refused as a whole ("the 10 rounds would take
    40 s") for one slow kernel; now the costliest rows are left out until the rest fits."""
    config = small_run(unruly_build, ("crawls", "naive", "basic"), max_minutes=0.3, modes=("inline",))
    config = replace(config, timing=replace(FAST, repeat=10))
    rows = {r.kernel: r for r in run(config).results}
    assert rows["crawls"].status == "timed-out" and "left out: its 10 rounds would take" in rows["crawls"].reason
    assert "--max-minutes 0.3" in rows["crawls"].reason
    assert rows["naive"].status == rows["basic"].status == "ok" and rows["basic"].net_s is not None


def _descendants(pid: int) -> dict[int, int]:
    """Every live process under `pid`, with its depth (1: a child)."""
    parents = {}
    for entry in Path("/proc").iterdir():
        if entry.name.isdigit():
            try:
                parents[int(entry.name)] = int((entry / "stat").read_text().rsplit(")", 1)[1].split()[1])
            except OSError:
                continue
    depth = {pid: 0}
    while True:
        more = {child: depth[parent] + 1 for child, parent in parents.items() if parent in depth and child not in depth}
        if not more:
            return {child: level for child, level in depth.items() if level > 0}
        depth.update(more)


def _workers_of(pid: int) -> list[int]:
    """The build workers of a run `pid`: the children of its fork server (measure/forkserver.py)."""
    return [child for child, level in _descendants(pid).items() if level == 2]


def _alive(pid: int) -> bool:
    try:
        state = Path(f"/proc/{pid}/stat").read_text().rsplit(")", 1)[1].split()[0]
    except OSError:
        return False
    return state != "Z"


@pytest.mark.skipif(not sys.platform.startswith("linux"), reason="PR_SET_PDEATHSIG and /proc are Linux's")
def test_sigkill_of_the_parent_leaves_no_worker(unruly_build):
    command = [sys.executable, "-m", "sectorbench", "run", "-n", "12", "-m", "300", "--repeat", "2"]
    command += ["--min-time", "0.001", "--flags", "-O2", "--source", str(UNRULY), "--kernels", "hangs"]
    command += ["--kernel-timeout", "3600"]
    parent = subprocess.Popen(command, stdout=subprocess.DEVNULL, stderr=subprocess.DEVNULL)
    left_behind: list[int] = []
    try:
        deadline = time.monotonic() + PATIENCE_S
        workers: list[int] = []
        while not workers and time.monotonic() < deadline and parent.poll() is None:
            workers = _workers_of(parent.pid)
            time.sleep(0.2)
        assert workers, "the run never started a worker"
        time.sleep(1.0)  # let it reach the hanging kernel
        left_behind += _descendants(parent.pid)  # the fork server, the workers, what they started
        parent.send_signal(signal.SIGKILL)
        parent.wait()
        while any(_alive(pid) for pid in left_behind) and time.monotonic() < deadline:
            time.sleep(0.1)
        assert not any(_alive(pid) for pid in left_behind), f"orphaned processes: {left_behind}"
    finally:
        if parent.poll() is None:
            parent.kill()
        for pid in [*left_behind, *_descendants(parent.pid)]:
            if _alive(pid):
                os.kill(pid, signal.SIGKILL)


# ---------------------------------------------------------------- the FP environment


@pytest.mark.parametrize(
    "changer, change",
    [("rounds_up", "rounding upward"), ("sets_ftz", "flush-to-zero on")],
)
def test_a_kernel_that_changes_the_fp_environment_leaves_its_neighbours_alone(unruly_build, changer, change):
    def counts(kernels):
        config = VerifyConfig(kernels=kernels, builds=(unruly_build,), cases=3000, seed=3)
        return {v.kernel: v for v in verify(config).kernels}

    alone = counts(("basic", "sse2"))
    before = counts((changer, "basic", "sse2"))
    after = counts(("basic", "sse2", changer))
    for neighbour in ("basic", "sse2"):
        expected = (alone[neighbour].mismatches, alone[neighbour].worst_margin, alone[neighbour].cases)
        for other in (before, after):
            assert (other[neighbour].mismatches, other[neighbour].worst_margin, other[neighbour].cases) == expected
            assert other[neighbour].fp_environment_change is None
    for other in (before, after):
        assert other[changer].fp_environment_change == change
        assert f"changes the FP environment: {change}" in other[changer].notes


def test_run_names_the_kernel_that_changes_the_fp_environment(unruly_build):
    result = run(small_run(unruly_build, ("rounds_up", "basic"), threads=(1, 2)))
    for row in result.results:
        if row.kernel == "rounds_up":
            assert row.fp_environment_change == "rounding upward", row
            assert any("changes the FP environment: rounding upward" in w for w in row.warnings)
        else:
            assert row.fp_environment_change is None and row.status == "ok"
    assert result.env["builds"][0]["fp_environment"]["rounding"] == "to nearest"


def test_a_change_to_the_fp_environment_in_the_first_calibration_trial_is_named(unruly_build):
    # the first trial's time is not kept (calibration grows the call count): its change was lost
    result = run(small_run(unruly_build, ("rounds_up_once", "basic")))
    (row,) = [row for row in result.results if row.kernel == "rounds_up_once"]
    assert row.fp_environment_change == "rounding upward", row
    assert any("changes the FP environment: rounding upward" in w for w in row.warnings), row.warnings


@needs_gcc
def test_a_fast_math_build_records_its_own_environment(private_cache):
    fast_math = BuildConfig.parse("-O2 -ffast-math", cc="gcc")  # gcc's library sets FTZ/DAZ as it loads
    result = run(RunConfig(sectors=8, points=100, kernels=("basic",), builds=(fast_math,), timing=FAST))
    env = result.env["builds"][0]["fp_environment"]
    assert env["flush_to_zero"] and env["denormals_are_zero"]  # gcc's crtfastmath, set at load
    assert result.results[0].fp_environment_change is None  # the build's environment is no kernel's change


@pytest.mark.parametrize(
    "flags, cc, change",
    [
        ("-O2", None, "rounding upward, flush-to-zero on"),
        # FTZ is already on as gcc's -ffast-math library loads (crtfastmath): not the constructor's change
        pytest.param("-O2 -ffast-math", "gcc", "rounding upward", marks=needs_gcc),
    ],
)
def test_a_constructor_that_changes_the_fp_environment_at_load_is_undone_and_noted(private_cache, flags, cc, change):
    note = (
        "loading this build changed the floating-point environment (a constructor in a --source file?): "
        f"{change}; restored before any kernel ran"
    )
    compiler = {"cc": cc} if cc else {}  # None: the default compiler
    plain = BuildConfig.parse(flags, **compiler)
    with_file = BuildConfig.parse(flags, extra_sources=(FPENV_AT_LOAD,), **compiler)

    def verdicts(build_config, kernels):
        result = verify(VerifyConfig(kernels=kernels, builds=(build_config,), cases=2000, seed=3))
        return {v.kernel: v for v in result.kernels}

    alone = verdicts(plain, ("basic",))["basic"]
    beside = verdicts(with_file, ("basic", "loaded_beside"))
    for verdict in beside.values():
        assert (verdict.mismatches, verdict.worst_margin, verdict.cases) == (
            alone.mismatches,
            alone.worst_margin,
            alone.cases,
        ), verdict.kernel
        assert note in verdict.notes and verdict.fp_environment_change == f"at load: {change}"
    assert alone.fp_environment_change is None and not any("loading this build" in n for n in alone.notes)

    result = run(small_run(with_file, ("basic", "loaded_beside")))
    for row in result.results:
        assert row.status == "ok" and note in row.warnings and row.fp_environment_change == f"at load: {change}"
    fast = "-ffast-math" in flags
    assert result.env["builds"][0]["fp_environment"] == {
        "denormals_are_zero": fast,
        "flush_to_zero": fast,
        "rounding": "to nearest",
        "traps": [],
    }


# ---------------------------------------------------------------- the fork server


def _threads(pid: int) -> int:
    status = Path(f"/proc/{pid}/status").read_text()
    return int(next(line.split()[1] for line in status.splitlines() if line.startswith("Threads:")))


@pytest.mark.skipif(not sys.platform.startswith("linux"), reason="/proc is Linux's")
@needs_gcc
def test_a_worker_forked_after_a_fast_math_one_starts_clean_and_alone(o2_library, private_cache):
    fast = build(BuildConfig.parse("-O2 -ffast-math", cc="gcc"))  # FTZ/DAZ as it loads: gcc's crtfastmath
    with Worker(fast) as first:
        assert first.describe()[1].fp_environment["flush_to_zero"]
        with Worker(o2_library) as second:
            described = second.describe()[1]
            assert not described.fp_environment["flush_to_zero"]
            assert not described.fp_environment["denormals_are_zero"]
            assert _threads(second._process.pid) == 1  # no BLAS threads beside the timed loops


def test_a_killed_fork_server_takes_its_workers_and_the_next_worker_gets_a_new_one(o2_library):
    from sectorbench.measure import forkserver

    with Worker(o2_library) as worker:
        worker.describe()
        killed = forkserver.fork_server({})
        os.kill(killed._process.pid, signal.SIGKILL)
        deadline = time.monotonic() + PATIENCE_S
        while _alive(worker._process.pid) and time.monotonic() < deadline:
            time.sleep(0.01)
        with pytest.raises(WorkerCrashed, match="killed by signal 9"):
            worker.describe()
    with Worker(o2_library) as worker:
        assert worker.describe()[0]
    assert forkserver.fork_server({}) is not killed


@pytest.mark.skipif(not sys.platform.startswith("linux"), reason="/proc is Linux's")
def test_a_process_that_is_ending_is_told_from_one_that_is_not():
    """What tells a kernel that killed its parent, the fork server, from the next kernel in its
    worker (which the worker's PR_SET_PDEATHSIG would otherwise kill)."""
    from sectorbench.measure.process_state import ending

    child = subprocess.Popen([sys.executable, "-c", "import time; time.sleep(60)"])
    try:
        assert ending(child.pid) is None
        child.kill()
        deadline = time.monotonic() + PATIENCE_S
        while ending(child.pid) is None and time.monotonic() < deadline:
            time.sleep(0.01)
        assert ending(child.pid) in ("SIGKILL pending", "exiting", "a zombie")
        deadline = time.monotonic() + PATIENCE_S
        while ending(child.pid) != "a zombie" and time.monotonic() < deadline:  # unreaped: a zombie
            time.sleep(0.01)
        assert ending(child.pid) == "a zombie"
    finally:
        child.kill()
        child.wait()
    assert ending(child.pid) is None  # reaped: gone


# ---------------------------------------------------------------- the clock


@pytest.mark.parametrize("order", [("-O0", "-O2"), ("-O2", "-O0")])
def test_the_clock_is_read_in_an_O2_build_whatever_the_order_of_flags(private_cache, order):
    builds = tuple(BuildConfig.parse(flags) for flags in order)
    result = run(replace(small_run(builds[0], ("basic",)), builds=builds))
    assert result.env["machine"]["cpu"]["clock_build"]["flags"] == ["-O2"]
    assert result.env["machine"]["cpu"]["measured_mhz"] > 0


#: No x86 core ships with a clock above this (6.2 GHz at the most, 2024): a reading over it
#: counts cycles the core did not run.
PLAUSIBLE_MAX_MHZ = 6500


def test_the_clock_reads_a_clock_a_core_can_run_at(o2_worker):
    """A chain of `add $1` ran two iterations a cycle on a Sapphire Rapids-class Xeon (8162 MHz
    read where the core ran at ~4.1 GHz), halving every cyc/test and % bound of a run there."""
    readings = [o2_worker.clock_mhz() for _ in range(3)]
    assert 100 < max(readings) < PLAUSIBLE_MAX_MHZ, readings
