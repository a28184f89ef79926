"""The regression gate: compare a current run with a baseline, kernel by kernel.

``gate(baseline, current, config)`` pairs the rows of two ``RunResult``s by their
``RowKey`` (kernel, cc, flags, mode, threads), runs ``stats.compare`` on each pair and
returns a ``GateReport``; ``report.gate_table`` and ``report.gate_markdown`` render it.
``gate_counts`` then judges the rows counted on both sides (``--metric instructions``,
measure/instructions.py) by their instruction counts instead.
This module only returns values: it never prints and never exits.

What is compared
----------------
Each row's own per-pass times, ``samples_s`` -- not the net times
(``net_samples_s``, kernel minus its NoOperation kernel). Measured pass times
are always positive and their noise is multiplicative, which is what
``stats.compare`` assumes (it works on log times and ratios). Net times are a
difference of two noisy numbers: for a kernel not much slower than its loop
overhead they can be near zero or negative in some rounds, and then logs and
ratios are undefined or blow up the noise. The price is dilution: the overhead
is in both sides, so a kernel whose net time grew by 20 % shows a smaller
gross ratio. The gate errs towards silence, never towards false alarms.

Answers
-------
A row whose answers differ in the current run (compare/answers.py: its count further from
the run's yardstick than float32 rounding allows) and not in the baseline is a failure, not
compared: a kernel that broke may well be faster.  One that differs on both sides is
compared (the run table marks it), with a warning where its count changed.

Normalisation
-------------
With ``GateConfig.normalize`` set, every sample is first divided by a
reference sample taken in the same round (``stats.normalized``): the row of
kernel ``normalize`` with the same cc/flags/mode, or, for
``normalize="overhead"``, the row's own NoOperation samples
(``overhead_samples_s``). Whatever the two share -- machine speed, clock
frequency, a noisy neighbour during that round -- cancels, so a baseline
recorded on a slightly faster or slower machine (or on a day the VM was
slower) still gives meaningful ratios. The displayed medians stay in seconds.
"""

from __future__ import annotations

import math
import statistics
import tomllib
from collections.abc import Iterable
from dataclasses import dataclass, field, replace
from pathlib import Path

from ..errors import SectorbenchError
from ..model.kernels import lacks_cpu_feature
from ..model.results import PEER_CC, SCHEMA_VERSION, KernelResult, RowKey, RunResult, read_input, shows_cc
from ..native.build import build_label
from ..native.environment import compare_fingerprints, uses_native
from .answers import differing_by_row
from .stats import Comparison, can_reach_alpha, compare, min_p_value, normalized, rounds_for_alpha

__all__ = [
    "DEFAULT_KEY",
    "OVERHEAD",
    "UNCHANGED_CODE",
    "GateConfig",
    "GateFailure",
    "GateReport",
    "GateRow",
    "IncompatibleResults",
    "RowKey",
    "check_ab_rounds",
    "check_rounds",
    "check_power",
    "check_rows",
    "check_scene",
    "gate",
    "uncounted_line",
    "uncounted_rows",
    "with_counts_noted",
    "load_thresholds",
    "row_label",
]

#: ``normalize`` value that divides by each row's own NoOperation samples.
OVERHEAD = "overhead"
#: Key of the default threshold in the dict returned by ``load_thresholds``.
DEFAULT_KEY = "default"
#: The verdict of a row whose kernel's machine code is the same in both runs
#: (KernelResult.code_sha256): whatever the samples say, its difference is noise.
UNCHANGED_CODE = "unchanged code"
#: The verdict of --normalize's reference kernel: shown, not gated (see gate()).
NORMALIZE_REFERENCE = "not gated: reference"

_BASE, _CURRENT = "BASELINE", "CURRENT"


class IncompatibleResults(SectorbenchError):
    """The two results cannot be compared (schema, scene or kernels differ)."""


# --------------------------------------------------------------------------
# configuration


def _check_threshold(value, what: str) -> float:
    """A threshold is a fraction in [0, 1]; returns it as float or raises SectorbenchError."""
    if isinstance(value, bool) or not isinstance(value, (int, float)):
        raise SectorbenchError(f"{what} must be a number (a fraction such as 0.10), got {value!r}")
    if not math.isfinite(value) or value < 0:
        raise SectorbenchError(f"{what} must be a fraction >= 0, got {value!r}")
    if value > 1:  # almost certainly a percentage: 25 meant 25 %
        raise SectorbenchError(f"{what} is a fraction (0.25 means 25 %), got {value!r}")
    return float(value)


