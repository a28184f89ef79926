"""Every request to a worker has a deadline: the one home of how long a kernel may take.

A request whose time is known from calibration (a sample) gets a generous multiple of it;
one whose time is not (a calibration, an evaluation, loading a scene) gets the floor plus
a pass at a pessimistic rate.  Never less than the floor: a loaded machine or a page-faulting
first pass is not a hang.  `--kernel-timeout SECONDS` sets the floor.  A run's
`--max-minutes` caps every deadline too (Budget), so a hang never outlasts the run's limit.
On expiry the worker is killed and the row is `timed-out` (worker.WorkerTimedOut).
"""

from __future__ import annotations

import math
import time
from dataclasses import dataclass

from ..errors import SectorbenchError

#: The floor of every deadline (--kernel-timeout): a minute is far beyond any default pass here
#: (the slowest default kernel takes ~0.2 s a pass at N=1000, M=100000), short enough to wait.
DEFAULT_KERNEL_TIMEOUT_S = 60.0
#: A sample may take this many times its calibrated duration before it is taken for a hang
#: (a shared machine slows a sample by 2-3x at worst here; 20x is no noise).
SAMPLE_MARGIN = 20.0
#: An uncalibrated pass is given this per test: 250x the typical 4 ns (a -O0 scalar kernel
#: or a numpy peer is 10-50 ns), so only a hang exceeds it.
SLOW_NS_PER_TEST = 1000.0
#: Calibration grows the call count up to 10x a step: about this many passes, or min_time_s as many times.
CALIBRATION_PASSES = 4
#: Starting a worker (importing numpy and cffi, loading the library): its own allowance, since
#: no kernel runs then (only library constructors).
STARTUP_S = 120.0
#: The most copies of a point verify counts a case row over (two vectors of 16 lanes and a tail).
ROW_COUNT_COPIES_MAX = 33
#: The most copies of its shape: a whole block of the widest a row may declare (families/base.py's
#: MAX_BLOCK, 8, not imported: `import sectorbench` reaches this module and must not load numpy)
#: and one left over; registry.c's SB_COUNT_ROWS_SHAPES_MAX is the same number.
ROW_COUNT_SHAPES_MAX = 9
#: Listing the kernels of a library that holds none of the user's code (its constructors are
#: ours: ~1 s here) is allowed this long past the run's --max-minutes.
LISTING_PAST_BUDGET_S = 30.0
#: A wait for a worker is cut into waits this long (AwakeClock): time this process was not
#: running is then told apart, and at most one such wait of time spent waiting goes uncounted.
WAIT_SLICE_S = 1.0
#: A wait that ends this much later than it was to end means this process was not running
#: meanwhile (AwakeClock): a load that delays its wake-up by a second is already no load.
LATE_WAKE_S = 1.0


@dataclass(frozen=True)
class Deadlines:
    kernel_timeout_s: float = DEFAULT_KERNEL_TIMEOUT_S

    def __post_init__(self):
        value = self.kernel_timeout_s
        if isinstance(value, bool) or not isinstance(value, (int, float)) or not (math.isfinite(value) and value > 0):
            raise SectorbenchError(f"--kernel-timeout must be a number of seconds above 0 (got {value!r})")

    def pass_s(self, tests: int, passes: float = 1) -> float:
        """A request of `passes` uncalibrated passes over `tests` tests."""
        return self.kernel_timeout_s + passes * tests * SLOW_NS_PER_TEST * 1e-9

    def calibration_s(self, tests: int, min_time_s: float) -> float:
        return self.pass_s(tests, CALIBRATION_PASSES) + CALIBRATION_PASSES * min_time_s

    def sample_s(self, expected_s: float) -> float:
        return max(self.kernel_timeout_s, SAMPLE_MARGIN * expected_s)

    def row_counts_s(self, tests: int) -> float:
        """verify's count loops over each case row (loops.CRowLoop.row_counts): two calls a row,
        each over up to ROW_COUNT_SHAPES_MAX copies of its shape and ROW_COUNT_COPIES_MAX of its
        point."""
        return self.pass_s(tests, 2 * ROW_COUNT_SHAPES_MAX * ROW_COUNT_COPIES_MAX)

    def counting_s(self, tests: int) -> float:
        """One loop of `tests` tests under valgrind (measure/instructions.py): an uncalibrated
        pass, whose pessimistic rate (SLOW_NS_PER_TEST) is 10-50x callgrind's slowdown of a
        typical test, so only a loop that does not end (a spin that valgrind's one-thread-at-a-
        time scheduling never lets finish, code that hangs only there) exceeds it."""
        return self.pass_s(tests)


@dataclass(frozen=True)
class Budget:
    """The time a whole run may take (its --max-minutes), as a monotonic end."""

    end: float = math.inf
    minutes: float | None = None

    @classmethod
    def minutes_from_now(cls, minutes: float | None) -> Budget:
        if minutes is None:
            return cls()
        return cls(time.monotonic() + minutes * 60, minutes)

    def left_s(self) -> float:
        return self.end - time.monotonic()


class AwakeClock:
    """Seconds that passed while this process ran, told apart from those it did not: stopped
    (SIGSTOP, Ctrl-Z) or frozen with its workers (a cgroup freezer: `docker pause`, a CI
    runner's job suspended).  A deadline counts only the first: a worker frozen with the run
    cannot answer, and when both were thawed the run's wait had long expired, so a healthy
    kernel was killed and its row said it gave no answer within --kernel-timeout.

    tick(expected_s) after each wait that was to last at most expected_s: a wait that ended
    more than LATE_WAKE_S later than that was a stop, and all of it goes to stopped_s."""

    def __init__(self):
        self.last = time.monotonic()
        self.awake_s = 0.0
        self.stopped_s = 0.0

    def tick(self, expected_s: float) -> None:
        now = time.monotonic()
        took, self.last = now - self.last, now
        if took > expected_s + LATE_WAKE_S:
            self.stopped_s += took
        else:
            self.awake_s += took

    def stopped_note(self) -> str:
        """What a deadline's reason adds when the run was stopped while it waited ('' if not)."""
        if not self.stopped_s:
            return ""
        return f"; the run itself was stopped or frozen for {self.stopped_s:.3g} s meanwhile, not counted"


#: The defaults, as one value each (the worker's and the session's default arguments).
DEFAULT_DEADLINES = Deadlines()
NO_BUDGET = Budget()
