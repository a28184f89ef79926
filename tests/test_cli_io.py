"""The command line's inputs and outputs at their edges: a stdout that fails, oversized or
repeated inputs, aliases of standard streams as outputs, one-line messages."""

from __future__ import annotations

import json
import os
import shutil
import subprocess
import sys
import uuid
from pathlib import Path

import pytest
from click.testing import CliRunner

from sectorbench.cli import main

TINY = ["-n", "20", "-m", "500", "--repeat", "2", "--min-time", "0.001", "--flags", "-O2"]


def sectorbench(*args, cwd=None, stdout=subprocess.PIPE, env=None, timeout=300) -> subprocess.CompletedProcess:
    """The real CLI in a real process, its stdout as given (a closed pipe, /dev/full)."""
    result = subprocess.run(
        [sys.executable, "-m", "sectorbench", *map(str, args)],
        cwd=cwd,
        stdout=stdout,
        stderr=subprocess.PIPE,
        env={**os.environ, **(env or {})},
        text=True,
        timeout=timeout,
    )
    assert "Traceback" not in result.stderr and "internal error" not in result.stderr, result.stderr
    return result


def invoke(*args, env=None):
    result = CliRunner().invoke(main, [str(a) for a in args], env=env)
    assert "Traceback" not in result.stderr and "internal error" not in result.stderr, result.stderr
    return result


def one_line(result, *fragments) -> str:
    assert result.exit_code == 2, (result.stdout, result.stderr)
    lines = result.stderr.strip().splitlines()
    assert len(lines) == 1, result.stderr
    for fragment in fragments:
        assert fragment in lines[0], lines[0]
    return lines[0]


@pytest.fixture(scope="module")
def saved(tmp_path_factory) -> Path:
    path = tmp_path_factory.mktemp("saved") / "run.json"
    result = invoke("run", *TINY, "--kernels", "naive,basic", "--json", path)
    assert result.exit_code == 0, result.stderr
    return path


def closed_pipe():
    """The write end of a pipe whose reader is gone: `… | true`, without the race."""
    read, write = os.pipe()
    os.close(read)
    return write


# -- 1. a failing stdout loses no results and never exits 1 ------------------------------------


@pytest.mark.parametrize("command", ["run", "compare"])
def test_a_closed_stdout_still_saves_the_results(tmp_path, command):
    out = tmp_path / "pipe.json"
    write = closed_pipe()
    try:
        extra = ["--cc", "cc"] if command == "compare" else []
        result = sectorbench(command, *TINY, *extra, "--kernels", "naive", "--json", out, stdout=write)
    finally:
        os.close(write)
    assert result.returncode == 141, result.stderr
    assert json.loads(out.read_text())["results"], "the results were written"
    assert "broken pipe" in result.stderr.strip().splitlines()[-1]


def test_stdout_and_stderr_in_one_closed_pipe_exit_as_a_broken_pipe(monkeypatch):
    """`sectorbench kernels 2>&1 | head`, Python's streams buffered as by default (no
    PYTHONUNBUFFERED): the line saying stdout was closed failed on stderr too, stayed in its
    buffer, and Python's last flush failed on it again: exit status 120, not 141.  (`kernels`
    writes nothing on stderr before its table: a line there would have found stderr closed
    first, and the guard on it would have hidden this.)"""
    monkeypatch.delenv("PYTHONUNBUFFERED", raising=False)
    write = closed_pipe()
    try:
        result = subprocess.run(
            [sys.executable, "-m", "sectorbench", "kernels"], stdout=write, stderr=write, timeout=300
        )
    finally:
        os.close(write)
    assert result.returncode == 141


def test_a_full_stdout_still_saves_the_results_and_is_no_internal_error(tmp_path):
    out = tmp_path / "full.json"
    with open("/dev/full", "w") as full:
        result = sectorbench("verify", "--kernels", "naive", "--cases", "100", "--json", out, stdout=full)
    assert result.returncode == 2, result.stderr
    assert json.loads(out.read_text())["kernels"]
    assert "cannot write to stdout (No space left on device)" in result.stderr.strip().splitlines()[-1]


def test_regress_into_a_closed_pipe_is_not_a_regression(saved):
    write = closed_pipe()
    try:
        result = sectorbench("regress", saved, saved, stdout=write)
    finally:
        os.close(write)
    assert result.returncode == 141, result.stderr


# -- 2. an oversized run is refused before its scene is made -----------------------------------


def test_an_oversized_default_run_is_refused_before_the_scene_is_generated(monkeypatch):
    from sectorbench.families import scene_kinds

    def generate(*args, **kwargs):
        raise AssertionError("the scene was generated before the run was refused")

    monkeypatch.setattr(scene_kinds, "generate", generate)
    # 2 series (one kernel and its NoOperation) would fit the hour; the default kernels do not
    result = invoke("run", "-n", "50000000", "-m", "1000", "--repeat", "2", "--flags", "-O2")
    one_line(result, "would take about", "over the limit of 60 min")


# -- 3. files read whole have a size limit -------------------------------------------------------


def sparse(path: Path, size: int = 2 << 30) -> Path:
    with open(path, "wb") as handle:
        handle.truncate(size)
    return path


