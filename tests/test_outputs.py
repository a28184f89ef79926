"""Nothing a user saved is lost: output paths are checked before any work, only regular files
are ever replaced, modes are kept, and SIGTERM cleans up like Ctrl-C.  Real files, a real FIFO,
/dev/null, a real subprocess and signal."""

from __future__ import annotations

import json
import os
import signal
import stat
import subprocess
import sys
import time
from pathlib import Path

import pytest
from click.testing import CliRunner

from sectorbench.cli import main
from sectorbench.errors import SectorbenchError
from sectorbench.model.results import SCHEMA_VERSION, check_output, save_new, write_text_atomic
from sectorbench.native.build import DEFAULT_CC

SMALL = ["-n", "20", "-m", "500", "--repeat", "2", "--min-time", "0.001", "--flags", "-O2", "--kernels", "basic"]


def invoke(*args, env=None):
    return CliRunner().invoke(main, [str(a) for a in args], env=env)


def one_line_error(result, *fragments):
    assert result.exit_code == 2, (result.stdout, result.stderr)
    lines = result.stderr.strip().splitlines()
    assert len(lines) == 1 and "Traceback" not in result.stderr, result.stderr
    for fragment in fragments:
        assert fragment in lines[0], lines[0]
    return lines[0]


@pytest.fixture
def empty_cache(tmp_path, monkeypatch):
    """A build cache that holds nothing compiled unless something is (see built)."""
    cache = tmp_path / "cache"
    cache.mkdir()
    monkeypatch.setenv("SECTORBENCH_CACHE", str(cache))
    return cache


def built(cache: Path) -> list[str]:
    """What a build left in `cache`: not the kernel lists a run reads by preprocessing its
    sources (LIBRARY.kernels.json, before any build, to refuse a misspelt --kernels), which a
    process writes only once (kernel_index is cached in it): a test alone met them."""
    return sorted(p.name for p in cache.iterdir() if not p.name.endswith(".kernels.json"))


def test_force_never_replaces_a_fifo(tmp_path, empty_cache):
    fifo = tmp_path / "pipe.json"
    os.mkfifo(fifo)
    one_line_error(invoke("run", *SMALL, "--json", fifo, "--force"), "is a FIFO", "only regular files")
    assert stat.S_ISFIFO(os.lstat(fifo).st_mode)
    assert not built(empty_cache), "refused before anything was built"


def test_force_never_replaces_dev_null():
    before = os.stat("/dev/null")
    one_line_error(invoke("run", *SMALL, "--json", "/dev/null", "--force"), "character device")
    one_line_error(invoke("verify", "--json", "/dev/null", "--force"), "character device")
    after = os.stat("/dev/null")
    assert stat.S_ISCHR(after.st_mode) and after.st_rdev == before.st_rdev and after.st_ino == before.st_ino


def test_a_directory_is_never_an_output(tmp_path):
    directory = tmp_path / "out.json"
    directory.mkdir()
    with pytest.raises(SectorbenchError, match="is a directory"):
        check_output(directory, overwrite=True)
    assert invoke("run", *SMALL, "--json", directory, "--force").exit_code == 2
    assert invoke("plot", "--out", directory, "--force", "--kernel", "basic").exit_code == 2
    assert directory.is_dir() and not any(directory.iterdir())


@pytest.mark.parametrize(
    "where, fragment",
    [
        ("file.txt/out.json", "file.txt is a file, not a directory"),
        ("no/such/dir/out.json", "does not exist"),
        ("/proc/x.json", "cannot create files in /proc"),
    ],
)
def test_an_output_that_cannot_be_written_is_refused_before_building(tmp_path, empty_cache, where, fragment):
    (tmp_path / "file.txt").write_text("precious")
    path = where if where.startswith("/") else tmp_path / where
    one_line_error(invoke("run", *SMALL, "--json", path), fragment)
    one_line_error(invoke("run", *SMALL, "--baseline", __file__, "--markdown", path), fragment)
    one_line_error(invoke("compare", *SMALL, "--json", path), fragment)
    one_line_error(invoke("verify", "--json", path), fragment)
    assert not built(empty_cache), "refused before anything was built"
    assert (tmp_path / "file.txt").read_text() == "precious"


