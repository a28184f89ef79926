"""Tests for sectorbench.compare.gate, on synthetic runs (no compiler needed)."""

from __future__ import annotations

import copy
import dataclasses
import json

import numpy as np
import pytest

from sectorbench.compare.gate import (
    OTHER_MACHINE_ADVICE,
    GateConfig,
    GateReport,
    IncompatibleResults,
    RowKey,
    gate,
    load_thresholds,
)
from sectorbench.errors import SectorbenchError
from sectorbench.model import results
from sectorbench.model.results import KernelResult, RunResult
from sectorbench.present.report import gate_markdown as markdown
from sectorbench.present.report import ms_significant as _ms

# kernel -> (median seconds per pass, its NoOperation kernel)
KERNELS = {
    "naive": (12e-3, "noop"),
    "precomputed": (9e-3, "noop"),
    "branchless": (7e-3, "noop"),
    "sse2": (3e-3, "noop_simd"),
    "avx2": (1.8e-3, "noop_simd"),
    "avx512": (1.1e-3, "noop_simd"),
}
OVERHEADS = {"noop": 1.5e-3, "noop_simd": 0.5e-3}
SCENE = {"kind": "uniform", "family": "sector", "seed": 0, "sectors": 1000, "points": 4000}


def machine(model="Intel(R) Xeon(R) Platinum 8375C CPU @ 2.90GHz"):
    return {
        "time_utc": "2024-01-01T00:00:00+00:00",
        "cpu": {
            "vendor": "GenuineIntel",
            "model_name": model,
            "family": 6,
            "model": 106,
            "stepping": 6,
            "isa": ["avx", "avx2", "sse2"],
            "logical_cores": 4,
            "nominal_mhz": 2900.0,
            "measured_mhz": 2895.1,
            "governor": None,
            "boost": None,
        },
        "virtualization": {"hypervisor": "kvm", "container": None},
        "os": {"system": "Linux", "release": "6.1.0", "machine": "x86_64"},
        "python": {"implementation": "CPython", "version": "3.11.2"},
        "packages": {"numpy": "1.26.4", "cffi": "1.16.0", "click": "8.1.7", "rich": "13.7.1"},
        "sectorbench": {"commit": "abc", "dirty": False},
    }


def compiler(version="cc (Debian 12.2.0-14) 12.2.0"):
    return {
        "cc": "cc",
        "path": "/usr/bin/cc",
        "version_line": version,
        "version_text": version,
        "march_native": {"style": "gcc", "march": "icelake-server", "features": ["avx2", "sse2"]},
    }


def noisy(rng, n, scale, sigma, outlier_rate):
    """Lognormal noise plus occasional upward interference spikes."""
    times = scale * np.exp(rng.normal(0.0, sigma, n))
    spikes = rng.random(n) < outlier_rate
    times[spikes] *= rng.uniform(1.1, 1.6, spikes.sum())
    return times


def make_run(
    seed,
    n=10,
    slow=None,
    drift=1.0,
    sigma=0.02,
    round_sigma=0.015,
    outlier_rate=0.05,
    kernels=KERNELS,
    flags="-O2",
    mode="inline",
    scene=None,
    env=None,
) -> RunResult:
    """A synthetic run: every round shares a machine-speed factor (drift x lognormal
    round_sigma), each kernel and NoOperation adds its own noise; `slow` maps kernels
    to a real slowdown factor."""
    rng = np.random.default_rng(seed)
    slow = slow or {}
    round_factor = drift * np.exp(rng.normal(0.0, round_sigma, n))
    overhead = {name: noisy(rng, n, t, sigma, outlier_rate) * round_factor for name, t in OVERHEADS.items()}
    rows = []
    for name, (t, noop) in kernels.items():
        samples = noisy(rng, n, t * slow.get(name, 1.0), sigma, outlier_rate) * round_factor
        rows.append(
            KernelResult(
                kernel=name,
                family="sector",
                flags=flags,
                cc="cc",
                mode=mode,
                status="ok",
                hits=123_456,
                tests=4_000_000,
                hit_rate=123_456 / 4e6,
                calls=1,
                samples_s=samples.tolist(),
                median_s=float(np.median(samples)),
                min_s=float(samples.min()),
                overhead_kernel=noop,
                overhead_samples_s=overhead[noop].tolist(),
                overhead_s=float(np.median(overhead[noop])),
            )
        )
    return RunResult(
        scene=dict(scene or SCENE),
        env=env or {"machine": machine(), "compilers": {"cc": compiler()}},
        config={"repeat": n},
        results=rows,
    )


def replace_row(run: RunResult, kernel: str, **changes) -> RunResult:
    rows = [dataclasses.replace(r, **changes) if r.kernel == kernel else r for r in run.results]
    return dataclasses.replace(run, results=rows)


def names(rows) -> set[str]:
    return {r.kernel for r in rows}


# ------------------------------------------------------------ false alarms


