"""`verify`: every kernel against the exact oracle on inputs built to break it.

The family supplies the cases, the exact reference and how an answer compares with it
(families/); this module runs the kernels and classifies each mismatch (first match
wins):
  nondeterministic  the kernel's answer for a row changes with its lane / position;
  special-value     the row has a NaN, an infinity, a float32 subnormal or a -0.0 input
                    (or an intermediate the family names that only a subnormal holds, a
                    sector's |D|²), and rounding cannot explain the mismatch;
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

import contextlib
import itertools
import shutil
import tempfile
import threading
from collections.abc import Callable
from dataclasses import asdict, dataclass, field, replace
from pathlib import Path

import numpy as np

from .. import families
from ..errors import SectorbenchError
from ..families.scene_kinds import check_scene_size, generate, make_scene
from ..interrupts import scratch_directory
from ..measure.builds import FailedBuild, open_build, usable
from ..measure.deadlines import DEFAULT_KERNEL_TIMEOUT_S, Deadlines
from ..measure.loops import row_count_layout
from ..measure.messages import LoopRef
from ..measure.runner import PEER_BUILD, row_build
from ..measure.selection import check_family, check_names, infer_family, known_kernels, select, split_names
from ..measure.worker import (
    BuildSession,
    WorkerCrashed,
    WorkerError,
    WorkerTimedOut,
    clock_session,
    failure_status,
    load_notes,
    row_fp_change,
    save_scene,
)
from ..model import cases
from ..model.cases import BATCH_ROWS
from ..model.kernels import Kernel
from ..model.results import SCHEMA_VERSION
from ..model.split import shape_ranges
from ..native import environment
from ..native.build import BuildConfig, build
from ..oracle import exact
from . import distribute

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
#: Loop check over shape ranges: the point counts of its scenes (a tail for every lane width).
SPLIT_CHECK_POINTS = (47, 100)
#: ... and the thread counts whose splits (measure/split.py, as run makes them) it runs.
SPLIT_THREADS = (2, 3, 4)
#: Loop check on the scene kinds as run makes them: shapes of each kind after the first
#: (Family.run_check_size gives the first kind's N and every kind's M).
RUN_CHECK_OTHER_SHAPES = 16
#: Loop check on long scenes (the family's loop scene): few shapes x many points, past 65 536
#: points and odd (a dropped partial tile of any power of two, a 16-bit point index), and many
#: shapes x few points, a multiple of no unroll up to 128 (a typo in an unrolled body the
#: smaller scenes never enter).  ~132 K and ~37 K tests: 3 x 100 003 cost verify --cases 5000
#: ~10 % more CPU, these ~5 % (the oracle, ~0.1 s a kernel contract, the most of it).
LONG_CHECK_SIZES = ((2, 66_037), (1_003, 37))
#: Broadphase check: the points of its scene, and the thread counts it runs the broadphase on.
BROADPHASE_CHECK_POINTS = 300
BROADPHASE_CHECK_THREADS = (1, 2, 3)
#: Refuse a verify whose estimated time exceeds this: a run of days helps no one.
MAX_ESTIMATED_S = 24 * 3600.0
#: Estimated seconds per case row, per build, oracle and kernels included (measured here
#: at ~4 µs with the default kernels; doubled for slower machines).
SECONDS_PER_ROW = 8e-6


@dataclass(frozen=True)
class VerifyConfig:
    #: None: the family of the named kernels, or the first registered family when none are named.
    family: str | None = None
    kernels: tuple[str, ...] = ()
    builds: tuple[BuildConfig, ...] = (BuildConfig(),)
    cases: int = 20_000  # rows per random generator; near-boundary and grids come on top
    seed: int = 0
    strict_special: bool = False
    show: int = 0  # failing inputs kept per kernel
    input_path: Path | None = None  # user cases instead of generated ones
    disable_isa: tuple[str, ...] = ()
    batch_rows: int = BATCH_ROWS  # rows held at once (memory); the result does not depend on it
    jobs: int | None = None  # processes judging batches; None: one per CPU (the result does not depend on it)
    scheduler: str | None = None  # a Dask scheduler's address: batches go to its workers instead
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
    rounding_bound: float = 0.0  # as judged: the declared (or default) bound, capped at the family's
    tolerance: float = 0.0  # as judged: the declared tolerance, capped at the family's
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
    #: loops wrong beyond rounding, up to `show`: shown after the rows (a case file's labelled
    #: rows first, now that its verify runs the loop checks too)
    loop_failing: list = field(default_factory=list)
    other: list = field(default_factory=list)  # tolerated mismatches, up to `show`
    any_mismatch: bool = False
    any_failure: bool = False
    fp_change: str | None = None
    printed: str | None = None
    process_change: str | None = None  # what it changed in its worker process (the worker was replaced)
    fp_change_at_load: str | None = None  # how loading its build changed the FP environment (restored)
    declared_notes: list = field(default_factory=list)  # its tolerance, and a bound or tolerance over the cap

    def fail(self, exc: Exception) -> None:
        """Its worker crashed or was killed at a deadline: the kernel is left out from now on."""
        self.status = failure_status(exc)
        self.reason = str(exc)

    def absorb(self, part: _Tally, show: int) -> None:
        """Add one batch's tally of this kernel (batches absorbed in order: the result does not
        depend on where or in which order they were judged)."""
        if self.status != "ok":
            return
        if part.status != "ok":
            self.status, self.reason = part.status, part.reason
            return
        self.cases += part.cases
        for name, count in part.counts.items():
            self.counts[name] += count
        if part.worst is not None:
            self.worst = part.worst if self.worst is None else max(self.worst, part.worst)
        self.inconsistent += part.inconsistent
        self.exact_evaluable += part.exact_evaluable
        self.loop_checks += part.loop_checks
        self.failing.extend(part.failing[: max(0, show - len(self.failing))])
        self.other.extend(part.other[: max(0, show - len(self.other))])
        self.any_mismatch |= part.any_mismatch
        self.any_failure |= part.any_failure
        self.fp_change = self.fp_change or part.fp_change

    def verdict(self, show: int) -> KernelVerdict:
        notes = [*self.declared_notes, *load_notes(self.fp_change_at_load)]
        notes += [f"changes the FP environment: {self.fp_change}"] if self.fp_change else []
        notes += [note for note in (self.printed, self.process_change) if note]
        base = dict(
            kernel=self.kernel.name,
            flags=self.flags,
            cc=self.cc,
            rounding_bound=self.bound,
            tolerance=self.kernel.tolerance,
            fp_environment_change=row_fp_change(self.fp_change, self.fp_change_at_load),
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
            failing=[*self.failing, *self.loop_failing][:show] if self.any_failure else self.other,
            **base,
        )


def estimated_seconds(family, config: VerifyConfig) -> float:
    """A conservative estimate of verify's run time (to refuse absurd --cases up front)."""
    rows = sum(part.rows for part in family.case_parts(config.cases))
    rows *= 1 + cases.METAMORPHIC_SHARE * len(family.transforms)
    return rows * SECONDS_PER_ROW * len(config.builds)


