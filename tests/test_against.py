"""Same-job A/B (run --against REF / --against-source OLD.c): real git, real builds, real workers.

What is asserted is what the code decides (which builds each side gets, the pairing, the
refusals, --confirm's bookkeeping), never a timing verdict: pairs of identical code must
be built and compared, whatever the noise says about them.
"""

from __future__ import annotations

import dataclasses
import json
import math
import os
import shutil
import subprocess
import tarfile
from pathlib import Path

import pytest
from click.testing import CliRunner
from conftest import USER_KERNEL

from sectorbench.cli import main
from sectorbench.compare import against
from sectorbench.compare.against import confirm
from sectorbench.compare.gate import GateConfig, GateReport, GateRow
from sectorbench.model.results import KernelResult, RowKey, RunResult
from sectorbench.native.build import BuildConfig

REPO = Path(__file__).resolve().parent.parent
SMALL = ["-n", "32", "-m", "1000", "--repeat", "3", "--min-time", "0.001", "--flags", "-O2", "--alpha", "0.1"]

pytestmark = pytest.mark.skipif(shutil.which("git") is None, reason="git is not installed")

#: NARROWER replaces USER_KERNEL's radius test so the head answers differently from the base.
NARROWER = ("(s < r2)", "(s < 0.5f * r2)")


def invoke(*args):
    return CliRunner().invoke(main, list(args))


def git(cwd: Path, *args: str) -> str:
    command = ["git", "-c", "user.email=test@example.com", "-c", "user.name=test", *args]
    return subprocess.run(command, cwd=cwd, check=True, capture_output=True, text=True).stdout


def commit_all(cwd: Path, message: str) -> None:
    git(cwd, "add", "-A")
    git(cwd, "commit", "-q", "-m", message)


@pytest.fixture
def user_repo(tmp_path, monkeypatch):
    """A git repository with two commits of mine.c: HEAD~1 the wide kernel, HEAD the narrower one."""
    repo = tmp_path / "repo"
    repo.mkdir()
    git(repo, "init", "-q")
    (repo / "kernels").mkdir()
    source = repo / "kernels" / "mine.c"
    source.write_text(USER_KERNEL)
    commit_all(repo, "wide")
    source.write_text(USER_KERNEL.replace(*NARROWER))
    commit_all(repo, "narrower")
    monkeypatch.chdir(repo)
    return repo


def rows_by_side(path: Path, kernel: str) -> dict[str, dict]:
    rows = [r for r in json.loads(path.read_text())["results"] if r["kernel"] == kernel]
    return {r["side"]: r for r in rows}


def assert_one_line_error(result, *fragments):
    assert result.exit_code == 2, result.output
    lines = result.output.strip().splitlines()
    assert len(lines) == 1 and "Traceback" not in result.output, result.output
    for fragment in fragments:
        assert fragment in lines[0], lines[0]


def test_against_head_1_builds_the_source_as_it_was(user_repo, tmp_path):
    out = tmp_path / "ab.json"
    source = user_repo / "kernels" / "mine.c"
    result = invoke("run", *SMALL, "--source", str(source), "--kernels", "mine,basic", "--against", "HEAD~1",
                    "--json", str(out))  # fmt: skip
    assert result.exit_code in (0, 1), result.output
    sides = rows_by_side(out, "mine")
    assert set(sides) == {"base", "head"}
    assert all(r["status"] == "ok" and len(r["samples_s"]) == 3 for r in sides.values())
    # The base is HEAD~1's wide kernel, the head the working tree's narrower one.
    assert sides["base"]["hits"] > sides["head"]["hits"] > 0
    # The shipped kernels are the same on both sides: same answers.
    basic = rows_by_side(out, "basic")
    assert basic["base"]["hits"] == basic["head"]["hits"]
    # Both pairs reach the gate table, paired by kernel name, and the run table names the base rows.
    assert "mine (base)" in result.output and "regression gate" in result.output
    gate_lines = result.output.split("regression gate", 1)[1]
    assert "mine" in gate_lines and "basic" in gate_lines
    assert "hit count" in gate_lines  # mine's answers changed: said, not hidden
    assert json.loads(out.read_text())["config"]["against"].startswith("HEAD~1 (")


def test_identical_code_is_built_on_both_sides_and_compared(user_repo, tmp_path):
    out = tmp_path / "same.json"
    source = user_repo / "kernels" / "mine.c"
    result = invoke("run", *SMALL, "--source", str(source), "--kernels", "mine", "--against", "HEAD", "--json",
                    str(out), "--no-confirm")  # fmt: skip
    assert result.exit_code in (0, 1), result.output
    sides = rows_by_side(out, "mine")
    assert set(sides) == {"base", "head"} and sides["base"]["hits"] == sides["head"]["hits"]
    assert "hit count" not in result.output
    assert "confirm:" not in result.output  # --no-confirm: never re-measured


