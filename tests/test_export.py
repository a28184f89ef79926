"""Exports: each format read back by its consumer (pyperf for real) or checked for what its
readers use (docs/exports.md names them)."""

from __future__ import annotations

import dataclasses
import json
import statistics
import subprocess
import sys

import pytest
from click.testing import CliRunner

from sectorbench.cli import main
from sectorbench.compare.export import FORMATS, benchmark_name, render
from sectorbench.model.results import load

ROUNDS = 6
SMALL = ["-n", "20", "-m", "400", "--repeat", str(ROUNDS), "--min-time", "0.001", "--kernels", "basic,sse2"]


def invoke(*args):
    return CliRunner().invoke(main, [str(a) for a in args])


@pytest.fixture(scope="module")
def runs(tmp_path_factory):
    """Two real runs (same rounds, as pyperf's t-test needs), each exported in every format."""
    where = tmp_path_factory.mktemp("exports")
    out = {}
    for side in ("a", "b"):
        paths = {fmt: where / f"{side}.{fmt}.json" for fmt in FORMATS}
        exports = [arg for fmt, path in paths.items() for arg in ("--export", f"{fmt}={path}")]
        result = invoke("run", *SMALL, "--flags", "-O2", "--json", where / f"{side}.json", *exports)
        assert result.exit_code == 0, result.output
        out[side] = {"json": where / f"{side}.json", **paths}
    return out


def names(result_path):
    run = load(result_path)
    return [f"sector/{r.kernel}/-O2/{r.mode}/1" for r in run.results if r.status == "ok"]


def pyperf(*args):
    command = [sys.executable, "-m", "pyperf", *map(str, args)]
    return subprocess.run(command, capture_output=True, text=True, timeout=120)


def test_pyperf_show_and_compare_to_read_the_export(runs):
    pytest.importorskip("pyperf")
    shown = pyperf("show", "--quiet", runs["a"]["pyperf"])
    assert shown.returncode == 0, shown.stderr
    compared = pyperf("compare_to", runs["a"]["pyperf"], runs["b"]["pyperf"])
    assert compared.returncode == 0, compared.stderr
    for name in names(runs["a"]["json"]):
        assert name in compared.stdout
    assert "ERROR" not in compared.stdout  # its significance test ran on every benchmark


def test_pyperf_values_are_the_samples_per_test(runs):
    pyperf_module = pytest.importorskip("pyperf")
    suite = pyperf_module.BenchmarkSuite.load(str(runs["a"]["pyperf"]))
    rows = {benchmark_name(r): r for r in load(runs["a"]["json"]).results if r.status == "ok"}
    assert sorted(suite.get_benchmark_names()) == sorted(rows)
    for bench in suite.get_benchmarks():
        row = rows[bench.get_name()]
        assert bench.get_unit() == "second" and bench.get_nrun() == ROUNDS
        raw = [value * bench.get_loops() * bench.get_inner_loops() for value in bench.get_values()]
        assert raw == pytest.approx([s * row.calls for s in row.samples_s])  # a sample's whole time


def test_bmf_latency_in_ns_with_its_interval(runs):
    data = json.loads(runs["a"]["bmf"].read_text())
    rows = {benchmark_name(r): r for r in load(runs["a"]["json"]).results if r.status == "ok"}
    assert sorted(data) == sorted(rows)
    for name, measures in data.items():
        latency = measures["latency"]
        assert set(latency) == {"value", "lower_value", "upper_value"}
        assert latency["lower_value"] <= latency["value"] <= latency["upper_value"]
        row = rows[name]
        assert latency["value"] == pytest.approx(statistics.median(row.samples_s) / row.tests * 1e9)
        assert "instructions" not in measures  # none were counted here


def test_bmf_carries_instruction_counts_when_the_row_has_them(runs):
    result = load(runs["a"]["json"])
    counted = dataclasses.replace(result, results=[dataclasses.replace(result.results[0], instructions_per_test=41.5)])
    data = json.loads(render(counted, "bmf"))
    assert list(data.values())[0]["instructions"] == {"value": 41.5}


def test_bmf_carries_valgrinds_counts_when_the_row_has_no_hardware_counters(runs):
    """--metric instructions fills instructions, overhead_instructions and instructions_tests,
    not instructions_per_test (the hardware counters'): the export once dropped them."""
    result = load(runs["a"]["json"])
    row = dataclasses.replace(
        result.results[0], instructions=83_000, overhead_instructions=40_000, instructions_tests=2000
    )
    data = json.loads(render(dataclasses.replace(result, results=[row]), "bmf"))
    assert list(data.values())[0]["instructions"] == {"value": 41.5}  # gross, the whole loop, as the latency