def resolve(config: VerifyConfig) -> VerifyConfig:
    """The config with its family settled (from the kernels' names when not given) and its
    kernel names checked, before anything is built."""
    known = known_kernels(config.builds[0]) if config.kernels else None
    if known is not None:
        check_names(config.kernels, known)
    family = config.family or (infer_family(config.kernels, known) if known else None)
    if family is not None and known is not None:
        check_family(config.kernels, known, family)
    return replace(config, family=family or families.all_families()[0].name)


def check_config(config: VerifyConfig) -> None:
    """Refuse what would fail or take absurdly long, before anything is built."""
    family = families.get(config.family)
    if config.seed < 0:
        raise SectorbenchError(f"--seed must be >= 0 (got {config.seed})")
    distribute.check_jobs(config.jobs)
    if config.cases < 1:
        raise SectorbenchError(f"--cases must be at least 1 (got {config.cases})")
    if config.input_path is None:
        seconds = estimated_seconds(family, config)
        if seconds > MAX_ESTIMATED_S:
            raise SectorbenchError(
                f"--cases {config.cases} would take about {seconds / 3600:,.0f} hours "
                f"(limit {MAX_ESTIMATED_S / 3600:.0f}); choose a smaller --cases"
            )
    # The largest scenes its loop checks make: with `ulimit -v` too low for them the builds ran
    # first, and a flag set not yet cached failed in the compiler ("virtual memory exhausted")
    for shapes, points in (family.run_check_size, *LONG_CHECK_SIZES):
        check_scene_size(next(iter(family.scenes)), shapes, points)
    if config.scheduler is not None:  # last: up to distribute.CONNECT_TIMEOUT_S
        distribute.check_scheduler(config.scheduler)


def nothing_checked(skipped: list[tuple[str, str, str | None]], family: str) -> str:
    """The one line for a verify that has no kernel to run: each selected one and why not."""
    if not skipped:
        return f"no kernel could be checked: the {family} family has no default kernels; name some with --kernels"
    reasons = "; ".join(f"{name} [{flags}]: {reason}" for name, flags, reason in skipped)
    return f"no kernel could be checked: {reasons}"


def judged_as(family, kernel: Kernel) -> tuple[Kernel, float, list[str]]:
    """The kernel as verify judges it, its rounding bound, and what to say about them: the
    declared bound (or the family's default) and tolerance, each capped at the family's
    (Family.max_rounding_bound, max_tolerance: past them a declaration excuses any answer)."""
    bound = kernel.rounding_bound or family.default_rounding_bound
    notes = []
    if bound > family.max_rounding_bound:
        notes.append(
            f"declares a rounding bound of {bound:g}, over the {family.name} cap of {family.max_rounding_bound:g} "
            f"(verify would pass anything): judged at {family.max_rounding_bound:g}"
        )
        bound = family.max_rounding_bound
    cap, unit = family.max_tolerance, family.tolerance_unit
    if cap is not None and kernel.tolerance:
        if kernel.tolerance > cap:
            notes.append(
                f"declares a tolerance of {kernel.tolerance:g} {unit}, over the {family.name} cap of {cap:g} "
                f"(verify would pass anything): judged at {cap:g}"
            )
            kernel = replace(kernel, tolerance=cap)
        else:
            notes.append(f"tolerance {kernel.tolerance:g} {unit}")
    return kernel, bound, notes


