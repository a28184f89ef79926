"""`verify`: every kernel against the exact oracle on inputs built to break it.

The family supplies the cases, the exact reference and how an answer compares with it
(families/); this module runs the kernels and classifies each mismatch (first match
wins):
  nondeterministic  the kernel's answer for a row changes with its lane / position;
  special-value     the row has a NaN, an infinity, a float32 subnormal or a -0.0 input,
                    and rounding cannot explain the mismatch;
  logic-bug         float32 evaluates what the answer hinges on exactly (no operation
                    rounds), or the margin exceeds the kernel's declared rounding bound;
  rounding-band     margin <= the bound: float32 can be expected to get it wrong.
The margin is how many float32 roundings the row lies from the boundary the kernel got
wrong.  Every loop `run` times is checked too: the count loops (inline and through a
pointer) and the grid loop against the oracle's count on small scenes whose point count
takes every residue modulo the lane width; a count off by more than the scene's
rounding-band pairs is a logic bug.  A kernel's verdict: exact (no mismatch),
rounding-band (only tolerated ones) or FAIL.  Special-value mismatches are tolerated
only for builds with fast-math flags (which promise no NaN, inf or signed zero), unless
strict_special.

Cases are streamed in batches (cases.BATCH_ROWS rows), so memory stays bounded at any
--cases, and the result does not depend on the batch size.
"""

from __future__ import annotations

import tempfile
from collections.abc import Callable
from dataclasses import asdict, dataclass, field
from pathlib import Path

import numpy as np

from . import SectorbenchError, cases, environment, exact, families
from .build import BuildConfig, build
from .cases import BATCH_ROWS
from .kernels import Kernel, select, split_names
from .measure.deadlines import DEFAULT_KERNEL_TIMEOUT_S, Deadlines
from .measure.messages import LoopRef
from .results import SCHEMA_VERSION
from .runner import PEER_BUILD, row_build
from .scenes import make_scene
from .worker import BuildSession, WorkerCrashed, WorkerTimedOut, clock_session, save_scene

CLASSES = ("rounding-band", "logic-bug", "special-value", "nondeterministic")
#: Flags that let the compiler assume no NaN, infinity or signed zero.
FAST_MATH_FLAGS = frozenset(
    {"-ffast-math", "-Ofast", "-ffinite-math-only", "-fno-honor-nans", "-fno-honor-infinities", "-fno-signed-zeros"}
)
SELF_CHECK_ROWS = 512
GRID_CHECK_ROWS = 64
#: Rows are evaluated in the lane (of the widest vector) a single batch would put them in.
LANE_ALIGNMENT = 16
#: Loop check: point counts beyond 1 .. 2·lanes + 1, none a multiple of 16.
LOOP_EXTRA_POINTS = (47, 100, 1003)
#: Refuse a verify whose estimated time exceeds this: a run of days helps no one.
MAX_ESTIMATED_S = 24 * 3600.0
#: Estimated seconds per case row, per build, oracle and kernels included (measured here
#: at ~4 µs with the default kernels; doubled for slower machines).
SECONDS_PER_ROW = 8e-6


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
    batch_rows: int = BATCH_ROWS  # rows held at once (memory); the result does not depend on it
    #: The floor of every worker request's deadline (measure/deadlines.py): --kernel-timeout.
    kernel_timeout: float = DEFAULT_KERNEL_TIMEOUT_S


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
    exact_evaluable: int = 0  # judged rows float32 evaluates without rounding
    loop_checks: int = 0  # count and grid loops compared with the oracle's count
    verdict: str = "FAIL"  # exact | rounding-band | FAIL
    failing: list = field(default_factory=list)  # the first `show` failing inputs, as hex floats
    #: How the kernel left the worker's FP environment (restored before every other kernel), if it changed it.
    fp_environment_change: str | None = None
    notes: list = field(default_factory=list)  # what else its row says (an FP change, what it printed)


@dataclass(frozen=True)
class VerifyResult:
    family: str
    seed: int | None
    cases: int
    groups: dict
    env: dict
    kernels: list[KernelVerdict]
    exact_evaluable: int = 0  # rows float32 evaluates without rounding, in the family's own parametrisation
    kind: str = "verify"
    schema: int = SCHEMA_VERSION

    @property
    def passed(self) -> bool:
        return all(k.verdict != "FAIL" for k in self.kernels if k.status != "skipped")

    def to_dict(self) -> dict:
        return asdict(self)


