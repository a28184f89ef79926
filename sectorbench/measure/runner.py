"""`run`: build each flag set, time the selected kernels in workers, assemble results."""

from __future__ import annotations

import hashlib
import math
import os
import statistics
import subprocess
from collections.abc import Callable, Mapping
from dataclasses import dataclass, field, replace

from .. import families
from ..compare import answers
from ..compare.stats import summarize
from ..errors import SectorbenchError
from ..families import scene_kinds
from ..interrupts import scratch_directory
from ..model import scenes
from ..model.kernels import Kernel
from ..model.results import PEER_CC, KernelResult, RowKey, RunResult
from ..native import code_identity, environment, machine_code
from ..native.build import BuildConfig, build, compile_deadline, compiler_warnings, headers, local_headers
from ..native.build import sources as build_sources
from . import validity
from .builds import FailedBuild, open_build, usable
from .deadlines import DEFAULT_KERNEL_TIMEOUT_S, Budget, Deadlines
from .messages import LoopExtras, LoopRef
from .selection import check_family, check_names, infer_family, known_kernels, select, split_names
from .timing import (
    CALIBRATION_SAMPLES,
    MODES,
    Series,
    TimingConfig,
    duration,
    estimate_s,
    net_time,
    run_rounds,
    sample_s,
)
from .worker import (
    BUILD_OUTPUT,
    BuildSession,
    WorkerCrashed,
    WorkerTimedOut,
    clock_session,
    load_notes,
    row_fp_change,
    save_scene,
)

#: --threads all: the CPUs this process may run on.
ALL_THREADS = "all"
#: The peers' worker: a plain build (never fast-math), so their floating-point environment
#: is IEEE's, as in a user's Python process; its library serves only the clock.
PEER_BUILD = BuildConfig(("-O2",))
#: What a peer's row shows for flags: compiler flags do not apply to it.
PEER_FLAGS = "—"
#: A peer's first call worth a note (a JIT compiling); below it, nothing was compiled.
JIT_NOTE_S = 0.01
#: A run expected to take longer is refused before it starts (and stopped after calibration
#: if the calibrated rounds would): longer than any preset (compare --preset article takes
#: about 3.5 min here), so past it a slip in -n/-m/--repeat is likelier than intent.
MAX_RUN_MINUTES = 60.0


@dataclass(frozen=True)
class RunConfig:
    """Everything a run depends on; the CLI's options fill it."""

    #: The scene kind (or an older spelling of one); None: the family's first kind.
    scene: str | None = None
    #: None: the scene's family, else the first registered family (the kinds it lists first).
    family: str | None = None
    sectors: int = 1000  # N, the article's
    points: int = 100_000  # M, the article's
    seed: int = 0
    kernels: tuple[str, ...] = ()  # empty: the family's default kernels
    builds: tuple[BuildConfig, ...] = (BuildConfig(),)
    modes: tuple[str, ...] = ("inline",)  # inline: as production code; call: the article's method
    timing: TimingConfig = field(default_factory=TimingConfig)
    disable_isa: tuple[str, ...] = ()
    #: Speedups are against this kernel's time; None: the family's reference kernel (else the first row's).
    reference: str | None = None
    threads: tuple[int, ...] = (1,)  # 1 by default, so that figures stay comparable across machines
    max_minutes: float = MAX_RUN_MINUTES
    #: none: the kernels, every pair; others: a point index first, timed end to end.  Empty: the
    #: family's default for the scene kind (an index at game scale, none on the article's scenes).
    broadphases: tuple[str, ...] = ()
    #: The scene generator's options by name (e.g. a game scene's world, rmin, rmax); an option
    #: left out or None takes the generator's default (families.scene_kinds.resolved_options).
    scene_options: Mapping[str, float | None] = field(default_factory=dict)
    #: run --against: the base's builds (the same flags and compiler on another version of the
    #: kernels), timed in the same rounds as `builds`; with any, rows carry side "base" or "head".
    base_builds: tuple[BuildConfig, ...] = ()
    #: The floor of every worker request's deadline (measure/deadlines.py): --kernel-timeout.
    kernel_timeout: float = DEFAULT_KERNEL_TIMEOUT_S

    def __post_init__(self):
        Deadlines(self.kernel_timeout)  # refuses a bad --kernel-timeout before any work
        minutes = self.max_minutes
        if (
            isinstance(minutes, bool)
            or not isinstance(minutes, (int, float))
            or not (math.isfinite(minutes) and minutes > 0)
        ):
            raise SectorbenchError(f"--max-minutes must be a number above 0 (got {self.max_minutes!r})")

    def to_dict(self) -> dict:
        return {
            "scene": self.scene,
            "sectors": self.sectors,
            "points": self.points,
            "seed": self.seed,
            "kernels": list(self.kernels),
            "flags": [b.label for b in self.builds],
            "modes": list(self.modes),
            "repeat": self.timing.repeat,
            "min_sample_s": self.timing.min_sample_s,
            "max_minutes": self.max_minutes,
            "disable_isa": list(self.disable_isa),
            "threads": list(self.threads),
            "broadphase": list(self.broadphases),
            "scene_options": {k: v for k, v in self.scene_options.items() if v is not None},
            "kernel_timeout": self.kernel_timeout,
        }