def test_headers_beside_the_source_are_taken_at_the_ref_whatever_their_names(tmp_path, monkeypatch):
    """A header with a space in its name, in a folder with a non-ASCII name: the base side is
    built with the header as it was at REF (git quoted such names, a split on spaces cut them,
    and the base failed to compile: "my scale.h: No such file or directory")."""
    repo = tmp_path / "repo"
    folder = repo / "k\u00e9"
    folder.mkdir(parents=True)
    git(repo, "init", "-q")
    source = folder / "mine.c"
    header = folder / "my scale.h"
    source.write_text(USER_KERNEL.replace('"sb_common.h"', '"sb_common.h"\n#include "my scale.h"').replace(
        "(s < r2)", "(s < SCALE * r2)"))  # fmt: skip
    header.write_text("#define SCALE 1.0f\n")
    commit_all(repo, "wide")
    header.write_text("#define SCALE 0.5f\n")  # the working tree's kernel is narrower
    monkeypatch.chdir(repo)
    out = tmp_path / "ab.json"
    result = invoke("run", *SMALL, "--source", str(source), "--kernels", "mine", "--against", "HEAD",
                    "--json", str(out), "--no-confirm")  # fmt: skip
    assert result.exit_code in (0, 1), result.output
    sides = rows_by_side(out, "mine")
    assert sides["base"]["hits"] > sides["head"]["hits"] > 0  # the base read SCALE 1.0f, as committed


def assert_mine_compared_with_head_1(repo: Path, out: Path) -> None:
    """`run --against HEAD~1` of repo's kernels/mine.c compared both sides (HEAD~1's is wider)."""
    result = invoke("run", *SMALL, "--source", str(repo / "kernels" / "mine.c"), "--kernels", "mine",
                    "--against", "HEAD~1", "--json", str(out), "--no-confirm")  # fmt: skip
    assert result.exit_code in (0, 1), result.output
    sides = rows_by_side(out, "mine")
    assert sides["base"]["hits"] > sides["head"]["hits"] > 0


def test_a_checkout_whose_path_ends_in_a_space(user_repo, tmp_path, monkeypatch):
    """git prints the top of the work tree and a newline: only the newline is taken off (the
    trailing space went too, and every git command ran in a folder that does not exist, said
    as "--against needs git, which is not installed")."""
    moved = tmp_path / "repo "
    user_repo.rename(moved)
    monkeypatch.chdir(moved)
    assert_mine_compared_with_head_1(moved, tmp_path / "ab.json")


def test_a_repository_git_will_not_read_is_said_in_gits_words(user_repo):
    """A repository git refuses (here of a newer format; in a CI container, one owned by another
    user: "detected dubious ownership ... safe.directory") is not "not in a git checkout (use
    --against-source OLD.c)", which it was said to be."""
    git(user_repo, "config", "core.repositoryformatversion", "99")
    result = invoke("run", *SMALL, "--source", str(user_repo / "kernels" / "mine.c"), "--against", "HEAD")
    assert_one_line_error(result, "git will not read the repository", "Expected git repo version <= 1, found 99")
    assert "not in a git checkout" not in result.output


def test_a_repository_of_another_user_where_no_home_is_writable_is_refused_with_a_fix_that_works(
    user_repo, tmp_path, monkeypatch
):
    """A CI container job: the checkout is another uid's (git's own test switch makes it so, for
    a real git), and HOME=/ is read-only, so git's advice `git config --global --add
    safe.directory` fails too.  The line gives the exception in the environment, which works:
    with it the A/B runs; the repository is never trusted unasked."""
    monkeypatch.setenv("GIT_TEST_ASSUME_DIFFERENT_OWNER", "1")
    blocker = tmp_path / "file"
    blocker.write_text("")
    monkeypatch.setenv("HOME", str(blocker / "home"))  # cannot be written, by root either
    monkeypatch.delenv("GIT_CONFIG_GLOBAL", raising=False)
    result = invoke("run", *SMALL, "--source", str(user_repo / "kernels" / "mine.c"), "--against", "HEAD~1")
    fix = f"GIT_CONFIG_COUNT=1 GIT_CONFIG_KEY_0=safe.directory GIT_CONFIG_VALUE_0={user_repo}"
    assert_one_line_error(result, "detected dubious ownership", "cannot be written here", fix)
    for assignment in fix.split():
        monkeypatch.setenv(*assignment.split("=", 1))
    assert_mine_compared_with_head_1(user_repo, tmp_path / "ab.json")
    # where git's own advice works (a writable home), it is the one given
    home = tmp_path / "home"
    home.mkdir()
    monkeypatch.setenv("HOME", str(home))
    monkeypatch.delenv("GIT_CONFIG_COUNT")
    result = invoke("run", *SMALL, "--source", str(user_repo / "kernels" / "mine.c"), "--against", "HEAD~1")
    assert_one_line_error(result, "git config --global --add safe.directory")
    assert "GIT_CONFIG_COUNT" not in result.output


def test_refusals_are_one_line(user_repo, tmp_path, monkeypatch):
    source = user_repo / "kernels" / "mine.c"
    result = invoke("run", *SMALL, "--source", str(source), "--against", "no-such-ref")
    assert_one_line_error(result, "no-such-ref", "unknown ref")
    result = invoke("run", *SMALL, "--source", str(source), "--against", "HEAD^{tree}")  # was "unknown ref"
    assert_one_line_error(result, "--against HEAD^{tree}: names a tree, not a commit")
    loose = tmp_path / "loose.c"
    loose.write_text(USER_KERNEL)
    result = invoke("run", *SMALL, "--source", str(loose), "--against", "HEAD")
    assert_one_line_error(result, "not in a git checkout", "--against-source")
    result = invoke("run", *SMALL, "--against", "HEAD")  # a git repository, but no kernels_c/ and no --source
    assert_one_line_error(result, "nothing to compare")
    outside = tmp_path / "outside"
    outside.mkdir()
    monkeypatch.chdir(outside)
    result = invoke("run", *SMALL, "--against", "HEAD")
    assert_one_line_error(result, "is not a git checkout")
    result = invoke("run", *SMALL, "--source", str(source), "--against", "HEAD", "--against-source", str(loose))
    assert_one_line_error(result, "not both")
    few = [*SMALL[:-2], "--alpha", "0.01"]  # 3 rounds a side cannot reach p < 0.01: refused before any build
    result = invoke("run", *few, "--source", str(loose), "--against-source", str(loose))
    assert_one_line_error(result, "--repeat 3: 3 rounds a side cannot reach alpha = 0.01", "--repeat 5 would")


