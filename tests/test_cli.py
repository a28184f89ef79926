"""The command line through click's CliRunner: real builds, real workers, real files."""

from __future__ import annotations

import json
from pathlib import Path

import pytest
from click.testing import CliRunner

from sectorbench.cli import main
from sectorbench.model.results import SCHEMA_VERSION

DATA = Path(__file__).parent / "data"
SMALL = ["-n", "20", "-m", "500", "--repeat", "2", "--min-time", "0.001"]


def invoke(*args, **kwargs):
    return CliRunner().invoke(main, list(args), **kwargs)


def assert_one_line_error(result, *fragments):
    assert result.exit_code == 2, result.output
    lines = result.output.strip().splitlines()
    assert len(lines) == 1, result.output
    assert "Traceback" not in result.output
    for fragment in fragments:
        assert fragment in lines[0]


def test_run_two_flag_sets_in_one_run(tmp_path):
    out = tmp_path / "run.json"
    result = invoke("run", *SMALL, "--flags", "-O2", "--flags", "-O2 -ffast-math", "--json", str(out))
    assert result.exit_code == 0, result.output
    for kernel in ("naive", "basic", "nosqrt", "bittrick", "sse2", "sse2_nosqrt"):
        assert kernel in result.output
    data = json.loads(out.read_text())
    assert data["schema"] == SCHEMA_VERSION
    assert data["scene"] == {"kind": "uniform", "family": "sector", "seed": 0, "sectors": 20, "points": 500}
    rows = data["results"]
    assert {r["flags"] for r in rows} == {"-O2", "-O2 -ffast-math"}
    assert all("this CPU lacks" in r["reason"] for r in rows if r["status"] == "skipped")  # e.g. AVX-512
    rows = [r for r in rows if r["status"] != "skipped"]
    assert rows and all(r["status"] == "ok" and len(r["samples_s"]) == 2 and r["tests"] == 10000 for r in rows)
    for r in rows:
        assert r["net_s"] >= 0 and r["overhead_s"] > 0 and r["median_s"] > 0
        assert r["hit_rate"] == r["hits"] / r["tests"]
    assert {r["speedup"] for r in rows if r["kernel"] == "naive"} == {1.0}
    assert data["env"]["machine"]["cpu"]["logical_cores"] >= 1
    fp = {tuple(b["flags"]): b["fp_environment"] for b in data["env"]["builds"]}
    assert fp[("-O2",)] == {"denormals_are_zero": False, "flush_to_zero": False, "rounding": "to nearest", "traps": []}


def test_existing_json_is_not_overwritten(tmp_path):
    out = tmp_path / "keep.json"
    out.write_text("precious")
    result = invoke("run", *SMALL, "--flags", "-O2", "--kernels", "basic", "--json", str(out))
    assert_one_line_error(result, "exists", "--force")
    assert out.read_text() == "precious"
    result = invoke("run", *SMALL, "--flags", "-O2", "--kernels", "basic", "--json", str(out), "--force")
    assert result.exit_code == 0 and json.loads(out.read_text())["schema"] == SCHEMA_VERSION


def test_call_mode_and_selection():
    result = invoke("run", *SMALL, "--flags", "-O2", "--kernels", "nosqrt,sse2", "--mode", "call")
    assert result.exit_code == 0, result.output
    assert "nosqrt" in result.output and "sse2" in result.output and "bittrick" not in result.output


@pytest.mark.parametrize(
    "args,fragment",
    [
        (["run", "-n", "0"], "positive"),
        (["run", "-m", "-3"], "positive"),
        (["run", "-n", "100000000000"], "GiB"),
        (["run", "--scene", "nonsense"], "nonsense"),
        (["run", "--kernels", "nope"], "unknown kernel nope"),
        (["run", "--mode", "sideways"], "sideways"),
        (["run", "-n", "ten"], "ten"),
        (["run", "--flags", "-O2 '"], "cannot parse"),
        (["run", "--cc", "no-such-compiler-xyz"], "not found"),
        (["run", "--no-such-option"], "no-such-option"),
        (["export", __file__, "--out", "x.json"], "Missing option '--format'. Choose from: bmf,"),  # listed one a line
    ],
)
def test_bad_input_is_one_line_exit_2(args, fragment):
    assert_one_line_error(invoke(*args), fragment)


