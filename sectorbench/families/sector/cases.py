"""Sector inputs built to break float32 kernels (see cases.py for the shared pieces)."""

from __future__ import annotations

import math

import numpy as np

from ...model.cases import (
    Part,
    coordinate_transforms,
    exactly_float32,
    f32,
    fixed,
    random_bits,
    random_parts,
    signed_zero_rows,
    ulp_grid,
    ulp_moves,
    with_special_values,
)

F32 = np.float32


def random_sectors(rng, n: int, offset: float = 0.0) -> dict:
    phi = rng.uniform(0, 2 * np.pi, n)
    return {
        "cx": offset + rng.uniform(-1, 1, n),
        "cy": offset + rng.uniform(-1, 1, n),
        "ux": np.cos(phi),
        "uy": np.sin(phi),
        "r": rng.uniform(0.05, 2, n),
        "theta": rng.uniform(0.01, np.pi - 0.01, n),
        "px": offset + rng.uniform(-1, 1, n),
        "py": offset + rng.uniform(-1, 1, n),
    }


def _on_arc(rng, n: int) -> dict:
    s = f32(random_sectors(rng, n))
    phi = np.arctan2(s["uy"], s["ux"]) + s["theta"].astype(float) * rng.uniform(-0.9, 0.9, n)
    r = s["r"].astype(float)
    s["px"], s["py"] = s["cx"] + r * np.cos(phi), s["cy"] + r * np.sin(phi)
    return s


def _on_edge(rng, n: int) -> dict:
    s = f32(random_sectors(rng, n))
    phi = np.arctan2(s["uy"], s["ux"]) + s["theta"].astype(float) * rng.choice([-1, 1], n)
    t = s["r"].astype(float) * rng.uniform(0.1, 0.9, n)
    s["px"], s["py"] = s["cx"] + t * np.cos(phi), s["cy"] + t * np.sin(phi)
    return s


def _along_u(rng, n: int) -> dict:
    """p = c + t·u rounded to float32: straight ahead of the apex, where (D/|D|)·u rounds to
    1 or just above (acosf of it is NaN unless clamped)."""
    s = f32(random_sectors(rng, n))
    t = s["r"].astype(float) * rng.uniform(0.01, 0.99, n)
    s["px"], s["py"] = s["cx"] + t * s["ux"], s["cy"] + t * s["uy"]
    return s


def _pythagorean_arc_rows() -> dict:
    """p exactly on the arc: c + (a, b)·2^k with r = c·2^k for triples (a, b, c)."""
    rows = {k: [] for k in ("cx", "cy", "ux", "uy", "r", "theta", "px", "py")}
    for a, b, c in ((3, 4, 5), (5, 12, 13), (8, 15, 17), (7, 24, 25), (20, 21, 29), (12, 35, 37)):
        for k in (-20, -10, -3, 0, 3, 10, 20):
            for sx, sy in ((1, 1), (-1, 1), (1, -1), (-1, -1)):
                for x, y in ((a, b), (b, a)):
                    for cx, cy in ((0.0, 0.0), (0.5, -0.25), (-3.0, 2.0)):
                        px, py = cx + sx * x * 2.0**k, cy + sy * y * 2.0**k
                        if not exactly_float32(np.array([[px], [py]]))[0]:
                            continue
                        for key, value in (
                            ("cx", cx),
                            ("cy", cy),
                            ("ux", sx * x / c),
                            ("uy", sy * y / c),
                            ("r", c * 2.0**k),
                            ("theta", 1.0),
                            ("px", px),
                            ("py", py),
                        ):
                            rows[key].append(value)
    return rows


def _perpendicular_rows() -> dict:
    """cos_theta = +-0, u axis-aligned, p on the perpendicular: exactly on an edge ray."""
    rows = {k: [] for k in ("cx", "cy", "ux", "uy", "r", "cos_theta", "px", "py")}
    zero, minus_zero = 0.0, -0.0
    for ux, uy in ((1.0, zero), (-1.0, zero), (zero, 1.0), (zero, -1.0), (1.0, minus_zero), (minus_zero, -1.0)):
        for cos in (zero, minus_zero):
            for t in (0.5, -0.5, 1.0, -1.0, 0.125, -3.0):
                for cx, cy in ((0.0, 0.0), (0.5, 0.25), (-1.0, 3.0)):
                    for key, value in (
                        ("cx", cx),
                        ("cy", cy),
                        ("ux", ux),
                        ("uy", uy),
                        ("r", 4.0),
                        ("cos_theta", cos),
                        ("px", cx - t * uy),
                        ("py", cy + t * ux),
                    ):
                        rows[key].append(value)
    return rows