def test_normalize_by_a_kernel_not_timed_is_refused_before_timing(tmp_path, monkeypatch):
    """--normalize KERNEL names a kernel neither side times: refused once the kernels are known,
    before the rounds, as run --baseline refuses it (it was refused by the gate, after timing)."""
    monkeypatch.chdir(tmp_path)
    old, new = tmp_path / "old.c", tmp_path / "new.c"
    old.write_text(USER_KERNEL)
    new.write_text(USER_KERNEL.replace(*NARROWER))
    for absent in ("sse2", "no_such_kernel"):
        result = invoke("run", *SMALL, "--source", str(new), "--against-source", str(old), "--kernels", "mine",
                        "--normalize", absent)  # fmt: skip
        assert result.exit_code == 2, result.output
        assert "plan:" not in result.output and "regression gate" not in result.output, result.output
        last = result.output.strip().splitlines()[-1]
        assert last == (
            f"sectorbench: error: cannot normalize by {absent}: no {absent} [-O2, inline] on the base side "
            "(--kernels must name it)"
        ), last


def test_a_source_absent_at_ref_is_new_and_nothing_in_common_is_refused(user_repo):
    newer = user_repo / "kernels" / "newer.c"
    newer.write_text(USER_KERNEL.replace("mine", "newer"))
    result = invoke("run", *SMALL, "--source", str(newer), "--kernels", "newer", "--against", "HEAD")
    assert result.exit_code == 2, result.output
    assert "kernels/newer.c is not in HEAD: its kernels are new" in result.output
    assert "no kernel in common" in result.output.strip().splitlines()[-1]


def test_against_source_pairs_two_files_outside_git(tmp_path, monkeypatch):
    monkeypatch.chdir(tmp_path)
    old, new = tmp_path / "old.c", tmp_path / "new.c"
    old.write_text(USER_KERNEL)
    new.write_text(USER_KERNEL.replace(*NARROWER))
    out, bmf = tmp_path / "ab.json", tmp_path / "ab.bmf.json"
    result = invoke("run", *SMALL, "--source", str(new), "--against-source", str(old), "--kernels", "mine,basic",
                    "--json", str(out), "--export", f"bmf={bmf}")  # fmt: skip
    assert result.exit_code in (0, 1), result.output
    sides = rows_by_side(out, "mine")
    assert sides["base"]["hits"] > sides["head"]["hits"]
    # The head's rows, but mine's: its answers differ (the narrower radius), said on stderr.
    exported = json.loads(bmf.read_text())
    head = [row for row in json.loads(out.read_text())["results"] if row.get("side") == "head"]
    assert len(exported) == len([row for row in head if row["kernel"] == "basic"]) == len(head) // 2
    assert all("basic" in name for name in exported) and all(m["latency"]["value"] > 0 for m in exported.values())
    assert "not exported: sector/mine/-O2/inline/1: answers differ from the exact oracle's count" in result.output
    result = invoke("run", *SMALL, "--against-source", str(old))
    assert_one_line_error(result, "one --source NEW.c")


def test_in_a_sectorbench_checkout_kernels_c_is_compared_at_the_ref(tmp_path, monkeypatch):
    """A clone of this repository whose last commit narrows basic's radius test."""
    clone = tmp_path / "clone"
    subprocess.run(["git", "clone", "-q", str(REPO), str(clone)], check=True, capture_output=True)
    scalar = clone / "kernels_c" / "sector" / "scalar.c"
    text = scalar.read_text()
    assert "    if (!(squared_length < r2))" in text
    scalar.write_text(text.replace("    if (!(squared_length < r2))", "    if (!(squared_length < 0.5f * r2))", 1))
    commit_all(clone, "narrower basic")
    monkeypatch.chdir(clone)
    out = tmp_path / "ab.json"
    result = invoke("run", *SMALL, "--kernels", "basic,nosqrt", "--against", "HEAD~1", "--json", str(out))
    assert result.exit_code in (0, 1), result.output
    basic, nosqrt = rows_by_side(out, "basic"), rows_by_side(out, "nosqrt")
    assert basic["base"]["hits"] > basic["head"]["hits"]  # each side was built from its own tree
    assert nosqrt["base"]["hits"] == nosqrt["head"]["hits"]


def _clone_with_abi_change(tmp_path: Path, old: str, new: str) -> Path:
    """A clone of this repository whose last commit edits the sector family's abi.h."""
    clone = tmp_path / "clone"
    subprocess.run(["git", "clone", "-q", str(REPO), str(clone)], check=True, capture_output=True)
    abi = clone / "kernels_c" / "sector" / "abi.h"
    text = abi.read_text()
    assert old in text
    abi.write_text(text.replace(old, new, 1))
    commit_all(clone, "abi.h edited")
    return clone


def test_a_ref_whose_abi_differs_in_comments_only_is_compared(tmp_path, monkeypatch):
    """cffi reads declarations, not comments: a new comment (and a line broken anew) at the ref
    keeps its kernels loadable, so the A/B runs."""
    old = "int64_t sb_bp_pool_release(void);"
    clone = _clone_with_abi_change(tmp_path, old, "/* reworded */\n\n" + old.replace(" ", "\n    "))
    monkeypatch.chdir(clone)
    out = tmp_path / "ab.json"
    result = invoke("run", *SMALL, "--kernels", "basic", "--against", "HEAD", "--json", str(out))
    assert result.exit_code in (0, 1), result.output
    assert set(rows_by_side(out, "basic")) == {"base", "head"}


