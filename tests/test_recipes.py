"""docs/extending.md's recipes, run as written: a toy family and its kernels from a temporary directory."""

from __future__ import annotations

import json
import os
import re
import subprocess
import sys
from pathlib import Path

from sectorbench.families import BooleanFamily, all_families

README = Path(__file__).resolve().parent.parent / "docs" / "extending.md"


def recipe_files() -> dict[str, str]:
    """The README's code blocks marked `<!-- recipe file: NAME -->`."""
    return dict(re.findall(r"<!-- recipe file: (\S+) -->\n```\w*\n(.*?)```", README.read_text(), re.S))


def sectorbench(args, tmp_path, **env):
    environment = {**os.environ, **env}
    return subprocess.run(
        [sys.executable, "-m", "sectorbench", *args],
        cwd=tmp_path,
        env=environment,
        capture_output=True,
        text=True,
        timeout=300,
    )


def test_add_a_family_recipe_from_a_temporary_directory(tmp_path):
    files = recipe_files()
    assert set(files) == {"toybox.py", "box.c"}
    for name, body in files.items():
        (tmp_path / name).write_text(body)
    env = {"SECTORBENCH_FAMILIES": "toybox", "PYTHONPATH": str(tmp_path)}

    listed = sectorbench(["kernels", "--source", "box.c"], tmp_path, **env)
    assert listed.returncode == 0, listed.stderr
    assert "box_scalar" in listed.stdout and "box_sse2" in listed.stdout

    common = ["--scene", "boxes", "-n", "21", "-m", "301", "--flags", "-O2", "--source", "box.c"]
    ran = sectorbench(
        [
            "run",
            *common,
            "--repeat",
            "2",
            "--min-time",
            "0.001",
            "--mode",
            "inline",
            "--mode",
            "call",
            "--json",
            "run.json",
        ],
        tmp_path,
        **env,
    )
    assert ran.returncode == 0, ran.stderr
    data = json.loads((tmp_path / "run.json").read_text())
    assert data["scene"] == {"kind": "boxes", "family": "box", "seed": 0, "boxes": 21, "points": 301}
    rows = {(r["kernel"], r["mode"]): r for r in data["results"]}
    assert set(rows) == {(k, m) for k in ("box_scalar", "box_sse2") for m in ("inline", "call")}
    assert all(r["status"] == "ok" for r in rows.values())
    assert len({r["hits"] for r in rows.values()}) == 1 and rows[("box_scalar", "inline")]["hits"] > 0

    verified = sectorbench(
        ["verify", "--family", "box", "--source", "box.c", "--cases", "300", "--json", "verify.json"], tmp_path, **env
    )
    assert verified.returncode == 0, verified.stdout + verified.stderr
    verdicts = {k["kernel"]: k["verdict"] for k in json.loads((tmp_path / "verify.json").read_text())["kernels"]}
    assert verdicts == {"box_scalar": "exact", "box_sse2": "exact"}


def test_a_family_module_that_does_not_import_is_one_line(tmp_path):
    result = sectorbench(["kernels"], tmp_path, SECTORBENCH_FAMILIES="no_such_family_module")
    assert result.returncode == 2
    assert result.stderr.count("\n") == 1 and "no_such_family_module" in result.stderr


def test_coverage_of_the_recipe_family_which_declares_no_cells_is_one_line(tmp_path):
    # The recipe's family declares no coverage cells (Family's defaults); verify --coverage on it
    # was "internal error: NotImplementedError" after the first batch was generated.
    for name, body in recipe_files().items():
        (tmp_path / name).write_text(body)
    env = {"SECTORBENCH_FAMILIES": "toybox", "PYTHONPATH": str(tmp_path)}
    result = sectorbench(["verify", "--family", "box", "--coverage", "--cases", "300"], tmp_path, **env)
    assert result.returncode == 2, result.stdout + result.stderr
    assert result.stderr.count("\n") == 1, result.stderr
    assert "internal error" not in result.stderr and "declares no coverage cells" in result.stderr