def _apex_rows() -> dict:
    rows = {k: [] for k in ("cx", "cy", "ux", "uy", "r", "cos_theta", "px", "py")}
    for cx, cy, px, py in (
        (0.0, 0.0, 0.0, 0.0),
        (0.0, 0.0, -0.0, -0.0),
        (-0.0, 0.0, 0.0, -0.0),
        (0.25, -0.5, 0.25, -0.5),
        (-7.0, 1e3, -7.0, 1e3),
    ):
        for cos in (0.5, -0.5, 0.0, -0.0, 1 - 2.0**-24, -1 + 2.0**-24):
            for ux, uy in ((1.0, 0.0), (0.6, 0.8)):
                for key, value in (
                    ("cx", cx),
                    ("cy", cy),
                    ("ux", ux),
                    ("uy", uy),
                    ("r", 1.0),
                    ("cos_theta", cos),
                    ("px", px),
                    ("py", py),
                ):
                    rows[key].append(value)
    return rows


def _scale_lengths(c: dict, out: dict, k: int) -> dict:
    out["r"], out["r2"] = c["r"] * F32(2.0**k), c["r2"] * F32(4.0**k)
    return out


TRANSFORMS = coordinate_transforms((("cx", "cy"), ("ux", "uy"), ("px", "py")), ("cx", "cy", "px", "py"), _scale_lengths)


def _signed_zero_d_rows() -> dict:
    """D = p − c with a ±0.0 component in every sign combination, inside and outside.

    A kernel keyed on the sign of dx or dy (an atanf(dy/dx) quadrant fix on dx < 0, a
    copysign) sees −0.0 here and nowhere else; u along and across the axes, cos θ of
    both signs, and two radii put rows on both sides of every constraint.
    """
    s = 0.6
    directions = ((0.0, 1.0), (0.0, -1.0), (1.0, 0.0), (-1.0, 0.0), (s, 0.8), (-s, 0.8), (1.0, -0.0), (-0.0, -1.0))
    assignments = [
        {"ux": ux, "uy": uy, "r": r, "cos_theta": k}
        for ux, uy in directions
        for k in (0.5, -0.5, 0.0, 0.9375)
        for r in (2.0, 0.75)
    ]
    return signed_zero_rows((("px", "cx"), ("py", "cy")), assignments, (1.0, -1.0, 0.5))


def _bit_patterns(rng, n):
    phi = rng.uniform(0, 2 * np.pi, n)
    return {
        **{k: random_bits(rng, n) for k in ("cx", "cy", "px", "py")},
        "ux": np.cos(phi),
        "uy": np.sin(phi),
        "r2": random_bits(rng, n, positive=True),
        "cos_theta": rng.uniform(-1, 1, n),
    }


def _near(maker):
    def make(rng, units):
        base = maker(rng, units)
        moved = (ulp_moves(base, "px"), ulp_moves(base, "py"))
        return {k: np.concatenate([m[k] for m in moved]) for k in moved[0]}

    return make


def _cos_extremes(rng, units):
    rows = random_sectors(rng, units)
    del rows["theta"]
    variants = [{**rows, "cos_theta": np.full(units, cos)} for cos in (1 - 2.0**-24, 0.0, -1 + 2.0**-24)]
    return {k: np.concatenate([v[k] for v in variants]) for k in variants[0]}


def _scaled(scale):
    def make(rng, units):
        rows = random_sectors(rng, units)
        return {k: np.asarray(v) * (1 if k in ("ux", "uy", "theta") else scale) for k, v in rows.items()}

    return make


def _non_unit_u(rng, units):
    rows = random_sectors(rng, units)
    variants = [{**rows, "ux": rows["ux"] * scale, "uy": rows["uy"] * scale} for scale in (1 + 2.0**-10, 1e3, 1e-3)]
    return {k: np.concatenate([v[k] for v in variants]) for k in variants[0]}


