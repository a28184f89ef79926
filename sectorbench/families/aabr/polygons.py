"""Polygons and rotations of the aabr family, and the BCS's record keys in Python.

Every generator is reproducible bit for bit from its numpy PCG64 stream: trigonometry
goes through Python's math module (the platform's libm, as the C kernels' build does),
never numpy's SIMD versions, whose last bit may differ between CPUs.

A polygon is float32 (x, y), counter-clockwise about its centre (0, 0).  A rotation is
(angle, c, s): angle a float32 in [0, 2pi), c = fl32(cos a), s = fl32(sin a) computed in
double from the float32 angle.
"""

from __future__ import annotations

import math
from fractions import Fraction

import numpy as np

from ...model.scenes import PAD_FLOATS

F32 = np.float32
#: The largest float32 below 2pi: angles are in [0, 2pi).
ANGLE_TOP = np.nextafter(F32(2 * np.pi), F32(0))
#: A frame-coherent sequence turns U(0.5, 3) degrees per frame and reverses with p = 0.1:
#: a character turning on screen (the prototype's setting, so figures compare).
COHERENT_STEP_DEG = (0.5, 3.0)
COHERENT_TURN_P = 0.1


def rotation_inputs(angles) -> dict[str, np.ndarray]:
    """float32 angles (clamped to [0, 2pi)) and their float32 cos and sin."""
    a = np.asarray(angles, dtype=np.float64).astype(F32)
    a = np.where(a.astype(np.float64) >= 2 * np.pi, ANGLE_TOP, a)
    a = np.where(a < 0, F32(0), a).astype(F32)
    c = np.array([math.cos(float(v)) for v in a], dtype=np.float64).astype(F32)
    s = np.array([math.sin(float(v)) for v in a], dtype=np.float64).astype(F32)
    return {"angle": a, "c": c, "s": s}


def random_angles(rng, m: int) -> dict[str, np.ndarray]:
    return rotation_inputs(rng.uniform(0, 2 * np.pi, m))


def coherent_angles(rng, m: int) -> dict[str, np.ndarray]:
    """A turning character: each frame +-U(0.5, 3) degrees, reversing with p = 0.1."""
    step = np.radians(rng.uniform(*COHERENT_STEP_DEG, m))
    sign = np.cumprod(np.where(rng.random(m) < COHERENT_TURN_P, -1.0, 1.0))
    return rotation_inputs((rng.uniform(0, 2 * np.pi) + np.cumsum(step * sign)) % (2 * np.pi))


def orient(ax, ay, bx, by, cx, cy) -> int:
    """Exact sign of (b - a) x (c - a) for float values."""
    ax, ay, bx, by, cx, cy = (Fraction(float(v)) for v in (ax, ay, bx, by, cx, cy))
    d = (bx - ax) * (cy - ay) - (by - ay) * (cx - ax)
    return (d > 0) - (d < 0)


def convexity(x: np.ndarray, y: np.ndarray) -> str:
    """'strict', 'weak' (collinear runs, no duplicate vertex, no reversal) or 'nonconvex',
    exactly, for a float32 polygon given counter-clockwise; turning once around."""
    X, Y = x.astype(np.float64), y.astype(np.float64)
    bx, by, cx, cy = np.roll(X, -1), np.roll(Y, -1), np.roll(X, -2), np.roll(Y, -2)
    if len(X) < 3 or np.any((bx == X) & (by == Y)):
        return "nonconvex"
    t1, t2 = (bx - X) * (cy - Y), (by - Y) * (cx - X)
    d, err = t1 - t2, 1e-14 * (np.abs(t1) + np.abs(t2)) + 1e-300
    signs = np.where(d > err, 1, np.where(d < -err, -1, 0))
    for i in np.flatnonzero(signs == 0):
        signs[i] = orient(X[i], Y[i], bx[i], by[i], cx[i], cy[i])
    e1x, e1y, e2x, e2y = bx - X, by - Y, cx - bx, cy - by
    if np.any(signs < 0) or np.any((signs == 0) & (e1x * e2x + e1y * e2y <= 0)):
        return "nonconvex"
    angle = np.arctan2(e1y, e1x)
    turn = np.where(signs == 0, 0.0, np.mod(np.roll(angle, -1) - angle, 2 * np.pi))
    if abs(turn.sum() - 2 * np.pi) > 1e-6:
        return "nonconvex"
    return "strict" if np.all(signs > 0) else "weak"


