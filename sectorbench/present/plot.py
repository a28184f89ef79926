"""Charts of saved results: bar chart, heatmap and trend (PNG or SVG files).

A library module: it writes image files and never prints or exits. matplotlib
is an optional dependency (``pip install 'sectorbench[plot]'``); it is
imported lazily inside the chart functions, which raise PlotUnavailable
when it is missing, so the rest of sectorbench works without it.

Figures are built with ``matplotlib.figure.Figure`` directly and saved
through the non-interactive Agg (PNG) and SVG renderers; pyplot is never
imported, so plotting touches no global backend state, opens no window and
works on headless machines (and does not switch the backend of a user's
interactive session when called as a library).

Values are *net* nanoseconds per test: per-round kernel time minus the
NoOperation loop time, divided by the N x M tests of the scene. Error bars
are the distribution-free confidence interval of the median of those
per-round net samples (see median_interval).

Figure sizes (pixels at 100 dpi; SVGs have the same size in points x 0.72):
  bar chart  1000 wide, 100 + 35 per bar high (1 in + 0.35 in per bar)
  heatmap    400 + 160 per build column wide (at least 640),
             200 + 40 per kernel row high
  trend      max(800, 200 + 80 per result) wide, 500 high
The sizes are exact: the figure size is derived from a whole number of pixels
(see _figure_size), and the layout engine fits labels inside it.  Where it cannot
(labels too long for the size), the image is cropped to what is drawn instead (_save):
larger than the size above, but no label is cut off.

One module although it is over 500 lines: the three charts share their labelling,
interval, scale and file rules, and matplotlib layout code is long by nature.
"""

from __future__ import annotations

import contextlib
import functools
import json
import logging
from collections.abc import Sequence
from dataclasses import dataclass
from datetime import UTC, datetime
from pathlib import Path

import numpy as np

from ..compare.answers import differing_by_row
from ..compare.gate import check_usable
from ..compare.stats import check_confidence, median_interval
from ..errors import SectorbenchError
from ..model.results import (
    MAX_RESULT_BYTES,
    KernelResult,
    RunResult,
    check_output,
    head_rows,
    parse_result,
    read_input,
    scene_shapes,
    shows_cc,
    write_atomic,
)
from ..native.build import build_label
from .report import ANSWERS_DIFFER

__all__ = [
    "PlotUnavailable",
    "INSTALL_HINT",
    "FORMATS",
    "check_out",
    "DPI",
    "median_interval",
    "bar_chart",
    "heatmap",
    "trend_chart",
    "load_results_dir",
]

INSTALL_HINT = "plotting needs matplotlib: pip install 'sectorbench[plot]'"
FORMATS = (".png", ".svg")
DPI = 100

#: Values spanning more than this factor are drawn on a log axis.
LOG_SCALE_SPAN = 30.0

# Figure sizes in pixels at DPI (documented in the module docstring).
BAR_WIDTH_PX, BAR_BASE_PX, BAR_PER_BAR_PX = 1000, 100, 35
HEAT_BASE_W_PX, HEAT_PER_COL_PX, HEAT_MIN_W_PX = 400, 160, 640
HEAT_BASE_H_PX, HEAT_PER_ROW_PX = 200, 40
TREND_BASE_W_PX, TREND_PER_RUN_PX, TREND_MIN_W_PX, TREND_H_PX = 200, 80, 800, 500


class PlotUnavailable(SectorbenchError):
    """matplotlib is not installed (it is the optional 'plot' extra)."""


# --------------------------------------------------------------------------
# Statistics
# --------------------------------------------------------------------------


@dataclass(frozen=True)
class _Point:
    """One measured value in ns/test, with its interval when samples allow."""

    value: float
    low: float | None
    high: float | None
    rounds: int
    achieved: float | None


