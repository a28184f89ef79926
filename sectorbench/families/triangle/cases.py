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


def coincident_vertex_rows() -> dict:
    """Triangles with two vertices equal (a = b, b = c, c = a) and with all three equal, from the
    integer triangles of _exact_triangle_rows (scaled, offset): points on the repeated vertex,
    on the other one, on the segment between and beyond it, and off it.  The strict predicate
    puts every one outside (no area), and every orientation is a product with an exact 0: a
    kernel that special-cases a zero-area triangle (a = b = c holding the point a) is wrong only
    here (_exact_triangle_rows' degenerate triangles are collinear, c = 2b − a, never coincident)."""
    rows = {k: [] for k in (*TRIANGLE_ARRAYS, "px", "py")}
    triangles = (((0, 0), (8, 0), (0, 8)), ((0, 0), (8, 8), (-4, 12)), ((1, 1), (9, 3), (3, 7)))

    def add(vertices, point):
        values = [*vertices[0], *vertices[1], *vertices[2], *point]
        if exactly_float32(np.array(values)[:, None])[0]:
            for key, value in zip((*TRIANGLE_ARRAYS, "px", "py"), values):
                rows[key].append(value)

    for a, b, _ in triangles:
        for k in (-12, 0, 12):
            for ox, oy in ((0.0, 0.0), (0.5, -0.25), (1024.0, 1024.0)):
                p, q = ((ox + x * 2.0**k, oy + y * 2.0**k) for x, y in (a, b))
                ex, ey = q[0] - p[0], q[1] - p[1]
                points = (
                    p,  # the repeated vertex
                    q,  # the other one
                    (p[0] + ex / 2, p[1] + ey / 2),  # between them
                    (p[0] - ex, p[1] - ey),  # beyond the repeated one, on the line
                    (p[0] - ey, p[1] + ex),  # off the line, either side
                    (p[0] + ex / 2 + ey / 2, p[1] + ey / 2 - ex / 2),
                )
                for vertices in ((p, p, q), (q, p, p), (p, q, p)):  # a = b, b = c, c = a
                    for point in points:
                        add(vertices, point)
                for point in points:  # a = b = c
                    add((p, p, p), point)
    return rows


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
        # last: a part's rows are drawn from (seed, its place in this list), so the parts added
        # later go at the end and every older part keeps its rows for a given --seed
        fixed("exact cells", exact_cell_rows()),
        fixed("exact coincident vertices", coincident_vertex_rows()),
    ]


# ---------------------------------------------------------------------------- coverage cells
#
# Exact rows beside every edge and vertex of every kind of triangle (docs/coverage.md):
# small-integer triangles of four shapes, both windings, scaled by powers of two and
# offset.  Vertices at multiples of 2^10 units and points one small lattice step from a
# vertex or an edge's midpoint keep every orientation's products within float32's 24
# bits, so the oracle marks the rows exact: a wrong answer there is a logic bug.

PIECES = ("edge ab", "edge bc", "edge ca", "vertex a", "vertex b", "vertex c")
#: Integer triangles (counter-clockwise), one per shape the coverage table names.
SHAPES = {
    "thin": ((0, 0), (64, 2), (31, 3)),
    "right": ((0, 0), (16, 0), (0, 12)),
    "obtuse": ((0, 0), (16, 0), (-5, 7)),
    "acute": ((0, 0), (16, 3), (5, 14)),
}
WINDINGS = ("counter-clockwise", "clockwise")
#: A triangle is thin when twice its area is below this share of its longest edge squared.
THIN_SHARE = 1 / 16
#: Bins of the longest edge's binary exponent.
SIZE_EXPONENTS = (-64, -32, -8, 8, 32, 64)
#: Bins of max(|ax|, |ay|): where the triangle sits (float32 cancellation grows with it).
OFFSET_EDGES = (0.0, 1.0, 32.0, 1024.0, 32768.0, 2.0**20, np.inf)
#: Where the constructed triangles sit: near the origin, then far from it (about 1.3e9 and
#: 1.4e18), with a unit of one ulp of the offset there (_offset_unit).
OFFSETS = (1.25, 40.5, 4000.5, 100000.0, 1.25 * 2.0**30, 1.25 * 2.0**60)
#: A row lies just beside an edge when its distance from the edge's line is at most this
#: share of the longest edge (a margin in roundings would not do: an axis-aligned edge's
#: orientation has one term, so every point off it is 2^24 roundings away), and beside a
#: vertex when within VERTEX_SHARE of the longest edge from it.
EDGE_SHARE = 2.0**-7
VERTEX_SHARE = 2.0**-6
#: Vertices sit at multiples of 2^VERTEX_BITS units for vertex rows, 2^EDGE_BITS for edge rows.
VERTEX_BITS, EDGE_BITS = 10, 8


