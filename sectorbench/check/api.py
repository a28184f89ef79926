"""`sectorbench.verify(...)`: verify from a test suite, as a value to assert on.

    def test_my_kernel():
        report = sectorbench.verify(source="my_kernel.c", kernels="my_kernel", cases=5000)
        assert report.passed, report.summary()

The report's summary() (also its str()) is the readable text an assertion message needs
(pytest shows a non-string message by its repr, cut to 240 characters, hence summary()): each kernel's
verdict and counts, and its first failing rows as exact hex floats (float.fromhex reads
them back).  Bad arguments raise ValueError naming the argument, before anything is
built; a kernel that does not compile raises SectorbenchError with the compiler's message.
"""

from __future__ import annotations

import contextlib
import numbers
import os
import shutil
from collections.abc import Sequence
from dataclasses import dataclass
from pathlib import Path

from ..errors import SectorbenchError
from ..measure.deadlines import DEFAULT_KERNEL_TIMEOUT_S, Deadlines

#: Failing rows kept per kernel in a report (its str() shows them all).
DEFAULT_SHOW = 3
#: The build when none is named: what `sectorbench verify` checks by default.
DEFAULT_FLAGS = "-O2"
#: The verdicts a kernel passes with: a skipped one (its CPU feature missing) was not judged.
PASSING = ("exact", "rounding-band", "skipped")


@dataclass(frozen=True)
class KernelReport:
    """One kernel of one build: its verdict (exact | rounding-band | FAIL | skipped | crashed | timed-out)."""

    kernel: str
    flags: str
    verdict: str
    cases: int
    mismatches: dict
    loop_checks: int
    reason: str | None  # why it was skipped or crashed
    failing: list  # its first failing rows: inputs as exact hex floats, the kernel's and the oracle's answers

    @property
    def passed(self) -> bool:
        return self.verdict in PASSING

    def summary(self) -> str:
        """Its verdict, its counts, and its failing rows as exact hex floats."""
        head = f"{self.kernel} [{self.flags}]: {self.verdict}"
        if self.reason:
            return f"{head} ({self.reason})"
        counts = ", ".join(f"{count} {name}" for name, count in self.mismatches.items() if count)
        lines = [f"{head} on {self.cases} cases and {self.loop_checks} loop checks" + (f"; {counts}" if counts else "")]
        for row in self.failing:
            where = f"row {row['row']}" if row["row"] is not None else "loop"
            labels = "".join(f" {k}={v}" for k, v in row.get("labels", {}).items())
            inputs = " ".join(f"{k}={v}" for k, v in row["inputs"].items())
            answer = f"kernel {row['kernel']}" + (f", oracle {row['oracle']}" if row["oracle"] is not None else "")
            lines.append(
                f"    {where} ({row['group']}, {row['class']}){labels}: {inputs}{' -> ' if inputs else ''}{answer}"
            )
        return "\n".join(lines)


@dataclass(frozen=True)
class Report:
    """What sectorbench.verify returns: `passed`, a KernelReport per kernel and build, and the
    full result (`result.to_dict()` is what `verify --json` writes)."""

    passed: bool
    family: str
    cases: int
    seed: int | None
    kernels: tuple[KernelReport, ...]
    result: object  # sectorbench.verify.VerifyResult

    def kernel(self, name: str, flags: str | None = None) -> KernelReport:
        for report in self.kernels:
            if report.kernel == name and (flags is None or report.flags == flags):
                return report
        raise KeyError(f"no kernel {name!r} in this report")

    def summary(self) -> str:
        """The report as text: the verdict, then each kernel's summary (also str(report))."""
        verdict = "passed" if self.passed else "FAILED"
        seed = f", seed {self.seed}" if self.seed is not None else ""
        head = f"sectorbench.verify {verdict}: {self.family} family, {self.cases} cases{seed}"
        return "\n".join([head, *("  " + k.summary().replace("\n", "\n  ") for k in self.kernels)])

    __str__ = summary


def _names(value, argument: str) -> tuple[str, ...]:
    if value is None:
        return ()
    items = value.split(",") if isinstance(value, str) else value  # `value` stays as given, for the messages
    if not isinstance(items, Sequence) or not all(isinstance(v, str) for v in items):
        raise ValueError(f"{argument} must be a name, a comma-separated string or a list of names (got {value!r})")
    names = tuple(v.strip() for v in items if v.strip())
    if not names:  # "" or " , " meant no name, not every default kernel
        raise ValueError(f"{argument} is empty (got {value!r}): name some, or leave it out (None) for the defaults")
    return names


