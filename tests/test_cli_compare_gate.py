"""compare, regress, run --baseline and plot through the CLI, on real (small) runs."""

from __future__ import annotations

import json
import re

import pytest
from click.testing import CliRunner

from sectorbench.cli import main

SMALL = ["-n", "20", "-m", "400", "--repeat", "3", "--min-time", "0.001", "--kernels", "basic,sse2"]


def invoke(*args):
    return CliRunner().invoke(main, list(args))


def slowed(source, into, factor, flags=None, code_changed=False):
    """A copy of a real run with every pass of `basic` `factor` times as long: what the gate
    sees is then known, where two real runs on a shared machine may differ by anything
    (that the gate catches a real -O0 build is `make gate-selftest`'s job, run 5 times).
    Its machine code stays the run's, so the gate calls it unchanged, unless `code_changed`."""
    data = json.loads(source.read_text())
    for row in data["results"]:
        if row["kernel"] == "basic":
            row["samples_s"] = [t * factor for t in row["samples_s"]]
            if code_changed:
                row["code_sha256"] = "0" * 64
        row["flags"] = flags or row["flags"]
    into.write_text(json.dumps(data))
    return into


@pytest.fixture(scope="module")
def saved_runs(tmp_path_factory):
    where = tmp_path_factory.mktemp("runs")
    paths = {}
    for name, flags in (("o2", "-O2"), ("o0", "-O0")):
        paths[name] = where / f"{name}.json"
        # 8 rounds: 3 cannot reach the gate's alpha however large the change
        result = invoke("run", *SMALL, "--repeat", "8", "--flags", flags, "--json", str(paths[name]))
        assert result.exit_code == 0, result.output
    paths["o2b"] = slowed(paths["o2"], where / "o2b.json", 1.1)
    paths["o2_slow"] = slowed(paths["o2"], where / "o2_slow.json", 3.0, flags="-O1", code_changed=True)
    paths["o2_same_code_slow"] = slowed(paths["o2"], where / "o2_same_code_slow.json", 3.0)
    return paths


def test_compare_prints_the_matrix_and_reports_missing_compilers(tmp_path):
    out = tmp_path / "matrix.json"
    result = invoke(
        "compare",
        *SMALL,
        "--flags",
        "-O0",  # built by other tests anyway (any flag set but the other one would do)
        "--flags",
        "-O2 -ffast-math",
        "--cc",
        "cc",
        "--cc",
        "no-such-cc-xyz",
        "--json",
        str(out),
    )
    assert result.exit_code == 0, result.output
    assert "no-such-cc-xyz" in result.output and "not installed" in result.output
    assert "-O2 -ffast-math" in result.output and "×" in result.output
    data = json.loads(out.read_text())
    assert {r["flags"] for r in data["results"]} == {"-O0", "-O2 -ffast-math"}


def test_compare_article_preset_uses_x87_and_sse_builds(tmp_path):
    out = tmp_path / "article.json"
    result = invoke("compare", "--preset", "article", *SMALL, "--json", str(out))
    assert result.exit_code == 0, result.output
    data = json.loads(out.read_text())
    assert data["scene"]["kind"] == "article" and {r["mode"] for r in data["results"]} == {"call"}
    assert "-O2 -mfpmath=387 -ffast-math" in {r["flags"] for r in data["results"]}


def test_regress_passes_10_percent_and_fails_3x_slower(saved_runs, tmp_path):
    same = invoke("regress", str(saved_runs["o2"]), str(saved_runs["o2b"]), "--threshold", "0.5")
    assert same.exit_code == 0, same.output
    markdown = tmp_path / "gate.md"
    slow = invoke(  # another build: rows pair by kernel and mode only
        "regress",
        "--across-builds",
        str(saved_runs["o2"]),
        str(saved_runs["o2_slow"]),
        "--threshold",
        "0.5",
        "--alpha",
        "0.1",
        "--markdown",
        str(markdown),
    )
    assert slow.exit_code == 1, slow.output
    assert "regression" in slow.output and "basic" in slow.output
    lines = markdown.read_text().splitlines()
    summary = re.match(r"(\d+) regressions?, ", lines[0])
    assert summary and int(summary.group(1)) >= 1, lines[0]
    assert any(line.startswith("| basic |") and "**regression**" in line for line in lines), lines
    # Whose flags the rows show, and what they were paired against, is said (the rows showed
    # -O2 on both sides, the -O1 build nowhere).
    (cc,) = {row["cc"] for row in json.loads(saved_runs["o2"].read_text())["results"]}  # $CC, else cc
    paired = f"BASELINE's build {cc} -O2 against CURRENT's {cc} -O1"
    assert paired in " ".join(slow.output.split()) and paired in markdown.read_text(), slow.output


