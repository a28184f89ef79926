"""Kernels at the limit: AVX2/AVX-512 rows, threads, machine-code analysis, honest NoOperations."""

from __future__ import annotations

import shutil

import pytest
from conftest import DATA, needs_gcc

from sectorbench.check.verify import VerifyConfig, verify
from sectorbench.families import get as family
from sectorbench.measure.messages import LoopRef
from sectorbench.measure.runner import RunConfig, run
from sectorbench.measure.timing import TimingConfig
from sectorbench.native.build import BuildConfig, build
from sectorbench.native.machine_code import analyze, find_llvm_mca, host_cpu

FAST = TimingConfig(repeat=3, min_sample_s=0.002)
#: The machine-code tests read what each compiler made, whatever $CC the suite runs under.
COMPILERS = [
    pytest.param("gcc", marks=needs_gcc),
    pytest.param("clang-19", marks=pytest.mark.skipif(shutil.which("clang-19") is None, reason="no clang-19")),
]
EXACT_SIMD = ("sse2_nosqrt", "avx2_nosqrt", "avx512_nosqrt", "avx512_nosqrt_b4")


def test_hits_identical_for_every_thread_count_and_dispatch_path():
    """Shapes split across 1, 2 and 3 threads count the same; the exact SIMD kernels of
    every instruction set (no FMA anywhere) count the same as one another."""
    result = run(
        RunConfig(
            sectors=37,
            points=1003,
            kernels=EXACT_SIMD,
            threads=(1, 2, 3),
            builds=(BuildConfig.parse("-O3 -march=native"),),
            timing=FAST,
        )
    )
    # every kernel this CPU can run ran (AVX-512 comes and goes as the VM moves between hosts)
    assert all(r.status == "ok" or "this CPU lacks" in r.reason for r in result.results)
    ran = [r for r in result.results if r.status == "ok"]
    assert {r.kernel for r in ran} >= {"sse2_nosqrt", "avx2_nosqrt"}
    assert len({r.hits for r in ran}) == 1 and {r.threads for r in ran} == {1, 2, 3}


def test_a_missing_isa_is_skipped_never_run():
    result = run(
        RunConfig(
            sectors=8,
            points=100,
            kernels=("avx2_nosqrt", "avx512_nosqrt", "sse2_nosqrt"),
            disable_isa=("avx512f",),
            timing=FAST,
        )
    )
    status = {r.kernel: r for r in result.results}
    assert status["avx512_nosqrt"].status == "skipped" and "avx512f" in status["avx512_nosqrt"].reason
    assert not status["avx512_nosqrt"].samples_s
    assert status["avx2_nosqrt"].status == "ok" and status["sse2_nosqrt"].status == "ok"


VECTOR_RANK = {"none": 0, "scalar": 1, "xmm": 2, "ymm": 3, "zmm": 4}


@pytest.mark.parametrize("cc", COMPILERS)
@pytest.mark.parametrize("flags", ["-O2", "-O3 -march=native", "-O3 -march=native -ffast-math"])
def test_every_noop_loop_is_at_least_as_vectorised_as_its_kernel(flags, cc, o2_kernels):
    """The NoOperation follows the kernel's loop as compiled, so it never costs more than the
    kernel (the scalar barrier NoOperation of old made the vectorised bittrick's net 0 at
    -O3 -march=native).  Checked in the machine code, not by timing: timing belongs to
    `make bench`, whose runs warn when a net time comes out <= 0.  Where a family's hot loop
    runs inside one test (aabr's scans step over a polygon's vertices), the kernel's innermost
    loop is not its loop over the tests, and run compares no vector classes: nor does this
    (gcc kept aabr's scan out of line, clang inlines its ymm vertex loop)."""
    library = build(BuildConfig.parse(flags, cc=cc))
    steps = {k.name: k.block for k in o2_kernels if family(k.family).hot_loop_over_points}
    loops = analyze(
        library,
        {f"{name}_{part}_inline": block for name, block in steps.items() for part in ("count", "noop")},
    )
    slower_noops = {
        name: (loops[f"{name}_count_inline"].vector, loops[f"{name}_noop_inline"].vector)
        for name in steps
        if VECTOR_RANK[loops[f"{name}_noop_inline"].vector] < VECTOR_RANK[loops[f"{name}_count_inline"].vector]
    }
    assert not slower_noops, slower_noops


