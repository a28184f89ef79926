"""`verify`: every kernel against the exact oracle on inputs built to break it.

The family supplies the cases, the exact reference and how an answer compares with it
(families/); this module runs the kernels and classifies each mismatch (first match
wins):
  nondeterministic  the kernel's answer for a row changes with its lane / position;
  special-value     the row has a NaN, an infinity, a float32 subnormal or a -0.0 input;
  logic-bug         the row lies exactly on the boundary by construction, or its
                    margin exceeds the kernel's declared rounding bound;
  rounding-band     margin <= the bound: float32 can be expected to get it wrong.
The margin is how many float32 roundings the row lies from the boundary the kernel got
wrong.  A kernel's verdict: exact (no mismatch), rounding-band (only tolerated ones) or
FAIL.  Special-value mismatches are tolerated only for builds with fast-math flags
(which promise no NaN, inf or signed zero), unless strict_special.
"""

from __future__ import annotations

import tempfile
from collections.abc import Callable
from dataclasses import asdict, dataclass, field
from pathlib import Path

import numpy as np

from . import SectorbenchError, environment, exact, families
from .build import BuildConfig, build
from .kernels import Kernel, select
from .results import SCHEMA_VERSION
from .scenes import make_scene
from .worker import BuildSession, WorkerCrashed, save_scene

CLASSES = ("rounding-band", "logic-bug", "special-value", "nondeterministic")
#: Flags that let the compiler assume no NaN, infinity or signed zero.
FAST_MATH_FLAGS = frozenset(
    {"-ffast-math", "-Ofast", "-ffinite-math-only", "-fno-honor-nans", "-fno-honor-infinities", "-fno-signed-zeros"}
)
SELF_CHECK_ROWS = 512
GRID_CHECK_ROWS = 64


@dataclass(frozen=True)
class VerifyConfig:
    family: str = "sector"
    kernels: tuple[str, ...] = ()
    builds: tuple[BuildConfig, ...] = (BuildConfig(),)
    cases: int = 20_000  # rows per random generator; near-boundary and grids come on top
    seed: int = 0
    strict_special: bool = False
    show: int = 0  # failing inputs kept per kernel
    input_path: Path | None = None  # user cases instead of generated ones
    disable_isa: tuple[str, ...] = ()


@dataclass(frozen=True)
class KernelVerdict:
    kernel: str
    flags: str
    cc: str
    status: str  # ok | skipped | crashed
    reason: str | None = None
    cases: int = 0
    rounding_bound: float = 0.0
    mismatches: dict = field(default_factory=dict)  # class -> count
    worst_margin: float | None = None  # largest margin among non-special mismatches
    metamorphic_inconsistencies: int = 0
    verdict: str = "FAIL"  # exact | rounding-band | FAIL
    failing: list = field(default_factory=list)  # the first `show` failing inputs, as hex floats


@dataclass(frozen=True)
class VerifyResult:
    family: str
    seed: int | None
    cases: int
    groups: dict
    env: dict
    kernels: list[KernelVerdict]
    kind: str = "verify"
    schema: int = SCHEMA_VERSION

    @property
    def passed(self) -> bool:
        return all(k.verdict != "FAIL" for k in self.kernels if k.status != "skipped")

    def to_dict(self) -> dict:
        return asdict(self)


def is_fast_math(flags: tuple[str, ...]) -> bool:
    return any(flag in FAST_MATH_FLAGS for flag in flags)


def verify(config: VerifyConfig, progress: Callable[..., None] = lambda what, total=None: None) -> VerifyResult:
    family = families.get(config.family)
    progress("generating cases")
    case_set = family.input_cases(config.input_path) if config.input_path else family.cases(config.cases, config.seed)
    _self_check(family, case_set, config.seed)
    references: dict = {}
    verdicts = []
    with tempfile.TemporaryDirectory(prefix="sectorbench-verify-") as scratch:
        scratch = Path(scratch)
        scene_path = save_scene(case_set.scene(), scratch)
        for build_config in config.builds:
            progress(f"building {build_config.label}")
            session = BuildSession(build_config, build(build_config), scene_path, config.disable_isa)
            try:
                verdicts += _verify_build(config, family, session, case_set, references, scratch, progress)
            finally:
                session.close()
    groups = {str(g): int(n) for g, n in zip(*np.unique(case_set.group.astype(str), return_counts=True))}
    env = {
        "machine": environment.machine_fingerprint(),
        "compilers": {b.cc: environment.compiler_fingerprint(b.cc) for b in config.builds},
    }
    return VerifyResult(config.family, None if config.input_path else config.seed, len(case_set), groups, env, verdicts)


def _self_check(family, case_set, seed: int) -> None:
    """The fast oracle must agree with plain Fraction arithmetic on a sample; else an internal error."""
    try:
        family.self_check(case_set, np.random.default_rng(seed), SELF_CHECK_ROWS)
    except exact.OracleSelfCheckError as exc:
        raise SectorbenchError(f"internal error: the oracle failed its self-check: {exc}") from None


