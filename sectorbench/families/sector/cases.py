"""Sector inputs built to break float32 kernels (see cases.py for the shared pieces)."""

from __future__ import annotations

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
    ]