def test_a_ref_whose_abi_declares_otherwise_is_refused(tmp_path, monkeypatch):
    old = "int64_t sb_bp_pool_release(void);"
    clone = _clone_with_abi_change(tmp_path, old, old + "\nint sb_bp_only_at_the_ref(void);")
    monkeypatch.chdir(clone)
    result = invoke("run", *SMALL, "--kernels", "basic", "--against", "HEAD")
    assert_one_line_error(result, "--against HEAD", "ABI", "differs")


def test_a_working_tree_whose_abi_differs_from_the_installed_package_is_refused(tmp_path, monkeypatch):
    """The head side is a checkout other than the installed package (a clone): its ABI is checked
    too, not only the ref's (such a head once ran and gave "2 improvements, ratio 0.003")."""
    clone = tmp_path / "clone"
    subprocess.run(["git", "clone", "-q", str(REPO), str(clone)], check=True, capture_output=True)
    abi = clone / "kernels_c" / "sector" / "abi.h"
    old = "int64_t sb_bp_pool_release(void);"
    assert old in abi.read_text()
    abi.write_text(abi.read_text().replace(old, old + "\nint sb_bp_only_in_the_head(void);", 1))  # not committed
    monkeypatch.chdir(clone)
    result = invoke("run", *SMALL, "--kernels", "basic", "--against", "HEAD")
    assert_one_line_error(result, "--against HEAD", "ABI", "of the working tree", "installed sectorbench")


@pytest.mark.parametrize("python", ["3.11.4 and later", "3.11.0 to 3.11.3"])
def test_a_ref_whose_kernels_c_links_outside_is_refused(tmp_path, monkeypatch, python):
    """tarfile's data filter refuses to extract a link out of the tree: one line, not an internal
    error.  Python before 3.11.4 (Debian 12's 3.11.2) has no filter: every --against was an
    internal error there (AttributeError: tarfile has no FilterError); its checks are made by hand."""
    if python.startswith("3.11.0"):
        monkeypatch.delattr(tarfile, "data_filter", raising=False)
    clone = tmp_path / "clone"
    subprocess.run(["git", "clone", "-q", str(REPO), str(clone)], check=True, capture_output=True)
    (clone / "kernels_c" / "sector" / "elsewhere").symlink_to("/etc")
    commit_all(clone, "a link out of the tree")
    monkeypatch.chdir(clone)
    result = invoke("run", *SMALL, "--kernels", "basic", "--against", "HEAD")
    assert_one_line_error(result, "--against: kernels_c/ at", "holds what is not extracted", "elsewhere")


def test_without_tarfiles_filter_a_ref_inside_the_tree_is_extracted(tmp_path, monkeypatch):
    """The hand-made checks of Python before 3.11.4 let a link inside the tree through."""
    monkeypatch.delattr(tarfile, "data_filter", raising=False)
    clone = tmp_path / "clone"
    subprocess.run(["git", "clone", "-q", str(REPO), str(clone)], check=True, capture_output=True)
    (clone / "kernels_c" / "sector" / "same_header.h").symlink_to("nosqrt.h")
    commit_all(clone, "a link inside the tree")
    extracted = against._kernels_at("HEAD", clone, tmp_path / "scratch")
    assert (extracted / "sector" / "same_header.h").read_text() == (
        clone / "kernels_c" / "sector" / "nosqrt.h"
    ).read_text()


def test_against_from_a_removed_directory_is_refused(user_repo, monkeypatch):
    gone = user_repo / "gone"
    gone.mkdir()
    monkeypatch.chdir(gone)
    gone.rmdir()
    result = invoke("run", *SMALL, "--source", str(user_repo / "kernels" / "mine.c"), "--against", "HEAD")
    assert_one_line_error(result, "--against HEAD: the current directory no longer exists")


def _row(kernel: str, verdict: str, ratio: float, p: float = 0.001) -> GateRow:
    return GateRow(kernel, "cc", "-O2", "inline", 1.0, ratio, ratio, ratio, ratio, p, 1 - p, verdict, 0.1)


def test_confirm_keeps_only_regressions_flagged_twice():
    report = GateReport(
        GateConfig(),
        (_row("a", "regression", 1.3), _row("b", "regression", 1.2), _row("c", "unchanged", 1.0)),
        (),
        (),
    )
    asked = []

    def measure_again(keys):
        asked.append({k.kernel for k in keys})
        return GateReport(GateConfig(), (_row("a", "regression", 1.25), _row("b", "inconclusive", 1.02)), (), ())

    confirmed, lines = confirm(report, measure_again)
    assert asked == [{"a", "b"}]  # only the flagged rows, once
    assert [r.verdict for r in confirmed.rows] == ["regression", "inconclusive", "unchanged"]
    assert confirmed.exit_code == 1
    assert any("a [-O2, inline] flagged again" in line for line in lines)
    assert any("b [-O2, inline] flagged" in line and "not a regression" in line for line in lines)
    # in the report too (its table caption, its Markdown), whose figures are now the second
    # measurement's, which the run's JSON (written before) does not hold
    assert all(line in confirmed.warnings for line in lines)
    assert any("saved JSON holds the first" in w for w in confirmed.warnings)