@dataclass(frozen=True)
class GateConfig:
    """How strict the gate is.

    Build one from a thresholds file with
    ``GateConfig.from_thresholds(load_thresholds(path), alpha=..., normalize=...)``.
    """

    # 1 % false alarms per kernel from the test alone; the threshold makes it far rarer.
    alpha: float = 0.01
    # Slowdowns under 10 % are within what a shared VM does from day to day.
    threshold: float = 0.10
    # Some kernels are noisier (or more critical) than others: kernel name -> fraction.
    per_kernel: dict[str, float] = field(default_factory=dict)
    # None: raw times; "overhead": divide by the row's NoOperation; else a kernel name to divide by.
    normalize: str | None = None

    def __post_init__(self):
        if isinstance(self.alpha, bool) or not isinstance(self.alpha, (int, float)) or not 0.0 < self.alpha < 0.5:
            raise SectorbenchError(f"alpha must be in (0, 0.5), got {self.alpha!r}")
        _check_threshold(self.threshold, "threshold")
        if DEFAULT_KEY in self.per_kernel:
            raise SectorbenchError(
                f"per_kernel holds {DEFAULT_KEY!r}: pass it as threshold (GateConfig.from_thresholds does this)"
            )
        for kernel, value in self.per_kernel.items():
            _check_threshold(value, f"threshold for kernel {kernel}")
        if self.normalize is not None and (not isinstance(self.normalize, str) or not self.normalize):
            raise SectorbenchError(f"--normalize must be {OVERHEAD!r} or a kernel name (got {self.normalize!r})")
        object.__setattr__(self, "per_kernel", dict(self.per_kernel))  # a private copy

    @classmethod
    def from_thresholds(cls, thresholds: dict[str, float], **kwargs) -> GateConfig:
        """Config from ``load_thresholds``' dict: its ``"default"`` becomes ``threshold``."""
        per_kernel = dict(thresholds)
        if DEFAULT_KEY in per_kernel:
            kwargs["threshold"] = per_kernel.pop(DEFAULT_KEY)
        return cls(per_kernel=per_kernel, **kwargs)

    def threshold_for(self, kernel: str) -> float:
        return self.per_kernel.get(kernel, self.threshold)


#: A thresholds file is a few lines of TOML: a larger one is refused unread.
MAX_THRESHOLDS_BYTES = 2**20


def load_thresholds(path: Path | str) -> dict[str, float]:
    """Read a thresholds file; returns ``{"default": d, kernel: t, ...}``.

    The file is TOML with an optional top-level ``default`` and an optional
    ``[kernels]`` table, each value a fraction (0.10 = 10 %)::

        default = 0.10
        [kernels]
        naive = 0.25
        sse2 = 0.05

    ``"default"`` is present in the result only when the file sets it. Any
    problem raises ``SectorbenchError`` with a one-line message.
    """
    path = Path(path)
    try:  # read_input says what is wrong with the file itself (missing, a folder, too large)
        data = tomllib.loads(read_input(path, MAX_THRESHOLDS_BYTES).decode("utf-8"))
    except (tomllib.TOMLDecodeError, UnicodeDecodeError) as exc:
        message = " ".join(str(exc).split())
        raise SectorbenchError(f"{path}: not valid TOML ({message})") from None

    unknown = sorted(set(data) - {DEFAULT_KEY, "kernels"})
    if unknown:
        raise SectorbenchError(f"{path}: unknown key {unknown[0]!r} (expected {DEFAULT_KEY!r} and a [kernels] table)")
    thresholds: dict[str, float] = {}
    try:
        if DEFAULT_KEY in data:
            thresholds[DEFAULT_KEY] = _check_threshold(data[DEFAULT_KEY], DEFAULT_KEY)
        kernels = data.get("kernels", {})
        if not isinstance(kernels, dict):
            raise SectorbenchError(f"'kernels' must be a table ([kernels]), got {kernels!r}")
        for kernel, value in kernels.items():
            if kernel == DEFAULT_KEY:
                raise SectorbenchError(f"kernels.{DEFAULT_KEY} is reserved; set {DEFAULT_KEY} at the top of the file")
            thresholds[kernel] = _check_threshold(value, f"kernels.{kernel}")
    except SectorbenchError as exc:
        raise SectorbenchError(f"{path}: {exc}") from None
    return thresholds


# --------------------------------------------------------------------------
# report


@dataclass(frozen=True)
class GateRow:
    """One kernel/build/mode compared: medians in seconds, then stats.compare's outcome.

    ratio, low and high are current/baseline; of normalised times when the
    report's config normalises, which the medians (raw seconds) are not.
    """

    kernel: str
    cc: str
    flags: str
    mode: str
    baseline_median_s: float
    current_median_s: float
    ratio: float
    low: float
    high: float
    p_slower: float
    p_faster: float
    verdict: str  # regression | improvement | unchanged | inconclusive | unchanged code
    threshold: float
    base_dropped: int = 0  # upward outliers stats.compare left out
    current_dropped: int = 0
    threads: int = 1
    #: Medians of what was compared: the seconds above, or with normalisation the unitless
    #: ratios to the reference (so that they and the ratio are of one quantity; the ratio is
    #: stats.compare's Hodges-Lehmann estimate, not the ratio of these medians).
    baseline_compared: float | None = None
    current_compared: float | None = None
    #: The verdict came from valgrind's instruction counts (--metric instructions): the
    #: compared values are net instructions per test, the ratio theirs, and no p (no test made).
    counted: bool = False

    @property
    def key(self) -> RowKey:
        return RowKey(self.kernel, self.cc, self.flags, self.mode, self.threads)


@dataclass(frozen=True)
class GateFailure:
    """A row measured (ok) in the baseline that the current run could not compare.

    status: the current row's (crashed, timed-out, skipped, ...), or "missing" when the
    current run has no such row.  A kernel that stopped working is the worst regression,
    so the gate fails on it rather than passing over it.
    """

    key: RowKey
    status: str
    reason: str | None = None

    @property
    def text(self) -> str:
        return self.status + (f" ({self.reason})" if self.reason else "")


