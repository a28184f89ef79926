"""--metric instructions: the driver under the real valgrind, its counts, the skip reasons."""

from __future__ import annotations

import contextlib
import json
import math
import os
import shutil
import signal
import subprocess
import sys
import time
from pathlib import Path

import pytest
from click.testing import CliRunner
from conftest import DATA, USER_KERNEL, needs_gcc

from sectorbench.cli import main
from sectorbench.compare.gate import GateRow, count_row
from sectorbench.errors import SectorbenchError
from sectorbench.families import scene_kinds as scenes
from sectorbench.measure import instructions
from sectorbench.native.build import BuildConfig, build, valgrind_include_dir

needs_valgrind = pytest.mark.skipif(
    shutil.which("valgrind") is None or valgrind_include_dir() is None,
    reason="valgrind and its headers are not installed (apt-get install valgrind)",
)
SMALL = ["-n", "32", "-m", "1000", "--repeat", "2", "--min-time", "0.001", "--flags", "-O2"]


@needs_valgrind
def test_counts_are_identical_in_five_runs(tmp_path):
    library = build(BuildConfig.parse("-O2"))
    scene = scenes.generate("uniform", 48, 2000, seed=3)
    scene_path = instructions.write_scene(scene, tmp_path / "scene.bin")
    jobs = ["basic:inline:count", "basic:inline:noop", "sse2:call:count", "sse2:call:noop"]
    runs = []
    for attempt in range(5):
        folder = tmp_path / f"run{attempt}"
        folder.mkdir()
        runs.append(instructions.count_loops(library, scene_path, jobs, "cc", folder))
    assert all(run == runs[0] for run in runs), runs  # to the instruction
    counts = runs[0]
    assert set(counts) == set(jobs)
    # The kernel's loop does more than its NoOperation twin, which still reads every point.
    assert counts["basic:inline:count"] > counts["basic:inline:noop"] > 48 * 2000
    assert counts["sse2:call:count"] > counts["sse2:call:noop"]


@needs_valgrind
def test_a_larger_scene_counts_more(tmp_path):
    """The count is the loop's own: twice the points, about twice the instructions."""
    library = build(BuildConfig.parse("-O2"))
    counts = []
    for points in (1000, 2000):
        scene = scenes.generate("uniform", 32, points, seed=0)
        path = instructions.write_scene(scene, tmp_path / f"scene-{points}.bin")
        folder = tmp_path / f"out-{points}"
        folder.mkdir()
        counts.append(instructions.count_loops(library, path, ["basic:inline:count"], "cc", folder))
    ratio = counts[1]["basic:inline:count"] / counts[0]["basic:inline:count"]
    assert 1.9 < ratio < 2.1


@needs_valgrind
def test_noop_loops_are_not_optimised_away_at_O3(tmp_path):
    """A NoOperation loop the compiler emptied would cost the same for any scene: at -O3, 4x the
    shapes are about 4x its instructions, exactly counted, where a timed check could fail on a busy machine."""
    library = build(BuildConfig.parse("-O3"))
    jobs = [f"{kernel}:{mode}:noop" for kernel in ("basic", "sse2") for mode in ("inline", "call")]
    counts = []
    for shapes in (100, 400):
        path = instructions.write_scene(scenes.generate("uniform", shapes, 2000, seed=0), tmp_path / f"{shapes}.bin")
        folder = tmp_path / f"out-{shapes}"
        folder.mkdir()
        counts.append(instructions.count_loops(library, path, jobs, "cc", folder))
    for job in jobs:
        assert 3.9 < counts[1][job] / counts[0][job] < 4.1, (job, counts[0][job], counts[1][job])
        assert counts[0][job] > 100 * 2000  # at least one instruction a test: every point is read


@needs_valgrind
def test_run_metric_instructions_reports_per_test_counts(tmp_path):
    out = tmp_path / "run.json"
    result = CliRunner().invoke(
        main, ["run", *SMALL, "--kernels", "basic,nosqrt", "--metric", "instructions", "--json", str(out)]
    )
    assert result.exit_code == 0, result.output
    assert "instructions per test" in result.output
    rows = json.loads(out.read_text())["results"]
    for row in rows:
        assert row["instructions"] > row["overhead_instructions"] > 0
        assert row["instructions_tests"] == 32 * 1000
        assert row["instructions_reason"] is None


#: basic's answers, but a loop that never ends under valgrind (a spin valgrind's one thread at a
#: time never lets finish looks the same): timed like any kernel, it stopped --metric
#: instructions for the 30 minutes valgrind was given, past --kernel-timeout and --max-minutes.
HANGS_UNDER_VALGRIND = r"""#include <valgrind/valgrind.h>
#include "sb_common.h"

static inline int stalls(float cx, float cy, float ux, float uy, float r2, float cos_theta, float px, float py) {
    for (volatile long spin = 0; RUNNING_ON_VALGRIND; spin++)
        ;
    const float dx = px - cx, dy = py - cy, s = dx * dx + dy * dy;
    return s < r2 && dx * ux + dy * uy > sqrtf(s) * cos_theta;
}

SB_KERNEL(stalls, SCALAR, 1, (cx, cy, ux, uy, r2, cos_theta), .family = "sector", .summary = "hangs in valgrind");
"""


@needs_valgrind
@pytest.mark.skipif(
    os.uname().machine != "x86_64" or not sys.platform.startswith("linux"), reason="the filter is x86-64 Linux's"
)
def test_a_kernel_counted_under_valgrind_cannot_signal_beyond_its_driver(tmp_path, strangers):
    """The driver runs each kernel's loops under valgrind, outside the workers: a kernel's kill()
    of a process of the test's (SIGKILL) and of the test's own process (SIGUSR2) fails with
    EPERM there too, and both kernels are counted."""
    out = tmp_path / "run.json"
    args = ["run", *SMALL, "--kernels", "signals_strangers,basic", "--source", str(DATA / "process_changers.c")]
    result = CliRunner().invoke(main, [*args, "--metric", "instructions", "--json", str(out)])
    assert result.exit_code == 0, result.output
    strangers.refused()
    rows = {row["kernel"]: row for row in json.loads(out.read_text())["results"]}
    for kernel in ("signals_strangers", "basic"):
        assert rows[kernel]["instructions"] > rows[kernel]["overhead_instructions"] > 0, rows[kernel]