def size_labels() -> list[str]:
    return [f"longest edge in [2^{lo}, 2^{hi})" for lo, hi in zip(SIZE_EXPONENTS[:-1], SIZE_EXPONENTS[1:])]


def offset_labels() -> list[str]:
    def name(edge: float) -> str:
        return f"2^{int(np.log2(edge))}" if edge > 32768 else f"{edge:g}"

    return [
        f"|a| in [{name(lo)}, {name(hi)})" if np.isfinite(hi) else f"|a| >= {name(lo)} (1e6)"
        for lo, hi in zip(OFFSET_EDGES[:-1], OFFSET_EDGES[1:])
    ]


def _offset_unit(offset: float) -> float:
    """The lattice unit of the triangles at an offset: 2^-6, or one ulp of the offset where that
    is coarser (2^(k−23) for an offset in [2^k, 2^(k+1))), so every coordinate is a float32."""
    return max(2.0**-6, 2.0 ** (int(np.floor(np.log2(offset))) - 23))


def coverage_cells() -> tuple[tuple[str, str], ...]:
    regions = (*SHAPES, *WINDINGS, *size_labels(), *offset_labels())
    return tuple((piece, region) for piece in PIECES for region in regions)


def _triangle_rows(rows: dict, vertices, unit: float, offset: float) -> None:
    """Points on, just inside and just outside each vertex and edge of one triangle."""

    def add(scaled, px, py):
        values = [offset + v * unit for v in (*scaled[0], *scaled[1], *scaled[2])]
        for key, value in zip((*TRIANGLE_ARRAYS, "px", "py"), (*values, offset + px * unit, offset + py * unit)):
            rows[key].append(value)

    big = [(x << VERTEX_BITS, y << VERTEX_BITS) for x, y in vertices]
    for i, (vx, vy) in enumerate(big):
        (ax, ay), (bx, by) = vertices[(i + 1) % 3], vertices[(i + 2) % 3]
        wx, wy = ax + bx - 2 * vertices[i][0], ay + by - 2 * vertices[i][1]  # into the corner
        for sign in (0, 1, -1):  # on the vertex, just inside, just behind it
            add(big, vx + sign * wx, vy + sign * wy)
    mid = [(x << EDGE_BITS, y << EDGE_BITS) for x, y in vertices]
    for i in range(3):
        (x0, y0), (x1, y1), (x2, y2) = mid[i], mid[(i + 1) % 3], mid[(i + 2) % 3]
        ex, ey = x1 - x0, y1 - y0
        steps = ((0, 1), (1, 0), (0, -1), (-1, 0))
        nx, ny = max(steps, key=lambda n: ex * n[1] - ey * n[0])  # the lattice step most to the left
        side = 1 if ex * (y2 - y0) - ey * (x2 - x0) > 0 else -1  # the third vertex's side
        for share in (2, 4):
            mx, my = x0 + ex // share, y0 + ey // share
            for sign in (0, side, -side):  # on the edge, just inside, just outside
                add(mid, mx + sign * nx, my + sign * ny)