def test_identical_distributions_rarely_alarm():
    alarms = 0
    for trial in range(100):
        report = gate(make_run(2 * trial), make_run(2 * trial + 1), GateConfig())
        assert len(report.rows) == len(KERNELS)
        alarms += report.exit_code
    assert alarms <= 1, f"{alarms} false alarms in 100 trials"


def test_identical_distributions_with_normalize_rarely_alarm():
    alarms = sum(
        gate(make_run(1000 + 2 * t), make_run(1001 + 2 * t), GateConfig(normalize="overhead")).exit_code
        for t in range(100)
    )
    assert alarms <= 1


# ------------------------------------------------------------ detection


def test_one_kernel_20_percent_slower_is_named():
    report = gate(make_run(1), make_run(2, slow={"sse2": 1.2}), GateConfig())
    assert names(report.regressions) == {"sse2"}
    assert report.exit_code == 1
    (row,) = report.regressions
    assert row.key == RowKey("sse2", "cc", "-O2", "inline")
    assert row.ratio == pytest.approx(1.2, rel=0.05)
    assert row.low > 1.10 and row.p_slower < 0.01 and row.threshold == 0.10
    others = [r for r in report.rows if r.kernel != "sse2"]
    assert all(r.verdict in ("unchanged", "inconclusive") for r in others)
    assert not report.improvements


def test_20_percent_faster_is_an_improvement_not_a_failure():
    report = gate(make_run(3), make_run(4, slow={"avx2": 1 / 1.2}), GateConfig())
    assert names(report.improvements) == {"avx2"}
    assert report.exit_code == 0


def test_3_percent_slower_is_not_a_regression_at_10_percent():
    report = gate(make_run(5), make_run(6, slow={"naive": 1.03}), GateConfig())
    assert report.exit_code == 0
    assert next(r for r in report.rows if r.kernel == "naive").verdict != "regression"


def test_per_kernel_threshold_file(tmp_path):
    path = tmp_path / "thresholds.toml"
    path.write_text("default = 0.10\n[kernels]\nsse2 = 0.02\nnaive = 0.25\n")
    thresholds = load_thresholds(path)
    assert thresholds == {"default": 0.10, "sse2": 0.02, "naive": 0.25}
    config = GateConfig.from_thresholds(thresholds)
    assert config.threshold == 0.10 and config.per_kernel == {"sse2": 0.02, "naive": 0.25}

    quiet = dict(sigma=0.005, round_sigma=0.003, outlier_rate=0.0)
    base = make_run(7, **quiet)
    current = make_run(8, slow={"sse2": 1.05, "avx2": 1.05}, **quiet)
    report = gate(base, current, config)
    assert names(report.regressions) == {"sse2"}
    by_kernel = {r.kernel: r for r in report.rows}
    assert by_kernel["sse2"].threshold == 0.02
    assert by_kernel["avx2"].threshold == 0.10 and by_kernel["avx2"].verdict != "regression"
    assert by_kernel["naive"].threshold == 0.25
    # The same slowdown with the default threshold everywhere: no regression.
    assert gate(base, current, GateConfig()).exit_code == 0


# ------------------------------------------------------------ normalisation


def test_machine_drift_without_and_with_normalize():
    # n=20: at n=10 a 15 % drift clears the 10 % bar only about half the time.
    base, current = make_run(9, n=20), make_run(10, n=20, drift=1.15)
    assert names(gate(base, current, GateConfig()).regressions) == set(KERNELS)
    for reference in ("overhead", "naive", "avx512"):
        report = gate(base, current, GateConfig(normalize=reference))
        assert report.exit_code == 0, (reference, [(r.kernel, r.verdict, r.low) for r in report.rows])
        assert len(report.rows) == len(KERNELS)


def test_normalize_finds_the_real_regression_under_drift():
    # n=20: normalising adds the reference's noise; at n=10 the 20 % slowdown is
    # called inconclusive in about 1 of 10 seeds.
    base, current = make_run(11, n=20), make_run(12, n=20, drift=1.15, slow={"branchless": 1.2})
    for reference in ("overhead", "naive"):
        report = gate(base, current, GateConfig(normalize=reference))
        assert names(report.regressions) == {"branchless"}, reference
        row = report.regressions[0]
        assert row.ratio == pytest.approx(1.2, rel=0.05)
        # Medians stay raw seconds: both drift and slowdown show there.
        assert row.current_median_s / row.baseline_median_s == pytest.approx(1.38, rel=0.06)