@needs_valgrind
def test_a_loop_that_never_ends_under_valgrind_costs_its_own_counts(tmp_path):
    source, out = tmp_path / "stalls.c", tmp_path / "run.json"
    source.write_text(HANGS_UNDER_VALGRIND)
    kernels = "basic,stalls,sse2"  # counted before and after it, in one valgrind process
    args = ["run", *SMALL, "--kernels", kernels, "--source", str(source), "--kernel-timeout", "3"]
    started = time.monotonic()
    result = CliRunner().invoke(main, [*args, "--metric", "instructions", "--json", str(out)])
    assert result.exit_code == 0, result.output
    assert time.monotonic() - started < 120  # its allowance is 3 s and 32 000 tests at 1 us
    rows = {row["kernel"]: row for row in json.loads(out.read_text())["results"]}
    assert rows["stalls"]["status"] == "ok" and rows["stalls"]["instructions"] is None
    assert "did not end under valgrind" in rows["stalls"]["instructions_reason"], rows["stalls"]
    for other in ("basic", "sse2"):
        assert rows[other]["instructions"] > rows[other]["overhead_instructions"] > 0, rows[other]


#: basic's answers after one AVX-512 instruction (vmovaps %zmm0, %zmm0, as bytes: no flag or
#: target attribute says AVX-512, as none does in a -march=x86-64-v4 build). Only counted here,
#: never run natively, so the test needs no AVX-512 host: valgrind decodes no EVEX on any.
EVEX_IN_A_SCALAR_KERNEL = r"""#include "sb_common.h"

static inline int evex(float cx, float cy, float ux, float uy, float r2, float cos_theta, float px, float py) {
    __asm__ volatile(".byte 0x62, 0xf1, 0x7c, 0x48, 0x28, 0xc0" ::: "memory");
    const float dx = px - cx, dy = py - cy, s = dx * dx + dy * dy;
    return s < r2 && dx * ux + dy * uy > sqrtf(s) * cos_theta;
}

SB_KERNEL(evex, SCALAR, 1, (cx, cy, ux, uy, r2, cos_theta), .family = "sector", .summary = "one EVEX instruction");
"""


@needs_valgrind
@pytest.mark.skipif(os.uname().machine != "x86_64", reason="the kernel holds x86-64 machine code")
def test_an_avx512_instruction_no_flag_announced_is_named_as_what_valgrind_cannot_run(tmp_path):
    """valgrind 3.19 stops on the first EVEX instruction (SIGILL): the reason says so, and where,
    not valgrind's last three lines (once "Collected : 525297 / I refs: 525,297", the reason of
    every row of a -O3 -march=x86-64-v4 build)."""
    source = tmp_path / "evex.c"
    source.write_text(EVEX_IN_A_SCALAR_KERNEL)
    library = build(BuildConfig.parse("-O2", extra_sources=(source,)))
    scene_path = instructions.write_scene(scenes.generate("uniform", 16, 64, seed=0), tmp_path / "scene.bin")
    with pytest.raises(SectorbenchError) as failed:
        instructions.count_loops(library, scene_path, ["evex:inline:count"], "cc", tmp_path)
    said = str(failed.value)
    assert said.startswith("valgrind cannot run an AVX-512 (EVEX) instruction in evex_count_inline"), said
    assert "(bytes 0x62 0xf1 0x7c 0x48" in said.lower(), said


@needs_valgrind
def test_a_kernel_that_crashes_under_valgrind_is_said_to_have_crashed(tmp_path):
    """valgrind's last lines after a crash are its totals: the row's reason was "valgrind exited
    with status -11: ==123== Collected : 30 / ==123== / ==123== I refs: 30"."""
    library = build(BuildConfig.parse("-O2", extra_sources=(DATA / "crash_kernel.c",)))
    scene_path = instructions.write_scene(scenes.generate("uniform", 16, 64, seed=0), tmp_path / "scene.bin")
    jobs = ["basic:inline:count", "crashes:inline:count", "crashes:inline:noop"]
    with pytest.raises(SectorbenchError) as failed:
        instructions.count_loops(library, scene_path, jobs, "cc", tmp_path)
    said = str(failed.value)
    assert said == "its count loop was killed by SIGSEGV (signal 11) under valgrind, in crashes_count_inline", said


#: basic, whose first test prints what valgrind prints when it stops (on both streams), then
#: exits with status 1; and basic, printing a line to each stream on every test.
SAYS_VALGRINDS_WORDS = r"""#include <stdio.h>
#include <stdlib.h>
#include "sb_common.h"

static inline int sb_basic(float cx, float cy, float ux, float uy, float r2, float cos_theta, float px, float py) {
    const float dx = px - cx, dy = py - cy, s = dx * dx + dy * dy;
    return s < r2 && dx * ux + dy * uy > sqrtf(s) * cos_theta;
}

static inline int lies(float cx, float cy, float ux, float uy, float r2, float cos_theta, float px, float py) {
    for (FILE **stream = (FILE *[]){stdout, stderr, NULL}; *stream; stream++) {
        fprintf(*stream, "vex amd64->IR: unhandled instruction bytes: 0x62 0xF1 0x7C 0x48\n");
        fprintf(*stream, "==1== valgrind: Unrecognised instruction at address 0x1.\n");
        fprintf(*stream, "==1==    at 0x1: somewhere_else (in lies.so)\n");
        fprintf(*stream, "==1== Process terminating with default action of signal 11 (SIGSEGV)\n");
        fprintf(*stream, "==1==    at 0x1: somewhere_else (in lies.so)\n");
        fprintf(*stream, "==1==    by 0x2: main (in driver)\n");
    }
    exit(1);
    return sb_basic(cx, cy, ux, uy, r2, cos_theta, px, py);
}

static inline int prints(float cx, float cy, float ux, float uy, float r2, float cos_theta, float px, float py) {
    printf("a line on every test\n");
    fprintf(stderr, "a line on every test, on stderr\n");
    return sb_basic(cx, cy, ux, uy, r2, cos_theta, px, py);
}

SB_KERNEL(lies, SCALAR, 1, (cx, cy, ux, uy, r2, cos_theta), .family = "sector", .summary = "says valgrind's words");
SB_KERNEL(prints, SCALAR, 1, (cx, cy, ux, uy, r2, cos_theta), .family = "sector", .summary = "prints a lot");
"""