def test_gha_and_gbench_carry_the_counts_a_job_gates_on(runs):
    """A job that gates on valgrind's counts (its runner's times are noisy) charted only those
    noisy times: gha and gbench carried no count (bmf alone did)."""
    result = load(runs["a"]["json"])
    counted = dataclasses.replace(
        result.results[0], instructions=83_000, overhead_instructions=40_000, instructions_tests=2000
    )
    result = dataclasses.replace(result, results=[counted, *result.results[1:]])
    name = benchmark_name(counted)
    gha_entries = {entry["name"]: entry for entry in json.loads(render(result, "gha"))}
    assert gha_entries[f"{name} (instructions)"]["value"] == 41.5
    assert gha_entries[f"{name} (instructions)"]["unit"] == "instructions/test"
    assert "valgrind" in gha_entries[f"{name} (instructions)"]["extra"]
    assert gha_entries[name]["unit"] == "ns/test"  # the time stays under the row's own name
    assert not any(key.endswith("(instructions)") and key != f"{name} (instructions)" for key in gha_entries)
    gbench = json.loads(render(result, "gbench"))["benchmarks"]
    assert {b["instructions_per_test"] for b in gbench if b["name"] == name} == {41.5}
    assert all("instructions_per_test" not in b for b in gbench if b["name"] != name)


def test_gbench_one_object_per_repetition_as_compare_py_reads_it(runs):
    data = json.loads(runs["a"]["gbench"].read_text())
    assert {"date", "num_cpus", "mhz_per_cpu", "library_build_type"} <= set(data["context"])
    benchmarks = data["benchmarks"]
    assert all(b["run_type"] == "iteration" for b in benchmarks)  # no aggregate rows
    for name in names(runs["a"]["json"]):
        mine = [b for b in benchmarks if b["name"] == name]
        assert [b["repetition_index"] for b in mine] == list(range(ROUNDS))
        assert {b["repetitions"] for b in mine} == {ROUNDS}
        for b in mine:
            # what tools/gbench/report.py needs (is_potentially_comparable_benchmark) and
            # github-action-benchmark's googlecpp reads
            assert b["time_unit"] == "ns" and b["real_time"] > 0 and b["cpu_time"] == b["real_time"]
            assert isinstance(b["iterations"], int) and b["iterations"] >= 1 and b["threads"] == 1
            assert {"run_name", "family_index", "per_family_instance_index"} <= set(b)


def test_gha_custom_smaller_is_better_entries(runs):
    data = json.loads(runs["a"]["gha"].read_text())
    rows = {benchmark_name(r): r for r in load(runs["a"]["json"]).results if r.status == "ok"}
    timed = [entry for entry in data if not entry["name"].endswith(" (instructions)")]  # counted where a PMU is
    assert isinstance(data, list) and [entry["name"] for entry in timed] == list(rows)
    for entry in timed:
        assert set(entry) == {"name", "unit", "value", "range", "extra"}
        assert entry["unit"] == "ns/test" and isinstance(entry["value"], float) and entry["value"] > 0
        assert entry["range"].startswith("± ") and "net:" in entry["extra"]


def test_gha_says_a_broadphase_row_is_end_to_end(runs):
    """A broadphase row's net time is its end-to-end time (nothing is subtracted from it), but
    its gha extra said "net: … ns/test (NoOperation loop subtracted)"."""
    run = load(runs["a"]["json"])
    rows = [dataclasses.replace(r, broadphase="grid") if r.kernel == "sse2" else r for r in run.results]
    extras = {e["name"]: e["extra"] for e in json.loads(render(dataclasses.replace(run, results=rows), "gha"))}
    assert extras["sector/sse2/-O2/inline/1"].startswith("end to end (index build + query)")
    assert "subtracted)" not in extras["sector/sse2/-O2/inline/1"]
    assert extras["sector/basic/-O2/inline/1"].startswith("net: ")


def test_names_show_the_compiler_when_a_run_has_several(runs):
    result = load(runs["a"]["json"])
    (built_with,) = {r.cc for r in result.results}  # the default compiler: $CC, else cc
    other_cc = "clang" if built_with != "clang" else "gcc"
    other = [dataclasses.replace(r, cc=other_cc) for r in result.results]
    both = dataclasses.replace(result, results=[*result.results, *other])
    data = json.loads(render(both, "gha"))
    assert f"sector/basic/{built_with} -O2/inline/1" in [entry["name"] for entry in data]
    assert f"sector/basic/{other_cc} -O2/inline/1" in [entry["name"] for entry in data]