def available_cpus() -> int:
    return len(os.sched_getaffinity(0)) if hasattr(os, "sched_getaffinity") else os.cpu_count() or 1


def parse_threads(values) -> tuple[int, ...]:
    """--threads values (N or "all", repeatable) as thread counts, in order, each once."""
    counts = []
    for value in values:
        count = available_cpus() if str(value) == ALL_THREADS else int(value)
        if count < 1:
            raise SectorbenchError(f"--threads must be at least 1 or 'all' (got {value})")
        counts.append(count)
    return tuple(dict.fromkeys(counts))


#: progress(what, left_s): what is being done, and the seconds expected to be left (None: unknown).
Progress = Callable[..., None]


@dataclass(frozen=True)
class Plan:
    """What a run will measure, known once its builds are listed, before anything is timed."""

    builds: int
    kernels: int  # selected kernels per build (the most of any build)
    modes: int
    threads: int
    series: int  # kernels and NoOperation loops, times builds, modes and thread counts, runnable ones only
    noops: int
    tests: int  # per pass
    repeat: int
    rows: tuple[RowKey, ...]  # every result row
    estimate_s: float  # each row by its own model: ns_per_test a test, BROADPHASE_NS_PER_ITEM an item
    broadphase_series: int = 0  # of `series`, broadphase rows (timed end to end)
    sides: tuple[str | None, ...] = ()  # each row's A/B side (RunConfig.base_builds), None outside one
    ns_per_test: float = families.Family.typical_ns_per_test  # what a test is assumed to cost: its family's
    ns_note: str = ""  # the family's typical_ns_note
    #: Rows skipped before timing because this machine cannot run their kernel (a CPU feature it
    #: lacks or --disable-isa masks, a peer's missing package), each with the reason.
    unrunnable: tuple[tuple[RowKey, str], ...] = ()

    def describe(self) -> str:
        def plural(count: int, word: str) -> str:
            return f"{count} {word}{'' if count == 1 else 's'}"

        counts = [plural(self.builds, "build"), plural(self.kernels, "kernel"), plural(self.modes, "mode")]
        if self.threads > 1:
            counts.append(plural(self.threads, "thread count"))
        extra = [plural(self.noops, "NoOperation loop")]
        if self.broadphase_series:
            extra.append(f"{self.broadphase_series} broadphase series")
        return (
            f"plan: {' × '.join(counts)} (+ {', '.join(extra)}), "
            f"{plural(self.repeat, 'round')} after calibration, {self.tests:,} tests a pass; "
            f"timing about {duration(self.estimate_s)} (assuming {self.ns_per_test:g} ns a test"
            + (f", a broadphase {BROADPHASE_NS_PER_ITEM:g} ns a shape or point" if self.broadphase_series else "")
            + " until calibrated"
            + (f", where {self.ns_note}" if self.ns_note else "")
            + "; the checks after timing not included)"
        )


def resolve(config: RunConfig) -> RunConfig:
    """The config with its family and scene kind settled: an older spelling of a kind becomes
    the kind and its options; without --family and --scene, the family of the named kernels
    (as verify infers it), else the first registered; a family without a scene gets its first
    kind; a scene of another family than --family is refused."""
    if config.scene is None:
        name = config.family
        if name is None and config.kernels:
            known = known_kernels(config.builds[0]) if config.builds else None
            name = infer_family(config.kernels, known) if known else None
        family = families.get(name) if name else families.all_families()[0]
        return replace(config, family=family.name, scene=next(iter(family.scenes)))
    family = families.family_of_scene(config.scene)
    if config.family is not None and config.family != family.name:
        raise SectorbenchError(
            f"--scene {config.scene} is a scene of the {family.name} family, not of the {config.family} family "
            f"(its kinds: {', '.join(families.get(config.family).scenes)})"
        )
    kind, options = families.resolve_scene(config.scene, config.scene_options)
    return replace(config, family=family.name, scene=kind, scene_options=options)


def check_time(config: RunConfig) -> None:
    """Refuse, before anything is generated or built, a run expected to outlast config.max_minutes.

    Estimated at the family's typical_ns_per_test for the fewest series it can have (the named
    kernels, or one, plus a NoOperation loop, per build, mode and thread count); once
    the kernels are known and calibrated, the run is checked again with what was measured.
    """
    tests = config.sectors * config.points
    ns_per_test = (
        families.get(config.family).typical_ns_per_test if config.family else families.Family.typical_ns_per_test
    )
    broadphases = config.broadphases or ("none",)
    brute_force = bool(config.kernels) or "none" in broadphases
    per_build = (len(config.builds) + len(config.base_builds)) * len(config.threads)
    series = per_build * len(config.modes) * (max(1, len(config.kernels)) + 1) if brute_force else 0
    indexed = per_build * len([b for b in broadphases if b != "none"])
    making_s = scene_kinds.scene_cost(config.scene, config.sectors, config.points, config.scene_options)[1]
    expected = (
        estimate_s(series, tests, config.timing, ns_per_test)
        + estimate_s(indexed, config.sectors + config.points, config.timing, BROADPHASE_NS_PER_ITEM)
        + making_s
    )
    if expected > config.max_minutes * 60:
        raise SectorbenchError(
            f"this run would take about {duration(expected)} (N={config.sectors:,} x M={config.points:,} = "
            f"{tests:,} tests a pass, {config.timing.repeat} rounds, {series} or more series, at "
            f"{ns_per_test:g} ns a test"
            + (f"; about {duration(making_s)} to make the scene" if making_s >= 1 else "")
            + f"), over the limit of {config.max_minutes:g} min: "
            "use a smaller scene or fewer rounds, or raise --max-minutes"
        )