@dataclass(frozen=True)
class GateReport:
    """The gate's outcome. ``exit_code`` is 1 if any row regressed or failed, else 0."""

    config: GateConfig
    rows: tuple[GateRow, ...]  # baseline order; rows ok on both sides
    new_kernels: tuple[RowKey, ...]  # rows present only in the current run
    warnings: tuple[str, ...]  # one line each: environment, rows not compared
    #: Rows ok in the baseline but crashed, timed out, skipped or missing in the current run.
    failures: tuple[GateFailure, ...] = ()

    @property
    def regressions(self) -> tuple[GateRow, ...]:
        return tuple(r for r in self.rows if r.verdict == "regression")

    @property
    def improvements(self) -> tuple[GateRow, ...]:
        return tuple(r for r in self.rows if r.verdict == "improvement")

    @property
    def unchanged(self) -> tuple[GateRow, ...]:
        return tuple(r for r in self.rows if r.verdict == "unchanged")

    @property
    def inconclusive(self) -> tuple[GateRow, ...]:
        return tuple(r for r in self.rows if r.verdict == "inconclusive")

    @property
    def unchanged_code(self) -> tuple[GateRow, ...]:
        return tuple(r for r in self.rows if r.verdict == UNCHANGED_CODE)

    @property
    def exit_code(self) -> int:
        return 1 if self.regressions or self.failures else 0


# --------------------------------------------------------------------------
# the gate


def row_label(key: RowKey, show_cc: bool) -> str:
    threads = f", {key.threads} threads" if key.threads > 1 else ""
    return f"{key.kernel} [{build_label(key.cc, key.flags, show_cc)}, {key.mode}{threads}]"


def _index(run: RunResult, side: str, show_cc: bool) -> dict[RowKey, KernelResult]:
    rows: dict[RowKey, KernelResult] = {}
    for row in run.results:
        key = row.key
        if key in rows:
            raise IncompatibleResults(f"duplicate row {row_label(key, show_cc)} in {side}")
        rows[key] = row
    return rows


def check_usable(run: RunResult, side: str) -> None:
    """The rows of a saved result as the gate reads them, else IncompatibleResults: no row
    twice (_index, the gate's own), and every measured (ok) row with its samples.  `export`
    and `plot` check with it too, so a file `regress` refuses is not silently exported (a
    pyperf file pyperf rejects, a Bencher file keeping one duplicate) or drawn."""
    show_cc = shows_cc(row.key for row in run.results)
    _index(run, side, show_cc)
    unsampled = next((row for row in run.results if row.status == "ok" and not row.samples_s), None)
    if unsampled is not None:
        raise IncompatibleResults(f"{row_label(unsampled.key, show_cc)} is ok but has no samples in {side}")


def check_scene(baseline: RunResult, scene: dict, schema: int = SCHEMA_VERSION) -> None:
    """A run of `scene` (a result's scene description) can be gated against `baseline`.

    Raises IncompatibleResults; the CLI calls it before measuring, gate() again after.
    A baseline with no rows, or none measured (ok), gates nothing: it is refused too.
    """
    if not baseline.results:
        raise IncompatibleResults(f"{_BASE} has no rows: there is nothing to gate against")
    if not any(row.status == "ok" for row in baseline.results):
        statuses = ", ".join(sorted({row.status for row in baseline.results}))
        raise IncompatibleResults(f"{_BASE} has no measured (ok) row ({statuses} only): nothing to gate against")
    unsampled = next((row for row in baseline.results if row.status == "ok" and not row.samples_s), None)
    if unsampled is not None:  # the gate compares samples: refused now, not after timing
        label = row_label(unsampled.key, shows_cc(r.key for r in baseline.results))
        raise IncompatibleResults(f"{label} is ok but has no samples in {_BASE}")
    if baseline.schema != schema:
        older = _BASE if isinstance(baseline.schema, int) and baseline.schema < schema else _CURRENT
        raise IncompatibleResults(
            f"different results schema: {baseline.schema!r} in {_BASE}, {schema!r} in {_CURRENT}: their times "
            f"measure different things; record {older} again with one version of sectorbench"
        )
    a, b = baseline.scene or {}, scene or {}
    names = [*a, *(name for name in b if name not in a)]
    differ = [
        f"{name} {a.get(name)!r} in {_BASE} vs {b.get(name)!r} in {_CURRENT}"
        for name in names
        if a.get(name) != b.get(name)
    ]
    if differ:
        raise IncompatibleResults("different scene: " + "; ".join(differ))


def check_rows(
    baseline: RunResult,
    rows: Iterable[RowKey],
    normalize: str | None = None,
    unrunnable: Iterable[tuple[RowKey, str]] = (),
) -> None:
    """A run of these rows (a Plan's) can be gated against `baseline`.

    Every row ok in the baseline must be among them, and so must the rows --normalize
    divides by; none of them may be one this machine cannot run (`unrunnable`, with the
    reasons: Plan.unrunnable).  Raises IncompatibleResults; the CLI calls it once a run's
    kernels are known, before they are timed, and gate() checks the same on the results.
    """
    current = set(rows)
    show_cc = shows_cc([*(r.key for r in baseline.results), *current])
    base_rows = _index(baseline, _BASE, show_cc)
    # Before timing, a row missing is one the run's options leave out, not one that failed.
    _check_missing(base_rows, current, show_cc, selection=True)
    _check_runnable(base_rows, dict(unrunnable), show_cc)
    if normalize not in (None, OVERHEAD):
        for key, row in base_rows.items():
            reference = key.with_kernel(normalize)
            if row.status == "ok" and reference not in current:
                raise IncompatibleResults(
                    f"cannot normalize by {normalize}: no {row_label(reference, show_cc)} in {_CURRENT}"
                )


