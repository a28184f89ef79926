"""Triangle inputs built to break float32 kernels (see cases.py for the shared pieces)."""

from __future__ import annotations

import itertools

import numpy as np

from ...model.cases import (
    Part,
    coordinate_transforms,
    exactly_float32,
    f32,
    fixed,
    random_bits,
    random_parts,
    ulp_grid,
    ulp_moves,
    ulp_step,
    with_special_values,
)

F32 = np.float32
TRIANGLE_ARRAYS = ("ax", "ay", "bx", "by", "cx", "cy")

#: The point-in-triangle article's case: exactly inside; its typo twin is exactly outside.
ARTICLE_TRIANGLE = {
    "ax": 261.137939,
    "ay": 8.13000488,
    "bx": 73.6379318,
    "by": 8.13000488,
    "cx": 76.9379349,
    "cy": 10.2300053,
    "px": 74.4069519,
    "py": 8.6093819,
}
ARTICLE_TRIANGLE_TYPO = {**ARTICLE_TRIANGLE, "py": 8.6193819}


def random_triangles(rng, n: int, offset: float = 0.0) -> dict:
    return {k: offset + rng.uniform(-1, 1, n) for k in (*TRIANGLE_ARRAYS, "px", "py")}


def _on_triangle_edge(rng, n: int) -> dict:
    t = f32(random_triangles(rng, n))
    s = rng.uniform(0.05, 0.95, n)
    t["px"] = t["ax"] + s * (t["bx"].astype(float) - t["ax"])
    t["py"] = t["ay"] + s * (t["by"].astype(float) - t["ay"])
    return t


def _exact_triangle_rows() -> tuple[dict, dict]:
    """Integer triangles (scaled, offset): points on vertices and edges; degenerate triangles."""
    on_boundary = {k: [] for k in (*TRIANGLE_ARRAYS, "px", "py")}
    degenerate = {k: [] for k in (*TRIANGLE_ARRAYS, "px", "py")}
    triangles = (((0, 0), (8, 0), (0, 8)), ((0, 0), (8, 8), (-4, 12)), ((1, 1), (9, 3), (3, 7)))

    def points(a, b, c):
        return [
            a,
            b,
            c,
            ((a[0] + b[0]) / 2, (a[1] + b[1]) / 2),
            ((b[0] + c[0]) / 2, (b[1] + c[1]) / 2),
            ((c[0] + a[0]) / 2, (c[1] + a[1]) / 2),
        ]

    for a, b, c in triangles:
        for k in (-12, 0, 12):
            for ox, oy in ((0.0, 0.0), (0.5, -0.25), (1024.0, 1024.0)):
                for order in ((a, b, c), (a, c, b)):
                    scaled = [(ox + x * 2.0**k, oy + y * 2.0**k) for x, y in order]
                    for px, py in points(*order):
                        values = [*scaled[0], *scaled[1], *scaled[2], ox + px * 2.0**k, oy + py * 2.0**k]
                        if exactly_float32(np.array(values)[:, None])[0]:
                            for key, value in zip((*TRIANGLE_ARRAYS, "px", "py"), values):
                                on_boundary[key].append(value)
                    # collinear: c on the line ab beyond b; points on and off the line
                    ax_, ay_ = scaled[0]
                    bx_, by_ = scaled[1]
                    line_c = (2 * bx_ - ax_, 2 * by_ - ay_)
                    for px, py in ((bx_, by_), ((ax_ + bx_) / 2, (ay_ + by_) / 2), (ax_ + 2.0**k, ay_)):
                        values = [ax_, ay_, bx_, by_, *line_c, px, py]
                        if exactly_float32(np.array(values)[:, None])[0]:
                            for key, value in zip((*TRIANGLE_ARRAYS, "px", "py"), values):
                                degenerate[key].append(value)
    return on_boundary, degenerate


TRANSFORMS = {
    **coordinate_transforms((("ax", "ay"), ("bx", "by"), ("cx", "cy"), ("px", "py")), (*TRIANGLE_ARRAYS, "px", "py")),
    "rotate vertices": lambda c: {
        **c,
        "ax": c["bx"],
        "ay": c["by"],
        "bx": c["cx"],
        "by": c["cy"],
        "cx": c["ax"],
        "cy": c["ay"],
    },
}


def _signed_zero_edge_rows() -> dict:
    """Edge vectors b − a, c − a, p − a with ±0.0 components in every sign combination.

    The unit right triangle with its zero coordinates signed every way (and its mirror
    image, the other winding), against points inside, outside, and on each edge with
    signed-zero coordinates: an orientation of ±0 must be outside, whatever its sign bit.
    """
    rows = {k: [] for k in (*TRIANGLE_ARRAYS, "px", "py")}
    z = (0.0, -0.0)
    points = [(0.25, 0.25), (-0.25, 0.25), (0.25, -0.25), (0.5, 0.5)]
    points += [(zx, 0.5) for zx in z] + [(0.5, zy) for zy in z]
    for ax, ay, bx, cy in itertools.product(z, z, z, z):
        for a, b, c in (((ax, ay), (bx, 1.0), (1.0, cy)), ((ax, ay), (1.0, cy), (bx, 1.0))):
            for px, py in points:
                for key, value in zip((*TRIANGLE_ARRAYS, "px", "py"), (*a, *b, *c, px, py)):
                    rows[key].append(value)
    return rows


def _thin(rng, n):
    base = 1000 + rng.uniform(-4, 4, (4, n))
    t = rng.random(n)
    thin = {"ax": base[0], "ay": base[1], "bx": base[2], "by": base[3]}
    thin["cx"] = ulp_step(F32(thin["ax"] + t * (thin["bx"] - thin["ax"])), rng.integers(-4, 5, n))
    thin["cy"] = ulp_step(F32(thin["ay"] + t * (thin["by"] - thin["ay"])), rng.integers(-4, 5, n))
    thin["px"], thin["py"] = 1000 + rng.uniform(-4, 4, (2, n))
    return thin


def _near_edge(rng, units):
    base = _on_triangle_edge(rng, units)
    moved = (ulp_moves(base, "px"), ulp_moves(base, "py"))
    return {k: np.concatenate([m[k] for m in moved]) for k in moved[0]}


def case_parts(count: int) -> list[Part]:
    near = max(1, count // 258)
    on_boundary, degenerate = _exact_triangle_rows()
    return [
        *random_parts(count, random_triangles),
        Part("bit patterns", count, lambda rng, n: {k: random_bits(rng, n) for k in (*TRIANGLE_ARRAYS, "px", "py")}),
        Part("thin at 1e3", count, _thin),
        Part("near edge ±64 ulp", near, _near_edge, unit_rows=258),
        Part(
            "near edge grid",
            1,
            lambda rng, _: ulp_grid({k: v[0] for k, v in _on_triangle_edge(rng, 1).items()}),
            256**2,
        ),
        fixed("exact vertex/edge", on_boundary),
        fixed("exact degenerate", degenerate),
        fixed("signed-zero edges", _signed_zero_edge_rows()),
        fixed("article case", {k: [v] for k, v in ARTICLE_TRIANGLE.items()}),
        fixed("article typo case", {k: [v] for k, v in ARTICLE_TRIANGLE_TYPO.items()}),
        Part(
            "special values",
            8,
            lambda rng, n: with_special_values(f32(random_triangles(rng, n)), (*TRIANGLE_ARRAYS, "px", "py")),
            40,
        ),
    ]