def test_save_is_checked_before_building(tmp_path, empty_cache, monkeypatch):
    monkeypatch.chdir(tmp_path)
    Path("results").write_text("not a directory")
    one_line_error(invoke("run", *SMALL, "--save"), "--save", "results is a file, not a directory")
    one_line_error(invoke("compare", *SMALL, "--save"), "results is a file")
    assert not built(empty_cache)


def test_the_same_file_twice_is_refused(tmp_path, empty_cache):
    out = tmp_path / "x.json"
    one_line_error(invoke("run", *SMALL, "--json", out, "--baseline", __file__, "--markdown", out), "same file")


def test_the_same_file_twice_through_a_linked_folder_is_refused(tmp_path, empty_cache):
    """`here/o.json` with here -> . is o.json: with --force the export had replaced the JSON."""
    (tmp_path / "here").symlink_to(".")
    out, alias = tmp_path / "o.json", tmp_path / "here" / "o.json"
    one_line_error(invoke("run", *SMALL, "--json", out, "--export", f"pyperf={alias}"), "same file")
    out.write_text("precious")
    one_line_error(invoke("run", *SMALL, "--json", out, "--export", f"pyperf={alias}", "--force"), "same file")
    one_line_error(invoke("compare", *SMALL, "--json", alias, "--export", f"bmf={out}", "--force"), "same file")
    assert not built(empty_cache), "refused before anything was built"
    assert out.read_text() == "precious"


def test_a_file_bound_at_the_output_is_refused_before_building(tmp_path, empty_cache):
    """A single file bound at the output path (docker -v out.json:/work/out.json): the rename
    onto it failed with EBUSY only after the run, its results rescued where the binding was."""
    elsewhere, out = tmp_path / "host.json", tmp_path / "with space" / "out.json"
    out.parent.mkdir()
    elsewhere.write_text("precious")
    out.write_text("")
    bound = subprocess.run(["mount", "--bind", str(elsewhere), str(out)], capture_output=True)
    if bound.returncode != 0:
        pytest.skip(f"cannot bind a file here: {bound.stderr.decode().strip()}")
    try:
        one_line_error(invoke("run", *SMALL, "--json", out, "--force"), "is a mount point", "bind its directory")
        one_line_error(invoke("verify", "--json", out), "is a mount point")
    finally:
        subprocess.run(["umount", str(out)], check=True)
    assert not built(empty_cache), "refused before anything was built"
    assert elsewhere.read_text() == "precious"


@pytest.mark.skipif(os.geteuid() != 0, reason="takes another user's identity for a moment (seteuid)")
def test_another_users_file_in_a_sticky_directory_is_refused_before_the_work():
    """/tmp/out.json of another user: --force passed the checks, and the rename after the work
    failed (EPERM), the results rescued.  Checked as a user other than the file's (seteuid)."""
    import tempfile

    sticky = Path(tempfile.mkdtemp(prefix="sectorbench-sticky-", dir="/tmp"))
    try:
        sticky.chmod(0o1777)
        theirs = sticky / "out.json"
        theirs.write_text("theirs")
        theirs.chmod(0o666)
        mine = sticky / "mine.json"
        os.seteuid(65534)  # nobody: neither the file's owner nor the directory's
        try:
            with pytest.raises(PermissionError):  # what the write's rename meets
                os.replace(write_text_atomic(mine, "new"), theirs)
            with pytest.raises(SectorbenchError, match="belongs to another user, in a sticky directory"):
                check_output(theirs, overwrite=True)
            assert check_output(mine, overwrite=True) == mine  # its own file is replaced as ever
        finally:
            os.seteuid(0)
        assert theirs.read_text() == "theirs"
    finally:
        for path in sticky.iterdir():
            path.unlink()
        sticky.rmdir()


