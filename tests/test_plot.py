"""Tests for sectorbench.present.plot: files are written, sized and guarded; pixels are not judged.

Chart tests need matplotlib (the optional 'plot' extra) and are skipped
without it, through the `mpl` fixture; the PlotUnavailable test runs anyway.
"""

from __future__ import annotations

import json
import os
import struct
import subprocess
import sys
from pathlib import Path

import numpy as np
import pytest

from sectorbench.compare.stats import paired_ratio_interval
from sectorbench.errors import SectorbenchError
from sectorbench.model import results as results_mod
from sectorbench.model.results import KernelResult, RunResult
from sectorbench.present.plot import (
    INSTALL_HINT,
    PlotUnavailable,
    bar_chart,
    heatmap,
    load_results_dir,
    median_interval,
    trend_chart,
)

TESTS = 1000 * 256  # N x M
KERNELS = ("naive", "branchless", "sse2", "sse2_unrolled", "avx_like", "table")
BUILDS = (("gcc", "-O2"), ("gcc", "-O2 -ffast-math"))


@pytest.fixture
def mpl():
    return pytest.importorskip("matplotlib")


def row(
    kernel, flags="-O2", cc="gcc", mode="batch", ns=5.0, rounds=10, seed=0, status="ok", tests=TESTS
) -> KernelResult:
    if status != "ok":
        return KernelResult(
            kernel=kernel,
            family="sector",
            flags=flags,
            cc=cc,
            mode=mode,
            status=status,
            reason="not built" if status == "skipped" else "SIGSEGV",
            tests=tests,
        )
    rng = np.random.default_rng(seed)
    net = (ns * tests * 1e-9 * np.exp(rng.normal(0.0, 0.03, rounds))).tolist()
    overhead = [1e-4] * rounds
    samples = [n + o for n, o in zip(net, overhead)]
    net_s = float(np.median(net))
    return KernelResult(
        kernel=kernel,
        family="sector",
        flags=flags,
        cc=cc,
        mode=mode,
        status="ok",
        hits=tests // 3,
        tests=tests,
        hit_rate=1 / 3,
        calls=1,
        samples_s=samples,
        median_s=float(np.median(samples)),
        min_s=min(samples),
        spread=0.05,
        overhead_kernel="noop",
        overhead_samples_s=overhead,
        overhead_s=1e-4,
        net_samples_s=net,
        net_s=net_s,
        ns_per_test=net_s / tests * 1e9,
    )


def run_result(
    commit="0123456789abcdef",
    created="2024-05-01T10:00:00+00:00",
    scale=1.0,
    kernels=KERNELS,
    builds=BUILDS,
    modes=("batch",),
    extra=(),
) -> RunResult:
    rows = []
    for cc, flags in builds:
        for mode in modes:
            for i, kernel in enumerate(kernels):
                speed = 1.0 if flags == "-O2" else 0.7
                rows.append(row(kernel, flags, cc, mode, ns=scale * speed * (40.0 / (i + 1)), seed=i))
    rows += list(extra)
    env = {"machine": {"sectorbench": {"commit": commit, "dirty": False}}}
    return RunResult(
        scene={"kind": "uniform", "family": "sector", "seed": 1, "sectors": 1000, "points": 256},
        env=env,
        config={"repeat": 10},
        results=rows,
        created=created,
    )


def saved_and_loaded(result: RunResult, path: Path) -> RunResult:
    results_mod.save(result, path)
    return results_mod.load(path)


def png_size(path: Path) -> tuple[int, int]:
    data = path.read_bytes()
    assert data[:8] == b"\x89PNG\r\n\x1a\n" and data[12:16] == b"IHDR"
    return struct.unpack(">II", data[16:24])


def assert_svg(path: Path) -> None:
    head = path.read_bytes()[:400].lstrip()
    assert head.startswith(b"<?xml") and b"<svg" in path.read_bytes()[:2000]