def check_selection(
    baseline: RunResult, builds: Iterable[tuple[str, str]], modes: Iterable[str], threads: Iterable[int]
) -> None:
    """Before any build: every row ok in `baseline` has its (cc, flags) among `builds` (peers'
    rows are under PEER_CC, whatever the builds), its mode among `modes` and its thread count
    among `threads`; else the IncompatibleResults check_rows raises once the kernels are known
    (a mismatched --flags had been refused only after its build, seconds to minutes)."""
    builds, modes, threads = set(builds), set(modes), set(threads)
    base_rows = _index(baseline, _BASE, shows_cc(row.key for row in baseline.results))
    selectable = [
        key
        for key in base_rows
        if ((key.cc, key.flags) in builds or key.cc == PEER_CC) and key.mode in modes and key.threads in threads
    ]
    compilers = {key.cc for key in base_rows if key.cc != PEER_CC} | {cc for cc, _ in builds}
    _check_missing(base_rows, selectable, len(compilers) > 1, selection=True, builds=builds)


def _check_missing(
    base_rows: dict[RowKey, KernelResult],
    current: Iterable[RowKey],
    show_cc: bool,
    selection: bool = False,
    builds: Iterable[tuple[str, str]] | None = None,
) -> None:
    """Refuse when a row ok in the baseline is not among `current`: a `selection` (the rows a
    run is about to time, of its `builds`: (cc, flags), by default those of `current`) that
    leaves it out, or two results with no row in common."""
    current = set(current)
    missing = [key for key, row in base_rows.items() if row.status == "ok" and key not in current]
    if missing:
        more = f" (and {len(missing) - 1} more)" if len(missing) > 1 else ""
        said = f"missing kernel {row_label(missing[0], show_cc)} in {_CURRENT}{more}"
        if selection:
            options = "--kernels, --cc, --flags, --mode, --threads"
            said += f": this run does not select {'them' if more else 'it'} (see its {options})"
            builds = {(key.cc, key.flags) for key in current} if builds is None else set(builds)
            builds = {(cc, flags) for cc, flags in builds if cc != PEER_CC}
            first = missing[0]
            if builds and (first.cc, first.flags) not in builds:  # say the builds, not only "see --cc"
                ours = ", ".join(build_label(cc, flags, True) for cc, flags in sorted(builds))
                said += f"; {_BASE} was built with {build_label(first.cc, first.flags, True)}, this run builds {ours}"
        raise IncompatibleResults(said)


def _check_runnable(
    base_rows: dict[RowKey, KernelResult], unrunnable: dict[RowKey, str], show_cc: bool, where: str = "here"
) -> None:
    """Refuse when a row ok in the baseline cannot run on this machine (its reason in
    `unrunnable`): a baseline recorded on a CPU with AVX-512 and gated on one without had its
    AVX-512 rows fail the gate, exit 1 after every other row was timed, as if the code had
    broken them; the baseline describes another machine, which no gate of this one can settle."""
    lost = [(key, unrunnable[key]) for key, row in base_rows.items() if row.status == "ok" and key in unrunnable]
    if lost:
        (key, reason), more = lost[0], f" (and {len(lost) - 1} more)" if len(lost) > 1 else ""
        raise IncompatibleResults(
            f"{row_label(key, show_cc)}{more} is measured in {_BASE} but cannot be timed {where} ({reason}), so it "
            f"cannot be gated: record the baseline where this job runs (the same CPU features, --disable-isa "
            "and packages), or gate in the same job (run --against REF)"
        )


#: Said once under a machine's critical differences when times are gated as they are: a CI user
#: whose runner changed hardware saw "machine: critical: ... differs" lines above a verdict on
#: times of two machines, and no word on what to do.
OTHER_MACHINE_ADVICE = (
    "machine: the times compared come from different machines: gate in one job (run --against REF), "
    "or divide by a reference timed in the same rounds (--normalize overhead, or --normalize KERNEL), "
    "or record the baseline where this job runs"
)


def _environment_warnings(
    baseline: RunResult, current: RunResult, used_ccs: set[str], normalize: str | None = None
) -> list[str]:
    warnings: list[str] = []
    env_a, env_b = baseline.env or {}, current.env or {}
    machine_a, machine_b = env_a.get("machine"), env_b.get("machine")
    if machine_a and machine_b:
        differences = compare_fingerprints(machine_a, machine_b)
        warnings += [f"machine: {line}" for line in differences]
        if normalize is None and any(line.startswith("critical: ") for line in differences):
            warnings.append(OTHER_MACHINE_ADVICE)
    elif machine_a or machine_b:
        warnings.append(f"machine: no fingerprint in {_CURRENT if machine_a else _BASE}")
    cc_a, cc_b = env_a.get("compilers") or {}, env_b.get("compilers") or {}
    for cc in sorted(set(cc_a) | set(cc_b)):
        if cc in cc_a and cc in cc_b:
            warnings += [f"compiler {cc}: {line}" for line in compare_fingerprints(cc_a[cc], cc_b[cc])]
        elif cc in used_ccs:
            warnings.append(f"compiler {cc}: no fingerprint in {_CURRENT if cc in cc_a else _BASE}")
    return warnings


def _reference(
    rows: dict[RowKey, KernelResult], row: KernelResult, normalize: str, side: str, show_cc: bool
) -> list[float]:
    """The samples `row`'s samples are divided by, in the run of `rows`."""
    label = row_label(row.key, show_cc)
    if normalize == OVERHEAD:
        if not row.overhead_samples_s:
            raise IncompatibleResults(f"cannot normalize by overhead: {label} has no NoOperation samples in {side}")
        return row.overhead_samples_s
    ref_key = row.key.with_kernel(normalize)
    ref = rows.get(ref_key)
    if ref is None:
        raise IncompatibleResults(f"cannot normalize by {normalize}: no {row_label(ref_key, show_cc)} in {side}")
    if ref.status != "ok":
        raise IncompatibleResults(
            f"cannot normalize by {normalize}: {row_label(ref_key, show_cc)} is {ref.status} in {side}"
        )
    return ref.samples_s