def test_a_huge_thresholds_file_is_refused_unread(tmp_path, saved):
    huge = sparse(tmp_path / "t.toml")
    line = one_line(invoke("regress", saved, saved, "--thresholds", huge), "2,147,483,648 bytes", "more than")
    assert "TOML" in line


def test_a_huge_source_file_is_refused_before_building(tmp_path, monkeypatch):
    cache = tmp_path / "cache"
    cache.mkdir()
    monkeypatch.setenv("SECTORBENCH_CACHE", str(cache))
    huge = sparse(tmp_path / "k.c")
    one_line(invoke("run", *TINY, "--source", huge), "--source", "more than the 67,108,864 allowed")
    assert not any(cache.iterdir()), "nothing was built"


# -- 4. a repeated --broadphase is refused -------------------------------------------------------


def test_a_broadphase_given_twice_is_refused():
    one_line(invoke("run", *TINY, "--kernels", "naive", "--broadphase", "grid", "--broadphase", "grid"), "given twice")


@pytest.mark.parametrize("command", ["run", "compare"])
def test_a_compiler_given_twice_is_named_so(command):
    # it read "the build --flags '-O2' is given twice", naming the option not repeated
    one_line(invoke(command, *TINY, "--kernels", "naive", "--cc", "cc", "--cc", "cc"), "'--cc'", "'cc' is given twice")


def test_an_empty_normalize_is_named_as_the_option(saved):
    line = one_line(invoke("regress", saved, saved, "--normalize", ""), "--normalize must be 'overhead' or a kernel")
    assert "None" not in line


# -- 5. export and plot refuse what regress refuses ----------------------------------------------


def edited(saved: Path, into: Path, change) -> Path:
    data = json.loads(saved.read_text())
    change(data["results"])
    into.write_text(json.dumps(data))
    return into


@pytest.mark.parametrize(
    ("change", "fragment"),
    [
        (lambda rows: rows.append(dict(rows[0])), "duplicate row naive"),
        (lambda rows: rows[0].update(samples_s=[]), "naive [-O2, inline] is ok but has no samples"),
    ],
    ids=["duplicate", "no samples"],
)
@pytest.mark.parametrize("command", ["export pyperf", "export bmf", "plot"])
def test_export_and_plot_refuse_the_rows_regress_refuses(tmp_path, saved, change, fragment, command):
    bad = edited(saved, tmp_path / "bad.json", change)
    one_line(invoke("regress", bad, saved), fragment)
    if command == "plot":
        args = ["plot", bad, "--out", tmp_path / "o.png"]
    else:
        args = ["export", bad, "--format", command.split()[1], "--out", tmp_path / "o.json"]
    one_line(invoke(*args), fragment)
    assert not list(tmp_path.glob("o.*")), "nothing was written"


# -- 6. a standard stream's alias is never an output ---------------------------------------------


@pytest.mark.parametrize("alias", ["/dev/stdout", "/dev/fd/1", "link.json", "fds/1"])
def test_force_never_replaces_the_file_behind_a_standard_stream(tmp_path, alias):
    keep = tmp_path / "keep.txt"
    keep.write_text("IMPORTANT USER DATA\n")
    (tmp_path / "link.json").symlink_to("/dev/stdout")
    (tmp_path / "fds").symlink_to("/proc/self/fd")  # a link to the folder, not to the stream
    with open(keep, "a") as appended:  # sectorbench run … --json /dev/stdout --force >> keep.txt
        result = sectorbench(
            "run", *TINY, "--kernels", "naive", "--json", alias, "--force", cwd=tmp_path, stdout=appended
        )
    assert result.returncode == 2, result.stderr
    lines = result.stderr.strip().splitlines()
    assert len(lines) == 1 and "is an open stream of this process" in lines[0] and "write to a file" in lines[0]
    assert keep.read_text() == "IMPORTANT USER DATA\n"


def test_a_standard_stream_that_is_a_pipe_is_refused_in_plain_words(tmp_path):
    result = sectorbench("run", *TINY, "--kernels", "naive", "--json", "/dev/stdout")
    assert result.returncode == 2, result.stderr
    assert "/dev/stdout is an open stream of this process, not a regular file" in result.stderr


# -- 7. a terminal too narrow, or of width 0, still shows the table -----------------------------


@pytest.mark.parametrize("columns", ["0", "10"])
def test_a_narrow_terminal_still_shows_the_table(saved, columns):
    result = sectorbench("regress", saved, saved, env={"TTY_COMPATIBLE": "1", "COLUMNS": columns})
    assert result.returncode == 0, result.stderr
    assert "naive" in result.stdout and "basic" in result.stdout, result.stdout


