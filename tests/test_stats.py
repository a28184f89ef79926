"""Tests for sectorbench.compare.stats."""

import itertools
import math
import statistics

import numpy as np
import pytest

from sectorbench.compare.stats import (
    Interval,
    Summary,
    _u_null_counts,
    compare,
    drop_upper_outliers,
    mann_whitney_u,
    normalized,
    paired_ratio_interval,
    ratio_interval,
    summarize,
)

TRIALS = 100


def noisy_times(rng, n, scale=1.0, sigma=0.025, outlier_rate=0.1, outlier_factor=1.3):
    """Realistic timings: lognormal noise plus occasional interference spikes."""
    times = scale * np.exp(rng.normal(0.0, sigma, n))
    times[rng.random(n) < outlier_rate] *= outlier_factor
    return times


def verdict_counts(ratio, n=10, trials=TRIALS, seed=0):
    """How often each verdict comes out when current is `ratio` times base."""
    rng = np.random.default_rng(seed)
    verdicts = [compare(noisy_times(rng, n), noisy_times(rng, n, scale=ratio)).verdict for _ in range(trials)]
    return {v: verdicts.count(v) for v in set(verdicts)}


# ---------------------------------------------------------------- summarize


def test_summarize_hand_case():
    s = summarize([1.0, 2.0, 3.0, 4.0, 10.0])
    assert isinstance(s, Summary)
    assert (s.n, s.median, s.min, s.max) == (5, 3.0, 1.0, 10.0)
    assert s.mean == pytest.approx(4.0)
    assert s.stdev == pytest.approx(statistics.stdev([1, 2, 3, 4, 10]))
    assert s.iqr == pytest.approx(2.0)  # Q1 = 2, Q3 = 4 (linear interpolation)
    assert s.spread == pytest.approx(9.0 / 3.0)
    assert s.mad == pytest.approx(1.0)  # |deviations| = 2, 1, 0, 1, 7


def test_summarize_single_sample():
    s = summarize([0.5])
    assert s.stdev == 0.0 and s.iqr == 0.0 and s.spread == 0.0 and s.mad == 0.0


def test_summarize_matches_statistics_quantiles():
    x = list(np.random.default_rng(1).lognormal(0, 0.1, 13))
    q1, _, q3 = statistics.quantiles(x, n=4, method="inclusive")
    assert summarize(x).iqr == pytest.approx(q3 - q1)


@pytest.mark.parametrize("bad", [[], [1.0, 0.0], [1.0, -2.0], [1.0, float("nan")]])
def test_summarize_rejects_bad_samples(bad):
    with pytest.raises(ValueError):
        summarize(bad)


# ---------------------------------------------------------------- Mann-Whitney


@pytest.mark.parametrize("n,m", [(1, 1), (1, 4), (2, 3), (3, 3), (4, 2), (4, 5)])
def test_null_counts_match_brute_force(n, m):
    # Enumerate which of the n+m ranks belong to x; U = pairs where x wins.
    counts = [0] * (n * m + 1)
    for x_ranks in itertools.combinations(range(n + m), n):
        u = sum(r - i for i, r in enumerate(x_ranks))  # y's below each x
        counts[u] += 1
    assert list(_u_null_counts(n, m)) == counts
    assert sum(counts) == math.comb(n + m, n)


def test_u_statistic_hand_case():
    # Pairs where x wins: (2 > 1.5), (3 > 1.5), (3 > 2.5).
    u, _ = mann_whitney_u([1, 2, 3], [1.5, 2.5])
    assert u == 3.0
    # A tie counts one half.
    u, _ = mann_whitney_u([1, 2], [2, 3])
    assert u == 0.5


def test_exact_minimum_p_five_vs_five():
    # Complete separation: the only arrangement as extreme, 1 / C(10, 5).
    x, y = [6, 7, 8, 9, 10], [1, 2, 3, 4, 5]
    u, p = mann_whitney_u(x, y, "greater")
    assert u == 25.0
    assert p == pytest.approx(1 / 252)
    assert mann_whitney_u(x, y, "less")[1] == pytest.approx(1.0)
    assert mann_whitney_u(x, y, "two-sided")[1] == pytest.approx(2 / 252)


