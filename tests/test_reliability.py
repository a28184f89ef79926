"""What docs/reliability.md promises, tried for real: real subprocesses, files, links, FIFOs,
devices, signals, a real compiler (and a fake one that hangs), a full tmpfs.

Every command here either works or fails with one line on stderr; none prints
"internal error" (checked for every result, see `outcome`).
"""

from __future__ import annotations

import contextlib
import io
import json
import os
import shutil
import signal
import subprocess
import sys
import threading
import time
import zipfile
from pathlib import Path

import numpy as np
import pytest
from click.testing import CliRunner
from conftest import DATA, terminal_dispositions

from sectorbench.cli import main
from sectorbench.errors import SectorbenchError
from sectorbench.model.results import load
from sectorbench.model.scenes import address_space_limit, physical_memory_bytes
from sectorbench.native import build as build_module
from sectorbench.native.build import BuildConfig, BuildError, build
from sectorbench.native.compiler_flags import refused

TINY = ["-n", "20", "-m", "500", "--repeat", "2", "--min-time", "0.001", "--flags", "-O2"]
#: Long enough after its plan line to change things while it measures.
SLOW = ["-n", "1000", "-m", "100000", "--repeat", "3", "--flags", "-O2", "--kernels", "basic,sse2"]
INTERNAL_ERRORS: list[str] = []


def sectorbench(*args, cwd=None, env=None, timeout=300) -> subprocess.CompletedProcess:
    """The real CLI in a real process."""
    result = subprocess.run(
        [sys.executable, "-m", "sectorbench", *map(str, args)],
        cwd=cwd,
        env={**os.environ, **(env or {})},
        capture_output=True,
        text=True,
        timeout=timeout,
    )
    return outcome(result, result.returncode, result.stderr)


def invoke(*args, env=None):
    """The CLI in this process (click's runner): for the many quick refusals."""
    result = CliRunner().invoke(main, [str(a) for a in args], env=env)
    return outcome(result, result.exit_code, result.stderr)


def outcome(result, code, stderr):
    result.code = code
    if "internal error" in stderr or "Traceback" in stderr:
        INTERNAL_ERRORS.append(stderr)
    assert "internal error" not in stderr and "Traceback" not in stderr, stderr
    return result


def one_line(result, *fragments, code=2) -> str:
    assert result.code == code, (result.stdout, result.stderr)
    lines = result.stderr.strip().splitlines()
    assert len(lines) == 1 and lines[0].startswith("sectorbench: "), result.stderr
    for fragment in fragments:
        assert fragment in lines[0], lines[0]
    return lines[0]


@pytest.fixture(scope="module")
def ok_json(tmp_path_factory, o2_library) -> Path:
    where = tmp_path_factory.mktemp("reliability") / "ok.json"
    result = invoke("run", *TINY, "--kernels", "basic,sse2", "--json", where)
    assert result.code == 0, result.stderr
    return where


def variant(ok_json: Path, where: Path, change) -> Path:
    data = json.loads(ok_json.read_text())
    change(data)
    where.write_text(json.dumps(data))
    return where


def row(data, kernel):
    return next(r for r in data["results"] if r["kernel"] == kernel)


# ------------------------------------------------------------------ the gate


@pytest.mark.parametrize("status", ["crashed", "timed-out", "missing"])
def test_a_kernel_that_stopped_working_fails_the_gate(status, ok_json, tmp_path):
    def change(data):
        if status == "missing":
            data["results"] = [r for r in data["results"] if r["kernel"] != "sse2"]
        else:
            row(data, "sse2").update(status=status, reason="killed by SIGSEGV", samples_s=[])

    current = variant(ok_json, tmp_path / "current.json", change)
    markdown = tmp_path / "gate.md"
    result = sectorbench("regress", ok_json, current, "--markdown", markdown)
    assert result.code == 1, result.stderr
    assert f"FAILED: {status}" in result.stdout
    summary = result.stderr.strip().splitlines()[-1]
    assert summary.startswith("1 failure(s): sse2 [-O2, inline] " + status), summary
    text = markdown.read_text()
    assert text.startswith("1 failure, ") and f"**FAILED: {status}" in text


def test_an_empty_or_unmeasured_baseline_is_exit_2(ok_json, tmp_path):
    empty = variant(ok_json, tmp_path / "empty.json", lambda d: d.update(results=[]))
    one_line(sectorbench("regress", empty, ok_json), "BASELINE has no rows")

    def all_crashed(data):
        for r in data["results"]:
            r.update(status="crashed", samples_s=[])

    crashed = variant(ok_json, tmp_path / "crashed.json", all_crashed)
    one_line(invoke("regress", crashed, ok_json), "no measured (ok) row")
    one_line(invoke("run", *TINY, "--baseline", empty), "BASELINE has no rows")


# ------------------------------------------------------------------ outputs never touch inputs


def linked(kind: str, target: Path, name: Path) -> Path:
    if kind == "symlink":
        name.symlink_to(target)
    else:
        os.link(target, name)
    return name


@pytest.mark.parametrize("kind", ["symlink", "hardlink"])
def test_an_output_that_is_an_input_is_refused_even_with_force(kind, ok_json, tmp_path):
    baseline = tmp_path / "baseline.json"
    baseline.write_bytes(ok_json.read_bytes())
    before = baseline.read_bytes()
    cases = tmp_path / "cases.npz"
    np.savez(cases, **{k: np.full(3, 0.5, np.float32) for k in ("cx", "cy", "ux", "uy", "r2", "cos_theta", "px", "py")})
    source = tmp_path / "kernel.c"
    source.write_text("/* nothing */\n")
    thresholds = tmp_path / "t.toml"
    thresholds.write_text("default = 0.1\n")
    attempts = [
        ("regress", baseline, ok_json, "--markdown", linked(kind, baseline, tmp_path / "a.md"), "--force"),
        ("regress", ok_json, baseline, "--markdown", linked(kind, baseline, tmp_path / "b.md"), "--force"),
        ("run", *TINY, "--baseline", baseline, "--markdown", linked(kind, baseline, tmp_path / "c.md"), "--force"),
        ("run", *TINY, "--baseline", baseline, "--json", linked(kind, baseline, tmp_path / "d.json"), "--force"),
        ("run", *TINY, "--baseline", ok_json, "--thresholds", thresholds,
         "--json", linked(kind, thresholds, tmp_path / "e.json"), "--force"),
        ("run", *TINY, "--source", source, "--json", linked(kind, source, tmp_path / "f.json"), "--force"),
        ("compare", *TINY, "--source", source, "--json", linked(kind, source, tmp_path / "g.json"), "--force"),
        ("plot", baseline, "--out", linked(kind, baseline, tmp_path / "h.png"), "--force"),
        ("verify", "--input", cases, "--json", linked(kind, cases, tmp_path / "i.json"), "--force"),
    ]  # fmt: skip
    for args in attempts:
        one_line(invoke(*args), "is the same file as the input", "even with --force")
    assert baseline.read_bytes() == before and source.read_text() == "/* nothing */\n"
    assert np.load(cases)["cx"].tolist() == [0.5, 0.5, 0.5]
    # The same regress with the real process too, and a distinct output is still fine.
    one_line(sectorbench("regress", baseline, baseline, "--markdown", tmp_path / "a.md", "--force"), "same file")
    assert sectorbench("regress", baseline, ok_json, "--markdown", tmp_path / "fresh.md").code == 0


REFUSED_FLAGS = [
    "-Wl,-o,s.json", "-o s.json", "-os.json", "--output=s.json", "-E", "-S", "-c", "-M", "-MM", "-MD",
    "-MMD", "-MF deps", "@opts", "-save-temps", "-save-temps=obj", "-fdump-tree-all", "-fdump-rtl-all=x",
    "-###", "--help", "--version", "-dumpbase x", "-dumpdir x", "-print-search-dirs", "-fsyntax-only",
    "-Xlinker -o", "-Wl,-Map=m.txt", "-Wl,--out-implib,x", "-Wa,-aln=list.txt", "-Wa,-o,x", "-Wp,-MD,x",
    "-aux-info x", "-fprofile-generate", "--coverage", "-foptimization-record-file=x", "-ftime-trace=x",
    "-coverage", "-fcs-profile-generate", "-fcs-profile-generate=d", "-fprofile-instr-generate",
    "-fprofile-instr-generate=x.profraw", "-fprofile-use", "-fprofile-use=/tmp/profiles",
    "-fprofile-instr-use=x.profdata",
]  # fmt: skip
ALLOWED_FLAGS = [
    "-O2", "-O3 -march=native", "-ffast-math", "-v", "-mfpmath=387", "-fno-tree-vectorize", "-msse2",
    "-DX=1", "-Wl,--as-needed", "-Wl,-z,now", "-Wa,--noexecstack", "-flto", "-pipe", "-ffp-contract=off",
    "-mavx2 -mfma", "-Wall -Wextra", "-fopt-info-vec", "-fprofile-update=atomic", "-g",
    "-I/usr/include", "-isystem /usr/include", "-I=/usr/include", "-include /usr/include/math.h",
    "--sysroot=/", "-L /usr/lib", "-I-",
]  # fmt: skip


@pytest.mark.parametrize("flags", REFUSED_FLAGS)
def test_flags_that_redirect_the_compilers_output_are_refused_with_a_reason(flags):
    """Also those that could never work here: a profile to use (its file names hold the private
    build directory's random name, so gcc only warns "profile count data file not found")."""
    with pytest.raises(BuildError, match=r"is refused: it \w+") as refusal:
        BuildConfig.parse(f"-O1 {flags}")
    if "-use" in flags:
        assert "private directory of a random name" in str(refusal.value)


@pytest.mark.parametrize(
    "flags,path",
    [("-Iinc", "inc"), ("-isystem inc", "inc"), ("-include my.h", "my.h"), ("--sysroot=sys", "sys"),
     ("-L lib", "lib"), ("-I ~/inc", "~/inc"), ("-specs=my.specs", "my.specs")],
)  # fmt: skip
def test_a_relative_path_in_the_flags_is_refused_with_its_absolute_form(flags, path):
    """The compiler runs in a private build directory: -Iinc named nothing there, so a math.h
    in ./inc was silently never read (verify passed a kernel that header broke)."""
    with pytest.raises(BuildError, match="relative to the working directory") as refusal:
        BuildConfig.parse(f"-O2 {flags}")
    assert f"({os.path.abspath(path)})" in str(refusal.value)


@pytest.mark.parametrize("flags", ["''", '-O2 ""'])
def test_an_empty_quoted_flag_is_refused_before_the_compiler_sees_it(flags):
    with pytest.raises(BuildError, match="empty quoted argument"):
        BuildConfig.parse(flags)


@pytest.mark.parametrize("flags", ALLOWED_FLAGS)
def test_ordinary_flags_are_allowed(flags):
    assert refused(tuple(flags.split())) is None
    BuildConfig.parse(flags)


def says_missing_header(text: str) -> bool:
    """The compiler's own words for an -include of missing.h, gcc's or clang's: the reason carries them."""
    return "missing.h: No such file" in text or "missing.h' file not found" in text


