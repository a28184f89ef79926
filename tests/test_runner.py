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