@needs_valgrind
def test_a_kernel_that_prints_valgrinds_words_is_not_given_their_reason(tmp_path):
    """A kernel's stdout and stderr were valgrind's log: one that printed valgrind's words for an
    instruction it cannot run and for a crash, then exited, was said to hold an AVX-512
    instruction.  What a kernel prints goes to /dev/null now."""
    source = tmp_path / "lies.c"
    source.write_text(SAYS_VALGRINDS_WORDS)
    library = build(BuildConfig.parse("-O2", extra_sources=(source,)))
    scene_path = instructions.write_scene(scenes.generate("uniform", 16, 64, seed=0), tmp_path / "scene.bin")
    with pytest.raises(SectorbenchError) as failed:
        instructions.count_loops(library, scene_path, ["lies:inline:count"], "cc", tmp_path)
    said = str(failed.value)
    assert said.startswith("valgrind exited with status 1: "), said
    assert "somewhere_else" not in said and "SIGSEGV" not in said, said


@needs_valgrind
def test_what_a_kernel_prints_under_valgrind_is_not_written_to_disk(tmp_path):
    """A kernel printing on every test wrote each line into valgrind's log in $TMPDIR: up to ~20 M
    lines a loop.  Its lines go to /dev/null; valgrind's log holds valgrind's words, and the
    driver's stderr its own (a driver's error is still the reason)."""
    source = tmp_path / "prints.c"
    source.write_text(SAYS_VALGRINDS_WORDS)
    library = build(BuildConfig.parse("-O2", extra_sources=(source,)))
    scene_path = instructions.write_scene(scenes.generate("uniform", 32, 1000, seed=0), tmp_path / "scene.bin")
    scratch = tmp_path / "scratch"
    scratch.mkdir()
    jobs = ["prints:inline:count", "prints:inline:noop", "basic:inline:count"]
    counts = instructions.count_loops(library, scene_path, jobs, "cc", scratch)
    assert set(counts) == set(jobs)
    assert counts["prints:inline:count"] > 32 * 1000 * 10  # a printf a test, counted
    for path in scratch.iterdir():
        assert b"a line on every test" not in path.read_bytes(), path.name
        assert path.stat().st_size < 64 * 1024, path.name  # 32 000 tests printed 1.5 MB
    with pytest.raises(SectorbenchError) as failed:
        instructions.count_loops(library, scene_path, ["nosuch:inline:count"], "cc", tmp_path)
    assert str(failed.value) == f"valgrind exited with status 2: instructions: no kernel nosuch in {library}"


#: basic, which does more when 0.5 converts to 1 (rounding upward: valgrind ignores the rounding
#: of arithmetic, not of a conversion): its count is its loop's in the rounding it starts in.
ROUNDING_SENSITIVE = r"""#include "sb_common.h"

static volatile float half = 0.5f;
static volatile unsigned extra;

static inline int rounding_sensitive(float cx, float cy, float ux, float uy, float r2, float cos_theta, float px,
                                     float py) {
    if (lrintf(half) > 0)
        extra++;
    const float dx = px - cx, dy = py - cy, s = dx * dx + dy * dy;
    return s < r2 && dx * ux + dy * uy > sqrtf(s) * cos_theta;
}

SB_KERNEL(rounding_sensitive, SCALAR, 1, (cx, cy, ux, uy, r2, cos_theta), .family = "sector",
          .summary = "does more when rounding upward");
"""


@needs_valgrind
def test_a_kernel_that_changes_the_rounding_under_valgrind_changes_no_other_count(tmp_path):
    """One valgrind counts every loop of a build: rounds_up (tests/data/unruly_kernels.c), which
    rounds upward from its loop on, changed the count of every loop after it whose work depends
    on the rounding, by which kernels the run named.  Each loop starts in the environment the
    driver started with, as each kernel starts in its build's in the workers."""
    source = tmp_path / "rounding_sensitive.c"
    source.write_text(ROUNDING_SENSITIVE)
    library = build(BuildConfig.parse("-O2", extra_sources=(DATA / "unruly_kernels.c", source)))
    scene_path = instructions.write_scene(scenes.generate("uniform", 16, 64, seed=0), tmp_path / "scene.bin")
    victim = ["rounding_sensitive:inline:count", "rounding_sensitive:call:count"]
    (tmp_path / "alone").mkdir(), (tmp_path / "after").mkdir()
    alone = instructions.count_loops(library, scene_path, victim, "cc", tmp_path / "alone")
    after = instructions.count_loops(library, scene_path, ["rounds_up:inline:count", *victim], "cc", tmp_path / "after")
    assert {job: after[job] for job in victim} == alone


def test_avx512_kernels_and_native_builds_on_avx512_hosts_are_skipped_with_the_reason():
    assert "avx512f" in instructions.skip_reason(("avx512f", "avx512bw"), ("-O2",), host_avx512=False)
    assert "valgrind cannot run" in instructions.skip_reason(("avx512f",), ("-O2",), host_avx512=False)
    native = instructions.skip_reason(("sse2",), ("-O3", "-march=native"), host_avx512=True)
    assert "-march=native" in native and "AVX-512" in native
    assert instructions.skip_reason(("sse2",), ("-O3", "-march=native"), host_avx512=False) is None
    assert instructions.skip_reason(("avx2", "fma"), ("-O2",), host_avx512=True) is None
    assert "AVX-512" in instructions.skip_reason((), ("-O2", "-mavx512f"), host_avx512=False)


def path_without_valgrind(tmp_path: Path) -> str:
    """A PATH holding every program of the real PATH except valgrind."""
    bin_dir = tmp_path / "bin"
    bin_dir.mkdir()
    for folder in os.environ["PATH"].split(os.pathsep):
        for program in Path(folder).glob("*") if Path(folder).is_dir() else ():
            target = bin_dir / program.name
            if not program.name.startswith("valgrind") and not target.exists():
                target.symlink_to(program)
    return str(bin_dir)


def test_without_valgrind_one_line_says_how_to_get_it(tmp_path):
    out = tmp_path / "run.json"
    result = CliRunner().invoke(
        main,
        ["run", *SMALL, "--kernels", "basic", "--metric", "instructions", "--json", str(out)],
        env={"PATH": path_without_valgrind(tmp_path)},
    )
    assert result.exit_code == 0, result.output
    hints = [line for line in result.output.splitlines() if "apt-get install valgrind" in line]
    assert len(hints) == 1, result.output
    (row,) = json.loads(out.read_text())["results"]
    assert row["instructions"] is None and "apt-get install valgrind" in row["instructions_reason"]