@pytest.fixture
def typical(tmp_path) -> RunResult:
    """6 kernels x 2 builds plus a skipped and a crashed row, via save/load."""
    extra = [row("missing", status="skipped"), row("broken", flags="-O2 -ffast-math", status="crashed")]
    return saved_and_loaded(run_result(extra=extra), tmp_path / "typical.json")


# ------------------------------------------------------------------ median_interval


def test_median_interval_matches_paired_ratio_interval_for_positive_samples():
    samples = np.random.default_rng(3).lognormal(0.0, 0.2, 15).tolist()
    mine = median_interval(samples, 0.95)
    theirs = paired_ratio_interval(samples, [1.0] * len(samples), confidence=0.95)
    assert mine.estimate == pytest.approx(theirs.estimate, rel=0.01)  # median vs geometric middle
    assert (mine.low, mine.high) == pytest.approx((theirs.low, theirs.high))
    assert mine.achieved_confidence == pytest.approx(theirs.achieved_confidence)
    assert mine.achieved_confidence >= 0.95


def test_median_interval_accepts_non_positive_and_small_samples():
    interval = median_interval([-1.0, 0.0, 2.0], 0.95)
    assert (interval.estimate, interval.low, interval.high) == (0.0, -1.0, 2.0)
    assert interval.achieved_confidence < 0.95  # 3 rounds cannot give 95 %
    with pytest.raises(ValueError):
        median_interval([], 0.95)


# ------------------------------------------------------------------ bar chart and heatmap


def test_bar_chart_png_size_grows_with_bars(mpl, typical, tmp_path):
    out = bar_chart(typical, tmp_path / "bars.png")
    assert out == tmp_path / "bars.png" and out.stat().st_size > 0
    assert png_size(out) == (1000, 100 + 35 * 12)  # skipped and crashed rows have no bar
    assert not [p for p in tmp_path.iterdir() if p.name.startswith(".")]  # no temporary left


@pytest.mark.parametrize("name", ["a$\\frac$b", "$", "x_{1}^2 $y$"])
def test_names_are_drawn_as_written_not_as_mathtext(mpl, tmp_path, name):
    """A kernel's name from a saved file went through matplotlib's mathtext parser: `a$\\frac$b`
    ended plot with an internal error (ParseSyntaxException)."""
    named = saved_and_loaded(run_result(kernels=(name, "fast"), builds=(("gcc", "-O2 -D$X"),)), tmp_path / "r.json")
    for draw in (bar_chart, heatmap):
        assert draw(named, tmp_path / f"{draw.__name__}.svg").stat().st_size > 0
    assert trend_chart([named, named], name, tmp_path / "trend.svg").stat().st_size > 0


def test_bar_chart_svg_and_log_scale(mpl, tmp_path):
    wide = saved_and_loaded(run_result(kernels=("slow", "fast"), builds=(("gcc", "-O2"),)), tmp_path / "r.json")
    # 40 ns vs 20 ns: linear; add a 0.1 ns kernel: > 30x span, log axis.
    tiny = RunResult(
        scene=wide.scene,
        env=wide.env,
        config=wide.config,
        results=wide.results + [row("tiny", ns=0.1)],
        created=wide.created,
    )
    for result, name in ((wide, "linear.svg"), (tiny, "log.svg")):
        out = bar_chart(result, tmp_path / name, confidence=0.99)
        assert_svg(out)


def test_log_axes_are_labelled_in_plain_text(mpl, tmp_path):
    """Charts draw with mathtext off (names as written), and the log scale's tick labels are
    mathtext: a log axis was labelled `$\\mathdefault{10^{-1}}$`, literally, under the bars and
    beside a trend. (An SVG keeps each text it draws as a comment.)"""
    spread = saved_and_loaded(
        run_result(kernels=("slow", "tiny"), builds=(("gcc", "-O2"),), extra=[row("tinier", ns=0.1)]),
        tmp_path / "r.json",
    )
    faster = saved_and_loaded(
        run_result(kernels=("slow", "tiny"), builds=(("gcc", "-O2"),), scale=0.01, created="2024-06-01T10:00:00+00:00"),
        tmp_path / "f.json",
    )
    drawn = [bar_chart(spread, tmp_path / "bars.svg"), trend_chart([spread, faster], "slow", tmp_path / "trend.svg")]
    for out in drawn:
        text = out.read_text()
        assert "log scale" in text and "mathdefault" not in text and "$" not in text