def test_alternatives_are_mirror_images():
    rng = np.random.default_rng(2)
    x, y = rng.normal(0.3, 1, 8), rng.normal(0, 1, 9)
    p_greater = mann_whitney_u(x, y, "greater")[1]
    assert p_greater == pytest.approx(mann_whitney_u(y, x, "less")[1])


@pytest.mark.parametrize("alternative", ["greater", "less", "two-sided"])
@pytest.mark.parametrize("n,m,shift", [(3, 4, 1.0), (5, 5, 0.5), (10, 10, 0.8), (7, 12, -0.4), (20, 20, 0.3)])
def test_exact_p_matches_scipy(alternative, n, m, shift):
    scipy_stats = pytest.importorskip("scipy.stats")
    rng = np.random.default_rng(n * 100 + m)
    x, y = rng.normal(shift, 1, n), rng.normal(0, 1, m)
    u, p = mann_whitney_u(x, y, alternative)  # no ties, small: auto -> exact
    ref = scipy_stats.mannwhitneyu(x, y, alternative=alternative, method="exact")
    assert u == pytest.approx(ref.statistic)
    assert p == pytest.approx(ref.pvalue, rel=1e-9, abs=1e-15)


@pytest.mark.parametrize("alternative", ["greater", "less", "two-sided"])
@pytest.mark.parametrize("n,m,decimals", [(10, 12, 1), (30, 25, 2), (60, 70, 6)])
def test_asymptotic_p_matches_scipy(alternative, n, m, decimals):
    scipy_stats = pytest.importorskip("scipy.stats")
    rng = np.random.default_rng(n + m)
    # Rounding creates ties (except the large case, which is large instead).
    x = np.round(rng.normal(0.2, 1, n), decimals)
    y = np.round(rng.normal(0, 1, m), decimals)
    u, p = mann_whitney_u(x, y, alternative)  # ties or large: auto -> normal
    ref = scipy_stats.mannwhitneyu(x, y, alternative=alternative, method="asymptotic", use_continuity=True)
    assert u == pytest.approx(ref.statistic)
    assert p == pytest.approx(ref.pvalue, rel=1e-6)


def test_all_tied_is_no_evidence():
    assert mann_whitney_u([1, 1, 1], [1, 1], "greater") == (3.0, 1.0)


# ---------------------------------------------------------------- intervals


def test_ratio_interval_hand_case():
    # Pairwise ratios current/base: 2, 3, 1, 1.5 -> log-median = sqrt(2 * 1.5).
    iv = ratio_interval([1.0, 2.0], [2.0, 3.0], confidence=0.5)
    assert iv.estimate == pytest.approx(math.sqrt(3.0))


def test_ratio_interval_too_few_samples_is_widest_and_marked():
    iv = ratio_interval([1.0, 1.1], [2.0, 2.4], confidence=0.99)
    # 2 vs 2: the most extreme arrangement has probability 1/6 per tail.
    assert iv.low == pytest.approx(2.0 / 1.1)
    assert iv.high == pytest.approx(2.4 / 1.0)
    assert iv.confidence == 0.99
    assert iv.achieved_confidence == pytest.approx(1 - 2 / 6)


def test_ratio_interval_reaches_requested_confidence():
    rng = np.random.default_rng(3)
    iv = ratio_interval(noisy_times(rng, 10), noisy_times(rng, 10), confidence=0.99)
    assert iv.achieved_confidence >= 0.99
    assert iv.low <= iv.estimate <= iv.high


def test_ratio_interval_is_dual_to_the_test():
    # The one-sided bound clears 1 exactly when the one-sided test rejects.
    rng = np.random.default_rng(4)
    for shift in np.linspace(0.9, 1.2, 40):
        base, current = noisy_times(rng, 8), noisy_times(rng, 9, scale=shift)
        iv = ratio_interval(base, current, confidence=0.9)
        _, p = mann_whitney_u(current, base, "greater")
        assert (iv.low > 1.0) == (p <= 0.05)