def exact_cell_rows() -> dict:
    """The constructions of the coverage cells: each shape and winding at every size and offset."""
    rows = {k: [] for k in (*TRIANGLE_ARRAYS, "px", "py")}
    for vertices in SHAPES.values():
        for winding in (vertices, (vertices[0], vertices[2], vertices[1])):
            # The longest edge near 2^size; at 2^-40 the smallest product, about 2^8 units²,
            # stays normal (>= 2^-126) even in the "scale 2^-8" metamorphic copies, which
            # -ffast-math's flush-to-zero would otherwise turn into wrong answers.
            for size in (-40, -20, 0, 20, 50):
                _triangle_rows(rows, winding, 2.0 ** (size - 16), 0.0)
            for offset in OFFSETS:
                _triangle_rows(rows, winding, _offset_unit(offset), offset)
    return rows


def coverage_rows(columns: dict, reference) -> tuple:
    """(piece, inside, regions, counted) per row: see Family.coverage_rows and the constants above."""
    names = (*TRIANGLE_ARRAYS, "px", "py")
    c = {name: columns[name].astype(np.float64) for name in names}
    with np.errstate(all="ignore"):
        corners = [(c["ax"], c["ay"]), (c["bx"], c["by"]), (c["cx"], c["cy"])]
        sides = [(q[0] - p[0], q[1] - p[1]) for p, q in zip(corners, corners[1:] + corners[:1])]
        lengths = np.stack([np.hypot(*e) for e in sides], axis=1)
        longest = lengths.max(axis=1)
        twice_area = sides[0][0] * sides[2][1] - sides[0][1] * sides[2][0]  # (b − a) × (a − c), sign flipped
        distance = np.stack([np.hypot(c["px"] - x, c["py"] - y) for x, y in corners], axis=1)
        line_distance = np.stack(
            [
                np.abs(e[0] * (c["py"] - p[1]) - e[1] * (c["px"] - p[0])) / length
                for e, p, length in zip(sides, corners, lengths.T)
            ],
            axis=1,
        )
        line_distance = np.where(np.isnan(line_distance), np.inf, line_distance)
        nearest_edge = np.argmin(line_distance, axis=1)
        piece = np.where(np.min(line_distance, axis=1) <= longest * EDGE_SHARE, nearest_edge, -1)
        nearest_vertex = np.argmin(distance, axis=1)
        piece = np.where(np.min(distance, axis=1) <= longest * VERTEX_SHARE, 3 + nearest_vertex, piece)
        piece = np.where((twice_area != 0) & np.isfinite(longest), piece, -1)
        dots = [-(e[0] * f[0] + e[1] * f[1]) for e, f in zip(sides, sides[2:] + sides[:2])]  # at each corner
        shape = np.where(
            np.abs(twice_area) < THIN_SHARE * longest**2,
            0,
            np.where(
                np.logical_or.reduce([d == 0 for d in dots]),
                1,
                np.where(np.logical_or.reduce([d < 0 for d in dots]), 2, 3),
            ),
        )
        winding = np.where(twice_area < 0, 0, np.where(twice_area > 0, 1, -1))  # −(b − a)×(c − a) < 0: ccw
        size_bin = np.searchsorted(np.asarray(SIZE_EXPONENTS, dtype=float), np.log2(longest), side="right") - 1
        offset = np.maximum(np.abs(c["ax"]), np.abs(c["ay"]))
        offset_bin = np.searchsorted(np.asarray(OFFSET_EDGES), offset, side="right") - 1
    regions = [
        _labels(list(SHAPES), np.where(twice_area != 0, shape, -1)),
        _labels(list(WINDINGS), winding),
        _labels(size_labels(), np.where(size_bin < len(SIZE_EXPONENTS) - 1, size_bin, -1)),
        _labels(offset_labels(), np.where(np.isfinite(offset), offset_bin, -1)),
    ]
    return _labels(list(PIECES), piece), reference.answer.astype(bool), regions, reference.exact.copy()


def _labels(names: list[str], index: np.ndarray) -> np.ndarray:
    """Label per row from a bin index (-1 or NaN: outside every bin, labelled "")."""
    table = np.array([*names, ""], dtype=object)
    index = np.nan_to_num(np.asarray(index, dtype=float), nan=-1).astype(np.int64)
    return table[np.where((index >= 0) & (index < len(names)), index, len(names))]
