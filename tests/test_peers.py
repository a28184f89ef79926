"""What a user would pick instead: numpy and numba peers, the article's other methods, gcc vs clang."""

from __future__ import annotations

import importlib.util
import shutil
from pathlib import Path

import pytest
from conftest import needs_gcc

from sectorbench.check.verify import VerifyConfig, verify
from sectorbench.families.sector.peers import NumpyPeer
from sectorbench.measure.loops import peer_kernel
from sectorbench.measure.runner import PEER_FLAGS, RunConfig, run
from sectorbench.measure.timing import TimingConfig
from sectorbench.native.build import BuildConfig

DATA = Path(__file__).parent / "data"
FAST = TimingConfig(repeat=2, min_sample_s=0.002)
PEERS = ("numpy", "numba", "numba_parallel")
CLANG = shutil.which("clang-19")
needs_clang = pytest.mark.skipif(CLANG is None, reason="clang-19 not installed (apt-get install clang-19)")


def test_peers_and_c_kernels_in_one_table():
    """One row per peer (flags do not apply), in the same run as the C kernels, and the same
    hits: the peers do sse2_nosqrt's operations in its order."""
    result = run(
        RunConfig(
            sectors=40,
            points=2003,
            kernels=("basic", "sse2_nosqrt", *PEERS),
            builds=(BuildConfig.parse("-O2"), BuildConfig.parse("-O3")),
            timing=FAST,
        )
    )
    rows = [(r.kernel, r.flags) for r in result.results]
    assert [r for r in rows if r[0] in PEERS] == [(name, PEER_FLAGS) for name in PEERS]
    assert len(rows) == 2 * 2 + len(PEERS)
    hits = {r.kernel: r.hits for r in result.results if r.status == "ok"}
    assert {hits[name] for name in PEERS} == {hits["sse2_nosqrt"]}
    numba = next(r for r in result.results if r.kernel == "numba")
    assert numba.jit_s and numba.jit_s > 0 and numba.net_s is not None and numba.overhead_samples_s


@pytest.mark.skipif(importlib.util.find_spec("scipy") is None, reason="scipy not installed")
def test_a_first_call_that_compiles_nothing_is_not_called_a_jit():
    """kdtree's first call imports scipy (a quarter of a second here): its note must not say the
    time went to a JIT compilation, which only numba makes."""
    result = run(RunConfig(sectors=8, points=500, kernels=("kdtree",), timing=FAST))
    (row,) = result.results
    assert row.status == "ok" and row.jit_s is not None
    assert not any("(JIT compilation)" in note for note in row.warnings), row.warnings


def test_peers_only_run_in_inline_mode():
    result = run(RunConfig(sectors=8, points=100, kernels=("numpy",), modes=("inline", "call"), timing=FAST))
    by_mode = {r.mode: r for r in result.results}
    assert by_mode["inline"].status == "ok" and by_mode["call"].status == "skipped"


def test_a_peer_whose_module_is_missing_is_skipped_with_the_reason():
    class NeedsNothing(NumpyPeer):
        name, requires = "needs_nothing", ("no_such_module_xyz",)

    kernel = peer_kernel(NeedsNothing())
    assert not kernel.runnable and "no_such_module_xyz not installed" in kernel.skip_reason


def test_peers_pass_verify_through_pairs_grid_and_counts():
    result = verify(VerifyConfig(kernels=PEERS, cases=2000))
    assert result.passed and {k.flags for k in result.kernels} == {PEER_FLAGS}
    assert all(k.loop_checks > 0 and k.verdict == "rounding-band" for k in result.kernels)


@pytest.mark.parametrize("flags", ["-O2", "-O2 -ffast-math", "-O3 -march=native"])
def test_the_articles_other_methods_pass_verify(flags):
    kernels = ("polar", "localframe", "cross", "lut")
    result = verify(VerifyConfig(kernels=kernels, builds=(BuildConfig.parse(flags),), cases=2000))
    assert result.passed, [(k.kernel, k.verdict, k.mismatches) for k in result.kernels]


def test_a_declared_tolerance_is_honoured_and_only_as_far_as_declared():
    build = BuildConfig.parse("-O2", extra_sources=(DATA / "tolerant_kernels.c",))
    result = verify(VerifyConfig(kernels=("widened", "widened_undeclared"), builds=(build,), cases=2000))
    by_name = {k.kernel: k for k in result.kernels}
    assert by_name["widened"].verdict != "FAIL"
    assert by_name["widened_undeclared"].verdict == "FAIL" and by_name["widened_undeclared"].mismatches["logic-bug"]


@needs_clang
def test_clang_builds_and_verifies():
    build = BuildConfig.parse("-O3 -march=native", cc="clang-19")
    result = verify(
        VerifyConfig(kernels=("naive", "basic", "sse2_nosqrt", "avx512_nosqrt", "cross"), builds=(build,), cases=2000)
    )
    assert result.passed, [(k.kernel, k.verdict, k.mismatches) for k in result.kernels]


@needs_clang
@needs_gcc
def test_gcc_and_clang_in_one_run():
    result = run(
        RunConfig(
            sectors=20,
            points=503,
            kernels=("basic", "sse2_nosqrt"),
            timing=FAST,
            builds=(BuildConfig.parse("-O2", cc="gcc"), BuildConfig.parse("-O2", cc="clang-19")),
        )
    )
    assert {r.cc for r in result.results} == {"gcc", "clang-19"} and {r.status for r in result.results} == {"ok"}
    assert len({r.hits for r in result.results if r.kernel == "sse2_nosqrt"}) == 1