def _samples(
    rows: dict[RowKey, KernelResult], row: KernelResult, normalize: str | None, side: str, show_cc: bool
) -> list[float]:
    label = row_label(row.key, show_cc)
    if not row.samples_s:
        raise IncompatibleResults(f"{label} is ok but has no samples in {side}")
    try:
        if normalize is None:
            normalized(row.samples_s, row.samples_s)  # validates: finite and > 0
            return list(row.samples_s)
        return normalized(row.samples_s, _reference(rows, row, normalize, side, show_cc))
    except ValueError as exc:
        raise IncompatibleResults(f"{label} in {side}: unusable samples ({exc})") from None


#: At most this many kernel names of a side are listed when two results share no row.
LISTED_KERNELS = 6


def _nothing_in_common(base_rows: dict, cur_rows: dict, show_cc: bool) -> str:
    """Why two results share no row: another build (what --across-builds is for), or, with the
    same builds, other kernels, modes or thread counts (for which it is not: it was advised
    whatever the reason, even to a regress that had given it, as "BASELINE is -O2, CURRENT -O2")."""
    if not cur_rows:
        return f"{_CURRENT} has no rows"
    builds = [
        ", ".join(sorted({build_label(key.cc, key.flags, show_cc) for key in rows})) for rows in (base_rows, cur_rows)
    ]
    if builds[0] != builds[1]:
        return (
            f"{_BASE} is {builds[0]}, {_CURRENT} {builds[1]} "
            "(two builds: regress --across-builds pairs their rows by kernel)"
        )

    def listed(values) -> str:
        names = sorted({str(value) for value in values})
        more = f" and {len(names) - LISTED_KERNELS} more" if len(names) > LISTED_KERNELS else ""
        return ", ".join(names[:LISTED_KERNELS]) + more

    for what, part in (("kernels", lambda k: k.kernel), ("modes", lambda k: k.mode), ("threads", lambda k: k.threads)):
        base, cur = {part(k) for k in base_rows}, {part(k) for k in cur_rows}
        if not base & cur:
            return f"both {builds[0]}, but {_BASE} has {what} {listed(base)} and {_CURRENT} {listed(cur)}"
    return f"both {builds[0]}, but no kernel, mode and thread count in both"


def gate(baseline: RunResult, current: RunResult, config: GateConfig = GateConfig()) -> GateReport:
    """Compare `current` with `baseline`, row by row; see the module docstring.

    A row ok in the baseline that is missing, crashed, timed out or skipped in the
    current run is a failure (``failures``, exit status 1); a row not ok in the
    baseline is skipped with a warning; rows only in the current run are listed
    in ``new_kernels``.
    """
    check_scene(baseline, current.scene, current.schema)
    show_cc = shows_cc(r.key for r in (*baseline.results, *current.results))
    base_rows = _index(baseline, _BASE, show_cc)
    cur_rows = _index(current, _CURRENT, show_cc)
    if base_rows and not any(key in cur_rows for key, row in base_rows.items() if row.status == "ok"):
        # No row in common: these are not two runs of one benchmark (another build or scene
        # setup, e.g. -O2 against -O3 without --across-builds), not a run that lost kernels.
        raise IncompatibleResults(f"no row in common: {_nothing_in_common(base_rows, cur_rows, show_cc)}")

    # A row skipped for a CPU feature the current machine lacks says what that machine is, not
    # what the code does: refused as run --baseline refuses it before timing (check_rows).
    _check_runnable(
        base_rows,
        {key: row.reason for key, row in cur_rows.items() if row.status == "skipped" and lacks_cpu_feature(row.reason)},
        show_cc,
        f"in {_CURRENT}",
    )
    rows: list[GateRow] = []
    failures: list[GateFailure] = []
    row_warnings: list[str] = []
    base_differs, cur_differs = differing_by_row(baseline), differing_by_row(current)
    for key, base in base_rows.items():
        cur = cur_rows.get(key)
        if cur is None:
            if base.status == "ok":
                failures.append(GateFailure(key, "missing", f"not in {_CURRENT}"))
            continue
        label = row_label(key, show_cc)
        if base.status == "ok" and cur.status != "ok":
            failures.append(GateFailure(key, cur.status, cur.reason))
            continue
        if base.status != "ok" or cur.status != "ok":
            if base.status != cur.status:
                side, row = (_BASE, base) if base.status != "ok" else (_CURRENT, cur)
                reason = f" ({row.reason})" if row.reason else ""
                row_warnings.append(f"{label}: {row.status} in {side}{reason}; not compared")
            continue
        if config.normalize not in (None, OVERHEAD):
            reference = cur_rows.get(key.with_kernel(config.normalize))
            if reference is not None and reference.status != "ok":  # itself a failure, listed once
                failures.append(
                    GateFailure(key, "not compared", f"its reference {config.normalize} is {reference.status}")
                )
                continue
        differs = cur_differs.get(id(cur))
        if differs is not None and id(base) not in base_differs:
            # a kernel whose answers broke is a regression whatever its time (and a wrong one may well be faster)
            failures.append(GateFailure(key, "answers differ", differs.note.removeprefix("answers differ ")))
            continue
        if base.hits is not None and cur.hits is not None and base.hits != cur.hits:
            row_warnings.append(f"{label}: hit count {base.hits} in {_BASE} vs {cur.hits} in {_CURRENT}")
        threshold = config.threshold_for(key.kernel)
        # The reference of --normalize divided by itself is 1 in every round: it is shown on its
        # raw samples and not gated (it read "unchanged, p 1" while it slowed down eightfold)
        reference_row = config.normalize not in (None, OVERHEAD) and key.kernel == config.normalize
        normalize = None if reference_row else config.normalize
        base_samples = _samples(base_rows, base, normalize, _BASE, show_cc)
        cur_samples = _samples(cur_rows, cur, normalize, _CURRENT, show_cc)
        outcome: Comparison = compare(base_samples, cur_samples, alpha=config.alpha, threshold=threshold)
        same_code = base.code_sha256 is not None and base.code_sha256 == cur.code_sha256
        if reference_row:
            row_warnings.append(
                f"{label}: the --normalize reference, not gated (every other row is divided by it: its raw "
                f"ratio {outcome.ratio:.3f} shows as the inverse change in each of them)"
            )
        if not same_code and (drift := _toolchain_drift(base, cur, baseline, current)):
            row_warnings.append(f"{label}: {drift}")
        rows.append(
            GateRow(
                kernel=key.kernel,
                cc=key.cc,
                flags=key.flags,
                mode=key.mode,
                threads=key.threads,
                baseline_median_s=statistics.median(base.samples_s),
                current_median_s=statistics.median(cur.samples_s),
                ratio=outcome.ratio,
                low=outcome.low,
                high=outcome.high,
                p_slower=outcome.p_slower,
                p_faster=outcome.p_faster,
                verdict=NORMALIZE_REFERENCE if reference_row else UNCHANGED_CODE if same_code else outcome.verdict,
                threshold=threshold,
                base_dropped=outcome.base_dropped,
                current_dropped=outcome.current_dropped,
                baseline_compared=statistics.median(base_samples),
                current_compared=statistics.median(cur_samples),
            )
        )

    known = {key.kernel for key in (*base_rows, *cur_rows)}
    threshold_warnings = [
        f"thresholds: no kernel named {name!r} in either run" for name in config.per_kernel if name not in known
    ]
    used_ccs = {row.cc for row in rows}
    power_warnings = _power_warnings([(base_rows[r.key], cur_rows[r.key]) for r in rows], config.alpha)
    return GateReport(
        config=config,
        rows=tuple(rows),
        new_kernels=tuple(key for key in cur_rows if key not in base_rows),
        warnings=tuple(
            [
                *power_warnings,
                *_environment_warnings(baseline, current, used_ccs, config.normalize),
                *row_warnings,
                *threshold_warnings,
            ]
        ),
        failures=tuple(failures),
    )