def _label(session: BuildSession) -> str:
    return "python" if session.peers else session.config.label


def verify(config: VerifyConfig, progress: Callable[..., None] = lambda what, total=None: None) -> VerifyResult:
    config = resolve(config)
    check_config(config)
    family = families.get(config.family)
    if config.input_path:
        batches = iter([read_input(family, config.input_path)])
    else:
        batches = family.case_batches(config.cases, config.seed, config.batch_rows)
    sessions: list[BuildSession] = []  # those that work: batches are judged in them
    opened: list[BuildSession | FailedBuild] = []  # every build, in order, those that failed too
    deadlines = Deadlines(config.kernel_timeout)
    clock = None
    tallies: dict[tuple, _Tally] = {}
    groups: dict[str, int] = {}
    workers: dict[str, dict] = {}  # where batches ran: fingerprints of the processes or cluster workers
    total = evaluable = 0
    with scratch_directory("sectorbench-verify-") as scratch:
        # The first batch's scene, written once before the builds as run writes its scene: the
        # judges write it after the builds and the loop checks, and a TMPDIR too full for it cost
        # them (15 s for one kernel here) before its one line
        first = next(batches, None)
        if first is not None:
            save_scene(first.scene(), scratch).unlink()
            batches = itertools.chain([first], batches)
        try:
            c_names, peer_names = split_names(config.kernels, family)
            for build_config in config.builds if c_names or not config.kernels else ():
                progress(f"building {build_config.label}")

                def start(library, build_config=build_config):
                    return BuildSession(build_config, library, disable_isa=config.disable_isa, deadlines=deadlines)

                opened.append(open_build(build_config, start))  # a failed one FAILs its own rows
            sessions += usable(opened)  # none: an error
            if peer_names:  # one run for the peers, in a plain -O2 worker: flags do not apply to them
                sessions.append(
                    BuildSession(
                        PEER_BUILD, build(PEER_BUILD), disable_isa=config.disable_isa, peers=True, deadlines=deadlines
                    )
                )
            names = {False: c_names, True: peer_names}
            failed = [b for b in opened if isinstance(b, FailedBuild)]
            chosen = {id(s): select(s.kernels, names[s.peers], config.family) for s in [*sessions, *failed]}
            # Before any case is made.  A kernel whose build's load it crashed is no skip: it FAILs below.
            if not any(k.runnable or k.unrun_status != "skipped" for kernels in chosen.values() for k in kernels):
                skipped = [(k.name, _label(s), k.skip_reason) for s in sessions for k in chosen[id(s)]]
                raise SectorbenchError(nothing_checked(skipped, config.family))
            clock = clock_session(sessions, config.builds[0].cc, progress)
            clock_mhz = round(max(clock.worker.clock_mhz() for _ in range(3)), 1)
            for session in [*opened, *(s for s in sessions if s.peers)]:  # the builds in order, then the peers
                flags, cc = row_build(session)
                for declared in chosen[id(session)]:
                    kernel, bound, declared_notes = judged_as(family, declared)
                    tally = _Tally(kernel, session.config, bound, flags, cc, declared_notes=declared_notes)
                    if not kernel.runnable:
                        tally.status, tally.reason = kernel.unrun_status, kernel.skip_reason
                    tallies[(id(session), kernel.name)] = tally

            check_loops = _LoopChecks(family, sessions, tallies, config, scratch, progress)
            plan = BatchPlan(
                config,
                tuple(
                    (s.config, s.peers, tuple(t.kernel.name for (i, _), t in tallies.items() if i == id(s)))
                    for s in sessions
                ),
            )
            local = LocalJudge(plan, sessions, scratch)
            live = {
                index: [k.name for k in chosen[id(s)] if tallies[(id(s), k.name)].status == "ok"]
                for index, s in enumerate(sessions)
            }
            judged = distribute.outcomes(plan, batches, local, live, progress, alongside=check_loops)
            with contextlib.closing(judged):  # left early, the batches under way are abandoned now
                for outcome in judged:
                    for (index, name), part in outcome.tallies.items():
                        tallies[(id(sessions[index]), name)].absorb(part, config.show)
                    # after the loop checks' (distribute.outcomes), in batch order: the notes as judged in one process
                    for (index, name), (printed, change) in outcome.output.items():
                        sessions[index].add_output(name, printed, change)
                    for group, count in outcome.groups.items():
                        groups[group] = groups.get(group, 0) + count
                    total += outcome.rows
                    evaluable += outcome.evaluable
                    for name, info in outcome.worker.items():
                        workers.setdefault(name, {**info, "batches": 0})["batches"] += info.get("batches", 0)
            for (session_id, name), tally in tallies.items():
                session = next((s for s in sessions if id(s) == session_id), None)
                if session is None:  # a build that failed: its rows say why, nothing ran
                    continue
                tally.printed = session.printed_note(name)
                tally.process_change = session.process_note(name)
                _charge_release(session, tally)
                tally.fp_change_at_load = session.info.fp_change_at_load
        finally:
            for session in [*sessions, clock]:
                if session is not None:
                    session.close()
    verdicts = [tally.verdict(config.show) for tally in tallies.values()]
    env = {
        "machine": environment.machine_fingerprint(),
        "compilers": {b.cc: environment.compiler_fingerprint(b.cc) for b in config.builds},
    }
    env["machine"]["cpu"]["measured_mhz"] = clock_mhz
    env["jobs"] = 1 if config.scheduler else config.jobs or distribute.default_jobs()
    # as run's: a failed build's rows point here for all the compiler said
    env["builds"] = [
        b.environment_entry() if isinstance(b, FailedBuild) else {"cc": b.config.cc, "flags": list(b.config.flags)}
        for b in opened
    ]
    if workers:
        env["workers"] = workers
    seed = None if config.input_path else config.seed
    return VerifyResult(config.family, seed, total, dict(sorted(groups.items())), env, verdicts, evaluable)