def run(
    config: RunConfig,
    progress: Progress = lambda what, left_s=None: None,
    on_plan: Callable[[Plan], None] = lambda plan: None,
) -> RunResult:
    """Measure every selected kernel of every build; never raises for a crashing kernel.

    on_plan(plan) is called once the kernels are known, before anything is timed; it may
    raise to stop the run there (the CLI checks a --baseline against plan.rows).
    """
    for mode in config.modes:
        if mode not in MODES:
            raise SectorbenchError(f"unknown mode {mode!r}; choose from {', '.join(MODES)}")
    config = resolve(config)
    family = families.get(config.family)
    scene_kinds.check_scene_size(config.scene, config.sectors, config.points, config.scene_options)
    broadphases = config.broadphases or family.default_broadphases(config.scene)
    unknown = [b for b in broadphases if b not in family.broadphases()]
    if unknown:
        raise SectorbenchError(
            f"--broadphase {', '.join(unknown)}: the {family.name} family has {', '.join(family.broadphases())}"
        )
    config = replace(config, broadphases=tuple(broadphases))
    check_time(config)
    known = known_kernels(config.builds[0]) if config.kernels else None
    if known is not None:  # a misspelt name, or one of another family, costs no build
        check_names(config.kernels, known)
        check_family(config.kernels, known, family.name)
    scene = scene_kinds.generate(config.scene, config.sectors, config.points, config.seed, config.scene_options)
    c_names, peer_names = split_names(config.kernels, family)
    indexed = [b for b in broadphases if b != "none"]
    deadlines, budget = Deadlines(config.kernel_timeout), Budget.minutes_from_now(config.max_minutes)
    out_of_time = f"the run's --max-minutes {config.max_minutes:g} ran out"
    with scratch_directory("sectorbench-") as scratch, compile_deadline(budget.end, out_of_time):
        scene_path = save_scene(scene, scratch)
        sessions = []
        clock = None
        try:
            brute_force = c_names or (not config.kernels and "none" in broadphases)
            for build_config, side in _sides(config) if brute_force or indexed else ():
                progress(f"building {build_config.label}" + (f" ({side})" if side else ""))

                def start(library, build_config=build_config, side=side):
                    return BuildSession(
                        build_config, library, scene_path, config.disable_isa, False, deadlines, budget, side
                    )

                sessions.append(open_build(build_config, start, side))  # a failed one costs its own rows
            if peer_names:
                progress("starting the peers' worker")
                sessions.append(
                    BuildSession(PEER_BUILD, build(PEER_BUILD), scene_path, config.disable_isa, True, deadlines, budget)
                )
            working = usable(sessions)  # none: an error
            if not brute_force:
                c_names = [None]  # no brute-force kernel: select() must choose none
            clock = clock_session(working, config.builds[0].cc, progress)
            return _measure(config, scene, sessions, progress, {False: c_names, True: peer_names}, on_plan, clock)
        except BaseException:  # interrupted or failed: do not wait for workers in the middle of a sample
            for session in [*sessions, clock]:
                if session is not None:
                    session.kill()
            raise
        finally:
            for session in [*sessions, clock]:
                if session is not None:
                    session.close()


def _sides(config: RunConfig) -> list[tuple[BuildConfig, str | None]]:
    """Each build with its A/B side: head and base in alternation (so neither is always timed
    first in a round), or no side outside an A/B run."""
    if not config.base_builds:
        return [(b, None) for b in config.builds]
    head = [(b, "head") for b in config.builds]
    base = [(b, "base") for b in config.base_builds]
    return [pair for pairs in zip(base, head) for pair in pairs] + head[len(base) :] + base[len(head) :]