def test_confirm_does_not_remeasure_counts():
    """A row gated on instruction counts (p is NaN) is deterministic: re-measuring changes nothing."""
    report = GateReport(GateConfig(), (_row("a", "regression", 1.3, p=math.nan),), (), ())

    def measure_again(keys):
        raise AssertionError("counts must not be re-measured")

    confirmed, lines = confirm(report, measure_again)
    assert confirmed.exit_code == 1 and lines == []


def _timed(kernel: str, threads: int, seconds: float) -> KernelResult:
    samples = [seconds * (1 + 0.001 * i) for i in range(8)]
    return KernelResult(kernel, "sector", "-O2", "cc", "inline", "ok", samples_s=samples, threads=threads)


def test_confirm_against_a_baseline_keeps_the_reference_rows_of_the_flagged_rows_only(monkeypatch):
    """--confirm --normalize ref: the baseline rows re-gated are the flagged row and ref's row of
    the same build, mode and thread count, not ref's rows at thread counts not re-measured."""
    import sectorbench.cli.measure
    import sectorbench.compare.gate
    from sectorbench.cli.ab import gate_revision
    from sectorbench.measure.runner import RunConfig

    scene = {"kind": "uniform", "family": "sector", "seed": 0, "sectors": 32, "points": 1000}
    baseline = RunResult(scene, {}, {}, [_timed(k, t, 1e-3) for k in ("a", "ref") for t in (1, 2)])
    asked = []

    def measure(config, **_):
        asked.append(config.threads)
        return RunResult(scene, {}, {}, [_timed("a", 1, 1.3e-3), _timed("ref", 1, 1e-3)])

    gated, real_gate = [], sectorbench.compare.gate.gate

    def gate(base, current, config):
        gated.append(report := real_gate(base, current, config))
        return report

    monkeypatch.setattr(sectorbench.cli.measure, "measure", measure)
    monkeypatch.setattr(sectorbench.compare.gate, "gate", gate)
    config = RunConfig(kernels=("a", "ref"), builds=(BuildConfig(("-O2",), "cc"),), threads=(1, 2))
    gate_config = GateConfig(normalize="ref")
    flagged = dataclasses.replace(_row("a", "regression", 1.3), threads=1)
    revise = gate_revision(config, baseline, baseline, gate_config, confirm=True, metric="time")
    confirmed = revise(GateReport(gate_config, (flagged,), (), ()))
    assert asked == [(1,)]
    (again,) = gated  # ref's 2-thread row was not re-measured: gated, it would be a "missing" failure
    flagged_key = RowKey("a", "cc", "-O2", "inline", 1)
    assert again.failures == () and [r.key for r in again.rows] == [flagged_key, flagged_key.with_kernel("ref")]
    assert [(r.key, r.verdict) for r in confirmed.rows] == [(flagged_key, "regression")]


#: A triangle kernel: that family's default set is two kernels, so a run without --kernels
#: (which can name only kernels the head has) stays small.
TRIANGLE_KERNEL = """#include "sb_common.h"
static inline int mine(float ax, float ay, float bx, float by, float cx, float cy, float px, float py) {
    const float o_ab = (bx - ax) * (py - ay) - (by - ay) * (px - ax);
    const float o_bc = (cx - bx) * (py - by) - (cy - by) * (px - bx);
    const float o_ca = (ax - cx) * (py - cy) - (ay - cy) * (px - cx);
    return (o_ab > 0 && o_bc > 0 && o_ca > 0) || (o_ab < 0 && o_bc < 0 && o_ca < 0);
}
SB_KERNEL(mine, SCALAR, 1, (ax, ay, bx, by, cx, cy), .family = "triangle", .summary = "user kernel");
"""


def test_a_kernel_removed_in_the_head_is_listed_and_fails_the_gate(tmp_path, monkeypatch):
    """The working tree renames mine: it is missing in the head, which fails the gate (exit 1)
    and is listed in the Markdown, as regress fails a kernel a saved run lost (it was once
    only a note on stderr, and the gate passed)."""
    repo = tmp_path / "repo"
    repo.mkdir()
    git(repo, "init", "-q")
    source = repo / "mine.c"
    source.write_text(TRIANGLE_KERNEL)
    commit_all(repo, "mine")
    source.write_text(TRIANGLE_KERNEL.replace("mine", "renamed"))
    monkeypatch.chdir(repo)
    markdown = tmp_path / "gate.md"
    result = invoke("run", *SMALL, "--family", "triangle", "--source", str(source), "--against", "HEAD",
                    "--markdown", str(markdown), "--no-confirm")  # fmt: skip
    assert result.exit_code == 1, result.output
    assert "1 failure(s): mine [-O2, inline] missing" in result.output
    text = markdown.read_text()
    assert text.startswith("1 failure, ")
    assert "Missing in head (removed or renamed; each fails the gate):\n\n- mine [-O2, inline]" in text
    assert "New in head (not compared):\n\n- renamed [-O2, inline]" in text