def is_fast_math(flags: tuple[str, ...]) -> bool:
    return any(flag in FAST_MATH_FLAGS for flag in flags)


@dataclass(eq=False)  # identity: tallies key the answers of one batch
class _Tally:
    """One kernel of one build, accumulated over batches."""

    kernel: Kernel
    build: BuildConfig
    bound: float
    flags: str  # as its row shows them (runner.row_build)
    cc: str
    status: str = "ok"
    reason: str | None = None
    cases: int = 0
    counts: dict = field(default_factory=lambda: dict.fromkeys(CLASSES, 0))
    worst: float | None = None
    inconsistent: int = 0
    exact_evaluable: int = 0
    loop_checks: int = 0
    failing: list = field(default_factory=list)  # rows of a failing class, up to `show`
    other: list = field(default_factory=list)  # tolerated mismatches, up to `show`
    any_mismatch: bool = False
    any_failure: bool = False
    fp_change: str | None = None
    printed: str | None = None

    def fail(self, exc: Exception) -> None:
        """Its worker crashed or was killed at a deadline: the kernel is left out from now on."""
        self.status = "timed-out" if isinstance(exc, WorkerTimedOut) else "crashed"
        self.reason = str(exc)

    def verdict(self) -> KernelVerdict:
        notes = [f"changes the FP environment: {self.fp_change}"] if self.fp_change else []
        notes += [self.printed] if self.printed else []
        base = dict(
            kernel=self.kernel.name,
            flags=self.flags,
            cc=self.cc,
            rounding_bound=self.bound,
            fp_environment_change=self.fp_change,
            notes=notes,
        )
        if self.status != "ok":
            return KernelVerdict(status=self.status, reason=self.reason, **base)
        verdict = "FAIL" if self.any_failure else "rounding-band" if self.any_mismatch else "exact"
        return KernelVerdict(
            status="ok",
            cases=self.cases,
            mismatches=dict(self.counts),
            worst_margin=self.worst,
            metamorphic_inconsistencies=self.inconsistent,
            exact_evaluable=self.exact_evaluable,
            loop_checks=self.loop_checks,
            verdict=verdict,
            failing=self.failing if self.failing else self.other,
            **base,
        )


def estimated_seconds(family, config: VerifyConfig) -> float:
    """A conservative estimate of verify's run time (to refuse absurd --cases up front)."""
    rows = sum(part.rows for part in family.case_parts(config.cases))
    rows *= 1 + cases.METAMORPHIC_SHARE * len(family.transforms)
    return rows * SECONDS_PER_ROW * len(config.builds)


def check_config(config: VerifyConfig) -> None:
    """Refuse what would fail or take absurdly long, before anything is built."""
    family = families.get(config.family)
    if config.seed < 0:
        raise SectorbenchError(f"--seed must be >= 0 (got {config.seed})")
    if config.cases < 1:
        raise SectorbenchError(f"--cases must be at least 1 (got {config.cases})")
    if config.input_path is None:
        seconds = estimated_seconds(family, config)
        if seconds > MAX_ESTIMATED_S:
            raise SectorbenchError(
                f"--cases {config.cases} would take about {seconds / 3600:,.0f} hours "
                f"(limit {MAX_ESTIMATED_S / 3600:.0f}); choose a smaller --cases"
            )


def nothing_checked(skipped: list[tuple[str, str, str | None]], family: str) -> str:
    """The one line for a verify that has no kernel to run: each selected one and why not."""
    if not skipped:
        return f"no kernel could be checked: the {family} family has no default kernels; name some with --kernels"
    reasons = "; ".join(f"{name} [{flags}]: {reason}" for name, flags, reason in skipped)
    return f"no kernel could be checked: {reasons}"


def _label(session: BuildSession) -> str:
    return "python" if session.peers else session.config.label