def _power_warnings(pairs: Iterable[tuple[KernelResult, KernelResult]], alpha: float) -> list[str]:
    """One line per pair of sample counts among `pairs` (baseline row, current row) that cannot reach alpha."""
    sizes = {(len(base.samples_s), len(cur.samples_s)) for base, cur in pairs}
    return [
        f"{_power_problem(base_n, current_n, alpha)}: no row can be called a regression"
        for base_n, current_n in sorted(sizes)
        if not can_reach_alpha(base_n, current_n, alpha)
    ]


def uncounted_rows(report: GateReport) -> tuple[GateRow, ...]:
    """The rows of a count-gated report (--metric instructions) that were gated on time."""
    return tuple(r for r in report.rows if not r.counted)


def _without_count_reason(row: KernelResult | None, side: str) -> str:
    return (row and row.instructions_reason) or f"no instruction counts in {side}"


def uncounted_line(report: GateReport, baseline: RunResult, current: RunResult) -> str | None:
    """One line saying which rows of a count-gated report were gated on time instead, and why
    (each side's instructions_reason: valgrind missing or failing, AVX-512 code); None when
    every row was counted."""
    timed = uncounted_rows(report)
    if not timed:
        return None
    base, cur = {r.key: r for r in baseline.results}, {r.key: r for r in current.results}
    kernels_by_reason: dict[str, list[str]] = {}
    for row in timed:
        before, after = base.get(row.key), cur.get(row.key)
        if after is None or after.instructions is None:
            reason = _without_count_reason(after, _CURRENT)
        else:
            reason = _without_count_reason(before, _BASE)
        kernels = kernels_by_reason.setdefault(reason, [])
        if row.kernel not in kernels:
            kernels.append(row.kernel)
    why = "; ".join(
        f"{reason} ({', '.join(kernels[:3])}{f' and {len(kernels) - 3} more' if len(kernels) > 3 else ''})"
        for reason, kernels in kernels_by_reason.items()
    )
    if len(timed) == len(report.rows):
        return f"instructions: no row was gated on instruction counts, all {len(timed)} on time: {why}"
    return f"instructions: {len(timed)} of {len(report.rows)} rows gated on time, not on instruction counts: {why}"


def with_counts_noted(report: GateReport, baseline: RunResult, current: RunResult) -> GateReport:
    """A count-gated report's warnings: the power lines only for the rows still gated on time
    (a count needs no rounds), and uncounted_line first."""
    show_cc = shows_cc(r.key for r in (*baseline.results, *current.results))
    base_rows, cur_rows = _index(baseline, _BASE, show_cc), _index(current, _CURRENT, show_cc)
    every = _power_warnings([(base_rows[r.key], cur_rows[r.key]) for r in report.rows], report.config.alpha)
    timed = _power_warnings([(base_rows[r.key], cur_rows[r.key]) for r in uncounted_rows(report)], report.config.alpha)
    line = uncounted_line(report, baseline, current)
    warnings = [*([line] if line else []), *timed, *(w for w in report.warnings if w not in every)]
    return replace(report, warnings=tuple(warnings))


