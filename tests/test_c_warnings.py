"""The C kernels compile warning-free, so a new warning is a failing test, not noise.

Every build compiles with WARNING_FLAGS and keeps what the compiler said (LIBRARY.warnings),
so these are the suite's own builds, read back: kernels_c/'s objects are the ones the other
tests link, compiled once."""

from __future__ import annotations

import json
import re
import shlex
import shutil
import subprocess
from pathlib import Path

import pytest
from click.testing import CliRunner

from sectorbench.cli import main
from sectorbench.native.build import WARNING_FLAGS, BuildConfig, build, compiler_warnings, object_paths

DATA = Path(__file__).parent / "data"
#: Test-only kernel files that must compile (syntax_error.c must not).
EXTRA = tuple(
    DATA / name
    for name in (
        "broken_kernels.c",
        "crash_kernel.c",
        "missing_isa_kernel.c",
        "mutants.c",
        "correct_variants.c",
        "tolerant_kernels.c",
        "scribbling_kernel.c",
        "loop_blind_spots.c",
        "process_changers.c",
        "scene_changers.c",
        "subnormal_guards.c",
        "extreme_half_angles.c",
        "long_loop_blind_spots.c",
        "unit_u_mutants.c",
        "over_declared.c",
    )
)
UNUSED = """#include "sb_common.h"
static inline int unused_probe(float cx, float cy, float ux, float uy, float r2, float k, float px, float py) {
    const float dx = px - cx, dy = py - cy, forgotten = dx * ux;
    return dx * dx + dy * dy < r2 && dy * uy > k;
}
SB_KERNEL(unused_probe, SCALAR, 1, (cx, cy, ux, uy, r2, cos_theta), .family = "sector", .summary = "test: unused");
"""


@pytest.fixture(scope="module")
def extra_unit(tmp_path_factory) -> Path:
    """The test-only files as one translation unit (an #include of each by absolute path, as
    build.py makes of a folder of kernels_c/): their code is compiled under each flag set as
    it is, and the compiler's messages name the real files, but <immintrin.h> is parsed once
    for the six (3.8 s of gcc -O2 here against 5.9 s one file at a time).  Their file-scope
    names must therefore differ."""
    unit = tmp_path_factory.mktemp("extra") / "test_kernels.c"
    unit.write_text("".join(f'#include "{source}"\n' for source in EXTRA))
    return unit


@pytest.mark.parametrize("cc", ["cc", "clang-19"])
@pytest.mark.parametrize("flags", ["-O2", "-O3 -march=native", "-O3 -march=native -ffast-math", "-O0"])
def test_kernels_compile_without_warnings(flags, cc, extra_unit):
    if shutil.which(cc) is None:
        pytest.skip(f"{cc} not installed (apt-get install {cc})")
    assert set(WARNING_FLAGS) >= {"-Wall", "-Wextra"}
    said = compiler_warnings(build(BuildConfig.parse(flags, cc=cc, extra_sources=(extra_unit,))))
    assert said is not None
    of_the_flags = flag_warnings(cc, flags, extra_unit.parent)
    # "N warnings generated." counts the flags' warnings too
    of_the_code = [line for line in said.splitlines() if line not in of_the_flags and not COUNT_LINE.match(line)]
    assert of_the_code == []


def flag_warnings(cc: str, flags: str, where: Path) -> set[str]:
    """What the compiler says of the flags themselves, on this machine, for an empty file: clang-19
    with -march=native on a Xeon whose CPUID names AVX10.1 says "invalid feature combination:
    +avx10.1-256; will be promoted to avx10.1-512" for every translation unit.  That is no
    warning about the kernels' code, which is what this test guards."""
    empty = where / "empty.c"
    empty.write_text("")
    said = subprocess.run(
        [cc, *shlex.split(flags), *WARNING_FLAGS, "-c", str(empty), "-o", str(where / "empty.o")],
        capture_output=True,
        text=True,
        check=True,
    )
    return set(said.stderr.splitlines())


COUNT_LINE = re.compile(r"\d+ warnings? generated\.$")


def test_a_warning_is_kept_with_the_build(tmp_path):
    source = tmp_path / "unused.c"
    source.write_text(UNUSED)
    said = compiler_warnings(build(BuildConfig.parse("-O2", extra_sources=(source,))))
    assert "unused.c" in said and "forgotten" in said and "-Wunused-variable" in said
    # (that the user's -Wno-... comes after the harness's -Wall, and so wins, is checked on the
    # compiler's command lines in tests/test_reliability.py: a build here is 6 s of compiling)


def test_a_cached_object_without_its_warnings_is_compiled_again(tmp_path, seeded_cache):
    cache = seeded_cache(tmp_path / "cache", "-O0")  # the session's objects, linked: nothing compiled yet
    objects = {name: path for name, _, path, _ in object_paths(BuildConfig.parse("-O0"), cache)}
    lost = Path(f"{objects['harness']}.warnings")
    lost.unlink()
    times = {path: path.stat().st_mtime_ns for path in objects.values()}
    build(BuildConfig.parse("-O0"), cache)
    # that object alone was compiled again (a new file in its place), with what was said
    assert [path for path in objects.values() if path.stat().st_mtime_ns != times[path]] == [objects["harness"]]
    assert lost.read_text() == ""


def test_run_says_what_the_compiler_warned_and_keeps_it_in_the_json(tmp_path):
    source = tmp_path / "unused.c"
    source.write_text(UNUSED)
    out = tmp_path / "run.json"
    args = ["run", "-n", "8", "-m", "200", "--repeat", "2", "--min-time", "0.001", "--flags", "-O2"]
    result = CliRunner().invoke(main, [*args, "--source", str(source), "--kernels", "unused_probe", "--json", str(out)])
    assert result.exit_code == 0, result.output
    (line,) = [line for line in result.stderr.splitlines() if line.startswith("note: ")]
    assert "unused.c" in line and "forgotten" in line
    (entry,) = [b for b in json.loads(out.read_text())["env"]["builds"] if "compiler_warnings" in b]
    assert entry["flags"] == ["-O2"] and "forgotten" in entry["compiler_warnings"]