def ellipse_polygon(rng, n: int, scale=1.0, aspect=(0.3, 1.0), jitter=0.8, rotate=True):
    """n points on a random ellipse (stratified parameter angles), float32, strictly
    convex exactly, starting at a random vertex; retried until float32 keeps all n."""
    for _ in range(200):
        b = scale * rng.uniform(*aspect)
        turn = rng.uniform(0, 2 * np.pi) if rotate else 0.0
        t = (np.arange(n) + 0.5 + rng.uniform(-jitter / 2, jitter / 2, n)) * (2 * np.pi / n)
        px = np.array([scale * math.cos(v) for v in t])
        py = np.array([b * math.sin(v) for v in t])
        ct, st = math.cos(turn), math.sin(turn)
        x, y = (px * ct - py * st).astype(F32), (px * st + py * ct).astype(F32)
        if convexity(x, y) == "strict":
            k = int(rng.integers(n))
            return np.roll(x, -k), np.roll(y, -k)
    raise RuntimeError(f"could not make a strictly convex float32 polygon of {n} vertices")


def regular_polygon(n: int, radius=1.0, phase=0, start=0):
    """A regular n-gon built by exact symmetry (vertex k at turn (2k + phase) / 2n):
    mirror-image vertices get bit-identical coordinates, so there are exact ties; with
    phase 1 and 4 | n, edges lie on the axes."""
    x, y = np.empty(n, F32), np.empty(n, F32)
    for k in range(n):
        t = Fraction(2 * k + phase, 2 * n) % 1
        quadrant = math.floor(4 * t)
        rest = 4 * t - quadrant
        swap = rest > Fraction(1, 2)
        r = (1 - rest) if swap else rest
        u, v = F32(radius * math.cos(float(r) * math.pi / 2)), F32(radius * math.sin(float(r) * math.pi / 2))
        if r == Fraction(1, 2):
            u = v = F32(radius * math.sqrt(0.5))
        if swap:
            u, v = v, u
        for _ in range(quadrant):
            u, v = -v, u
        x[k], y[k] = u, v
    return np.roll(x, -start), np.roll(y, -start)


def pack(polygons: list[tuple[np.ndarray, np.ndarray]]) -> dict[str, np.ndarray]:
    """The family's extra arrays: polygons = [P, offset_0, n_0, ...] (int32), vx, vy with
    each polygon at a multiple of 16, padded with copies of its vertex 0 (aabr.h)."""
    info, xs, ys, offset = [len(polygons)], [], [], 0
    for x, y in polygons:
        n = len(x)
        length = -(-(n + 1) // PAD_FLOATS) * PAD_FLOATS
        px, py = np.full(length, x[0], F32), np.full(length, y[0], F32)
        px[:n], py[:n] = x, y
        info += [offset, n]
        xs.append(px)
        ys.append(py)
        offset += length
    if offset >= 2**31:
        raise ValueError("polygons hold more than 2^31 vertices")
    empty = np.zeros(0, F32)
    return {
        "polygons": np.array(info, dtype=np.int32),
        "vx": np.concatenate(xs) if xs else empty,
        "vy": np.concatenate(ys) if ys else empty,
    }


def unpack(extra) -> list[tuple[np.ndarray, np.ndarray]]:
    info = np.asarray(extra["polygons"])
    return [
        (np.asarray(extra["vx"][o : o + n]), np.asarray(extra["vy"][o : o + n])) for o, n in zip(info[1::2], info[2::2])
    ]


def record_keys(x: np.ndarray, y: np.ndarray) -> np.ndarray:
    """The float32 angles at which the BCS of aabr.c starts a record, computed as its build
    does (strict hull by a monotone chain with orientation in double, libm atan2, keys
    rounded to float32), sorted, without 0: verify puts rotations at and next to them."""
    n = len(x)
    order = sorted(range(n), key=lambda i: (float(x[i]), float(y[i]), i))
    X, Y = [float(v) for v in x], [float(v) for v in y]

    def orient_d(i, j, k):
        return (X[j] - X[i]) * (Y[k] - Y[i]) - (Y[j] - Y[i]) * (X[k] - X[i])

    hull: list[int] = []
    for i in order:
        while len(hull) >= 2 and orient_d(hull[-2], hull[-1], i) <= 0:
            hull.pop()
        hull.append(i)
    low = len(hull) + 1
    for i in reversed(order[:-1]):
        while len(hull) >= low and orient_d(hull[-2], hull[-1], i) <= 0:
            hull.pop()
        hull.append(i)
    hull.pop()
    if len(hull) < 3:
        return np.zeros(0, F32)
    keys = set()
    for j, a in enumerate(hull):
        b = hull[(j + 1) % len(hull)]
        beta = math.atan2(-(X[b] - X[a]), Y[b] - Y[a])
        for k in range(4):
            event = math.fmod(k * (math.pi / 2) - beta, 2 * math.pi)
            event += 2 * math.pi if event < 0 else 0.0
            event = event - 2 * math.pi if event >= 2 * math.pi else event
            key = F32(event)
            if key > 0:
                keys.add(float(key))
    return np.array(sorted(keys), F32)