@dataclass(frozen=True)
class BatchPlan:
    """What judging a batch needs, in any process: the configuration and, per build session
    (in the client's order), its build, whether it runs the peers, and the kernels it checks."""

    config: VerifyConfig
    sessions: tuple[tuple[BuildConfig, bool, tuple[str, ...]], ...]


@dataclass
class BatchOutcome:
    """One batch's verdicts: partial tallies keyed by (session index, kernel), merged in batch order."""

    index: int
    tallies: dict
    groups: dict
    rows: int
    evaluable: int
    worker: dict = field(default_factory=dict)  # {where it ran: its environment fingerprint}
    #: (session index, kernel) -> (what it printed, how it changed its worker process): BuildSession.take_output
    output: dict = field(default_factory=dict)


class LocalJudge:
    """Judges batches with a process's own build sessions (the client's, a pool process's, a Dask worker's)."""

    def __init__(self, plan: BatchPlan, sessions: list[BuildSession], scratch: Path):
        self.plan, self.sessions, self.scratch = plan, sessions, Path(scratch)
        self.family = families.get(plan.config.family)
        self.crashed: dict[tuple[int, str], str] = {}  # a kernel that crashed is not run again here
        self.kernels = [
            {k.name: k for k in select(session.kernels, list(names), plan.config.family)}
            for session, (_, _, names) in zip(sessions, plan.sessions)
        ]

    @classmethod
    def open(cls, plan: BatchPlan, scratch: Path) -> LocalJudge:
        """Build and start this process's own sessions for the plan."""
        sessions = []
        deadlines = Deadlines(plan.config.kernel_timeout)  # --kernel-timeout travels with the plan
        try:
            for build_config, peers, _ in plan.sessions:
                sessions.append(
                    BuildSession(
                        build_config,
                        build(build_config),
                        disable_isa=plan.config.disable_isa,
                        peers=peers,
                        deadlines=deadlines,
                    )
                )
            return cls(plan, sessions, scratch)
        except BaseException:
            for session in sessions:
                session.close()
            raise

    def close(self) -> None:
        for session in self.sessions:
            session.close()

    def interrupt(self) -> None:
        """From another thread than the judging one: the request under way ends (its build worker
        killed, as after a crash), so that the batch ends soon; that thread closes the judge."""
        for session in self.sessions:
            session.interrupt()

    def judge(self, batch_index: int, case_set, live: dict) -> BatchOutcome:
        """The batch's verdicts for the kernels still live (session index -> names) at the client.
        Its files (each scene it loads) go to a folder of its own, removed after it: a Dask
        worker or a pool process judges batch after batch, and they piled up (~13 MB each)."""
        scratch = Path(tempfile.mkdtemp(prefix=f"batch-{batch_index}-", dir=self.scratch))
        try:
            return self._judge(batch_index, case_set, live, scratch)
        finally:
            shutil.rmtree(scratch, ignore_errors=True)

    def _judge(self, batch_index: int, case_set, live: dict, scratch: Path) -> BatchOutcome:
        family, config = self.family, self.plan.config
        _self_check(family, case_set, config.seed, batch_index)
        scene_path = save_scene(case_set.scene(), scratch)
        references: dict = {}
        parts: dict[tuple[int, str], _Tally] = {}
        output: dict[tuple[int, str], tuple] = {}
        for index, session in enumerate(self.sessions):
            session.use(scene_path)
            batch_tallies = []
            for name in live.get(index, ()):
                kernel, bound, _ = judged_as(family, self.kernels[index][name])
                tally = _Tally(kernel, session.config, bound, *row_build(session))
                if (index, name) in self.crashed:
                    tally.status, tally.reason = "crashed", self.crashed[(index, name)]
                else:
                    batch_tallies.append(tally)
                parts[(index, name)] = tally
            judged = _answers(session, family, batch_tallies, case_set, scratch)
            for tally, (answers, unstable, counted) in judged.items():
                reference = _reference(family, case_set, tally.kernel, references)
                _judge(family, tally, case_set, reference, answers, unstable, counted, config)
            for tally in batch_tallies:
                _charge_release(session, tally)
                if tally.status == "crashed":
                    self.crashed[(index, tally.kernel.name)] = tally.reason
            for name in live.get(index, ()):  # to the client's session: a pool process's or worker's are not its
                printed, change = session.take_output(name)
                if printed is not None or change is not None:
                    output[(index, name)] = (printed, change)
        groups: dict[str, int] = {}
        for group, count in zip(*np.unique(case_set.group.astype(str), return_counts=True)):
            groups[str(group)] = int(count)
        evaluable = int(np.count_nonzero(_default_reference(family, case_set, references).exact_evaluable))
        scene_path.unlink()
        return BatchOutcome(batch_index, parts, groups, len(case_set), evaluable, output=output)