def test_a_broadphase_row_is_marked_end_to_end(mpl, tmp_path):
    """A broadphase row's time is end to end (index build + query, no NoOperation subtracted,
    as the run table notes); the charts drew it under "net ns per test (kernel − NoOperation
    loop)" beside the kernels' net times, unmarked."""
    from dataclasses import replace

    grid = replace(row("grid", ns=2.0), broadphase="grid", overhead_kernel=None)
    game = saved_and_loaded(
        run_result(kernels=("basic",), builds=(("gcc", "-O2"), ("gcc", "-O3")), extra=[grid]), tmp_path / "g.json"
    )
    texts = {draw.__name__: draw(game, tmp_path / f"{draw.__name__}.svg").read_text() for draw in (bar_chart, heatmap)}
    texts["trend"] = trend_chart([game, game], "grid", tmp_path / "trend.svg").read_text()
    for name, text in texts.items():
        assert "grid (end to end)" in text or name == "trend", name
        assert "index build + query, no NoOperation subtracted" in text, name
    assert "ns per test, end to end" in texts["trend"] and "net ns per test" not in texts["trend"]
    kernels_only = trend_chart([game, game], "basic", tmp_path / "basic.svg").read_text()
    assert "end to end" not in kernels_only and "net ns per test" in kernels_only


def test_a_row_whose_answers_differ_is_marked(mpl, tmp_path):
    """The run table and the compare matrix mark a row whose count is not the kernel's and never
    rank it (compare/answers.py); the bar chart drew it unmarked, and the heat map as the row's
    lightest (fastest) cell where it was the quickest, as -O2 -ffast-math's sse2 is here."""
    from dataclasses import replace

    run = run_result(kernels=("naive", "sse2"))
    rows = [
        replace(r, hits=r.hits + 5000) if (r.kernel, r.flags) == ("sse2", "-O2 -ffast-math") else r for r in run.results
    ]
    wrong = saved_and_loaded(replace(run, results=rows), tmp_path / "w.json")
    for draw in (bar_chart, heatmap):
        text = draw(wrong, tmp_path / f"{draw.__name__}.svg").read_text()
        assert text.count("✗ answers differ: +5000 hits") == 1, draw.__name__
        assert "run `sectorbench verify` on that build" in text, draw.__name__
    right = saved_and_loaded(run, tmp_path / "r.json")
    assert "answers differ" not in heatmap(right, tmp_path / "right.svg").read_text()


def test_bar_chart_without_net_samples_or_measurements(mpl, tmp_path):
    bare = KernelResult(
        kernel="k",
        family="sector",
        flags="-O2",
        cc="gcc",
        mode="batch",
        status="ok",
        tests=TESTS,
        ns_per_test=3.0,
        net_s=3.0 * TESTS * 1e-9,
    )
    result = run_result(kernels=(), extra=[bare])
    assert png_size(bar_chart(result, tmp_path / "bare.png")) == (1000, 135)
    nothing = run_result(kernels=(), extra=[row("skipped", status="skipped")])
    with pytest.raises(SectorbenchError, match="no measured kernels"):
        bar_chart(nothing, tmp_path / "nothing.png")
    assert not (tmp_path / "nothing.png").exists()


def test_heatmap_png_and_svg(mpl, typical, tmp_path):
    out = heatmap(typical, tmp_path / "heat.png")
    # 8 kernel rows (6 measured + skipped + crashed) x 2 builds
    assert png_size(out) == (max(640, 400 + 160 * 2), 200 + 40 * 8)
    assert_svg(heatmap(typical, tmp_path / "heat.svg"))