def test_a_head_whose_every_row_crashed_is_the_gates_failure_with_exports_asked(tmp_path, monkeypatch):
    """--export with a head that ran no row: the gate still decides (exit 1, the crash named,
    its Markdown written) and the export is left unwritten, said in one line; "nothing to
    export" (exit 2) came first, and neither the gate nor its Markdown followed."""
    monkeypatch.chdir(tmp_path)
    old, new = tmp_path / "old.c", tmp_path / "new.c"
    old.write_text(USER_KERNEL)
    new.write_text(
        "#include <signal.h>\n" + USER_KERNEL.replace("    const float dx", "    raise(SIGSEGV);\n    const float dx")
    )
    markdown, bmf = tmp_path / "gate.md", tmp_path / "head.bmf.json"
    result = invoke("run", *SMALL, "--source", str(new), "--against-source", str(old), "--kernels", "mine",
                    "--markdown", str(markdown), "--export", f"bmf={bmf}", "--no-confirm")  # fmt: skip
    assert result.exit_code == 1, result.output
    assert "1 failure(s): mine [-O2, inline] crashed" in result.output
    assert markdown.read_text().startswith("1 failure, ")
    assert not bmf.exists() and f"not saved {bmf} (bmf): nothing to export: no row of the result ran" in result.output
    assert not list(tmp_path.glob("rescued-results-*"))


def test_a_base_that_does_not_compile_names_its_side(user_repo):
    """The ref's source does not compile, the working tree's does: the error says it is the base
    side's (it once read "compiling with '-O2' failed:" alone, as if the working tree's)."""
    source = user_repo / "kernels" / "mine.c"
    source.write_text(USER_KERNEL.replace("return (s < r2)", "return (s < r2) +"))
    commit_all(user_repo, "broken")
    source.write_text(USER_KERNEL)
    result = invoke("run", *SMALL, "--source", str(source), "--kernels", "mine", "--against", "HEAD")
    assert result.exit_code == 2, result.output
    lines = result.output.strip().splitlines()
    first = lines[0]
    assert "the base side (HEAD (" in first and "compiling with '-O2' failed" in first, first
    # the compiler's messages quoted under the line, as a head build error's are (they were
    # once on the one line, each newline shown as \n)
    assert "\\n" not in first and "failed: " in first and "mine.c:" in first, first
    assert len(lines) > 1 and all(line.startswith("  ") for line in lines[1:]), lines


def test_an_unknown_ref_in_a_shallow_clone_says_to_fetch_the_history(user_repo, tmp_path, monkeypatch):
    shallow = tmp_path / "shallow"
    git(tmp_path, "clone", "-q", "--depth", "1", user_repo.as_uri(), str(shallow))
    monkeypatch.chdir(shallow)
    result = invoke("run", *SMALL, "--source", str(shallow / "kernels" / "mine.c"), "--against", "HEAD~1")
    assert_one_line_error(result, "--against HEAD~1: unknown ref", "shallow", "fetch-depth: 0")
    result = invoke("run", *SMALL, "--source", str(user_repo / "kernels" / "mine.c"), "--against", "no-such-ref")
    assert_one_line_error(result, "unknown ref")
    assert "shallow" not in result.output  # a full clone: the ref is simply unknown


def test_an_ancestor_past_the_first_commit_says_the_history_is_shorter(user_repo):
    """HEAD~1 of a repository's first commit was a bare "unknown ref"."""
    depth = len(git(user_repo, "rev-list", "HEAD").split())
    with pytest.raises(against.SectorbenchError, match=f"HEAD~{depth}: unknown ref.*HEAD has no such ancestor"):
        against.resolve(f"HEAD~{depth}", user_repo)
    with pytest.raises(against.SectorbenchError) as refused:
        against.resolve("nothing~1", user_repo)
    assert "no such ancestor" not in str(refused.value)  # an unknown start: only unknown


def test_a_full_hash_absent_from_a_shallow_clone_is_an_unknown_ref_to_fetch(user_repo, tmp_path, monkeypatch):
    """CI's `--against ${{ github.event.pull_request.base.sha }}` in a one-commit-deep checkout:
    git takes any full hash without looking it up, and the line was "names a object, not a
    commit", without the advice to fetch the history."""
    base_sha = git(user_repo, "rev-parse", "HEAD~1").strip()
    shallow = tmp_path / "shallow"
    git(tmp_path, "clone", "-q", "--depth", "1", user_repo.as_uri(), str(shallow))
    monkeypatch.chdir(shallow)
    result = invoke("run", *SMALL, "--source", str(shallow / "kernels" / "mine.c"), "--against", base_sha)
    assert_one_line_error(result, f"--against {base_sha}: unknown ref", "shallow", "fetch-depth: 0")


def test_refs_in_any_of_gits_forms_name_their_commit(user_repo):
    """A ":/text" ref (the newest commit whose message matches) and an annotated tag name a commit;
    a blob is said to be one (":/wide" was "names a commit, not a commit": `^{commit}` appended
    to it made it a search for another text)."""
    wide = git(user_repo, "rev-parse", "HEAD~1").strip()
    git(user_repo, "tag", "-a", "-m", "annotated", "v-wide", "HEAD~1")
    assert against.resolve(":/wide", user_repo) == wide
    assert against.resolve("v-wide", user_repo) == wide
    with pytest.raises(against.SectorbenchError, match="names a blob, not a commit"):
        against.resolve("HEAD:kernels/mine.c", user_repo)
    with pytest.raises(against.SectorbenchError, match="--against --all: unknown ref"):
        against.resolve("--all", user_repo)


def test_an_ambiguous_ref_is_refused_naming_what_it_could_be(user_repo):
    """A branch and a tag named alike, or a tag named like the start of a hash: git takes one
    with a warning on stderr, and the gate compared against it as if it were the one meant."""
    git(user_repo, "branch", "dup", "HEAD~1")
    git(user_repo, "tag", "dup", "HEAD")
    with pytest.raises(against.SectorbenchError) as refused:
        against.resolve("dup~1", user_repo)
    assert "dup is ambiguous" in str(refused.value) and "refs/heads/dup and refs/tags/dup" in str(refused.value)
    prefix = git(user_repo, "rev-parse", "--short=8", "HEAD~1").strip()
    git(user_repo, "tag", prefix, "HEAD")
    with pytest.raises(against.SectorbenchError, match=f"refs/tags/{prefix} and an object whose hash begins with"):
        against.resolve(prefix, user_repo)
    assert against.resolve("refs/heads/dup", user_repo) == git(user_repo, "rev-parse", "HEAD~1").strip()