def read_input(family, path: Path):
    """A user's case file as a CaseSet, its expected column (if any) checked against the oracle
    first: a file that disagrees is refused (SectorbenchError naming the first such row), since
    a kernel judged against a wrong answer key proves nothing."""
    case_set = family.input_cases(path)
    if case_set.expected is not None:
        oracle = family.reference(case_set, family.nominal_kernel()).answer
        disagree = np.flatnonzero(case_set.expected != oracle)
        if disagree.size:
            row = int(disagree[0])
            labels = ", ".join(f"{name} {str(values[row])!r}" for name, values in case_set.labels.items())
            raise SectorbenchError(
                f"{path}: the case file disagrees with the oracle on {disagree.size} of {len(case_set)} rows; "
                f"first: row {row}{f' ({labels})' if labels else ''} expects "
                f"{family.describe_answer(case_set.expected[row])}, the exact answer is "
                f"{family.describe_answer(oracle[row])}"
            )
    return case_set


def _default_reference(family, case_set, references):
    """The oracle for the family's own parametrisation (what `exact_evaluable` counts)."""
    key = ("default", None)
    if key not in references:
        default_kernel = family.nominal_kernel()
        references[key] = references.get(family.reference_key(default_kernel)) or family.reference(
            case_set, default_kernel
        )
    return references[key]


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
                out[tally] = family.answers(_evaluate(session, tally))[shift:]
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
                diagonal = np.diagonal(family.answers(_evaluate(session, tally)))
            except (WorkerCrashed, WorkerTimedOut) as exc:
                tally.fail(exc)
                session.restart()
                session.worker.load(grid, scratch)
                continue
            unstable[tally][rows] |= diagonal != answers[tally][rows]
    counted = _count_rows(session, answers, unstable, case_set.scene(shift=aligned), aligned, scratch)
    return {
        tally: (answers[tally], unstable[tally], counted.get(tally, [])) for tally in answers if tally.status == "ok"
    }


def _count_rows(session, answers: dict, unstable: dict, scene, shift: int, scratch) -> dict:
    """Each count loop over every case row, each row its own scene of copies of its shape and
    its point, called twice (loops.CRowLoop.row_counts): {tally: [(loop, counts, copies), ...]},
    copies the tests a count covers, judged against the oracle as the pairs loop's answers are
    (_judge); a row whose two calls differ is unstable.  Only the pairs loop met the cases'
    boundary points before: count loops taking them for inside passed, and so did a count loop
    wrong from its second call on a scene, and one wrong only in its blocked body."""
    counted = [
        tally for tally in answers if tally.status == "ok" and answers[tally].dtype == bool and not tally.kernel.is_peer
    ]
    found: dict = {}
    if not counted:
        return found
    session.worker.load(scene, scratch)
    for tally in counted:
        shapes, points = row_count_layout(tally.kernel)
        copies = shapes * points  # each a test of the row's shape against its point
        for mode in tally.kernel.modes:
            try:
                counts, fp_change = session.worker.evaluate_with_fp(tally.kernel.name, count_mode=mode)
            except WorkerError:  # a row with a prepared index: its loops are checked on grid scenes only
                break
            except (WorkerCrashed, WorkerTimedOut) as exc:
                tally.fail(exc)
                session.restart()
                session.worker.load(scene, scratch)
                break
            tally.fp_change = tally.fp_change or fp_change
            counts = counts[shift:]
            unstable[tally] |= counts < 0  # its two calls counted the same scene apart
            found.setdefault(tally, []).append((f"count_{mode}", counts, copies))
    return found