def test_normalize_reference_row_is_not_gated_and_missing_reference_is_incompatible():
    from sectorbench.compare.gate import NORMALIZE_REFERENCE

    base, current = make_run(13), make_run(14, slow={"naive": 3.0})
    report = gate(base, current, GateConfig(normalize="naive"))
    reference = next(r for r in report.rows if r.kernel == "naive")
    # divided by itself it is 1: shown raw (its threefold slowdown), its verdict says it is not gated
    assert reference.verdict == NORMALIZE_REFERENCE and reference.ratio == pytest.approx(3.0, rel=0.1)
    assert any(w.startswith("naive [-O2, inline]: the --normalize reference, not gated") for w in report.warnings)
    assert reference not in report.regressions and reference not in report.unchanged
    with pytest.raises(IncompatibleResults, match="cannot normalize by nosuch"):
        gate(base, current, GateConfig(normalize="nosuch"))
    crashed = replace_row(current, "naive", status="crashed", reason="SIGSEGV", samples_s=[])
    failed = gate(base, crashed, GateConfig(normalize="naive"))  # a crashed reference fails, never passes
    assert failed.exit_code == 1 and not failed.rows
    assert {(f.key.kernel, f.status) for f in failed.failures} == {("naive", "crashed")} | {
        (kernel, "not compared") for kernel in KERNELS if kernel != "naive"
    }
    no_overhead = replace_row(base, "sse2", overhead_samples_s=[])
    with pytest.raises(IncompatibleResults, match=r"sse2 \[-O2, inline\] has no NoOperation samples in BASELINE"):
        gate(no_overhead, current, GateConfig(normalize="overhead"))


# ------------------------------------------------------------ incompatibility


@pytest.mark.parametrize(
    "field, value", [("kind", "article"), ("family", "triangle"), ("seed", 7), ("sectors", 999), ("points", 10)]
)
def test_different_scene_names_the_field_and_both_values(field, value):
    current = make_run(16, scene={**SCENE, field: value})
    with pytest.raises(IncompatibleResults) as info:
        gate(make_run(15), current, GateConfig())
    message = str(info.value)
    assert field in message and repr(SCENE[field]) in message and repr(value) in message
    assert "\n" not in message


def test_different_schema():
    current = dataclasses.replace(make_run(18), schema=results.SCHEMA_VERSION + 1)
    with pytest.raises(IncompatibleResults, match="schema"):
        gate(make_run(17), current, GateConfig())


def test_an_older_schema_loads_but_is_never_compared_with_a_newer_one():
    """Schema 1 (before threads and the per-loop NoOperation) still loads, for trend plots;
    its net times measured another thing, so the gate refuses to compare across schemas."""
    old = RunResult.from_dict({**make_run(21).to_dict(), "schema": 1})
    assert old.schema == 1
    with pytest.raises(IncompatibleResults, match="different results schema: 1 .* 2.*record BASELINE again"):
        gate(old, make_run(22), GateConfig())
    with pytest.raises(SectorbenchError, match="unsupported results schema 99 .*reads schemas 1, 2"):
        RunResult.from_dict({**make_run(23).to_dict(), "schema": 99})


def test_missing_kernel_in_current_fails_the_gate():
    current = make_run(20, kernels={k: v for k, v in KERNELS.items() if k != "naive"})
    report = gate(make_run(19), current, GateConfig())
    assert [(f.key.kernel, f.status) for f in report.failures] == [("naive", "missing")]
    assert report.exit_code == 1 and not report.regressions
    # IncompatibleResults is a SectorbenchError, so the CLI reports it on one line.
    assert issubclass(IncompatibleResults, SectorbenchError)


@pytest.mark.parametrize("status", ["crashed", "timed-out", "skipped"])
def test_a_kernel_ok_in_the_baseline_that_stopped_working_fails_the_gate(status):
    current = replace_row(make_run(31), "sse2", status=status, reason="SIGSEGV", samples_s=[])
    report = gate(make_run(30), current, GateConfig())
    assert [(f.key.kernel, f.status, f.reason) for f in report.failures] == [("sse2", status, "SIGSEGV")]
    assert report.exit_code == 1
    from sectorbench.present.report import gate_markdown

    markdown = gate_markdown(report)
    assert markdown.splitlines()[0].startswith("1 failure, ")
    assert any(line.startswith("| sse2 |") and f"FAILED: {status} (SIGSEGV)" in line for line in markdown.splitlines())


def test_a_row_the_current_machine_cannot_run_is_refused_not_failed():
    """A baseline from a CPU with AVX-512 against a run on one without: its AVX-512 row is
    skipped there, which says what the machine is, not what the code does.  It failed the gate
    (exit 1, "FAILED: skipped") as a kernel that stopped working; now it is refused (exit 2),
    saying why and what to do.  A row skipped for anything else still fails."""
    from sectorbench.model.kernels import skip_reason

    for reason in (
        skip_reason(("avx512f",), {"avx512f": False}, frozenset()),
        skip_reason(("avx512f",), {"avx512f": True}, frozenset({"avx512f"})),
    ):
        current = replace_row(make_run(37), "avx512", status="skipped", reason=reason, samples_s=[])
        said = r"avx512 \[-O2, inline\] is measured in BASELINE but cannot"
        with pytest.raises(IncompatibleResults, match=said) as exc:
            gate(make_run(36), current, GateConfig())
        assert reason in str(exc.value) and "record the baseline where this job runs" in str(exc.value)
    other = replace_row(make_run(37), "avx512", status="skipped", reason="needs avx512f", samples_s=[])
    assert [f.status for f in gate(make_run(36), other, GateConfig()).failures] == ["skipped"]