#: Why a row whose counts come from two compilers or flag sets is gated on time (docs/ci.md,
#: "Never rank compilers or fast-math builds by instruction count").
COUNTS_OF_ONE_BUILD = "counts compare the code of one compiler and flag set only"


def compiler_versions(run: RunResult) -> dict[str, str]:
    """Each compiler's `--version` first line in `run`'s environment, by the name rows give it."""
    compilers = (run.env or {}).get("compilers") or {}
    return {cc: line for cc, entry in compilers.items() if isinstance(line := entry.get("version_line"), str)}


def without_counts(row: KernelResult, reason: str) -> KernelResult:
    """`row` with its valgrind counts withdrawn, and why in its instructions_reason."""
    withdrawn = dict(instructions=None, overhead_instructions=None, instructions_tests=None)
    return replace(row, **withdrawn, instructions_reason=reason)


def comparable_counts(baseline: RunResult, current: RunResult) -> RunResult:
    """`current` with the counts withdrawn from every row whose compiler (`--version` line) is
    not the baseline row's: a count weighs every instruction alike, so clang's code and gcc's
    differ in count by their scheduling, not by the change (basic 3.0 against 10.5 net
    instructions a test: a baseline from clang, gated where `cc` became gcc, failed with
    "regression", ratio 3.5, no statistics and no --confirm).  Those rows are gated on time,
    and the gate's instructions line says why.  Where either side's version is unknown, as it is
    in an older file, the counts stay."""
    before, after = compiler_versions(baseline), compiler_versions(current)
    native_before, native_after = native_expansions(baseline), native_expansions(current)
    counted = {row.key for row in baseline.results if row.instructions is not None}
    rows = []
    for row in current.results:
        if row.key in counted and row.instructions is not None:
            if now := other_compiler(row.cc, before, after):
                row = without_counts(row, f"counted with {now}, {_BASE} with {before[row.cc]}: {COUNTS_OF_ONE_BUILD}")
            elif here := other_native(row.cc, row.flags.split(), native_before, native_after):
                row = without_counts(row, f"{here}: {COUNTS_OF_ONE_BUILD}")
        rows.append(row)
    return replace(current, results=rows)


def native_expansions(run: RunResult) -> dict[str, dict]:
    """What -march=native meant to each compiler in `run`'s environment (march and features)."""
    compilers = (run.env or {}).get("compilers") or {}
    return {cc: native for cc, entry in compilers.items() if isinstance(native := entry.get("march_native"), dict)}


def other_native(cc: str, flags: Iterable[str], before: dict[str, dict], after: dict[str, dict]) -> str | None:
    """Why a -march=native build's counts in `after` are not those of the same build in
    `before`: the hosts' -march=native differ (another CPU's code, same compiler and flags: a
    Haswell baseline against an x86-64 host's read 1.5 times basic's count, a "regression"
    of no change); None where the flags name no native, or either expansion is unknown."""
    a, b = before.get(cc), after.get(cc)
    if not (uses_native(flags) and a and b) or a == b:
        return None
    if a.get("march") != b.get("march"):
        return f"-march=native means {b.get('march')} in {_CURRENT}, {a.get('march')} in {_BASE} ({cc})"
    return f"-march=native means other features in {_CURRENT} than in {_BASE} ({cc})"


def other_compiler(cc: str, before: dict[str, str], after: dict[str, str]) -> str | None:
    """The version line `cc` has in `after` where it differs from the one in `before` (counts
    of the two are not compared); None where they agree or either is unknown."""
    a, b = before.get(cc), after.get(cc)
    return b if a and b and a != b else None


def _toolchain_drift(base: KernelResult, cur: KernelResult, baseline: RunResult, current: RunResult) -> str | None:
    """'toolchain drift: ...' when the kernel's source and flags are the same but its code is not."""
    if not (base.code_sha256 and cur.code_sha256 and base.source_sha256):
        return None
    if base.source_sha256 != cur.source_sha256:
        return None  # the source changed: a different code is expected, and timed
    versions = [
        ((run.env or {}).get("compilers") or {}).get(row.cc, {}).get("version_line")
        for run, row in ((baseline, base), (current, cur))
    ]
    compilers = f" ({versions[0]} -> {versions[1]})" if versions[0] != versions[1] and all(versions) else ""
    return f"toolchain drift: same source and flags, different machine code{compilers}"


def _power_problem(base_n: int, current_n: int, alpha: float) -> str:
    return (
        f"{base_n} vs {current_n} samples cannot reach alpha = {alpha:g} (the smallest one-sided p is "
        f"{min_p_value(base_n, current_n):.3g}); {rounds_for_alpha(alpha, base_n)} rounds against "
        f"the baseline's {base_n} would, {rounds_for_alpha(alpha)} on both sides"
    )


def check_power(baseline: RunResult, repeat: int, alpha: float) -> None:
    """Refuse, before anything is built, a gate run whose rounds cannot reach `alpha`.

    With n baseline and m current samples, the one-sided Mann-Whitney test's smallest p
    is 1 / C(n + m, n) (every current sample above every baseline one); if that is not
    below alpha, no slowdown however large can fail the gate.  Raises SectorbenchError
    naming the rounds that would.
    """
    counts = [len(r.samples_s) for r in baseline.results if r.status == "ok" and r.samples_s]
    check_rounds(min(counts, default=repeat), repeat, alpha)


def check_rounds(base_n: int, repeat: int, alpha: float) -> None:
    """check_power's rule for `base_n` baseline rounds."""
    if not can_reach_alpha(base_n, repeat, alpha):
        raise SectorbenchError(f"--repeat {repeat}: {_power_problem(base_n, repeat, alpha)} (see --alpha)")


