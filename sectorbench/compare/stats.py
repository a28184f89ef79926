"""Statistics for benchmark timings.

Samples are seconds per pass, one per round. Timings on a shared VM are
noisy in a particular way: noise is roughly multiplicative, and interference
only ever adds time (upward outliers). Hence everything here is rank based
(robust to outliers, no normality assumption) and ratios are handled on
log(times), where a multiplicative slowdown becomes a location shift.

Only numpy and the standard library are used; all functions are pure and
deterministic.  One module although it is near 500 lines: each piece builds on the
one before (U's null distribution -> the test -> its intervals -> compare), and they
share the small validation helpers.
"""

from __future__ import annotations

import functools
import math
import statistics
from collections.abc import Sequence
from dataclasses import dataclass

import numpy as np

__all__ = [
    "Summary",
    "summarize",
    "mann_whitney_u",
    "Interval",
    "ratio_interval",
    "paired_ratio_interval",
    "paired_ratio_if_defined",
    "Comparison",
    "compare",
    "normalized",
    "drop_upper_outliers",
    "median_interval",
    "min_p_value",
    "can_reach_alpha",
    "rounds_for_alpha",
]

_ALTERNATIVES = ("greater", "less", "two-sided")
_METHODS = ("auto", "exact", "asymptotic")

# Exact null distribution of U is computed while n*m stays below this; the
# cost grows like min(n, m) * n * m and the normal approximation is already
# very good at that size (covers both samples <= 50).
_EXACT_MAX_PAIRS = 2500

_NORMAL = statistics.NormalDist()

# Hampel identifier, upper side only: a sample more than _OUTLIER_K robust
# standard deviations (1.4826 * MAD, on log times) above its set's median is
# interference. 3 is the textbook Hampel constant. The scale floor (1 % in
# log terms) keeps very stable or coarsely timed kernels, whose MAD can be ~0,
# from losing healthy samples over sub-3 % deviations that no regression
# threshold cares about.
_OUTLIER_K = 3.0
_OUTLIER_MIN_SCALE = 0.01
_MAD_TO_SIGMA = 1.4826  # makes the MAD a consistent sigma for normal data


def _as_positive_array(samples: Sequence[float], name: str = "samples") -> np.ndarray:
    arr = np.asarray(samples, dtype=float).ravel()
    if arr.size == 0:
        raise ValueError(f"{name} is empty")
    if not np.all(np.isfinite(arr)) or np.any(arr <= 0):
        # Timings must be positive: we take logs and ratios of them.
        raise ValueError(f"{name} must be finite and > 0")
    return arr


# --------------------------------------------------------------------------
# Descriptive summary
# --------------------------------------------------------------------------


@dataclass(frozen=True)
class Summary:
    """Descriptive statistics of one sample set (times in seconds)."""

    n: int
    median: float
    min: float
    max: float
    mean: float
    stdev: float  # sample standard deviation (ddof=1); 0 when n < 2
    iqr: float  # Q3 - Q1, linear interpolation between order statistics
    spread: float  # (max - min) / median: relative range
    mad: float  # median absolute deviation from the median, unscaled


def summarize(samples: Sequence[float]) -> Summary:
    """Summarize a sample set."""
    x = _as_positive_array(samples)
    median = float(np.median(x))
    q1, q3 = np.percentile(x, [25, 75])
    return Summary(
        n=int(x.size),
        median=median,
        min=float(x.min()),
        max=float(x.max()),
        mean=float(x.mean()),
        stdev=float(x.std(ddof=1)) if x.size >= 2 else 0.0,
        iqr=float(q3 - q1),
        spread=float((x.max() - x.min()) / median),
        mad=float(np.median(np.abs(x - median))),
    )


# --------------------------------------------------------------------------
# Mann-Whitney U
# --------------------------------------------------------------------------


@functools.lru_cache(maxsize=128)
def _u_null_counts(n: int, m: int) -> tuple[int, ...]:
    """Number of rank arrangements giving U = 0..n*m (no ties).

    These are the coefficients of the Gaussian binomial [n+m choose n]_q,
    built as prod_{k=1..n} (1 - q^(m+k)) / (1 - q^k). Python ints keep the
    counts exact however large C(n+m, n) gets.
    """
    n, m = min(n, m), max(n, m)  # U's distribution is symmetric in (n, m)
    size = n * m + 1
    c = [0] * size
    c[0] = 1
    for k in range(1, n + 1):
        step = m + k
        for i in range(size - 1, step - 1, -1):  # multiply by (1 - q^step)
            c[i] -= c[i - step]
        for i in range(k, size):  # divide by (1 - q^k): strided running sum
            c[i] += c[i - k]
    return tuple(c)