def _counted_answers(counts: np.ndarray, copies: int) -> tuple[np.ndarray, np.ndarray]:
    """What a count loop answered for each row's point over its copies: inside for some copy,
    and inside for every copy (the same where it answered every copy alike; a count past the
    copies answers neither)."""
    return (counts > 0) & (counts <= copies), counts == copies


def _judge(family, tally: _Tally, case_set, reference, answers, unstable, counted, config) -> None:
    """The kernel's answers on the case rows against the oracle: the pairs loop's, and each
    count loop's over copies of each row's point (`counted`, _count_rows), the same way: a
    wrong answer a row's margin explains is rounding, not a bug, whichever loop gave it."""
    kernel = tally.kernel
    inputs = family.inputs(kernel)
    applicable = family.applicable(kernel, case_set)
    compared = family.compare(kernel, case_set, reference, answers)
    compared, margin = compared if isinstance(compared, tuple) else (compared, reference.margin)
    told_apart = []  # (loop, rows it answered otherwise than the pairs loop, its counts, copies)
    for loop, counts, copies in counted:
        some, every = _counted_answers(counts, copies)
        compared = compared | family.compare(kernel, case_set, reference, some)
        compared = compared | family.compare(kernel, case_set, reference, every)
        told_apart.append((loop, (some != answers) | (every != answers), counts, copies))
    mismatch = (compared | unstable) & applicable
    special = exact.has_special_input(*(case_set.columns[name] for name in inputs))
    underflowing = family.subnormal_intermediates(case_set.columns)
    if underflowing is not None:
        special = special | underflowing
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
            row = _describe_row(family, case_set, inputs, i, answers[i], reference.answer[i], klass[i], margin[i])
            loops = [
                f"{loop} counts {counts[i]} of {copies} copies"
                for loop, apart, counts, copies in told_apart
                if apart[i]
            ]
            if loops:  # the pairs loop's answer may be the right one: say which loop differs
                row["kernel"] = "; ".join([row["kernel"], *loops])
            kept.append(row)


class _LoopChecksStopped(Exception):
    pass


class _LoopChecks:
    """Every session's loop checks (_check_loops), which verify runs alongside the batches, in a
    thread when other processes judge them; stop(), from another thread, ends them early."""

    def __init__(self, family, sessions: list[BuildSession], tallies: dict, config, scratch, progress):
        self.family, self.sessions, self.tallies = family, sessions, tallies
        self.config, self.scratch, self._progress = config, scratch, progress
        self._stopped = threading.Event()

    def __call__(self) -> None:
        for session in self.sessions:
            mine = [t for (s, _), t in self.tallies.items() if s == id(session)]
            _check_loops(self.family, session, mine, self.config, self.scratch, self._step)

    def _step(self, what: str, total=None) -> None:
        if self._stopped.is_set():
            raise _LoopChecksStopped
        self._progress(what, total)

    def stop(self) -> None:
        """No further step starts, and the request under way ends with its worker (killed): a
        kernel may take up to its deadline (--kernel-timeout) to answer."""
        self._stopped.set()
        for session in self.sessions:
            session.interrupt()


def _check_loops(family, session: BuildSession, tallies: list[_Tally], config, scratch, progress) -> None:
    """Every timed loop against the oracle on small grid scenes, for every tail residue, and
    on each of the family's scene kinds as `run` generates them.

    N = 2·(widest block) + 3 shapes, so blocked loops run both whole blocks and the
    shapes left over; M = 1 .. 2·lanes + 1 and LOOP_EXTRA_POINTS points; the family's
    loop scenes hold most points in some shape, so tails have hits to lose or invent.
    The scene kinds at Family.run_check_size reach what those cannot: a hand-written loop
    unrolled over more shapes than its row declares, or over points in tiles, a narrow hit
    counter, a count loop that clamps what its evaluation loop does not; the LONG_CHECK_SIZES
    scenes what run's default N x M reaches beyond them (tiles past 4 096 points, more than
    65 536 points, unrolls up to 128 shapes).
    """
    runnable = [t for t in tallies if t.status == "ok"]
    if not runnable:  # with --input too: the loop scenes come from --seed, not from the cases
        return
    lanes = max(t.kernel.lanes for t in runnable)
    shapes = 2 * max(t.kernel.block for t in runnable) + 3
    rng = np.random.default_rng([config.seed, 1 << 20])
    for points in (*range(1, 2 * lanes + 2), *LOOP_EXTRA_POINTS):
        scene = family.loop_scene(shapes, points, rng)
        _check_scene_loops(family, session, runnable, scene, config, scratch, progress, f"loop check, M={points}")
    n, m = family.run_check_size
    for number, kind in enumerate(family.scenes):
        seed = int(np.random.default_rng([config.seed, 1 << 20, 2]).integers(2**31))
        kind_shapes = n if number == 0 else min(n, RUN_CHECK_OTHER_SHAPES)
        scene = generate(kind, kind_shapes, m, seed, {})
        where = f"loop check, {kind} scene {kind_shapes} x {m}"
        _check_scene_loops(family, session, runnable, scene, config, scratch, progress, where)
    long_rng = np.random.default_rng([config.seed, 1 << 20, 3])  # apart: the other scenes stay as they were
    for long_shapes, long_points in LONG_CHECK_SIZES:
        scene = family.loop_scene(long_shapes, long_points, long_rng)
        where = f"loop check, long scene {long_shapes} x {long_points}"
        _check_scene_loops(family, session, runnable, scene, config, scratch, progress, where)
    split_rng = np.random.default_rng([config.seed, 1 << 20, 1])  # apart: the scenes above stay as they were
    for points in SPLIT_CHECK_POINTS:
        scene = family.loop_scene(shapes, points, split_rng)
        session.worker.load(scene, scratch)
        references = {}
        for tally in runnable:
            if tally.status != "ok":
                continue
            progress(f"loop check over shape ranges: {tally.kernel.name} [{session.config.label}], M={points}")
            try:
                _check_split_loops(family, session, tally, scene, config, references)
            except WorkerCrashed as exc:
                tally.status, tally.reason = "crashed", str(exc)
                session.restart()
                session.worker.load(scene, scratch)
    if not session.peers:
        scene = family.loop_scene(shapes, BROADPHASE_CHECK_POINTS, split_rng)
        try:
            _check_broadphases(family, session, runnable, scene, config, scratch)
        except WorkerCrashed as exc:  # the family's own broadphase code, not a user's row: an internal error
            raise SectorbenchError(
                f"internal error: a broadphase crashed the worker in the loop check: {exc}"
            ) from None


