"""Peers: kernels written in Python (numpy, numba) — what a user would pick instead of C.

A family lists its peers (`Family.peers()`); they run in a worker of their own, whose
library is a plain `-O2` build (never fast-math: the worker's floating-point environment
stays IEEE, as in the user's Python process), timed in the same interleaved rounds as the
C kernels, and checked by `verify` like any kernel.  Compiler flags do not apply to them:
one row per run, flags "—".  A peer that needs a module the machine lacks (numba is an
optional extra) is listed as skipped with the reason.

Each peer has a NoOperation of its own loop shape (the same loops reading the same
points, an answer that never holds), so its net time means what a C kernel's does; its
gross time is in the result too, and the README compares peers with C on gross time.
The first call of a JIT-compiled peer (its compilation) is made on a tiny slice before
timing starts and reported apart (`jit_s`).
"""

from __future__ import annotations

import importlib.util
import time
from collections.abc import Mapping

import numpy as np

#: Points and shapes of the slice a peer is first called on (its JIT compilation).
WARM_SHAPES, WARM_POINTS = 2, 64


class Peer:
    """A peer kernel; a subclass sets the fields and writes count, noop, pairs and grid.

    arrays: the scene's unpadded float32 columns by name (the family's shape and point
    arrays); begin, end: the shapes to test (threads split [0, N)).
    """

    name: str
    family: str
    summary: str
    loop: str  # its loop shape, e.g. "numpy per sector": peers sharing it share a NoOperation
    takes: tuple[str, ...]
    requires: tuple[str, ...] = ()  # modules it imports, e.g. ("numba",)

    def unavailable(self) -> str | None:
        """Why this peer cannot run here, or None."""
        missing = [module for module in self.requires if importlib.util.find_spec(module) is None]
        return f"{', '.join(missing)} not installed (pip install 'sectorbench[peers]')" if missing else None

    def count(self, arrays: Mapping[str, np.ndarray], begin: int, end: int) -> int:
        raise NotImplementedError

    def noop(self, arrays: Mapping[str, np.ndarray], begin: int, end: int, never: float) -> int:
        raise NotImplementedError

    def pairs(self, arrays: Mapping[str, np.ndarray]) -> np.ndarray:
        """Answers of shape j against point j (equal-length arrays)."""
        raise NotImplementedError

    def grid(self, arrays: Mapping[str, np.ndarray], n_shapes: int) -> np.ndarray:
        """(N, M) answers of every shape against every point."""
        raise NotImplementedError

    def warm(self, arrays: Mapping[str, np.ndarray]) -> float:
        """Seconds the first calls take on a tiny slice: a JIT peer's compilation."""
        small = {k: np.ascontiguousarray(v[:WARM_POINTS]) for k, v in arrays.items()}
        start = time.perf_counter()
        self.count(small, 0, min(WARM_SHAPES, len(small[self.takes[0]])))
        self.noop(small, 0, min(WARM_SHAPES, len(small[self.takes[0]])), float("inf"))
        return time.perf_counter() - start