@functools.lru_cache(maxsize=128)
def _u_null_cdf(n: int, m: int) -> tuple[float, ...]:
    """P(U <= u) for u = 0..n*m under the null hypothesis, no ties."""
    counts = _u_null_counts(n, m)
    total = math.comb(n + m, n)
    running = 0
    cdf = []
    for count in counts:
        running += count
        cdf.append(running / total)
    return tuple(cdf)


def _u_exact_sf(u: float, n: int, m: int) -> float:
    """P(U >= u) under the null hypothesis, no ties."""
    k = math.ceil(u)
    if k <= 0:
        return 1.0
    if k > n * m:
        return 0.0
    return 1.0 - _u_null_cdf(n, m)[k - 1]


def _u_sigma(n: int, m: int, pooled: np.ndarray) -> float:
    """Null standard deviation of U, corrected for ties."""
    total = n + m
    _, t = np.unique(pooled, return_counts=True)
    tie_term = float(np.sum(t**3 - t)) / (total * (total - 1))
    return math.sqrt(n * m / 12.0 * ((total + 1) - tie_term))


def mann_whitney_u(
    x: Sequence[float],
    y: Sequence[float],
    alternative: str = "greater",
    method: str = "auto",
) -> tuple[float, float]:
    """Mann-Whitney U test; returns (U, p_value).

    U counts pairs (x_i, y_j) with x_i > y_j, ties counting 1/2 (scipy's
    U1). "greater" tests whether x tends to be larger than y, "less" whether
    smaller. method="auto" uses the exact null distribution when there are
    no ties and n*m <= 2500, otherwise the normal approximation with tie
    and continuity corrections; "exact"/"asymptotic" force one (exact
    ignores ties).
    """
    if alternative not in _ALTERNATIVES:
        raise ValueError(f"alternative must be one of {_ALTERNATIVES}")
    if method not in _METHODS:
        raise ValueError(f"method must be one of {_METHODS}")
    xa = np.asarray(x, dtype=float).ravel()
    ya = np.asarray(y, dtype=float).ravel()
    if xa.size == 0 or ya.size == 0:
        raise ValueError("both samples must be non-empty")
    if not (np.all(np.isfinite(xa)) and np.all(np.isfinite(ya))):
        raise ValueError("samples must be finite")
    n, m = xa.size, ya.size

    # Direct pair count: O(n*m), trivial at benchmark sizes, obviously right.
    greater = np.count_nonzero(xa[:, None] > ya[None, :])
    equal = np.count_nonzero(xa[:, None] == ya[None, :])
    u1 = greater + 0.5 * equal

    # As scipy does: every alternative becomes an upper-tail probability,
    # using the symmetry of U's null distribution around n*m/2.
    if alternative == "greater":
        u_tail, factor = u1, 1.0
    elif alternative == "less":
        u_tail, factor = n * m - u1, 1.0
    else:
        u_tail, factor = max(u1, n * m - u1), 2.0

    pooled = np.concatenate([xa, ya])
    if method == "auto":
        has_ties = np.unique(pooled).size < pooled.size
        method = "exact" if not has_ties and n * m <= _EXACT_MAX_PAIRS else "asymptotic"

    if method == "exact":
        p = _u_exact_sf(u_tail, n, m)
    else:
        sigma = _u_sigma(n, m, pooled)
        if sigma == 0.0:  # every value tied: no evidence either way
            p = 1.0
        else:
            z = (u_tail - n * m / 2.0 - 0.5) / sigma
            p = 1.0 - _NORMAL.cdf(z)
    return float(u1), float(min(1.0, p * factor))


def min_p_value(n: int, m: int) -> float:
    """The smallest one-sided Mann-Whitney p that n vs m samples can give: 1 / C(n + m, n).

    It is reached when every sample of one set lies above every sample of the other; no
    data, however clear, gives less.  (asv's _stats guards its test the same way.)
    """
    # int / int: past about 515 rounds a side C(n + m, n) is beyond a float, and 1.0 / it raised
    # OverflowError (run --against --repeat 600 was an internal error); the quotient is then 0.0
    return 1 / math.comb(n + m, n)