def test_too_few_rounds_without_valgrind_say_why_counts_do_not_spare_them(tmp_path):
    """run --against --metric instructions --repeat 3 without valgrind: refused before any build,
    saying that nothing can be counted, and why (it said only that 3 rounds cannot reach alpha,
    to a run that had asked for counts, which need no rounds)."""
    old, new = tmp_path / "old.c", tmp_path / "new.c"
    old.write_text(USER_KERNEL)
    new.write_text(USER_KERNEL)
    args = ["run", "-n", "32", "-m", "1000", "--flags", "-O2", "--kernels", "mine", "--repeat", "3"]
    result = CliRunner().invoke(
        main,
        [*args, "--source", str(new), "--against-source", str(old), "--metric", "instructions"],
        env={"PATH": path_without_valgrind(tmp_path)},
    )
    assert result.exit_code == 2, result.output
    (line,) = result.output.strip().splitlines()  # before any build: no plan, no progress
    assert line.startswith("sectorbench: error: --metric instructions: no row can be counted"), line
    assert "apt-get install valgrind" in line and "--repeat 5 would" in line, line


def test_a_broken_valgrind_is_said_before_timing(tmp_path):
    """A `valgrind` that does not run (a wrapper script that exits 1) was found out after the
    timing: every row's reason "valgrind exited with status 1: ", and too few rounds for the rows
    then left to time refused only then.  `valgrind --version` is asked first."""
    tools = tmp_path / "tools"
    tools.mkdir()
    (tools / "valgrind").write_text("#!/bin/sh\nexit 1\n")
    (tools / "valgrind").chmod(0o755)
    old, new = tmp_path / "old.c", tmp_path / "new.c"
    old.write_text(USER_KERNEL)
    new.write_text(USER_KERNEL)
    args = ["run", "-n", "32", "-m", "1000", "--flags", "-O2", "--kernels", "mine", "--repeat", "3"]
    result = CliRunner().invoke(
        main,
        [*args, "--source", str(new), "--against-source", str(old), "--metric", "instructions"],
        env={"PATH": f"{tools}{os.pathsep}{os.environ['PATH']}"},
    )
    assert result.exit_code == 2, result.output
    (line,) = result.output.strip().splitlines()  # before any build: no plan, no progress
    assert line.startswith("sectorbench: error: --metric instructions: no row can be counted"), line
    assert f"{tools / 'valgrind'} is no working valgrind: `valgrind --version` exited with status 1" in line, line


def _gate_row(threshold: float = 0.1) -> GateRow:
    return GateRow("k", "cc", "-O2", "inline", 1.0, 1.0, 1.0, 0.9, 1.1, 0.5, 0.5, "inconclusive", threshold)


def test_count_gate_has_no_statistics():
    row = _gate_row()
    assert count_row(row, 100.0, 111.0).verdict == "regression"
    assert count_row(row, 100.0, 109.0).verdict == "unchanged"
    assert count_row(row, 100.0, 90.0).verdict == "improvement"
    flagged = count_row(row, 100.0, 111.0)
    assert flagged.low == flagged.high == flagged.ratio and math.isnan(flagged.p_slower)


def test_the_same_job_ab_gates_on_counts_with_metric_instructions(tmp_path):
    """run --against-source --metric instructions: the verdict comes from valgrind's counts
    (head does one more multiply and add a test: ~17 % more net instructions), whatever the
    timing says.  A positional argument once sent the counts' revision to the wrong parameter
    of the gate, which then judged the A/B on time alone."""
    old, new = tmp_path / "old.c", tmp_path / "new.c"
    old.write_text(USER_KERNEL)
    new.write_text(USER_KERNEL.replace("dx * dx + dy * dy,", "dx * dx + dy * dy + 0.0f * dx,"))
    options = ["--repeat", "3", "--min-time", "0.01", "--threshold", "0.05", "--metric", "instructions"]
    scene = ["-n", "32", "-m", "1000", "--flags", "-O2", "--kernels", "mine"]
    markdown = tmp_path / "gate.md"
    result = CliRunner().invoke(
        main,
        ["run", *scene, *options, "--source", str(new), "--against-source", str(old), "--markdown", str(markdown)],
        env={"COLUMNS": "200"},
    )
    assert result.exit_code == 1, result.output
    assert "1 row(s) gated on valgrind's counts" in result.output
    assert "1 regression(s)" in result.output
    # What was compared is shown: the counts, not milliseconds beside a count ratio, and no p.
    row = next(line for line in markdown.read_text().splitlines() if line.startswith("| mine "))
    assert row.count("instr/test") == 2 and "nan" not in row and "| – |" in row, row
    assert "Compared: each kernel's net instructions per test under valgrind" in markdown.read_text()
    assert "instr/test" in result.output


@needs_valgrind
def test_a_damaged_driver_is_rebuilt_not_run(tmp_path):
    """A truncated driver died of SIGBUS under valgrind on every run, and the gate silently
    judged on time alone; it is checked against its checksum, like a library."""
    from sectorbench.native import build as build_module

    cache = tmp_path / "cache"
    driver = build_module.build_driver("instructions", cache_dir=cache)
    whole = driver.read_bytes()
    with open(driver, "r+b") as stream:
        stream.truncate(4000)
    assert build_module.build_driver("instructions", cache_dir=cache) == driver
    assert driver.read_bytes() == whole


#: count_loops in a process of its own (the test stops it): its counts as JSON, or its LoopStalled.
_COUNT_IN_A_PROCESS = """
import json, sys
from pathlib import Path
from sectorbench.measure import instructions
library, scene, scratch = map(Path, sys.argv[1:4])
try:
    print(json.dumps(instructions.count_loops(library, scene, ["basic:inline:count"], "cc", scratch, job_s=8.0)))
except instructions.LoopStalled as exc:
    print(json.dumps(str(exc)))
"""


@needs_valgrind
def test_a_valgrind_frozen_with_the_run_is_not_taken_for_a_stalled_loop(tmp_path):
    """A run stopped or frozen with its valgrind (a CI runner's job suspended): the wall clock ran
    on meanwhile, and the loop was given up as "did not end under valgrind within 5 s" once both
    went on, its count lost.  The time the run was stopped is not the loop's."""
    library = build(BuildConfig.parse("-O2"))
    # 4 M tests: a second or more under valgrind, so it is stopped while it counts
    scene_path = instructions.write_scene(scenes.generate("uniform", 200, 20000, seed=3), tmp_path / "scene.bin")
    scratch = tmp_path / "scratch"
    scratch.mkdir()
    process = subprocess.Popen(
        [sys.executable, "-c", _COUNT_IN_A_PROCESS, str(library), str(scene_path), str(scratch)],
        stdout=subprocess.PIPE,
        text=True,
    )
    try:
        valgrind = None
        deadline = time.monotonic() + 120
        while valgrind is None and process.poll() is None and time.monotonic() < deadline:
            for stat in Path("/proc").glob("[0-9]*/stat"):
                try:
                    fields = stat.read_text().rsplit(")", 1)[1].split()
                    program = stat.with_name("cmdline").read_text().split("\0")[0]
                    if int(fields[1]) == process.pid and "valgrind" in Path(program).name:
                        valgrind = int(stat.parent.name)  # exec'd: count_loops watches it from now on
                except (OSError, IndexError, ValueError):
                    continue
        assert valgrind is not None, "valgrind never started"
        os.kill(valgrind, signal.SIGSTOP)
        process.send_signal(signal.SIGSTOP)
        time.sleep(10)  # longer than the loop's 8 s
        process.send_signal(signal.SIGCONT)
        time.sleep(0.5)  # a thaw may go on with the run first
        with contextlib.suppress(ProcessLookupError):  # (given up as stalled and killed)
            os.kill(valgrind, signal.SIGCONT)
        said, _ = process.communicate(timeout=300)
    finally:
        if process.poll() is None:
            process.kill()
    counted = json.loads(said)
    assert isinstance(counted, dict) and set(counted) == {"basic:inline:count"}, counted