def _point(row: KernelResult, confidence: float) -> _Point | None:
    """The row's net ns/test and interval; None when it has no net time."""
    if row.status != "ok" or row.ns_per_test is None:
        return None
    value = float(row.ns_per_test)
    if row.net_samples_s and row.tests and row.tests > 0:
        interval = median_interval(row.net_samples_s, confidence)
        scale = 1e9 / row.tests
        return _Point(
            value, interval.low * scale, interval.high * scale, len(row.net_samples_s), interval.achieved_confidence
        )
    return _Point(value, None, None, len(row.net_samples_s), None)


# --------------------------------------------------------------------------
# Labels
# --------------------------------------------------------------------------


def _series_key(row: KernelResult) -> tuple:
    """A row's series: its RowKey without the kernel (build, mode, threads), and its side in an
    --against run, so that rows of two thread counts or two sides are never drawn as one."""
    return (*row.key.with_kernel(""), row.side)


def _build_labeller(rows: Sequence[KernelResult]):
    """Label a series: the compiler, mode, thread count and side each only if the rows hold several."""
    show_cc = shows_cc(r.key for r in rows)
    show_mode = len({r.mode for r in rows}) > 1
    show_threads = len({r.threads for r in rows}) > 1
    show_side = len({r.side for r in rows}) > 1

    def label(key: tuple) -> str:
        _, cc, flags, mode, threads, side = key
        text = build_label(cc, flags, show_cc)
        if show_mode:
            text = f"{text} · {mode}"
        if show_threads:
            text = f"{text} · {threads} thread{'s' if threads != 1 else ''}"
        if show_side:
            text = f"{text} · {side or '-'}"
        return text

    return label


def _scene_text(scene: dict) -> str:
    if not isinstance(scene, dict):
        return ""
    shapes = scene_shapes(scene)
    parts = [f"{scene['kind']} scene" if scene.get("kind") else "scene"]
    if shapes is not None and scene.get("points") is not None:
        parts.append(f"N={shapes} x M={scene['points']}")
    if scene.get("seed") is not None:
        parts.append(f"seed {scene['seed']}")
    return ", ".join(parts)


def _commit(result: RunResult) -> str | None:
    """The short commit the run measured, `-dirty` added (as `git describe --dirty` does) when its
    checkout had changes: that code is not the commit's, and a trend of a change before and after
    it was committed showed two runs of one label."""
    env = result.env if isinstance(result.env, dict) else {}
    machine = env.get("machine")
    project = machine.get("sectorbench") if isinstance(machine, dict) else None
    commit = project.get("commit") if isinstance(project, dict) else None
    if not (isinstance(commit, str) and commit):
        return None
    return commit[:7] + ("-dirty" if project.get("dirty") is True else "")


def _created(result: RunResult) -> datetime | None:
    try:
        when = datetime.fromisoformat(result.created)
    except (TypeError, ValueError):
        return None
    return when if when.tzinfo else when.replace(tzinfo=UTC)


def _by_created(results: Sequence[RunResult]) -> list[RunResult]:
    """Oldest first; unparsable times go last, in their original order."""
    far = datetime.max.replace(tzinfo=UTC)
    return sorted(results, key=lambda r: _created(r) or far)


def _run_labels(results: Sequence[RunResult]) -> list[str]:
    """Short commit, or the creation date (plus time where dates repeat)."""
    dates = []
    for r in results:
        when = _created(r)
        dates.append(when.strftime("%Y-%m-%d") if when else str(r.created)[:10])
    labels = []
    for r, date in zip(results, dates):
        commit = _commit(r)
        if commit:
            labels.append(commit)
        elif dates.count(date) > 1 and _created(r):
            labels.append(_created(r).strftime("%Y-%m-%d %H:%M"))
        else:
            labels.append(date)
    # Runs of one commit (a run repeated, or --save after each try) had one label each: the time
    # tells them apart.
    return [
        f"{label}\n{_created(r).strftime('%m-%d %H:%M:%S')}" if labels.count(label) > 1 and _created(r) else label
        for r, label in zip(results, labels)
    ]