def test_ratio_interval_swap_gives_reciprocal():
    rng = np.random.default_rng(5)
    a, b = noisy_times(rng, 7), noisy_times(rng, 9, scale=1.1)
    ab, ba = ratio_interval(a, b), ratio_interval(b, a)
    assert ab.estimate == pytest.approx(1 / ba.estimate)
    assert ab.low == pytest.approx(1 / ba.high)


def test_ratio_interval_large_samples_use_normal_approximation():
    rng = np.random.default_rng(6)
    iv = ratio_interval(noisy_times(rng, 60), noisy_times(rng, 70, scale=1.2), 0.99)
    assert iv.achieved_confidence == pytest.approx(0.99, abs=0.002)
    assert iv.low < 1.2 < iv.high


def test_ratio_interval_coverage():
    rng = np.random.default_rng(7)
    true_ratio = 1.2
    covered = 0
    for _ in range(200):
        base, current = noisy_times(rng, 10), noisy_times(rng, 10, scale=true_ratio)
        iv = ratio_interval(base, current, confidence=0.95)
        covered += iv.low <= true_ratio <= iv.high
    assert covered >= 180


def test_paired_interval_order_statistics():
    # 20 rounds at 95 %: P(Bin(20, 1/2) <= 5) = 0.0207 <= 0.025 < P(<= 6).
    ratios = np.linspace(0.9, 1.3, 20)
    iv = paired_ratio_interval(ratios, np.ones(20), confidence=0.95)
    assert iv.low == pytest.approx(ratios[5])
    assert iv.high == pytest.approx(ratios[14])
    miss = sum(math.comb(20, i) for i in range(6)) / 2**20
    assert iv.achieved_confidence == pytest.approx(1 - 2 * miss)
    assert iv.estimate == pytest.approx(math.sqrt(ratios[9] * ratios[10]))


def test_paired_interval_too_few_rounds():
    iv = paired_ratio_interval([2.0, 3.0, 2.5], [1.0, 1.0, 1.0], confidence=0.99)
    assert (iv.low, iv.high, iv.estimate) == pytest.approx((2.0, 3.0, 2.5))
    assert iv.achieved_confidence == pytest.approx(1 - 2 / 8)


def test_paired_interval_uses_the_pairing():
    # Strong drift shared by both kernels within a round: pairing cancels it.
    rng = np.random.default_rng(8)
    drift = np.exp(rng.normal(0, 0.2, 20))
    b = drift * np.exp(rng.normal(0, 0.01, 20))
    a = 1.2 * drift * np.exp(rng.normal(0, 0.01, 20))
    paired = paired_ratio_interval(a, b, confidence=0.99)
    unpaired = ratio_interval(b, a, confidence=0.99)
    assert paired.low < 1.2 < paired.high
    assert paired.high / paired.low < 1.05
    assert unpaired.high / unpaired.low > 1.2


def test_paired_interval_coverage():
    rng = np.random.default_rng(9)
    covered = 0
    for _ in range(200):
        b = noisy_times(rng, 15)
        a = noisy_times(rng, 15, scale=0.9)
        iv = paired_ratio_interval(a, b, confidence=0.95)
        assert isinstance(iv, Interval)
        covered += iv.low <= 0.9 <= iv.high
    assert covered >= 180


def test_paired_interval_needs_equal_lengths():
    with pytest.raises(ValueError):
        paired_ratio_interval([1.0, 2.0], [1.0])


def test_normalized_divides_by_reference_per_round():
    ratios = normalized([2.0, 3.0, 8.0], [1.0, 1.5, 4.0])
    assert ratios == pytest.approx([2.0, 2.0, 2.0])
    with pytest.raises(ValueError):
        normalized([1.0, 2.0], [1.0])