@pytest.mark.parametrize("flags", ["-O2", "-O3 -march=native", "-O3 -march=native -ffast-math"])
def test_the_new_kernels_pass_verify(flags):
    kernels = ("avx2", "avx2_nosqrt", "avx2_nosqrt_fma", "avx512", "avx512_nosqrt", "avx512_nosqrt_b4")
    result = verify(VerifyConfig(kernels=kernels, builds=(BuildConfig.parse(flags),), cases=2000))
    assert result.passed, [(k.kernel, k.verdict, k.mismatches) for k in result.kernels]
    assert all(k.loop_checks > 0 for k in result.kernels if k.status == "ok")
    assert all(k.status == "ok" or "this CPU lacks" in k.reason for k in result.kernels)


@pytest.mark.parametrize(
    "cc, basic",
    [
        pytest.param("gcc", "scalar", marks=needs_gcc),  # gcc 12's -O2 vectorises no loop of basic's
        pytest.param(  # clang's -O2 vectorises basic's loop with SSE, 8 points an iteration
            "clang-19", "xmm", marks=pytest.mark.skipif(shutil.which("clang-19") is None, reason="no clang-19")
        ),
    ],
)
def test_machine_code_says_which_loops_are_vectorised(cc, basic):
    library = build(BuildConfig.parse("-O2", cc=cc))
    loops = analyze(
        library,
        {
            "basic_count_inline": 1,
            "sse2_nosqrt_count_inline": 1,
            "avx512_nosqrt_count_inline": 1,
            "avx512_nosqrt_b4_count_inline": 4,
            "basic_noop_inline": 1,
        },
    )
    assert [loops[f"{k}_count_inline"].vector for k in ("basic", "sse2_nosqrt", "avx512_nosqrt")] == [
        basic,
        "xmm",
        "zmm",
    ]
    assert loops["avx512_nosqrt_count_inline"].tests_per_iteration == 16
    assert loops["avx512_nosqrt_b4_count_inline"].tests_per_iteration == 64
    assert loops["basic_noop_inline"].vector == basic  # gcc folds identical NoOperations: followed
    zmm = loops["avx512_nosqrt_count_inline"]
    if find_llvm_mca() is None:
        assert zmm.bound_cycles_per_test is None and "llvm-mca not installed" in zmm.reason
    elif zmm.bound_cycles_per_test is None:
        # an llvm-mca whose model of this CPU has no AVX-512 (llvm-mca 14 calls a Zen 4 "znver3",
        # a Zen 3 has none): no bound, and the reason says why, never a number made up
        assert zmm.reason and zmm.reason.startswith("llvm-mca")
    else:  # 6 multiplies + 2 mask compares per 16 tests on two 512-bit multiply pipes: about 0.5
        assert 0.3 < zmm.bound_cycles_per_test < 0.8
    sse2 = loops["sse2_nosqrt_count_inline"]  # every llvm-mca models SSE2
    if find_llvm_mca() is not None and host_cpu(find_llvm_mca()) is not None:
        assert sse2.bound_cycles_per_test is not None and sse2.bound_cycles_per_test > 0, sse2.reason


@pytest.mark.parametrize("cc", COMPILERS)
@pytest.mark.parametrize("flags", ["-O0", "-O2 -fsanitize=undefined"])
def test_no_bound_for_a_loop_that_is_not_the_kernels_hot_loop(flags, cc, monkeypatch):
    """At -O0 the predicate is called out of line and the loop found is a setup loop with no FP
    arithmetic (it showed 0.02-0.04 cycles/test, "% bound 0"); under -fsanitize=undefined the
    loop carries checks and branches to __ubsan_* handlers (it showed 46 cycles/test against
    3.5 measured).  Neither is a bound, whatever llvm-mca would say: an llvm-mca that answers
    10 cycles for any loop stands in, so the test means the same with llvm-mca 14, 19 or none.
    clang's code said less: "no loop found" at -O0 (its loops end in a jmp back), and at
    -fsanitize=undefined "cannot tell how many tests one iteration makes", not the sanitizer."""
    from sectorbench.native import machine_code

    monkeypatch.setattr(machine_code, "find_llvm_mca", lambda: "/nonexistent/llvm-mca-stub")
    monkeypatch.setattr(machine_code, "host_cpu", lambda llvm_mca: "stubcpu")
    monkeypatch.setattr(machine_code, "mca_cycles_per_iteration", lambda loop, llvm_mca, mcpu: 10.0)
    loops = analyze(build(BuildConfig.parse(flags, cc=cc)), {"sse2_count_inline": 1, "avx2_count_inline": 1})
    for loop in loops.values():
        assert loop.bound_cycles_per_test is None and loop.model is None, loop
        if flags == "-O0":
            assert loop.vector == "none" and loop.reason == machine_code.NO_FP_ARITHMETIC, loop
        else:
            assert loop.vector in ("xmm", "ymm") and "__ubsan_" in loop.reason, loop