def check_saved_power(baseline: RunResult, current: RunResult, alpha: float) -> None:
    """Refuse two saved runs whose rounds cannot reach `alpha` on a row the gate must decide on
    time (ok in both, its code changed or unknown, not counted by valgrind in both): no
    slowdown however large could fail it, and `regress` exited 0 on an eightfold one, where
    `run --baseline` refuses such rounds before timing.  SectorbenchError naming the row."""
    current_rows = {row.key: row for row in current.results}
    show_cc = shows_cc(row.key for row in (*baseline.results, *current.results))
    for base in baseline.results:
        cur = current_rows.get(base.key)
        if cur is None or base.status != "ok" or cur.status != "ok" or not base.samples_s or not cur.samples_s:
            continue
        if base.code_sha256 is not None and base.code_sha256 == cur.code_sha256:
            continue  # unchanged code: no test to decide
        if base.instructions is not None and cur.instructions is not None:
            continue  # gated on the counts
        base_n, cur_n = len(base.samples_s), len(cur.samples_s)
        if not can_reach_alpha(base_n, cur_n, alpha):
            raise SectorbenchError(
                f"{row_label(base.key, show_cc)}: {_power_problem(base_n, cur_n, alpha)}: no slowdown of it could "
                "fail the gate (see --alpha, and run's --repeat)"
            )


def check_ab_rounds(repeat: int, alpha: float) -> None:
    """check_power's rule for run --against, whose sides are timed in the same `repeat` rounds."""
    if not can_reach_alpha(repeat, repeat, alpha):
        raise SectorbenchError(
            f"--repeat {repeat}: {repeat} rounds a side cannot reach alpha = {alpha:g} (the smallest one-sided p "
            f"is {min_p_value(repeat, repeat):.3g}); --repeat {rounds_for_alpha(alpha)} would (see --alpha)"
        )


def as_baseline_build(current: RunResult, baseline: RunResult) -> tuple[RunResult, str]:
    """`current` with its rows relabelled to the baseline's build, to gate one build against
    another, and the line saying which two builds were paired (the gate's rows then name the
    baseline's only).

    Rows are matched by (kernel, cc, flags, mode); comparing, say, a compiler upgrade or
    -O0 against -O2 means pairing them by kernel and mode alone, which is only
    unambiguous when each run holds a single build.  The peers' rows (Python: no compiler,
    no flags) are no build: they pair with the peers' rows of the other run as they are.
    """
    builds = {
        side: {(r.cc, r.flags) for r in run.results if r.cc != PEER_CC}
        for side, run in (("BASELINE", baseline), ("CURRENT", current))
    }
    for side, found in builds.items():
        if len(found) != 1:
            raise IncompatibleResults(f"--across-builds needs one build per run; {side} has {len(found)}")
    ((cc, flags),) = builds["BASELINE"]
    ((current_cc, current_flags),) = builds["CURRENT"]
    # Counts of two builds are not compared (COUNTS_OF_ONE_BUILD): those rows are gated on time.
    other = (current_cc, current_flags) != (cc, flags)
    why = f"counted in {_CURRENT}'s build {current_cc} {current_flags}, {_BASE}'s {cc} {flags}: {COUNTS_OF_ONE_BUILD}"
    relabelled = [
        r
        if r.cc == PEER_CC
        else replace(without_counts(r, why) if other and r.instructions is not None else r, cc=cc, flags=flags)
        for r in current.results
    ]
    paired = (
        f"--across-builds: BASELINE's build {cc} {flags} against CURRENT's {current_cc} {current_flags}, "
        "rows paired by kernel and mode (the flags column names BASELINE's)"
    )
    return replace(current, results=relabelled), paired


# ------------------------------------------------------------------------ instruction counts


def compared_counts(before: KernelResult, after: KernelResult) -> tuple[float, float] | None:
    """The two rows' gated quantities, like for like: net instructions per test on both sides,
    or gross on both where either net is not above 0 (a kernel whose loop is no longer than
    its NoOperation's).  Net on one side against gross on the other had called a kernel that
    fell to its NoOperation's count a regression.  None where a side was not counted."""
    nets = before.net_instructions_per_test, after.net_instructions_per_test
    if None in nets:
        return None
    if min(nets) > 0:
        return nets
    return before.instructions / before.instructions_tests, after.instructions / after.instructions_tests


def gate_counts(baseline: RunResult, current: RunResult, report: GateReport) -> GateReport:
    """The report with the verdict of every row counted on both sides taken from the counts.

    Counts are deterministic, so there is no statistics: a ratio above 1 + threshold is a
    regression, below 1 / (1 + threshold) an improvement, else unchanged.  ratio, low and
    high are the count ratio; p is NaN (no test was made)."""
    base = {r.key: r for r in baseline.results}
    cur = {r.key: r for r in current.results}
    rows = []
    for row in report.rows:
        a, b = base.get(row.key), cur.get(row.key)
        counts = compared_counts(a, b) if a and b else None
        if counts is None or counts[0] <= 0:
            rows.append(row)
            continue
        rows.append(count_row(row, *counts))
    return replace(report, rows=tuple(rows))


def count_row(row: GateRow, before: float, after: float) -> GateRow:
    ratio = after / before
    limit = 1 + row.threshold
    verdict = "regression" if ratio > limit else "improvement" if ratio < 1 / limit else "unchanged"
    return replace(
        row,
        ratio=ratio,
        low=ratio,
        high=ratio,
        p_slower=math.nan,
        p_faster=math.nan,
        verdict=verdict,
        baseline_compared=before,
        current_compared=after,
        counted=True,
    )
