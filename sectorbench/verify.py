"""`verify`: every kernel against the exact oracle on inputs built to break it.

Each mismatch is classified (first match wins):
  nondeterministic  the kernel's answer for a row changes with its lane / position;
  special-value     the row has a NaN, an infinity, a float32 subnormal or a -0.0 input;
  logic-bug         the row lies exactly on the boundary by construction, or its
                    margin exceeds the kernel's declared rounding bound;
  rounding-band     margin <= the bound: float32 can be expected to get it wrong.
The margin (oracle.py) is how many float32 roundings the row lies from the boundary
the kernel got wrong.  A kernel's verdict: exact (no mismatch), rounding-band (only
tolerated ones) or FAIL.  Special-value mismatches are tolerated only for builds with
fast-math flags (which promise no NaN, inf or signed zero), unless strict_special.
"""

from __future__ import annotations

import tempfile
from dataclasses import asdict, dataclass, field
from pathlib import Path
from typing import Callable

import numpy as np

from . import SectorbenchError, cases as case_generators, environment, oracle
from .build import BuildConfig, build
from .kernels import Kernel, select
from .results import SCHEMA_VERSION
from .scenes import FAMILY_ARRAYS, make_scene
from .worker import Worker, WorkerCrashed

CLASSES = ("rounding-band", "logic-bug", "special-value", "nondeterministic")
DEFAULT_ROUNDING_BOUND = 8.0
#: Flags that let the compiler assume no NaN, infinity or signed zero.
FAST_MATH_FLAGS = frozenset({"-ffast-math", "-Ofast", "-ffinite-math-only", "-fno-honor-nans",
                             "-fno-honor-infinities", "-fno-signed-zeros"})
SELF_CHECK_ROWS = 512
GRID_CHECK_ROWS = 64


@dataclass(frozen=True)
class VerifyConfig:
    family: str = "sector"
    kernels: tuple[str, ...] = ()
    builds: tuple[BuildConfig, ...] = (BuildConfig(),)
    cases: int = 20_000              # rows per random generator; near-boundary and grids come on top
    seed: int = 0
    strict_special: bool = False
    show: int = 0                    # failing inputs kept per kernel
    input_path: Path | None = None   # user cases instead of generated ones
    disable_isa: tuple[str, ...] = ()


@dataclass(frozen=True)
class KernelVerdict:
    kernel: str
    flags: str
    cc: str
    status: str                      # ok | skipped | crashed
    reason: str | None = None
    cases: int = 0
    rounding_bound: float = DEFAULT_ROUNDING_BOUND
    mismatches: dict = field(default_factory=dict)      # class -> count
    worst_margin: float | None = None                  # largest margin among non-special mismatches
    metamorphic_inconsistencies: int = 0
    verdict: str = "FAIL"            # exact | rounding-band | FAIL
    failing: list = field(default_factory=list)         # the first `show` failing inputs, as hex floats


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
    if config.family not in ("sector", "triangle"):
        raise SectorbenchError(f"unknown family {config.family!r}; choose sector or triangle")
    progress("generating cases")
    case_set = (case_generators.from_npz(config.input_path, config.family) if config.input_path
                else case_generators.generate(config.family, config.cases, config.seed))
    progress("exact oracle")
    exact = _oracle(case_set, tolerance=0.0)
    _self_check(case_set, config.seed)
    verdicts = []
    with tempfile.TemporaryDirectory(prefix="sectorbench-verify-") as scratch:
        for build_config in config.builds:
            progress(f"building {build_config.label}")
            library = build(build_config)
            verdicts += _verify_build(config, build_config, library, case_set, exact, Path(scratch), progress)
    groups = {str(g): int(n) for g, n in zip(*np.unique(case_set.group.astype(str), return_counts=True))}
    env = {"machine": environment.machine_fingerprint(),
           "compilers": {b.cc: environment.compiler_fingerprint(b.cc) for b in config.builds}}
    return VerifyResult(config.family, None if config.input_path else config.seed, len(case_set), groups, env, verdicts)


class _Exact:
    """The oracle's answer and mismatch margin per row, for one tolerance."""

    def __init__(self, inside: np.ndarray, margin: np.ndarray):
        self.inside, self.margin = inside, margin


def _columns(case_set, names):
    return [case_set.columns[k] for k in names]


#: Absolute error of one float32 product that underflows (gradual underflow: half the
#: smallest subnormal).  Sums and differences of subnormals are exact.
UNDERFLOW_ERROR = 2.0**-150