def test_a_3x_slowdown_of_the_same_machine_code_is_never_a_regression(saved_runs):
    data = json.loads(saved_runs["o2"].read_text())
    assert all(len(row["code_sha256"]) == 64 for row in data["results"] if row["status"] == "ok")
    result = invoke("regress", str(saved_runs["o2"]), str(saved_runs["o2_same_code_slow"]), "--alpha", "0.1")
    assert result.exit_code == 0, result.output
    assert "unchanged code" in result.output and "0 regression(s)" in result.output


def test_regress_incompatible_files_exit_2(saved_runs, tmp_path):
    other = tmp_path / "other.json"
    data = json.loads(saved_runs["o2"].read_text())
    data["scene"]["seed"] = 99
    other.write_text(json.dumps(data))
    result = invoke("regress", str(saved_runs["o2"]), str(other))
    assert result.exit_code == 2 and "seed" in result.output
    missing = invoke("regress", str(saved_runs["o2"]), str(saved_runs["o0"]))
    assert missing.exit_code == 2 and "no row in common: BASELINE is -O2, CURRENT -O0" in missing.output
    garbage = tmp_path / "garbage.json"
    garbage.write_text("{not json")
    assert invoke("regress", str(garbage), str(saved_runs["o2"])).exit_code == 2


def test_run_with_baseline_gates(saved_runs):
    result = invoke(
        "run",
        *SMALL,
        "--flags",
        "-O2",
        "--baseline",
        str(saved_runs["o2"]),
        "--threshold",
        "0.5",
        "--normalize",
        "overhead",
    )
    assert result.exit_code == 0, result.output
    assert "regression gate" in result.output


def test_the_normalize_reference_is_shown_and_said_not_gated(saved_runs):
    """basic 3x slower, normalized by basic: divided by itself it read "unchanged, p 1", and
    sse2 an improvement, with no word that basic itself had not been gated."""
    result = invoke("regress", str(saved_runs["o2"]), str(saved_runs["o2_same_code_slow"]), "--normalize", "basic")
    (row,) = [line for line in result.stdout.splitlines() if line.startswith("│ basic ")]
    assert "not gated: reference" in row and " 3.0" in row, row
    text = " ".join(result.stdout.split())
    assert "basic [-O2, inline]: the --normalize reference, not gated" in text and "raw ratio 3.0" in text, text


def test_plot_bar_heatmap_and_trend(saved_runs, tmp_path):
    pytest.importorskip("matplotlib")
    bar = tmp_path / "bar.png"
    assert invoke("plot", str(saved_runs["o2"]), "--out", str(bar)).exit_code == 0
    assert bar.stat().st_size > 1000
    trend = tmp_path / "trend.svg"
    result = invoke("plot", str(saved_runs["o2"]), str(saved_runs["o2b"]), "--kernel", "basic", "--out", str(trend))
    assert result.exit_code == 0, result.output
    assert trend.read_text().lstrip().startswith("<?xml")
    again = invoke("plot", str(saved_runs["o2"]), "--out", str(bar))
    assert again.exit_code == 2 and "exists" in again.output


def test_a_trend_of_the_saved_runs_never_draws_over_one_of_them(saved_runs, tmp_path, monkeypatch):
    """A trend without RESULTS reads results/*.json: an --out leading to one of those (a link)
    had the saved run replaced by the chart, even as it was read for it."""
    pytest.importorskip("matplotlib")
    monkeypatch.chdir(tmp_path)
    (tmp_path / "results").mkdir()
    for name in ("o2", "o2b"):
        (tmp_path / "results" / f"run-{name}.json").write_bytes(saved_runs[name].read_bytes())
    (tmp_path / "t.png").symlink_to(tmp_path / "results" / "run-o2.json")
    result = invoke("plot", "--kernel", "basic", "--out", "t.png", "--force")
    assert result.exit_code == 2 and "same file as the input results/run-o2.json" in result.stderr, result.output
    assert (tmp_path / "results" / "run-o2.json").read_bytes() == saved_runs["o2"].read_bytes()
    assert invoke("plot", "--kernel", "basic", "--out", "trend.png").exit_code == 0  # the trend itself is drawn


def test_a_threshold_on_the_command_line_is_the_default_over_the_files(saved_runs, tmp_path):
    """--thresholds FILE with a default and --threshold: the file's had silently won."""
    toml = tmp_path / "gate.toml"
    toml.write_text("default = 0.10\n[kernels]\nsse2 = 0.5\n")
    both = invoke(
        "regress", str(saved_runs["o2"]), str(saved_runs["o2b"]), "--thresholds", str(toml), "--threshold", "0.9"
    )
    assert "threshold 90%" in both.stdout, both.stdout
    file_only = invoke("regress", str(saved_runs["o2"]), str(saved_runs["o2b"]), "--thresholds", str(toml))
    assert "threshold 10%" in file_only.stdout, file_only.stdout