def _check_scene_loops(family, session: BuildSession, runnable, scene, config, scratch, progress, where) -> None:
    """The grid loop and each count loop of every runnable kernel on one grid scene, against
    the oracle; and each NoOperation twin, which must count nothing (a test that never holds:
    `run` subtracts its time, and shares it among the rows of its loop shape)."""
    pairs = _grid_pairs(family, scene)
    references: dict = {}
    session.worker.load(scene, scratch)
    for tally in runnable:
        if tally.status != "ok":
            continue
        progress(f"{where}: {tally.kernel.name} [{session.config.label}]")
        twins = tally.kernel.modes if tally.kernel.noop_reason is None and not tally.kernel.is_peer else ()
        try:
            grid = family.answers(_evaluate(session, tally))
            counts = {
                f"count_{mode}": _count(session, tally, LoopRef(tally.kernel.name, mode)) for mode in tally.kernel.modes
            }
            noops = {
                f"noop_{mode}": _count(session, tally, LoopRef(tally.kernel.name, mode, noop=True)) for mode in twins
            }
        except (WorkerCrashed, WorkerTimedOut) as exc:
            tally.fail(exc)
            session.restart()
            session.worker.load(scene, scratch)
            continue
        reference = _reference(family, pairs, tally.kernel, references)
        problems = family.check_loops(tally.kernel, reference, grid.ravel(), counts, tally.bound)
        problems += [
            f"{loop} counts {hits}, not 0: a NoOperation loop counts nothing" for loop, hits in noops.items() if hits
        ]
        tally.loop_checks += 1 + len(counts) + len(noops)
        for problem in problems:
            _loop_problem(tally, config, where, problem)


def _check_broadphases(family, session: BuildSession, runnable: list[_Tally], scene, config, scratch) -> None:
    """Each broadphase of the family (if it has any) as `run --broadphase` times it, on 1 and
    more threads: its hits, which its narrow phase found on the candidate lists, against the
    oracle's count for the kernel whose predicate that narrow phase runs (when it is checked)."""
    kinds = [kind for kind in family.broadphases() if kind != "none"]
    if not kinds:
        return
    by_name = {tally.kernel.name: tally for tally in runnable}
    session.worker.load(scene, scratch)
    pairs = _grid_pairs(family, scene)
    for kind in kinds:
        for threads in BROADPHASE_CHECK_THREADS:
            reply = session.worker.sample(LoopRef(kind, "inline", threads=threads), calls=1)
            tally = by_name.get(reply.extras.narrow_phase)
            if tally is None or tally.status != "ok":
                continue
            grid = family.answers(session.worker.evaluate(tally.kernel.name)).ravel()
            loop = f"{kind} broadphase on {threads} thread{'s' if threads > 1 else ''}"
            reference = family.reference(pairs, tally.kernel)
            for problem in family.check_loops(tally.kernel, reference, grid, {loop: reply.hits}, tally.bound):
                _loop_problem(tally, config, f"broadphase check, M={scene.n_points}", problem)
            tally.loop_checks += 1