def test_normalized_cancels_round_interference():
    # A spike hitting a whole round disappears in the ratio to the reference.
    rng = np.random.default_rng(10)
    rounds = np.where(rng.random(12) < 0.3, 1.3, 1.0) * np.exp(rng.normal(0, 0.05, 12))
    kernel, reference = 2.0 * rounds, 0.5 * rounds
    assert normalized(kernel, reference) == pytest.approx([4.0] * 12)


# ---------------------------------------------------------------- outliers


def test_drop_upper_outliers():
    times = [1.00, 1.01, 0.99, 1.02, 0.98, 1.30, 1.00, 0.97, 1.01, 1.00]
    assert drop_upper_outliers(times) == [t for t in times if t != 1.30]
    # Fast samples are real, never dropped; nor is anything in constant data.
    assert drop_upper_outliers([1.0, 1.0, 1.0, 0.5]) == [1.0, 1.0, 1.0, 0.5]
    assert drop_upper_outliers([2.0] * 5) == [2.0] * 5


def test_drop_upper_outliers_is_scale_equivariant():
    times = noisy_times(np.random.default_rng(11), 20, outlier_rate=0.2)
    assert drop_upper_outliers(times * 1.7) == pytest.approx([t * 1.7 for t in drop_upper_outliers(times)])


# ---------------------------------------------------------------- compare


def test_identical_distributions_rarely_flagged():
    counts = verdict_counts(1.0, seed=100)
    assert counts.get("regression", 0) <= 1
    assert counts.get("improvement", 0) <= 1


def test_dropping_outliers_never_leaves_too_few_rounds_to_reach_alpha():
    """Five rounds, two of them 7 % slow (a shared runner's ordinary noise, beyond the 3 %
    cut-off): dropping them left 3 against 5, whose smallest p is 1/56 > 0.01, and an 8x
    slowdown was "inconclusive".  The rounds are kept when dropping would forbid the verdict."""
    base = [1.0, 1.0, 1.001, 1.07, 1.08]
    current = [8.0, 8.1, 8.05, 8.02, 8.2]
    assert len(drop_upper_outliers(base)) == 3
    outcome = compare(base, current)
    assert outcome.verdict == "regression" and outcome.base_dropped == 0
    ten = compare(base * 2, current * 2)  # ten rounds can spare them: dropped, still a regression
    assert ten.verdict == "regression" and ten.base_dropped == 4


def test_twenty_percent_slowdown_detected():
    assert verdict_counts(1.2, seed=101).get("regression", 0) >= 95


def test_three_percent_slowdown_never_a_regression():
    counts = verdict_counts(1.03, seed=102)
    assert counts.get("regression", 0) == 0
    # Ten samples are enough to bound a 3 % change inside +-10 % most times.
    assert counts.get("unchanged", 0) >= 50


def test_twenty_percent_speedup_is_improvement():
    assert verdict_counts(0.8, seed=103).get("improvement", 0) >= 95


def test_five_vs_five_can_still_detect():
    base = [1.00, 1.02, 0.99, 1.01, 1.03]
    result = compare(base, [1.3 * t for t in base])
    assert result.p_slower == pytest.approx(1 / 252)
    assert result.verdict == "regression"
    assert result.ratio == pytest.approx(1.3)
    # And on noisy data: no false alarms, most real slowdowns found.
    assert verdict_counts(1.0, n=5, seed=104).get("regression", 0) <= 1
    assert verdict_counts(1.3, n=5, seed=105).get("regression", 0) >= 50


def test_too_few_samples_is_inconclusive():
    result = compare([1.0, 1.01], [1.0, 1.02])
    assert result.verdict == "inconclusive"


def test_compare_fields_and_swap_symmetry():
    rng = np.random.default_rng(12)
    base, current = noisy_times(rng, 10), noisy_times(rng, 10, scale=1.25)
    forward, backward = compare(base, current), compare(current, base)
    assert forward.verdict == "regression" and backward.verdict == "improvement"
    assert forward.ratio == pytest.approx(1 / backward.ratio)
    assert forward.low == pytest.approx(1 / backward.high)
    assert forward.p_slower == pytest.approx(backward.p_faster)
    assert forward.low <= forward.ratio <= forward.high
    assert forward.p_slower < 0.01 < forward.p_faster


