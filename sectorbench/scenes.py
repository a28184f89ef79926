"""Seeded scenes: N shapes x M points as aligned, padded float32 structure-of-arrays.

Every scene is reproducible bit for bit from (kind, n, m, seed): the generators
use only IEEE-exact float32/float64 arithmetic (+, *, /, sqrt) on numpy's PCG64
streams, plus libm's cos for cos_theta, which is rounded to float32 from float64.

Kinds:
  uniform        the article's ranges: c, p uniform in [-1, 1]^2, u a random unit
                 vector, r in (0, 2], theta in (0, pi), r2 = r*r and
                 cos_theta = cos(theta) rounded to float32.
  article        a bit-exact replica of the published program's data (MSVC rand()
                 after srand(0)); its point loop fills only the first N points, so
                 points N..M-1 stay at (0, 0), a quirk of the original.
  article-fixed  the same stream, all M points filled.
  triangles      triangles with vertices uniform in [-1, 1]^2, points likewise.
  thin-triangles near-degenerate triangles around (1000, 1000): one vertex a few
                 float32 ulps off the line through the other two.
"""

from __future__ import annotations

import hashlib
import math
import os
from dataclasses import dataclass, field
from types import MappingProxyType
from typing import Mapping

import numpy as np

from . import SectorbenchError

#: Arrays are padded to a multiple of the widest vector (AVX-512: 16 float32).
PAD_FLOATS = 16
ALIGN_BYTES = 64

SECTOR_ARRAYS = ("cx", "cy", "ux", "uy", "r", "theta", "r2", "cos_theta")
TRIANGLE_ARRAYS = ("ax", "ay", "bx", "by", "cx", "cy")
FAMILY_ARRAYS = {"sector": SECTOR_ARRAYS, "triangle": TRIANGLE_ARRAYS}

SCENE_FAMILIES = {
    "uniform": "sector",
    "article": "sector",
    "article-fixed": "sector",
    "triangles": "triangle",
    "thin-triangles": "triangle",
}

#: The largest float32 strictly below pi: theta must stay < pi, and float32(pi) > pi.
THETA_MAX = np.nextafter(np.float32(np.pi), np.float32(0))


@dataclass(frozen=True)
class Scene:
    """N shapes and M points; every array is read-only, 64-byte aligned, `stride` long.

    Pad elements are NaN, so no comparison on them is true; SIMD kernels also mask
    the lanes past M, so padding can never count as a hit.
    """

    kind: str
    family: str
    seed: int | None
    n_shapes: int
    n_points: int
    arrays: Mapping[str, np.ndarray] = field(repr=False)
    #: "grid": every shape against every point; "pairs": shape j against point j.
    layout: str = "grid"

    @property
    def stride(self) -> int:
        return padded_length(max(self.n_points, self.n_shapes if self.layout == "pairs" else 0))

    @property
    def tests(self) -> int:
        return self.n_points if self.layout == "pairs" else self.n_shapes * self.n_points

    def column(self, name: str) -> np.ndarray:
        """The unpadded values of one array."""
        length = self.n_points if name in ("px", "py") or self.layout == "pairs" else self.n_shapes
        return self.arrays[name][:length]

    def digest(self) -> str:
        """SHA-256 of the scene's identity and unpadded values (for reproducibility checks)."""
        sha = hashlib.sha256(f"{self.kind}|{self.family}|{self.layout}|{self.n_shapes}|{self.n_points}".encode())
        for name in sorted(self.arrays):
            sha.update(name.encode())
            sha.update(self.column(name).tobytes())
        return sha.hexdigest()

    def describe(self) -> dict:
        return {"kind": self.kind, "family": self.family, "seed": self.seed,
                ("sectors" if self.family == "sector" else "triangles"): self.n_shapes,
                "points": self.n_points}


