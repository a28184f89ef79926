"""`run`: build each flag set, time the selected kernels in workers, assemble results."""

from __future__ import annotations

import tempfile
from collections.abc import Callable
from dataclasses import dataclass, field, replace
from pathlib import Path

from . import SectorbenchError, environment, scenes
from .build import BuildConfig, build
from .kernels import Kernel, select
from .results import KernelResult, RunResult
from .stats import summarize
from .timing import MODES, Series, TimingConfig, net_time, run_rounds
from .worker import BuildSession, WorkerCrashed, save_scene


@dataclass(frozen=True)
class RunConfig:
    """Everything a run depends on; the CLI's options fill it."""

    scene: str = "uniform"  # the article's ranges; see the families' scenes for the others
    sectors: int = 1000  # N, the article's
    points: int = 100_000  # M, the article's
    seed: int = 0
    kernels: tuple[str, ...] = ()  # empty: the family's default kernels
    builds: tuple[BuildConfig, ...] = (BuildConfig(),)
    modes: tuple[str, ...] = ("inline",)  # inline: as production code; call: the article's method
    timing: TimingConfig = field(default_factory=TimingConfig)
    disable_isa: tuple[str, ...] = ()
    reference: str = "naive"  # speedups are against this kernel's net time (else the first kernel's)

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
            "disable_isa": list(self.disable_isa),
        }


#: progress(what, total): one step done; `total`, when given, is the number of steps to come.
Progress = Callable[..., None]


def run(config: RunConfig, progress: Progress = lambda what, total=None: None) -> RunResult:
    """Measure every selected kernel of every build; never raises for a crashing kernel."""
    for mode in config.modes:
        if mode not in MODES:
            raise SectorbenchError(f"unknown mode {mode!r}; choose from {', '.join(MODES)}")
    if config.timing.repeat < 1:
        raise SectorbenchError("--repeat must be at least 1")
    scene = scenes.generate(config.scene, config.sectors, config.points, config.seed)
    with tempfile.TemporaryDirectory(prefix="sectorbench-") as scratch:
        scene_path = save_scene(scene, Path(scratch))
        sessions = []
        try:
            for build_config in config.builds:
                progress(f"building {build_config.label}")
                sessions.append(BuildSession(build_config, build(build_config), scene_path, config.disable_isa))
            return _measure(config, scene, sessions, progress)
        finally:
            for session in sessions:
                session.close()


def _measure(config: RunConfig, scene: scenes.Scene, sessions: list[BuildSession], progress: Progress) -> RunResult:
    plan = []  # (session, kernel, mode)
    series: dict[tuple, Series] = {}
    for session in sessions:
        for kernel in select(session.kernels, list(config.kernels), scene.family):
            for mode in config.modes:
                plan.append((session, kernel, mode))
                if kernel.runnable:
                    # The NoOperation twin of the first kernel of each loop shape stands for all of them.
                    series.setdefault(
                        (session.config, kernel.overhead_key, mode),
                        _series(session, kernel, mode, config.timing, noop=True),
                    )
                    series.setdefault(
                        (session.config, kernel.name, mode), _series(session, kernel, mode, config.timing, noop=False)
                    )

    def restart_crashed_worker(failed: Series, exc: Exception) -> None:
        """The failed series is marked by run_rounds; its build's other kernels need a live worker."""
        if isinstance(exc, WorkerCrashed):
            next(s for s in sessions if s.config == failed.key[0]).restart()

    progress(f"measuring {len(series)} series", len(series) * (config.timing.repeat + 1))
    run_rounds(list(series.values()), config.timing, progress, restart_crashed_worker)
    results = [_result(scene, session, kernel, mode, series) for session, kernel, mode in plan]
    results = _with_speedups(results, config.reference)
    env = _environment(sessions)
    return RunResult(scene=scene.describe(), env=env, config=config.to_dict(), results=results)


def _series(session: BuildSession, kernel: Kernel, mode: str, timing: TimingConfig, noop: bool) -> Series:
    def calibrate() -> int:
        return session.worker.request(
            "calibrate", kernel=kernel.name, mode=mode, noop=noop, min_time_s=timing.min_sample_s
        )["calls"]

    def take(calls: int) -> tuple[float, int]:
        reply = session.worker.request("sample", kernel=kernel.name, mode=mode, noop=noop, calls=calls)
        return reply["seconds"], reply["hits"]

    name = kernel.overhead_key if noop else kernel.name
    return Series(key=(session.config, name, mode), calibrate=calibrate, take=take)


def _result(scene, session: BuildSession, kernel: Kernel, mode: str, series: dict) -> KernelResult:
    base = dict(
        kernel=kernel.name,
        family=kernel.family,
        flags=" ".join(session.config.flags),
        cc=session.config.cc,
        mode=mode,
        tests=scene.tests,
        overhead_kernel=kernel.overhead_key,
    )
    if not kernel.runnable:
        return KernelResult(status="skipped", reason=kernel.skip_reason, **base)
    mine = series[(session.config, kernel.name, mode)]
    overhead = series[(session.config, kernel.overhead_key, mode)]
    if mine.failure is not None:
        return KernelResult(status="crashed", reason=mine.failure, **base)
    warnings = []
    if len(set(mine.hits)) > 1:
        warnings.append(f"hit count changed between samples: {sorted(set(mine.hits))}")
    hits = mine.hits[0]
    summary = summarize(mine.samples)
    timing = dict(
        calls=mine.calls, samples_s=mine.samples, median_s=summary.median, min_s=summary.min, spread=summary.spread
    )
    if overhead.failure is not None or not overhead.samples:
        warnings.append(f"NoOperation loop {kernel.overhead_key} failed: {overhead.failure}")
        return KernelResult(status="ok", hits=hits, hit_rate=hits / scene.tests, warnings=warnings, **timing, **base)
    net = net_time(mine.samples, overhead.samples)
    return KernelResult(
        status="ok",
        hits=hits,
        hit_rate=hits / scene.tests,
        **timing,
        overhead_samples_s=overhead.samples,
        overhead_s=summarize(overhead.samples).median,
        net_samples_s=list(net.net_samples_s),
        net_s=net.net_s,
        ns_per_test=net.net_s / scene.tests * 1e9,
        warnings=warnings + list(net.warnings),
        **base,
    )


def _with_speedups(results: list[KernelResult], reference: str) -> list[KernelResult]:
    """Speedup against `reference`, or against the first kernel when it was not measured."""
    if results and reference not in {r.kernel for r in results}:
        reference = results[0].kernel
    reference_net = {(r.cc, r.flags, r.mode): r.net_s for r in results if r.kernel == reference and r.net_s}
    return [
        replace(r, speedup=reference_net[(r.cc, r.flags, r.mode)] / r.net_s)
        if r.net_s and (r.cc, r.flags, r.mode) in reference_net
        else r
        for r in results
    ]


def _environment(sessions: list[BuildSession]) -> dict:
    machine = environment.machine_fingerprint()
    try:
        machine["cpu"]["measured_mhz"] = round(sessions[0].worker.request("clock")["mhz"], 1)
    except (SectorbenchError, IndexError, KeyError):
        pass
    compilers = {s.config.cc: environment.compiler_fingerprint(s.config.cc) for s in sessions}
    builds = [
        {
            "cc": s.config.cc,
            "flags": list(s.config.flags),
            "library": s.library.name,
            "fp_environment": s.fp_environment,
        }
        for s in sessions
    ]
    return {"machine": machine, "compilers": compilers, "builds": builds}