@needs_valgrind
def test_a_valgrind_that_is_killed_leaves_nothing_in_tmpdir(tmp_path, monkeypatch):
    """valgrind makes its gdbserver's FIFOs and shared memory file in $TMPDIR as it starts
    (vgdb-pipe-from-vgdb-to-PID-by-USER-on-HOST, ...) and removes them as it exits: killed (a
    stalled loop, Ctrl-C, a CI runner's SIGTERM: its session is SIGKILLed), it left three files
    in $TMPDIR on every such run.  Nothing here uses its gdbserver (--vgdb=no)."""
    tmpdir = tmp_path / "tmp"
    tmpdir.mkdir()
    monkeypatch.setenv("TMPDIR", str(tmpdir))  # valgrind's, through the environment it inherits
    library = build(BuildConfig.parse("-O2"))
    scene = scenes.generate("uniform", 512, 40000, seed=0)  # ~20 M tests: seconds under valgrind
    scene_path = instructions.write_scene(scene, tmp_path / "scene.bin")
    scratch = tmp_path / "scratch"
    scratch.mkdir()
    with pytest.raises(instructions.LoopStalled):
        instructions.count_loops(library, scene_path, ["naive:inline:count"], "cc", scratch, job_s=3.0)
    assert list(tmpdir.iterdir()) == []


@needs_valgrind
def test_a_tmpdir_valgrind_cannot_write_to_costs_no_counts(tmp_path, monkeypatch):
    """A CI job's TMPDIR set to a path its container does not have: Python's tempfile passes over
    it silently, and valgrind failed as it started ("Can't create client cmdline file"), so
    every row was gated on time.  valgrind's files go to the counting's own folder."""
    monkeypatch.setenv("TMPDIR", str(tmp_path / "missing"))
    library = build(BuildConfig.parse("-O2"))
    scene_path = instructions.write_scene(scenes.generate("uniform", 16, 1000, seed=0), tmp_path / "scene.bin")
    scratch = tmp_path / "scratch"
    scratch.mkdir()
    counts = instructions.count_loops(library, scene_path, ["basic:inline:count"], "cc", scratch)
    assert counts["basic:inline:count"] > 16 * 1000


@needs_valgrind
def test_valgrind_ends_with_a_killed_run(tmp_path):
    """SIGKILL of sectorbench (no cleanup can run): the valgrind counting its loops goes too."""
    import subprocess
    import sys
    import time

    # 20 M tests: each loop counted whole, tens of seconds of valgrind in all
    command = [sys.executable, "-m", "sectorbench", "run", "-n", "500", "-m", "40000", "--flags", "-O2"]
    command += ["--kernels", "naive,basic", "--repeat", "2", "--min-time", "0.001", "--metric", "instructions"]
    process = subprocess.Popen(command, cwd=tmp_path, stdout=subprocess.DEVNULL, stderr=subprocess.DEVNULL)
    counting = None
    try:
        deadline = time.monotonic() + 300
        while counting is None and process.poll() is None and time.monotonic() < deadline:
            for stat in Path("/proc").glob("[0-9]*/stat"):
                try:
                    fields = stat.read_text().rsplit(")", 1)[1].split()
                    if int(fields[1]) == process.pid and "valgrind" in stat.with_name("cmdline").read_text():
                        counting = int(stat.parent.name)
                except (OSError, IndexError, ValueError):
                    continue
            time.sleep(0.02)
        assert counting is not None, "valgrind never started"
        process.kill()
        process.wait()
        # Unaided it counts on until its first line to the dead parent's pipe ends it (SIGPIPE),
        # after naive's first loop: seconds more.  The parent's death signal ends it at once.
        deadline = time.monotonic() + 3
        while _alive(counting) and time.monotonic() < deadline:
            time.sleep(0.05)
        assert not _alive(counting)
    finally:
        if process.poll() is None:
            process.kill()


@needs_valgrind
def test_a_process_a_kernel_forks_under_valgrind_ends_with_its_count(tmp_path):
    """forks (tests/data/unruly_kernels.c) leaves a child that sleeps for ever, a valgrind.bin
    as its parent is: it outlived a count whose valgrind exited well, adopted by init."""
    library = build(BuildConfig.parse("-O2", extra_sources=(DATA / "unruly_kernels.c",)))
    scene_path = instructions.write_scene(scenes.generate("uniform", 16, 64, seed=0), tmp_path / "scene.bin")
    counts = instructions.count_loops(library, scene_path, ["forks:inline:count"], "cc", tmp_path)
    assert set(counts) == {"forks:inline:count"}
    assert _left_running(scene_path) == []


#: basic, whose first test daemonises as a daemon does: a child that leaves the process group
#: (setsid) and forks a grandchild that never exits, then exits itself.
DAEMONISES = r"""#include <unistd.h>
#include "sb_common.h"

static inline int daemonises(float cx, float cy, float ux, float uy, float r2, float cos_theta, float px, float py) {
    static int forked;
    if (!forked++ && fork() == 0) {
        setsid();
        if (fork() == 0)
            for (;;) pause();
        _exit(0);
    }
    const float dx = px - cx, dy = py - cy, s = dx * dx + dy * dy;
    return s < r2 && dx * ux + dy * uy > sqrtf(s) * cos_theta;
}

SB_KERNEL(daemonises, SCALAR, 1, (cx, cy, ux, uy, r2, cos_theta), .family = "sector", .summary = "a daemon");
"""


