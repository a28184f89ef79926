"""The C kernels compile warning-free, so a new warning is a failing test, not noise."""

from __future__ import annotations

from pathlib import Path

import pytest

from sectorbench.build import BuildConfig, build

DATA = Path(__file__).parent / "data"
#: Test-only kernel files that must compile (syntax_error.c must not).
EXTRA = (DATA / "broken_kernels.c", DATA / "crash_kernel.c", DATA / "missing_isa_kernel.c")
STRICT = "-Wall -Wextra -Werror"


@pytest.mark.parametrize("flags", ["-O2", "-O3 -march=native", "-O3 -march=native -ffast-math", "-O0"])
def test_kernels_compile_without_warnings(flags):
    build(BuildConfig.parse(f"{flags} {STRICT}", extra_sources=EXTRA))