#: A broadphase row's time is end to end (its net_s: index build + query, nothing subtracted;
#: docs/results.md), not kernel − NoOperation as every other row's: its label says so, or a
#: chart under a "net" axis drew it as a net time beside the kernels' (as the run table notes).
END_TO_END = "(end to end)"
END_TO_END_NOTE = f"{END_TO_END}: index build + query, no NoOperation subtracted"


def _kernel_label(kernel: str, rows: Sequence[KernelResult]) -> str:
    """The kernel's name, marked END_TO_END when any of `rows` of it is a broadphase row."""
    return f"{kernel} {END_TO_END}" if any(r.broadphase and r.kernel == kernel for r in rows) else kernel


def _end_to_end_note(rows: Sequence[KernelResult]) -> str:
    return f"\n{END_TO_END_NOTE}" if any(r.broadphase for r in rows) else ""


#: A row whose answers differ (compare/answers.py, the rule the run table and compare matrix
#: apply) is marked, and in the heat map never the row's fastest: the tables never rank it,
#: and the charts drew it unmarked, the heat map's lightest cell where it was the quickest.
WRONG_NOTE = f"{ANSWERS_DIFFER}: the count is not the kernel's (run `sectorbench verify` on that build); not ranked"


def _wrong(result: RunResult) -> dict[int, str]:
    """The rows whose answers differ, by id(): how much ("+3057 hits")."""
    return {key: d.amount for key, d in differing_by_row(result).items()}


def _wrong_note(rows: Sequence[KernelResult], wrong: dict[int, str]) -> str:
    return f"\n{WRONG_NOTE}" if any(id(r) in wrong for r in rows) else ""


def _fmt(value: float) -> str:
    return f"{value:.3g}"


# --------------------------------------------------------------------------
# matplotlib and files
# --------------------------------------------------------------------------


def _matplotlib():
    """Import matplotlib now; PlotUnavailable when it is missing.

    `import matplotlib` runs first on every call so that a missing (or
    blocked) package is detected even when submodules are cached.
    """
    try:
        with _matplotlib_warnings_quiet():
            import matplotlib  # noqa: F401
            from matplotlib import colors
            from matplotlib.figure import Figure
    except ImportError:
        raise PlotUnavailable(INSTALL_HINT) from None
    return Figure, colors


@contextlib.contextmanager
def _matplotlib_warnings_quiet():
    """matplotlib's WARNING records held back while it is imported: where it cannot make its
    config folder (~/.config/matplotlib, for a CI container's user with HOME=/) it uses a
    temporary one, removed at exit, and logged two lines of its own on stderr about it ("mkdir
    -p failed for path /.config/matplotlib", "Matplotlib created a temporary cache directory"),
    the plot otherwise drawn as ever: a warning is not a result, and this module never prints."""
    logger = logging.getLogger("matplotlib")
    level = logger.level
    logger.setLevel(logging.ERROR)
    try:
        yield
    finally:
        logger.setLevel(level)


def _labels_as_written(chart):
    """`chart` with its text drawn as written: names from saved files and flags (a kernel named
    `a$\\frac$b`) were read as mathtext, and the parser's error ended `plot` as an internal error.
    The setting is matplotlib's own, for the chart's duration."""

    @functools.wraps(chart)
    def drawn(*args, **kwargs):
        _matplotlib()
        import matplotlib

        with matplotlib.rc_context({"text.parse_math": False}):
            return chart(*args, **kwargs)

    return drawn


def _figure_size(width_px: int, height_px: int) -> tuple[float, float]:
    """Inches giving exactly width_px x height_px at DPI.

    matplotlib truncates inches * dpi to whole pixels, and px / 100 * 100 is
    one ulp short of px for some px; a hundredth of a pixel absorbs that.
    """
    return ((width_px + 0.01) / DPI, (height_px + 0.01) / DPI)