def _integer(value) -> int | None:
    """An int, numpy's included (a notebook's np.int64); None for anything else, bool too."""
    return int(value) if isinstance(value, numbers.Integral) and not isinstance(value, bool) else None


def _paths(value) -> tuple[Path, ...]:
    if value is None:
        return ()
    items = [value] if isinstance(value, str | os.PathLike) else value
    if not isinstance(items, Sequence) or not all(isinstance(v, str | os.PathLike) for v in items):
        raise ValueError(f"source must be a path to a C file or a list of them (got {value!r})")
    paths = tuple(Path(v) for v in items)
    seen = set()
    for path in paths:
        if not path.is_file():
            raise ValueError(f"source {str(path)!r} is not a file")
        if path.resolve() in seen:  # as `--source` twice: its kernels would be defined twice
            raise ValueError(f"source {str(path)!r} is given twice")
        seen.add(path.resolve())
    return paths


def verify(
    *,
    source=None,
    kernels=None,
    flags=DEFAULT_FLAGS,
    cases=None,
    seed: int = 0,
    family: str | None = None,
    cc: str | None = None,
    show: int = DEFAULT_SHOW,
    strict_special: bool = False,
    jobs: int | None = 1,
    kernel_timeout: float = DEFAULT_KERNEL_TIMEOUT_S,
) -> Report:
    """Check kernels against the exact oracle, as `sectorbench verify` does, and return a Report.

    source: C file(s) with your kernel rows, built with sectorbench's kernels; kernels: names
    (a list or "a,b"), default the family's own; flags: one build's flags ("-O2 -ffast-math")
    or a list of builds; cases: rows per random generator (an int, default 20000) or the
    path of an .npz case file (`verify --input`); seed: of the generated cases; family:
    default the family of the named kernels (else the first registered family); cc: the C
    compiler (default $CC, else cc); show: failing rows kept per kernel in the report
    (default 3); strict_special: fail fast-math builds on NaN, inf, subnormal and -0.0
    inputs too (`verify --strict-special`); jobs: processes judging the case batches (default 1: a test suite
    runs its own workers; None: one per CPU); kernel_timeout: seconds a kernel may go without
    answering before it is killed and its verdict is "timed-out" (the floor of every
    deadline, as `verify --kernel-timeout`).

    Returns a Report: `passed` (every verdict exact, rounding-band or skipped), `kernels` (a
    KernelReport per kernel and build: verdict, cases, mismatches by class, loop_checks, reason,
    its first failing rows as exact hex floats), `report.kernel(name, flags)`, `summary()` (also
    its str()) for an assertion message, and `result` (`result.to_dict()` is what `verify
    --json` writes).  Raises ValueError naming the argument for a bad one (an unknown kernel,
    with the closest name; kernels of another family) before anything is timed or judged, and
    SectorbenchError when a kernel does not compile, with the compiler's message.
    """
    from .. import families
    from ..measure.selection import check_names
    from ..measure.worker import BuildSession
    from ..native.build import DEFAULT_CC, BuildConfig, build, repeated_build
    from .verify import VerifyConfig
    from .verify import verify as run_verify

    sources = _paths(source)
    names = _names(kernels, "kernels")
    flag_sets = [flags] if isinstance(flags, str) else flags
    if not isinstance(flag_sets, Sequence) or not flag_sets or not all(isinstance(f, str) for f in flag_sets):
        raise ValueError(f"flags must be a string of compiler flags or a list of them (got {flags!r})")
    input_path = None
    if isinstance(cases, str | os.PathLike):
        input_path = Path(cases)
        if not input_path.is_file():
            raise ValueError(f"cases {str(input_path)!r} is not a case file")
        cases = None
    elif cases is not None:
        if _integer(cases) is None or _integer(cases) < 1:
            raise ValueError(
                f"cases must be a positive number of rows or the path of an .npz case file (got {cases!r})"
            )
        cases = _integer(cases)
    if _integer(seed) is None or _integer(seed) < 0:
        raise ValueError(f"seed must be an integer >= 0 (got {seed!r})")
    seed = _integer(seed)
    if _integer(show) is None or _integer(show) < 0:
        raise ValueError(f"show must be an integer >= 0 (got {show!r})")
    show = _integer(show)
    if jobs is not None and (_integer(jobs) is None or _integer(jobs) < 1):
        raise ValueError(f"jobs must be a positive integer or None (got {jobs!r})")
    jobs = None if jobs is None else _integer(jobs)
    if strict_special not in (True, False):  # a truthy "no" or "false" would have asked for the strict check
        raise ValueError(f"strict_special must be True or False (got {strict_special!r})")
    strict_special = bool(strict_special)
    try:
        Deadlines(kernel_timeout)
    except SectorbenchError:
        raise ValueError(f"kernel_timeout must be a number of seconds above 0 (got {kernel_timeout!r})") from None
    if family is not None:
        try:
            families.get(family)
        except SectorbenchError as exc:
            raise ValueError(f"family: {exc}") from None
    if cc is not None and (not isinstance(cc, str) or not cc.strip()):
        raise ValueError(f"cc must be a C compiler's name or path (got {cc!r})")
    if shutil.which(cc or DEFAULT_CC) is None:
        given = f"cc {cc!r}" if cc else f"cc: the default compiler {DEFAULT_CC!r} ($CC, else cc)"
        raise ValueError(f"{given} is not found: pass cc= a compiler's name or path")
    try:
        builds = tuple(BuildConfig.parse(f, cc or DEFAULT_CC, sources) for f in flag_sets)
    except SectorbenchError as exc:
        raise ValueError(f"flags: {exc}") from None
    repeated = repeated_build(builds)  # as `--flags` twice
    if repeated:
        first, again = (flag_sets[place] for place in repeated)
        said = f" (as {first!r} and {again!r})" if first != again else ""
        raise ValueError(f"flags: the build {again!r} is given twice{said}: give each build once")
    if names:  # known, and of one family (the one checked unless `family` says otherwise)
        with contextlib.closing(BuildSession(builds[0], build(builds[0]))) as session:
            table = {k.name: k.family for k in session.kernels}
        table.update({peer.name: f.name for f in families.all_families() for peer in f.peers()})
        try:  # the CLI's check: the closest name suggested
            check_names(names, table)
        except SectorbenchError as exc:
            raise ValueError(f"kernels: {exc}") from None
        wrong = [name for name in names if family is not None and table[name] != family]
        if wrong:
            raise ValueError("kernels: " + "; ".join(f"{n} is a {table[n]} kernel, not a {family} one" for n in wrong))
        if len({table[name] for name in names}) > 1:
            kinds = ", ".join(f"{name} is a {table[name]} kernel" for name in names)
            raise ValueError(f"kernels: {kinds}: name kernels of one family")
        family = table[names[0]]
    config = VerifyConfig(
        family=family or VerifyConfig.family,
        kernels=names,
        builds=builds,
        cases=cases or VerifyConfig.cases,
        seed=seed,
        strict_special=strict_special,
        show=show,
        input_path=input_path,
        jobs=jobs,
        kernel_timeout=kernel_timeout,
    )
    if input_path is not None:  # read before any build, as the CLI's --input, and said of this argument
        from .verify import read_input

        try:
            read_input(families.get(config.family), input_path)
        except SectorbenchError as exc:
            raise ValueError(f"cases: {exc}") from None
    else:  # the CLI's limit, said of this argument
        from .verify import MAX_ESTIMATED_S, estimated_seconds

        seconds = estimated_seconds(families.get(config.family or families.all_families()[0].name), config)
        if seconds > MAX_ESTIMATED_S:
            raise ValueError(
                f"cases={config.cases} would take about {seconds / 3600:,.0f} hours "
                f"(limit {MAX_ESTIMATED_S / 3600:.0f}): pass fewer cases"
            )
    result = run_verify(config)
    reports = tuple(
        KernelReport(
            kernel=v.kernel,
            flags=v.flags,
            verdict=v.verdict if v.status == "ok" else v.status,
            cases=v.cases,
            mismatches=dict(v.mismatches),
            loop_checks=v.loop_checks,
            reason=v.reason,
            failing=list(v.failing) if v.verdict == "FAIL" else [],
        )
        for v in result.kernels
    )
    return Report(result.passed, result.family, result.cases, result.seed, reports, result)