def test_plot_draws_an_ab_runs_head_rows_as_regress_and_export_take_them(saved_runs, tmp_path):
    """An A/B run (run --against) holds each row twice, a side each: plot refused it as
    "duplicate row" where regress and export take its head rows."""
    pytest.importorskip("matplotlib")
    data = json.loads(saved_runs["o2"].read_text())
    data["results"] = [{**row, "side": side} for row in data["results"] for side in ("base", "head")]
    ab = tmp_path / "ab.json"
    ab.write_text(json.dumps(data))
    for args in ([str(ab)], [str(ab), str(saved_runs["o2"]), "--kernel", "basic"]):
        out = tmp_path / f"chart{len(args)}.png"
        result = invoke("plot", *args, "--out", str(out))
        assert result.exit_code == 0, result.output
        assert "its head rows are taken" in result.stderr and out.stat().st_size > 1000


def test_run_with_baseline_refuses_rounds_that_cannot_reach_alpha(saved_runs, tmp_path, monkeypatch):
    cache = tmp_path / "cache"
    monkeypatch.setenv("SECTORBENCH_CACHE", str(cache))
    result = invoke("run", *SMALL, "--repeat", "1", "--flags", "-O2", "--baseline", str(saved_runs["o2"]))
    assert result.exit_code == 2
    assert "8 vs 1 samples cannot reach alpha = 0.01" in result.output and "rounds against" in result.output
    assert not cache.exists()  # refused before anything was built


def test_run_with_baseline_refuses_a_row_this_machine_cannot_run_before_timing(saved_runs, tmp_path):
    """The baseline's sse2 row measured, this runner without SSE2 (--disable-isa): the run timed
    every other row, then failed the gate on it ("FAILED: skipped", exit 1) as if the code had
    broken it.  Refused now, exit 2, once the build lists its kernels and before any timing
    (the --json a timed run writes before its gate is not written)."""
    out = tmp_path / "current.json"
    result = invoke(
        "run",
        *SMALL,
        "--flags",
        "-O2",
        "--disable-isa",
        "sse2",
        "--baseline",
        str(saved_runs["o2"]),
        "--json",
        str(out),
    )
    assert result.exit_code == 2, result.output
    lines = result.stderr.strip().splitlines()
    assert "sse2 [-O2, inline] is measured in BASELINE but cannot be timed here (needs sse2, disabled by" in lines[-1]
    assert "record the baseline where this job runs" in lines[-1]
    assert not out.exists() and "round" not in result.stderr


def test_regress_refuses_saved_rounds_that_cannot_reach_alpha(saved_runs, tmp_path):
    """A baseline of 2 rounds against 8: no p below 0.01 is possible, so a threefold slowdown
    read "inconclusive" and regress exited 0; run --baseline refuses such rounds before timing."""
    data = json.loads(saved_runs["o2"].read_text())
    for row in data["results"]:
        # Its fastest round twice: below every round of the threefold slowdown, whatever the
        # machine's noise (two of the run's own rounds, 3x apart under load, read p = 0.2).
        row["samples_s"] = [min(row["samples_s"])] * 2
        row["overhead_samples_s"] = (row.get("overhead_samples_s") or [])[:2] or row.get("overhead_samples_s")
    short = tmp_path / "two_rounds.json"
    short.write_text(json.dumps(data))
    slow = slowed(saved_runs["o2"], tmp_path / "slow.json", 3.0, code_changed=True)
    result = invoke("regress", str(short), str(slow))
    assert result.exit_code == 2, result.output
    lines = result.stderr.strip().splitlines()
    assert len(lines) == 1 and "2 vs 8 samples cannot reach alpha = 0.01" in lines[0], lines
    assert invoke("regress", str(short), str(slow), "--alpha", "0.1").exit_code == 1
    # unchanged code needs no test: the same files with the code as it was gate as before
    assert invoke("regress", str(short), str(saved_runs["o2_same_code_slow"])).exit_code == 0


@pytest.mark.parametrize(
    "args",
    [
        ("compare", "--quick", "--kernels", "basic", "--family", "triangle"),
        ("run", *SMALL, "--kernels", "orient", "--scene", "game"),
        ("verify", "--kernels", "basic", "--family", "triangle"),
    ],
)
def test_a_kernel_of_another_family_is_refused_before_anything_is_built(args, tmp_path, monkeypatch):
    cache = tmp_path / "cache"
    monkeypatch.setenv("SECTORBENCH_CACHE", str(cache))
    result = invoke(*args)
    assert result.exit_code == 2 and "is not of the" in result.output
    assert not cache.exists()  # compare --quick used to build three flag sets first