def check_out(out: Path, overwrite: bool) -> tuple[Path, str]:
    """The image path to write and its format; SectorbenchError for a format or path that would fail."""
    out = Path(out)
    fmt = out.suffix.lower()
    if fmt not in FORMATS:
        raise SectorbenchError(
            f"{out}: unknown image format {out.suffix or '(no suffix)'!r}; use {' or '.join(FORMATS)}"
        )
    out = check_output(out, overwrite, create_dir=True)
    return out, fmt[1:]


def _save(fig, out: Path, fmt: str, overwrite: bool) -> Path:
    """Write the figure atomically, never over an existing file unless `overwrite`.

    At its exact size where everything drawn lies inside it; else (long build labels the
    layout engine could not fit, rotated tick labels it misplaced) cropped to what is drawn
    (bbox_inches="tight"), so a label is never cut off at the edge."""
    fig.draw_without_rendering()  # the layout saving would do, so that the extents below are its
    drawn, inside = fig.get_tightbbox(), fig.bbox_inches
    fits = drawn.x0 >= inside.x0 and drawn.y0 >= inside.y0 and drawn.x1 <= inside.x1 and drawn.y1 <= inside.y1
    crop = {} if fits else {"bbox_inches": "tight"}
    return write_atomic(out, lambda stream: fig.savefig(stream, format=fmt, dpi=DPI, **crop), overwrite)


def _log_scale(ax, which: str) -> None:
    """Put `ax`'s `which` ("x" or "y") axis on a log scale whose tick labels are plain text ("0.1", "1", "10").

    matplotlib's log scale labels its ticks in mathtext (`$\\mathdefault{10^{-1}}$`), and the
    charts draw with text.parse_math off (_labels_as_written), so those labels were drawn as that
    literal source; LogFormatter is the same scale's labelling without mathtext. Set after the
    scale, which replaces the formatters."""
    from matplotlib.ticker import LogFormatter

    getattr(ax, f"set_{which}scale")("log")
    axis = getattr(ax, f"{which}axis")
    axis.set_major_formatter(LogFormatter())
    axis.set_minor_formatter(LogFormatter(labelOnlyBase=False))


def _wants_log(values: Sequence[float]) -> bool:
    positive = [v for v in values if v > 0]
    return bool(positive) and max(positive) / min(positive) > LOG_SCALE_SPAN


def _interval_note(points: Sequence[_Point], confidence: float) -> str:
    rounds = sorted({p.rounds for p in points if p.low is not None})
    if not rounds:
        return "no per-round samples: no error bars"
    shown = f"{rounds[0]}" if len(rounds) == 1 else f"{rounds[0]}–{rounds[-1]}"
    note = f"bars: {confidence:.0%} interval of the median over {shown} rounds"
    if any(p.achieved is not None and p.achieved < confidence - 1e-9 for p in points):
        note += " (too few rounds for that: some show min–max)"
    return note


# --------------------------------------------------------------------------
# Charts
# --------------------------------------------------------------------------