def verify(config: VerifyConfig, progress: Callable[..., None] = lambda what, total=None: None) -> VerifyResult:
    check_config(config)
    family = families.get(config.family)
    if config.input_path:
        batches = iter([family.input_cases(config.input_path)])
    else:
        batches = family.case_batches(config.cases, config.seed, config.batch_rows)
    sessions: list[BuildSession] = []
    deadlines = Deadlines(config.kernel_timeout)
    clock = None
    tallies: dict[tuple, _Tally] = {}
    groups: dict[str, int] = {}
    total = evaluable = 0
    with tempfile.TemporaryDirectory(prefix="sectorbench-verify-") as scratch:
        scratch = Path(scratch)
        try:
            c_names, peer_names = split_names(config.kernels, family)
            for build_config in config.builds if c_names or not config.kernels else ():
                progress(f"building {build_config.label}")
                sessions.append(
                    BuildSession(build_config, build(build_config), disable_isa=config.disable_isa, deadlines=deadlines)
                )
            if peer_names:  # one run for the peers, in a plain -O2 worker: flags do not apply to them
                sessions.append(
                    BuildSession(
                        PEER_BUILD, build(PEER_BUILD), disable_isa=config.disable_isa, peers=True, deadlines=deadlines
                    )
                )
            names = {False: c_names, True: peer_names}
            chosen = {id(s): select(s.kernels, names[s.peers], config.family) for s in sessions}
            if not any(k.runnable for kernels in chosen.values() for k in kernels):  # before any case is made
                skipped = [(k.name, _label(s), k.skip_reason) for s in sessions for k in chosen[id(s)]]
                raise SectorbenchError(nothing_checked(skipped, config.family))
            clock = clock_session(sessions, config.builds[0].cc, progress)
            clock_mhz = round(max(clock.worker.clock_mhz() for _ in range(3)), 1)
            for session in sessions:
                flags, cc = row_build(session)
                for kernel in chosen[id(session)]:
                    bound = kernel.rounding_bound or family.default_rounding_bound
                    tally = _Tally(kernel, session.config, bound, flags, cc)
                    if not kernel.runnable:
                        tally.status, tally.reason = "skipped", kernel.skip_reason
                    tallies[(id(session), kernel.name)] = tally
                _check_loops(
                    family, session, [t for (s, _), t in tallies.items() if s == id(session)], config, scratch, progress
                )
            for batch_index, case_set in enumerate(batches):
                progress(f"batch {batch_index + 1}: exact oracle")
                _self_check(family, case_set, config.seed, batch_index)
                scene_path = save_scene(case_set.scene(), scratch)
                references: dict = {}
                for session in sessions:
                    session.use(scene_path)
                    live = [tallies[(id(session), k.name)] for k in chosen[id(session)]]
                    live = [tally for tally in live if tally.status == "ok"]
                    progress(f"batch {batch_index + 1}: {len(live)} kernels [{session.config.label}]")
                    for tally, (answers, unstable) in _answers(session, family, live, case_set, scratch).items():
                        reference = _reference(family, case_set, tally.kernel, references)
                        _judge(family, tally, case_set, reference, answers, unstable, config)
                for group, count in zip(*np.unique(case_set.group.astype(str), return_counts=True)):
                    groups[str(group)] = groups.get(str(group), 0) + int(count)
                total += len(case_set)
                evaluable += int(np.count_nonzero(_default_reference(family, case_set, references).exact_evaluable))
                scene_path.unlink()
            for (session_id, name), tally in tallies.items():
                session = next(s for s in sessions if id(s) == session_id)
                tally.printed = session.printed_note(name)
        finally:
            for session in [*sessions, clock]:
                if session is not None:
                    session.close()
    verdicts = [tally.verdict() for tally in tallies.values()]
    env = {
        "machine": environment.machine_fingerprint(),
        "compilers": {b.cc: environment.compiler_fingerprint(b.cc) for b in config.builds},
    }
    env["machine"]["cpu"]["measured_mhz"] = clock_mhz
    seed = None if config.input_path else config.seed
    return VerifyResult(config.family, seed, total, dict(sorted(groups.items())), env, verdicts, evaluable)


def _default_reference(family, case_set, references):
    """The oracle for the family's own parametrisation (what `exact_evaluable` counts)."""
    key = ("default", None)
    if key not in references:
        default_kernel = _nominal_kernel(family)
        references[key] = references.get(family.reference_key(default_kernel)) or family.reference(
            case_set, default_kernel
        )
    return references[key]


def _nominal_kernel(family) -> Kernel:
    """A strict kernel of the family's own parametrisation (the family says which)."""
    return family.nominal_kernel()


def _self_check(family, case_set, seed: int, batch_index: int) -> None:
    """The fast oracle must agree with plain Fraction arithmetic on a sample; else an internal error."""
    try:
        family.self_check(case_set, np.random.default_rng([seed, batch_index]), SELF_CHECK_ROWS)
    except exact.OracleSelfCheckError as exc:
        raise SectorbenchError(f"internal error: the oracle failed its self-check: {exc}") from None