def _measure(
    config: RunConfig,
    scene: scenes.Scene,
    sessions: list[BuildSession],
    progress: Progress,
    names: dict[bool, list[str]],
    on_plan: Callable[[Plan], None],
    clock_build: BuildSession,
) -> RunResult:
    family = families.get(scene.family)
    plan, series, kernels_per_build = _planned(config, scene, sessions, names)
    noops = {key for key in series if key[1] not in {kernel.name for _, kernel, _, _ in plan}}
    # A broadphase row's own model: its cost grows with the shapes and points it indexes, not N x M.
    indexed = {(s.config, k.name, m, t) for s, k, m, t in plan if k.noop_reason is not None}
    priors = {key: (scene.n_shapes + scene.n_points) * BROADPHASE_NS_PER_ITEM * 1e-9 for key in indexed}
    plan_estimate_s = estimate_s(
        len(series) - len(indexed), scene.tests, config.timing, family.typical_ns_per_test
    ) + estimate_s(len(indexed), scene.n_shapes + scene.n_points, config.timing, BROADPHASE_NS_PER_ITEM)
    if plan_estimate_s > config.max_minutes * 60:  # check_time's rule, now with every series counted
        raise SectorbenchError(
            f"this run's {len(series)} series would take about {duration(plan_estimate_s)} (at "
            f"{family.typical_ns_per_test:g} ns a test until calibrated), "
            f"over the limit of {config.max_minutes:g} min: "
            "use a smaller scene, fewer rounds or fewer kernels, or raise --max-minutes"
        )
    on_plan(
        Plan(
            builds=len(sessions),
            kernels=kernels_per_build,
            modes=len(config.modes),
            threads=len(config.threads),
            series=len(series),
            noops=len(noops),
            tests=scene.tests,
            repeat=config.timing.repeat,
            rows=tuple(_row(session, kernel, mode, threads) for session, kernel, mode, threads in plan),
            estimate_s=plan_estimate_s,
            ns_per_test=family.typical_ns_per_test,
            ns_note=family.typical_ns_note,
            broadphase_series=len(indexed),
            sides=tuple(session.side for session, _, _, _ in plan),
            unrunnable=tuple(
                (_row(session, kernel, mode, threads), kernel.skip_reason)
                for session, kernel, mode, threads in plan
                if not kernel.runnable and kernel.unrun_status == "skipped"
            ),
        )
    )

    def restart_crashed_worker(failed: Series, exc: Exception) -> None:
        """The failed series is marked by run_rounds; its build's other kernels need a live worker
        (unless the run's --max-minutes is over: then every request left is refused at once)."""
        if isinstance(exc, WorkerTimedOut):
            failed.failure_status = "timed-out"
        session = next(s for s in sessions if s.config == failed.key[0] and s.peers == failed.key[4])
        if isinstance(exc, (WorkerCrashed, WorkerTimedOut)) and session.budget.left_s() > 0:
            session.restart()

    clock_mhz: list[float] = []
    clock_failures: list[str] = []  # why a round's clock reading is missing

    def read_clock() -> None:
        try:
            clock_mhz.append(clock_build.worker.clock_mhz())
            return
        except SectorbenchError:  # its worker is gone (a kernel killed the fork server): once more, in a fresh one
            pass
        try:
            clock_build.restart()
            clock_mhz.append(clock_build.worker.clock_mhz())
        except SectorbenchError as exc:
            clock_mhz.append(float("nan"))
            clock_failures.append(str(exc))

    clock = _TimeLeft(list(series.values()), config.timing, scene.tests, priors, family.typical_ns_per_test)

    def check_calibrated_time() -> None:
        """Over --max-minutes once calibrated: the costliest kernel series are left out (timed-out,
        with the reason) until the rest fits, so a slow kernel costs its own rows; a run that
        does not fit even then is refused.  NoOperation series stay: they stand for many rows."""
        limit_s = config.max_minutes * 60
        left = clock.left_s()
        if left <= limit_s:
            return
        kernels = [s for s in series.values() if s.key not in noops and s.failure is None and s.calls]
        kernels.sort(key=lambda s: s.calls * s.seconds_per_call, reverse=True)
        for costly in kernels:
            if clock.left_s() <= limit_s:
                break
            rounds_s = config.timing.repeat * costly.calls * costly.seconds_per_call
            costly.failure = (
                f"left out: its {config.timing.repeat} rounds would take {duration(rounds_s)}, and the run "
                f"{duration(left)}, over --max-minutes {config.max_minutes:g}"
            )
            costly.failure_status = "timed-out"
        if clock.left_s() > limit_s:
            raise SectorbenchError(
                f"calibrated: the {config.timing.repeat} rounds would take {duration(left)}, over the limit of "
                f"{config.max_minutes:g} min: use a smaller scene or fewer rounds, or raise --max-minutes"
            )

    run_rounds(
        list(series.values()),
        config.timing,
        lambda what: progress(what, clock.left_s()),
        restart_crashed_worker,
        read_clock,
        on_calibrated=check_calibrated_time,
    )
    loops = {id(session): _loops(session) for session in sessions}
    results = [
        _result(scene, session, kernel, mode, threads, series, clock_mhz, loops[id(session)])
        for session, kernel, mode, threads in plan
    ]
    reference = _reference_kernel(results, config.reference or families.get(scene.family).reference_kernel)
    results = _with_speedups(results, reference)
    results = _with_code_identity(results, [(session, kernel) for session, kernel, _, _ in plan])
    env = _environment(sessions, clock_mhz, clock_build)
    if clock_failures:  # a missing cyc/test column says why
        env["machine"]["cpu"]["clock_failure"] = clock_failures[0]
    progress("counting the exact oracle's hits")
    exact_count = family.exact_count(scene)
    counted = {kernel.name: kernel for _, kernel, _, _ in plan}  # what rounding allows each (compare/answers.py)
    allowance = family.count_allowance(scene, list(counted.values()))
    result = RunResult(
        scene=scene.describe(),
        env=env,
        config={**config.to_dict(), "reference": reference},
        results=results,
        exact_count=exact_count,
        count_allowance=allowance and allowance[0],
        count_allowance_sample=allowance and allowance[1],
    )
    return replace(result, results=answers.judged(result))


