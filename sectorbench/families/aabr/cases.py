"""verify's cases for the aabr family: polygons, each with rotations built to break kernels.

Each group is one CaseSet (rows of (poly, angle, c, s); the polygons in its extra
arrays), its polygons' rotations contiguous, so coherent sequences stay coherent.
"""

from __future__ import annotations

import math

import numpy as np

from ...model.cases import CaseSet, Part, case_set
from .polygons import (
    F32,
    coherent_angles,
    convexity,
    ellipse_polygon,
    pack,
    random_angles,
    record_keys,
    regular_polygon,
    rotation_inputs,
)

SIZES = (3, 4, 5, 6, 8, 12, 16, 32, 64, 128, 256, 1024)
#: Rotations per polygon in the random and coherent groups.
ROTATIONS = 64
#: Record keys sampled per polygon in the boundary groups (each at -2 .. +2 ulp).
KEYS_PER_POLYGON = 200
ULPS = (-2, -1, 0, 1, 2)


def ulp_steps(values: np.ndarray, steps) -> np.ndarray:
    """Each float32 value moved by each of `steps` ulps (flattened, value-major)."""
    out = []
    for v in np.asarray(values, F32):
        for k in steps:
            w = F32(v)
            for _ in range(abs(k)):
                w = np.nextafter(w, F32(np.inf) if k > 0 else F32(-np.inf))
            out.append(w)
    return np.array(out, F32)


def boundary_angles(rng, x, y, keys_per_polygon=KEYS_PER_POLYGON) -> dict:
    """Rotations at and next to (+-1, +-2 ulp) the BCS's record keys, in increasing order."""
    keys = record_keys(x, y)
    if len(keys) > keys_per_polygon:
        keys = np.sort(rng.choice(keys, keys_per_polygon, replace=False))
    return rotation_inputs(np.concatenate([[0.0], ulp_steps(keys, ULPS)]))


def special_angles() -> dict:
    """0 and the float32 multiples of pi/4, +-1 ulp: exact and near ties on regular polygons."""
    base = np.array([k * np.pi / 4 for k in range(8)], F32)
    return rotation_inputs(ulp_steps(base, (-1, 0, 1)))


def scaled(polygon, k):
    x, y = polygon
    return (x.astype(np.float64) * k).astype(F32), (y.astype(np.float64) * k).astype(F32)


def near_duplicates(rng, n):
    """An ellipse polygon with 4 vertices repeated 0 .. 4 ulps away (float32 makes tiny loops)."""
    x, y = ellipse_polygon(rng, n)
    xs, ys = list(x), list(y)
    for _ in range(4):
        i, u = int(rng.integers(len(xs))), int(rng.choice([0, 1, 2, 4])) * int(rng.choice([-1, 1]))
        mode = int(rng.integers(3))
        xs.insert(i + 1, ulp_steps([xs[i]], (u,))[0] if mode != 1 else xs[i])
        ys.insert(i + 1, ulp_steps([ys[i]], (u,))[0] if mode != 0 else ys[i])
    return np.array(xs, F32), np.array(ys, F32)


