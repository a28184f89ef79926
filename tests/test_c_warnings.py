"""The C kernels compile warning-free, so a new warning is a failing test, not noise."""

from __future__ import annotations

import shutil
from pathlib import Path

import pytest

from sectorbench.native.build import BuildConfig, build

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
    )
)
STRICT = "-Wall -Wextra -Werror"


@pytest.mark.parametrize("cc", ["cc", "clang-19"])
@pytest.mark.parametrize("flags", ["-O2", "-O3 -march=native", "-O3 -march=native -ffast-math", "-O0"])
def test_kernels_compile_without_warnings(flags, cc):
    if shutil.which(cc) is None:
        pytest.skip(f"{cc} not installed (apt-get install {cc})")
    build(BuildConfig.parse(f"{flags} {STRICT}", cc=cc, extra_sources=EXTRA))