@pytest.mark.skipif(os.geteuid() != 0, reason="makes a symbolic link of another user's (lchown): root only")
def test_another_users_link_in_a_sticky_directory_is_never_written_through(tmp_path, empty_cache):
    """A link another user planted in /tmp: root's `run --json /tmp/out.json` wrote its results
    where the link led (a file that was not there, or with --force /root/.profile), as Linux's
    fs.protected_symlinks would not have let it: sectorbench resolves an output's links itself.
    Refused before the work, a link that is the last part of the path or a folder on it; one's
    own link there, or the directory owner's, is written through as ever."""
    import tempfile

    sticky = Path(tempfile.mkdtemp(prefix="sectorbench-sticky-", dir="/tmp"))
    try:
        sticky.chmod(0o1777)
        chosen = tmp_path / "chosen.json"  # where the other user wants root to write
        planted, planted_folder = sticky / "out.json", sticky / "results"
        planted.symlink_to(chosen)
        planted_folder.symlink_to(tmp_path)
        for link in (planted, planted_folder):
            os.lchown(link, 65534, 65534)  # nobody's: neither root (the writer) nor the directory's owner
        for out in (planted, planted_folder / "chosen.json"):
            line = one_line_error(invoke("run", *SMALL, "--json", out), "another user's symbolic link", str(sticky))
            assert "choose another path" in line
            with pytest.raises(SectorbenchError, match="another user's symbolic link"):
                check_output(out, overwrite=True)
        assert not chosen.exists() and not built(empty_cache), "refused before anything was built"
        mine = sticky / "mine.json"
        mine.symlink_to(chosen)
        assert check_output(mine, overwrite=False) == chosen  # root's own link (the directory's owner too)
    finally:
        for path in sticky.iterdir():
            path.unlink()
        sticky.rmdir()


def test_a_header_a_source_includes_is_never_an_output(tmp_path, empty_cache):
    """`--source k.c --json k.h --force` (a completion's slip) replaced the header k.c includes
    with the results: it is an input of the command as k.c is, however the output names it."""
    header, source = tmp_path / "k.h", tmp_path / "k.c"
    header.write_text(
        "static inline int mine(float cx, float cy, float ux, float uy, float r2, float k, float px, float py) {\n"
        "    const float dx = px - cx, dy = py - cy, s = dx * dx + dy * dy;\n"
        "    return s < r2 && dx * ux + dy * uy > sqrtf(s) * k;\n}\n"
    )
    source.write_text(
        '#include "sb_common.h"\n#include "k.h"\n'
        'SB_KERNEL(mine, SCALAR, 1, (cx, cy, ux, uy, r2, cos_theta), .family = "sector", .summary = "mine");\n'
    )
    (tmp_path / "link.h").symlink_to(header)
    before = header.read_text()
    kernels = ["--kernels", "mine", "--source", source]
    one_line_error(invoke("run", *SMALL[:-2], *kernels, "--json", header, "--force"), "a file --source", "includes")
    one_line_error(invoke("compare", *SMALL[:-2], *kernels, "--export", f"bmf={tmp_path / 'link.h'}", "--force"), "k.h")
    one_line_error(invoke("verify", *kernels, "--json", header, "--force"), "a file --source", "includes")
    assert not built(empty_cache), "refused before anything was built"
    assert header.read_text() == before


def test_replacing_keeps_the_mode_and_new_files_follow_the_umask(tmp_path):
    kept = tmp_path / "kept.json"
    kept.write_text("old")
    os.chmod(kept, 0o640)
    write_text_atomic(kept, "new", overwrite=True)
    assert kept.read_text() == "new" and stat.S_IMODE(os.stat(kept).st_mode) == 0o640
    for mask, mode in ((0o022, 0o644), (0o077, 0o600), (0o002, 0o664)):
        previous = os.umask(mask)
        try:
            path = write_text_atomic(tmp_path / f"new-{mask:o}.json", "x")
        finally:
            os.umask(previous)
        assert stat.S_IMODE(os.stat(path).st_mode) == mode
    assert sorted(p.name for p in tmp_path.iterdir()) == ["kept.json", "new-2.json", "new-22.json", "new-77.json"]


def test_a_symbolic_link_is_written_through(tmp_path):
    target = tmp_path / "real.json"
    target.write_text("old")
    link = tmp_path / "link.json"
    link.symlink_to(target)
    write_text_atomic(link, "new", overwrite=True)
    assert link.is_symlink() and target.read_text() == "new"


def test_save_new_never_replaces_a_saved_run(tmp_path):
    from sectorbench.model.results import RunResult

    result = RunResult(scene={}, env={}, config={}, results=[])
    first, second = save_new(result, tmp_path), save_new(result, tmp_path)
    assert first != second and first.exists() and second.exists()
    assert json.loads(second.read_text())["schema"] == result.schema