def _planned(
    config: RunConfig, scene: scenes.Scene, sessions: list[BuildSession], names: dict[bool, list[str]]
) -> tuple[list[tuple[BuildSession, Kernel, str, int]], dict[tuple, Series], int]:
    """Every row of the run in order, (session, kernel, mode, threads); the series that time
    them by key (a runnable row's kernel, and the NoOperation twin its loop shape shares); and
    the most kernels any build selected.  SectorbenchError when there is no row, or none can be timed."""
    plan = []
    series: dict[tuple, Series] = {}
    kernels_per_build = 0
    for session in sessions:
        chosen = names[session.peers]
        if session.side == "base" and chosen and chosen != [None]:
            # The base may predate a named kernel: it is new in the head, not an error.
            chosen = [name for name in chosen if name in {k.name for k in session.kernels}] or [None]
        selected = [] if chosen == [None] else select(session.kernels, chosen, scene.family)
        kernels_per_build = max(kernels_per_build, len(selected))
        by_name = {k.name: k for k in session.kernels}
        selected += [by_name[name] for name in config.broadphases if name != "none" and name in by_name]
        for kernel in selected:
            for mode in config.modes:
                for threads in config.threads:
                    plan.append((session, kernel, mode, threads))
                    if kernel.runnable and not _missing_mode(kernel, mode):
                        # The NoOperation twin of the first kernel of each loop shape stands for all of them.
                        for noop in (True, False) if kernel.noop_reason is None else (False,):
                            name = kernel.overhead_key if noop else kernel.name
                            series.setdefault(
                                (session.config, name, mode, threads, session.peers),
                                _series(session, kernel, mode, threads, config.timing, noop),
                            )
    if not plan:  # a family with no default kernel (one whose kernels come with --source): an empty table, exit 0
        raise SectorbenchError(
            f"no kernel could be timed: the {scene.family} family has no default kernels; "
            "give the file of its kernels with --source, or name some with --kernels"
        )
    if not series:  # every row would be skipped: a table of nothing measured, exit 0, as verify refuses
        why = (f"{k.name} [{s.config.label}]: {k.skip_reason or _missing_mode(k, mode)}" for s, k, mode, _ in plan)
        raise SectorbenchError(f"no kernel could be timed: {'; '.join(dict.fromkeys(why))}")
    return plan, series, kernels_per_build


def _missing_mode(kernel: Kernel, mode: str) -> str | None:
    """Why a kernel has no row's loop in `mode` (its record lists the loops it has), or None."""
    if mode in kernel.modes:
        return None
    return f"{kernel.name} has one loop: it runs in --mode {', '.join(kernel.modes)}"


def row_build(session: BuildSession) -> tuple[str, str]:
    """(flags, cc) of the session's rows: compiler flags do not apply to the peers' worker."""
    return (PEER_FLAGS, PEER_CC) if session.peers else build_row(session.config)


def build_row(config: BuildConfig) -> tuple[str, str]:
    """(flags, cc) of the rows of the C kernels `config` builds."""
    return " ".join(config.flags), config.cc


def _row(session: BuildSession, kernel: Kernel, mode: str, threads: int) -> RowKey:
    flags, cc = row_build(session)
    return RowKey(kernel.name, cc, flags, mode, threads)


class _TimeLeft:
    """Seconds of measuring left: assumed per test until a series is calibrated, then its own."""

    def __init__(
        self,
        series: list[Series],
        timing: TimingConfig,
        tests: int,
        priors: Mapping | None = None,
        ns_per_test: float = families.Family.typical_ns_per_test,
    ):
        self.series, self.timing, self.tests, self.ns_per_test = series, timing, tests, ns_per_test
        self.priors = dict(priors or {})  # series key -> seconds a pass, by the row's own model

    def left_s(self) -> float:
        live = [s for s in self.series if s.failure is None]
        calibrated = [s.calls * s.seconds_per_call for s in live if s.calls and s.key not in self.priors]
        # An uncalibrated series is taken to cost what the calibrated ones do on average
        # (a row with a model of its own, a broadphase, what that model says).
        pass_s = sum(calibrated) / len(calibrated) if calibrated else self.tests * self.ns_per_test * 1e-9
        left = 0.0
        for s in live:
            own_s = self.priors.get(s.key, pass_s)
            if not s.calls:
                left += max(CALIBRATION_SAMPLES * self.timing.min_sample_s, own_s)
            sample = s.calls * s.seconds_per_call if s.calls else sample_s(self.timing, own_s)
            left += (self.timing.repeat - len(s.samples or ())) * sample
        return left


#: What a broadphase row is assumed to cost until calibrated, per shape and per point it indexes
#: and queries (its cost grows with N + M, not with N x M tests): grid on game 10 000 x 1 000 000
#: took 27 ms end to end on a Zen 4 host, about 27 ns an item.
BROADPHASE_NS_PER_ITEM = 30.0