@pytest.mark.parametrize("command", [["regress", "{saved}", "{saved}"], ["kernels"]])
def test_a_locale_that_cannot_encode_the_tables_still_shows_them(saved, command):
    """Under an ASCII (or Latin-1) locale without Python's UTF-8 mode, the gate's alpha and the
    kernels list's en dash were "internal error: UnicodeEncodeError" (regress: after its gate
    was decided, its verdict lost); they are written as escapes, as Python writes them to stderr."""
    env = {key: value for key, value in os.environ.items() if not key.startswith(("LC_", "LANG", "PYTHONIO"))}
    result = subprocess.run(
        [sys.executable, "-m", "sectorbench", *[part.format(saved=saved) for part in command]],
        capture_output=True,
        env={**env, "LC_ALL": "C", "PYTHONUTF8": "0"},
        timeout=120,
    )
    assert result.returncode == 0, result.stderr
    assert b"Traceback" not in result.stderr and b"internal error" not in result.stderr, result.stderr
    assert result.stdout.isascii() and b"\\u" in result.stdout, result.stdout
    if command[0] == "regress":
        assert b"\\u03b1 = 0.01" in result.stdout and b"naive" in result.stdout, result.stdout


# -- 8. names from users and saved files are shown as written, never read as rich markup ---------

#: rich's MarkupError (a traceback), a bold "x", a warning sign, a backslash doubled by rich's escape().
AS_MARKUP = ["[/]", "[bold]x", "y:warning:", "z\\"]


@pytest.mark.parametrize("name", AS_MARKUP)
def test_a_kernel_name_from_a_saved_file_is_shown_as_written(tmp_path, saved, name):
    def rename(rows):
        for row in rows:
            if row["kernel"] == "basic":
                row["kernel"] = name

    renamed = edited(saved, tmp_path / "renamed.json", rename)
    result = invoke("regress", renamed, renamed)  # the gate's table
    assert result.exit_code == 0, result.stderr
    assert f" {name} " in result.stdout, result.stdout
    result = invoke("regress", renamed, saved)  # missing from CURRENT: a failure, in the table and the last line
    assert result.exit_code == 1, result.stderr
    assert f" {name} " in result.stdout, result.stdout
    assert f"1 failure(s): {name} [-O2, inline] missing" in result.stderr, result.stderr


def test_a_source_kernels_summary_is_shown_as_written(tmp_path):
    source = tmp_path / "odd_summary.c"
    source.write_text(
        '#include "sb_common.h"\n'
        "static inline int odd_summary(float cx, float cy, float ux, float uy, float r2, float k, float px,"
        " float py) {\n"
        "    const float dx = px - cx, dy = py - cy, s = dx * dx + dy * dy, a = dx * ux + dy * uy;\n"
        "    return s < r2 && a > sqrtf(s) * k;\n"
        "}\n"
        'SB_KERNEL(odd_summary, SCALAR, 1, (cx, cy, ux, uy, r2, cos_theta), .family = "sector",\n'
        '          .summary = "[/][bold]x:warning:");\n'
    )
    result = invoke("kernels", "--source", source)
    assert result.exit_code == 0, result.stderr
    assert "odd_summary" in result.stdout and "[/][bold]x:warning:" in result.stdout, result.stdout


# -- 9. a path is named on one line, however odd its characters ----------------------------------


def read_back_by_bash(quoted: str) -> bytes:
    return subprocess.run(["bash", "-c", f"printf %s {quoted}"], capture_output=True, check=True).stdout


def test_a_saved_path_with_a_newline_is_named_on_one_line(tmp_path, saved):
    """ "saved PATH" with a newline in PATH was two lines, the second one read as a line of its own."""
    out = tmp_path / "two\nlines.json"
    result = invoke("export", saved, "--format", "bmf", "--out", out)
    assert result.exit_code == 0, result.stderr
    assert json.loads(out.read_text())
    (line,) = result.stderr.splitlines()
    assert line == f"saved $'{tmp_path}/two\\nlines.json'"
    assert read_back_by_bash(line.removeprefix("saved ")) == os.fsencode(out)
    plain = tmp_path / "a plain name.json"  # printable: named as it is
    assert invoke("export", saved, "--format", "bmf", "--out", plain).stderr == f"saved {plain}\n"


def test_an_error_naming_a_path_with_a_newline_or_an_escape_is_one_printable_line(tmp_path):
    """The error line named such a path raw: a newline made it two lines (the second read as a
    line of its own), a terminal escape reached the terminal.  Escaped, as click names paths."""
    folder = tmp_path / "two\nlines\x1b[2J"
    folder.mkdir()
    bad = folder / "bad.json"
    bad.write_text("{bad")
    line = one_line(invoke("plot", bad, "--out", tmp_path / "p.png"), "not a sectorbench result")
    assert line.isprintable()
    assert line.startswith(f"sectorbench: error: {tmp_path}/two\\nlines\\x1b[2J/bad.json: "), line


@pytest.mark.parametrize("name", [b"tab\there", b"it's\\\x1b\r", b"not-utf8-\xff", "c1\u0085rtl\u202e".encode()])
def test_a_path_with_unprintable_characters_is_named_as_a_shell_reads_it_back(name):
    from sectorbench.model.text import shown_path

    shown = shown_path(os.fsdecode(b"/tmp/" + name))
    assert shown.isprintable(), ascii(shown)  # ascii(): a lone surrogate (the byte \xff) fails pytest-xdist's report
    assert read_back_by_bash(shown) == b"/tmp/" + name


def limited_files(limit_bytes: int):
    """A child's file-size limit (the shell's ulimit -f): a write past it fails with EFBIG."""
    import resource

    def limit():
        resource.setrlimit(resource.RLIMIT_FSIZE, (limit_bytes, limit_bytes))

    return limit