def _denormal_d(rng, units):
    rows = random_sectors(rng, units)
    return {
        **rows,
        "cx": np.zeros(units),
        "cy": np.zeros(units),
        "px": rng.uniform(-1, 1, units) * 1e-40,
        "py": rng.uniform(-1, 1, units) * 1e-40,
    }


def _subnormal_lengths(rng, units):
    """D with a subnormal |D|² (|D| of 2^-64 .. 2^-71, so |D|² is not 0 but below float32's
    normal range), and sectors whose r² is subnormal (r of 2^-64 .. 2^-71) with points at
    0.1 .. 0.9 r: each inside or outside by its angle.  A kernel that takes a subnormal |D|²
    for the apex, or a subnormal r² for an empty sector, is wrong only here (the "denormal D"
    rows' |D|² underflows to 0)."""
    rows = random_sectors(rng, units)
    zeros = np.zeros(units)
    length = 2.0 ** -rng.integers(64, 72, units).astype(float)
    phi = rng.uniform(0, 2 * np.pi, units)
    small_d = {**rows, "cx": zeros, "cy": zeros, "px": length * np.cos(phi), "py": length * np.sin(phi)}
    share = rng.uniform(0.1, 0.9, units)
    small_r = {**small_d, "r": length, "px": length * share * np.cos(phi), "py": length * share * np.sin(phi)}
    return {k: np.concatenate([small_d[k], small_r[k]]) for k in small_d}


def _special_values(rng, units):
    special = f32(random_sectors(rng, units))
    in_r_theta = with_special_values(special, ("cx", "cy", "ux", "uy", "r", "theta", "px", "py"))
    r2 = {
        **{k: v for k, v in special.items() if k not in ("r", "theta")},
        "r2": special["r"] * special["r"],
        "cos_theta": np.cos(special["theta"].astype(float)),
    }
    in_r2 = with_special_values(f32(r2), ("r2", "cos_theta"))
    return in_r_theta, in_r2


#: Half-angles within this of 0 (needle cones) or of π (near-π cones) are drawn apart: the
#: random sectors' θ stays in [0.01, π − 0.01], and random points never land inside a needle
#: nor in the sliver behind a near-π cone.
EXTREME_THETA = 0.01
#: ... down to this distance from 0 or π (float32 θ resolves π − 1e-6; cos θ rounds to ±1
#: below ~3.5e-4, an empty cone or a whole disc less its back ray).
EXTREME_THETA_MIN = 1e-6
#: Angles from u of each cone's points, as shares f of θ (φ = f·θ) and of π − θ
#: (φ = π − f·(π − θ)): inside (0.5, and 0.9 of the far side), just beside each edge ray
#: (0.9, 1.1), well outside (2); 0 and π are the axis and the back ray.
EXTREME_SHARES = (0.5, 0.9, 1.1, 2.0)


def _extreme_theta(rng, n: int) -> np.ndarray:
    """θ over the whole (0, π): two in five log-uniform in [1e-6, 1e-2] (needles), two in five
    that close to π, one in five uniform; half of the extremes within 1e-3 .. 1e-2, where
    cos θ is hundreds of float32 steps from ±1 and a wrong answer is a logic bug by margin."""
    low = np.where(rng.random(n) < 0.5, np.log(EXTREME_THETA_MIN), np.log(1e-3))
    extreme = np.exp(rng.uniform(low, np.log(EXTREME_THETA)))
    kind = rng.integers(0, 5, n)
    return np.where(kind < 2, extreme, np.where(kind < 4, np.pi - extreme, rng.uniform(0, np.pi, n)))