def _loop_problem(tally: _Tally, config, where: str, problem: str) -> None:
    """A loop wrong beyond rounding: a logic bug of the kernel, kept among its failing rows."""
    tally.counts["logic-bug"] += 1
    tally.any_mismatch = tally.any_failure = True
    if len(tally.loop_failing) < config.show:
        tally.loop_failing.append(
            {
                "row": None,
                "group": where,
                "class": "logic-bug",
                "margin": None,
                "inputs": {},
                "kernel": problem,
                "oracle": None,
            }
        )


def shape_splits(n_shapes: int, block: int) -> dict[str, list[tuple[int, int]]]:
    """The splits of [0, N) the loop check runs, each a list of contiguous (begin, end) ranges:
    those `run --threads k` makes (the one splitter), uneven ones, and ones whose ranges start
    inside a block of `block` shapes and end in a remainder."""
    splits = {f"--threads {parts}": shape_ranges(n_shapes, parts) for parts in SPLIT_THREADS}
    splits["uneven 1 | N-1"] = [(0, 1), (1, n_shapes)]
    splits["uneven N-1 | 1"] = [(0, n_shapes - 1), (n_shapes - 1, n_shapes)]
    cut = min(block + 2, n_shapes)  # [1, block + 2): starts inside a block, one whole block and one left over
    splits["inside a block"] = [(0, 1), (1, cut), (cut, n_shapes)]
    return {name: [(b, e) for b, e in ranges if b < e] for name, ranges in splits.items()}


def _check_split_loops(family, session: BuildSession, tally: _Tally, scene, config, references) -> None:
    """The count loops (both modes) and the grid loop over every range of shape_splits, as
    `run --threads` calls them: each range against the oracle on its shapes, the grid rows
    outside the range untouched, and each split's parts adding up to the whole range's count."""
    kernel = tally.kernel
    n, m = scene.n_shapes, scene.n_points
    modes = kernel.modes
    pairs = references.setdefault("pairs", _grid_pairs(family, scene))
    splits = shape_splits(n, max(kernel.block, 1))
    ranges = sorted({r for split in splits.values() for r in split} | {(0, n)})
    counts: dict[tuple[int, int], dict[str, int]] = {}
    for begin, end in ranges:
        where = f"loop check, shapes [{begin}, {end}) of {n}, M={m}"
        counts[(begin, end)] = {
            f"count_{mode}": session.worker.sample(LoopRef(kernel.name, mode, shapes=(begin, end)), calls=1).hits
            for mode in modes
        }
        try:
            raw = session.worker.evaluate(kernel.name, shapes=(begin, end))
        except WorkerError as exc:  # measure.loops refuses a grid loop that wrote outside its range
            _loop_problem(tally, config, where, str(exc))
            tally.loop_checks += 1 + len(modes)
            continue
        key = (begin, end, family.reference_key(kernel))
        if key not in references:
            references[key] = family.reference(_case_rows(family, pairs, begin * m, end * m), kernel)
        grid = family.answers(raw).ravel()
        for problem in family.check_loops(kernel, references[key], grid, counts[(begin, end)], tally.bound):
            _loop_problem(tally, config, where, problem)
        tally.loop_checks += 1 + len(modes)
    whole = counts[(0, n)]
    for name, split in splits.items():
        for loop, hits in whole.items():
            parts = [counts[r][loop] for r in split]
            if sum(parts) != hits:
                _loop_problem(
                    tally,
                    config,
                    f"loop check, split {name} of {n} shapes, M={m}",
                    f"{loop} over {split} counts {' + '.join(map(str, parts))} = {sum(parts)}, over all shapes {hits}",
                )


def _case_rows(family, case_set, start: int, stop: int):
    """Rows [start, stop) of a case set, as a case set of their own."""
    columns = {name: case_set.columns[name][start:stop] for name in case_set.columns}
    return cases.case_set(family, [("loop check", columns)], extra=case_set.extra)


def _charge_release(session: BuildSession, tally: _Tally) -> None:
    """A kernel whose .release() crashed or hung as the next scene was loaded (worker.Worker
    releases each kernel's index in a request of its own) fails with it, as if its evaluation had."""
    failure = session.release_failure(tally.kernel.name)
    if failure is not None and tally.status == "ok":
        tally.fail(failure)


def _evaluate(session: BuildSession, tally: _Tally, shapes=None) -> np.ndarray:
    """The kernel's answers on the worker's scene; an FP-environment change is kept in its tally
    (the worker restores the build's environment before every kernel, so no other is affected)."""
    answers, fp_change = session.worker.evaluate_with_fp(tally.kernel.name, shapes)
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
    row = {
        "row": int(case_set.first_row + i),
        "group": str(case_set.group[i]),
        "class": str(klass),
        "margin": None if not np.isfinite(margin) else float(margin),
        "inputs": {k: hex_float(case_set.columns[k][i]) for k in inputs},
        "kernel": family.describe_answer(kernel_answer),
        "oracle": family.describe_answer(oracle_answer),
    }
    if case_set.labels:  # a case file's text columns: the user's name for the row
        row["labels"] = {name: str(values[i]) for name, values in case_set.labels.items()}
    return row