def _with_underflow(margins: np.ndarray, scales: np.ndarray, absolute: np.ndarray) -> np.ndarray:
    """Margins |g| / (2^-24 G + E): rounding measured with underflow's absolute error E too.

    The plain margin |g| / (2^-24 G) assumes every rounding is relative, which fails
    once a product underflows (e.g. a subnormal D squared is 0 in float32).
    """
    relative = scales * 2.0**-24
    with np.errstate(invalid="ignore", divide="ignore"):
        factor = np.where(np.isfinite(relative) & (relative > 0), relative / (relative + absolute), 1.0)
    return margins * factor


def _oracle(case_set, tolerance: float) -> _Exact:
    with np.errstate(all="ignore"):
        c = {k: v.astype(np.float64) for k, v in case_set.columns.items()}
        if case_set.family == "sector":
            result = oracle.sector_exact(*_columns(case_set, ("cx", "cy", "ux", "uy", "r2", "cos_theta", "px", "py")))
            dx, dy, k = c["px"] - c["cx"], c["py"] - c["cy"], np.abs(c["cos_theta"])
            s = dx * dx + dy * dy
            radius = _with_underflow(result.radius_margin, np.abs(c["r2"]) + s, 2 * UNDERFLOW_ERROR)
            # sqrt(s) turns s's absolute error into sqrt(2 * 2^-150) on |D|
            angle_scale = np.abs(dx * c["ux"]) + np.abs(dy * c["uy"]) + np.sqrt(s) * k
            angle = _with_underflow(result.angle_margin, angle_scale,
                                    3 * UNDERFLOW_ERROR + k * np.sqrt(2 * UNDERFLOW_ERROR))
            margin = oracle.sector_mismatch_margin(result.radius_ok, result.angle_ok, radius, angle,
                                                   nan_rows=result.nan_rows)
        else:
            result = oracle.triangle_exact(*_columns(case_set, ("ax", "ay", "bx", "by", "cx", "cy", "px", "py")),
                                           tolerance=tolerance)
            margins = result.margins.copy()
            # the strict kernels' orientations; tolerant slacks keep the plain margins
            for edge, (p, q) in enumerate((("a", "b"), ("b", "c"), ("c", "a")) if not tolerance else ()):
                scale = (np.abs((c[q + "x"] - c[p + "x"]) * (c["py"] - c[p + "y"]))
                         + np.abs((c[q + "y"] - c[p + "y"]) * (c["px"] - c[p + "x"])))
                margins[:, edge] = _with_underflow(margins[:, edge], scale, 4 * UNDERFLOW_ERROR)
            margin = oracle.triangle_mismatch_margin(result.signs, margins, result.tolerance,
                                                     nan_rows=result.nan_rows)
    return _Exact(result.inside, margin)


def _self_check(case_set, seed: int) -> None:
    """The fast oracle must agree with plain Fraction arithmetic on a sample; else an internal error."""
    rng = np.random.default_rng(seed)
    try:
        if case_set.family == "sector":
            oracle.self_check_sector(*_columns(case_set, ("cx", "cy", "ux", "uy", "r2", "cos_theta", "px", "py")),
                                     rng=rng, size=SELF_CHECK_ROWS)
        else:
            names = ("ax", "ay", "bx", "by", "cx", "cy", "px", "py")
            for tolerance in (0.0, float(np.float32(1e-4))):
                oracle.self_check_triangle(*_columns(case_set, names), rng=rng, tolerance=tolerance,
                                           size=SELF_CHECK_ROWS)
    except oracle.OracleSelfCheckError as exc:
        raise SectorbenchError(f"internal error: the oracle failed its self-check: {exc}") from None


def _kernel_inputs(kernel: Kernel, family: str) -> tuple[str, ...]:
    if family == "triangle":
        return ("ax", "ay", "bx", "by", "cx", "cy", "px", "py")
    radius, angle = kernel.params.split(",")
    return ("cx", "cy", "ux", "uy", radius, angle, "px", "py")


def _verify_build(config, build_config, library, case_set, exact, scratch, progress) -> list[KernelVerdict]:
    worker = Worker(library, config.disable_isa)
    try:
        kernels, fp_environment = worker.describe()
        chosen = select(kernels, list(config.kernels), config.family)
        worker.load(case_set.scene(), scratch)
        verdicts = []
        for kernel in chosen:
            progress(f"{kernel.name} {build_config.label}")
            base = dict(kernel=kernel.name, flags=" ".join(build_config.flags), cc=build_config.cc,
                        rounding_bound=kernel.rounding_bound or DEFAULT_ROUNDING_BOUND)
            if not kernel.runnable:
                verdicts.append(KernelVerdict(status="skipped", reason=kernel.skip_reason, **base))
                continue
            try:
                answers, unstable = _answers(worker, kernel, case_set, scratch)
            except WorkerCrashed as exc:
                verdicts.append(KernelVerdict(status="crashed", reason=str(exc), **base))
                worker.close()
                worker = Worker(library, config.disable_isa)
                worker.describe()
                worker.load(case_set.scene(), scratch)
                continue
            reference = exact if not kernel.tolerance else _oracle(case_set, kernel.tolerance)
            verdicts.append(_judge(kernel, build_config, case_set, reference, answers, unstable, config, base))
        return verdicts
    finally:
        worker.close()