def test_incompatible_baseline_is_refused_before_building(tmp_path, empty_cache):
    baseline = tmp_path / "baseline.json"
    data = {
        "schema": SCHEMA_VERSION,
        "scene": {"kind": "uniform", "family": "sector", "seed": 7, "sectors": 20, "points": 500},
    }
    row = {"kernel": "basic", "family": "sector", "flags": "-O2", "cc": "cc", "mode": "inline", "status": "ok"}
    row["samples_s"] = [1e-3, 1.1e-3]
    baseline.write_text(json.dumps({**data, "env": {}, "config": {}, "results": [row]}))
    one_line_error(invoke("run", *SMALL, "--baseline", baseline), "different scene", "seed 7")
    assert not built(empty_cache)


def test_baseline_missing_a_kernel_is_refused_before_timing(tmp_path):
    """Known only once the build lists its kernels; refused before the plan line that precedes timing."""
    row = {"kernel": "sse2", "family": "sector", "flags": "-O2", "cc": "cc", "mode": "inline", "status": "ok"}
    row["samples_s"] = [1e-3, 1.1e-3, 1.05e-3, 0.98e-3, 1.02e-3]  # enough rounds for the gate to reach alpha
    scene = {"kind": "uniform", "family": "sector", "seed": 0, "sectors": 1000, "points": 100000}
    baseline = tmp_path / "baseline.json"
    baseline.write_text(
        json.dumps({"schema": SCHEMA_VERSION, "scene": scene, "env": {}, "config": {}, "results": [row]})
    )
    started = time.monotonic()
    result = invoke("run", "--flags", "-O2", "--cc", "cc", "--kernels", "basic", "--baseline", baseline)
    one_line_error(result, "missing kernel sse2", "this run does not select it")
    assert "plan:" not in result.stderr
    assert time.monotonic() - started < 60  # measuring this scene would take longer


#: Another compiler than the default one ($CC, else cc), for a baseline built by the default.
OTHER_CC = "gcc" if DEFAULT_CC != "gcc" else "cc"


@pytest.mark.parametrize(
    ("options", "label", "builds"),
    [
        (
            ["--flags", "-O3"],
            "basic [-O2, inline]",
            f"BASELINE was built with {DEFAULT_CC} -O2, this run builds {DEFAULT_CC} -O3",
        ),
        (
            ["--flags", "-O2", "--cc", OTHER_CC],
            f"basic [{DEFAULT_CC} -O2, inline]",
            f"built with {DEFAULT_CC} -O2, this run builds {OTHER_CC} -O2",
        ),
        (["--flags", "-O2", "--mode", "call"], "basic [-O2, inline]", None),
        (["--flags", "-O2", "--threads", "2"], "basic [-O2, inline]", None),
    ],
)
def test_a_baseline_of_other_builds_modes_or_threads_is_refused_before_building(
    tmp_path, empty_cache, options, label, builds
):
    """The baseline's builds, modes and thread counts are known before any build: a run that
    selects none of its rows' is refused then, not after compiling (seconds to minutes); where
    the build differs, the line names both (a gcc baseline gated with --cc clang-19 was told
    only "see its --cc"). The baseline was built by the default compiler, whose name a label omits."""
    row = {"kernel": "basic", "family": "sector", "flags": "-O2", "cc": DEFAULT_CC, "mode": "inline", "status": "ok"}
    row["samples_s"] = [1e-3, 1.1e-3, 1.05e-3, 0.98e-3, 1.02e-3]
    scene = {"kind": "uniform", "family": "sector", "seed": 0, "sectors": 20, "points": 500}
    baseline = tmp_path / "baseline.json"
    baseline.write_text(
        json.dumps({"schema": SCHEMA_VERSION, "scene": scene, "env": {}, "config": {}, "results": [row]})
    )
    scene_and_rounds = ["-n", "20", "-m", "500", "--repeat", "5", "--min-time", "0.001"]
    result = invoke("run", *scene_and_rounds, *options, "--kernels", "basic", "--baseline", baseline)
    line = one_line_error(result, f"missing kernel {label}", "this run does not select it", "--cc, --flags")
    assert (builds in line) if builds else ("was built with" not in line), line
    assert not built(empty_cache)