def test_a_source_git_cannot_read_at_the_ref_is_refused_not_taken_for_new(user_repo, tmp_path, monkeypatch):
    """A partial clone (actions/checkout's `filter: blob:none`) whose remote is out of reach has
    the ref's trees but not its files: git show fails.  That was "kernels/mine.c is not in
    HEAD~1: its kernels are new, not compared", and the gate passed, exit 0, comparing nothing."""
    git(user_repo, "config", "uploadpack.allowfilter", "true")
    partial = tmp_path / "partial"
    git(tmp_path, "clone", "-q", "--filter=blob:none", user_repo.as_uri(), str(partial))
    user_repo.rename(tmp_path / "out of reach")
    monkeypatch.chdir(partial)
    source = partial / "kernels" / "mine.c"
    result = invoke("run", *SMALL, "--source", str(source), "--kernels", "mine,basic", "--against", "HEAD~1")
    assert_one_line_error(result, "--against: git could not read kernels/mine.c at", "promisor remote")
    assert "new, not compared" not in result.output
    # a file that is not there at all is still new (listed from the trees the clone has)
    newer = partial / "kernels" / "newer.c"
    newer.write_text(USER_KERNEL.replace("mine", "newer"))
    result = invoke("run", *SMALL, "--source", str(newer), "--kernels", "newer", "--against", "HEAD~1")
    assert "kernels/newer.c is not in HEAD~1: its kernels are new" in result.output


def test_kernels_c_git_cannot_read_at_the_ref_is_said_in_gits_words(tmp_path, monkeypatch):
    """The same in a sectorbench checkout: kernels_c/ is there at the ref but its files are not
    (it was "has no kernels_c/")."""
    full = tmp_path / "full"
    subprocess.run(["git", "clone", "-q", str(REPO), str(full)], check=True, capture_output=True)
    scalar = full / "kernels_c" / "sector" / "scalar.c"
    scalar.write_text(scalar.read_text() + "\n/* edited in the head */\n")
    commit_all(full, "edited")
    git(full, "config", "uploadpack.allowfilter", "true")
    partial = tmp_path / "partial"
    git(tmp_path, "clone", "-q", "--filter=blob:none", full.as_uri(), str(partial))
    full.rename(tmp_path / "out of reach")
    monkeypatch.chdir(partial)
    result = invoke("run", *SMALL, "--kernels", "basic", "--against", "HEAD~1")
    assert_one_line_error(result, "--against: git could not read kernels_c/ at", "promisor remote")


@pytest.mark.parametrize("location", ["GIT_DIR=.git", "GIT_DIR=<absolute>"])
def test_git_dir_in_the_environment_is_read_from_where_sectorbench_runs(user_repo, tmp_path, monkeypatch, location):
    """A pre-push hook sets GIT_DIR=.git; a CI job may set GIT_DIR alone.  git reads them from
    the folder it runs in, and --against ran it in the --source file's folder: with GIT_DIR=.git
    the file was "not in a git checkout"; with an absolute GIT_DIR that folder was the top of the
    work tree, kernels/mine.c was mine.c, "not in HEAD~1: its kernels are new, not compared", and
    the gate passed, exit 0, without comparing it."""
    monkeypatch.setenv("GIT_DIR", ".git" if location == "GIT_DIR=.git" else str(user_repo / ".git"))
    monkeypatch.delenv("GIT_WORK_TREE", raising=False)
    assert_mine_compared_with_head_1(user_repo, tmp_path / "ab.json")


def test_a_source_outside_the_work_tree_the_environment_names_is_refused(user_repo, tmp_path, monkeypatch):
    """GIT_DIR and GIT_WORK_TREE name another repository: one line, not an internal error
    (ValueError: the file is not in the subpath of the work tree)."""
    other = tmp_path / "other"
    other.mkdir()
    git(other, "init", "-q")
    git(other, "-c", "user.email=t@e", "-c", "user.name=t", "commit", "-q", "--allow-empty", "-m", "empty")
    monkeypatch.setenv("GIT_DIR", str(other / ".git"))
    monkeypatch.setenv("GIT_WORK_TREE", str(other))
    result = invoke("run", *SMALL, "--source", str(user_repo / "kernels" / "mine.c"), "--against", "HEAD")
    assert_one_line_error(result, "mine.c is outside the work tree", "GIT_DIR/GIT_WORK_TREE")


def test_the_label_names_the_commit_in_each_repository_read(user_repo, tmp_path):
    """In a sectorbench checkout with a --source file of another project, REF is resolved in
    each: the label named only the checkout's commit, while the file's base was another."""
    clone = tmp_path / "clone"
    subprocess.run(["git", "clone", "-q", str(REPO), str(clone)], check=True, capture_output=True)
    ab = against.against_ref("HEAD~1", (), (user_repo / "kernels" / "mine.c",), tmp_path / "scratch", clone)
    ours, theirs = (git(where, "rev-parse", "HEAD~1").strip()[:10] for where in (clone, user_repo))
    assert ab.label == f"HEAD~1 ({ours} in clone, {theirs} in repo)"
    alone = against.against_ref("HEAD~1", (), (user_repo / "kernels" / "mine.c",), tmp_path / "alone", user_repo)
    assert alone.label == f"HEAD~1 ({theirs})"