def test_heatmap_several_modes_and_compilers(mpl, tmp_path):
    result = saved_and_loaded(
        run_result(builds=(("gcc", "-O2"), ("clang", "-O2")), modes=("batch", "single"), kernels=KERNELS[:3]),
        tmp_path / "r.json",
    )
    out = heatmap(result, tmp_path / "heat.png")
    assert png_size(out) == (400 + 160 * 4, 200 + 40 * 3)  # 2 compilers x 2 modes = 4 columns


def test_rows_of_two_thread_counts_are_two_series(mpl, tmp_path):
    """run --threads 1 --threads 2 holds two rows per kernel and build: a column (a bar) each,
    not one drawn over the other."""
    import dataclasses

    one = run_result(builds=(("gcc", "-O2"),), kernels=KERNELS[:3])
    rows = one.results + [dataclasses.replace(r, threads=2) for r in one.results]
    result = saved_and_loaded(dataclasses.replace(one, results=rows), tmp_path / "r.json")
    assert png_size(heatmap(result, tmp_path / "heat.png")) == (max(640, 400 + 160 * 2), 200 + 40 * 3)
    assert png_size(bar_chart(result, tmp_path / "bars.png"))[1] == 100 + 35 * 6


# ------------------------------------------------------------------ trend


def three_saved(tmp_path: Path) -> Path:
    directory = tmp_path / "results"
    directory.mkdir()
    # Saved out of order on purpose; file names sort differently from `created`.
    runs = [
        ("c" * 40, "2024-05-03T10:00:00+00:00", 1.0),
        ("a" * 40, "2024-05-01T10:00:00+00:00", 1.2),
        (None, "2024-05-02T10:00:00+00:00", 1.1),
    ]
    for i, (commit, created, scale) in enumerate(runs):
        results_mod.save(run_result(commit=commit, created=created, scale=scale), directory / f"run-{i}.json")
    (directory / "verify.json").write_text(json.dumps({"kind": "verify", "schema": 1, "kernels": []}))
    (directory / "other.json").write_text(json.dumps([1, 2, 3]))
    (directory / "notes.txt").write_text("not json")
    return directory


def test_load_results_dir_orders_and_skips(tmp_path):
    loaded = load_results_dir(three_saved(tmp_path))
    assert [r.created[:10] for r in loaded] == ["2024-05-01", "2024-05-02", "2024-05-03"]
    assert all(isinstance(r, RunResult) for r in loaded)
    duplicated = json.loads((tmp_path / "results" / "run-0.json").read_text())
    duplicated["results"].append(duplicated["results"][0])
    (tmp_path / "results" / "twice.json").write_text(json.dumps(duplicated))
    with pytest.raises(SectorbenchError, match=r"duplicate row .* in .*twice\.json"):  # as regress refuses it
        load_results_dir(tmp_path / "results")
    (tmp_path / "results" / "twice.json").unlink()
    (tmp_path / "results" / "bad.json").write_text("{truncated")
    with pytest.raises(SectorbenchError, match="bad.json"):
        load_results_dir(tmp_path / "results")
    with pytest.raises(SectorbenchError, match="no such directory"):
        load_results_dir(tmp_path / "absent")


def test_trend_chart_over_three_saved_results(mpl, tmp_path):
    from sectorbench.present import plot

    loaded = load_results_dir(three_saved(tmp_path))
    assert plot._run_labels(loaded) == ["aaaaaaa", "2024-05-02", "ccccccc"]
    out = trend_chart(loaded, "sse2", tmp_path / "trend.png")
    assert png_size(out) == (800, 500)
    out = trend_chart(list(reversed(loaded)), "sse2", tmp_path / "trend.svg", flags="-O2", mode="batch")
    assert_svg(out)