def _verify_build(config, family, session, case_set, references, scratch, progress) -> list[KernelVerdict]:
    verdicts = []
    for kernel in select(session.kernels, list(config.kernels), config.family):
        progress(f"{kernel.name} {session.config.label}")
        base = dict(
            kernel=kernel.name,
            flags=" ".join(session.config.flags),
            cc=session.config.cc,
            rounding_bound=kernel.rounding_bound or family.default_rounding_bound,
        )
        if not kernel.runnable:
            verdicts.append(KernelVerdict(status="skipped", reason=kernel.skip_reason, **base))
            continue
        try:
            answers, unstable = _answers(session.worker, family, kernel, case_set, scratch)
        except WorkerCrashed as exc:
            verdicts.append(KernelVerdict(status="crashed", reason=str(exc), **base))
            session.restart()
            continue
        key = family.reference_key(kernel)
        if key not in references:
            progress("exact oracle")
            references[key] = family.reference(case_set, kernel)
        verdicts.append(
            _judge(family, kernel, session.config, case_set, references[key], answers, unstable, config, base)
        )
    return verdicts


def _answers(worker, family, kernel: Kernel, case_set, scratch) -> tuple[np.ndarray, np.ndarray]:
    """The kernel's answers, and the rows whose answer depends on lane or layout."""
    answers = family.answers(worker.evaluate(kernel.name, scratch))
    unstable = np.zeros(len(case_set), dtype=bool)
    for shift in range(1, kernel.lanes):
        worker.load(case_set.scene(shift=shift), scratch)
        unstable |= family.answers(worker.evaluate(kernel.name, scratch))[shift:] != answers
    # The grid loops (count and evaluate) against the pairs loop on a sample: the diagonal.
    rows = np.arange(min(GRID_CHECK_ROWS, len(case_set)))
    sample = case_set.scene(rows)
    grid = make_scene("grid check", case_set.family, {k: sample.column(k) for k in sample.arrays})
    worker.load(grid, scratch)
    unstable[rows] |= np.diagonal(family.answers(worker.evaluate(kernel.name, scratch))) != answers[rows]
    worker.load(case_set.scene(), scratch)
    return answers, unstable


def _judge(family, kernel, build_config, case_set, reference, answers, unstable, config, base) -> KernelVerdict:
    inputs = family.inputs(kernel)
    bound = kernel.rounding_bound or family.default_rounding_bound
    applicable = family.applicable(kernel, case_set)
    wrong, margin = family.compare(kernel, case_set, reference, answers)
    mismatch = (wrong | unstable) & applicable
    special = exact.has_special_input(*(case_set.columns[name] for name in inputs))
    on_boundary = family.exact_boundary(kernel, case_set)
    margin = np.where(np.isnan(margin), np.inf, margin)
    # Rounding explains a mismatch only off exact constructions; special inputs count
    # against a kernel only where rounding (underflow included) cannot explain it.
    klass = np.select(
        [unstable, on_boundary & special, on_boundary, margin <= bound, special],
        ["nondeterministic", "special-value", "logic-bug", "rounding-band", "special-value"],
        "logic-bug",
    )
    counts = {name: int(np.count_nonzero(mismatch & (klass == name))) for name in CLASSES}
    failing_classes = {"logic-bug", "nondeterministic"}
    if config.strict_special or not is_fast_math(build_config.flags):
        failing_classes.add("special-value")
    fails = mismatch & np.isin(klass, list(failing_classes))
    if not mismatch.any():
        verdict = "exact"
    elif fails.any():
        verdict = "FAIL"
    else:
        verdict = "rounding-band"
    measured = mismatch & ~special & ~unstable
    worst = float(margin[measured].max()) if measured.any() else None
    inconsistent = _metamorphic_inconsistencies(case_set, answers)
    shown = np.flatnonzero(fails)[: config.show] if fails.any() else np.flatnonzero(mismatch)[: config.show]
    failing = [
        _describe_row(family, case_set, inputs, i, answers[i], reference.answer[i], klass[i], margin[i]) for i in shown
    ]
    return KernelVerdict(
        status="ok",
        cases=int(applicable.sum()),
        mismatches=counts,
        worst_margin=worst,
        metamorphic_inconsistencies=inconsistent,
        verdict=verdict,
        failing=failing,
        **base,
    )


def _metamorphic_inconsistencies(case_set, answers) -> int:
    derived = case_set.source >= 0
    return int(np.count_nonzero(answers[derived] != answers[case_set.source[derived]]))


def hex_float(value) -> str:
    """A float32 as the shortest exact hex float (float.fromhex reads it back)."""
    text = float(value).hex()
    if "p" not in text:  # inf, nan
        return text
    mantissa, exponent = text.split("p")
    return f"{mantissa.rstrip('0').rstrip('.')}p{exponent}"


def _describe_row(family, case_set, inputs, i, kernel_answer, oracle_answer, klass, margin) -> dict:
    return {
        "row": int(i),
        "group": str(case_set.group[i]),
        "class": str(klass),
        "margin": None if not np.isfinite(margin) else float(margin),
        "inputs": {k: hex_float(case_set.columns[k][i]) for k in inputs},
        "kernel": bool(kernel_answer),
        "oracle": bool(oracle_answer),
    }