def _series(session: BuildSession, kernel: Kernel, mode: str, threads: int, timing: TimingConfig, noop: bool) -> Series:
    ref = LoopRef(kernel.name, mode, noop, threads)

    def calibrate():
        return session.worker.calibrate(ref, timing.min_sample_s)

    def take(calls: int):
        return session.worker.sample(ref, calls, expected_s=calls * series.seconds_per_call)

    name = kernel.overhead_key if noop else kernel.name
    build_text = "python" if session.peers else session.config.label
    if session.side:
        build_text += f" ({session.side})"
    label = f"{name} [{build_text}, {mode}" + (f", {threads} threads]" if threads > 1 else "]")
    key = (session.config, name, mode, threads, session.peers)
    series = Series(key=key, label=label, calibrate=calibrate, take=take)
    return series


def _loops(session: BuildSession) -> dict:
    """Each kernel's and NoOperation's hot loop in this build (machine_code.analyze), by function."""
    functions = {
        f"{k.name}_{loop}_{mode}": k.block
        for k in session.kernels
        if k.runnable and k.noop_reason is None
        for loop in ("count", "noop")
        for mode in k.modes
    }
    if session.peers or not functions:  # no loop of the peers' worker is in its library; none of a failed build
        return {}
    try:
        return machine_code.analyze(session.library, functions)
    except (OSError, ValueError) as exc:  # no objdump, an unreadable library: no analysis, said once per row
        return {name: machine_code.LoopAnalysis(name, "none", reason=f"objdump: {exc}") for name in functions}


def _result(
    scene,
    session: BuildSession,
    kernel: Kernel,
    mode: str,
    threads: int,
    series: dict,
    clock_mhz: list[float],
    loops: dict,
) -> KernelResult:
    flags, cc = row_build(session)
    has_noop = kernel.noop_reason is None
    base = dict(
        kernel=kernel.name,
        family=kernel.family,
        flags=flags,
        cc=cc,
        mode=mode,
        threads=threads,
        tests=scene.tests,
        overhead_kernel=kernel.overhead_key if has_noop else None,
        side=session.side,
    )
    if not kernel.runnable:
        return KernelResult(status=kernel.unrun_status, reason=kernel.skip_reason, **base)
    if _missing_mode(kernel, mode):
        return KernelResult(status="skipped", reason=_missing_mode(kernel, mode), **base)
    mine = series[(session.config, kernel.name, mode, threads, session.peers)]
    printed = session.printed_note(kernel.name)
    warnings = load_notes(session.info.fp_change_at_load)
    warnings += [note] if (note := session.process_note(kernel.name)) else []
    if mine.failure is not None:
        warnings += [printed] if printed else []
        return KernelResult(status=mine.failure_status, reason=mine.failure, warnings=warnings, **base)
    counted = set(mine.hits) | mine.hits_seen  # every call's (extremes within a sample), not each sample's last
    if len(counted) > 1:
        warnings.append(f"hit count changed between calls: {sorted(counted)}")
    if mine.fp_change:
        warnings.append(f"changes the FP environment: {mine.fp_change} (restored before every other kernel)")
    if printed:
        warnings.append(printed)
    hits = mine.hits[0]
    summary = summarize(mine.samples)
    loop, noop_loop = loops.get(f"{kernel.name}_count_{mode}"), loops.get(f"{kernel.name}_noop_{mode}")
    per_test = getattr(_family_of(kernel), "hot_loop_over_points", True)
    classified = loop and noop_loop and NOT_CLASSIFIED not in (loop.vector, noop_loop.vector)
    if classified and per_test and loop.vector != noop_loop.vector:
        warnings.append(
            f"the kernel's loop was compiled {loop.vector}, its NoOperation's {noop_loop.vector}: "
            f"the overhead subtracted is that of a {noop_loop.vector} loop"
        )
    extras = _extras_fields(mine)
    timing = dict(
        hits=hits,
        hits_seen=sorted(counted - {hits}),
        hit_rate=hits / scene.tests,
        calls=mine.calls,
        samples_s=mine.samples,
        median_s=summary.median,
        min_s=summary.min,
        spread=summary.spread,
        fp_environment_change=row_fp_change(mine.fp_change, session.info.fp_change_at_load),
        **extras,
        **_cycles(mine, clock_mhz, scene.tests, loop, threads, per_test),
    )
    if (extras.get("jit_s") or 0) >= JIT_NOTE_S:
        # Said as what any peer's first call may do: numba's is its compilation, kdtree's imports scipy.
        warnings.append(
            f"{kernel.name}: its first call (a JIT's compilation, its modules' first import) took "
            f"{extras['jit_s']:.2f} s, before timing"
        )
    if not has_noop:  # timed end to end: its net time is its time
        return KernelResult(
            status="ok",
            net_samples_s=list(mine.samples),
            net_s=summary.median,
            ns_per_test=summary.median / scene.tests * 1e9,
            warnings=warnings,
            **timing,
            **base,
        )
    overhead = series[(session.config, kernel.overhead_key, mode, threads, session.peers)]
    if overhead.failure is not None or not overhead.samples:
        warnings.append(f"NoOperation loop {kernel.overhead_key} failed: {overhead.failure}")
        return KernelResult(status="ok", warnings=warnings, **timing, **base)
    twin_counts = [*(overhead.hits or ()), *overhead.hits_seen]
    if any(twin_counts):  # a test that never holds counts nothing: this twin is not one
        warnings.append(
            f"NoOperation loop {kernel.overhead_key} counted {max(twin_counts, key=abs)} hits, not 0: "
            "it is not a NoOperation, so no net time"
        )
        return KernelResult(status="ok", warnings=warnings, **timing, **base)
    net = net_time(mine.samples, overhead.samples)
    overhead_s = summarize(overhead.samples).median
    touched = _working_set(scene, kernel, threads)
    valid = validity.judge(
        touched.reused_bytes,
        validity.private_cache_bytes(environment.cpu_caches()),
        summary.median,
        overhead_s,
        net.net_s,
        timing.get("cycles_per_test"),
        timing.get("bound_cycles_per_test"),
    )
    return KernelResult(
        status="ok",
        **timing,
        overhead_samples_s=overhead.samples,
        overhead_s=overhead_s,
        net_samples_s=list(net.net_samples_s),
        net_s=net.net_s,
        ns_per_test=net.net_s / scene.tests * 1e9,
        warnings=warnings + list(net.warnings) + [text for text in (valid.reason, valid.note) if text],
        working_set_bytes=touched.reused_bytes,
        net_valid=valid.net_valid,
        validity=valid.reason,
        **base,
    )