def test_an_empty_or_unmeasured_baseline_is_refused():
    empty = dataclasses.replace(make_run(32), results=[])
    with pytest.raises(IncompatibleResults, match="BASELINE has no rows"):
        gate(empty, make_run(33), GateConfig())
    run = make_run(34)
    crashed = dataclasses.replace(run, results=[dataclasses.replace(r, status="crashed") for r in run.results])
    with pytest.raises(IncompatibleResults, match=r"BASELINE has no measured \(ok\) row \(crashed only\)"):
        gate(crashed, make_run(35), GateConfig())


def test_different_build_names_the_compiler_flags_and_count():
    base = make_run(21, flags="-O2")
    current = make_run(22, flags="-O3")
    # not "missing kernel …", which elsewhere is a kernel a run lost (a failure, exit 1)
    with pytest.raises(IncompatibleResults, match=r"no row in common: BASELINE is -O2, CURRENT -O3 .*--across-builds"):
        gate(base, current, GateConfig())


def test_same_build_with_nothing_in_common_names_what_differs_not_across_builds():
    """Two runs of one build that share no kernel (or no mode) are refused saying so: the line
    was "BASELINE is -O2, CURRENT -O2 (two builds: regress --across-builds ...)", advice that
    cannot help, given even to a regress that had --across-builds."""
    scalar = {name: KERNELS[name] for name in ("naive", "precomputed")}
    simd = {name: KERNELS[name] for name in ("sse2", "avx2")}
    with pytest.raises(IncompatibleResults) as refused:
        gate(make_run(41, kernels=scalar), make_run(42, kernels=simd), GateConfig())
    said = str(refused.value)
    assert said == "no row in common: both -O2, but BASELINE has kernels naive, precomputed and CURRENT avx2, sse2"
    with pytest.raises(IncompatibleResults) as refused:
        gate(make_run(43, mode="inline"), make_run(44, mode="call"), GateConfig())
    assert "both -O2, but BASELINE has modes inline and CURRENT call" in str(refused.value)
    empty = dataclasses.replace(make_run(45), results=[])
    with pytest.raises(IncompatibleResults, match=r"^no row in common: CURRENT has no rows$"):
        gate(make_run(46), empty, GateConfig())


def test_hundreds_of_rounds_a_side_are_gated_not_an_overflow(tmp_path):
    """--repeat goes to 1000: from about 515 rounds a side C(n + m, n) is past a float, and the
    power check's 1.0 / C raised OverflowError (run --against --repeat 600: "internal error")."""
    from click.testing import CliRunner

    from sectorbench.cli import main
    from sectorbench.compare.gate import check_ab_rounds, check_power

    check_ab_rounds(1000, 0.01)
    base, current = make_run(51, n=600), make_run(52, n=600)
    check_power(base, 600, 0.01)
    paths = []
    for name, run in (("base.json", base), ("current.json", current)):
        paths.append(tmp_path / name)
        paths[-1].write_text(json.dumps(run.to_dict()))
    result = CliRunner().invoke(main, ["regress", *map(str, paths)])
    assert result.exit_code == 0, result.output
    assert "0 regression(s)" in result.output


# ------------------------------------------------------------ warnings, new kernels


def test_environment_warning_when_cpu_model_differs():
    env = {"machine": machine("AMD EPYC 7R13 Processor"), "compilers": {"cc": compiler("cc (GCC) 13.1")}}
    report = gate(make_run(23), make_run(24, env=env), GateConfig())
    assert any("cpu.model_name" in w and "AMD EPYC" in w for w in report.warnings)
    assert any(w.startswith("compiler cc:") and "version_line" in w for w in report.warnings)
    assert all("\n" not in w for w in report.warnings)
    # Same environment, volatile fields aside: no warnings.
    env2 = copy.deepcopy(make_run(25).env)
    env2["machine"]["cpu"]["measured_mhz"] = 3100.0
    env2["machine"]["time_utc"] = "2025-01-01T00:00:00+00:00"
    assert gate(make_run(23), make_run(24, env=env2), GateConfig()).warnings == ()


def test_rows_not_ok_on_one_side_warn_and_new_kernels_listed():
    base = replace_row(make_run(26), "avx512", status="skipped", reason="needs avx512f", samples_s=[])
    current = replace_row(
        make_run(27, kernels={**KERNELS, "fancy": (2e-3, "noop_simd")}),
        "sse2",
        status="crashed",
        reason="SIGILL",
        samples_s=[],
    )
    report = gate(base, current, GateConfig(per_kernel={"sse3": 0.05}))
    assert names(report.rows) == set(KERNELS) - {"avx512", "sse2"}
    assert report.new_kernels == (RowKey("fancy", "cc", "-O2", "inline"),)
    assert any("avx512 [-O2, inline]: skipped in BASELINE (needs avx512f)" in w for w in report.warnings)
    assert [(f.key.kernel, f.status) for f in report.failures] == [("sse2", "crashed")]
    assert any("'sse3'" in w for w in report.warnings)  # a threshold for no kernel: likely a typo


