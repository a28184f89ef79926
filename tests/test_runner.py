"""run() with kernels that crash or need a missing CPU feature: reported, never fatal."""

from pathlib import Path

from sectorbench.measure.runner import RunConfig, run
from sectorbench.measure.timing import TimingConfig
from sectorbench.native.build import BuildConfig

DATA = Path(__file__).parent / "data"
FAST = TimingConfig(repeat=2, min_sample_s=0.001)


def test_crashing_kernel_is_reported_and_others_still_run():
    build = BuildConfig.parse("-O2", extra_sources=(DATA / "crash_kernel.c",))
    result = run(RunConfig(sectors=10, points=100, kernels=("basic", "crashes", "sse2"), builds=(build,), timing=FAST))
    status = {r.kernel: r for r in result.results}
    assert status["crashes"].status == "crashed" and "signal" in status["crashes"].reason
    assert status["basic"].status == "ok" and status["sse2"].status == "ok"
    assert status["basic"].hits == status["sse2"].hits and len(status["sse2"].samples_s) == 2


def test_kernel_needing_missing_isa_is_skipped_never_run():
    build = BuildConfig.parse("-O2", extra_sources=(DATA / "missing_isa_kernel.c",))
    result = run(RunConfig(sectors=10, points=100, kernels=("needs_fp16", "basic"), builds=(build,), timing=FAST))
    skipped = next(r for r in result.results if r.kernel == "needs_fp16")
    assert skipped.status == "skipped" and "avx512fp16" in skipped.reason and not skipped.samples_s


def test_known_bad_kernels_not_selected_by_default():
    build = BuildConfig.parse("-O2", extra_sources=(DATA / "crash_kernel.c",))
    result = run(RunConfig(sectors=4, points=50, builds=(build,), timing=FAST))
    assert "crashes" not in {r.kernel for r in result.results}


def test_article_scene_reproduces_published_hit_rate():
    """The article printed hit=30.531% for its N=1000, M=100000 data."""
    result = run(
        RunConfig(scene="article", kernels=("sse2", "basic"), timing=TimingConfig(repeat=1, min_sample_s=0.001))
    )
    for r in result.results:
        assert round(r.hit_rate * 100, 3) == 30.531


def test_a_row_whose_answers_differ_says_so_in_the_result_and_rounding_is_allowed():
    """The runner records what float32 rounding allows each kernel on the scene (verify's count
    allowance) and marks, in the rows the JSON saves, a count beyond it: the mutant that forgets
    to square cos(theta) is marked, the correct kernels are not, however close to the band."""
    build = BuildConfig.parse("-O2", extra_sources=(DATA / "mutants.c",))
    kernels = ("naive", "basic", "nosqrt", "m_unsquared_cos")
    result = run(RunConfig(sectors=40, points=2000, kernels=kernels, builds=(build,), timing=FAST))
    rows = {r.kernel: r for r in result.results}
    exact = result.exact_count
    assert exact is not None and set(result.count_allowance) == set(kernels)
    assert result.count_allowance_sample is None  # 80 000 tests: every pair counted
    for name in ("naive", "basic", "nosqrt"):
        assert abs(rows[name].hits - exact) <= result.count_allowance[name]
        assert rows[name].answers_differ is None and rows[name].answers_note is None
    wrong = rows["m_unsquared_cos"]
    assert wrong.answers_differ == wrong.hits - exact != 0
    assert f"answers differ from the exact oracle's count {exact}" in wrong.answers_note
    assert load_back(result).results == result.results  # saved and read back with the marks


def test_a_row_is_judged_on_every_rounds_count_not_only_its_first():
    """A kernel right in its first round and wrong in every later one (a cache gone stale) was
    shown with the first round's count and unmarked, beside a note that the count changed: every
    count its rounds returned is kept (hits_seen), and the one farthest off marks the row."""
    build = BuildConfig.parse("-O2", extra_sources=(DATA / "unruly_kernels.c",))
    timing = TimingConfig(repeat=3, min_sample_s=0.001)
    result = run(RunConfig(sectors=10, points=100, kernels=("basic", "goes_wrong"), builds=(build,), timing=timing))
    rows = {r.kernel: r for r in result.results}
    basic, wrong = rows["basic"], rows["goes_wrong"]
    assert wrong.hits == basic.hits == result.exact_count and basic.hits_seen == []  # its first round is right
    assert len(wrong.hits_seen) == 1 and wrong.hits_seen[0] > wrong.hits
    assert wrong.answers_differ == wrong.hits_seen[0] - result.exact_count, wrong.answers_note
    assert any(w.startswith("hit count changed between calls") for w in wrong.warnings), wrong.warnings
    assert basic.answers_differ is None
    assert load_back(result).results == result.results


def test_a_row_is_judged_on_every_calls_count_not_only_each_samples_last():
    """A kernel one hit off on its second call only (in calibration, not its last call) was shown
    with the right count, unmarked and ranked: only each sample's last call's count was kept.
    Every call's is seen now (calibration's too), and its NoOperation twin's alike."""
    build = BuildConfig.parse("-O2", extra_sources=(DATA / "unruly_kernels.c",))
    timing = TimingConfig(repeat=3, min_sample_s=0.001)
    config = RunConfig(sectors=10, points=100, kernels=("basic", "wrong_once"), builds=(build,), timing=timing)
    result = run(config)
    rows = {r.kernel: r for r in result.results}
    basic, wrong = rows["basic"], rows["wrong_once"]
    assert basic.hits == result.exact_count and basic.hits_seen == [] and basic.answers_differ is None
    assert result.exact_count + 1 in [wrong.hits, *wrong.hits_seen], wrong
    assert wrong.answers_differ == 1, wrong.answers_note
    assert any(w.startswith("hit count changed between calls") for w in wrong.warnings), wrong.warnings
    assert any("counted 1 hits, not 0: it is not a NoOperation" in w for w in wrong.warnings), wrong.warnings
    assert wrong.net_s is None and basic.net_s is not None


def test_a_scene_too_large_to_count_allows_a_sampled_band_of_rounding():
    """Beyond 2^19 tests there is no exact count: the reference kernel's count is the yardstick,
    and the allowance is an upper bound estimated from a sample of the scene's pairs."""
    result = run(RunConfig(sectors=100, points=6000, kernels=("naive", "basic", "sse2"), timing=TimingConfig(repeat=1)))
    assert result.exact_count is None and result.count_allowance_sample == 2**19
    assert all(r.answers_differ is None for r in result.results), [r.answers_note for r in result.results]
    assert all(value > 0 for value in result.count_allowance.values())


def load_back(result):
    from sectorbench.model.results import RunResult

    return RunResult.from_dict(result.to_dict())


def test_a_tolerant_kernel_is_not_marked_for_the_pairs_its_tolerance_accepts():
    """recast_cross declares a tolerance (1e-4 of the area, which verify allows); its count on
    the triangles scene lies above the strict oracle's by the pairs in that band (+23 on this
    scene), which is not a difference of answers: the row must not say "answers differ"."""
    result = run(
        RunConfig(scene="triangles", sectors=100, points=5000, kernels=("recast_cross", "orient"), timing=FAST)
    )
    rows = {r.kernel: r for r in result.results}
    tolerant = rows["recast_cross"]
    assert tolerant.hits != result.exact_count  # the scene has pairs in the tolerance band
    assert abs(tolerant.hits - result.exact_count) <= result.count_allowance["recast_cross"]
    assert tolerant.answers_differ is None and tolerant.answers_note is None
    assert rows["orient"].answers_differ is None