@pytest.mark.parametrize(
    "command",
    [
        ["run", *TINY, "-m", "20000", "--kernels", "naive"],
        ["verify", "--kernels", "naive", "--cases", "20000"],
        ["query", "-n", "100", "-m", "20000", "--out", "{out}"],
    ],
)
def test_a_scratch_file_past_the_machines_limits_is_one_line_not_an_internal_error(tmp_path, command):
    args = [str(part).format(out=tmp_path / "hits.npz") for part in command]
    # the same command once unlimited: the limit is then met by the scene's scratch file alone,
    # not by the build cache's objects
    assert sectorbench(*args).returncode in (0, 1)
    (tmp_path / "hits.npz").unlink(missing_ok=True)
    result = subprocess.run(
        [sys.executable, "-m", "sectorbench", *args],
        capture_output=True,
        text=True,
        env={**os.environ, "TMPDIR": str(tmp_path)},
        preexec_fn=limited_files(64 << 10),
        timeout=300,
    )
    assert result.returncode == 2, (result.stdout, result.stderr)
    # the progress reporter's lines ("… (5 s elapsed)") may come first on a loaded machine
    lines = [line for line in result.stderr.strip().splitlines() if not line.endswith("elapsed)")]
    # the scene's columns in memory files, or the scene written for the workers: either names it
    assert len(lines) == 1 and "scene" in lines[0] and "File too large" in lines[0], result.stderr
    assert not list(tmp_path.rglob("*.npz*")), "a partial scene or answer was left behind"


def no_new_threads(tmp_path: Path):
    """A child that can start no thread and no process: a container's pids limit of one (root,
    whom RLIMIT_NPROC does not bind) or ulimit -u 0 (anyone else).  None where neither can be made."""
    import resource

    if os.geteuid() != 0:
        return lambda: resource.setrlimit(resource.RLIMIT_NPROC, (0, 0))
    group = Path(f"/sys/fs/cgroup/pids/sectorbench-test-{os.getpid()}-{tmp_path.name}")
    try:
        group.mkdir()
        (group / "pids.max").write_text("1")
    except OSError:
        return None
    return group


@pytest.mark.parametrize("command", [["query", "-n", "10", "-m", "100", "--out", "hits.npz"], ["run", *TINY]])
def test_a_limit_on_threads_and_processes_is_one_line_not_an_interrupt(tmp_path, command):
    """numpy's OpenBLAS starts a thread per core as it is imported; where it could not, it raised
    SIGINT, and every command ended "interrupted; scratch files removed", status 130."""
    limit = no_new_threads(tmp_path)
    if limit is None:
        pytest.skip("neither a pids cgroup (v1, /sys/fs/cgroup/pids) nor RLIMIT_NPROC can limit a child here")
    group = limit if isinstance(limit, Path) else None
    try:
        result = subprocess.run(
            [sys.executable, "-m", "sectorbench", *command],
            cwd=tmp_path,
            capture_output=True,
            text=True,
            env={key: value for key, value in os.environ.items() if not key.endswith("_NUM_THREADS")},
            preexec_fn=(lambda: (group / "cgroup.procs").write_text(str(os.getpid()))) if group else limit,
            timeout=120,
        )
    finally:
        if group is not None:
            group.rmdir()
    assert result.returncode == 2, (result.returncode, result.stderr)
    lines = [line for line in result.stderr.strip().splitlines() if not line.startswith("OpenBLAS")]
    assert len(lines) == 1 and "Resource temporarily unavailable" in lines[0], result.stderr
    assert "a limit on processes" in lines[0], lines[0]  # the errno alone named neither cause nor limit
    assert "interrupted" not in result.stderr and not (tmp_path / "hits.npz").exists()


def test_a_run_under_a_cpu_quota_below_its_threads_says_so(tmp_path):
    """docker --cpus 0.2: every timed loop waited for the quota (basic 18.7 ns a test for 2.9, sse2's
    speedup 12.9x for 8.1x, spread 1 %), and nothing said so."""
    group = Path(f"/sys/fs/cgroup/cpu/sectorbench-test-{os.getpid()}-{tmp_path.name}")
    try:
        group.mkdir()
        (group / "cpu.cfs_quota_us").write_text("50000")  # 0.5 CPUs
    except OSError as exc:
        pytest.skip(f"cannot make a cgroup (v1) with a CPU quota here: {exc}")
    out = tmp_path / "r.json"
    try:
        result = subprocess.run(
            [sys.executable, "-m", "sectorbench", "run", *TINY, "--kernels", "basic", "--json", out],
            capture_output=True,
            text=True,
            preexec_fn=lambda: (group / "cgroup.procs").write_text(str(os.getpid())),
            timeout=300,
        )
    finally:
        group.rmdir()
    assert result.returncode == 0, result.stderr
    said = " ".join(result.stdout.split())
    assert "CPU quota: this process's cgroup may use 0.5 CPUs" in said and "fewer than the 1 thread timed" in said, said
    assert json.loads(out.read_text())["env"]["machine"]["cpu"]["quota_cores"] == 0.5