@_labels_as_written
def bar_chart(result: RunResult, out: Path, confidence: float = 0.95, overwrite: bool = False) -> Path:
    """Horizontal bars of net ns/test, one per measured kernel x build x mode.

    Rows that are skipped, crashed or lack a net time (their NoOperation
    kernel failed) are left out. Error bars: median_interval of the per-round
    net samples at `confidence`. Bars are coloured by build, labelled with
    their value, and the axis is logarithmic when values span more than 30x.
    Size: 1000 px wide, 100 + 35 px per bar high. Returns `out`.
    """
    Figure, _ = _matplotlib()
    check_confidence(confidence)
    rows = [(r, p) for r in result.results if (p := _point(r, confidence)) is not None]
    if not rows:
        raise SectorbenchError("no measured kernels to plot (every row is skipped, crashed or has no net time)")
    out, fmt = check_out(out, overwrite)

    label = _build_labeller([r for r, _ in rows])
    builds = list(dict.fromkeys(_series_key(r) for r, _ in rows))
    several = len(builds) > 1
    values = [p.value for _, p in rows]
    log = _wants_log(values)
    floor = min((v for v in values if v > 0), default=1.0) / 10.0 if log else 0.0

    fig = Figure(
        figsize=_figure_size(BAR_WIDTH_PX, BAR_BASE_PX + BAR_PER_BAR_PX * len(rows)), dpi=DPI, layout="constrained"
    )
    ax = fig.add_subplot()
    palette = [f"C{i % 10}" for i in range(len(builds))]
    y = np.arange(len(rows))
    ends = []
    for i, (row, p) in enumerate(rows):
        colour = palette[builds.index(_series_key(row))]
        low = p.value if p.low is None else max(p.low, floor) if log else p.low
        high = p.value if p.high is None else p.high
        xerr = [[max(0.0, p.value - low)], [max(0.0, high - p.value)]]
        base = floor if log else 0.0
        ax.barh(
            y[i],
            max(p.value - base, 0.0),
            left=base,
            color=colour,
            height=0.7,
            xerr=xerr if p.low is not None else None,
            ecolor="black",
            capsize=3,
        )
        end = max(p.value, high, base)
        ends.append(end)
        text = _fmt(p.value) if p.value > 0 else "≤ 0"
        ax.annotate(text, (end, y[i]), xytext=(4, 0), textcoords="offset points", va="center", fontsize=8)
    wrong = _wrong(result)
    names = [
        _kernel_label(r.kernel, [r]) + (f" {ANSWERS_DIFFER}: {wrong[id(r)]}" if id(r) in wrong else "") for r, _ in rows
    ]
    ax.set_yticks(y, [f"{name}  [{label(_series_key(r))}]" if several else name for name, (r, _) in zip(names, rows)])
    ax.invert_yaxis()
    if log:
        _log_scale(ax, "x")
        ax.set_xlim(floor, max(ends) * 2.5)
    else:
        ax.set_xlim(0.0, max(max(ends), 1e-12) * 1.15)
    ax.set_xlabel("net ns per test (kernel − NoOperation loop)" + (", log scale" if log else ""))
    ax.grid(axis="x", which="major", alpha=0.3)
    ax.set_axisbelow(True)
    if several:
        from matplotlib.patches import Patch

        ax.legend(
            handles=[Patch(color=palette[i], label=label(b)) for i, b in enumerate(builds)],
            loc="lower right",
            fontsize=8,
        )
    title = _scene_text(result.scene)
    ax.set_title(
        f"{title + ': ' if title else ''}net time per test\n{_interval_note([p for _, p in rows], confidence)}"
        + _end_to_end_note([r for r, _ in rows])
        + _wrong_note([r for r, _ in rows], wrong),
        fontsize=10,
        loc="left",
    )
    return _save(fig, out, fmt, overwrite)