def test_a_build_that_fails_to_compile_or_to_load_costs_its_own_rows(tmp_path):
    """-m32 (no 32-bit headers), -O3 -march=bdver4 on a CPU without FMA4 (SIGILL as its library
    loads), -mabi=ms (SIGSEGV), -fsanitize=address, -fvisibility=hidden: each such build ended
    run, compare and verify with exit 2, and every other build's rows with it.  Here stand-ins
    that fail alike on any machine: an -include of a missing file, and a constructor that traps
    (SIGILL) as the library loads.  Their rows fail with the reason, the others' are measured and
    saved; verify FAILs them (a build not verified never passes); all failing is one line, exit 2."""
    trap = tmp_path / "trap.h"
    trap.write_text("__attribute__((constructor)) static void sb_test_trap(void) { __builtin_trap(); }\n")
    missing, trapping = f"-O0 -include {tmp_path / 'missing.h'}", f"-O0 -include {trap}"
    failing = ("--kernels", "basic", "--flags", missing, "--flags", trapping)
    for command in ("run", "compare"):
        out = tmp_path / f"{command}.json"
        result = invoke(command, *TINY, *failing, "--json", out)
        assert result.code == 0, result.stderr
        saved = json.loads(out.read_text())
        rows = {r["flags"]: r for r in saved["results"]}
        assert rows["-O2"]["status"] == "ok" and rows["-O2"]["hits"] == saved["exact_count"]
        assert rows[missing]["status"] == "build-failed" and says_missing_header(rows[missing]["reason"])
        assert rows[trapping]["status"] == "crashed"
        assert "signal 4" in rows[trapping]["reason"] and "lacks an instruction" in rows[trapping]["reason"]
        failures = {" ".join(b["flags"]): b.get("failure", "") for b in saved["env"]["builds"]}
        assert "missing.h" in failures[missing] and failures["-O2"] == ""
    out = tmp_path / "verify.json"
    result = invoke("verify", "--cases", "300", "--flags", "-O2", *failing, "--json", out)
    assert result.code == 1, result.stderr
    verdicts = {v["flags"]: v for v in json.loads(out.read_text())["kernels"]}
    assert verdicts["-O2"]["status"] == "ok" and verdicts["-O2"]["verdict"] != "FAIL"
    assert verdicts[missing]["status"] == "build-failed" and verdicts[missing]["verdict"] == "FAIL"
    assert "in --json, env.builds[].failure" in verdicts[missing]["reason"]  # where the rest is: there
    failures = {" ".join(b["flags"]): b.get("failure", "") for b in json.loads(out.read_text())["env"]["builds"]}
    assert "missing.h" in failures[missing] and failures["-O2"] == ""
    assert verdicts[trapping]["status"] == "crashed" and verdicts[trapping]["verdict"] == "FAIL"
    every = invoke("run", *TINY[:-2], *failing)
    assert says_missing_header(one_line(every, "every build failed", "lacks an instruction"))


def test_a_linker_flag_cannot_write_over_a_file_and_nothing_is_built(tmp_path):
    target = tmp_path / "s.json"
    target.write_text("precious")
    cache = tmp_path / "cache"
    result = sectorbench(
        "run", "--flags", "-O1 -Wl,-o,s.json", "--kernels", "basic", cwd=tmp_path, env={"SECTORBENCH_CACHE": cache}
    )
    one_line(result, "-Wl,-o,s.json is refused", "linker")
    assert target.read_text() == "precious"
    assert not cache.exists() or not any(cache.iterdir())


def fake_compiler(tmp_path: Path, body: str) -> Path:
    """A --cc that answers --version like a compiler and runs `body` for a build."""
    script = tmp_path / "fakecc"
    script.write_text(f'#!/bin/sh\nif [ "$1" = --version ]; then echo "fakecc 1.0"; exit 0; fi\n{body}\n')
    script.chmod(0o755)
    return script