def test_uncommitted_changes_on_the_head_side_are_said_and_the_index_is_left_alone(user_repo, tmp_path):
    """The head side is the working tree, uncommitted changes included: a note says so, naming
    them (nothing said it; in CI a step that edits the kernels makes the head other than the
    commit), found without rewriting the index (`git status` refreshes it, GIT_OPTIONAL_LOCKS=0)."""
    source = user_repo / "kernels" / "mine.c"
    same = user_repo / "kernels" / "same.h"
    same.write_text("#define SAME 1\n")
    commit_all(user_repo, "a header")
    index = user_repo / ".git" / "index"
    clean = against.against_ref("HEAD~1", (), (source,), tmp_path / "clean", user_repo)
    assert not any(n.startswith("head:") for n in clean.notes), clean.notes
    source.write_text(source.read_text() + "\n")
    os.utime(same, (same.stat().st_atime + 60, same.stat().st_mtime + 60))  # as after a checkout: content unchanged
    (user_repo / "kernels" / "new.h").write_text("#define NEW 1\n")
    (user_repo / "unrelated.txt").write_text("not compared\n")
    before = index.read_bytes(), index.stat().st_mtime_ns
    dirty = against.against_ref("HEAD~1", (), (source,), tmp_path / "dirty", user_repo)
    assert f"head: the working tree of {user_repo}, with its uncommitted changes (kernels/mine.c, kernels/new.h)" in (
        dirty.notes
    ), dirty.notes
    assert (index.read_bytes(), index.stat().st_mtime_ns) == before


def test_the_headers_beside_the_source_are_read_by_one_git_process(user_repo, tmp_path, monkeypatch):
    """A folder of many headers: each was read by a `git show` of its own (16 s for 3,000 in a
    large repository); they are read together, each as it was at the ref."""
    headers = user_repo / "kernels"
    for number in range(40):
        (headers / f"h{number}.h").write_text(f"#define H{number} {number}\n")
    commit_all(user_repo, "forty headers")
    for number in range(40):
        (headers / f"h{number}.h").write_text(f"#define H{number} changed\n")  # the working tree's
    calls = tmp_path / "calls"
    shim = tmp_path / "bin" / "git"
    shim.parent.mkdir()
    shim.write_text(f'#!/bin/sh\necho "$1" >> "{calls}"\nexec {shutil.which("git")} "$@"\n')
    shim.chmod(0o755)
    monkeypatch.setenv("PATH", f"{shim.parent}{os.pathsep}{os.environ['PATH']}")
    scratch = tmp_path / "scratch"
    against.against_ref("HEAD", (), (headers / "mine.c",), scratch, user_repo)
    assert len(calls.read_text().splitlines()) < 20, calls.read_text()
    taken = scratch / "sources" / "0" / "repo" / "kernels"
    assert all((taken / f"h{n}.h").read_text() == f"#define H{n} {n}\n" for n in range(40))


def test_two_sources_at_the_same_path_in_two_projects_keep_their_own_base(tmp_path, monkeypatch):
    """x/proj/src/mine.c and y/proj/src/mine.c: their REF copies went to one scratch path, the
    second over the first, and the base side defined its kernels twice ("two kernels are named
    other") while the head side had both."""
    sources = []
    for holder, name in (("x", "mine"), ("y", "other")):
        repo = tmp_path / holder / "proj"
        (repo / "src").mkdir(parents=True)
        git(repo, "init", "-q")
        (repo / "src" / "mine.c").write_text(USER_KERNEL.replace("mine", name))
        commit_all(repo, name)
        sources.append(repo / "src" / "mine.c")
    ab = against.against_ref(
        "HEAD", (BuildConfig(extra_sources=tuple(sources)),), tuple(sources), tmp_path / "s", tmp_path
    )
    (base,) = ab.base_builds
    assert len(set(base.extra_sources)) == 2
    assert sorted("SB_KERNEL(other" in p.read_text() for p in base.extra_sources) == [False, True]


def test_a_head_whose_answers_broke_fails_the_gate_where_the_base_was_right(tmp_path, monkeypatch):
    """The base a right kernel, the head the same kernel with half its radius: its answers
    differ from the exact count, the base's do not.  The gate failed nothing (a "hit count"
    warning), and the faster broken kernel would have passed as an improvement."""
    monkeypatch.chdir(tmp_path)
    shutil.copy(REPO / "tests" / "data" / "basic_predicate.h", tmp_path)
    right = (
        '#include "sb_common.h"\n#include "basic_predicate.h"\n'
        "static inline int mine(float cx, float cy, float ux, float uy, float r2, float k, float px, float py) {\n"
        "    return basic_predicate(cx, cy, ux, uy, r2, k, px, py);\n}\n"
        'SB_KERNEL(mine, SCALAR, 1, (cx, cy, ux, uy, r2, cos_theta), .family = "sector", .summary = "x");\n'
    )
    old, new = tmp_path / "old.c", tmp_path / "new.c"
    old.write_text(right)
    new.write_text(right.replace("r2, k, px", "0.5f * r2, k, px"))
    result = invoke("run", *SMALL, "--source", str(new), "--against-source", str(old), "--kernels", "mine,basic",
                    "--no-confirm")  # fmt: skip
    assert result.exit_code == 1, result.output
    assert "1 failure(s): mine [-O2, inline] answers differ;" in result.output, result.output