def test_trend_labels_tell_a_dirty_checkout_and_runs_of_one_commit_apart(mpl, tmp_path):
    """A trend's runs were labelled by commit alone: a run of uncommitted changes had the label of
    the commit it changed, and three runs of one commit three identical labels."""
    from dataclasses import replace

    runs = []
    for i, dirty in enumerate((False, True, True)):
        run = run_result(commit="abcdef0123", created=f"2024-06-01T10:0{i}:00+00:00", kernels=("k",))
        runs.append(replace(run, env={"machine": {"sectorbench": {"commit": "abcdef0123", "dirty": dirty}}}))
    runs.append(run_result(commit="1234567abc", created="2024-06-02T10:00:00+00:00", kernels=("k",)))
    text = trend_chart(runs, "k", tmp_path / "trend.svg").read_text()
    assert "abcdef0-dirty" in text and "06-01 10:01:00" in text and "06-01 10:02:00" in text
    assert "06-01 10:00:00" not in text and "abcdef0\n" not in text  # the only clean run of abcdef0
    assert "1234567" in text and "06-02" not in text  # a commit of one run: its label alone


def test_a_trend_goes_on_through_an_ab_runs_head_rows(mpl, tmp_path):
    """An A/B run (run --against) is drawn by its head rows, the code as it was then, but they
    kept side "head": the trend drew them as a series of their own ("-O2 · head" beside
    "-O2 · -"), broken off from the plain runs before and after it."""
    from dataclasses import replace

    directory = tmp_path / "results"
    directory.mkdir()
    for day in (1, 3):
        run = run_result(commit=f"{day:040x}", created=f"2024-06-0{day}T10:00:00+00:00", kernels=("k",))
        results_mod.save(run, directory / f"plain-{day}.json")
    ab = run_result(commit=f"{2:040x}", created="2024-06-02T10:00:00+00:00", kernels=("k",))
    sides = [replace(r, side=side) for side in ("base", "head") for r in ab.results]
    results_mod.save(replace(ab, results=sides), directory / "ab.json")
    text = trend_chart(load_results_dir(directory), "k", tmp_path / "trend.svg").read_text()
    assert "head" not in text
    assert text.count("-O2 -ffast-math") == 1  # one legend entry a build: a line through all three runs


def test_trend_chart_width_grows_with_runs(mpl, tmp_path):
    runs = [
        run_result(commit=f"{i:040x}", created=f"2024-06-{i + 1:02d}T00:00:00+00:00", kernels=("k",)) for i in range(10)
    ]
    assert png_size(trend_chart(runs, "k", tmp_path / "t.png")) == (200 + 80 * 10, 500)


def test_trend_chart_unknown_kernel_and_filters(mpl, tmp_path):
    loaded = load_results_dir(three_saved(tmp_path))
    with pytest.raises(SectorbenchError, match=r"unknown kernel 'nope'; known kernels: .*naive.*sse2") as info:
        trend_chart(loaded, "nope", tmp_path / "t.png")
    assert "\n" not in str(info.value)
    with pytest.raises(SectorbenchError, match="its flags: '-O2', '-O2 -ffast-math'"):
        trend_chart(loaded, "sse2", tmp_path / "t.png", flags="-O3")
    with pytest.raises(SectorbenchError, match="no results"):
        trend_chart([], "sse2", tmp_path / "t.png")
    assert not (tmp_path / "t.png").exists()


# ------------------------------------------------------------------ files


@pytest.mark.parametrize("name", ["chart.pdf", "chart.jpg", "chart"])
def test_unknown_suffix(mpl, typical, tmp_path, name):
    for draw in (
        lambda out: bar_chart(typical, out),
        lambda out: heatmap(typical, out),
        lambda out: trend_chart([typical], "sse2", out),
    ):
        with pytest.raises(SectorbenchError, match="unknown image format"):
            draw(tmp_path / name)
    assert list(tmp_path.iterdir()) == [tmp_path / "typical.json"]


