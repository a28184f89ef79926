"""Sector inputs built to break float32 kernels (see cases.py for the shared pieces)."""

from __future__ import annotations

import numpy as np

from ...cases import (
    Builder,
    CaseSet,
    add_random_groups,
    coordinate_transforms,
    exactly_float32,
    f32,
    random_bits,
    ulp_grid,
    ulp_moves,
    with_metamorphic,
    with_special_values,
)

F32 = np.float32
#: The CaseSet.exact_boundary key of kernels that take (r, theta).
R_THETA = "r,theta"


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


def sector_cases(family, count: int, seed: int) -> CaseSet:
    rng = np.random.default_rng(seed)
    b = Builder(family)
    near = max(1, count // 258)
    add_random_groups(b, rng, count, random_sectors)
    bits = {k: random_bits(rng, count) for k in ("cx", "cy", "px", "py")}
    phi = rng.uniform(0, 2 * np.pi, count)
    b.add(
        "bit patterns",
        {
            **bits,
            "ux": np.cos(phi),
            "uy": np.sin(phi),
            "r2": random_bits(rng, count, positive=True),
            "cos_theta": rng.uniform(-1, 1, count),
        },
    )
    for name, maker in (("near arc", _on_arc), ("near edge", _on_edge)):
        base = maker(rng, near)
        b.add(f"{name} ±64 ulp", ulp_moves(base, "px"))
        b.add(f"{name} ±64 ulp", ulp_moves(base, "py"))
        b.add(f"{name} grid", ulp_grid({k: v[0] for k, v in maker(rng, 1).items()}))
    b.add("exact arc", _pythagorean_arc_rows(), exact=True)
    # theta = float32(pi/2) != pi/2, so these rows are exact only for (r2, cos_theta) kernels
    b.add("exact edge", _perpendicular_rows(), exact=True, exact_for={R_THETA: False})
    b.add("exact apex", _apex_rows(), exact=True)
    degenerate = random_sectors(rng, 64)
    for cos in (1 - 2.0**-24, 0.0, -1 + 2.0**-24):
        b.add(
            "cos_theta extreme",
            {**{k: v for k, v in degenerate.items() if k != "theta"}, "cos_theta": np.full(64, cos)},
        )
    tiny = random_sectors(rng, 64)
    for name, scale in (("tiny r2", 1e-16), ("huge r2", 1e15)):
        b.add(name, {k: np.asarray(v) * (1 if k in ("ux", "uy", "theta") else scale) for k, v in tiny.items()})
    for scale in (1 + 2.0**-10, 1e3, 1e-3):
        b.add("non-unit u", {**degenerate, "ux": degenerate["ux"] * scale, "uy": degenerate["uy"] * scale})
    denormal = random_sectors(rng, 32)
    b.add(
        "denormal D",
        {
            **denormal,
            "cx": np.zeros(32),
            "cy": np.zeros(32),
            "px": rng.uniform(-1, 1, 32) * 1e-40,
            "py": rng.uniform(-1, 1, 32) * 1e-40,
        },
    )
    special = f32(random_sectors(rng, 8))
    b.add("special values", with_special_values(special, ("cx", "cy", "ux", "uy", "r", "theta", "px", "py")))
    special_r2 = {
        **{k: v for k, v in special.items() if k not in ("r", "theta")},
        "r2": special["r"] * special["r"],
        "cos_theta": np.cos(special["theta"].astype(float)),
    }
    b.add("special values", with_special_values(f32(special_r2), ("r2", "cos_theta")))
    return with_metamorphic(b.build(), rng, count, TRANSFORMS)