@_labels_as_written
def heatmap(result: RunResult, out: Path, overwrite: bool = False) -> Path:
    """Kernels (rows) x builds (columns) of net ns/test.

    Builds are the distinct (cc, flags) of the result, with the mode appended
    when the result has several modes; columns keep the order of the result.
    Each cell shows the value and its ratio to the first column; its colour
    is the log of its ratio to the row's fastest build (lightest = fastest).
    Cells without a positive net time are grey and say why (skipped,
    crashed, no net time, ≤ 0). Size: 400 + 160 px per column wide (at least
    640), 200 + 40 px per row high. Returns `out`.
    """
    Figure, colors = _matplotlib()
    from matplotlib import colormaps

    rows = list(result.results)
    if not rows:
        raise SectorbenchError("no kernels to plot: the result is empty")
    if all(_point(r, 0.95) is None for r in rows):
        raise SectorbenchError("no measured kernels to plot (every row is skipped, crashed or has no net time)")
    out, fmt = check_out(out, overwrite)

    label = _build_labeller(rows)
    kernels = list(dict.fromkeys(r.kernel for r in rows))
    builds = list(dict.fromkeys(_series_key(r) for r in rows))
    cells: dict[tuple[str, tuple], KernelResult] = {(r.kernel, _series_key(r)): r for r in rows}
    wrong = _wrong(result)
    values = np.full((len(kernels), len(builds)), np.nan)
    for (kernel, build), r in cells.items():
        if r.status == "ok" and r.ns_per_test is not None and r.ns_per_test > 0:
            values[kernels.index(kernel), builds.index(build)] = r.ns_per_test
    ranked = values.copy()  # without the cells whose answers differ: never the row's fastest, grey
    for (kernel, build), r in cells.items():
        if id(r) in wrong:
            ranked[kernels.index(kernel), builds.index(build)] = np.nan
    with np.errstate(invalid="ignore"):
        fastest = np.nanmin(np.where(np.isnan(ranked), np.inf, ranked), axis=1, keepdims=True)
        ratio_to_fastest = ranked / fastest
    finite = ratio_to_fastest[np.isfinite(ratio_to_fastest)]
    top = max(2.0, float(finite.max()) if finite.size else 2.0)

    width_px = max(HEAT_MIN_W_PX, HEAT_BASE_W_PX + HEAT_PER_COL_PX * len(builds))
    height_px = HEAT_BASE_H_PX + HEAT_PER_ROW_PX * len(kernels)
    fig = Figure(figsize=_figure_size(width_px, height_px), dpi=DPI, layout="constrained")
    ax = fig.add_subplot()
    cmap = colormaps["YlOrRd"].with_extremes(bad="#d9d9d9")
    norm = colors.LogNorm(vmin=1.0, vmax=top)
    image = ax.imshow(
        np.ma.masked_invalid(ratio_to_fastest), cmap=cmap, norm=norm, aspect="auto", interpolation="nearest"
    )
    for i, kernel in enumerate(kernels):
        first = values[i, 0]
        for j, build in enumerate(builds):
            r = cells.get((kernel, build))
            v = values[i, j]
            if np.isnan(v):
                text = (
                    "–"
                    if r is None
                    else r.status
                    if r.status != "ok"
                    else "no net time"
                    if r.ns_per_test is None
                    else "≤ 0"
                )
                dark = False
            else:
                text = _fmt(v) + (f"\n×{v / first:.2f}" if not np.isnan(first) else "")
                dark = False
                if id(r) in wrong:
                    text += f"\n{ANSWERS_DIFFER}: {wrong[id(r)]}"
                else:
                    red, green, blue, _ = cmap(norm(ratio_to_fastest[i, j]))
                    dark = 0.299 * red + 0.587 * green + 0.114 * blue < 0.5
            ax.text(j, i, text, ha="center", va="center", fontsize=8, color="white" if dark else "black")
    ax.set_xticks(
        np.arange(len(builds)), [label(b) for b in builds], rotation=20, ha="right", rotation_mode="anchor", fontsize=9
    )
    ax.set_yticks(np.arange(len(kernels)), [_kernel_label(k, rows) for k in kernels], fontsize=9)
    ax.set_xticks(np.arange(len(builds) + 1) - 0.5, minor=True)
    ax.set_yticks(np.arange(len(kernels) + 1) - 0.5, minor=True)
    ax.grid(which="minor", color="white", linewidth=1.5)
    ax.tick_params(which="minor", length=0)
    bar = fig.colorbar(image, ax=ax, shrink=0.9)
    from matplotlib.ticker import FixedLocator, FuncFormatter, NullLocator

    ticks = [t for t in (1, 1.25, 1.5, 2, 3, 5, 10, 20, 50, 100, 200, 500, 1000) if t <= top]
    bar.ax.yaxis.set_major_locator(FixedLocator(ticks))
    bar.ax.yaxis.set_minor_locator(NullLocator())
    bar.ax.yaxis.set_major_formatter(FuncFormatter(lambda v, _: f"×{v:g}"))
    bar.set_label("× row's fastest build", fontsize=9)
    title = _scene_text(result.scene)
    ax.set_title(
        f"{title + ': ' if title else ''}net ns per test\n"
        f"(×: ratio to the first column; colour: ratio to the row's fastest){_end_to_end_note(rows)}"
        f"{_wrong_note(rows, wrong)}",
        fontsize=10,
        loc="left",
    )
    return _save(fig, out, fmt, overwrite)