@pytest.mark.parametrize("name", ["sector/scalar.c", "harness/new.json"])
def test_no_output_replaces_or_joins_the_c_sources_the_command_builds(name):
    from sectorbench.native.build import KERNELS_DIR

    target = KERNELS_DIR / name
    before = target.read_bytes() if target.exists() else None
    result = invoke("run", *TINY, "--kernels", "naive", "--json", target, "--force")
    one_line(result, "sectorbench's own C sources", "even with --force")
    assert (target.read_bytes() if target.exists() else None) == before


HELPERS_ONLY = "static int helper(int x) { return x + 1; }\nint use(int y) { return helper(y); }\n"


@pytest.mark.parametrize("text", ["", HELPERS_ONLY])
@pytest.mark.parametrize("command", [["run", *TINY], ["verify", "--cases", "100"], ["kernels"]])
def test_a_source_that_declares_no_kernel_is_refused_before_any_build(tmp_path, text, command):
    # else the run timed the built-in kernels alone, and read as a run of the user's
    source = tmp_path / "mine.c"
    source.write_text(text)
    one_line(invoke(*command, "--source", source), "declares no kernel", str(source))


@pytest.mark.parametrize(
    "command",
    [
        ["run", *TINY, "--kernels", "naive", "--json", ""],
        ["query", "-n", "10", "-m", "10", "--out", ""],
        ["export", "{saved}", "--format", "pyperf", "--out", ""],
        ["plot", "{saved}", "--out", ""],
    ],
)
def test_an_empty_output_path_is_refused_as_empty(saved, command):
    # pathlib reads "" as ".": it was refused as "error: . is a directory"
    args = [part.format(saved=saved) for part in command]
    one_line(invoke(*args), "is an empty path")


ESCAPING_KERNEL = r"""#include "sb_common.h"

static inline int escapes(float cx, float cy, float ux, float uy, float r2, float cos_theta, float px, float py) {
    const float dx = px - cx, dy = py - cy, s = dx * dx + dy * dy;
    return s < r2 && dx * ux + dy * uy > sqrtf(s) * cos_theta;
}

SB_KERNEL(escapes, SCALAR, 1, (cx, cy, ux, uy, r2, cos_theta), .family = "sector",
          .name = "ev\x1b]0;pwned\x07il\x1b[2J\n", .summary = "\x1b[31mred\x1b[0m \xff");
"""


@pytest.mark.parametrize("command", [["kernels"], ["run", *TINY]])
def test_a_source_kernels_name_and_summary_never_reach_the_terminal_raw(tmp_path, command):
    # a name that clears the screen or moves the cursor could overwrite other rows' figures
    source = tmp_path / "escapes.c"
    source.write_text(ESCAPING_KERNEL)
    result = invoke(*command, "--source", source)
    assert result.exit_code == 0, result.stderr
    printed = result.stdout + result.stderr
    assert "\x1b" not in printed and "\x07" not in printed, printed
    assert "ev\\x1b]0;pwned\\x07il" in printed


# -- 10. a relative build cache is the current directory's ---------------------------------------


@pytest.mark.parametrize("variable", ["SECTORBENCH_CACHE", "XDG_CACHE_HOME"])
def test_a_relative_cache_directory_is_taken_from_the_current_directory(tmp_path, variable):
    # each build compiles in its private directory, where `relcache/...` named nothing: every
    # build failed with "cc1: fatal error: relcache/....build/unit-....c: No such file"
    # an empty SECTORBENCH_CACHE counts as unset: XDG_CACHE_HOME is then read
    result = sectorbench("kernels", cwd=tmp_path, env={"SECTORBENCH_CACHE": "", variable: "relcache"})
    assert result.returncode == 0, result.stderr
    assert "basic" in result.stdout
    assert any((tmp_path / "relcache").rglob("sectorbench-*.so")), "the library is in ./relcache"


# -- 11. a path too long for the system is said to be, in one line ------------------------------


@pytest.mark.parametrize(
    "command",
    [
        ["export", "{long}.json", "--format", "gha", "--out", "o.json"],
        ["regress", "{saved}", "{long}.json"],
        ["verify", "--input", "{long}.npz"],
    ],
)
def test_an_input_whose_name_is_too_long_is_said_to_be(tmp_path, saved, command):
    # click's stat failed with ENAMETOOLONG and said "File '…' does not exist."
    args = [part.format(saved=saved, long=tmp_path / ("x" * 300)) for part in command]
    line = one_line(invoke(*args), "the name is too long (a name in it is 30")
    assert "does not exist" not in line
    assert len(line) < 300, "the path is shortened"