@needs_valgrind
@pytest.mark.skipif(
    os.uname().machine != "x86_64" or not sys.platform.startswith("linux"), reason="the filter is x86-64 Linux's"
)
def test_a_process_a_kernel_daemonises_under_valgrind_ends_with_its_count(tmp_path):
    """A kernel's child that left valgrind's process group (setsid) and forked again was out of
    reach of the group's kill: a valgrind.bin, init's, in a session of its own, ran on after the
    run.  The driver refuses setsid and setpgid: the daemon stays in the group and ends with it,
    and the loops around it are counted."""
    source = tmp_path / "daemonises.c"
    source.write_text(DAEMONISES)
    library = build(BuildConfig.parse("-O2", extra_sources=(source,)))
    scene_path = instructions.write_scene(scenes.generate("uniform", 16, 64, seed=0), tmp_path / "scene.bin")
    jobs = ["daemonises:inline:count", "daemonises:inline:noop", "basic:inline:count"]
    counts = instructions.count_loops(library, scene_path, jobs, "cc", tmp_path)
    assert set(counts) == set(jobs)
    assert _left_running(scene_path) == []


def _left_running(scene_path: Path) -> list[int]:
    """The processes still running a count (its scene in their command line) a few seconds after
    it: none, once it is over (SIGKILL acts at once; a kernel's child never ends unaided).  Those
    found are killed."""

    def left() -> list[int]:
        found = []
        for cmdline in Path("/proc").glob("[0-9]*/cmdline"):
            with contextlib.suppress(OSError):
                if str(scene_path) in cmdline.read_text() and _alive(int(cmdline.parent.name)):
                    found.append(int(cmdline.parent.name))
        return found

    deadline = time.monotonic() + 5
    while (stray := left()) and time.monotonic() < deadline:
        time.sleep(0.05)
    for pid in stray:
        with contextlib.suppress(OSError):
            os.kill(pid, signal.SIGKILL)
    return stray


def _alive(pid: int) -> bool:
    try:
        return Path(f"/proc/{pid}/stat").read_text().rsplit(")", 1)[1].split()[0] != "Z"
    except OSError:
        return False


def _saved_run(
    path: Path, instructions: int | None, reason: str | None = None, overhead: int = 1000, **row_and_env
) -> Path:
    """A saved run of one kernel, its samples the same every time: only its counts (net
    instructions per test = (instructions - overhead) / 1000) tell two of them apart."""
    from sectorbench.model.results import KernelResult, RunResult, save

    samples = [1e-3 * (1 + 0.001 * i) for i in range(12)]
    fields = dict(
        kernel="basic",
        family="sector",
        flags="-O2",
        cc="cc",
        mode="inline",
        status="ok",
        hits=10,
        tests=1000,
        samples_s=samples,
        median_s=samples[6],
        instructions=instructions,
        overhead_instructions=None if instructions is None else overhead,
        instructions_tests=None if instructions is None else 1000,
        instructions_reason=reason,
    )
    row = KernelResult(**{**fields, **{k: v for k, v in row_and_env.items() if k != "env"}})
    scene = {"kind": "uniform", "family": "sector", "seed": 0, "sectors": 10, "points": 100}
    env = row_and_env.get("env", {})
    return save(RunResult(scene=scene, env=env, config={"repeat": 12}, results=[row]), path)


def test_counts_of_two_compilers_or_builds_are_gated_on_time(tmp_path):
    """A count weighs every instruction alike, so two compilers' code differs in count by their
    scheduling, not by the change (docs/ci.md: never rank compilers by count).  A baseline from
    clang gated where `cc` became gcc failed on counts, ratio 3.5 with no statistics; the same
    timings here read "regression" at three times the count.  Such rows are gated on time, and
    one line says why; so are the counts of two builds paired by --across-builds."""
    clang = {"compilers": {"cc": {"version_line": "Debian clang version 19.1.7"}}}
    gcc = {"compilers": {"cc": {"version_line": "cc (Debian 12.2.0-14) 12.2.0"}}}
    base = _saved_run(tmp_path / "a.json", 2000, env=clang, code_sha256="a" * 64)
    head = _saved_run(tmp_path / "b.json", 4000, env=gcc, code_sha256="b" * 64)
    result = CliRunner().invoke(main, ["regress", str(base), str(head)], env={"COLUMNS": "300"})
    assert result.exit_code == 0, result.output
    said = " ".join(result.output.split())
    assert "0 regression(s)" in said and "gated on valgrind's counts" not in said, said
    assert (
        "all 1 on time: counted with cc (Debian 12.2.0-14) 12.2.0, BASELINE with Debian clang version 19.1.7: "
        "counts compare the code of one compiler and flag set only (basic)" in said
    ), said
    # the same compiler: the counts decide, as before
    same = _saved_run(tmp_path / "c.json", 4000, env=clang, code_sha256="b" * 64)
    assert CliRunner().invoke(main, ["regress", str(base), str(same)]).exit_code == 1
    # two builds paired by --across-builds: -O3's count is not -O2's either
    o3 = _saved_run(tmp_path / "d.json", 4000, env=clang, code_sha256="b" * 64, flags="-O3")
    across = CliRunner().invoke(main, ["regress", "--across-builds", str(base), str(o3)], env={"COLUMNS": "300"})
    assert across.exit_code == 0, across.output
    assert "counted in CURRENT's build cc -O3, BASELINE's cc -O2" in " ".join(across.output.split()), across.output


def test_counts_of_native_builds_on_two_hosts_are_gated_on_time(tmp_path):
    """-march=native is another flag set on another CPU: with the same compiler, a baseline
    counted where it meant haswell against a host where it means x86-64 failed on basic's count
    (7.0 against 10.5 net instructions a test, measured so with -march=haswell and -march=x86-64),
    a "regression" of no change.  Such rows are gated on time, and one line says why."""

    def host(march: str) -> dict:
        native = {"style": "gcc", "march": march, "features": ["avx2"] if march == "haswell" else ["sse2"]}
        return {"compilers": {"cc": {"version_line": "cc (Debian 12.2.0-14) 12.2.0", "march_native": native}}}

    native = "-O2 -march=native"
    base = _saved_run(tmp_path / "a.json", 8039, env=host("haswell"), code_sha256="a" * 64, flags=native)
    head = _saved_run(tmp_path / "b.json", 11543, env=host("x86-64"), code_sha256="b" * 64, flags=native)
    result = CliRunner().invoke(main, ["regress", str(base), str(head)], env={"COLUMNS": "300"})
    assert result.exit_code == 0, result.output
    said = " ".join(result.output.split())
    assert "0 regression(s)" in said and "gated on valgrind's counts" not in said, said
    assert (
        "all 1 on time: -march=native means x86-64 in CURRENT, haswell in BASELINE (cc): counts compare the code "
        "of one compiler and flag set only (basic)" in said
    ), said
    # the same host's -march=native, or a build without it: the counts decide, as before
    same = _saved_run(tmp_path / "c.json", 11543, env=host("haswell"), code_sha256="b" * 64, flags=native)
    assert CliRunner().invoke(main, ["regress", str(base), str(same)]).exit_code == 1
    o2 = [
        _saved_run(tmp_path / f"{name}.json", n, env=host(march))
        for name, n, march in (("d", 8039, "haswell"), ("e", 11543, "x86-64"))
    ]
    assert CliRunner().invoke(main, ["regress", *map(str, o2)]).exit_code == 1