@_labels_as_written
def trend_chart(
    results: list[RunResult],
    kernel: str,
    out: Path,
    flags: str | None = None,
    mode: str | None = None,
    confidence: float = 0.95,
    overwrite: bool = False,
) -> Path:
    """Net ns/test of `kernel` across saved results, oldest first.

    Results are ordered by `created`; x tick labels are the 7-character
    commit of the sectorbench checkout (`-dirty` when it had uncommitted changes, the
    time added where several runs share it), or the creation date when the result
    has no commit (with the time added where dates repeat). One line per
    (cc, flags, mode, threads) of the kernel, narrowed by `flags` (the exact flags
    string) and `mode` when given; runs where a line has no measured value
    leave a gap. Error bars as in bar_chart. Size: max(800, 200 + 80 px per
    result) wide, 500 px high. Returns `out`.
    """
    Figure, _ = _matplotlib()
    check_confidence(confidence)
    if not results:
        raise SectorbenchError("no results to plot")
    ordered = _by_created(results)
    known = sorted({r.kernel for run in ordered for r in run.results})
    if kernel not in known:
        raise SectorbenchError(f"unknown kernel {kernel!r}; known kernels: {', '.join(known) or '(none)'}")
    mine = [r for run in ordered for r in run.results if r.kernel == kernel]
    chosen = [r for r in mine if (flags is None or r.flags == flags) and (mode is None or r.mode == mode)]
    if not chosen:
        raise SectorbenchError(
            f"kernel {kernel!r} has no rows with"
            + (f" flags {flags!r}" if flags is not None else "")
            + (" and" if flags is not None and mode is not None else "")
            + (f" mode {mode!r}" if mode is not None else "")
            + f"; its flags: {', '.join(repr(f) for f in dict.fromkeys(r.flags for r in mine))}"
            + f"; its modes: {', '.join(dict.fromkeys(r.mode for r in mine))}"
        )
    out, fmt = check_out(out, overwrite)

    label = _build_labeller(mine)
    series = list(dict.fromkeys(_series_key(r) for r in chosen))
    x = np.arange(len(ordered))
    lines: list[tuple[tuple, list[_Point | None]]] = []
    for key in series:
        points = []
        for run in ordered:
            row = next((r for r in run.results if r.kernel == kernel and _series_key(r) == key), None)
            points.append(None if row is None else _point(row, confidence))
        if any(p is not None for p in points):
            lines.append((key, points))
    if not lines:
        raise SectorbenchError(
            f"kernel {kernel!r} was never measured in these results (skipped, crashed or no net time everywhere)"
        )
    measured = [p for _, points in lines for p in points if p is not None]
    log = _wants_log([p.value for p in measured])
    floor = min((p.value for p in measured if p.value > 0), default=1.0) / 10.0 if log else 0.0

    width_px = max(TREND_MIN_W_PX, TREND_BASE_W_PX + TREND_PER_RUN_PX * len(ordered))
    fig = Figure(figsize=_figure_size(width_px, TREND_H_PX), dpi=DPI, layout="constrained")
    ax = fig.add_subplot()
    offsets = (np.arange(len(lines)) - (len(lines) - 1) / 2) * min(0.08, 0.4 / max(len(lines), 1))
    for n, (key, points) in enumerate(lines):
        y = np.array([np.nan if p is None else max(p.value, floor) if log else p.value for p in points])
        below = [
            0.0 if p is None or p.low is None else max(0.0, yv - (max(p.low, floor) if log else p.low))
            for p, yv in zip(points, y)
        ]
        above = [0.0 if p is None or p.high is None else max(0.0, p.high - yv) for p, yv in zip(points, y)]
        present = ~np.isnan(y)
        # Lines join consecutive measured runs only; gaps stay gaps.
        ax.plot(x + offsets[n], y, "-", color=f"C{n % 10}", linewidth=1.2)
        ax.errorbar(
            (x + offsets[n])[present],
            y[present],
            yerr=[np.array(below)[present], np.array(above)[present]],
            fmt="o",
            color=f"C{n % 10}",
            markersize=4,
            capsize=3,
            label=label(key),
        )
    ax.set_xticks(
        x,
        _run_labels(ordered),
        rotation=30 if len(ordered) > 8 else 0,
        ha="right" if len(ordered) > 8 else "center",
        fontsize=8,
    )
    ax.set_xlim(-0.5, len(ordered) - 0.5)
    if log:
        _log_scale(ax, "y")
    else:
        ax.set_ylim(bottom=0.0)
    end_to_end = any(r.broadphase for r in chosen)
    ax.set_ylabel(("ns per test, end to end" if end_to_end else "net ns per test") + (" (log scale)" if log else ""))
    ax.set_xlabel("run (commit, -dirty with uncommitted changes; or its date), oldest first")
    ax.grid(axis="y", alpha=0.3)
    ax.legend(fontsize=8, loc="best")
    ax.set_title(
        f"{kernel}: {'' if end_to_end else 'net '}time per test over {len(ordered)} runs\n"
        f"{_interval_note(measured, confidence)}{_end_to_end_note(chosen)}",
        fontsize=10,
        loc="left",
    )
    return _save(fig, out, fmt, overwrite)