@pytest.mark.parametrize(
    "command",
    [
        ["export", "{closed}", "--format", "gha", "--out", "o.json"],
        ["regress", "{closed}", "{closed}"],
        ["run", *TINY, "--source", "{closed}"],
    ],
)
def test_an_input_behind_a_folder_closed_to_the_user_is_not_said_to_be_missing(tmp_path, command):
    # `regress /root/base.json ...` as a CI runner's user: click's stat failed (EACCES) and it
    # said "File '/root/base.json' does not exist." of a file that was there.  Run as root,
    # whom no folder is closed to, the test is nobody for the moment (tmp_path is root's 0700).
    folder = tmp_path / "closed"
    folder.mkdir()
    closed = folder / "base.json"
    closed.write_text("{}")
    folder.chmod(0)  # as root's /root (0700) is to everyone else
    as_root = os.geteuid() == 0
    try:
        if as_root:
            os.seteuid(65534)
        result = invoke(*[part.format(closed=closed) for part in command])
    finally:
        if as_root:
            os.seteuid(0)
        folder.chmod(0o700)
    line = one_line(result, str(closed), "cannot be reached, a folder on its path is closed to this user")
    assert "does not exist" not in line


def test_an_output_name_near_the_limit_is_written(tmp_path, saved):
    # the name passed the checks, the work was done, and then the temporary ".NAME.XXXXXXXX"
    # beside it was too long: "cannot write (File name too long)" and a rescue file
    out = tmp_path / ("x" * 250 + ".json")
    result = invoke("export", saved, "--format", "gha", "--out", out)
    assert result.exit_code == 0, result.stderr
    assert json.loads(out.read_text())
    assert [p.name for p in tmp_path.iterdir()] == [out.name], "no rescue file, no temporary file left"


# -- 12. a stdout or stderr closed as the process starts -----------------------------------------


def closed_at_start(*fds):
    """A child's descriptors closed before it runs: the shell's `1>&-` and `2>&-`."""

    def close():
        for fd in fds:
            os.close(fd)

    return close


def with_closed(fds, *args, cwd=None) -> subprocess.CompletedProcess:
    return subprocess.run(
        [sys.executable, "-m", "sectorbench", *map(str, args)],
        cwd=cwd,
        capture_output=True,
        text=True,
        preexec_fn=closed_at_start(*fds),
        timeout=300,
    )


@pytest.mark.parametrize("command", [["kernels"], ["regress", "{saved}", "{saved}"]])
def test_a_stdout_closed_at_start_is_a_stdout_that_cannot_be_written(saved, command):
    # Python leaves sys.stdout None: "internal error: AttributeError: 'NoneType' object has no attribute 'write'"
    result = with_closed([1], *[str(part).format(saved=saved) for part in command])
    assert result.returncode == 2, result.stderr
    assert "internal error" not in result.stderr and "Traceback" not in result.stderr, result.stderr
    assert result.stderr.strip().splitlines()[-1] == (
        "sectorbench: error: cannot write to stdout (Bad file descriptor); files said saved are complete"
    )


def test_a_run_with_stdout_closed_at_start_still_writes_its_files(tmp_path):
    out = tmp_path / "r.json"
    result = with_closed([1], "run", *TINY, "--kernels", "naive", "--json", out)
    assert result.returncode == 2, result.stderr
    assert "cannot write to stdout (Bad file descriptor)" in result.stderr.strip().splitlines()[-1]
    assert json.loads(out.read_text())["results"], "the results were written, and nothing else into them"


@pytest.mark.parametrize(
    ("command", "status"),
    [
        (["export", "{saved}", "--format", "gha", "--out", "{tmp}/o.json"], 0),  # it exited 1
        (["kernels", "--cc", "no-such-compiler-xyz"], 2),  # it exited 1
        (["kernels"], 0),
        (["run", *TINY, "--repeat", "0"], 2),
    ],
)
@pytest.mark.parametrize("fds", [[2], [1, 2]], ids=["stderr", "stdout and stderr"])
def test_a_stderr_closed_at_start_leaves_the_exit_status_as_it_was(tmp_path, saved, command, status, fds):
    if fds == [1, 2] and command == ["kernels"]:
        status = 2  # its table could not be printed
    result = with_closed(fds, *[str(part).format(saved=saved, tmp=tmp_path) for part in command])
    assert result.returncode == status
    if command[0] == "export":
        assert json.loads((tmp_path / "o.json").read_text())


# -- 13. a scene too big for the machine is refused up front; running out of memory is one line ----


def limited_memory(limit_bytes: int):
    """A child's address-space limit (the shell's ulimit -v)."""
    import resource

    def limit():
        resource.setrlimit(resource.RLIMIT_AS, (limit_bytes, limit_bytes))

    return limit


def within_memory(limit_bytes: int, *args, cwd=None) -> subprocess.CompletedProcess:
    return subprocess.run(
        [sys.executable, "-m", "sectorbench", *map(str, args)],
        cwd=cwd,
        capture_output=True,
        text=True,
        preexec_fn=limited_memory(limit_bytes),
        timeout=120,
    )


@pytest.mark.parametrize(
    "command",
    [
        # 20e6 sectors: about 2.5 GiB at the peak (4 bytes an array element were counted: 0.6 GiB)
        ["run", "-n", "20000000", "-m", "1", "--repeat", "1", "--flags", "-O2", "--kernels", "basic"],
        ["query", "-n", "20000000", "-m", "1000", "--out", "q.npz"],
        # 5e6 polygons of 1024 vertices: the vertices were not counted, and it built them for hours
        ["run", "-n", "5000000", "-m", "1", "--scene", "polygons", "--vertices", "1024", "--flags", "-O2"],
    ],
    ids=["run", "query", "polygons"],
)
def test_a_scene_that_cannot_fit_is_refused_before_it_is_made(tmp_path, command):
    result = within_memory(3 << 29, *command, cwd=tmp_path)  # 1.5 GiB
    assert result.returncode == 2, result.stderr
    lines = result.stderr.strip().splitlines()
    assert len(lines) == 1 and "needs about" in lines[0] and "GiB of memory at its peak" in lines[0], result.stderr
    assert not list(tmp_path.iterdir()), "nothing was written"