def padded_length(n: int) -> int:
    return max(PAD_FLOATS, -(-n // PAD_FLOATS) * PAD_FLOATS)


def aligned_array(values: np.ndarray, length: int) -> np.ndarray:
    """A read-only float32 copy of `values`, 64-byte aligned, NaN-padded to `length`."""
    buffer = np.empty(length * 4 + ALIGN_BYTES, dtype=np.uint8)
    offset = (-buffer.ctypes.data) % ALIGN_BYTES
    array = buffer[offset:offset + length * 4].view(np.float32)
    array[:] = np.nan
    array[:len(values)] = values
    array.flags.writeable = False
    return array


def make_scene(kind: str, family: str, columns: Mapping[str, np.ndarray], px: np.ndarray, py: np.ndarray,
               seed: int | None = None, layout: str = "grid") -> Scene:
    """Wrap float32 columns in a Scene (aligned, padded, read-only)."""
    names = FAMILY_ARRAYS[family]
    missing = [name for name in names if name not in columns]
    if missing:
        raise SectorbenchError(f"{family} scene lacks arrays: {', '.join(missing)}")
    n_shapes = len(columns[names[0]])
    n_points = len(px)
    if layout == "pairs" and n_shapes != n_points:
        raise SectorbenchError(f"pairs need as many shapes as points ({n_shapes} != {n_points})")
    length = padded_length(max(n_points, n_shapes if layout == "pairs" else 0))
    shape_length = length if layout == "pairs" else padded_length(n_shapes)
    arrays = {name: aligned_array(np.asarray(columns[name], dtype=np.float32), shape_length) for name in names}
    arrays["px"] = aligned_array(np.asarray(px, dtype=np.float32), length)
    arrays["py"] = aligned_array(np.asarray(py, dtype=np.float32), length)
    return Scene(kind, family, seed, n_shapes, n_points, MappingProxyType(arrays), layout)


def check_size(n: int, m: int) -> None:
    """Reject sizes that are not positive or whose arrays would not fit in memory."""
    if n <= 0 or m <= 0:
        raise SectorbenchError(f"--sectors and --points must be positive (got N={n}, M={m})")
    needed = 4 * (len(SECTOR_ARRAYS) * padded_length(n) + 2 * padded_length(m))
    available = _physical_memory_bytes()
    if available and needed > available // 2:
        raise SectorbenchError(
            f"a scene of N={n} x M={m} needs {needed / 2**30:.1f} GiB of arrays, "
            f"more than half of this machine's {available / 2**30:.1f} GiB")


def _physical_memory_bytes() -> int | None:
    try:
        return os.sysconf("SC_PHYS_PAGES") * os.sysconf("SC_PAGE_SIZE")
    except (ValueError, OSError, AttributeError):
        return None


def generate(kind: str, n: int, m: int, seed: int = 0) -> Scene:
    """Generate a scene of `kind` with n shapes and m points from `seed`."""
    if kind not in SCENE_FAMILIES:
        raise SectorbenchError(f"unknown scene kind {kind!r}; choose one of: {', '.join(SCENE_FAMILIES)}")
    check_size(n, m)
    if seed < 0:
        raise SectorbenchError(f"--seed must be >= 0 (got {seed})")
    return _GENERATORS[kind](n, m, seed)


def _streams(seed: int) -> tuple[np.random.Generator, np.random.Generator]:
    """Independent streams for shapes and points, so changing N keeps the points."""
    shapes, points = np.random.SeedSequence(seed).spawn(2)
    return np.random.Generator(np.random.PCG64(shapes)), np.random.Generator(np.random.PCG64(points))


def _cos_float32(theta: np.ndarray) -> np.ndarray:
    # libm's cos, not numpy's SIMD one, whose last bit may differ between CPUs.
    return np.array([math.cos(float(t)) for t in theta], dtype=np.float64).astype(np.float32)


def _sector_columns(cx, cy, ux, uy, r, theta) -> dict[str, np.ndarray]:
    r = np.asarray(r, dtype=np.float32)
    theta = np.asarray(theta, dtype=np.float32)
    return {"cx": cx, "cy": cy, "ux": ux, "uy": uy, "r": r, "theta": theta,
            "r2": r * r, "cos_theta": _cos_float32(theta)}


def _uniform(n: int, m: int, seed: int) -> Scene:
    shapes, points = _streams(seed)
    centre = shapes.uniform(-1.0, 1.0, (2, n)).astype(np.float32)
    gauss = shapes.standard_normal((2, n))
    direction = (gauss / np.sqrt(gauss[0] ** 2 + gauss[1] ** 2)).astype(np.float32)
    r = (2.0 * (1.0 - shapes.random(n))).astype(np.float32)            # (0, 2]
    theta = np.minimum((np.pi * (1.0 - shapes.random(n))).astype(np.float32), THETA_MAX)
    theta = np.maximum(theta, np.float32(np.finfo(np.float32).tiny))  # (0, pi)
    p = points.uniform(-1.0, 1.0, (2, m)).astype(np.float32)
    columns = _sector_columns(centre[0], centre[1], direction[0], direction[1], r, theta)
    return make_scene("uniform", "sector", columns, p[0], p[1], seed)


class MsvcRand:
    """The Microsoft C runtime's rand(): an LCG whose state starts at 1 (srand(0) sets 0... see seed)."""

    RAND_MAX = 32767

    def __init__(self, seed: int = 0):
        self.state = seed & 0xFFFFFFFF

    def next(self) -> int:
        self.state = (self.state * 214013 + 2531011) & 0xFFFFFFFF
        return (self.state >> 16) & 0x7FFF

    def uniform(self, lo: float, hi: float, count: int = 1) -> np.ndarray:
        """The article's Uniform(lo, hi) = rand() * (hi - lo) / RAND_MAX + lo, in float32."""
        draws = np.array([self.next() for _ in range(count)], dtype=np.float32)
        lo32, hi32 = np.float32(lo), np.float32(hi)
        return draws * (hi32 - lo32) / np.float32(self.RAND_MAX) + lo32


def _article(n: int, m: int, seed: int, fill_all_points: bool) -> Scene:
    rand = MsvcRand(seed)
    columns = {name: np.empty(n, dtype=np.float32) for name in ("cx", "cy", "ux", "uy", "r", "theta")}
    one = np.float32(1.0)
    for i in range(n):
        columns["cx"][i], columns["cy"][i] = rand.uniform(-1.0, 1.0, 2)
        ux, uy = rand.uniform(-1.0, 1.0, 2)
        inverse_length = one / np.sqrt(ux * ux + uy * uy)
        columns["ux"][i], columns["uy"][i] = ux * inverse_length, uy * inverse_length
        columns["r"][i] = rand.uniform(0.0, 2.0)[0]
        columns["theta"][i] = rand.uniform(0.0, float(np.float32(np.pi)))[0]
    filled = m if fill_all_points else min(n, m)
    p = rand.uniform(-1.0, 1.0, 2 * filled).reshape(filled, 2).T
    px = np.zeros(m, dtype=np.float32)
    py = np.zeros(m, dtype=np.float32)
    px[:filled], py[:filled] = p[0], p[1]
    c = columns
    sectors = _sector_columns(c["cx"], c["cy"], c["ux"], c["uy"], c["r"], c["theta"])
    return make_scene("article-fixed" if fill_all_points else "article", "sector", sectors, px, py, seed)


def _triangles(n: int, m: int, seed: int) -> Scene:
    shapes, points = _streams(seed)
    vertices = shapes.uniform(-1.0, 1.0, (6, n)).astype(np.float32)
    p = points.uniform(-1.0, 1.0, (2, m)).astype(np.float32)
    columns = dict(zip(TRIANGLE_ARRAYS, vertices))
    return make_scene("triangles", "triangle", columns, p[0], p[1], seed)


def _thin_triangles(n: int, m: int, seed: int) -> Scene:
    """Slivers near (1000, 1000), where float32 has ~6e-5 of resolution."""
    shapes, points = _streams(seed)
    base = np.float32(1000.0)
    a = base + shapes.uniform(-4.0, 4.0, (2, n))
    b = base + shapes.uniform(-4.0, 4.0, (2, n))
    t = shapes.random(n)
    # c on segment ab, then nudged by a few ulps across it.
    c = a + t * (b - a)
    ulps = shapes.integers(-4, 5, (2, n))
    c32 = c.astype(np.float32)
    c32 = c32 + ulps * np.spacing(c32)
    columns = dict(zip(TRIANGLE_ARRAYS, (*a.astype(np.float32), *b.astype(np.float32), *c32)))
    p = (base + points.uniform(-4.0, 4.0, (2, m))).astype(np.float32)
    return make_scene("thin-triangles", "triangle", columns, p[0], p[1], seed)


_GENERATORS = {
    "uniform": _uniform,
    "article": lambda n, m, seed: _article(n, m, seed, fill_all_points=False),
    "article-fixed": lambda n, m, seed: _article(n, m, seed, fill_all_points=True),
    "triangles": _triangles,
    "thin-triangles": _thin_triangles,
}