# --------------------------------------------------------------------------
# Loading
# --------------------------------------------------------------------------


def trend_warnings(runs: list[RunResult]) -> list[str]:
    """What makes a trend's points not of one benchmark: runs of several scenes (regress refuses
    to compare them) or CPUs (regress warns); one line each, or none."""
    scenes = {json.dumps(run.scene, sort_keys=True) for run in runs}
    cpus = {((run.env.get("machine") or {}).get("cpu") or {}).get("model_name") for run in runs} - {None}
    lines = []
    if len(scenes) > 1:
        lines.append(f"trend: the runs are of {len(scenes)} different scenes: their times are not one benchmark's")
    if len(cpus) > 1:
        lines.append(f"trend: the runs are of {len(cpus)} CPUs ({', '.join(sorted(cpus))})")
    return lines


def result_files(directory: Path) -> list[Path]:
    """The files a trend without RESULTS reads (load_results_dir): the *.json files of
    `directory`, hidden ones (atomic-write leftovers) left out; none if it is no directory.
    They are the command's inputs, which its --out must not lead to."""
    directory = Path(directory)
    if not directory.is_dir():
        return []
    return [path for path in sorted(directory.glob("*.json")) if not path.name.startswith(".")]


def load_results_dir(directory: Path) -> list[RunResult]:
    """Every run result among the *.json files of `directory`, oldest first.

    Files that are JSON but not run results are skipped: verify outputs
    ("kind": "verify") and anything that is not an object with a "results"
    list. Hidden files (atomic-write leftovers) are ignored. A *.json file
    that cannot be read or parsed, or a run result of another schema, raises
    SectorbenchError: a damaged result should not silently vanish from a trend; so does one
    `regress` refuses (check_usable).
    Order: `created` time, then file name.
    """
    directory = Path(directory)
    if not directory.is_dir():
        raise SectorbenchError(f"{directory}: no such directory")
    found = []
    for path in result_files(directory):
        if not path.is_file():
            continue
        try:
            data = json.loads(read_input(path, MAX_RESULT_BYTES).decode("utf-8"))
        except (UnicodeDecodeError, json.JSONDecodeError, RecursionError) as exc:
            raise SectorbenchError(f"{path}: unreadable JSON ({type(exc).__name__}: {exc})") from None
        if not isinstance(data, dict) or data.get("kind", "run") != "run" or not isinstance(data.get("results"), list):
            continue
        result, _ = head_rows(parse_result(data, path), str(path))  # an A/B run's head rows, as regress's
        check_usable(result, str(path))  # what regress refuses (a row twice) is not drawn either
        found.append(result)
    return _by_created(found)