def test_regress_gates_the_counts_both_files_carry(tmp_path):
    """Twice the net instructions a test, the same timings: regress fails as the run --baseline
    --metric instructions that saved them did (regress once gated such files on time alone)."""
    base, head = _saved_run(tmp_path / "a.json", 2000), _saved_run(tmp_path / "b.json", 3000)
    markdown = tmp_path / "gate.md"
    result = CliRunner().invoke(
        main, ["regress", str(base), str(head), "--markdown", str(markdown)], env={"COLUMNS": "300"}
    )
    assert result.exit_code == 1, result.output
    assert "1 row(s) gated on valgrind's counts" in result.output and "1 regression(s)" in result.output
    row = next(line for line in markdown.read_text().splitlines() if line.startswith("| basic "))
    assert "| 1 instr/test | 2 instr/test | 2.000 [2.000, 2.000] |" in row, row
    # Every row counted: its columns are headed by what they hold, in the console as in Markdown.
    header = next(line for line in markdown.read_text().splitlines() if line.startswith("| kernel "))
    assert header.count(" instr/test |") == 2 and " ms |" not in header, header
    assert "Compared: each kernel's net instructions per test under valgrind" in markdown.read_text()
    assert "baseline instr/test" in result.output and " ms" not in result.output, result.output


def test_a_net_count_of_0_on_one_side_compares_gross_on_both(tmp_path):
    """The head's loop as long as its NoOperation's (net 0 a test): 1.5 gross a test against
    the base's 2 gross (1 net) is fewer instructions, an improvement; its gross against the
    base's net was a 1.5x "regression"."""
    base, head = _saved_run(tmp_path / "a.json", 2000), _saved_run(tmp_path / "b.json", 1500, overhead=1500)
    result = CliRunner().invoke(main, ["regress", str(base), str(head)], env={"COLUMNS": "300"})
    assert result.exit_code == 0, result.output
    assert "0 regression(s), 1 improvement(s)" in result.output, result.output
    assert "| 2 instr/test | 1.5 instr/test |" in " ".join(result.output.split()).replace("│", "|")
    # a table of counts alone: its ratio is of the counts, not an estimate over rounds
    assert "ratio: the ratio is current / baseline of those counts" in result.output, result.output


def test_regress_with_counts_in_one_file_says_it_gated_on_time(tmp_path):
    base = _saved_run(tmp_path / "a.json", 2000)
    head = _saved_run(tmp_path / "b.json", None, "valgrind is not installed")
    markdown = tmp_path / "gate.md"
    result = CliRunner().invoke(
        main, ["regress", str(base), str(head), "--markdown", str(markdown)], env={"COLUMNS": "300"}
    )
    assert result.exit_code == 0, result.output
    line = "instructions: no row was gated on instruction counts, all 1 on time: valgrind is not installed (basic)"
    assert line in " ".join(result.output.split())  # the table's caption, wrapped to its width
    assert f"- {line}" in markdown.read_text()


#: conftest.USER_KERNEL's test, 16 lanes at a time: valgrind cannot run it.
AVX512_KERNEL = """#include "sb_common.h"
SB_AVX512_ATTR
static inline __mmask16 mine(__m512 cx, __m512 cy, __m512 ux, __m512 uy, __m512 r2, __m512 k, __m512 px, __m512 py) {
    const __m512 dx = _mm512_sub_ps(px, cx), dy = _mm512_sub_ps(py, cy);
    const __m512 s = _mm512_add_ps(_mm512_mul_ps(dx, dx), _mm512_mul_ps(dy, dy));
    const __m512 a = _mm512_add_ps(_mm512_mul_ps(dx, ux), _mm512_mul_ps(dy, uy));
    __mmask16 inside = _mm512_cmp_ps_mask(s, r2, _CMP_LT_OQ);
    inside = _mm512_mask_cmp_ps_mask(inside, a, _mm512_setzero_ps(), _CMP_GT_OQ);
    return _mm512_mask_cmp_ps_mask(inside, _mm512_mul_ps(a, a), _mm512_mul_ps(s, _mm512_mul_ps(k, k)), _CMP_GT_OQ);
}
SB_KERNEL(mine, AVX512, 1, (cx, cy, ux, uy, r2, cos_theta), .family = "sector", .summary = "user kernel, AVX-512");
"""


def test_nothing_counted_is_said_and_the_rows_left_to_time_need_their_rounds(tmp_path):
    """--metric instructions where valgrind counts nothing (AVX-512 code, which it cannot run):
    the gate is on time, and says so in one line on the console and in the Markdown; with
    rounds too few to reach alpha it is refused (it once passed, never able to flag anything)."""
    old, new = tmp_path / "old.c", tmp_path / "new.c"
    old.write_text(AVX512_KERNEL)
    more = "_mm512_add_ps(_mm512_mul_ps(dy, dy), _mm512_mul_ps(_mm512_setzero_ps(), dx)));"
    new.write_text(AVX512_KERNEL.replace("_mm512_mul_ps(dy, dy));", more))
    scene = ["-n", "32", "-m", "1000", "--flags", "-O2", "--kernels", "mine", "--min-time", "0.001"]
    ab = [*scene, "--source", str(new), "--against-source", str(old), "--metric", "instructions"]
    markdown = tmp_path / "gate.md"
    refused = CliRunner().invoke(main, ["run", *ab, "--repeat", "3"], env={"COLUMNS": "300"})
    assert refused.exit_code == 2, refused.output
    assert "no row was gated on instruction counts" in refused.output and "--repeat 5 would" in refused.output
    result = CliRunner().invoke(
        main, ["run", *ab, "--repeat", "5", "--markdown", str(markdown)], env={"COLUMNS": "300"}
    )
    assert result.exit_code in (0, 1), result.output
    said = " ".join(result.output.split()).split("no row was gated on instruction counts")
    assert len(said) == 2 and "valgrind cannot run" in said[1].split(" (mine)")[0], result.output  # once, and why
    assert "no row was gated on instruction counts, all 1 on time:" in markdown.read_text()