def test_a_compiler_may_take_at_most_half_the_machines_memory(tmp_path):
    """A --source file that included /dev/zero had cc1 take 4.2 GB before a ulimit stopped it,
    and nothing of ours would have: every compiler runs under `ulimit -v` of half the memory
    (or this process's own limit, where that is lower)."""
    limits = tmp_path / "limits"
    cc = fake_compiler(tmp_path, f'ulimit -v >> {limits}; exec cc "$@"')
    build(BuildConfig.parse("-O0", cc=str(cc)), tmp_path / "cache")
    expected_kib = physical_memory_bytes() // 2 // 1024
    if (own := address_space_limit()) is not None:
        expected_kib = min(expected_kib, own // 1024)
    assert set(limits.read_text().split()) == {str(expected_kib)}


def test_a_compiler_wrapper_that_leaves_a_helper_running_is_not_waited_for(tmp_path):
    """An sccache- or distcc-pump-like wrapper starts a helper that keeps the descriptors it
    inherited and leaves the session: `cc --version` waited for the helper's end, 60 s and then
    "compiler ... does not run: ... timed out", and the kill that followed could not reach it, so
    sectorbench waited on until the helper ended (for ever for a server)."""
    helpers = tmp_path / "helpers"
    cc = tmp_path / "wrapcc"
    cc.write_text(f"#!/bin/sh\nsetsid sh -c 'echo $$ >> {helpers}; exec sleep 75' &\nexec cc \"$@\"\n")
    cc.chmod(0o755)
    started = time.monotonic()
    try:
        library = build(BuildConfig.parse("-O0", cc=str(cc)), tmp_path / "cache")
        took = time.monotonic() - started
    finally:
        for pid in helpers.read_text().split() if helpers.exists() else []:
            with contextlib.suppress(ProcessLookupError):
                os.kill(int(pid), signal.SIGKILL)
    assert library.exists() and took < 45, took


def test_the_compiler_runs_in_a_private_directory_that_is_removed(tmp_path, monkeypatch):
    """Files a compiler drops in its working directory or $TMPDIR land in the private build
    directory and go with it; the library is moved into the cache, with its checksum and what
    the compiler said.  The harness's warning flags come before the user's, so a -w or -Wno-...
    of theirs wins."""
    seen, commands = tmp_path / "seen", tmp_path / "commands"
    cc = fake_compiler(
        tmp_path,
        f'pwd > {seen}; echo "$TMPDIR" >> {seen}; echo "$@" >> {commands}; '
        'touch stray.o "$TMPDIR/cc-temp"; exec cc "$@"',
    )
    cache = tmp_path / "cache"
    monkeypatch.chdir(tmp_path)
    library = build(BuildConfig.parse("-O0 -Wno-unused-variable", cc=str(cc)), cache)
    for command in commands.read_text().splitlines():
        words = command.split()
        assert words.index("-Wall") < words.index("-Wextra") < words.index("-O0") < words.index("-Wno-unused-variable")
    cwd, tmpdir = seen.read_text().split()
    assert cwd == tmpdir and Path(cwd).parent == cache and cwd.endswith(".build")
    assert not Path(cwd).exists() and not (tmp_path / "stray.o").exists()
    assert sorted(p.name for p in cache.iterdir()) == [
        build_module.LOCKS_DIR,
        build_module.OBJECTS_DIR,
        library.name,
        library.name + ".deps",
        library.name + ".sha256",
        library.name + ".warnings",
    ]
    objects = list((cache / build_module.OBJECTS_DIR).iterdir())
    assert all(p.name.endswith((".o", ".o.deps", ".o.sha256", ".o.warnings")) for p in objects)


# ------------------------------------------------------------------ everything checked before work

SHAPES = {
    "results a dict": lambda d: d.update(results={}),
    "results a string": lambda d: d.update(results="many"),
    "a row a list": lambda d: d["results"].__setitem__(0, [1, 2]),
    "a row without kernel": lambda d: d["results"][0].pop("kernel"),
    "scene a list": lambda d: d.update(scene=[]),
    "env a string": lambda d: d.update(env="x"),
    "samples strings": lambda d: d["results"][0].update(samples_s=["fast", "slow"]),
    "samples null": lambda d: d["results"][0].update(samples_s=[None]),
    "samples NaN": lambda d: d["results"][0].update(samples_s=[float("nan"), 1e-3]),
    "samples inf": lambda d: d["results"][0].update(samples_s=[float("inf"), 1e-3]),
    "samples negative": lambda d: d["results"][0].update(samples_s=[-1e-3, 1e-3]),
    "samples a number": lambda d: d["results"][0].update(samples_s=3.0),
    "net samples inf": lambda d: d["results"][0].update(net_samples_s=[float("inf")]),
    "threads a string": lambda d: d["results"][0].update(threads="2"),
    "threads true": lambda d: d["results"][0].update(threads=True),
    "tests a float": lambda d: d["results"][0].update(tests=1.5),
    "median NaN": lambda d: d["results"][0].update(median_s=float("nan")),
    "status a number": lambda d: d["results"][0].update(status=1),
    "warnings a string": lambda d: d["results"][0].update(warnings="w"),
    "schema a string": lambda d: d.update(schema="2"),
    # numbers no measurement has, which exports wrote as invalid JSON or failed on (internal errors)
    "samples past a float": lambda d: d["results"][0].update(samples_s=[10**400, 1e-3]),
    "samples of 1e300 s": lambda d: d["results"][0].update(samples_s=[1e300, 1e300]),
    "samples subnormal": lambda d: d["results"][0].update(samples_s=[1e-320, 1e-3]),
    # the gate pairs every sample with every other: 10^5 a row on both sides asked for 80 GB
    "too many samples": lambda d: d["results"][0].update(samples_s=[1e-3] * 10_001),
    "tests past a float": lambda d: d["results"][0].update(tests=10**400),
    "tests 0": lambda d: d["results"][0].update(tests=0),
    "threads 0": lambda d: d["results"][0].update(threads=0),
    "instructions NaN": lambda d: d["results"][0].update(instructions_per_test=float("nan")),
    # counts below 0: -5 was gated as an improvement (ratio -0.000) and exported to Bencher
    "instructions negative": lambda d: d["results"][0].update(
        instructions=-5, overhead_instructions=0, instructions_tests=4
    ),
    "instructions over 0 tests": lambda d: d["results"][0].update(
        instructions=50, overhead_instructions=10, instructions_tests=0
    ),
    "counted instructions negative": lambda d: d["results"][0].update(instructions_per_test=-1.0),
    "cores a string": lambda d: d["env"]["machine"]["cpu"].update(logical_cores="two"),
    "clock infinite": lambda d: d["env"]["machine"]["cpu"].update(measured_mhz=float("inf")),
    "side unknown": lambda d: d["results"][0].update(side="middle"),
    "status unknown": lambda d: d["results"][0].update(status="weird"),
    "the whole a list": None,
}


@pytest.mark.parametrize("shape", SHAPES)
def test_a_result_of_any_wrong_shape_is_one_line_before_any_work(shape, ok_json, tmp_path):
    bad = tmp_path / "bad.json"
    if SHAPES[shape] is None:
        bad.write_text("[1, 2, 3]")
    else:
        variant(ok_json, bad, SHAPES[shape])
    one_line(invoke("regress", bad, ok_json), str(bad))
    one_line(invoke("regress", ok_json, bad), str(bad))
    one_line(invoke("plot", bad, "--out", tmp_path / "x.png"), str(bad))
    one_line(invoke("export", bad, "--format", "bmf", "--out", tmp_path / "x.json"), str(bad))
    result = invoke("run", *TINY, "--baseline", bad)
    one_line(result, str(bad))
    assert "plan:" not in result.stderr  # refused before anything was built or timed
    with pytest.raises(SectorbenchError):
        load(bad)


def test_plot_refuses_inf_string_and_null_samples(ok_json, tmp_path):
    for value in (float("inf"), "x", None):
        samples = [value, 1e-3]
        bad = variant(
            ok_json, tmp_path / "bad.json", lambda d, samples=samples: d["results"][0].update(net_samples_s=samples)
        )
        one_line(sectorbench("plot", bad, "--out", tmp_path / "x.png"), "net_samples_s[0]")
    assert not (tmp_path / "x.png").exists()


def test_a_rows_list_past_its_limit_is_refused_for_its_length_before_its_items_are_walked(ok_json, tmp_path):
    """One row of 21 million samples (229 MB) was walked item by item for 21 s before its length
    refused it; the length now comes first (a bad item at the end is never reached), and a row's
    other lists (the counts its rounds saw) have the same limit."""
    from sectorbench.model.schema import MAX_SAMPLES

    long = [1e-3] * MAX_SAMPLES + ["fast"]
    bad = variant(ok_json, tmp_path / "long.json", lambda d: d["results"][0].update(samples_s=long))
    one_line(invoke("regress", ok_json, bad), f"results[0].samples_s holds {MAX_SAMPLES + 1} samples, more than")
    seen = variant(ok_json, tmp_path / "seen.json", lambda d: d["results"][0].update(hits_seen=[1] * 10**6))
    one_line(invoke("export", seen, "--format", "bmf", "--out", tmp_path / "x.json"), "hits_seen holds 1000000 items")
    assert not (tmp_path / "x.json").exists()


def test_a_results_rows_are_checked_against_type_hints_evaluated_once(ok_json, monkeypatch):
    """typing.get_type_hints evaluates every annotation again on each call (1.2 ms for
    KernelResult): called once a row, a 250 MB file of 3 million small rows held `regress` for
    an hour before the schema refused or passed it.  The hints are evaluated once a class."""
    import typing

    from sectorbench.model import schema

    data = json.loads(ok_json.read_text())
    data["results"] = data["results"] * 200
    calls = []
    evaluate = typing.get_type_hints
    monkeypatch.setattr(typing, "get_type_hints", lambda cls: calls.append(cls) or evaluate(cls))
    schema._type_hints.cache_clear()  # what an earlier test evaluated is evaluated again here
    schema.check_run(data)
    assert len(calls) == len(set(calls)) == 2, calls  # RunResult's and KernelResult's, once each


def test_non_utf8_and_deeply_nested_results_are_one_line(tmp_path, ok_json):
    latin = tmp_path / "latin.json"
    latin.write_bytes(b'{"results": "\xff"}')
    one_line(invoke("regress", latin, ok_json), "not UTF-8")
    deep = tmp_path / "deep.json"
    deep.write_text("[" * 100_000 + "]" * 100_000)
    one_line(invoke("regress", deep, ok_json), str(deep))


def test_fifos_devices_and_directories_are_refused_without_reading(tmp_path, ok_json):
    fifo = tmp_path / "fifo.json"
    os.mkfifo(fifo)
    one_line(sectorbench("regress", fifo, ok_json, timeout=60), "is a FIFO")
    one_line(sectorbench("regress", ok_json, fifo, timeout=60), "is a FIFO")
    one_line(sectorbench("regress", "/dev/zero", ok_json, timeout=60), "/dev/zero is a character device")
    one_line(sectorbench("plot", fifo, "--out", tmp_path / "x.png", timeout=60), "is a FIFO")
    npz_fifo = tmp_path / "cases.npz"
    os.mkfifo(npz_fifo)
    one_line(sectorbench("verify", "--input", npz_fifo, timeout=60), "is a FIFO")
    link = tmp_path / "zero.json"
    link.symlink_to("/dev/zero")
    one_line(sectorbench("regress", link, ok_json, timeout=60), "character device")


def test_a_result_file_over_the_size_cap_is_refused_unread(tmp_path, ok_json):
    from sectorbench.model.results import MAX_RESULT_BYTES

    huge = tmp_path / "huge.json"
    with open(huge, "wb") as stream:
        stream.truncate(MAX_RESULT_BYTES + 1)  # sparse: no disk, and never read
    one_line(invoke("regress", huge, ok_json), "more than the", "allowed")


def npy_header(shape, descr="<f4") -> bytes:
    header = io.BytesIO()
    np.lib.format.write_array_header_1_0(header, {"descr": descr, "fortran_order": False, "shape": shape})
    return header.getvalue()


def test_a_zip_bomb_is_refused_at_once_in_little_memory(tmp_path):
    bomb = tmp_path / "bomb.npz"
    # deflate's fastest level: 1.2 GB of zeros in ~1 s of CPU (the default level took 6 s for 2 GB)
    with zipfile.ZipFile(bomb, "w", zipfile.ZIP_DEFLATED, compresslevel=1) as archive:
        with archive.open("cx.npy", "w", force_zip64=True) as member:
            member.write(npy_header((72 << 22,)))
            block = bytes(1 << 24)
            for _ in range(72):  # 1.2 GB of zeros, past the 1 GiB limit, a few MB compressed
                member.write(block)
    assert bomb.stat().st_size < 10 * 2**20
    # the peak memory of that one process: measured by a fresh parent whose only child it is
    # (this test process's own children include every earlier test's)
    measure = (
        "import resource, subprocess, sys; "
        "run = subprocess.run([sys.executable, '-m', 'sectorbench', 'verify', '--input', sys.argv[1]], "
        "capture_output=True, text=True); "
        "sys.stderr.write(run.stderr); print(resource.getrusage(resource.RUSAGE_CHILDREN).ru_maxrss)"
    )
    measured = subprocess.run([sys.executable, "-c", measure, str(bomb)], capture_output=True, text=True, timeout=300)
    assert "uncompressed" in measured.stderr and "more than the" in measured.stderr, measured.stderr
    assert measured.stderr.count("\n") == 1 and "internal error" not in measured.stderr
    assert int(measured.stdout) < 400 * 1024  # KiB: far below the 1.2 GB it would inflate to
    liar = tmp_path / "liar.npz"
    with zipfile.ZipFile(liar, "w") as archive:  # a small member whose header claims 4 TB
        archive.writestr("cx.npy", npy_header((10**12,)) + bytes(16))
    one_line(sectorbench("verify", "--input", liar), "declares 4,000,000,000,000 bytes")


@pytest.mark.parametrize(
    "args, fragment",
    [
        (("run", *TINY, "--threads", "1180591620717411303424"), "--threads must be from 1 to"),
        (("run", *TINY, "--threads", "x"), "--threads must be a whole number"),
        (("compare", *TINY, "--threads", "100000"), "--threads must be from 1 to"),
        (("query", "--threads", "100000", "--out", "q.npz"), "--threads must be from 1 to"),
        (("query", "--rmax", "1e39", "--out", "q.npz"), "--rmax must be at most"),
        (("query", "--world", "1e39", "--out", "q.npz"), "--world must be a positive number up to"),
        (("query", "--rmin", "1e-30", "--out", "q.npz"), "--rmin must be at least"),
        (("query", "-n", "1000", "-m", "100000", "--rmax", "1e6", "--max-hits", "1000000", "--out", "q.npz"),
         "more than --max-hits 1,000,000 hits"),
    ],
)  # fmt: skip
def test_limits_are_one_line_naming_the_option(args, fragment, tmp_path):
    one_line(sectorbench(*args, cwd=tmp_path), fragment)
    assert not (tmp_path / "q.npz").exists()


def test_query_in_chunks_gives_the_same_hits_and_bounds_them():
    from sectorbench import query
    from sectorbench.families.scene_kinds import generate

    made = generate("game", 300, 4000, 3, {"world": 100.0, "rmin": 2.0, "rmax": 20.0})
    columns = {name: made.column(name) for name in made.arrays}
    whole = query(columns, columns)
    assert whole.total > 1000
    chunked = query(columns, columns, max_hits=whole.total)  # the candidates exceed the hits: chunks
    assert chunked.same_as(whole)
    unindexed = query(columns, columns, broadphase="none", max_hits=whole.total)  # chunks of max_hits // M
    assert unindexed.same_as(whole)
    with pytest.raises(ValueError, match="more than max_hits=1,000 hits") as refused:
        query(columns, columns, max_hits=1000)
    assert refused.value.__context__ is None  # not "during handling of the above exception" (OverLimit)


@pytest.mark.parametrize("broadphase", ["grid", "none"])
def test_an_answer_past_max_hits_is_refused_holding_about_max_hits(broadphase):
    """64 sectors each holding all 100 points, max_hits 1 000: chunks of 10 sectors (1 000
    candidates) were queried until their hits passed it, 2 000 held ("already 2,000 in sectors 0
    to 19"): at the default max_hits, 2 GiB of hits and a third in the work buffer.  The next
    chunk takes only what max_hits still allows, plus one: here one sector."""
    from sectorbench import query

    n = 64
    sectors = {"cx": np.zeros(n), "cy": np.zeros(n), "ux": np.ones(n), "uy": np.zeros(n), "r": np.full(n, 10.0),
               "theta": np.full(n, 3.0)}  # fmt: skip
    points = np.random.default_rng(0).uniform(0.5, 1, (100, 2)).astype(np.float32)
    assert query(sectors, points, broadphase=broadphase).total == n * 100
    with pytest.raises(ValueError, match=r"more than max_hits=1,000 hits \(already 1,100 in sectors 0 to 10 of 64\)"):
        query(sectors, points, broadphase=broadphase, max_hits=1000)


@pytest.mark.parametrize(
    "bounds, begin, budget, end",
    [
        ([5, 5, 5, 5], 0, 100, 4),  # everything fits: one call
        ([5, 5, 5, 5], 0, 10, 2),
        ([5, 5, 5, 5], 2, 10, 4),
        ([5, 5, 5, 5], 1, 9, 2),
        ([3, 50, 3, 3], 0, 10, 1),
        ([3, 50, 3, 3], 1, 10, 2),  # a sector over the budget goes alone
        ([3, 50, 3, 3], 2, 10, 4),
        ([0, 0, 0], 0, 1, 3),
    ],
)
def test_sectors_are_chunked_by_their_hit_bounds(bounds, begin, budget, end):
    from sectorbench.families.sector.query import _chunk_end

    assert _chunk_end(np.cumsum(np.array(bounds, dtype=np.int64)), begin, budget) == end


def test_warnings_never_reach_stderr(tmp_path):
    """numpy warnings are errors' cousins: the CLI filters them (and the causes found are fixed)."""
    result = sectorbench(
        "query", "-n", "50", "-m", "500", "--out", tmp_path / "q.npz", env={"PYTHONWARNINGS": "always"}
    )
    assert result.code == 0, result.stderr
    assert "Warning" not in result.stderr and len(result.stderr.strip().splitlines()) == 1


# ------------------------------------------------------------------ a cache that heals


def object_times(cache: Path) -> dict[str, int]:
    return {path.name: path.stat().st_mtime_ns for path in (cache / build_module.OBJECTS_DIR).glob("*.o")}


def test_kernels_c_is_compiled_once_and_its_objects_shared_and_healed(tmp_path):
    """A build that adds a --source file compiles that file only; a damaged object is compiled again."""
    cache = tmp_path / "cache"
    plain = build(BuildConfig.parse("-O0"), cache)
    objects = object_times(cache)
    assert len(objects) == len(build_module.units(BuildConfig.parse("-O0")))
    with_source = build(BuildConfig.parse("-O0", extra_sources=(DATA / "crash_kernel.c",)), cache)
    (added,) = object_times(cache).keys() - objects.keys()  # the --source file's object, nothing else
    assert added.startswith(build_module.SOURCE_PREFIX + "crash_kernel-")
    assert with_source != plain and {k: v for k, v in object_times(cache).items() if k != added} == objects
    assert with_source.stat().st_size > plain.stat().st_size  # the --source file's kernels are in it
    damaged = cache / build_module.OBJECTS_DIR / sorted(objects)[0]
    damaged.write_bytes(damaged.read_bytes()[:100])
    plain.unlink()
    assert build(BuildConfig.parse("-O0"), cache) == plain
    healed = {name: mtime for name, mtime in object_times(cache).items() if name != added}
    assert healed.keys() == objects.keys() and healed[damaged.name] != objects[damaged.name]
    assert sum(healed[name] != objects[name] for name in objects) == 1


def test_editing_a_header_beside_a_source_file_rebuilds_its_library(tmp_path):
    """A --source file that includes its own header: editing the header is a new build (a
    cached library of the old header would be timed and verified as if it were the new one)."""
    (tmp_path / "mine.h").write_text("#define MY_SCALE 1.0f\n")
    source = tmp_path / "mine.c"
    source.write_text('#include "mine.h"\nfloat mine_scale(void) { return MY_SCALE; }\n')
    config = BuildConfig.parse("-O2", extra_sources=(source,))
    before = build_module.library_path(config)
    (tmp_path / "mine.h").write_text("#define MY_SCALE 2.0f\n")
    assert build_module.library_path(config) != before


def test_a_source_object_is_reused_until_a_file_it_read_changes(tmp_path, seeded_cache):
    """A --source file is compiled once for all the libraries it is part of; editing any file it
    includes, from any folder (here a header two folders away, which no name sees), compiles it
    and rebuilds its library again, with what it read listed beside both."""
    shared = tmp_path / "shared" / "scale.h"
    shared.parent.mkdir()
    shared.write_text("#define MY_SCALE 1.0f\n")
    source, other = tmp_path / "mine" / "mine.c", tmp_path / "mine" / "other.c"
    source.parent.mkdir()
    source.write_text('#include "../shared/scale.h"\nfloat mine_scale(void) { return MY_SCALE; }\n')
    other.write_text("float other_scale(void) { return 3.0f; }\n")
    cache = seeded_cache(tmp_path / "cache", "-O0")  # kernels_c/'s objects, linked: only ours compile

    both = BuildConfig.parse("-O0", extra_sources=(source, other))
    mine, theirs = [path for _, _, path, is_source in build_module.object_paths(both, cache) if is_source]
    alone = build(BuildConfig.parse("-O0", extra_sources=(source,)), cache)
    compiled = mine.stat().st_mtime_ns
    assert not theirs.exists()
    build(both, cache)
    assert theirs.exists() and mine.stat().st_mtime_ns == compiled  # other.c compiled, mine.c taken
    listed = json.loads(Path(f"{alone}{build_module.DEPENDENCIES_SUFFIX}").read_text())
    assert str(shared) in listed and str(source) in listed
    assert build(BuildConfig.parse("-O0", extra_sources=(source,)), cache) == alone
    assert mine.stat().st_mtime_ns == compiled
    before = alone.read_bytes()
    shared.write_text("#define MY_SCALE 2.0f\n")
    assert build(BuildConfig.parse("-O0", extra_sources=(source,)), cache) == alone
    assert mine.stat().st_mtime_ns != compiled and alone.read_bytes() != before  # the constant is in the code


def test_a_header_that_appears_where_the_compile_looked_builds_the_source_again(tmp_path, seeded_cache):
    """No file a --source compile read changes when a header it looked for and did not find
    (`__has_include`) appears, or one appears in a folder searched before the one it was found
    in: the cached object compiled without it was linked, and run and verify judged the old
    kernel."""
    source = tmp_path / "mine" / "mine.c"
    source.parent.mkdir()
    (tmp_path / "include").mkdir()
    (tmp_path / "include" / "scale.h").write_text("#define MY_SCALE 1.0f\n")
    source.write_text(
        '#if __has_include("extra.h")\n#include "extra.h"\n#endif\n#include "scale.h"\n'
        "#ifndef MY_OFFSET\n#define MY_OFFSET 0.0f\n#endif\n"
        "float mine_scale(void) { return MY_SCALE + MY_OFFSET; }\n"
    )
    cache = seeded_cache(tmp_path / "cache", "-O0")

    def compiled() -> int:
        config = BuildConfig.parse(f"-O0 -I{tmp_path / 'include'}", extra_sources=(source,))
        build(config, cache)
        [mine] = [path for _, _, path, is_source in build_module.object_paths(config, cache) if is_source]
        return mine.stat().st_mtime_ns

    first = compiled()
    assert compiled() == first  # nothing changed: taken from the cache
    (source.parent / "notes.txt").write_text("not a header\n")
    assert compiled() == first
    (source.parent / "extra.h").write_text("#define MY_OFFSET 1.0f\n")
    second = compiled()
    assert second != first
    (source.parent / "scale.h").write_text("#define MY_SCALE 3.0f\n")  # found before include/scale.h
    assert compiled() != second


def test_a_header_that_appears_or_changes_in_an_include_folder_rebuilds_kernels_c(tmp_path):
    """kernels_c/'s objects and the library were named by the flags and kernels_c/'s own files
    alone: a <math.h> that appeared in an -I folder, defining sqrtf wrongly, left verify passing
    the cached library of the header before it, and verify kept failing the broken library once
    the header was mended.  Every compile now lists what it read and the folders it searched."""
    include = tmp_path / "include"
    include.mkdir()
    flags = f"-O0 -I{include}"
    verify = ("verify", "--cases", "1000", "--kernels", "naive", "--flags", flags)
    assert invoke(*verify).code == 0
    library = build_module.library_path(BuildConfig.parse(flags))
    (include / "math.h").write_text("#include_next <math.h>\n#define sqrtf(x) ((x) * 0.5f)\n")
    broken = invoke(*verify)
    assert broken.code == 1 and "FAIL" in broken.stdout, broken.stdout
    listed = json.loads(Path(f"{library}{build_module.DEPENDENCIES_SUFFIX}").read_text())
    ours = str((include / "math.h").resolve())
    assert ours in listed and any(name.endswith("/math.h") and name != ours for name in listed)  # and <math.h>
    (include / "math.h").write_text("#include_next <math.h>\n")  # mended: the same code as without it
    assert invoke(*verify).code == 0


#: A --source kernel: basic's predicate, its radius scaled by lib_scale() of a library in --flags.
SCALED_KERNEL = """#include "sb_common.h"
#include "basic_predicate.h"
float lib_scale(void);
static inline int scaled(float cx, float cy, float ux, float uy, float r2, float k, float px, float py) {
    return basic_predicate(cx, cy, ux, uy, r2 * lib_scale(), k, px, py);
}
SB_KERNEL(scaled, SCALAR, 1, (cx, cy, ux, uy, r2, cos_theta), .family = "sector", .summary = "radius from a library");
"""


def static_library(folder: Path, scale: str) -> Path:
    """folder/libscale.a, whose lib_scale() returns `scale`."""
    source, library = folder / "scale.c", folder / "libscale.a"
    source.write_text(f"float lib_scale(void) {{ return {scale}; }}\n")
    subprocess.run(["cc", "-c", "-fPIC", str(source), "-o", str(folder / "scale.o")], check=True)
    library.unlink(missing_ok=True)
    subprocess.run(["ar", "rcs", str(library), str(folder / "scale.o")], check=True)
    return library


def test_a_library_linked_by_name_that_changes_or_is_shadowed_rebuilds_the_library(tmp_path):
    """The cache listed what the compiles read and the files the flags name by path, not the
    libraries -l finds in -L folders: a libscale.a rebuilt with other code left verify passing
    the cached library linked with the old one.  Each -l is now looked for as the linker does."""
    libs = tmp_path / "libs"
    libs.mkdir()
    source = tmp_path / "scaled.c"
    source.write_text(SCALED_KERNEL)
    shutil.copy(DATA / "basic_predicate.h", tmp_path)
    flags = f"-O0 -L{libs} -lscale"
    verify = ("verify", "--cases", "1000", "--kernels", "scaled", "--source", source, "--flags", flags)
    static_library(libs, "1.0f")
    # a static library given before the inputs linked nothing: the load failed, "undefined symbol: lib_scale"
    assert invoke(*verify).code == 0
    static_library(libs, "0.5f")  # half the radius: wrong
    broken = invoke(*verify)
    assert broken.code == 1 and "FAIL" in broken.stdout, broken.stdout
    library = build_module.library_path(BuildConfig.parse(flags, extra_sources=(source,)))
    assert build_module._cached(library)
    # a libscale.so beside it is the one the linker takes now (after -Bstatic: still libscale.a)
    (libs / "libscale.so").write_bytes(b"")
    assert not build_module._cached(library)
    listed = build_module._linked_libraries(BuildConfig.parse(f"-L{libs} -Wl,-Bstatic -lscale -l:nowhere.a"), tmp_path)
    first, nowhere = [json.loads(name.removeprefix(build_module.LIBRARY_KEY)) for name in listed]
    assert first[0] == str(libs / "libscale.a") and str(libs / "libscale.so") not in first
    assert nowhere[0] == str(libs / "nowhere.a") and build_module._still_as_read(listed)  # found nowhere: no error
    # by its path, whole: as -l, after the sources (before them it linked nothing, "undefined symbol")
    (libs / "libscale.so").unlink()
    static_library(libs, "1.0f")
    whole = f"-O0 -Wl,--whole-archive {libs / 'libscale.a'} -Wl,--no-whole-archive"
    passed = invoke("verify", "--cases", "1000", "--kernels", "scaled", "--source", source, "--flags", whole)
    assert passed.code == 0, passed.stdout + passed.stderr


def test_libraries_and_linker_options_go_after_the_sources_in_their_order():
    flags = ("-O2", "-include", "/x/pre.o", "-L/lib", "-Wl,-Bstatic", "-l", "a", "/x/libb.a", "-lc", "/x/d.so.1", "-g")
    before, after = build_module._libraries_last(flags)
    assert before == ["-O2", "-include", "/x/pre.o", "-L/lib", "-g"]
    assert after == ["-Wl,-Bstatic", "-l", "a", "/x/libb.a", "-lc", "/x/d.so.1"]


def test_a_source_file_is_c_whatever_its_name_ends_in(tmp_path, private_cache):
    """gcc takes my_kernel.txt for a linker input (no object, "is it a C compiler?"), and its
    preprocessor would not list its rows: a --source file is compiled and read as C."""
    from sectorbench.measure.runner import RunConfig, run
    from sectorbench.measure.selection import known_kernels
    from sectorbench.measure.timing import TimingConfig

    source = tmp_path / "my_kernel.txt"
    shutil.copy(DATA / "correct_variants.c", source)
    shutil.copy(DATA / "basic_predicate.h", tmp_path)
    config = BuildConfig.parse("-O2", extra_sources=(source,))
    assert known_kernels(config)["c_sector_fma"] == "sector"
    timing = TimingConfig(repeat=2, min_sample_s=0.001)
    result = run(RunConfig(sectors=12, points=300, kernels=("c_sector_fma", "basic"), builds=(config,), timing=timing))
    rows = {r.kernel: r for r in result.results}
    assert rows["c_sector_fma"].status == "ok" and rows["c_sector_fma"].hits == rows["basic"].hits


def test_a_source_object_without_its_list_of_what_it_read_is_compiled_again(tmp_path, seeded_cache):
    source = tmp_path / "mine.c"
    source.write_text("float mine_scale(void) { return 1.0f; }\n")
    cache = seeded_cache(tmp_path / "cache", "-O0")
    config = BuildConfig.parse("-O0", extra_sources=(source,))
    library = build(config, cache)
    (ours,) = [path for _, _, path, is_source in build_module.object_paths(config, cache) if is_source]
    listed = Path(f"{ours}{build_module.DEPENDENCIES_SUFFIX}")
    listed.unlink()
    times = object_times(cache)
    library.unlink()
    build(config, cache)
    changed = [name for name, mtime in object_times(cache).items() if times[name] != mtime]
    assert changed == [ours.name] and listed.exists()


def test_two_processes_asking_for_one_library_compile_it_once(tmp_path):
    """Two runs at once (two CI jobs on one runner, two pytest workers): the second waits for the
    first's compile and takes its library, instead of compiling everything a second time."""
    log = tmp_path / "calls"
    cc = fake_compiler(tmp_path, f'echo "$@" >> {log}; exec cc "$@"')
    cache = tmp_path / "cache"
    script = (
        "import sys; from sectorbench.native.build import BuildConfig, build; "
        f"print(build(BuildConfig.parse('-O0', cc={str(cc)!r}), sys.argv[1]))"
    )
    command = [sys.executable, "-c", script, str(cache)]
    both = [subprocess.Popen(command, stdout=subprocess.PIPE, text=True) for _ in "ab"]
    libraries = {process.communicate(timeout=600)[0].strip() for process in both}
    assert all(process.returncode == 0 for process in both) and len(libraries) == 1
    compiles = [line for line in log.read_text().splitlines() if " -c " in f" {line} "]
    assert len(compiles) == len(build_module.units(BuildConfig.parse("-O0")))


def test_a_linker_flag_builds_in_one_command_that_clang_accepts_under_werror(tmp_path):
    """clang rejects -Wl,... on a compile-only step under -Werror: such a build is one command."""
    clang = next((cc for cc in ("clang", "clang-19", "clang-14") if shutil.which(cc)), None)
    cc = clang or "cc"
    library = build(BuildConfig.parse("-O0 -Werror -Wl,--as-needed", cc=cc), tmp_path / "cache")
    assert library.read_bytes()[:4] == b"\x7fELF"
    assert not object_times(tmp_path / "cache")


def test_a_truncated_cached_library_is_rebuilt_not_loaded(tmp_path, seeded_cache):
    cache = seeded_cache(tmp_path / "cache", "-O0", "-O2")
    env = {"SECTORBENCH_CACHE": cache}
    assert sectorbench("kernels", "--flags", "-O0", env=env).code == 0
    library = build_module.library_path(BuildConfig.parse("-O0"), cache)  # (kernels also builds the peers' -O2 library)
    size = library.stat().st_size
    with open(library, "r+b") as stream:
        stream.truncate(size // 3)  # what a full disk or a killed copy leaves
    stale = cache / "sectorbench-0123.partial.build"
    stale.mkdir()
    (stale / "cc-temp").write_text("left by a killed build")
    partial = cache / "sectorbench-0123.x.partial"  # an older sectorbench's half-written library
    partial.write_bytes(b"\x7fELF")
    old = time.time() - 2 * build_module.STALE_BUILD_S
    os.utime(stale, (old, old))
    os.utime(partial, (old, old))
    listing = sectorbench("kernels", "--flags", "-O0", env=env)
    assert listing.code == 0, listing.stderr  # once "worker killed by signal 7", for ever
    assert "basic" in listing.stdout
    assert library.stat().st_size == size
    assert not stale.exists() and not partial.exists()
    assert build_module._intact(library)


def test_a_library_whose_checksum_does_not_match_is_dropped(tmp_path, o2_library):
    library = tmp_path / o2_library.name
    library.write_bytes(o2_library.read_bytes())
    (tmp_path / (library.name + ".sha256")).write_text("0" * 64 + "\n")
    assert not build_module._intact(library) and library.exists()  # outside a lock: only said
    assert not build_module._intact(library, remove=True)
    assert not library.exists() and not (tmp_path / (library.name + ".sha256")).exists()


def test_a_library_just_put_in_place_by_another_build_is_not_taken_for_a_damaged_one(tmp_path, seeded_cache):
    """Another process's build renames its library into the cache, then writes its checksum,
    holding the library's lock throughout: a build asking for it meanwhile waits for the lock
    and takes that library; it once deleted it (no checksum yet), and the other run's worker
    could not load it ("cannot open shared object file")."""
    cache = seeded_cache(tmp_path / "cache", "-O0")
    config = BuildConfig.parse("-O0")
    library = build(config, cache)
    built = library.stat().st_mtime_ns
    checksum = Path(f"{library}{build_module.CHECKSUM_SUFFIX}")
    written = checksum.read_text()
    found = []
    with build_module._locked(cache, [library.name]):  # the other build, between its rename and its checksum
        checksum.unlink()
        asking = threading.Thread(target=lambda: found.append(build(config, cache)))
        asking.start()
        asking.join(timeout=1.0)
        assert asking.is_alive() and library.exists()  # waiting for the lock, the library untouched
        checksum.write_text(written)
    asking.join(timeout=120)
    assert found == [library] and library.stat().st_mtime_ns == built  # taken, not built again


def test_a_lock_file_another_user_made_is_taken_all_the_same():
    """A lock file another user made in this user's cache (a run as root there: `sudo -E`, a
    container with the home mounted) is read-only to this one: every build it named failed,
    "build cache ... is unusable (Permission denied)", in a cache folder that was this user's.
    flock needs a descriptor open for reading alone.  Run as root, the test is nobody a moment."""
    import fcntl
    import tempfile

    cache = Path(tempfile.mkdtemp(prefix="sb-test-locks-", dir="/tmp"))  # not tmp_path: root's is 0700
    try:
        locks = cache / build_module.LOCKS_DIR
        locks.mkdir()
        theirs = locks / "sectorbench-0123.so"
        theirs.touch()
        theirs.chmod(0o444)  # as another user's 0644 file is to this user (root's own, if root)
        as_root = os.geteuid() == 0
        if as_root:
            os.chown(cache, 65534, -1)
            os.chown(locks, 65534, -1)
            os.seteuid(65534)  # nobody: the folders' owner, not the lock file's
        try:
            with build_module._locked(cache, [theirs.name, "sectorbench-4567.so"]):
                other = os.open(theirs, os.O_RDONLY)
                try:
                    with pytest.raises(BlockingIOError):  # held, as a lock made by this user is
                        fcntl.flock(other, fcntl.LOCK_EX | fcntl.LOCK_NB)
                finally:
                    os.close(other)
        finally:
            if as_root:
                os.seteuid(0)
        assert (locks / "sectorbench-4567.so").is_file()  # one not there yet is made as ever
    finally:
        shutil.rmtree(cache)


@pytest.mark.skipif(os.geteuid() != 0, reason="makes another user's folder in a cache (chown): root only")
def test_a_folder_of_another_users_in_the_cache_is_named():
    """A run as root in a user's empty cache (`sudo -E`) makes locks/ and objects/ root's: the
    user's builds then failed "build cache C is unusable (Permission denied)", C theirs and
    writable, nothing naming what refused.  The test is nobody a moment, the cache's owner."""
    import tempfile

    cache = Path(tempfile.mkdtemp(prefix="sb-test-theirs-", dir="/tmp"))  # not tmp_path: root's is 0700
    try:
        locks = cache / build_module.LOCKS_DIR
        locks.mkdir()  # root's, 0755
        os.chown(cache, 65534, -1)
        os.seteuid(65534)
        try:
            with pytest.raises(build_module.CacheError) as raised:
                with build_module._locked(cache, ["sectorbench-0123.so"]):
                    pass
            assert os.access(cache, os.W_OK)  # the cache's folder itself is the user's
        finally:
            os.seteuid(0)
        assert str(raised.value) == (
            f"build cache {cache} is unusable (Permission denied: {locks} belongs to root): "
            "set SECTORBENCH_CACHE to a writable directory"
        )
    finally:
        shutil.rmtree(cache)


@pytest.mark.parametrize("kind", ["a file", "under a file", "unwritable"])
def test_an_unusable_cache_is_one_line_naming_it(kind, tmp_path):
    blocker = tmp_path / "blocker"
    blocker.write_text("x")
    cache = {"a file": blocker, "under a file": blocker / "cache", "unwritable": Path("/proc/sectorbench-cache")}[kind]
    line = one_line(sectorbench("kernels", "--flags", "-O1", env={"SECTORBENCH_CACHE": cache}))
    assert f"build cache {cache} is unusable" in line and "SECTORBENCH_CACHE" in line


def test_an_empty_sectorbench_cache_means_the_default(tmp_path, seeded_cache):
    xdg = tmp_path / "xdg"
    seeded_cache(xdg / "sectorbench", "-O0", "-O2")
    work = tmp_path / "work"
    work.mkdir()
    result = sectorbench("kernels", "--flags", "-O0", cwd=work, env={"SECTORBENCH_CACHE": "", "XDG_CACHE_HOME": xdg})
    assert result.code == 0, result.stderr
    assert list((xdg / "sectorbench").glob("sectorbench-*.so")) and list(work.iterdir()) == []


def no_home_cache(tmp_path: Path) -> dict:
    """A CI container job's environment: no cache variable, a home where ~/.cache cannot be made
    (HOME=/ read-only to the job's user; here a file, which refuses root too), its own TMPDIR."""
    home = tmp_path / "home"
    home.write_text("not a folder")
    (tmp_path / "tmp").mkdir()
    return {"SECTORBENCH_CACHE": "", "XDG_CACHE_HOME": "", "HOME": str(home), "TMPDIR": str(tmp_path / "tmp")}


def test_without_a_writable_home_the_cache_is_a_private_folder_in_tmp(tmp_path, seeded_cache):
    env = no_home_cache(tmp_path)
    fallback = tmp_path / "tmp" / f"sectorbench-cache-{os.geteuid()}"
    seeded_cache(fallback, "-O0").chmod(0o700)
    result = sectorbench("kernels", "--flags", "-O0", cwd=tmp_path, env=env)
    assert result.code == 0, result.stderr
    assert result.stderr.splitlines()[0] == (
        f"note: build cache {fallback} ({tmp_path / 'home' / '.cache' / 'sectorbench'} cannot be made: "
        "Not a directory): set SECTORBENCH_CACHE or XDG_CACHE_HOME to keep it elsewhere"
    )
    assert list(fallback.glob("sectorbench-*.so"))
    # made by sectorbench: this user's alone, whatever the umask
    fresh = tmp_path / "fresh"
    fresh.mkdir()
    made = subprocess.run(
        [
            sys.executable,
            "-c",
            "import os; os.umask(0); from sectorbench.native.build import cache_choice; print(cache_choice()[0])",
        ],
        env={**os.environ, **env, "TMPDIR": str(fresh)},
        capture_output=True,
        text=True,
        check=True,
    )
    assert Path(made.stdout.strip()) == fresh / f"sectorbench-cache-{os.geteuid()}"
    assert Path(made.stdout.strip()).stat().st_mode & 0o777 == 0o700


@pytest.mark.parametrize("planted", ["a link", "a file", "writable by others", "another user's"])
def test_a_private_cache_in_tmp_that_another_user_could_have_made_is_refused(planted, tmp_path):
    env = no_home_cache(tmp_path)
    fallback = tmp_path / "tmp" / f"sectorbench-cache-{os.geteuid()}"
    elsewhere = tmp_path / "theirs"
    elsewhere.mkdir()
    if planted == "a link":
        fallback.symlink_to(elsewhere)
    elif planted == "a file":
        fallback.write_text("")
    else:
        fallback.mkdir(mode=0o700)
        if planted == "writable by others":
            fallback.chmod(0o777)
        elif os.geteuid() == 0:
            os.chown(fallback, 65534, 65534)
        else:
            pytest.skip("giving a folder to another user needs root")
    line = one_line(sectorbench("kernels", "--flags", "-O0", cwd=tmp_path, env=env))
    assert line.startswith(f"sectorbench: error: build cache {fallback} is refused (")
    assert "another user may have made it" in line and "SECTORBENCH_CACHE" in line
    assert list(elsewhere.iterdir()) == []


def test_a_damaged_loops_cache_is_ignored_and_rewritten(ok_json, o2_library, tmp_path):
    loops = list(o2_library.parent.glob(f"{o2_library.stem}.loops-*.json"))
    assert loops, "the tiny run analysed the loops"
    for damage in ("[1, 2", '{"basic": 3}', '{"basic": {"function": 1}}', "\xff"):
        loops[0].write_text(damage, errors="surrogateescape")
        result = invoke("run", *TINY, "--kernels", "basic", "--json", tmp_path / f"{len(damage)}.json")
        assert result.code == 0, result.stderr
        assert isinstance(json.loads(loops[0].read_text()), dict)


def test_a_hung_compiler_is_stopped_with_its_children(tmp_path, monkeypatch):
    pids = tmp_path / "pids"
    cc = fake_compiler(tmp_path, f'sleep 300 & echo $! > {pids}; touch "$TMPDIR/cc-temp"; wait')
    monkeypatch.setattr(build_module, "COMPILE_TIMEOUT_S", 2.0)
    cache = tmp_path / "cache"
    with pytest.raises(BuildError, match="took longer than 2 s: the compiler was stopped"):
        build(BuildConfig.parse("-O2", cc=str(cc)), cache)
    assert all(gone(int(pid)) for pid in pids.read_text().split())
    assert not list(cache.glob("*.build"))


def test_a_runs_max_minutes_stops_its_compilers_too(tmp_path):
    """Only the compiler's own 600 s bounded a build: a --source file that took 34 s to compile
    held `run --max-minutes 0.2` for 38 s.  The run's end stops the compilers (here one that
    hangs on every compile) and says so; their children go with them."""
    pids = tmp_path / "pids"
    body = f'case " $* " in *" -c "*) sleep 300 & echo $! >> {pids}; wait;; *) exec cc "$@";; esac'
    cc = fake_compiler(tmp_path, body)
    started = time.monotonic()
    result = invoke(
        "run",
        *TINY,
        "--kernels",
        "basic",
        "--cc",
        str(cc),
        "--max-minutes",
        "0.05",
        env={"SECTORBENCH_CACHE": str(tmp_path / "cache")},
    )
    assert result.code == 2 and time.monotonic() - started < 60, (result.stdout, result.stderr)
    assert "was stopped: the run's --max-minutes 0.05 ran out" in result.stderr
    assert "Traceback" not in result.stderr
    assert all(gone(int(pid)) for pid in pids.read_text().split())


def gone(pid: int, wait_s: float = 10.0) -> bool:
    """The process has exited (a zombie awaiting its reaper counts as exited)."""
    deadline = time.monotonic() + wait_s
    while time.monotonic() < deadline:
        try:
            state = Path(f"/proc/{pid}/stat").read_text().rsplit(")", 1)[1].split()[0]
        except (FileNotFoundError, ProcessLookupError):
            return True
        if state in ("Z", "X"):
            return True
        time.sleep(0.05)
    return False


@pytest.mark.parametrize("signum", [signal.SIGTERM, signal.SIGINT])
def test_a_signal_during_a_compile_kills_the_compiler_and_its_files(signum, tmp_path):
    pids = tmp_path / "pids"
    # appended: the units compile two at a time, and each compiler adds its child's pid
    cc = fake_compiler(tmp_path, f'sleep 300 & echo $! >> {pids}; touch "$TMPDIR/cc-temp"; wait')
    cache = tmp_path / "cache"
    process = subprocess.Popen(
        [sys.executable, "-m", "sectorbench", "kernels", "--cc", str(cc)],
        env={**os.environ, "SECTORBENCH_CACHE": str(cache)},
        stdout=subprocess.DEVNULL,
        stderr=subprocess.PIPE,
        text=True,
        # Ctrl-C as a terminal sends it: a suite started in the background by a shell inherits
        # SIGINT ignored (bash does that to background jobs), and Python keeps it ignored
        preexec_fn=terminal_dispositions,  # as a terminal sends them (see terminal_dispositions)
    )
    try:
        deadline = time.monotonic() + 120
        while not (pids.exists() and pids.read_text().strip()) and time.monotonic() < deadline:
            assert process.poll() is None, process.stderr.read()
            time.sleep(0.05)
        process.send_signal(signum)
        code = process.wait(timeout=60)
    finally:
        if process.poll() is None:
            process.kill()
    stderr = process.stderr.read()
    assert code == (143 if signum == signal.SIGTERM else 130), stderr
    assert "internal error" not in stderr
    assert all(gone(int(pid)) for pid in pids.read_text().split())
    assert not list(cache.glob("*.build"))


# ------------------------------------------------------------------ signals


def _run_until_measuring(tmp_path, preexec_fn=None, args=SLOW):
    """A real `run` in a process of its own, once its scene is saved: (process, its scratch dir)."""
    scratch = tmp_path / "tmp"
    scratch.mkdir()
    process = subprocess.Popen(
        [sys.executable, "-m", "sectorbench", "run", *args],
        env={**os.environ, "TMPDIR": str(scratch)},
        cwd=tmp_path,
        stdout=subprocess.DEVNULL,
        stderr=subprocess.PIPE,
        text=True,
        preexec_fn=preexec_fn,
    )
    deadline = time.monotonic() + 120
    while not list(scratch.glob("sectorbench-*/scene-*.npz")) and time.monotonic() < deadline:
        if process.poll() is not None:
            pytest.fail(process.stderr.read())
        time.sleep(0.05)
    time.sleep(0.5)
    return process, scratch


def _signalled(process, signum: int, timeout_s: float) -> int:
    """Send `signum` and wait for the process's exit status (killed if it outlasts timeout_s)."""
    try:
        process.send_signal(signum)
        return process.wait(timeout=timeout_s)
    finally:
        if process.poll() is None:
            process.kill()


def test_scratch_left_by_a_run_killed_with_sigkill_is_removed_by_the_next(tmp_path):
    """SIGKILL runs nothing of ours: a CI job's timeout left the run's scratch directory (its
    scenes; verify's ~20 case scenes) in TMPDIR for ever.  The next command removes those whose
    lock no process holds, and no other: a live one's, another user's, one without a lock."""
    import fcntl

    from sectorbench.interrupts import ABANDONED_AFTER_S, SCRATCH_LOCK

    process, scratch = _run_until_measuring(tmp_path)
    (killed,) = scratch.glob("sectorbench-*")
    assert _signalled(process, signal.SIGKILL, 30) == -signal.SIGKILL
    live = scratch / "sectorbench-live"
    live.mkdir()
    holder = os.open(live / SCRATCH_LOCK, os.O_CREAT | os.O_RDWR)
    fcntl.flock(holder, fcntl.LOCK_EX)
    unlocked = scratch / "sectorbench-of-an-older-version"
    unlocked.mkdir()
    long_ago = time.time() - 2 * ABANDONED_AFTER_S
    for folder in (killed, live, unlocked):
        os.utime(folder, (long_ago, long_ago))
    try:
        result = subprocess.run(
            [sys.executable, "-m", "sectorbench", "run", *TINY, "--kernels", "basic"],
            env={**os.environ, "TMPDIR": str(scratch)},
            cwd=tmp_path,
            capture_output=True,
            text=True,
            timeout=300,
        )
    finally:
        os.close(holder)
    assert result.returncode == 0, result.stderr
    assert sorted(path.name for path in scratch.iterdir()) == sorted([live.name, unlocked.name])


@pytest.mark.parametrize("signum", [signal.SIGINT, signal.SIGHUP, signal.SIGQUIT])
def test_ending_signals_clean_up_like_sigterm_in_one_line(signum, tmp_path):
    process, scratch = _run_until_measuring(tmp_path, terminal_dispositions)
    status = Path(f"/proc/{process.pid}/status").read_text() if sys.platform.startswith("linux") else ""
    dispositions = [line for line in status.splitlines() if line.startswith(("SigIgn", "SigCgt", "State"))]
    code = _signalled(process, signum, 60)
    stderr = process.stderr.read()
    assert code == 128 + signum, (stderr, dispositions)
    said = "interrupted" if signum == signal.SIGINT else f"terminated ({signal.Signals(signum).name})"
    assert stderr.splitlines()[-1] == f"sectorbench: {said}; scratch files removed", stderr
    assert "" not in stderr.splitlines() and "internal error" not in stderr  # click's Abort printed an empty line
    assert list(scratch.iterdir()) == []


def test_a_second_signal_that_arrives_with_the_first_is_no_traceback(tmp_path):
    """Two ending signals that arrive together (systemd's SIGTERM and SIGHUP, a CI runner's SIGINT
    to the group and its SIGTERM, `kill -INT` then `kill -TERM`): the first one's handler set the
    others to SIG_IGN while the second was already caught and waiting for Python to run its handler,
    and Python printed "OSError: Signal 15 ignored due to race condition" with a traceback above the
    exit line.  The run is stopped while both are sent, so both are waiting when it goes on."""

    def sigint_as_a_terminal_sends_it():  # a shell's background job inherits SIGINT ignored
        signal.signal(signal.SIGINT, signal.SIG_DFL)

    process, scratch = _run_until_measuring(tmp_path, sigint_as_a_terminal_sends_it)
    try:
        process.send_signal(signal.SIGSTOP)
        process.send_signal(signal.SIGINT)
        process.send_signal(signal.SIGTERM)
        process.send_signal(signal.SIGCONT)
        code = process.wait(timeout=60)
    finally:
        if process.poll() is None:
            process.kill()
    stderr = process.stderr.read()
    # both wait for Python together: it runs their handlers in signal-number order, SIGINT first
    assert (code, stderr.splitlines()[-1]) == (128 + signal.SIGINT, "sectorbench: interrupted; scratch files removed")
    assert "Traceback" not in stderr and "race condition" not in stderr, stderr
    assert list(scratch.iterdir()) == []


def _descendants(pid: int) -> list[int]:
    """Every process under `pid` (its fork server and workers), from /proc."""
    parents = {}
    for stat in Path("/proc").glob("[0-9]*/stat"):
        with contextlib.suppress(OSError, IndexError, ValueError):
            parents[int(stat.parent.name)] = int(stat.read_text().rsplit(")", 1)[1].split()[1])
    found, frontier = [], [pid]
    while frontier:
        children = [child for child, parent in parents.items() if parent in frontier]
        found += children
        frontier = children
    return found


def _signal_all(pids, signum) -> None:
    for pid in pids:
        with contextlib.suppress(ProcessLookupError):
            os.kill(pid, signum)


def test_a_run_frozen_with_its_workers_kills_no_healthy_kernel(tmp_path):
    """A CI runner's job suspended (a cgroup frozen: `docker pause`) stops the run and its workers
    together.  The run's wait for a reply had expired when both were thawed, so the worker, which
    had not been able to answer, was killed: a healthy kernel's row was `timed-out`, "no answer
    within 1 s (--kernel-timeout sets the floor)", its rounds lost.  Here the workers are stopped,
    then the run, for 3 s (three times the deadline); the run goes on first, its workers 0.5 s
    later, as a thaw may order them.  Twice, in case one lands between two requests."""
    out = tmp_path / "r.json"
    args = ["-n", "200", "-m", "20000", "--repeat", "60", "--min-time", "0.05", "--kernel-timeout", "1"]
    args += ["--flags", "-O2", "--kernels", "basic", "--json", str(out)]
    process = subprocess.Popen(
        [sys.executable, "-m", "sectorbench", "run", *args],
        cwd=tmp_path,
        stdout=subprocess.DEVNULL,
        stderr=subprocess.PIPE,
        text=True,
    )
    try:
        said = [process.stderr.readline()]
        while said[-1] and not said[-1].startswith("plan:"):
            said.append(process.stderr.readline())
        assert said[-1], said
        for _ in range(2):
            time.sleep(1.5)  # calibrated, in its rounds: almost always waiting for a sample
            workers = _descendants(process.pid)
            _signal_all(workers, signal.SIGSTOP)
            process.send_signal(signal.SIGSTOP)
            time.sleep(3)
            process.send_signal(signal.SIGCONT)
            time.sleep(0.5)
            _signal_all(workers, signal.SIGCONT)
        code = process.wait(timeout=300)
    finally:
        if process.poll() is None:
            process.kill()
    said += process.stderr.readlines()
    assert code == 0, said
    rows = json.loads(out.read_text())["results"]
    assert [(row["kernel"], row["status"], row["reason"]) for row in rows] == [("basic", "ok", None)]


#: A real `sectorbench --version` that sends itself `signum` as the command modules import (when
#: `sectorbench.measure.runner`, which only they import, starts): the first second of every command.
_SIGNAL_WHILE_IMPORTING = """
import os, sys
signum = int(sys.argv[1])
def hook(event, args):
    if event == "import" and args[0] == "sectorbench.measure.runner":
        os.kill(os.getpid(), signum)
sys.addaudithook(hook)
sys.argv[1:] = ["--version"]
from sectorbench.cli import main
main()
"""


@pytest.mark.parametrize("signum", [signal.SIGINT, signal.SIGTERM, signal.SIGHUP])
def test_a_signal_while_the_commands_import_is_one_line(signum, tmp_path):
    """Ctrl-C in the first second of a command, while numpy and the families import (3 s on this
    VM under load), printed a KeyboardInterrupt traceback of the import under way; SIGTERM and
    SIGHUP ended it without a word."""
    result = subprocess.run(
        [sys.executable, "-c", _SIGNAL_WHILE_IMPORTING, str(int(signum))],
        cwd=tmp_path,
        capture_output=True,
        text=True,
        timeout=120,
        preexec_fn=terminal_dispositions,  # as a terminal sends them (see terminal_dispositions)
    )
    said = "interrupted" if signum == signal.SIGINT else f"terminated ({signal.Signals(signum).name})"
    assert (result.returncode, result.stderr) == (128 + signum, f"sectorbench: {said}; scratch files removed\n")
    assert result.stdout == ""  # ended before the command ran


@pytest.mark.parametrize("signum", [signal.SIGINT, signal.SIGTERM, signal.SIGHUP])
def test_a_signal_while_the_process_exits_leaves_the_commands_exit_status(signum, tmp_path, saved_run):
    """Once a command's work is done (its last line, "saved e.json"), the process still closes
    its fork server and Python tears down its modules (~0.1 s): the signals' default actions were
    back then, so a Ctrl-C or a CI runner's SIGTERM there killed it (-SIGINT, -SIGTERM: "failed"
    after the file was saved).  The signal is sent again and again from the last line on, so some
    land in that time; one may land before it, while the command ends: then it says so, 128 + N."""
    out = tmp_path / "e.json"
    process = subprocess.Popen(
        [sys.executable, "-m", "sectorbench", "export", str(saved_run), "--format", "pyperf", "--out", str(out)],
        stdout=subprocess.DEVNULL,
        stderr=subprocess.PIPE,
        text=True,
        preexec_fn=terminal_dispositions,  # as a terminal sends them (see terminal_dispositions)
    )
    try:
        said = [process.stderr.readline()]
        assert said[0].startswith("saved "), said
        time.sleep(0.01)  # past the command's own handler, most likely
        while process.poll() is None:
            with contextlib.suppress(ProcessLookupError):
                process.send_signal(signum)
            time.sleep(0.002)
        said += process.stderr.readlines()
    finally:
        if process.poll() is None:
            process.kill()
    assert process.returncode >= 0, (process.returncode, said)  # it exited; no signal killed it
    if process.returncode != 0:
        ended = "interrupted" if signum == signal.SIGINT else f"terminated ({signal.Signals(signum).name})"
        assert (process.returncode, said[1:]) == (128 + signum, [f"sectorbench: {ended}; scratch files removed\n"])
    assert json.loads(out.read_text()) == _pyperf_of(saved_run)


#: A real `sectorbench export` whose output appears while it writes it (so its results go to a
#: rescue file), and which sends itself `signum` as the rescue file is being written.
_SIGNAL_WHILE_RESCUING = """
import os, sys
signum, out = int(sys.argv[1]), sys.argv[2]
state = []
def hook(event, args):
    if event != "open" or "fired" in state:
        return
    name = str(args[0])
    if os.path.basename(name).startswith(".e.json.") and not state:  # its temporary file
        state.append("appeared")
        with open(out, "w") as other:
            other.write("appeared")
    elif "rescued-results-" in name:
        state.append("armed")
    elif "armed" in state:  # the rescue file opened as a stream, to be written
        state.append("fired")
        os.kill(os.getpid(), signum)
sys.addaudithook(hook)
sys.argv[1:] = sys.argv[3:]
from sectorbench.cli import main
main()
"""


@pytest.mark.parametrize("signum", [signal.SIGINT, signal.SIGTERM])
def test_a_signal_while_a_rescue_file_is_written_leaves_none_half_written(signum, tmp_path, saved_run):
    """write_rescue removed its file when a write failed, not when a signal cut the write: an empty
    rescued-results-XXXX.json was left beside the output, a line that never named it."""
    out = tmp_path / "e.json"
    result = subprocess.run(
        [sys.executable, "-c", _SIGNAL_WHILE_RESCUING, str(int(signum)), str(out), "export", str(saved_run),
         "--format", "pyperf", "--out", str(out)],
        capture_output=True,
        text=True,
        timeout=120,
        preexec_fn=terminal_dispositions,  # as a terminal sends them (see terminal_dispositions)
    )  # fmt: skip
    said = "interrupted" if signum == signal.SIGINT else f"terminated ({signal.Signals(signum).name})"
    assert (result.returncode, result.stderr) == (128 + signum, f"sectorbench: {said}; scratch files removed\n")
    assert [p.name for p in tmp_path.iterdir()] == ["e.json"] and out.read_text() == "appeared"


def test_a_signal_the_caller_ignores_stays_ignored(tmp_path):
    """nohup sectorbench run ...: the SIGHUP of a closed terminal does not end it."""
    args = ["-n", "200", "-m", "100000", "--repeat", "5", "--flags", "-O2", "--kernels", "basic"]
    process, scratch = _run_until_measuring(tmp_path, lambda: signal.signal(signal.SIGHUP, signal.SIG_IGN), args)
    code = _signalled(process, signal.SIGHUP, 120)
    assert code == 0, process.stderr.read()
    assert list(scratch.iterdir()) == []


def test_a_signal_while_scratch_files_are_removed_acts_once_they_are_gone(tmp_path):
    """An interrupted rmtree left `run --against`'s scratch directory half deleted while the
    exit line said "scratch files removed": the removal is whole, the signal acts after it."""
    from sectorbench.interrupts import scratch_directory

    class Stop(Exception):
        pass

    def stop(signum, frame):
        raise Stop

    armed = []

    def signal_on_first_removal(event, args):  # an audit hook: the signal lands inside rmtree
        if event == "os.remove" and armed:
            armed.clear()
            os.kill(os.getpid(), signal.SIGTERM)

    sys.addaudithook(signal_on_first_removal)  # for the process's life: inert unless armed
    previous = signal.signal(signal.SIGTERM, stop)
    try:
        with pytest.raises(Stop):
            with scratch_directory("sectorbench-test-", tmp_path) as scratch:
                for i in range(20):
                    (scratch / f"d{i}").mkdir()
                    for j in range(20):
                        (scratch / f"d{i}" / str(j)).touch()
                armed.append(True)
        assert not armed and not scratch.exists()
    finally:
        signal.signal(signal.SIGTERM, previous)


# ------------------------------------------------------------------ results are never lost


def test_an_output_that_appears_during_the_run_leaves_it_and_rescues_the_results(tmp_path):
    out = tmp_path / "out.json"
    process = subprocess.Popen(
        [sys.executable, "-m", "sectorbench", "run", *SLOW, "--json", str(out)],
        cwd=tmp_path,
        stdout=subprocess.DEVNULL,
        stderr=subprocess.PIPE,
        text=True,
    )
    lines = []
    try:
        for line in process.stderr:
            lines.append(line)
            if line.startswith("plan:"):
                out.write_text("written by someone else meanwhile")
                break
        lines += process.stderr.readlines()
        code = process.wait(timeout=600)
    finally:
        if process.poll() is None:
            process.kill()
    assert out.read_text() == "written by someone else meanwhile", "".join(lines)
    assert code == 2, "".join(lines)
    last = lines[-1]
    assert last.startswith("sectorbench: error: ") and str(out) in last and "internal error" not in last
    rescue = Path(last.rsplit("the results are saved in ", 1)[1].strip())
    assert rescue.parent == tmp_path and rescue.name.startswith("rescued-results-")
    assert {r.kernel for r in load(rescue).results} == {"basic", "sse2"}


@contextlib.contextmanager
def _tmpfs(where: Path, size: str, options: str = ""):
    """A real tmpfs of `size` at `where` while the block runs (needs root, as this VM's tests run)."""
    where.mkdir()
    mounted = subprocess.run(
        ["mount", "-t", "tmpfs", "-o", f"size={size}{options}", "tmpfs", str(where)], capture_output=True
    )
    if mounted.returncode != 0:
        pytest.skip(f"cannot mount a tmpfs here: {mounted.stderr.decode().strip()}")
    try:
        yield where
    finally:
        deadline = time.monotonic() + 30  # killed compilers' last processes may be ending still
        while subprocess.run(["umount", str(where)], capture_output=True).returncode != 0:
            assert time.monotonic() < deadline, "the tmpfs stayed busy"
            time.sleep(0.1)


@pytest.fixture
def full_disk(tmp_path):
    """A 64 KiB tmpfs, full: not even a small file fits."""
    with _tmpfs(tmp_path / "full", "64k") as where:
        filler = where / "filler"
        with open(filler, "wb", buffering=0) as stream:  # unbuffered: closing it has nothing left to fail on
            try:
                for _ in range(64):  # 64 KiB in pages, and more than that: to the last page
                    stream.write(bytes(4096))
            except OSError:
                pass
        yield where


def test_a_full_disk_after_measuring_rescues_the_results(full_disk, tmp_path):
    scratch = tmp_path / "tmp"
    scratch.mkdir()
    out = full_disk / "out.json"
    result = sectorbench("run", *TINY, "--kernels", "basic,sse2", "--json", out, env={"TMPDIR": scratch})
    line = result.stderr.strip().splitlines()[-1]  # after the plan and notes of the measuring
    assert result.code == 2 and line.startswith("sectorbench: error: "), result.stderr
    assert str(out) in line and "No space left on device" in line
    rescue = Path(line.rsplit("the results are saved in ", 1)[1].strip())
    assert rescue.parent == scratch  # the output's directory was full too
    assert {r.kernel for r in load(rescue).results} == {"basic", "sse2"}
    assert not out.exists() and [p.name for p in full_disk.iterdir()] == ["filler"]


def test_a_build_on_a_nearly_full_disk_says_so(tmp_path):
    """The compilers' messages go to logs in the build's private directory, on the same full
    disk: the error was "compiling with '-O0' failed:" and nothing more."""
    with _tmpfs(tmp_path / "small", "1m") as where:
        (where / "filler").write_bytes(bytes(800 << 10))
        with pytest.raises(BuildError) as failed:
            build(BuildConfig.parse("-O0"), where / "cache")
    message = str(failed.value)
    assert "free: is it full?" in message or "No space left on device" in message, message


def test_a_full_cache_is_one_line_naming_it(full_disk):
    """The first file a build writes in the cache (a unit's C file) does not fit: the line was
    "sectorbench: error: No space left on device", naming neither the file nor the cache."""
    cache = full_disk / "cache"
    line = one_line(sectorbench("kernels", "--flags", "-O1", env={"SECTORBENCH_CACHE": cache}))
    assert f"build cache {cache} is unusable (No space left on device)" in line and "SECTORBENCH_CACHE" in line
    assert not list(cache.glob("*.build"))  # the private build directory went with the build


@pytest.mark.parametrize("command", [("run", *TINY), ("query", "-n", "10", "-m", "100", "--out", "hits.npz")])
def test_a_cache_on_a_noexec_filesystem_is_one_line_before_the_build(command, tmp_path):
    """A CI runner's cache on a noexec mount: the library was built (15 s), then dlopen refused
    it and the worker said "No usable temporary directory found" (cffi's fallback, under the
    worker's write sandbox), and query said "internal error: OSError"."""
    with _tmpfs(tmp_path / "noexec", "64m", ",noexec") as where:
        cache = where / "cache"
        line = one_line(sectorbench(*command, cwd=tmp_path, env={"SECTORBENCH_CACHE": cache}))
        assert f"build cache {cache} is unusable" in line and "noexec" in line and "SECTORBENCH_CACHE" in line
        assert not list(cache.glob("*.so")) and not list(cache.glob("*.build"))  # refused before compiling


def test_a_tmpdir_too_full_for_verifys_scenes_stops_it_before_its_builds(tmp_path):
    """verify wrote its first batch's scene after its builds and loop checks: a TMPDIR with room
    for Python's own check of it (tempfile takes it) and not for the scene failed in one line,
    15 s later here, after the build.  It is written once first now, as run writes its scene."""
    cache = tmp_path / "cache"
    with _tmpfs(tmp_path / "small", "1m") as where:
        (where / "filler").write_bytes(bytes(900 << 10))
        line = one_line(sectorbench("verify", "--kernels", "basic", env={"TMPDIR": where, "SECTORBENCH_CACHE": cache}))
        assert [p.name for p in where.iterdir()] == ["filler"]  # its scratch directory removed
    assert "No space left on device (TMPDIR chooses that folder)" in line and str(where) in line
    assert not list(cache.glob("sectorbench-*.so"))  # before the build


def test_an_object_that_does_not_fit_in_the_cache_leaves_no_partial_copy(tmp_path):
    """A build whose objects could not be copied into a full objects/ (the object cache only saves
    time: it links the fresh ones) left each copy, cut short, as objects/.NAME.o.PID.partial on
    the full disk; nothing removed them, not even the stale-file sweep, which looked only in the
    cache's top folder (one left there by a killed build is removed as it is there)."""
    cache = tmp_path / "cache"
    cache.mkdir()
    with _tmpfs(cache / "objects", "64k") as objects:
        stale = objects / ".harness-0.o.1.partial"  # a killed build's, STALE_BUILD_S ago
        stale.touch()
        os.utime(stale, (time.time() - build_module.STALE_BUILD_S - 60,) * 2)
        (objects / "filler").write_bytes(bytes(40 << 10))
        library = build(BuildConfig.parse("-O1"), cache)
        left = sorted(p.name for p in objects.glob("*.partial"))
    assert library.exists() and left == [], left


def test_a_link_on_a_nearly_full_disk_says_so(tmp_path):
    """The objects in the cache, the library not fitting beside them: ld's message went to its
    log on the full disk and was lost, and once ld had removed its output collect2's last line
    fitted, so the error was "compiling with '-O1' failed: collect2: error: ld returned 1 exit
    status", not a word of the disk."""
    roomy = tmp_path / "roomy"
    build(BuildConfig.parse("-O1"), roomy)
    with _tmpfs(tmp_path / "small", "1m") as where:
        cache = where / "cache"
        shutil.copytree(roomy / "objects", cache / "objects")  # the objects fit; the library does not
        (where / "filler").write_bytes(bytes(max(0, shutil.disk_usage(where).free - (100 << 10))))
        with pytest.raises(BuildError) as failed:
            build(BuildConfig.parse("-O1"), cache)
    assert "free: is it full?" in build_module.failure_line(str(failed.value)), str(failed.value)


@pytest.fixture(scope="module")
def saved_run(tmp_path_factory):
    """A small run's results, for the commands that work on saved results."""
    path = tmp_path_factory.mktemp("saved") / "run.json"
    result = sectorbench("run", *TINY, "--kernels", "basic", "--json", path)
    assert result.code == 0, result.stderr
    return path


def _pyperf_of(saved):
    from sectorbench.compare.export import render

    return json.loads(render(load(saved), "pyperf"))


@pytest.mark.parametrize(
    ("name", "args", "rescued"),
    [
        pytest.param(
            "v.json",
            ["verify", "--cases", "100", "--kernels", "basic", "--json", "{out}"],
            lambda rescue, saved: [k["kernel"] for k in json.loads(rescue.read_text())["kernels"]] == ["basic"],
            id="verify --json",
        ),
        pytest.param(  # the run's results are rescued, from which `export` makes the file again
            "p.json",
            ["run", *TINY, "--kernels", "basic,sse2", "--json", "{roomy}/r.json", "--export", "pyperf={out}"],
            lambda rescue, saved: {r.kernel for r in load(rescue).results} == {"basic", "sse2"},
            id="run --export",
        ),
        pytest.param(
            "q.npz",
            ["query", "-n", "10", "-m", "1000", "--out", "{out}"],
            lambda rescue, saved: set(np.load(rescue)) == {"offsets", "indices", "counts", "meta"},
            id="query --out",
        ),
        pytest.param(
            "e.json",
            ["export", "{saved}", "--format", "pyperf", "--out", "{out}"],
            lambda rescue, saved: json.loads(rescue.read_text()) == _pyperf_of(saved),
            id="export --out",
        ),
        pytest.param(
            "m.md",
            ["regress", "{saved}", "{saved}", "--markdown", "{out}"],
            lambda rescue, saved: "| basic |" in rescue.read_text(),
            id="regress --markdown",
        ),
        pytest.param(
            "c.png",
            ["plot", "{saved}", "--out", "{out}"],
            lambda rescue, saved: rescue.read_bytes().startswith(b"\x89PNG"),
            id="plot --out",
        ),
    ],
)
def test_a_full_disk_rescues_every_output(full_disk, tmp_path, saved_run, name, args, rescued):
    """Whichever output fails after the work, the one line names it and a rescue copy of what
    was computed; an output written before it stays."""
    scratch, roomy = tmp_path / "tmp", tmp_path / "roomy"
    scratch.mkdir()
    roomy.mkdir()
    out = full_disk / name
    result = sectorbench(*(a.format(out=out, saved=saved_run, roomy=roomy) for a in args), env={"TMPDIR": scratch})
    line = result.stderr.strip().splitlines()[-1]
    assert result.code == 2 and line.startswith("sectorbench: error: "), result.stderr
    assert f"{out}: cannot write (No space left on device)" in line
    rescue = Path(line.rsplit("the results are saved in ", 1)[1].strip())
    assert rescue.parent == scratch and rescue.name.startswith("rescued-results-")  # the output's directory is full
    assert rescue.suffix == out.suffix
    assert rescued(rescue, saved_run)
    assert [p.name for p in full_disk.iterdir()] == ["filler"]
    for kept in roomy.iterdir():
        assert load(kept).results == load(rescue).results


def test_no_internal_error_anywhere_in_this_file():
    assert INTERNAL_ERRORS == []


def test_the_kernel_names_of_a_build_are_kept_beside_its_library_and_a_damaged_list_is_redone(tmp_path, monkeypatch):
    """The name check reads LIBRARY.kernels.json when the build's key (sources, flags, compiler)
    matches, instead of preprocessing every file again; a damaged list is preprocessed again."""
    monkeypatch.setenv("SECTORBENCH_CACHE", str(tmp_path))
    config = BuildConfig.parse("-O1")
    saved = build_module.library_path(config).with_suffix(".kernels.json")
    build_module.kernel_index.cache_clear()
    first = build_module.kernel_index(config)
    assert first and "naive" in first and json.loads(saved.read_text()) == first
    saved.write_text(json.dumps({**first, "planted": "sector"}))  # what is kept is what is read
    build_module.kernel_index.cache_clear()
    assert build_module.kernel_index(config)["planted"] == "sector"
    saved.write_text('{"naive": 1')
    build_module.kernel_index.cache_clear()
    assert build_module.kernel_index(config) == first and json.loads(saved.read_text()) == first
    build_module.kernel_index.cache_clear()


def test_an_output_swapped_for_a_link_to_an_input_while_the_command_ran_is_not_written_through(tmp_path):
    """check_outputs refuses an output that is an input before the work; the output may become
    one while the command runs (a symbolic link put in its place): the write refuses it too,
    and what would have been written is rescued, the input untouched."""
    from sectorbench.model.results import WriteFailed, guard_command_files, write_text_atomic

    source, out = tmp_path / "kernel.c", tmp_path / "out.json"
    source.write_text("/* the user's kernel */\n")
    out.write_text("{}")
    guard_command_files([source])
    try:
        out.unlink()
        out.symlink_to(source)  # meanwhile
        with pytest.raises(WriteFailed, match="is now the same file as the input"):
            write_text_atomic(out, '{"results": []}\n', overwrite=True)
    finally:
        guard_command_files(())
    assert source.read_text() == "/* the user's kernel */\n"
    assert sorted(p.name for p in tmp_path.iterdir()) == ["kernel.c", "out.json"]  # no partial file left


@pytest.mark.parametrize("existed", [True, False])
def test_a_forced_output_swapped_for_a_link_elsewhere_while_the_command_ran_is_not_written_through(tmp_path, existed):
    """--force replaces the output the command was named; a link put in its place meanwhile
    leads to a file it was not named (no input of it either): refused and rescued, that file
    untouched.  A link there from the start is written through, as documented."""
    from sectorbench.model.results import WriteFailed, guard_command_files, write_text_atomic

    precious, out = tmp_path / "precious.txt", tmp_path / "out.json"
    precious.write_text("keep me\n")
    if existed:
        out.write_text("{}")
    guard_command_files((), [out])
    try:
        out.unlink(missing_ok=True)
        out.symlink_to(precious)  # meanwhile
        with pytest.raises(WriteFailed, match="not to .*out.json as when the command began"):
            write_text_atomic(out, '{"results": []}\n', overwrite=True)
        out.unlink()
        linked = tmp_path / "linked.json"
        linked.write_text("{}")
        out.symlink_to(linked)
        guard_command_files((), [out])  # the link was there when the command began
        write_text_atomic(out, '{"results": []}\n', overwrite=True)
    finally:
        guard_command_files(())
    assert precious.read_text() == "keep me\n"
    assert linked.read_text() == '{"results": []}\n'
    assert sorted(p.name for p in tmp_path.iterdir()) == ["linked.json", "out.json", "precious.txt"]


def test_an_empty_cc_is_the_default_compiler(tmp_path):
    """`CC= make test` failed in setup: "compiler '' not found (set --cc or $CC)"; an empty CC is
    unset, as make and the compilers' own drivers take it."""
    env = {**os.environ, "CC": ""}
    listed = subprocess.run(
        [sys.executable, "-m", "sectorbench", "kernels", "--flags", "-O2"],
        capture_output=True,
        text=True,
        env=env,
        timeout=600,
        cwd=tmp_path,
    )
    assert listed.returncode == 0, listed.stderr
    assert "naive" in listed.stdout