def test_a_library_linking_the_same_objects_reuses_llvm_mcas_cycles(tmp_path, monkeypatch, seeded_cache):
    """A build adding a --source file holds the same loops at other addresses: their bounds come
    from the cache's memo of llvm-mca's answers, not from llvm-mca again."""
    from sectorbench.native import machine_code

    cache = seeded_cache(tmp_path / "cache", "-O2")
    plain = build(BuildConfig.parse("-O2"), cache)
    other = build(BuildConfig.parse("-O2", extra_sources=(DATA / "crash_kernel.c",)), cache)
    functions = {"basic_count_inline": 1, "sse2_nosqrt_count_inline": 1, "avx2_nosqrt_count_inline": 1}
    first = analyze(plain, functions)
    memos = list(cache.glob("mca-*.json"))
    mca = find_llvm_mca()
    if mca is None or host_cpu(mca) is None:
        assert not memos and all(loop.bound_cycles_per_test is None for loop in first.values())
        return

    def no_second_run(*args):
        raise AssertionError("llvm-mca ran again for a loop it had measured")

    monkeypatch.setattr(machine_code, "mca_cycles_per_iteration", no_second_run)
    assert len(memos) == 1 and analyze(other, functions) == first
    assert first["sse2_nosqrt_count_inline"].bound_cycles_per_test > 0


def test_counters_are_reported_honestly(o2_worker, scratch):
    from sectorbench.families.scene_kinds import generate

    o2_worker.load(generate("uniform", 5, 100, 0), scratch)
    _, info = o2_worker.describe()
    counters = info.counters
    assert isinstance(counters["available"], bool)
    assert counters["available"] or counters["reason"].startswith("perf_event_open: ")
    reply = o2_worker.sample(LoopRef("basic", "inline"), calls=1)
    assert (reply.cycles is not None) == counters["available"]


def test_a_loop_faster_than_its_bound_is_named_in_the_notes():
    """llvm-mca's model is an estimate: at -O3 -march=native it models sse2's vsqrtps loop at
    1.76 cycles/test where the loop runs at about 1.3.  The notes must say so, not print
    136 % of a 'bound' silently."""
    from sectorbench.model.results import KernelResult, RunResult
    from sectorbench.present.report import run_notes

    def row(kernel, cycles, bound):
        return KernelResult(
            kernel=kernel,
            family="sector",
            flags="-O2",
            cc="cc",
            mode="inline",
            status="ok",
            cycles_per_test=cycles,
            bound_cycles_per_test=bound,
        )

    env = {"machine": {"cpu": {"measured_mhz": 3690.0}}}
    beaten = RunResult({}, env, {}, [row("sse2", 1.29, 1.76), row("avx512_nosqrt", 0.51, 0.50)])
    notes = " ".join(run_notes(beaten))
    assert "% bound over 100 (sse2)" in notes and "avx512_nosqrt" not in notes
    held = RunResult({}, env, {}, [row("avx512_nosqrt", 0.51, 0.50)])
    assert "% bound over 100" not in " ".join(run_notes(held))


def test_a_row_of_several_threads_says_why_it_has_no_bound():
    """The bound is one core's, so a row of 2 threads shows "–" in the bound column: the notes
    must say why, as they do for every other "–" there."""
    from sectorbench.model.results import KernelResult, RunResult
    from sectorbench.present.report import run_notes

    def row(threads, bound):
        return KernelResult(
            kernel="avx2",
            family="sector",
            flags="-O2",
            cc="cc",
            mode="inline",
            status="ok",
            threads=threads,
            cycles_per_test=1.6,
            bound_cycles_per_test=bound,
        )

    env = {"machine": {"cpu": {"measured_mhz": 3090.0}}}
    notes = " ".join(run_notes(RunResult({}, env, {}, [row(1, 0.96), row(2, None)])))
    assert "bound – with more than 1 thread: the bound is one core's" in notes
    assert "more than 1 thread" not in " ".join(run_notes(RunResult({}, env, {}, [row(1, 0.96)])))