def test_compare_reports_dropped_outliers():
    base = [1.00, 1.01, 0.99, 1.02, 0.98, 1.30, 1.00, 0.97, 1.01, 1.00]
    result = compare(base, base)
    assert (result.base_dropped, result.current_dropped) == (1, 1)
    assert result.verdict == "unchanged"
    kept = compare(base, base, drop_outliers=False)
    assert (kept.base_dropped, kept.current_dropped) == (0, 0)


def test_compare_on_normalized_samples():
    # Runs days apart on a machine 15 % slower overall: the reference kernel
    # absorbs the drift, so only the real 20 % slowdown of the kernel shows.
    rng = np.random.default_rng(13)
    ref_then, ref_now = noisy_times(rng, 10), 1.15 * noisy_times(rng, 10)
    kernel_then = 3.0 * ref_then * noisy_times(rng, 10, sigma=0.01, outlier_rate=0)
    kernel_now = 1.2 * 3.0 * ref_now * noisy_times(rng, 10, sigma=0.01, outlier_rate=0)
    result = compare(normalized(kernel_then, ref_then), normalized(kernel_now, ref_now))
    assert result.verdict == "regression"
    assert result.ratio == pytest.approx(1.2, rel=0.03)


@pytest.mark.parametrize("kwargs", [{"alpha": 0.0}, {"alpha": 0.6}, {"threshold": -0.1}])
def test_compare_rejects_bad_parameters(kwargs):
    with pytest.raises(ValueError):
        compare([1.0, 2.0], [1.0, 2.0], **kwargs)


# ---------------------------------------------------------------- power and improvements


def test_min_p_value_and_the_rounds_that_reach_alpha():
    from sectorbench.compare.stats import can_reach_alpha, min_p_value, rounds_for_alpha

    assert min_p_value(5, 5) == pytest.approx(1 / 252)
    assert min_p_value(3, 8) == pytest.approx(1 / 165)
    assert not can_reach_alpha(4, 4, 0.01) and can_reach_alpha(5, 5, 0.01)  # 1/70 vs 1/252
    assert rounds_for_alpha(0.01) == 5 and rounds_for_alpha(0.001) == 7  # 1/924 is not < 0.001
    assert rounds_for_alpha(0.01, other=3) == 7  # C(10, 3) = 120 is the first above 100
    # The guard is the test's own floor: 4 vs 4 samples that could not be clearer still fail it.
    assert compare([1.0, 1.01, 0.99, 1.02], [3.0, 3.01, 2.99, 3.02]).p_slower == pytest.approx(1 / 70)


def test_a_significant_seven_percent_speedup_is_an_improvement():
    # It used to be "inconclusive": improvement needed the interval's upper bound below
    # 1/(1 + threshold) = 0.909, the regression bound mirrored, which a 7 % change whose
    # interval reaches past 0.909 cannot meet, and "unchanged" needs the interval inside.
    rng = np.random.default_rng(21)
    base = noisy_times(rng, 15, sigma=0.03, outlier_rate=0)
    current = noisy_times(rng, 15, scale=0.93, sigma=0.03, outlier_rate=0)
    result = compare(base, current)
    assert result.p_faster < 1e-4
    assert result.low < 1 / 1.1 < result.high < 1  # the case the old rule called inconclusive
    assert result.verdict == "improvement"
    # The same change the other way is no regression: that still needs the threshold.
    assert compare(current, base).verdict != "regression"


def test_an_insignificant_speedup_is_not_an_improvement():
    rng = np.random.default_rng(22)
    base = noisy_times(rng, 6, sigma=0.08, outlier_rate=0)
    result = compare(base, 0.97 * base[::-1])
    assert result.p_faster > 0.01 and result.verdict != "improvement"