def test_the_console_gate_table_names_its_sides_and_the_new_kernels():
    """The Markdown named both sides and listed the kernels new in the current run; the console's
    table did neither (a kernel added in an A/B run's head was left out without a word)."""
    from rich.console import Console

    from sectorbench.present.report import gate_table

    report = gate(make_run(26), make_run(27, kernels={**KERNELS, "fancy": (2e-3, "noop_simd")}), GateConfig())
    console = Console(width=300, record=True)
    console.print(gate_table(report, "base HEAD~1 (0123456789)", "head"))
    text = console.export_text()
    assert "baseline: base HEAD~1 (0123456789); current: head" in text
    assert "new in current, not compared: fancy [-O2, inline]" in text


def test_hit_count_change_warns():
    current = replace_row(make_run(29), "naive", hits=123_457)
    report = gate(make_run(28), current, GateConfig())
    assert any("hit count 123456 in BASELINE vs 123457 in CURRENT" in w for w in report.warnings)


# ------------------------------------------------------------ thresholds file, config


@pytest.mark.parametrize(
    "text, expected",
    [
        ("default = [", "not valid TOML"),
        ("defualt = 0.1\n", "unknown key 'defualt'"),
        ("[kernels]\nnaive = 'fast'\n", "kernels.naive must be a number"),
        ("[kernels]\nnaive = 25\n", "fraction (0.25 means 25 %)"),
        ("default = -0.1\n", "default must be a fraction >= 0"),
        ("kernels = 3\n", "'kernels' must be a table"),
    ],
)
def test_bad_thresholds_file(tmp_path, text, expected):
    path = tmp_path / "t.toml"
    path.write_text(text)
    with pytest.raises(SectorbenchError) as info:
        load_thresholds(path)
    assert expected in str(info.value) and str(path) in str(info.value)
    assert "\n" not in str(info.value)


def test_missing_thresholds_file(tmp_path):
    with pytest.raises(SectorbenchError, match="no such file"):
        load_thresholds(tmp_path / "nope.toml")


def test_thresholds_file_without_default(tmp_path):
    path = tmp_path / "t.toml"
    path.write_text("[kernels]\nnaive = 0.25\n")
    assert load_thresholds(path) == {"naive": 0.25}
    assert GateConfig.from_thresholds(load_thresholds(path), alpha=0.05).threshold == 0.10


@pytest.mark.parametrize(
    "kwargs",
    [
        {"alpha": 0.0},
        {"alpha": 0.5},
        {"threshold": -0.1},
        {"per_kernel": {"naive": 10}},
        {"per_kernel": {"default": 0.1}},
        {"normalize": ""},
    ],
)
def test_bad_config(kwargs):
    with pytest.raises(SectorbenchError):
        GateConfig(**kwargs)


# ------------------------------------------------------------ markdown, round trip


def test_markdown_summary_table_and_warnings():
    env = {"machine": machine("AMD EPYC 7R13 Processor"), "compilers": {"cc": compiler()}}
    report = gate(make_run(30), make_run(31, slow={"sse2": 1.2, "naive": 1.25}, env=env), GateConfig())
    text = markdown(report, "main", "PR #12")
    lines = text.splitlines()
    counts = (len(report.regressions), len(report.improvements), len(report.unchanged))
    assert counts[0] == 2
    assert lines[0].startswith(f"2 regressions, {counts[1]} improvement")
    assert f"{counts[2]} unchanged" in lines[0] and "(α = 0.01, threshold 10 %" in lines[0]
    assert "| kernel | flags | mode | main ms | PR #12 ms | ratio [98 % interval] | p | verdict |" in text
    table = [line for line in lines if line.startswith("| ") and "---" not in line]
    assert len(table) == 1 + len(KERNELS)
    sse2 = next(line for line in table if line.startswith("| sse2 "))
    assert "**regression**" in sse2 and "| -O2 | inline |" in sse2
    assert any(line.startswith("- machine: critical: cpu.model_name") for line in lines)
    assert text.index("Warnings:") > text.index("| sse2 ")


def test_times_of_two_machines_get_one_line_of_advice():
    """A runner that changed hardware gated its times against the baseline's with only the
    fingerprint's differences listed: one line now says what to do; none where the times are
    normalised in their own rounds, or where the machine is the same."""
    other = {"machine": machine("AMD EPYC 7R13 Processor"), "compilers": {"cc": compiler()}}
    advice = [
        w for w in gate(make_run(30), make_run(31, env=other), GateConfig()).warnings if "different machines" in w
    ]
    assert advice == [OTHER_MACHINE_ADVICE] and "run --against REF" in advice[0]
    normalized = gate(make_run(30), make_run(31, env=other), GateConfig(normalize="overhead"))
    assert not any("different machines" in w for w in normalized.warnings)
    assert not any("different machines" in w for w in gate(make_run(30), make_run(31), GateConfig()).warnings)