def _extreme_half_angles(rng, units):
    """Cones of any half-angle, needles and near-π ones above all, with points placed in them
    (random points never are): along u inside the radius and just inside and outside the arc
    (r·(1 ± 2^-9), r·(1 − 2^-18)), at EXTREME_SHARES of θ and of π − θ on either side of u
    (beside each edge ray, inside and outside), on the back ray (−u), and the same four
    angles at r/64, beside the apex.  16 rows a cone."""
    base = random_sectors(rng, units)
    theta = _extreme_theta(rng, units)
    base["theta"] = theta
    r, heading = np.asarray(base["r"]), np.arctan2(base["uy"], base["ux"])
    mid = r * rng.uniform(0.1, 0.9, units)
    placed = [(0.0, r * (1 + 2.0**-9)), (0.0, r * (1 - 2.0**-9)), (0.0, r * (1 - 2.0**-18)), (np.pi, mid)]
    for share in EXTREME_SHARES:
        placed += [(share * theta, mid), (np.pi - share * (np.pi - theta), mid)]
    for share in (0.5, 2.0):
        placed += [(share * theta, r / 64), (np.pi - share * (np.pi - theta), r / 64)]
    rows = {k: [] for k in base}
    for angle, distance in placed:
        phi = heading + rng.choice([-1.0, 1.0], units) * angle
        for key, value in base.items():
            rows[key].append(value)
        rows["px"][-1] = base["cx"] + distance * np.cos(phi)
        rows["py"][-1] = base["cy"] + distance * np.sin(phi)
    return {k: np.concatenate(v) for k, v in rows.items()}