def can_reach_alpha(n: int, m: int, alpha: float) -> bool:
    """Whether n vs m samples can give p < alpha (compare's tests are strict)."""
    return n > 0 and m > 0 and min_p_value(n, m) < alpha


#: rounds_for_alpha's search stops here: --repeat's own upper limit.
_MAX_ROUNDS = 1000


def rounds_for_alpha(alpha: float, other: int | None = None) -> int:
    """The fewest rounds m for which m samples against `other` (default: m too) can reach alpha."""
    for m in range(1, _MAX_ROUNDS + 1):
        if can_reach_alpha(m if other is None else other, m, alpha):
            return m
    return _MAX_ROUNDS


# --------------------------------------------------------------------------
# Ratio intervals
# --------------------------------------------------------------------------


@dataclass(frozen=True)
class Interval:
    """A ratio estimate with a distribution-free confidence interval.

    achieved_confidence is the coverage the chosen order statistics actually
    give (exact where the exact distribution is used). It is >= confidence
    unless the samples are too small to reach it, in which case the interval
    is the widest possible (min..max) and achieved_confidence < confidence.
    """

    estimate: float
    low: float
    high: float
    confidence: float
    achieved_confidence: float


def check_confidence(confidence: float) -> float:
    """The two-sided tail of a confidence level; ValueError unless it is in (0, 1)."""
    if not 0.0 < confidence < 1.0:
        raise ValueError("confidence must be in (0, 1)")
    return (1.0 - confidence) / 2.0  # two-sided: split evenly between tails


def _mwu_order_index(n: int, m: int, tail: float) -> tuple[int, float]:
    """Order-statistic index k (1-based) for the Moses interval.

    With the n*m pairwise differences sorted, d_(k) and d_(nm+1-k) each miss
    the true shift with probability P(U <= k-1). Returns the largest k with
    P(U <= k-1) <= tail, and that probability. k is at least 1 (the widest
    interval), in which case the returned tail may exceed the request.
    """
    if n * m <= _EXACT_MAX_PAIRS:
        cdf = _u_null_cdf(n, m)
        k = 1
        while k < len(cdf) and cdf[k] <= tail:
            k += 1
        return k, cdf[k - 1]
    mu = n * m / 2.0
    sigma = math.sqrt(n * m * (n + m + 1) / 12.0)
    # P(U <= k-1) ~ Phi((k - 1 + 0.5 - mu) / sigma), continuity-corrected.
    k = max(1, math.floor(mu + 0.5 + _NORMAL.inv_cdf(tail) * sigma))
    return k, _NORMAL.cdf((k - 0.5 - mu) / sigma)


def ratio_interval(base: Sequence[float], current: Sequence[float], confidence: float = 0.99) -> Interval:
    """current/base ratio of two independent sample sets.

    Estimate: Hodges-Lehmann shift of log(times), i.e. the median of all
    pairwise log(c_j) - log(b_i), exponentiated. Interval: the matching
    distribution-free (Moses) interval from Mann-Whitney's null distribution.
    Working on logs makes swapping base and current give the reciprocal.
    """
    tail = check_confidence(confidence)
    lb = np.log(_as_positive_array(base, "base"))
    lc = np.log(_as_positive_array(current, "current"))
    diffs = np.sort((lc[None, :] - lb[:, None]).ravel())
    k, miss = _mwu_order_index(lb.size, lc.size, tail)
    return Interval(
        estimate=float(np.exp(np.median(diffs))),
        low=float(np.exp(diffs[k - 1])),
        high=float(np.exp(diffs[diffs.size - k])),
        confidence=confidence,
        achieved_confidence=1.0 - 2.0 * miss,
    )


def _binomial_order_index(n: int, tail: float) -> tuple[int, float]:
    """Largest k >= 1 with P(Bin(n, 1/2) <= k-1) <= tail, and that probability.

    r_(k) and r_(n+1-k) each miss the median with probability P(Bin <= k-1).
    """
    total = 2**n
    k, running = 1, 1  # running = count of Bin outcomes <= k-1
    while k <= n // 2 and (running + math.comb(n, k)) / total <= tail:
        running += math.comb(n, k)
        k += 1
    return k, running / total