def test_markdown_singular_and_normalize_note():
    report = gate(make_run(32), make_run(33, slow={"avx2": 1 / 1.25}), GateConfig(normalize="overhead"))
    first = markdown(report, "a", "b").splitlines()[0]
    assert first.startswith("0 regressions, 1 improvement, ")
    assert "normalised by each kernel's NoOperation" in first


def test_ms_three_significant_digits():
    assert _ms(0.0123456) == "12.3"
    assert _ms(0.0009996) == "1.00"
    assert _ms(0.009996) == "10.0"
    assert _ms(0.123456) == "123"
    assert _ms(1.23456) == "1230"
    assert _ms(1.234e-5) == "0.0123"


def test_round_trip_through_files(tmp_path):
    base, current = make_run(34), make_run(35, slow={"avx512": 1.3})
    results.save(base, tmp_path / "base.json")
    results.save(current, tmp_path / "current.json")
    loaded = gate(results.load(tmp_path / "base.json"), results.load(tmp_path / "current.json"), GateConfig())
    assert isinstance(loaded, GateReport)
    assert loaded == gate(base, current, GateConfig())
    assert names(loaded.regressions) == {"avx512"} and loaded.exit_code == 1


def test_a_loaded_rows_key_is_the_gates_and_threads_tell_rows_apart(tmp_path):
    """KernelResult.key is what the gate pairs rows by: a kernel's row at 2 threads is another
    row than at 1, and normalising uses the reference's row at the same thread count."""
    one, two = make_run(38), make_run(39)
    both = dataclasses.replace(one, results=[*one.results, *(dataclasses.replace(r, threads=2) for r in two.results)])
    results.save(both, tmp_path / "both.json")
    loaded = results.load(tmp_path / "both.json")
    keys = [r.key for r in loaded.results]
    assert len(set(keys)) == len(keys) == 2 * len(KERNELS)
    sse2 = {r.threads: r.key for r in loaded.results if r.kernel == "sse2"}
    assert sse2[1] != sse2[2] and sse2[2] == RowKey("sse2", "cc", "-O2", "inline", 2)
    assert RowKey("avx2", "cc", "-O2", "inline", 2).with_kernel("sse2") == sse2[2]
    report = gate(loaded, loaded, GateConfig(normalize="sse2"))
    assert {row.key for row in report.rows} == set(keys) and not report.failures
    # the 2-thread sse2 row gone: only its own key fails, and the rows normalised by it cannot compare
    current = dataclasses.replace(loaded, results=[r for r in loaded.results if r.key != sse2[2]])
    with pytest.raises(IncompatibleResults, match=r"no sse2 \[-O2, inline, 2 threads\] in CURRENT"):
        gate(loaded, current, GateConfig(normalize="sse2"))
    report = gate(loaded, current, GateConfig())
    assert [f.key for f in report.failures] == [sse2[2]] and len(report.rows) == len(keys) - 1


def test_malformed_rows_are_incompatible():
    base = make_run(36)
    bad = replace_row(make_run(37), "sse2", samples_s=[0.003, -0.001] + [0.003] * 8)
    with pytest.raises(IncompatibleResults, match=r"sse2 \[-O2, inline\] in CURRENT: unusable samples"):
        gate(base, bad, GateConfig())
    empty = replace_row(make_run(37), "sse2", samples_s=[])
    with pytest.raises(IncompatibleResults, match="has no samples in CURRENT"):
        gate(base, empty, GateConfig())
    doubled = dataclasses.replace(base, results=[*base.results, base.results[0]])
    with pytest.raises(IncompatibleResults, match=r"duplicate row naive \[-O2, inline\] in BASELINE"):
        gate(doubled, make_run(37), GateConfig())


# ------------------------------------------------------------ unchanged code, power, what is compared


def with_code(run: RunResult, code: dict[str, str], source: str = "src") -> RunResult:
    rows = [dataclasses.replace(r, code_sha256=code.get(r.kernel), source_sha256=source) for r in run.results]
    return dataclasses.replace(run, results=rows)


CODE = {name: f"{index:064x}" for index, name in enumerate(KERNELS)}


def test_identical_machine_code_is_never_a_regression_whatever_the_samples():
    slow = {name: 2.0 for name in KERNELS}  # every kernel twice as slow: code the same
    report = gate(with_code(make_run(60), CODE), with_code(make_run(61, slow=slow), CODE), GateConfig())
    assert not report.regressions and report.exit_code == 0
    assert {r.verdict for r in report.rows} == {"unchanged code"}
    assert all(r.ratio > 1.5 for r in report.rows)  # the timing is still shown
    assert "6 unchanged code" in markdown(report).splitlines()[0]