def test_no_command_prints_the_help_not_an_error():
    result = invoke()
    assert result.exit_code == 0 and "error" not in result.output, result.output
    assert result.output.startswith("Usage: ") and "Commands:" in result.output


def test_compile_error_prints_compiler_message():
    """One line says what failed and the compiler's first error; its other messages follow,
    quoted as it wrote them (not one line of literal \\n), and once though several units failed
    alike: a compiler whose whole message is that error (gcc's "unrecognized command-line option")
    is not quoted again under it."""
    result = invoke("run", *SMALL, "--flags", "-O2 -fno-such-flag-at-all")
    assert result.exit_code == 2
    first, *quoted = result.stderr.strip().splitlines()
    assert first.startswith("sectorbench: error: compiling with '-O2 -fno-such-flag-at-all' failed: "), first
    cause = first.split("failed: ", 1)[1]
    assert "error:" in cause and "-fno-such-flag-at-all" in first, first
    assert all(line.startswith("  ") for line in quoted), quoted
    assert "\\n" not in result.stderr and "Traceback" not in result.stderr
    assert result.stderr.count(cause) == 1, result.stderr
    assert sum("-fno-such-flag-at-all" in line for line in quoted) <= 1, quoted


def test_disabled_isa_shows_as_skipped():
    result = invoke("run", *SMALL, "--flags", "-O2", "--disable-isa", "sse2", "--kernels", "basic,sse2")
    assert result.exit_code == 0, result.output
    assert "skipped" in result.output and "sse2" in result.output


def test_kernels_lists_support():
    result = invoke("kernels")
    assert result.exit_code == 0
    assert "sse2_nosqrt" in result.output and "yes" in result.output


def test_save_writes_timestamped_file_under_results_of_the_current_directory(monkeypatch, tmp_path):
    monkeypatch.chdir(tmp_path)
    result = invoke("run", *SMALL, "--flags", "-O2", "--kernels", "basic", "--save")
    assert result.exit_code == 0, result.output
    saved = list((tmp_path / "results").glob("run-*.json"))
    assert len(saved) == 1 and json.loads(saved[0].read_text())["results"][0]["kernel"] == "basic"


#: Three rows of conftest.USER_KERNEL's test under hand-picked names.
NAMED_ROWS = """#include "sb_common.h"
static inline int mine(float cx, float cy, float ux, float uy, float r2, float k, float px, float py) {
    const float dx = px - cx, dy = py - cy;
    const float s = dx * dx + dy * dy, a = dx * ux + dy * uy;
    return (s < r2) & (a > 0.0f) & (a * a > s * (k * k));
}
#define MINE(row, label)                                                                          \\
    static inline int row(float cx, float cy, float ux, float uy, float r2, float k, float px, float py) { \\
        return mine(cx, cy, ux, uy, r2, k, px, py);                                               \\
    }                                                                                             \\
    SB_KERNEL(row, SCALAR, 1, (cx, cy, ux, uy, r2, cos_theta), .family = "sector", .name = label)
MINE(quoted, "my \\"k\\"");
MINE(joined, "jo" "ined");
MINE(comma, "a,b");
"""


def test_a_row_is_selected_by_its_name_as_c_spells_it_or_is_an_error_saying_why_not(tmp_path):
    """A row named "my \\"k\\"" was indexed as `my \\` (unknown kernel when named), one named
    "a,b" ran in every default run and could be neither chosen alone nor left out."""
    source = tmp_path / "named.c"
    source.write_text(NAMED_ROWS)
    args = ["run", *SMALL, "--flags", "-O2", "--source", str(source), "--json", str(tmp_path / "r.json")]
    result = CliRunner().invoke(main, [*args, "--kernels", 'my "k",joined,basic'], env={"COLUMNS": "300"})
    assert result.exit_code == 0, result.output
    rows = {row["kernel"]: row for row in json.loads((tmp_path / "r.json").read_text())["results"]}
    assert {rows[name]["status"] for name in ('my "k"', "joined", "basic")} == {"ok"}, rows
    assert rows['my "k"']["hits"] == rows["joined"]["hits"]  # the same test under two names
    listed = CliRunner().invoke(main, ["kernels", "--flags", "-O2", "--source", str(source)], env={"COLUMNS": "300"})
    assert listed.exit_code == 0, listed.output
    line = next(line for line in listed.output.splitlines() if "a,b" in line)
    assert "row error: its name 'a,b'" in line, line
