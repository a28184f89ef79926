"""How samples are taken and what is derived from them.

Rules (after pyperf and google/benchmark): calibrate the number of calls so one
sample lasts at least `min_sample_s`; calibration doubles as the warm-up; take
`repeat` rounds in which every series (each build x kernel x mode, NoOperation
included) gives one sample, alternating the order each round so drift hits all
alike; keep every raw sample.  Net time is paired by round: net_i = kernel_i -
NoOperation_i, and the reported net is their median.
"""

from __future__ import annotations

import math
import statistics
from collections.abc import Callable, Hashable, Sequence
from dataclasses import dataclass, field

from ..compare.stats import median_interval
from ..errors import SectorbenchError
from ..model.results import NET_NOT_ABOVE_ZERO_NOTES
from .messages import LoopExtras, Timed

#: Each setting's one home, with its default and why.
DEFAULT_REPEAT = 5  # rounds: 5 gives a median and, with MWU, p = 1/252 at best
DEFAULT_MIN_SAMPLE_S = 0.01  # >= 10 ms per sample dwarfs the timer and the Python call
MAX_REPEAT = 1000  # beyond this the drift of the machine, not the sample count, limits a result
MAX_MIN_SAMPLE_S = 10.0  # a sample longer than 10 s only adds drift; take more rounds instead
MODES = ("inline", "call")

#: The confidence of the interval that decides "net time not clearly above 0" (timing.net_time):
#: the one the comparisons use; with fewer than 6 rounds it is the rounds' min..max.
NET_ABOVE_ZERO_CONFIDENCE = 0.95
#: Calibration grows the call count until a sample lasts min_sample_s (x2 to x10 a step,
#: aiming at 1.2 x): it costs about two samples' worth, or one pass when a pass is longer.
CALIBRATION_SAMPLES = 2.0


@dataclass(frozen=True)
class TimingConfig:
    repeat: int = DEFAULT_REPEAT
    min_sample_s: float = DEFAULT_MIN_SAMPLE_S

    def __post_init__(self):
        if isinstance(self.repeat, bool) or not isinstance(self.repeat, int) or not 1 <= self.repeat <= MAX_REPEAT:
            raise SectorbenchError(f"--repeat must be an integer from 1 to {MAX_REPEAT} (got {self.repeat!r})")
        seconds = self.min_sample_s
        if (
            isinstance(seconds, bool)
            or not isinstance(seconds, (int, float))
            or not math.isfinite(seconds)
            or not 0 < seconds <= MAX_MIN_SAMPLE_S
        ):
            raise SectorbenchError(
                f"--min-time must be a number of seconds above 0 and at most {MAX_MIN_SAMPLE_S:g} (got {seconds!r})"
            )


def sample_s(timing: TimingConfig, pass_s: float) -> float:
    """How long one calibrated sample lasts when one pass takes pass_s."""
    return max(1.2 * timing.min_sample_s, pass_s)


def estimate_s(series: int, tests: int, timing: TimingConfig, ns_per_test: float) -> float:
    """Seconds to calibrate `series` series over `tests` tests a pass and take their rounds."""
    pass_s = tests * ns_per_test * 1e-9
    calibration = max(CALIBRATION_SAMPLES * timing.min_sample_s, pass_s)
    return series * (calibration + timing.repeat * sample_s(timing, pass_s))


def duration(seconds: float) -> str:
    """A duration as a person reads it: 850 ms, 42 s, 3.5 min, 2.1 h, 3.0 days."""
    if seconds < 1:
        return f"{seconds * 1e3:.0f} ms"
    if seconds < 90:
        return f"{seconds:.0f} s"
    if seconds < 90 * 60:
        return f"{seconds / 60:.1f} min"
    if seconds < 48 * 3600:
        return f"{seconds / 3600:.1f} h"
    return f"{seconds / 86400:.1f} days"