def _answers(worker: Worker, kernel: Kernel, case_set, scratch) -> tuple[np.ndarray, np.ndarray]:
    """The kernel's answers, and the rows whose answer depends on lane or layout."""
    answers = worker.evaluate(kernel.name, scratch)
    unstable = np.zeros(len(case_set), dtype=bool)
    for shift in range(1, kernel.lanes):
        worker.load(case_set.scene(shift=shift), scratch)
        unstable |= worker.evaluate(kernel.name, scratch)[shift:] != answers
    # The grid loops (count and evaluate) against the pairs loop on a sample: the diagonal.
    rows = np.arange(min(GRID_CHECK_ROWS, len(case_set)))
    sample = case_set.scene(rows)
    grid = make_scene("grid check", case_set.family, {k: sample.column(k) for k in FAMILY_ARRAYS[case_set.family]},
                      sample.column("px"), sample.column("py"))
    worker.load(grid, scratch)
    unstable[rows] |= np.diagonal(worker.evaluate(kernel.name, scratch)) != answers[rows]
    worker.load(case_set.scene(), scratch)
    return answers, unstable


def _judge(kernel, build_config, case_set, exact: _Exact, answers, unstable, config, base) -> KernelVerdict:
    inputs = _kernel_inputs(kernel, case_set.family)
    bound = kernel.rounding_bound or DEFAULT_ROUNDING_BOUND
    applicable = _applicable(kernel, case_set)
    mismatch = ((answers != exact.inside) | unstable) & applicable
    special = oracle.has_special_input(*_columns(case_set, inputs))
    on_boundary = case_set.exact_boundary_r_theta if "theta" in inputs else case_set.exact_boundary
    if kernel.tolerance:
        on_boundary = np.zeros_like(on_boundary)  # the tolerant predicate's boundary lies elsewhere
    margin = np.where(np.isnan(exact.margin), np.inf, exact.margin)
    # Rounding explains a mismatch only off exact constructions; special inputs count
    # against a kernel only where rounding (underflow included) cannot explain it.
    klass = np.select([unstable, on_boundary & special, on_boundary, margin <= bound, special],
                      ["nondeterministic", "special-value", "logic-bug", "rounding-band", "special-value"],
                      "logic-bug")
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
    shown = np.flatnonzero(fails)[:config.show] if fails.any() else np.flatnonzero(mismatch)[:config.show]
    failing = [_describe_row(case_set, inputs, i, answers[i], exact.inside[i], klass[i], margin[i]) for i in shown]
    return KernelVerdict(status="ok", cases=int(applicable.sum()), mismatches=counts, worst_margin=worst,
                         metamorphic_inconsistencies=inconsistent, verdict=verdict, failing=failing, **base)


def _applicable(kernel: Kernel, case_set) -> np.ndarray:
    """Rows on which a kernel can be judged against the (r2, cos_theta) oracle.

    A kernel taking (r, theta) is judged through r2 = r*r and cos_theta = cos(theta);
    that translation is faithful only inside its contract (0 < r < inf, 0 < theta < pi,
    nothing special in r, theta, r2, cos_theta).  Outside it (e.g. theta = inf: every
    angle is smaller, yet cos(inf) is NaN) the row says nothing about the kernel.
    """
    rows = np.ones(len(case_set), dtype=bool)
    if case_set.family == "sector" and "theta" in kernel.params.split(","):
        c = case_set.columns
        rows &= ~oracle.has_special_input(c["r"], c["theta"], c["r2"], c["cos_theta"])
        rows &= (c["r"] > 0) & (c["theta"] > 0) & (c["theta"] < np.pi)
    return rows


def _metamorphic_inconsistencies(case_set, answers) -> int:
    derived = case_set.source >= 0
    return int(np.count_nonzero(answers[derived] != answers[case_set.source[derived]]))


def _hex(value) -> str:
    """A float32 as the shortest exact hex float (float.fromhex reads it back)."""
    text = float(value).hex()
    if "p" not in text:  # inf, nan
        return text
    mantissa, exponent = text.split("p")
    return f"{mantissa.rstrip('0').rstrip('.')}p{exponent}"


def _describe_row(case_set, inputs, i, kernel_answer, oracle_answer, klass, margin) -> dict:
    return {"row": int(i), "group": str(case_set.group[i]), "class": str(klass),
            "margin": None if not np.isfinite(margin) else float(margin),
            "inputs": {k: _hex(case_set.columns[k][i]) for k in inputs},
            "kernel": bool(kernel_answer), "oracle": bool(oracle_answer)}