def _reference(family, case_set, kernel, references):
    key = family.reference_key(kernel)
    if key not in references:
        references[key] = family.reference(case_set, kernel)
    return references[key]


def _answers(session, family, tallies: list[_Tally], case_set, scratch) -> dict:
    """Each kernel's answers, and the rows whose answer depends on lane or layout.

    Rows are evaluated where a single batch of the whole run would put them (row g in
    lane g mod 16: the batch is preceded by first_row mod 16 padding rows), again after
    1 .. lanes-1 more padding rows (so each row lands in every lane), and the run's first
    rows through the grid loop; each scene is loaded once for all kernels.  A kernel that
    crashes its worker is marked and left out.
    """

    def evaluate(live, shift):
        scene = case_set.scene(shift=shift)
        session.worker.load(scene, scratch)
        out = {}
        for tally in live:
            try:
                out[tally] = family.answers(_evaluate(session, tally, scratch))[shift:]
            except (WorkerCrashed, WorkerTimedOut) as exc:
                tally.fail(exc)
                session.restart()
                session.worker.load(scene, scratch)
        return out

    aligned = case_set.first_row % LANE_ALIGNMENT
    answers = evaluate(tallies, aligned)
    unstable = {tally: np.zeros(len(case_set), dtype=bool) for tally in answers}
    for shift in range(1, max((t.kernel.lanes for t in answers), default=1)):
        for tally, shifted in evaluate([t for t in answers if t.kernel.lanes > shift], aligned + shift).items():
            unstable[tally] |= shifted != answers[tally]
    # The grid loop against the pairs loop on the run's first rows: the diagonal.
    rows = np.arange(max(0, min(GRID_CHECK_ROWS - case_set.first_row, len(case_set))))
    if len(rows):
        sample = case_set.scene(rows)
        grid = make_scene(
            "grid check", case_set.family, {k: sample.column(k) for k in sample.arrays}, extra=sample.extra
        )
        session.worker.load(grid, scratch)
        for tally in list(answers):
            try:
                diagonal = np.diagonal(family.answers(_evaluate(session, tally, scratch)))
            except (WorkerCrashed, WorkerTimedOut) as exc:
                tally.fail(exc)
                session.restart()
                session.worker.load(grid, scratch)
                continue
            unstable[tally][rows] |= diagonal != answers[tally][rows]
    return {tally: (answers[tally], unstable[tally]) for tally in answers if tally.status == "ok"}


def _judge(family, tally: _Tally, case_set, reference, answers, unstable, config) -> None:
    kernel = tally.kernel
    inputs = family.inputs(kernel)
    applicable = family.applicable(kernel, case_set)
    compared = family.compare(kernel, case_set, reference, answers)
    compared, margin = compared if isinstance(compared, tuple) else (compared, reference.margin)
    mismatch = (compared | unstable) & applicable
    special = exact.has_special_input(*(case_set.columns[name] for name in inputs))
    exact_rows = reference.exact
    margin = np.where(np.isnan(margin), np.inf, margin)
    # Rounding explains a mismatch only where float32 rounds; special inputs count
    # against a kernel only where rounding (underflow included) cannot explain it.
    klass = np.select(
        [unstable, exact_rows & special, exact_rows, margin <= tally.bound, special],
        ["nondeterministic", "special-value", "logic-bug", "rounding-band", "special-value"],
        "logic-bug",
    )
    failing_classes = {"logic-bug", "nondeterministic"}
    if config.strict_special or not is_fast_math(tally.build.flags):
        failing_classes.add("special-value")
    fails = mismatch & np.isin(klass, list(failing_classes))
    for name in CLASSES:
        tally.counts[name] += int(np.count_nonzero(mismatch & (klass == name)))
    measured = mismatch & ~special & ~unstable
    if measured.any():
        worst = float(margin[measured].max())
        tally.worst = worst if tally.worst is None else max(tally.worst, worst)
    tally.cases += int(applicable.sum())
    tally.exact_evaluable += int(np.count_nonzero(applicable & reference.exact_evaluable))
    derived = case_set.source >= 0
    tally.inconsistent += int(np.count_nonzero(answers[derived] != answers[case_set.source[derived]]))
    tally.any_mismatch |= bool(mismatch.any())
    tally.any_failure |= bool(fails.any())
    for rows, kept in ((np.flatnonzero(fails), tally.failing), (np.flatnonzero(mismatch & ~fails), tally.other)):
        for i in rows[: max(0, config.show - len(kept))]:
            kept.append(
                _describe_row(family, case_set, inputs, i, answers[i], reference.answer[i], klass[i], margin[i])
            )