def paired_ratio_interval(a: Sequence[float], b: Sequence[float], confidence: float = 0.99) -> Interval:
    """a/b ratio for samples paired by round (a_i and b_i from round i).

    Estimate: median of the per-round ratios (taken on logs, so an even count
    gives the geometric mean of the middle two and swapping a and b gives the
    reciprocal). Interval: exact binomial order-statistic interval for the
    median ratio, which assumes only that rounds are independent.
    """
    tail = check_confidence(confidence)
    aa = _as_positive_array(a, "a")
    ba = _as_positive_array(b, "b")
    if aa.size != ba.size:
        raise ValueError("paired samples must have the same length")
    log_ratios = np.sort(np.log(aa) - np.log(ba))
    k, miss = _binomial_order_index(log_ratios.size, tail)
    return Interval(
        estimate=float(np.exp(np.median(log_ratios))),
        low=float(np.exp(log_ratios[k - 1])),
        high=float(np.exp(log_ratios[log_ratios.size - k])),
        confidence=confidence,
        achieved_confidence=1.0 - 2.0 * miss,
    )


def paired_ratio_if_defined(a: Sequence[float], b: Sequence[float], confidence: float = 0.95) -> Interval | None:
    """paired_ratio_interval(a, b), or None where it is undefined.

    Net times (kernel minus NoOperation) may be zero or negative in some rounds, and
    two rows may have a different number of rounds; a ratio interval needs neither.
    """
    if len(a) != len(b) or not len(a) or not all(x > 0 for x in (*a, *b)):
        return None
    return paired_ratio_interval(a, b, confidence)


def normalized(samples: Sequence[float], reference_samples: Sequence[float]) -> list[float]:
    """Per-round ratios samples[i] / reference_samples[i].

    Dividing by a reference kernel timed in the same round cancels what the
    two share: machine speed, frequency drift, and interference that hit
    the whole round. The result can be compared across machines and days.
    """
    s = _as_positive_array(samples, "samples")
    r = _as_positive_array(reference_samples, "reference_samples")
    if s.size != r.size:
        raise ValueError("samples and reference_samples must be paired by round")
    return (s / r).tolist()


# --------------------------------------------------------------------------
# Outliers and the regression decision
# --------------------------------------------------------------------------


def drop_upper_outliers(samples: Sequence[float], k: float = _OUTLIER_K) -> list[float]:
    """Samples without upward outliers (interference), in their original order.

    Only the upper side is trimmed because interference only ever adds time;
    a fast sample is real. Works on log times with median/MAD, so it is
    scale-equivariant: a uniformly slower run loses the same samples.
    Not for round-paired data (it would break the pairing); normalize first.
    """
    x = _as_positive_array(samples)
    logs = np.log(x)
    center = np.median(logs)
    mad = float(np.median(np.abs(logs - center)))
    scale = max(_MAD_TO_SIGMA * mad, _OUTLIER_MIN_SCALE)
    return x[logs <= center + k * scale].tolist()


@dataclass(frozen=True)
class Comparison:
    """Outcome of comparing a current run with a baseline.

    ratio/low/high describe current/base time: low and high are each a
    one-sided (1 - alpha) confidence bound (together a 1 - 2*alpha interval),
    the same error rate as the one-sided tests behind p_slower and p_faster.
    All of them are computed after dropping upward outliers, if enabled.
    """

    ratio: float
    low: float
    high: float
    p_slower: float  # one-sided Mann-Whitney p that current is slower
    p_faster: float  # one-sided Mann-Whitney p that current is faster
    verdict: str  # "regression" | "improvement" | "unchanged" | "inconclusive"
    base_dropped: int  # upward outliers removed before the analysis
    current_dropped: int