def case_parts(count: int) -> list[Part]:
    near = max(1, count // 258)
    return [
        *random_parts(count, random_sectors),
        Part("bit patterns", count, _bit_patterns),
        Part("near arc ±64 ulp", near, _near(_on_arc), unit_rows=258),
        Part("near arc grid", 1, lambda rng, _: ulp_grid({k: v[0] for k, v in _on_arc(rng, 1).items()}), 256**2),
        Part("near edge ±64 ulp", near, _near(_on_edge), unit_rows=258),
        Part("near edge grid", 1, lambda rng, _: ulp_grid({k: v[0] for k, v in _on_edge(rng, 1).items()}), 256**2),
        Part("along u", max(256, count // 16), _along_u),
        fixed("exact arc", _pythagorean_arc_rows()),
        fixed("exact edge", _perpendicular_rows()),
        fixed("exact apex", _apex_rows()),
        fixed("signed-zero D", _signed_zero_d_rows()),
        Part("cos_theta extreme", 64, _cos_extremes, unit_rows=3),
        Part("tiny r2", 64, _scaled(1e-16)),
        Part("huge r2", 64, _scaled(1e15)),
        Part("non-unit u", 64, _non_unit_u, unit_rows=3),
        Part("denormal D", 32, _denormal_d),
        Part("special values", 8, lambda rng, n: _special_values(rng, n)[0], unit_rows=40),
        Part("special values", 8, lambda rng, n: _special_values(rng, n)[1], unit_rows=10),
        # last: a part's rows are drawn from (seed, its place in this list), so the parts added
        # later go at the end and every older part keeps its rows for a given --seed
        fixed("exact cells", exact_cell_rows()),
        Part("subnormal lengths", 64, _subnormal_lengths, unit_rows=2),
        Part("extreme half-angles", max(256, count // 32), _extreme_half_angles, unit_rows=16),
        fixed("exact cells, unit u", unit_u_cell_rows()),
    ]


# ---------------------------------------------------------------------------- coverage cells
#
# Exact rows beside every boundary piece in every region (docs/coverage.md).  An edge ray
# through an exactly representable point at any angle: D = (d1, d2)·2^e for a
# Pythagorean triple (d1, d2, m), so |D| = m·2^e is exact; u = m·(p1, p2)·2^-f for
# integers p near 2^f/m·(cos α, sin α), so |u| is within ~2^-f of 1; then
# D·u = |D|·k exactly for k = (d1 p1 + d2 p2)·2^-f, a float32 of about f bits.  With
# f = 12 − bits(m), D·u, its square, |D|·k and |D|²·k² all fit float32's 24 bits: the
# oracle marks the rows exact.  k ± 2^-f puts D just inside or just outside the ray.

#: Pieces of the sector's boundary, as the coverage table names them.
PIECES = ("arc", "left edge ray", "right edge ray", "apex")
#: Half-angle bins: (0, π) in THETA_BINS equal parts (the sign of cos θ follows the bin), less
#: the needle and near-π cones (within EXTREME_THETA of 0 and π), regions of their own.
THETA_BINS = 8
#: r² bins by binary exponent: from just above float32's normal minimum to near its maximum.
R2_EXPONENTS = (-126, -80, -40, -8, 8, 40, 80, 128)
#: |c| bins (the apex's offset from the origin, where float32 cancellation bites), up to where
#: a sector still holds points: beyond |c| ~ 2^87 every D ≠ 0 is at least an ulp of c, and its
#: |D|² overflows float32.
OFFSET_EDGES = (0.0, 1.0, 32.0, 1024.0, 32768.0, 2.0**20, np.inf)
#: The apexes of the constructed rows: near the origin, then far from it (about 1.3e9, 1.4e18
#: and 9.4e22), where D must be longer to be exact (_offset_exponent).  At 1.25·2^76 the largest
#: r² is ~5.6e37, below float32's maximum; much further, r² = 4|D|² overflows.
OFFSETS = (0.0, 1.25, 40.5, 4000.5, 100000.0, 1.25 * 2.0**30, 1.25 * 2.0**60, 1.25 * 2.0**76)
#: A row lies "just beside" a piece when its constraint's margin is at most this many
#: float32 roundings (2^-7 relative): the nearest exact rows off an edge ray sit ~2^15 away.
NEAR_MARGIN = 2.0**17
#: ... and beside the apex when |D| <= r·APEX_SHARE.
APEX_SHARE = 2.0**-4
#: Pythagorean triples (d1, d2, m) for the directions of D; m < 16 keeps f >= 8.
TRIPLES = ((1, 0, 1), (3, 4, 5), (5, 12, 13))


def theta_labels() -> list[str]:
    """The needle region, the THETA_BINS bins, the near-π region (coverage_rows' index order)."""
    bins = [
        f"θ in [{i}π/8, {i + 1}π/8), cos θ {'>' if i < THETA_BINS // 2 else '≤'} 0".replace(
            "[0π/8", f"[{EXTREME_THETA:g}"
        ).replace("8π/8)", f"π − {EXTREME_THETA:g})")
        for i in range(THETA_BINS)
    ]
    return [f"θ < {EXTREME_THETA:g} (needle)", *bins, f"θ > π − {EXTREME_THETA:g} (near π)"]


def r2_labels() -> list[str]:
    return [f"r² in [2^{lo}, 2^{hi})" for lo, hi in zip(R2_EXPONENTS[:-1], R2_EXPONENTS[1:])]


def offset_labels() -> list[str]:
    def name(edge: float) -> str:
        return f"2^{int(np.log2(edge))}" if edge > 32768 else f"{edge:g}"

    return [
        f"|c| in [{name(lo)}, {name(hi)})" if np.isfinite(hi) else f"|c| >= {name(lo)} (1e6)"
        for lo, hi in zip(OFFSET_EDGES[:-1], OFFSET_EDGES[1:])
    ]


def _offset_exponent(offset: float) -> int:
    """The binary exponent of D's unit for an apex at (offset, −offset): a sixteenth of D's
    apex row (D·2^-5) must still be a whole number of c's ulps (2^(k−23) for c in [2^k, 2^(k+1)))."""
    return max(0, int(np.floor(np.log2(offset))) - 18) if offset else 0


def coverage_cells() -> tuple[tuple[str, str], ...]:
    regions = (*theta_labels(), *r2_labels(), *offset_labels())
    return tuple((piece, region) for piece in PIECES for region in regions)


def _directions():
    """Every sign and order of each triple's legs: D's directions."""
    out = []
    for a, b, m in TRIPLES:
        for x, y in dict.fromkeys(((a, b), (b, a))):
            for sx, sy in ((1, 1), (-1, 1), (1, -1), (-1, -1)):
                if (sx * x, sy * y, m) not in out:
                    out.append((sx * x, sy * y, m))
    return out


def _ray_rows(rows: dict, d1: int, d2: int, m: int, theta: float, side: int, e: int, cx: float, cy: float) -> None:
    """Rows beside each piece for D = (d1, d2)·2^e on the `side` edge ray (+1 left) of half-angle ~theta."""
    f = 12 - m.bit_length()
    alpha = np.arctan2(d2, d1) - side * theta
    p1, p2 = (int(round(2.0**f / m * v)) for v in (np.cos(alpha), np.sin(alpha)))
    u = (m * p1 * 2.0**-f, m * p2 * 2.0**-f)
    _boundary_rows(rows, (cx, cy), u, (d1 * 2.0**e, d2 * 2.0**e), 2.0**-f, d1 * p1 + d2 * p2, m * m * 4.0**e)


def _boundary_rows(rows: dict, c, u, d, k_unit: float, on: int, s: float) -> None:
    """Ten rows for the apex c, direction u and D = d on an edge ray, cos θ = on·k_unit and
    |D|² = s: on the ray and a step of k_unit either side, on the arc and a float32 step either
    side, beside the apex on both sides, and the apex itself."""

    def add(k_units, r2, scale=1.0):
        for key, value in (
            ("cx", c[0]),
            ("cy", c[1]),
            ("ux", u[0]),
            ("uy", u[1]),
            ("r2", r2),
            ("cos_theta", k_units * k_unit),
            ("px", c[0] + d[0] * scale),
            ("py", c[1] + d[1] * scale),
        ):
            rows[key].append(value)

    for dk in (0, 1, -1):  # on the ray, just outside, just inside
        add(on + dk, 4 * s)
    s32 = F32(s)
    for r2 in (s32, np.nextafter(s32, F32(np.inf)), np.nextafter(s32, F32(0))):  # on, inside, outside the arc
        add(on - 1, float(r2))
    for dk in (1, -1):  # a sixteenth of the radius out: beside the apex, outside and inside the angle
        add(on + dk, 4 * s, scale=APEX_SHARE / 2)
    add(on, 4 * s, scale=0.0)  # the apex itself


def exact_cell_rows() -> dict:
    """The constructions of the coverage cells: every region of each dimension, every piece."""
    rows = {k: [] for k in ("cx", "cy", "ux", "uy", "r2", "cos_theta", "px", "py")}
    directions = _directions()
    by_triple = [[d for d in directions if d[2] == m] for _, _, m in TRIPLES]
    step = np.pi / THETA_BINS
    count = 0

    def some_directions():
        nonlocal count
        count += 1
        return [group[count % len(group)] for group in by_triple]

    for i in range(THETA_BINS):
        for theta in ((i + 0.25) * step, (i + 0.5) * step, (i + 0.75) * step):
            for d1, d2, m in some_directions():
                for side in (1, -1):
                    _ray_rows(rows, d1, d2, m, theta, side, 0, 0.0, 0.0)
    wide_and_narrow = (3 * np.pi / 16, 11 * np.pi / 16)
    for exponent in (-110, -60, -24, 0, 24, 60, 124):  # r² = 4 m² 4^e near 2^exponent
        for theta in wide_and_narrow:
            for d1, d2, m in some_directions():
                e = int(round((exponent - 2 - 2 * np.log2(m)) / 2))
                for side in (1, -1):
                    _ray_rows(rows, d1, d2, m, theta, side, e, 0.0, 0.0)
    for offset in OFFSETS:
        for theta in wide_and_narrow:
            for d1, d2, m in some_directions():
                for side in (1, -1):
                    _ray_rows(rows, d1, d2, m, theta, side, _offset_exponent(offset), offset, -offset)
    return rows


def coverage_rows(columns: dict, reference, bound: float) -> tuple:
    """(piece, inside, regions, counted) per row: see Family.coverage_rows and the constants above.

    No row beside a needle's or a near-π cone's edge is exact: 1 − |cos θ| below 2^-11 takes
    more than 12 bits of cos θ, so cos²θ rounds.  In those two θ regions a row also counts when
    a wrong answer there lies beyond `bound` roundings (the family's default rounding bound: a
    logic bug by margin); such a row counts in the θ dimension only (its other labels None),
    so the r² and offset cells still show where exact rows are missing.
    """
    from .oracle import sector_exact

    names = ("cx", "cy", "ux", "uy", "r2", "cos_theta", "px", "py")
    result = sector_exact(*(columns[name] for name in names))
    c = {name: columns[name].astype(np.float64) for name in names}
    with np.errstate(all="ignore"):
        dx, dy = c["px"] - c["cx"], c["py"] - c["cy"]
        s = dx * dx + dy * dy
        radius_margin = np.where(np.isnan(result.radius_margin), np.inf, result.radius_margin)
        angle_margin = np.where(np.isnan(result.angle_margin), np.inf, result.angle_margin)
        # The constraint that decides: for an outside row one it breaks, else the nearer one.
        radius_decides = np.where(result.radius_ok == result.angle_ok, radius_margin <= angle_margin, ~result.radius_ok)
        margin = np.where(radius_decides, radius_margin, angle_margin)
        cross = c["ux"] * dy - c["uy"] * dx
        edge = np.where(cross > 0, PIECES[1], np.where(cross < 0, PIECES[2], ""))
        piece = np.where(margin <= NEAR_MARGIN, np.where(radius_decides, PIECES[0], edge), "")
        apex = (s <= c["r2"] * APEX_SHARE**2) & (c["r2"] > 0) & np.isfinite(c["r2"])
        piece = np.where(apex, PIECES[3], piece).astype(object)
        length = np.hypot(c["ux"], c["uy"])
        theta = np.arccos(np.clip(c["cos_theta"] / length, -1, 1))
        theta_bin = 1 + np.clip(np.floor(theta / (np.pi / THETA_BINS)), 0, THETA_BINS - 1)
        theta_bin = np.where(
            theta < EXTREME_THETA, 0, np.where(theta > np.pi - EXTREME_THETA, THETA_BINS + 1, theta_bin)
        )
        r2_bin = np.searchsorted(np.asarray(R2_EXPONENTS, dtype=float), np.log2(c["r2"]), side="right") - 1
        offset = np.maximum(np.abs(c["cx"]), np.abs(c["cy"]))
        offset_bin = np.searchsorted(np.asarray(OFFSET_EDGES), offset, side="right") - 1
    extreme = np.isfinite(theta) & ((theta_bin == 0) | (theta_bin == THETA_BINS + 1))
    by_margin = extreme & ~reference.exact & (reference.margin > bound) & np.isfinite(reference.margin)
    regions = [
        _labels(theta_labels(), np.where(np.isfinite(theta), theta_bin, -1)),
        _labels(r2_labels(), np.where((r2_bin >= 0) & (r2_bin < len(R2_EXPONENTS) - 1), r2_bin, -1)),
        _labels(offset_labels(), np.where(np.isfinite(offset), offset_bin, -1)),
    ]
    for labels in regions[1:]:
        labels[by_margin] = None
    return piece, reference.answer.astype(bool), regions, reference.exact | by_margin


def _labels(names: list[str], index: np.ndarray) -> np.ndarray:
    """Label per row from a bin index (-1 or NaN: outside every bin, labelled "")."""
    table = np.array([*names, ""], dtype=object)
    index = np.nan_to_num(np.asarray(index, dtype=float), nan=-1).astype(np.int64)
    return table[np.where((index >= 0) & (index < len(names)), index, len(names))]


# ------------------------------------------------------------------ coverage cells, unit u
#
# The cells above use u of length 1 ± 2^-9, outside the "unit u" contract (|u|² within
# 2^-20 of 1): a kernel that declares it never saw them.  These rows rebuild every cell
# with u = (p1, p2)·2^-12 for the lattice points with p1² + p2² = 2^24 + δ, 0 < |δ| ≤ 16 —
# |u|² = 1 + δ·2^-24, inside the contract — and D along an axis, D = ±2^e·(1, 0) or
# ±2^e·(0, 1): |D| = 2^e and cos θ = D·u/|D| = ±p·2^-12 exactly, so p lies exactly on
# the edge ray.  Every product then has at most 24 bits (p < 4095 has 12), so both kernel
# forms evaluate exactly.
#
# The sign of δ is chosen with cos θ's: a unit-u kernel may measure the angle to u, whose
# boundary D·u = |D|·|u|·cos θ lies δ/2·(2^12/p⊥)² float32 roundings beside the oracle's
# D·u = |D|·cos θ (p⊥ the component of u across D).  With δ·cos θ > 0 the on-ray row is
# outside for both, so a kernel calling it inside is wrong whichever it measures; with
# |δ| ≥ UNIT_U_MIN_DELTA that gap is ≥ UNIT_U_MIN_GAP roundings, past what an angle-form
# kernel's own roundings of sin θ can cross (localframe, cross: one or two).

#: Fractional bits of u's components: 12, so that (u·D)² fits float32's 24 bits.
UNIT_U_BITS = 12
#: |p1² + p2² − 2^24| at most this: |u|² − 1 ≤ 16·2^-24 = 2^-20 (sector UNIT_TOLERANCE).
UNIT_U_MAX_DELTA = 16
#: ... and at least this, with UNIT_U_MIN_GAP, so the on-ray rows stay clear of the angle form's boundary.
UNIT_U_MIN_DELTA = 3
UNIT_U_MIN_GAP = 3.0


def _unit_lattice() -> list[tuple[int, int, int]]:
    """(p1, p2, δ): every lattice point with p1² + p2² = 2^24 + δ, UNIT_U_MIN_DELTA ≤ |δ| ≤
    UNIT_U_MAX_DELTA, in every quadrant."""
    n = 1 << (2 * UNIT_U_BITS)
    quadrant = set()
    for p1 in range(1, 1 << UNIT_U_BITS):
        root = math.isqrt(n - p1 * p1)
        for p2 in range(max(1, root - 1), root + 3):
            delta = p1 * p1 + p2 * p2 - n
            if UNIT_U_MIN_DELTA <= abs(delta) <= UNIT_U_MAX_DELTA:
                quadrant.add((p1, p2, delta))
    return sorted({(s1 * p1, s2 * p2, d) for p1, p2, d in quadrant for s1 in (1, -1) for s2 in (1, -1)})


def _unit_u_rays() -> list[tuple[float, int, int, int, int, int, int]]:
    """(θ, side, p1, p2, axis, sign, along): u = (p1, p2)·2^-12, D = sign·(axis 0: x, 1: y),
    `along` = D·u in units of 2^-12 (cos θ = along·2^-12), for every lattice u and axis whose
    on-ray row is outside under both readings of the angle (see above)."""
    out = []
    for p1, p2, delta in _unit_lattice():
        for axis in (0, 1):
            for sign in (1, -1):
                along, across = sign * (p1, p2)[axis], (p1, p2)[1 - axis]
                gap = abs(delta) / 2 * (2.0**UNIT_U_BITS / across) ** 2
                if along * delta <= 0 or abs(along) >= (1 << UNIT_U_BITS) - 1 or gap < UNIT_U_MIN_GAP:
                    continue
                d = (sign, 0) if axis == 0 else (0, sign)
                cross = p1 * d[1] - p2 * d[0]  # u × D: > 0, D left of u
                theta = math.acos(along / math.sqrt(p1 * p1 + p2 * p2))
                out.append((theta, 1 if cross > 0 else -1, p1, p2, axis, sign, along))
    return sorted(out)


def _unit_u_ray_rows(rows: dict, ray, e: int, cx: float, cy: float) -> None:
    """The ten rows of _ray_rows for one lattice u and axis D of length 2^e."""
    _, _, p1, p2, axis, sign, along = ray
    unit = 2.0**-UNIT_U_BITS
    length = sign * 2.0**e
    d = (length, 0.0) if axis == 0 else (0.0, length)
    _boundary_rows(rows, (cx, cy), (p1 * unit, p2 * unit), d, unit, along, 4.0**e)


def unit_u_cell_rows() -> dict:
    """exact_cell_rows' cells again with u inside the unit-u contract: every θ bin, r² bin,
    offset, both edge rays (each θ bin's nearest lattice rays on each side)."""
    rows = {k: [] for k in ("cx", "cy", "ux", "uy", "r2", "cos_theta", "px", "py")}
    rays = _unit_u_rays()

    def nearest(theta: float, side: int, count: int = 2):
        mine = [ray for ray in rays if ray[1] == side]
        return sorted(mine, key=lambda ray: abs(ray[0] - theta))[:count]

    step = np.pi / THETA_BINS
    for i in range(THETA_BINS):
        for side in (1, -1):
            for ray in nearest((i + 0.5) * step, side):
                if i * step <= ray[0] < (i + 1) * step:
                    _unit_u_ray_rows(rows, ray, 0, 0.0, 0.0)
    wide_and_narrow = (3 * np.pi / 16, 11 * np.pi / 16)
    for exponent in (-110, -60, -24, 0, 24, 60, 124):  # r² = 4·4^e near 2^exponent
        for theta in wide_and_narrow:
            for side in (1, -1):
                for ray in nearest(theta, side, 1):
                    _unit_u_ray_rows(rows, ray, int(round((exponent - 2) / 2)), 0.0, 0.0)
    for offset in OFFSETS:
        for theta in wide_and_narrow:
            for side in (1, -1):
                for ray in nearest(theta, side, 1):
                    _unit_u_ray_rows(rows, ray, _offset_exponent(offset), offset, -offset)
    return rows