def lattice(rng, radius):
    """Hull of random integer points with every lattice point of its edges: exact collinear
    runs and axis-aligned edges (exact ties at 0)."""
    from .polygons import orient

    while True:
        pts = sorted({(int(a), int(b)) for a, b in rng.integers(-radius, radius + 1, (int(rng.integers(5, 40)), 2))})
        hull = []
        for chain in (pts, pts[::-1]):
            start = len(hull)
            for p in chain:
                while len(hull) >= start + 2 and orient(*hull[-2], *hull[-1], *p) <= 0:
                    hull.pop()
                hull.append(p)
            hull.pop()
        if len(hull) >= 3:
            break
    xs, ys = [], []
    for i, (a, b) in enumerate(hull):
        c, d = hull[(i + 1) % len(hull)]
        g = math.gcd(abs(c - a), abs(d - b))
        for t in range(g):
            xs.append(a + (c - a) * t // g)
            ys.append(b + (d - b) * t // g)
    x, y = np.array(xs, np.float64), np.array(ys, np.float64)
    return (x - np.round(x.mean())).astype(F32), (y - np.round(y.mean())).astype(F32)


def square():
    return np.array([1, -1, -1, 1], F32), np.array([1, 1, -1, -1], F32)


def _group_rows(rng, count: int, polygon, angles) -> list:
    """Polygons from polygon(rng, i) until about `count` rows, each with angles(rng, x, y)."""
    out, rows, i = [], 0, 0
    while rows < count:
        x, y = polygon(rng, i)
        a = angles(rng, x, y)
        out.append(((x, y), a))
        rows += len(a["angle"])
        i += 1
    return out


def _mixed(rng, x, y):
    """Random, coherent and record-boundary rotations for one polygon."""
    parts = [random_angles(rng, ROTATIONS // 2), boundary_angles(rng, x, y, 40)]
    return {k: np.concatenate([p[k] for p in parts]) for k in parts[0]}


def _sized(rng, i):
    return ellipse_polygon(rng, SIZES[i % len(SIZES)])


def _regular(rng, i):
    n = SIZES[i % len(SIZES)]
    return regular_polygon(n, 1.0, i // len(SIZES) % 2, int(rng.integers(n)))


def _regular_angles(rng, x, y):
    parts = [special_angles(), boundary_angles(rng, x, y, 60)]
    return {k: np.concatenate([p[k] for p in parts]) for k in parts[0]}


def _special(rng, x, y):
    return special_angles()


def _needle(rng, i):
    return ellipse_polygon(rng, SIZES[i % 9], 1e6, (1e-12, 1e-11), rotate=False)


#: Far scales, as exact powers of two (scaling keeps exact ties).  2^-40 and 2^60 are the
#: ends: hill takes cross products of two edges, which overflow beyond edges of 2^64 and turn
#: subnormal below edges of 2^-63, flushed to 0 in a fast-math build (hill was wrong by logic
#: on polygons at 2^100, at 2^-100, and on a 64-gon at 2^-60 under -ffast-math); at 2^-40 a
#: 1024-gon's edges (> 2^-50) keep those products normal, as the triangle's constructions stop
#: at 2^-40 for its orientations.
FAR_SCALES = (2.0**-40, 2.0**-20, 2.0**20, 2.0**60)


def _far_regular(rng, i):
    return scaled(regular_polygon(SIZES[i % len(SIZES)], 1.0, 1), FAR_SCALES[i % len(FAR_SCALES)])


#: (group, rows it aims at per --cases row, polygon(rng, i), angles(rng, x, y))
GROUPS = (
    ("ellipse random", 1.0, _sized, lambda r, x, y: random_angles(r, ROTATIONS)),
    ("ellipse coherent", 0.5, _sized, lambda r, x, y: coherent_angles(r, ROTATIONS)),
    ("record boundaries +-2 ulp", 1.0, _sized, boundary_angles),
    ("regular", 0.5, _regular, _regular_angles),
    ("square", 0.0, lambda r, i: square(), lambda r, x, y: special_angles()),
    ("near-duplicate vertices", 0.25, lambda r, i: near_duplicates(r, SIZES[1:][i % (len(SIZES) - 1)]), _mixed),
    ("collinear lattice", 0.25, lambda r, i: lattice(r, int(r.choice([10, 100, 1000]))), _mixed),
    ("lattice x2^20", 0.1, lambda r, i: scaled(lattice(r, 100), 2.0**20), _mixed),
    ("huge 1e6", 0.1, lambda r, i: scaled(_sized(r, i), 1e6), _mixed),
    ("tiny 1e-6", 0.1, lambda r, i: scaled(_sized(r, i), 1e-6), _mixed),
    ("needle 1e6 x 1e-6", 0.1, _needle, _mixed),
    # one regular polygon of every size with two vertices mirror images across the x axis
    # (phase 1): exact ties at angle 0 at every size, whatever --cases (the coverage cells)
    ("regular ties, every size", None, lambda r, i: regular_polygon(SIZES[i % len(SIZES)], 1.0, 1), _special),
    # polygons from 2^-40 to 2^60 (the groups above stop at 1e+-6 and 2^20 x 100: a kernel
    # wrong only below 1e-12 or beyond 1e12 passed), and ties at each far scale
    ("huge 2^60", 0.1, lambda r, i: scaled(_sized(r, i), 2.0**60), _mixed),
    ("tiny 2^-40", 0.1, lambda r, i: scaled(_sized(r, i), 2.0**-40), _mixed),
    ("regular ties, every scale", None, _far_regular, _special),
)


def group_rows(count: int, share: float | None) -> int:
    """Rows a group aims at: a share of --cases, or (share None) one polygon of each size
    at the special angles."""
    if share is None:
        return len(SIZES) * len(special_angles()["angle"])
    return max(1, int(count * share))


def case_parts(count: int) -> list[Part]:
    """The groups as Parts (for verify's time estimate; case_batches builds them)."""
    return [Part(group, group_rows(count, share), lambda rng, units: {}) for group, share, _, _ in GROUPS]


def groups(count: int, seed: int):
    """(group, [((x, y), rotations), ...]) per group, each from its own stream."""
    for index, (group, share, polygon, angles) in enumerate(GROUPS):
        rng = np.random.default_rng([seed, index])
        yield group, _group_rows(rng, group_rows(count, share), polygon, angles)


def case_batches(family, count: int, seed: int):
    """One CaseSet per group, numbered on (first_row)."""
    first_row = 0
    for group, made in groups(count, seed):
        cases = polygon_cases(family, [(group, polygon, a) for polygon, a in made], first_row)
        first_row += len(cases)
        yield cases


def all_cases(family, count: int, seed: int) -> CaseSet:
    """Every group's rows in one CaseSet (the rows case_batches streams)."""
    rows = [(group, polygon, a) for group, made in groups(count, seed) for polygon, a in made]
    return polygon_cases(family, rows)


def polygon_cases(family, rows, first_row: int = 0) -> CaseSet:
    """A CaseSet of [(group, (x, y), rotations), ...]: row = (polygon index, rotation)."""
    columns = [
        (group, {"poly": np.full(len(a["angle"]), p, F32), **{k: np.asarray(v, F32) for k, v in a.items()}})
        for p, (group, _, a) in enumerate(rows)
    ]
    polygons = [polygon for _, polygon, _ in rows]
    extra = {**pack(polygons), "convex": np.array([convexity(x, y) != "nonconvex" for x, y in polygons])}
    return case_set(family, columns, first_row=first_row, extra=extra)


# ---------------------------------------------------------------------------- coverage cells
#
# The aabr answer changes only where a rotation crosses a record key (an edge of the hull
# turns axis-parallel) and is ambiguous only at exact ties.  Its kernels look records up
# by a float32 angle, so no row is rounding-free for all of them: the oracle decides
# every row exactly (double-double) and the coverage table counts all rows, beside
# each piece, per polygon size.

PIECES = ("record key ±2 ulp", "special angle ±1 ulp")
#: Vertex-count bins (upper bounds, inclusive) of the polygon sizes (near-duplicate
#: vertices take 1024 to 1028).
SIZE_BOUNDS = (4, 8, 16, 64, 256, 2048)
#: Binary exponents bounding the bins of a polygon's radius (its largest |vertex|).
RADIUS_EXPONENTS = (-64, -32, -8, 8, 32, 64)
#: The float32 angles where regular polygons' extremes tie exactly (0 and multiples of π/4).
SPECIAL = np.array([k * np.pi / 4 for k in range(8)], F32)


def size_labels() -> list[str]:
    lows = (3, *(b + 1 for b in SIZE_BOUNDS[:-1]))
    return [f"{lo} .. {hi} vertices" for lo, hi in zip(lows, SIZE_BOUNDS)]


def radius_labels() -> list[str]:
    return [f"radius in [2^{lo}, 2^{hi})" for lo, hi in zip(RADIUS_EXPONENTS[:-1], RADIUS_EXPONENTS[1:])]


def coverage_cells() -> tuple[tuple[str, str], ...]:
    return tuple((piece, region) for piece in PIECES for region in (*size_labels(), *radius_labels()))


def coverage_rows(case_set) -> tuple:
    """(piece, first side, regions, counted) per row.

    Beside a record key (within 2 ulps): first side is before the key (angle < key).
    Beside a special angle (within 1 ulp): first side is a row with an exact tie (some
    side has two or more exact extremes), second one without.
    Regions: the polygon's size, and its radius (largest |vertex|) by binary exponent.
    """
    from .oracle import extreme_sets, rotated
    from .polygons import record_keys, unpack

    polygons = unpack(case_set.extra)
    columns = case_set.columns
    index = columns["poly"].astype(np.int64)
    angle = columns["angle"]
    rows = len(index)
    piece = np.full(rows, "", dtype=object)
    first = np.zeros(rows, dtype=bool)
    size = np.zeros(rows, dtype=np.int64)
    radius = np.zeros(rows)
    near_special = np.zeros(rows, dtype=bool)
    for steps in (-1, 0, 1):
        near_special |= np.isin(angle, ulp_steps(SPECIAL, (steps,)))
    for p in np.unique(index):
        mine = np.flatnonzero(index == p)
        x, y = polygons[p]
        size[mine] = len(x)
        radius[mine] = np.hypot(x.astype(np.float64), y.astype(np.float64)).max(initial=0.0)
        keys = record_keys(x, y)
        if len(keys):
            at = np.clip(np.searchsorted(keys, angle[mine]), 0, len(keys) - 1)
            for candidate in (at, np.maximum(at - 1, 0)):
                key = keys[candidate]
                beside = _within_ulps(angle[mine], key, max(ULPS))
                piece[mine[beside]] = PIECES[0]
                first[mine[beside]] = angle[mine][beside] < key[beside]
        special = mine[near_special[mine]]
        if len(special):
            (xh, xl), (yh, yl) = rotated(x, y, columns["c"][special], columns["s"][special])
            tied = np.zeros(len(special), dtype=bool)
            for hi, lo, sign in ((xh, xl, 1), (yh, yl, 1), (xh, xl, -1), (yh, yl, -1)):
                tied |= extreme_sets(hi, lo, sign).sum(axis=1) > 1
            unclaimed = piece[special] == ""
            piece[special[unclaimed]] = PIECES[1]
            first[special[unclaimed]] = tied[unclaimed]
    bins = np.searchsorted(np.asarray(SIZE_BOUNDS), size)
    labels = np.array([*size_labels(), ""], dtype=object)[np.where(size >= 3, bins, len(SIZE_BOUNDS))]
    edges = 2.0 ** np.asarray(RADIUS_EXPONENTS, dtype=np.float64)
    at = np.searchsorted(edges, radius, side="right") - 1
    inside = (at >= 0) & (at < len(edges) - 1)
    scale = np.array([*radius_labels(), ""], dtype=object)[np.where(inside, at, len(edges) - 1)]
    return piece, first, [labels, scale], np.ones(rows, dtype=bool)


def _within_ulps(a: np.ndarray, b: np.ndarray, ulps: int) -> np.ndarray:
    """|a − b| <= ulps float32 steps (a, b float32 and of one sign)."""
    ia, ib = np.asarray(a, F32).view(np.int32).astype(np.int64), np.asarray(b, F32).view(np.int32).astype(np.int64)
    return np.abs(ia - ib) <= ulps