@needs_valgrind
def test_run_baseline_gated_on_counts_needs_no_rounds_until_a_row_is_left_to_time(tmp_path):
    """Every row counted on both sides needs no rounds: `run --baseline --metric instructions
    --repeat 3` against 5 saved rounds was refused before timing ("5 vs 3 samples cannot reach
    alpha"), where `run --against` and regress gate the same rows on counts.  A row left to time
    (no counts in the baseline) is still refused before timing."""
    base = tmp_path / "base.json"
    args = ["run", "-n", "32", "-m", "1000", "--min-time", "0.001", "--flags", "-O2", "--kernels", "basic"]
    saved = CliRunner().invoke(main, [*args, "--repeat", "5", "--metric", "instructions", "--json", str(base)])
    assert saved.exit_code == 0, saved.output
    gated = CliRunner().invoke(main, [*args, "--repeat", "3", "--metric", "instructions", "--baseline", str(base)])
    assert gated.exit_code == 0, gated.output
    assert "1 row(s) gated on valgrind's counts" in gated.output, gated.output
    timed_base = tmp_path / "timed.json"
    assert CliRunner().invoke(main, [*args, "--repeat", "5", "--json", str(timed_base)]).exit_code == 0
    refused = CliRunner().invoke(
        main, [*args, "--repeat", "3", "--metric", "instructions", "--baseline", str(timed_base)]
    )
    assert refused.exit_code == 2 and "cannot reach alpha" in refused.output, refused.output
    assert len(refused.output.strip().splitlines()) == 1, refused.output  # before timing: no table


@needs_valgrind
@pytest.mark.skipif(shutil.which("clang-19") is None, reason="clang-19 is not installed")
@needs_gcc
def test_run_baseline_counted_by_another_compiler_is_gated_on_time(tmp_path):
    """The baseline counted with gcc as `cc`, this runner's `cc` is clang: the rows are gated on
    time, so too few rounds are refused before timing, saying why the counts do not spare them
    (it gated clang's counts against gcc's: 3.0 against 10.5 net instructions a test, an
    "improvement" with no statistics, and the reverse a "regression", exit 1)."""
    base = tmp_path / "base.json"
    args = ["run", "-n", "32", "-m", "1000", "--min-time", "0.001", "--flags", "-O2", "--kernels", "basic"]

    def as_cc(compiler):  # an environment whose `cc` is this compiler, whatever $CC the tests run under
        where = tmp_path / compiler
        where.mkdir()
        (where / "cc").symlink_to(shutil.which(compiler))
        env = {**os.environ, "PATH": f"{where}{os.pathsep}{os.environ['PATH']}", "COLUMNS": "300"}
        env.pop("CC", None)
        return env

    def runner(env, *more):  # a process of its own, as a CI job is
        command = [sys.executable, "-m", "sectorbench", *args, *more]
        return subprocess.run(command, capture_output=True, text=True, env=env, timeout=300)

    saved = runner(as_cc("gcc"), "--repeat", "5", "--metric", "instructions", "--json", str(base))
    assert saved.returncode == 0, saved.stdout + saved.stderr
    clang_as_cc = as_cc("clang-19")
    metric = ["--metric", "instructions", "--baseline", str(base)]

    refused = runner(clang_as_cc, "--repeat", "3", *metric)
    assert refused.returncode == 2, refused.stdout + refused.stderr
    (line,) = refused.stderr.strip().splitlines()  # before timing: no plan, no table
    assert line.startswith("sectorbench: error: --metric instructions: BASELINE counted basic with cc "), line
    assert "this run's cc is Debian clang version 19" in line and "5 vs 3 samples cannot reach alpha" in line, line
    gated = runner(clang_as_cc, "--repeat", "5", *metric)
    assert gated.returncode in (0, 1), gated.stdout + gated.stderr
    said = " ".join((gated.stdout + gated.stderr).split())
    assert "gated on valgrind's counts" not in said and "all 1 on time: counted with Debian clang" in said, said


@needs_valgrind
def test_run_baseline_refuses_too_few_rounds_after_counting_when_a_row_cannot_be_counted(tmp_path):
    """The baseline counted the row, this run cannot (AVX-512 code, which valgrind cannot run):
    it is gated on time, and 3 rounds against 5 cannot reach alpha: refused once that is known,
    saying why the counts did not spare the rounds."""
    if "avx512f" not in Path("/proc/cpuinfo").read_text():
        pytest.skip("this CPU runs no AVX-512 kernel: its row would be skipped, not timed")
    base = tmp_path / "base.json"
    args = ["run", "-n", "32", "-m", "1000", "--min-time", "0.001", "--flags", "-O2", "--metric", "instructions"]
    assert CliRunner().invoke(main, [*args, "--kernels", "basic", "--repeat", "5", "--json", str(base)]).exit_code == 0
    # the same counts under the AVX-512 kernel's name: a baseline whose row valgrind could count
    base.write_text(base.read_text().replace('"basic"', '"avx512_nosqrt"'))
    result = CliRunner().invoke(main, [*args, "--kernels", "avx512_nosqrt", "--repeat", "3", "--baseline", str(base)])
    assert result.exit_code == 2, result.output
    said = " ".join(result.output.split())
    assert "all 1 on time: needs avx512f, avx512dq, which valgrind cannot run (avx512_nosqrt)" in said, said
    assert "and --repeat 3: 5 vs 3 samples cannot reach alpha" in said, said


def test_valgrind_without_its_headers_is_told_apart_from_no_valgrind(tmp_path, monkeypatch):
    """A valgrind whose headers are not where the drivers' compiler looks (one built into a
    prefix of its own) was told "valgrind is not installed"."""
    from sectorbench.native import build as build_module

    tools = tmp_path / "bin"
    tools.mkdir()
    monkeypatch.setenv("PATH", str(tools))
    assert instructions.unavailable() == instructions.INSTALL_HINT
    (tools / "valgrind").write_text("#!/bin/sh\necho valgrind-3.19.0\n")  # its --version
    (tools / "valgrind").chmod(0o755)
    monkeypatch.setattr(build_module, "VALGRIND_INCLUDE_DIRS", (tmp_path / "include",))
    assert instructions.unavailable() == instructions.HEADERS_HINT
    (tmp_path / "include" / "valgrind").mkdir(parents=True)
    (tmp_path / "include" / "valgrind" / "callgrind.h").write_text("")
    assert instructions.unavailable() is None