@dataclass
class Series:
    """One thing to time: `take(calls)` and `calibrate()` return the worker's typed reply
    (messages.Timed: seconds per pass, hits, cycles and instructions where hardware counters
    work, the loop's extras, an FP-environment change); calibrate's `calls` is the count."""

    key: Hashable
    label: str  # how progress names it, e.g. "basic [-O2, inline]"
    calibrate: Callable[[], Timed]
    take: Callable[[int], Timed]
    calls: int = 0
    seconds_per_call: float = 0.0
    samples: list[float] | None = None
    hits: list[int] | None = None
    #: Other counts its calls returned, calibration's included (Timed.hits_seen): hits holds each
    #: sample's last call's alone.
    hits_seen: set[int] = field(default_factory=set)
    counted: list[tuple[float, float]] | None = None  # (cycles, instructions) per pass, where counters work
    failure: str | None = None
    #: How it failed: crashed (the worker died or refused), timed-out (killed at its deadline).
    failure_status: str = "crashed"
    warm: LoopExtras | None = None  # what calibration's warm-up reported (a JIT, a prepared index)
    extras: list[LoopExtras] = field(default_factory=list)  # what each sample reported beyond time
    fp_change: str | None = None  # how the loop left the FP environment, if it changed it


def run_rounds(
    series: Sequence[Series],
    config: TimingConfig,
    on_step: Callable[[str], None] = lambda what: None,
    on_failure: Callable[[Series, Exception], None] | None = None,
    each_round: Callable[[], None] = lambda: None,
    on_calibrated: Callable[[], None] = lambda: None,
) -> None:
    """Calibrate every series, then take `config.repeat` interleaved rounds.

    on_step(what) comes before each step; on_calibrated() between calibration and the
    rounds (it may raise to stop there).  A series whose call raises is marked failed
    (on_failure decides what that means, e.g. restarting a crashed worker) and skipped
    from then on.  each_round runs before every round (the runner reads the clock there).
    """

    def attempt(s: Series, action: Callable[[], None]) -> None:
        if s.failure is not None:
            return
        try:
            action()
        except Exception as exc:
            s.failure = str(exc)
            if on_failure is None:
                raise
            on_failure(s, exc)

    for s in series:
        on_step(f"calibrating {s.label}")
        s.samples, s.hits, s.counted, s.hits_seen = [], [], [], set()

        def calibrate(s=s):
            timed = s.calibrate()
            s.calls, s.seconds_per_call, s.warm = timed.calls, timed.seconds, timed.extras
            s.hits_seen.update(timed.hits_seen, [timed.hits])
            s.fp_change = s.fp_change or timed.fp_change

        attempt(s, calibrate)
    on_calibrated()
    for round_index in range(config.repeat):
        each_round()
        order = series if round_index % 2 == 0 else list(reversed(series))
        for s in order:
            on_step(f"round {round_index + 1}/{config.repeat}: {s.label}")

            def take(s=s):
                reply = s.take(s.calls)
                s.samples.append(reply.seconds)
                s.hits.append(reply.hits)
                s.hits_seen.update(reply.hits_seen)
                s.extras.append(reply.extras)
                s.fp_change = s.fp_change or reply.fp_change
                if reply.cycles is not None:
                    s.counted.append((reply.cycles, reply.instructions))

            attempt(s, take)


@dataclass(frozen=True)
class NetTime:
    net_s: float
    net_samples_s: tuple[float, ...]
    warnings: tuple[str, ...]


CLAMPED_AT_ZERO, NOT_CLEARLY_ABOVE_ZERO = NET_NOT_ABOVE_ZERO_NOTES


def net_time(kernel_samples: Sequence[float], overhead_samples: Sequence[float]) -> NetTime:
    """Kernel time minus NoOperation time, paired by round, clamped at 0 with a warning."""
    net_samples = tuple(k - o for k, o in zip(kernel_samples, overhead_samples))
    net = statistics.median(net_samples)
    warnings = []
    if net <= 0:
        warnings.append(
            f"{CLAMPED_AT_ZERO}: the NoOperation loop is as slow as the kernel "
            "(optimised away, or a different loop shape); clamped to 0"
        )
        net = 0.0
    elif len(net_samples) >= 2:
        # Said only when the interval says so: its lower end at or below 0.  A spread of
        # samples on a loaded machine (kernel times from 5 to 70 ms against a 0.1 ms
        # NoOperation) widens the interval, but while every round's difference is positive
        # the net is above 0 whatever its spread.
        interval = median_interval(net_samples, NET_ABOVE_ZERO_CONFIDENCE)
        if interval.low <= 0:
            warnings.append(
                f"{NOT_CLEARLY_ABOVE_ZERO} (its {interval.achieved_confidence:.0%} interval over the "
                f"rounds reaches {interval.low * 1e3:.3g} ms): too small next to the loop overhead to "
                f"measure, or optimised away"
            )
    return NetTime(net, net_samples, tuple(warnings))