def _check_loops(family, session: BuildSession, tallies: list[_Tally], config, scratch, progress) -> None:
    """Every timed loop against the oracle on small grid scenes, for every tail residue.

    N = 2·(widest block) + 3 shapes, so blocked loops run both whole blocks and the
    shapes left over; M = 1 .. 2·lanes + 1 and LOOP_EXTRA_POINTS points; the family's
    loop scenes hold most points in some shape, so tails have hits to lose or invent.
    """
    runnable = [t for t in tallies if t.status == "ok"]
    if not runnable or config.input_path:
        return
    lanes = max(t.kernel.lanes for t in runnable)
    shapes = 2 * max(t.kernel.block for t in runnable) + 3
    rng = np.random.default_rng([config.seed, 1 << 20])
    for points in (*range(1, 2 * lanes + 2), *LOOP_EXTRA_POINTS):
        scene = family.loop_scene(shapes, points, rng)
        pairs = _grid_pairs(family, scene)
        references: dict = {}
        session.worker.load(scene, scratch)
        for tally in runnable:
            if tally.status != "ok":
                continue
            progress(f"loop check: {tally.kernel.name} [{session.config.label}], M={points}")
            try:
                grid = family.answers(_evaluate(session, tally, scratch))
                counts = {
                    f"count_{mode}": _count(session, tally, LoopRef(tally.kernel.name, mode))
                    for mode in tally.kernel.modes
                }
            except (WorkerCrashed, WorkerTimedOut) as exc:
                tally.fail(exc)
                session.restart()
                session.worker.load(scene, scratch)
                continue
            reference = _reference(family, pairs, tally.kernel, references)
            problems = family.check_loops(tally.kernel, reference, grid.ravel(), counts, tally.bound)
            tally.loop_checks += 1 + len(counts)
            for problem in problems:
                tally.counts["logic-bug"] += 1
                tally.any_mismatch = tally.any_failure = True
                if len(tally.failing) < config.show:
                    tally.failing.append(
                        {
                            "row": None,
                            "group": f"loop check, M={points}",
                            "class": "logic-bug",
                            "margin": None,
                            "inputs": {},
                            "kernel": problem,
                            "oracle": None,
                        }
                    )


def _evaluate(session: BuildSession, tally: _Tally, scratch, shapes=None) -> np.ndarray:
    """The kernel's answers on the worker's scene; an FP-environment change is kept in its tally
    (the worker restores the build's environment before every kernel, so no other is affected)."""
    answers, fp_change = session.worker.evaluate_with_fp(tally.kernel.name, scratch, shapes)
    tally.fp_change = tally.fp_change or fp_change
    return answers


def _count(session: BuildSession, tally: _Tally, loop: LoopRef) -> int:
    """One pass of a count loop: its hits."""
    timed = session.worker.sample(loop, calls=1)
    tally.fp_change = tally.fp_change or timed.fp_change
    return timed.hits


def _grid_pairs(family, scene):
    """A grid scene's N·M (shape, point) pairs as a CaseSet, row i·M + j = (shape i, point j)."""
    n, m = scene.n_shapes, scene.n_points
    columns = {name: np.repeat(scene.column(name), m) for name in family.shape_arrays}
    columns.update({name: np.tile(scene.column(name), n) for name in family.point_arrays})
    return cases.case_set(family, [("loop check", columns)], extra=scene.extra)


def hex_float(value) -> str:
    """A float32 as the shortest exact hex float (float.fromhex reads it back)."""
    text = float(value).hex()
    if "p" not in text:  # inf, nan
        return text
    mantissa, exponent = text.split("p")
    return f"{mantissa.rstrip('0').rstrip('.')}p{exponent}"


def _describe_row(family, case_set, inputs, i, kernel_answer, oracle_answer, klass, margin) -> dict:
    return {
        "row": int(case_set.first_row + i),
        "group": str(case_set.group[i]),
        "class": str(klass),
        "margin": None if not np.isfinite(margin) else float(margin),
        "inputs": {k: hex_float(case_set.columns[k][i]) for k in inputs},
        "kernel": family.describe_answer(kernel_answer),
        "oracle": family.describe_answer(oracle_answer),
    }