def test_existing_file_kept_unless_overwrite(mpl, typical, tmp_path):
    for i, draw in enumerate(
        (
            lambda out, **kw: bar_chart(typical, out, **kw),
            lambda out, **kw: heatmap(typical, out, **kw),
            lambda out, **kw: trend_chart([typical], "sse2", out, **kw),
        )
    ):
        out = tmp_path / f"existing-{i}.png"
        out.write_bytes(b"keep me")
        with pytest.raises(SectorbenchError, match="exists; .*pass --force"):
            draw(out)
        assert out.read_bytes() == b"keep me"
        assert draw(out, overwrite=True) == out
        assert png_size(out)[0] > 0
    assert not [p for p in tmp_path.iterdir() if p.name.startswith(".")]


def test_output_directory_is_created(mpl, typical, tmp_path):
    out = bar_chart(typical, tmp_path / "new" / "dir" / "bars.png")
    assert out.exists()


# ------------------------------------------------------------------ without matplotlib


def test_plot_unavailable_without_matplotlib(monkeypatch, tmp_path):
    # None in sys.modules makes `import matplotlib` raise ImportError, even
    # when matplotlib (and its submodules) were imported by earlier tests.
    monkeypatch.setitem(sys.modules, "matplotlib", None)
    result = run_result()
    for draw in (
        lambda: bar_chart(result, tmp_path / "a.png"),
        lambda: heatmap(result, tmp_path / "b.svg"),
        lambda: trend_chart([result], "sse2", tmp_path / "c.png"),
    ):
        with pytest.raises(PlotUnavailable) as info:
            draw()
        assert str(info.value) == INSTALL_HINT == "plotting needs matplotlib: pip install 'sectorbench[plot]'"
        assert isinstance(info.value, SectorbenchError)
    assert list(tmp_path.iterdir()) == []


def drawn_to_the_edge(path: Path) -> bool:
    """Whether any pixel of the PNG's outermost rows and columns is not white: something cut off."""
    import matplotlib.image

    pixels = matplotlib.image.imread(path)[:, :, :3]
    edges = np.concatenate([pixels[0], pixels[-1], pixels[:, 0], pixels[:, -1]])
    return bool((edges < 0.99).any())


def test_heatmap_labels_are_never_cut_off(mpl, tmp_path):
    short = run_result(builds=(("gcc", "-O0"), ("gcc", "-O2")), kernels=("naive", "basic"))
    out = heatmap(short, tmp_path / "short.png")
    assert png_size(out) == (400 + 160 * 2, 200 + 40 * 2) and not drawn_to_the_edge(out)  # fits: exact size
    long_flags = (
        ("gcc-14", "-O2 -mfpmath=387 -ffast-math -march=native"),
        ("clang-18", "-O3 -march=native -ffast-math -fno-tree-vectorize"),
    )
    long = run_result(builds=long_flags, kernels=("naive",), modes=("inline", "call"))
    out = heatmap(long, tmp_path / "long.png")
    assert not drawn_to_the_edge(out)  # cropped to what is drawn, not cut at the figure's edge


def test_plot_says_nothing_of_matplotlib_without_a_writable_home(mpl, tmp_path):
    """A CI container's user with HOME=/ (here a HOME under a file, which refuses root too):
    matplotlib cannot make its config folder, uses a temporary one, and had logged two lines of
    its own about it on stderr; the plot's only line is sectorbench's."""
    saved = tmp_path / "run.json"
    results_mod.save(run_result(), saved)
    blocker = tmp_path / "file"
    blocker.write_text("")
    env = {k: v for k, v in os.environ.items() if k not in ("MPLCONFIGDIR", "XDG_CONFIG_HOME", "XDG_CACHE_HOME")}
    env.update(HOME=str(blocker / "home"), TMPDIR=str(tmp_path))
    out = tmp_path / "net.png"
    done = subprocess.run(
        [sys.executable, "-m", "sectorbench", "plot", str(saved), "--out", str(out)],
        env=env,
        capture_output=True,
        text=True,
        timeout=300,
    )
    assert done.returncode == 0, done.stderr
    assert done.stderr.splitlines() == [f"saved {out}"]
    assert png_size(out)[0] > 0