@pytest.mark.parametrize("command", [("run", "-n", "20", "-m", "400"), ("compare", "--quick"), ("verify",)])
def test_kernels_of_several_families_are_refused_before_anything_is_built(command, tmp_path, monkeypatch):
    cache = tmp_path / "cache"
    monkeypatch.setenv("SECTORBENCH_CACHE", str(cache))
    result = invoke(*command, "--kernels", "orient,naive")
    assert result.exit_code == 2 and "names kernels of several families (sector, triangle)" in result.output
    assert not cache.exists()


def test_run_takes_the_family_of_the_named_kernels_as_verify_does(tmp_path):
    """run --kernels orient was refused as 'not of the sector family' while verify took it."""
    out = tmp_path / "r.json"
    result = invoke("run", "-n", "20", "-m", "400", "--repeat", "3", "--kernels", "orient", "--json", str(out))
    assert result.exit_code == 0, result.output
    saved = json.loads(out.read_text())
    assert saved["scene"]["kind"] == "triangles" and {r["kernel"] for r in saved["results"]} == {"orient"}


def test_compare_says_why_a_cell_was_not_measured():
    """The matrix has room for "crashed" only: the reason is a line under it, for each build."""
    from pathlib import Path

    source = Path(__file__).parent / "data" / "crash_kernel.c"
    args = ["-n", "20", "-m", "400", "--repeat", "3", "--min-time", "0.001", "--kernels", "basic,crashes"]
    result = invoke("compare", *args, "--source", str(source), "--flags", "-O2", "--flags", "-O1")
    assert result.exit_code == 0, result.output
    lines = result.stdout.splitlines()
    for build in ("-O2", "-O1"):
        assert any(line.startswith(f"crashes [{build}]: crashed: worker killed by signal") for line in lines), lines


def test_a_trend_over_runs_of_other_scenes_or_cpus_says_so(saved_runs, tmp_path):
    """plot --kernel drew runs of another scene and another CPU as one series, silently."""
    pytest.importorskip("matplotlib")
    data = json.loads(saved_runs["o2"].read_text())
    data["scene"] = {**data["scene"], "sectors": data["scene"]["sectors"] * 2}
    data["env"]["machine"]["cpu"]["model_name"] = "Another CPU"
    other = tmp_path / "other.json"
    other.write_text(json.dumps(data))
    result = invoke("plot", str(saved_runs["o2"]), str(other), "--kernel", "basic", "--out", str(tmp_path / "t.png"))
    assert result.exit_code == 0, result.output
    assert "trend: the runs are of 2 different scenes" in result.stderr
    assert "trend: the runs are of 2 CPUs" in result.stderr and "Another CPU" in result.stderr
    same = invoke(
        "plot", str(saved_runs["o2"]), str(saved_runs["o2b"]), "--kernel", "basic", "--out", str(tmp_path / "s.png")
    )
    assert "trend:" not in same.stderr


def test_a_row_whose_answers_broke_fails_the_gate_and_is_not_exported(saved_runs, tmp_path):
    """basic's count past what rounding allows in CURRENT and not in the baseline: a failure
    whatever its time (the gate passed it with a "hit count" warning, and a broken kernel may
    well be faster); export leaves it out, saying so (a dashboard charted it as any other)."""
    data = json.loads(saved_runs["o2"].read_text())
    for row in data["results"]:
        if row["kernel"] == "basic":
            row["hits"] += 100
    broken = tmp_path / "broken.json"
    broken.write_text(json.dumps(data))
    result = invoke("regress", str(saved_runs["o2"]), str(broken))
    assert result.exit_code == 1, result.output
    assert "1 failure(s): basic [-O2, inline] answers differ; 0 regression(s)" in result.output
    out = tmp_path / "broken.bmf.json"
    exported = invoke("export", str(broken), "--format", "bmf", "--out", str(out))
    assert exported.exit_code == 0, exported.output
    assert list(json.loads(out.read_text())) == ["sector/sse2/-O2/inline/1"]
    assert "not exported: sector/basic/-O2/inline/1: answers differ from the exact oracle's count" in exported.output
    # A baseline whose answers differed and a current that is right: compared, the count said.
    fixed = invoke("regress", str(broken), str(saved_runs["o2"]))
    assert fixed.exit_code == 0 and "hit count" in fixed.output, fixed.output
    # Nothing left to export: refused, saying why.
    for row in data["results"]:
        row["hits"] += 100
    broken.write_text(json.dumps(data))
    refused = invoke("export", str(broken), "--format", "bmf", "--out", str(tmp_path / "none.bmf.json"), "--force")
    assert refused.exit_code == 2 and "every row that ran gave answers that differ" in refused.output, refused.output