def test_changed_code_is_timed_and_same_source_is_toolchain_drift():
    changed = {**CODE, "sse2": "f" * 64}
    report = gate(with_code(make_run(62), CODE), with_code(make_run(63, slow={"sse2": 2.0}), changed), GateConfig())
    assert names(report.regressions) == {"sse2"}
    assert [w for w in report.warnings if "toolchain drift" in w] == [
        "sse2 [-O2, inline]: toolchain drift: same source and flags, different machine code"
    ]
    # Another source: a change of code is expected, not drift.
    other_source = with_code(make_run(63, slow={"sse2": 2.0}), changed, source="edited")
    report = gate(with_code(make_run(62), CODE), other_source, GateConfig())
    assert names(report.regressions) == {"sse2"} and not any("drift" in w for w in report.warnings)


def test_rows_without_a_fingerprint_are_gated_as_before():
    report = gate(make_run(64), make_run(65, slow={"naive": 1.3}), GateConfig())
    assert names(report.regressions) == {"naive"} and "unchanged code" not in {r.verdict for r in report.rows}


def test_check_power_refuses_rounds_that_cannot_reach_alpha():
    from sectorbench.compare.gate import check_power

    baseline = make_run(66, n=3)
    with pytest.raises(SectorbenchError, match=r"--repeat 3: 3 vs 3 samples cannot reach alpha = 0.01 .* 7 rounds"):
        check_power(baseline, 3, 0.01)
    check_power(baseline, 7, 0.01)  # 1 / C(10, 3) = 1/120 < 0.01
    check_power(make_run(67, n=10), 5, 0.01)


def test_a_gate_that_cannot_reach_alpha_says_so():
    report = gate(make_run(68, n=3), make_run(69, n=3, slow={"naive": 3.0}), GateConfig())
    assert not report.regressions
    assert report.warnings[0].startswith("3 vs 3 samples cannot reach alpha = 0.01")
    assert "no row can be called a regression" in report.warnings[0]


def test_normalised_markdown_shows_the_normalised_medians():
    report = gate(make_run(70), make_run(71), GateConfig(normalize="overhead"))
    text = markdown(report, "main", "PR")
    assert "| main (÷ NoOperation) | PR (÷ NoOperation) | ratio (normalised)" in text
    assert "Compared: each kernel's time per pass divided by its own NoOperation's" in text
    naive = report.rows[0]
    base = make_run(70).results[0]
    expected = float(np.median(np.array(base.samples_s) / np.array(base.overhead_samples_s)))
    assert naive.baseline_compared == pytest.approx(expected)
    assert f"| {expected:.4g} |" in next(line for line in text.splitlines() if line.startswith("| naive "))
    raw = markdown(gate(make_run(70), make_run(71), GateConfig()), "main", "PR")
    assert "| main ms | PR ms |" in raw and "median ms" in raw


def test_the_clock_of_each_round_is_not_a_warning():
    env_a = {"machine": machine(), "compilers": {"cc": compiler()}}
    env_b = copy.deepcopy(env_a)
    env_b["machine"]["cpu"]["measured_mhz"] = 3100.0
    env_b["machine"]["cpu"]["measured_mhz_per_round"] = [3100.0, 2999.0]
    env_b["machine"]["time_utc"] = "2025-01-01T00:00:00+00:00"
    env_a["machine"]["cpu"]["measured_mhz_per_round"] = [2895.1]
    report = gate(make_run(72, env=env_a), make_run(73, env=env_b), GateConfig())
    assert report.warnings == ()


def _with_threads(run: RunResult, threads: int) -> RunResult:
    """The run with each row also measured on `threads` threads (its own row)."""
    return dataclasses.replace(
        run, results=[*run.results, *(dataclasses.replace(r, threads=threads) for r in run.results)]
    )


def test_rows_of_several_thread_counts_are_told_apart_in_the_gate_output():
    """sse2 on 2 threads 3x slower: the table and Markdown rows of sse2 once looked identical
    ("sse2 | -O2 | inline") and the summary named "sse2 [-O2, inline]" without the threads."""
    from sectorbench.present.report import gate_table

    base = _with_threads(make_run(40), 2)
    slow = [
        dataclasses.replace(r, samples_s=[3 * s for s in r.samples_s]) if (r.kernel, r.threads) == ("sse2", 2) else r
        for r in _with_threads(make_run(41), 2).results
    ]
    report = gate(base, dataclasses.replace(base, results=slow), GateConfig())
    assert [(r.kernel, r.threads) for r in report.regressions] == [("sse2", 2)]
    text = markdown(report)
    assert "| sse2 | -O2 | inline, 2 threads |" in text and "| sse2 | -O2 | inline |" in text
    cells = [list(map(str, column._cells)) for column in gate_table(report).columns]
    modes = {(kernel, mode) for kernel, mode in zip(cells[0], cells[2])}
    assert ("sse2", "inline, 2 threads") in modes and ("sse2", "inline") in modes