def test_run_and_compare_of_a_family_with_no_kernel_are_refused_in_one_line(tmp_path):
    # Without box.c the recipe's family has no kernel: run and compare printed an empty table
    # and exited 0 (and wrote it to --json), where verify says "no kernel could be checked".
    for name, body in recipe_files().items():
        (tmp_path / name).write_text(body)
    env = {"SECTORBENCH_FAMILIES": "toybox", "PYTHONPATH": str(tmp_path)}
    tiny = ["--family", "box", "-n", "21", "-m", "301", "--flags", "-O2", "--repeat", "2", "--json", "r.json"]
    for command in ("run", "compare"):
        result = sectorbench([command, *tiny], tmp_path, **env)
        assert result.returncode == 2, result.stdout + result.stderr
        assert result.stderr.strip().splitlines()[-1].startswith("sectorbench: error: no kernel could be timed")
        assert "box family has no default kernels" in result.stderr and "internal error" not in result.stderr
        assert not (tmp_path / "r.json").exists()


def test_the_recipe_family_fails_a_kernel_that_counts_the_sides_as_inside(tmp_path):
    # The recipe's verify cases were random rows only (none on a side) and its oracle marked no
    # row exact: a closed box (>= and <=) passed as "rounding-band", 0 logic bugs, exit 0.
    for name, body in recipe_files().items():
        (tmp_path / name).write_text(body)
    (tmp_path / "closed.c").write_text(
        '#include "sb_common.h"\n'
        "static inline int box_closed(float xmin, float ymin, float xmax, float ymax, float px, float py) {\n"
        "    return (px >= xmin) & (px <= xmax) & (py >= ymin) & (py <= ymax);\n"
        "}\n"
        'SB_KERNEL(box_closed, SCALAR, 1, (xmin, ymin, xmax, ymax), .family = "box");\n'
    )
    env = {"SECTORBENCH_FAMILIES": "toybox", "PYTHONPATH": str(tmp_path)}
    args = ["verify", "--family", "box", "--source", "box.c", "--source", "closed.c", "--cases", "300"]
    result = sectorbench([*args, "--kernels", "box_scalar,box_closed", "--json", "v.json"], tmp_path, **env)
    assert result.returncode == 1, result.stdout + result.stderr
    kernels = {k["kernel"]: k for k in json.loads((tmp_path / "v.json").read_text())["kernels"]}
    assert kernels["box_closed"]["verdict"] == "FAIL" and kernels["box_closed"]["mismatches"]["logic-bug"] > 0
    assert kernels["box_scalar"]["verdict"] == "exact"


def test_the_recipe_family_is_in_the_help_without_a_cli_edit(tmp_path):
    # --family and --scene list the registry; the group's own help named sector, triangle and
    # the aabr's polygons in its docstring only, so a family added as documented never showed there.
    for name, body in recipe_files().items():
        (tmp_path / name).write_text(body)
    env = {"SECTORBENCH_FAMILIES": "toybox", "PYTHONPATH": str(tmp_path), "COLUMNS": "200"}
    top = sectorbench(["--help"], tmp_path, **env)
    assert top.returncode == 0, top.stderr
    builtin = [family.name for family in all_families()]  # this process has no $SECTORBENCH_FAMILIES
    assert re.search(rf"^\s*Families: {', '.join(builtin)}, box\b", top.stdout, re.M), top.stdout
    run = sectorbench(["run", "--help"], tmp_path, **env)
    assert f"--family [{'|'.join(builtin)}|box]" in run.stdout and "|boxes]" in run.stdout, run.stdout


def test_the_kernel_recipe_names_the_attribute_of_every_instruction_set():
    # A vector predicate without its target attribute does not compile at -O2 ("inlining failed in
    # call to always_inline '_mm256_mul_ps': target specific option mismatch"); "Add a kernel"
    # listed the sets but not the attributes, which only the family recipe's box_sse2 showed.
    header = (Path(__file__).resolve().parent.parent / "kernels_c" / "harness" / "sb_common.h").read_text()
    attributes = set(re.findall(r"#define (SB_\w+_ATTR) __attribute__", header))
    assert {"SB_SSE2_ATTR", "SB_AVX2_ATTR", "SB_AVX512_ATTR"} <= attributes
    text = README.read_text()
    section = text[text.index("## Add a kernel") : text.index("## Add a family")]
    assert not [name for name in sorted(attributes) if f"`{name}`" not in section]


def test_the_family_methods_the_doc_names_exist():
    # "A family with more to say overrides" named `exact_boundary`, which no Family has.
    text = README.read_text()
    paragraph = text[text.index("A family with more to say") :].split("\n\n")[0]
    named = re.findall(r"`(\w+)`", paragraph)
    assert "applicable" in named and "self_check" in named
    commands = {"Family", "run", "verify"}  # the paragraph says which command uses what
    assert [name for name in named if name not in commands and not hasattr(BooleanFamily, name)] == []