@pytest.mark.parametrize(
    "command",
    [
        ["run", "-n", "1", "-m", "1", "--flags", "-O2", "--kernels", "basic", "--json", "o.json"],
        ["query", "-n", "1", "-m", "1", "--out", "o.npz"],
        # a flag set no cache holds (a macro of its own): verify built it first, and the compiler
        # failed under the limit, "virtual memory exhausted"
        ["verify", "--cases", "100", "--kernels", "naive", "--flags", f"-O1 -DSB_UNCACHED_{uuid.uuid4().hex}"],
    ],
    ids=["run", "query", "verify"],
)
def test_a_limit_below_what_any_size_needs_does_not_advise_smaller_sizes(tmp_path, command):
    """ulimit -v below sectorbench's own needs: `run -n 1 -m 1` was told "a scene of N=1 x M=1
    needs about 0.3 GiB ... use a smaller -n/-m", which cannot help; verify is refused before it
    builds."""
    from sectorbench.model.scenes import PEAK_BASE_BYTES

    result = within_memory(PEAK_BASE_BYTES - (8 << 20), *command, cwd=tmp_path)
    assert result.returncode == 2, result.stderr
    lines = result.stderr.strip().splitlines()
    assert len(lines) == 1 and "whatever the scene's size" in lines[0] and "raise ulimit -v" in lines[0], lines
    assert "-n/-m" not in lines[0] and not list(tmp_path.iterdir())


def test_a_scene_just_over_the_limit_says_two_different_amounts(tmp_path):
    """ "needs about 0.4 GiB ... more than this process may use (0.4 GiB, ulimit -v)": amounts
    that round alike are said in MiB."""
    import re

    command = ["run", "-n", "1400000", "-m", "30000", "--flags", "-O2", "--kernels", "naive"]
    result = within_memory(440000 << 10, *command, cwd=tmp_path)
    assert result.returncode == 2, result.stderr
    line = result.stderr.strip()
    needed, allowed = re.search(r"needs about (\S+ \S+) .*may use \((\S+ \S+), ulimit -v\)", line).groups()
    assert needed != allowed, line


@pytest.mark.parametrize(
    "words, advice",
    [
        (["run", "-n", "5"], "a smaller -n/-m?"),
        (["regress", "a.json", "b.json"], "smaller input files?"),
        (["verify", "--cases", "100"], "this process may use 1,048,576 MiB: raise ulimit -v"),
    ],
)
def test_out_of_memory_advice_names_what_the_command_has(words, advice):
    """verify takes neither -n/-m nor input files: under a ulimit -v it was told "smaller input
    files?".  (A real MemoryError under a tight ulimit -v is not made here: CPython itself then
    fails in ways of its own, a fatal "Cannot recover from stack overflow" among them.)"""
    said = subprocess.run(
        [sys.executable, "-c", f"from sectorbench.cli.app import main; print(main._smaller({words!r}))"],
        capture_output=True,
        text=True,
        preexec_fn=limited_memory(1 << 40),
        check=True,
    ).stdout.strip()
    assert said == advice


def test_running_out_of_memory_is_one_line_not_an_internal_error(tmp_path):
    # the broadphase's hits (up to --max-hits of them) could not be allocated in 1 GiB:
    # "internal error: BroadphaseError: the broadphase query ran out of memory"
    out = tmp_path / "q.npz"
    args = ["query", "-n", "1000", "-m", "1000000", "--scene", "game", "--world", "10", "--rmax", "100"]
    result = within_memory(1 << 30, *args, "--max-hits", "400000000", "--out", out)
    assert result.returncode == 2, result.stderr
    lines = result.stderr.strip().splitlines()
    assert len(lines) == 1 and lines[0].startswith("sectorbench: error: out of memory: "), result.stderr
    assert not out.exists()


def test_out_of_memory_in_a_command_without_sizes_advises_smaller_files(tmp_path):
    """regress pairs every round of one file with every round of the other: 10 000 samples a side
    (the most a saved row may hold) is 1e8 ratios, 0.8 GB, past 768 MiB.  It was told to use "a
    smaller -n/-m", which it has not."""
    from sectorbench.model.results import KernelResult, RunResult, save

    samples = [1e-3 * (1 + 1e-6 * i) for i in range(10_000)]
    row = KernelResult(
        kernel="basic", family="sector", flags="-O2", cc="cc", mode="inline", status="ok",
        hits=10, tests=1000, samples_s=samples, median_s=samples[5_000],
    )  # fmt: skip
    scene = {"kind": "uniform", "family": "sector", "seed": 0, "sectors": 10, "points": 100}
    result_file = save(RunResult(scene=scene, env={}, config={"repeat": 10_000}, results=[row]), tmp_path / "r.json")
    result = within_memory(3 << 28, "regress", result_file, result_file)
    assert result.returncode == 2, result.stderr
    lines = result.stderr.strip().splitlines()
    assert len(lines) == 1 and lines[0].startswith("sectorbench: error: out of memory: "), result.stderr
    assert lines[0].endswith("(smaller input files?)"), result.stderr