def test_sigterm_removes_the_scratch_directory(tmp_path):
    scratch = tmp_path / "tmp"
    scratch.mkdir()
    env = {**os.environ, "TMPDIR": str(scratch)}
    process = subprocess.Popen(
        [sys.executable, "-m", "sectorbench", "run", "-n", "1000", "-m", "100000", "--flags", "-O2"],
        env=env,
        cwd=tmp_path,
        stdout=subprocess.DEVNULL,
        stderr=subprocess.PIPE,
        text=True,
    )
    try:
        deadline = time.monotonic() + 120
        while not list(scratch.glob("sectorbench-*/scene-*.npz")) and time.monotonic() < deadline:
            assert process.poll() is None, process.stderr.read()
            time.sleep(0.05)
        assert list(scratch.glob("sectorbench-*")), "the run never made its scratch directory"
        time.sleep(0.5)  # into the build or the measurement
        process.send_signal(signal.SIGTERM)
        code = process.wait(timeout=60)
    finally:
        if process.poll() is None:
            process.kill()
    assert code == 143, process.stderr.read()
    assert "terminated" in process.stderr.read()
    assert list(scratch.iterdir()) == []


def test_results_of_schema_1_still_load(tmp_path):
    """results.py documents that version 1 files load; a baseline from before schema 2 must not be lost."""
    from sectorbench.model.results import load

    old = tmp_path / "old.json"
    row = {"kernel": "basic", "family": "sector", "flags": "-O2", "cc": "cc", "mode": "inline", "status": "ok"}
    old.write_text(json.dumps({"schema": 1, "scene": {}, "env": {}, "config": {}, "results": [row]}))
    loaded = load(old)
    assert loaded.schema == 1 and loaded.results[0].threads == 1
    (tmp_path / "future.json").write_text(json.dumps({"schema": 99, "results": []}))
    with pytest.raises(SectorbenchError, match="reads schemas 1, 2"):
        load(tmp_path / "future.json")


def test_an_interrupted_write_leaves_no_folder_it_created(tmp_path):
    """An interrupted --save had left an empty results/: the folder a write creates goes with
    the half-written file; one that was there, or holds something else, stays."""
    from sectorbench.model.results import write_atomic

    def interrupted(stream):
        stream.write(b"{")
        raise KeyboardInterrupt

    with pytest.raises(KeyboardInterrupt):
        write_atomic(tmp_path / "results" / "run.json", interrupted)
    assert not (tmp_path / "results").exists()
    (tmp_path / "kept").mkdir()
    with pytest.raises(KeyboardInterrupt):
        write_atomic(tmp_path / "kept" / "run.json", interrupted)
    assert (tmp_path / "kept").is_dir() and list((tmp_path / "kept").iterdir()) == []


def test_an_outputs_temporary_file_left_by_sigkill_is_removed_by_its_next_write(tmp_path):
    """SIGKILL while an output was written (a CI job's timeout during `query --out`: 370 MB)
    left its temporary file beside it for ever.  The next write of that output removes those no
    process holds, and no file of the user's, however it is named."""
    from sectorbench.interrupts import ABANDONED_AFTER_S
    from sectorbench.model.results import write_text_atomic

    out = tmp_path / "out.json"
    writes_for_ever = (
        "import sys, time\n"
        "from pathlib import Path\n"
        "from sectorbench.model import results\n"
        "def write(stream):\n"
        "    stream.write(b'half'); stream.flush(); print('writing', flush=True); time.sleep(600)\n"
        "results._write_atomic(Path(sys.argv[1]), write, True)\n"
    )
    writer = subprocess.Popen([sys.executable, "-c", writes_for_ever, str(out)], stdout=subprocess.PIPE, text=True)
    try:
        assert writer.stdout.readline().strip() == "writing"
        os.kill(writer.pid, signal.SIGKILL)
        writer.wait(timeout=30)
    finally:
        if writer.poll() is None:
            writer.kill()
    (left,) = [path for path in tmp_path.iterdir() if path.name != "out.json"]
    mine = tmp_path / ".out.json.20261128.sectorbench-partial.keep"
    mine.write_text("the user's")
    long_ago = time.time() - 2 * ABANDONED_AFTER_S
    for path in (left, mine):
        os.utime(path, (long_ago, long_ago))
    write_text_atomic(out, "whole", overwrite=True)
    assert sorted(path.name for path in tmp_path.iterdir()) == sorted([mine.name, "out.json"])
    assert out.read_text() == "whole"