def test_a_verify_result_is_named_as_one(tmp_path):
    """export, plot and regress of `verify --json`'s file said "not a sectorbench result (no
    'results')" of sectorbench's own output."""
    verified = tmp_path / "verify.json"
    verified.write_text(json.dumps({"schema": 2, "kind": "verify", "family": "sector", "kernels": []}))
    for args in (
        ("export", verified, "--format", "gha", "--out", tmp_path / "x.json"),
        ("plot", verified, "--out", tmp_path / "x.png"),
        ("regress", verified, verified),
    ):
        result = invoke(*args)
        assert result.exit_code == 2 and result.output.count("\n") == 1, result.output
        assert "verify.json: a verify result (verify --json): give a run's or compare's --json" in result.output
    assert not (tmp_path / "x.json").exists() and not (tmp_path / "x.png").exists()


def test_export_command_writes_the_same_as_run_export(runs, tmp_path):
    for fmt in FORMATS:
        out = tmp_path / f"{fmt}.json"
        result = invoke("export", runs["a"]["json"], "--format", fmt, "--out", out)
        assert result.exit_code == 0, result.output
        assert out.read_text() == runs["a"][fmt].read_text()


def test_export_command_refuses_bad_input_in_one_line(runs, tmp_path):
    existing = tmp_path / "exists.json"
    existing.write_text("keep")
    refused = invoke("export", runs["a"]["json"], "--format", "bmf", "--out", existing)
    assert refused.exit_code == 2 and "exists" in refused.output and existing.read_text() == "keep"
    assert invoke("export", runs["a"]["json"], "--format", "bmf", "--out", existing, "--force").exit_code == 0
    unknown = invoke("export", runs["a"]["json"], "--format", "csv", "--out", tmp_path / "x.json")
    assert unknown.exit_code == 2 and "csv" in unknown.output
    data = json.loads(runs["a"]["json"].read_text())
    for row in data["results"]:
        row["status"], row["samples_s"] = "skipped", []
    nothing = tmp_path / "nothing.json"
    nothing.write_text(json.dumps(data))
    empty = invoke("export", nothing, "--format", "pyperf", "--out", tmp_path / "p.json")
    assert empty.exit_code == 2 and "nothing to export" in empty.output
    assert "Traceback" not in empty.output


@pytest.mark.parametrize(
    "export, message",
    [("pyperf", "FORMAT=PATH"), ("csv=out.csv", "unknown format 'csv'"), ("gha=SAME", "same file")],
)
def test_run_refuses_a_bad_export_before_measuring(tmp_path, export, message, monkeypatch):
    cache = tmp_path / "cache"
    monkeypatch.setenv("SECTORBENCH_CACHE", str(cache))
    same = tmp_path / "same.json"
    result = invoke("run", *SMALL, "--json", same, "--export", export.replace("SAME", str(same)))
    assert result.exit_code == 2 and message in result.output, result.output
    assert not cache.exists()  # nothing was built


def test_pyperf_stats_reads_the_export_of_a_result_whose_time_is_not_iso(runs, tmp_path):
    """A saved result's `created` is any string: "yesterday" went into pyperf's `date`, and
    `pyperf stats` (datetime.fromisoformat) stopped with a traceback."""
    pytest.importorskip("pyperf")
    data = json.loads(runs["a"]["json"].read_text())
    path = tmp_path / "pyperf.json"
    for created, date in (("yesterday", None), ("2024-05-01T10:00:00Z", "2024-05-01T10:00:00+00:00")):
        data["created"] = created
        (tmp_path / "r.json").write_text(json.dumps(data))
        assert invoke("export", tmp_path / "r.json", "--format", "pyperf", "--out", path, "--force").exit_code == 0
        assert json.loads(path.read_text())["metadata"].get("date") == date  # as any Python's fromisoformat reads it
        stats = pyperf("stats", path)
        assert stats.returncode == 0 and "Traceback" not in stats.stderr, stats.stderr


def test_an_export_of_a_run_where_no_row_ran_leaves_no_rescue_beside_the_saved_json(tmp_path, monkeypatch):
    """The results were saved in --json's file, and a rescue copy of them came with the line
    "nothing to export ...; the results are saved in rescued-results-....json", as if they had
    been saved nowhere else."""
    from pathlib import Path

    monkeypatch.chdir(tmp_path)
    crashing = Path(__file__).parent / "data" / "crash_kernel.c"
    args = ["run", "-n", "20", "-m", "500", "--repeat", "2", "--flags", "-O2", "--source", crashing]
    result = invoke(*args, "--kernels", "crashes", "--json", "only.json", "--export", "gha=x.json")
    assert result.exit_code == 2, result.output
    assert "nothing to export" in result.output and "saved in only.json" in result.output, result.output
    assert sorted(path.name for path in tmp_path.iterdir()) == ["only.json"]