def test_across_builds_leaves_the_peers_rows_as_they_are():
    from sectorbench.compare.gate import as_baseline_build
    from sectorbench.model.results import PEER_CC

    def with_peer(run):
        peer = dataclasses.replace(run.results[0], kernel="numpy", cc=PEER_CC, flags="—")
        return dataclasses.replace(run, results=[*run.results, peer])

    base, current = with_peer(make_run(42)), with_peer(make_run(43, flags="-O3"))
    relabelled, paired = as_baseline_build(current, base)  # the peers were counted as a second build
    assert {(r.cc, r.flags) for r in relabelled.results} == {("cc", "-O2"), (PEER_CC, "—")}
    assert "BASELINE's build cc -O2 against CURRENT's cc -O3" in paired
    assert len(gate(base, relabelled, GateConfig()).rows) == len(KERNELS) + 1


def test_an_ab_run_is_gated_and_exported_by_its_head_rows():
    """An A/B run (run --against) holds each row twice, one a side: as a baseline it was
    refused ("duplicate row") and its exports held both sides under one name."""
    from sectorbench.compare.export import render
    from sectorbench.model.results import head_rows

    base, head = make_run(44), make_run(45, slow={"sse2": 1.3})
    ab = dataclasses.replace(
        head,
        results=[dataclasses.replace(r, side="base") for r in base.results]
        + [dataclasses.replace(r, side="head") for r in head.results],
    )
    with pytest.raises(IncompatibleResults, match="duplicate row"):
        gate(ab, make_run(46), GateConfig())
    plain, said = head_rows(ab, "ab.json")
    assert said.startswith("ab.json: an A/B run")
    # the head rows, as a plain run's (no side: a trend goes on through them)
    assert [dataclasses.replace(r, side="head") for r in plain.results] == [r for r in ab.results if r.side == "head"]
    assert {r.side for r in plain.results} == {None}
    assert names(gate(plain, make_run(46), GateConfig()).regressions) == set()  # head vs a run like it
    assert head_rows(base, "plain.json") == (base, None)
    exported = json.loads(render(plain, "bmf"))
    assert len(exported) == len(KERNELS)


def test_regress_and_export_take_an_ab_runs_head_rows(tmp_path):
    from click.testing import CliRunner

    from sectorbench.cli import main

    base, head = make_run(47), make_run(48)
    ab = dataclasses.replace(
        head,
        results=[dataclasses.replace(r, side="base") for r in base.results]
        + [dataclasses.replace(r, side="head") for r in head.results],
    )
    path = results.save(ab, tmp_path / "ab.json")
    plain = results.save(make_run(49), tmp_path / "plain.json")
    regressed = CliRunner().invoke(main, ["regress", str(path), str(plain)])
    assert regressed.exit_code == 0, regressed.output
    assert f"{path}: an A/B run (run --against): its head rows are taken" in regressed.output
    out = tmp_path / "ab.pyperf.json"
    exported = CliRunner().invoke(main, ["export", str(path), "--format", "pyperf", "--out", str(out)])
    assert exported.exit_code == 0, exported.output
    names_exported = [b["metadata"]["name"] for b in json.loads(out.read_text())["benchmarks"]]
    assert len(names_exported) == len(set(names_exported)) == len(KERNELS)


def test_the_ratio_is_said_to_be_hodges_lehmann_where_it_contradicts_the_medians():
    """Medians 0.280 -> 0.297 ms with a ratio of 0.952 (a CI run showed 0.301 -> 0.304 with 0.940):
    gate.md once said the medians and the ratio describe one thing; the table and the Markdown
    now say what the ratio is."""
    from rich.console import Console

    from sectorbench.present.report import gate_table

    base_samples = [t * 1e-3 for t in (0.252, 0.271, 0.276, 0.280, 0.335, 0.341, 0.350)]
    current_samples = [t * 1e-3 for t in (0.204, 0.258, 0.271, 0.297, 0.301, 0.322, 0.329)]
    only = {"basic": KERNELS["naive"]}
    base = replace_row(make_run(40, n=7, kernels=only), "basic", samples_s=base_samples)
    current = replace_row(make_run(41, n=7, kernels=only), "basic", samples_s=current_samples)
    (row,) = gate(base, current, GateConfig(alpha=0.05)).rows
    assert row.current_median_s > row.baseline_median_s and row.ratio < 1  # the two disagree
    report = gate(base, current, GateConfig(alpha=0.05))
    assert "Hodges–Lehmann" in markdown(report) and "not the ratio of the two medians" in markdown(report)
    console = Console(width=300, record=True)
    console.print(gate_table(report))
    assert "ratio: the ratio is current / baseline of that quantity as the Hodges–Lehmann" in console.export_text()