def compare(
    base: Sequence[float],
    current: Sequence[float],
    alpha: float = 0.01,
    threshold: float = 0.10,
    drop_outliers: bool = True,
) -> Comparison:
    """Decide whether current (times) regressed relative to base.

    regression:   p_slower < alpha and low > 1 + threshold
    improvement:  p_faster < alpha and high < 1
    unchanged:    the whole interval lies within [1/(1+threshold), 1+threshold]
                  at its full confidence: any change is below the threshold
    inconclusive: anything else (too few or too noisy samples to tell)

    A regression needs the threshold as well as the test, because it fails a
    build: a real but small slowdown (code alignment, a day-to-day VM drift) must
    not. An improvement fails nothing, so the same test is all it needs: a 7 %
    speed-up at p < 0.0001 is an improvement. (It used to need high < 1/(1 +
    threshold), the regression bound mirrored, which left every significant
    speed-up smaller than the threshold -- or whose interval reached into it --
    "inconclusive".) Swapping base and current turns a regression into an
    improvement; the converse holds only beyond the threshold. Upward outliers
    are dropped from each set first (see drop_upper_outliers), unless that
    leaves too few samples to reach alpha where all of them could: one or two
    interference spikes among ten samples otherwise widen the rank interval
    enough to hide a 20 % slowdown. The price: trimming makes the test
    slightly liberal (about 1-2 % false positives at alpha = 1 % on smooth
    long-tailed noise), which the threshold requirement more than absorbs.
    """
    if not 0.0 < alpha < 0.5:
        raise ValueError("alpha must be in (0, 0.5)")
    if threshold < 0:
        raise ValueError("threshold must be >= 0")
    b = _as_positive_array(base, "base")
    c = _as_positive_array(current, "current")
    b_kept, c_kept = b.tolist(), c.tolist()
    if drop_outliers:
        b_trimmed, c_trimmed = drop_upper_outliers(b), drop_upper_outliers(c)
        # Never below what can reach alpha: 5 rounds against 5 can (p >= 1/252), 3 against 5
        # cannot (1/56), and two rounds dropped from a baseline once passed an 8x slowdown.
        if can_reach_alpha(len(b_trimmed), len(c_trimmed), alpha) or not can_reach_alpha(b.size, c.size, alpha):
            b_kept, c_kept = b_trimmed, c_trimmed

    # A two-sided 1 - 2*alpha interval has each bound at one-sided 1 - alpha,
    # matching the one-sided tests: low > 1 goes with p_slower <= alpha.
    interval = ratio_interval(b_kept, c_kept, confidence=1.0 - 2.0 * alpha)
    _, p_slower = mann_whitney_u(c_kept, b_kept, alternative="greater")
    _, p_faster = mann_whitney_u(c_kept, b_kept, alternative="less")

    upper = 1.0 + threshold
    lower = 1.0 / upper
    # Tolerance: achieved and requested confidence come from different
    # floating-point paths and may differ in the last bits when equal.
    reached = interval.achieved_confidence >= interval.confidence - 1e-9
    if p_slower < alpha and interval.low > upper:
        verdict = "regression"
    elif p_faster < alpha and interval.high < 1.0:
        verdict = "improvement"
    elif reached and lower <= interval.low and interval.high <= upper:
        verdict = "unchanged"
    else:
        verdict = "inconclusive"

    return Comparison(
        ratio=interval.estimate,
        low=interval.low,
        high=interval.high,
        p_slower=p_slower,
        p_faster=p_faster,
        verdict=verdict,
        base_dropped=int(b.size - len(b_kept)),
        current_dropped=int(c.size - len(c_kept)),
    )


def median_interval(samples: Sequence[float], confidence: float = 0.95) -> Interval:
    """Median of `samples` with its distribution-free confidence interval.

    The interval is [x_(k), x_(n+1-k)] of the sorted samples, with k chosen by
    the binomial rule that stats.paired_ratio_interval uses (each bound misses
    the true median with probability P(Bin(n, 1/2) <= k-1) <= (1-confidence)/2),
    assuming only independent rounds. Unlike paired_ratio_interval it works on
    the raw values, so it accepts the zero or negative net samples a kernel
    barely slower than its NoOperation loop produces. For positive samples it
    equals paired_ratio_interval(samples, [1.0] * n). With too few samples for
    the requested confidence (n < 6 at 95 %) it is min..max and
    achieved_confidence says what that covers.
    """
    tail = check_confidence(confidence)
    x = np.sort(np.asarray(samples, dtype=float).ravel())
    if x.size == 0:
        raise ValueError("samples is empty")
    if not np.all(np.isfinite(x)):
        raise ValueError("samples must be finite")
    k, miss = _binomial_order_index(x.size, tail)
    return Interval(
        estimate=float(np.median(x)),
        low=float(x[k - 1]),
        high=float(x[x.size - k]),
        confidence=confidence,
        achieved_confidence=1.0 - 2.0 * miss,
    )