def test_a_compiler_given_by_a_relative_path_builds(tmp_path):
    """--cc ./mygcc was found where the command ran, then run in the cache's private build
    folder: "compiling with './mygcc -O2' failed: sh: 1: exec: ./mygcc: not found"."""
    (tmp_path / "mygcc").symlink_to(shutil.which("cc"))
    out = tmp_path / "r.json"
    result = sectorbench("run", *TINY, "--kernels", "basic", "--cc", "./mygcc", "--json", out, cwd=tmp_path)
    assert result.returncode == 0, result.stderr
    (row,) = json.loads(out.read_text())["results"]
    assert row["status"] == "ok" and row["cc"] == "./mygcc", row


@pytest.mark.parametrize(
    "kind, said",
    [
        ("not executable", "is not executable by this user"),
        ("a directory", "is a directory"),
        ("behind a closed folder", "cannot be reached: a folder on its path is closed to this user"),
    ],
)
def test_a_compiler_that_is_there_but_cannot_run_says_why(tmp_path, kind, said):
    """--cc PATH of a compiler that is there was "not found" as a missing one was: one this user
    may not run, or one behind a folder closed to them (a CI runner's user and a compiler
    under /root).  Run as root, whom no folder is closed to, the test is nobody a moment."""
    folder = tmp_path / "bin"
    folder.mkdir()
    cc = folder / "cc"
    if kind == "a directory":
        cc.mkdir()
    else:
        cc.symlink_to(shutil.which("cc"))
    if kind == "not executable":
        cc.unlink()
        cc.write_text("#!/bin/sh\n")
        cc.chmod(0o644)
    closed = kind == "behind a closed folder"
    as_root = closed and os.geteuid() == 0
    if closed:
        folder.chmod(0)
    try:
        if as_root:
            os.seteuid(65534)
        result = invoke("kernels", "--cc", cc)
    finally:
        if as_root:
            os.seteuid(0)
        folder.chmod(0o700)
    line = one_line(result, f"compiler '{cc}' {said} (set --cc or $CC)")
    assert "not found" not in line


def test_a_compilers_one_line_is_said_once(tmp_path):
    """A compiler that fails saying one line: that line was the error's cause and then quoted
    again under it."""
    fake = tmp_path / "onelinecc"
    cc = shutil.which("cc")
    fake.write_text(
        f'#!/bin/sh\ncase "$*" in *--version*|*" -E "*) exec {cc} "$@";; esac\n'  # who it is, the kernel index
        'echo "onelinecc: refused" >&2\nexit 3\n'
    )
    fake.chmod(0o755)
    result = sectorbench("run", *TINY, "--kernels", "basic", "--cc", fake, cwd=tmp_path)
    assert result.returncode == 2, result.stderr
    assert result.stderr.count("onelinecc: refused") == 1 and len(result.stderr.splitlines()) == 1, result.stderr


# -- 14. a low limit on open files ----------------------------------------------------------------


def within_open_files(soft: int, hard: int, *args, cwd=None) -> subprocess.CompletedProcess:
    """A child under `ulimit -Sn soft -Hn hard`."""
    import resource

    return subprocess.run(
        [sys.executable, "-m", "sectorbench", *map(str, args)],
        cwd=cwd,
        capture_output=True,
        text=True,
        preexec_fn=lambda: resource.setrlimit(resource.RLIMIT_NOFILE, (soft, hard)),
        timeout=300,
    )


OPEN_FILES_RUN = ["run", "-n", "20", "-m", "500", "--repeat", "2", "--flags", "-O2", "--kernels", "naive,sse2"]


def test_a_low_soft_limit_on_open_files_is_raised_by_the_command(tmp_path):
    """A soft `ulimit -n 20` (a CI container's) ended `run --threads all` in whichever
    descriptor came first ("Too many open files: .../unit-aabr.c"); the soft limit is the
    process's to raise, up to the hard one."""
    import resource

    hard = resource.getrlimit(resource.RLIMIT_NOFILE)[1]
    if hard != resource.RLIM_INFINITY and hard < 256:
        pytest.skip(f"this process's hard limit on open files is {hard}")
    result = within_open_files(20, hard, *OPEN_FILES_RUN, "--threads", "1", "--threads", "2", cwd=tmp_path)
    assert result.returncode == 0, result.stderr
    assert "sse2" in result.stdout


def test_a_hard_limit_on_open_files_too_low_is_one_line_naming_it(tmp_path):
    result = within_open_files(20, 20, *OPEN_FILES_RUN, "--threads", "1", "--threads", "2", cwd=tmp_path)
    assert result.returncode == 2, result.stderr
    lines = result.stderr.strip().splitlines()
    assert len(lines) == 1 and "Too many open files" in lines[0], result.stderr
    assert "ulimit -n" in lines[0], lines[0]  # the limit named, whichever descriptor met it