def _working_set(scene, kernel: Kernel, threads: int) -> validity.WorkingSet:
    """A pass's bytes from the scene's layout and the kernel's record (its arrays, its block);
    with threads, one thread's share of the shapes (each core streams the points through its own L2)."""
    extra = sum(int(getattr(array, "nbytes", 0)) for array in scene.extra.values())
    return validity.working_set(
        -(-scene.n_shapes // max(1, threads)),
        scene.n_points,
        len(scene.point_arrays),
        len(kernel.takes),
        scene.layout,
        kernel.block,
        extra,
    )


def _extras_fields(series: Series) -> dict:
    """The result fields of what a loop reported beyond time (messages.LoopExtras): once at
    warm-up (a JIT, a prepared index), or with each sample (an index built inside the timed
    pass: its median, and every sample's)."""
    warm = series.warm or LoopExtras()
    per_sample = [e.index_build_s for e in series.extras if e.index_build_s is not None]
    last = series.extras[-1] if series.extras else LoopExtras()
    out = {
        "jit_s": warm.jit_s,
        "index_build_s": statistics.median(per_sample) if per_sample else warm.index_build_s,
        "index_bytes": warm.index_bytes if warm.index_bytes is not None else last.index_bytes,
        "candidates": last.candidates,
        "narrow_phase": last.narrow_phase,
        "broadphase": last.broadphase,
        "index_scatter": last.index_scatter,
    }
    if per_sample:
        out["index_build_samples_s"] = per_sample
    return out


#: machine_code's vector class of a loop with no floating-point arithmetic it can see (an
#: integer search, a loop calling out): shown as "not classified", never as a width.
NOT_CLASSIFIED = "none"


def _family_of(kernel: Kernel):
    from ..families import get

    try:
        return get(kernel.family)
    except SectorbenchError:  # a saved row of a family this installation lacks
        return None


def _cycles(series: Series, clock_mhz: list[float], tests: int, loop, threads: int, per_test: bool = True) -> dict:
    """Gross cycles per test, the loop's bound and vector class, and counted cycles and
    instructions where hardware counters work.

    Cycles are the median time times the fastest clock reading of the run: a shared or
    virtual machine can only make the dependent-multiply loop look slower (it loses the CPU
    now and then), so its fastest reading is the closest to the true clock, and pairing a
    slow reading with a sample would claim cycles the core never ran.
    """
    clock = max((mhz for mhz in clock_mhz if mhz == mhz), default=None)
    cycles = statistics.median(series.samples) * clock * 1e6 / tests if clock and series.samples else None
    out = {"cycles_per_test": cycles}
    if loop is not None:
        out["loop_vector"] = None if loop.vector == NOT_CLASSIFIED else loop.vector
        if threads == 1 and per_test:  # the bound is one core's
            out["bound_cycles_per_test"], out["bound_model"] = loop.bound_cycles_per_test, loop.model
        out["bound_reason"] = loop.reason
        if not per_test:
            out["bound_reason"] = "the hot loop runs inside one test (its family's kernels loop there)"
        if loop.vector == NOT_CLASSIFIED:
            out["bound_reason"] = f"loop not classified: {loop.reason or 'no floating-point arithmetic in it'}"
    if series.counted:
        cycles = statistics.median(c for c, _ in series.counted) / tests
        instructions = statistics.median(i for _, i in series.counted) / tests
        out.update(
            counted_cycles_per_test=cycles,
            instructions_per_test=instructions,
            ipc=instructions / cycles if cycles else None,
        )
    return out


def _with_code_identity(results: list[KernelResult], kernels: list[tuple[BuildSession, Kernel]]) -> list[KernelResult]:
    """Each C kernel row with its count loop's code fingerprint and its source's (see
    KernelResult.code_sha256); a library objdump cannot read leaves them None."""
    fingerprints: dict[int, dict] = {}
    out = []
    for row, (session, kernel) in zip(results, kernels):
        if session.peers or kernel.noop_reason is not None or row.status != "ok":
            out.append(row)
            continue
        if id(session) not in fingerprints:
            names = [
                f"{k.name}_count_{mode}"
                for k in session.kernels
                if k.noop_reason is None  # a broadphase has no count function of its own
                for mode in MODES
            ]
            try:
                fingerprints[id(session)] = code_identity.code_fingerprints(session.library, names)
            except (OSError, ValueError, subprocess.SubprocessError):
                fingerprints[id(session)] = {}
        code = fingerprints[id(session)].get(f"{kernel.name}_count_{row.mode}")
        out.append(replace(row, code_sha256=code, source_sha256=code and source_fingerprint(session.config, kernel)))
    return out


def source_fingerprint(build_config: BuildConfig, kernel: Kernel) -> str:
    """sha256 of the C file holding the kernel's row, every header (kernels_c/'s, and those
    beside a --source file) and the flags.

    The row's file is found by its name among the build's sources; if that name is
    not unique (two --source files of one name), every source is hashed.
    """
    file_name = kernel.source.rsplit(":", 1)[0]
    all_sources = build_sources(build_config)
    matches = [path for path in all_sources if path.name == file_name]
    sha = hashlib.sha256("\0".join(build_config.flags).encode())
    files = matches if len(matches) == 1 else all_sources
    beside = sorted({h for path in files if path in build_config.extra_sources for h in local_headers(path)})
    for path in files + headers() + beside:
        sha.update(b"\0" + path.name.encode() + b"\0" + path.read_bytes())
    return sha.hexdigest()


def _reference_kernel(results: list[KernelResult], wanted: str | None) -> str | None:
    """The kernel speedups are against: `wanted` if it was measured, else the first row's."""
    if wanted in {r.kernel for r in results}:
        return wanted
    return results[0].kernel if results else None


def _with_speedups(results: list[KernelResult], reference: str | None) -> list[KernelResult]:
    """Speedup against `reference` (see _reference_kernel), same build, mode and threads; on
    net time, or on gross time where any row's net does not hold (measure/validity.basis)."""
    basis = validity.basis([r.net_valid for r in results])

    def time_s(r: KernelResult) -> float | None:
        if basis == validity.GROSS:
            return r.median_s
        return r.net_s if r.net_above_zero else None  # a ratio to noise is no speedup, saved or shown

    reference_row = {(r.key, r.side): r for r in results if r.kernel == reference}

    def reference_of(r: KernelResult) -> tuple[RowKey, str | None]:
        return (r.key.with_kernel(reference), r.side)

    def end_to_end(r: KernelResult) -> bool:
        """A broadphase row (timed end to end, nothing subtracted) against a kernel's: the kernel's
        net would leave out the loop a broadphase replaces, so both are taken end to end."""
        return r.broadphase is not None and reference_row[reference_of(r)].broadphase is None

    def speedup(r: KernelResult) -> float | None:
        theirs = reference_row[reference_of(r)]
        theirs_s = theirs.median_s if end_to_end(r) else time_s(theirs)
        return theirs_s / time_s(r) if time_s(r) and theirs_s else None

    return [
        replace(
            r,
            speedup=speedup(r),
            speedup_basis=validity.GROSS if end_to_end(r) else basis,
            speedup_reference=reference,
        )
        if reference_of(r) in reference_row
        else r
        for r in results
    ]


def _environment(sessions: list[BuildSession], clock_mhz: list[float], clock: BuildSession | None = None) -> dict:
    machine = environment.machine_fingerprint()
    measured = [mhz for mhz in clock_mhz if mhz == mhz]
    machine["cpu"]["measured_mhz"] = round(max(measured), 1) if measured else None  # the fastest: see _cycles
    machine["cpu"]["measured_mhz_per_round"] = [round(mhz, 1) for mhz in measured]
    if clock is not None:  # which library's sb_dependent_multiplies the clock was read from
        machine["cpu"]["clock_build"] = {"cc": clock.config.cc, "flags": list(clock.config.flags)}
    compilers = {s.config.cc: environment.compiler_fingerprint(s.config.cc) for s in sessions}
    builds = []
    for s in sessions:
        if isinstance(s, FailedBuild):  # its rows say why in a line; here is all the compiler said
            builds.append(s.environment_entry())
            continue
        build_entry = {
            "cc": s.config.cc,
            "flags": list(s.config.flags),
            "library": s.library.name,
            "fp_environment": s.info.fp_environment,
        }
        if s.load_failure:  # its --source kernels' rows failed with it; the built-in ones ran without them
            build_entry["load_failure"] = s.load_failure
        if s.fork_server_replaced():  # a kernel changed the fork server its workers came from
            build_entry["fork_server_replaced"] = s.fork_server_replaced()
        printed = s.printed_note(BUILD_OUTPUT)
        if printed:  # library constructors or imported modules writing while the worker started
            build_entry["printed"] = printed
        said = compiler_warnings(s.library)
        if said:
            build_entry["compiler_warnings"] = said
        builds.append(build_entry)
    counters = next((s.info.counters for s in sessions if not isinstance(s, FailedBuild)), None)
    return {"machine": machine, "compilers": compilers, "builds": builds, "counters": counters}
