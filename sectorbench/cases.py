"""Inputs built to break float32 predicate kernels (for `verify`).

A CaseSet is one row per (shape, point) pair, float32 columns as the kernels take
them, plus where each row came from and whether it lies EXACTLY on the boundary by
construction (so a wrong answer there is logic, never rounding).  Everything is
drawn from one seeded generator.
"""

from __future__ import annotations

import math
from dataclasses import dataclass, field

import numpy as np

from . import SectorbenchError
from .scenes import FAMILY_ARRAYS, SECTOR_ARRAYS, TRIANGLE_ARRAYS, make_scene

F32 = np.float32
SPECIAL_VALUES = (np.nan, np.inf, -np.inf, -0.0, 1e-40)   # 1e-40 is a float32 subnormal
ULP_MOVES = np.arange(-64, 65)
GRID_SIDE = 256


@dataclass
class CaseSet:
    family: str
    columns: dict[str, np.ndarray]
    group: np.ndarray            # generator of each row
    exact_boundary: np.ndarray   # exactly on the boundary for kernels taking (r2, cos_theta) / strict kernels
    exact_boundary_r_theta: np.ndarray  # ... and for kernels taking (r, theta)
    #: metamorphic rows: index of the row they were transformed from, else -1
    source: np.ndarray = field(default=None)

    def __len__(self) -> int:
        return len(self.group)

    def scene(self, rows: slice | np.ndarray = slice(None), shift: int = 0):
        """The rows as a pairs-layout scene, optionally after `shift` copies of row 0."""
        columns = {k: v[rows] for k, v in self.columns.items()}
        if shift:
            columns = {k: np.concatenate([np.repeat(v[:1], shift), v]) for k, v in columns.items()}
        shape_columns = {k: columns[k] for k in FAMILY_ARRAYS[self.family]}
        return make_scene("verify", self.family, shape_columns, columns["px"], columns["py"], layout="pairs")


class _Builder:
    def __init__(self, family: str):
        self.family = family
        self.parts: list[tuple[dict, str, np.ndarray, np.ndarray, np.ndarray]] = []

    def add(self, group: str, columns: dict, exact=False, exact_r_theta=None, source=None) -> None:
        n = len(columns["px"])
        if n == 0:
            return
        columns = {k: np.asarray(v, dtype=F32).reshape(n) for k, v in columns.items()}
        if self.family == "sector":
            columns = _complete_sector(columns)
        exact = np.broadcast_to(np.asarray(exact, dtype=bool), n)
        exact_r_theta = exact if exact_r_theta is None else np.broadcast_to(np.asarray(exact_r_theta, dtype=bool), n)
        source = np.full(n, -1) if source is None else source
        self.parts.append((columns, group, exact, exact_r_theta, source))

    def build(self) -> CaseSet:
        names = (*FAMILY_ARRAYS[self.family], "px", "py")
        return CaseSet(
            self.family,
            {k: np.concatenate([p[0][k] for p in self.parts]) for k in names},
            np.concatenate([np.full(len(p[2]), p[1], dtype=object) for p in self.parts]),
            np.concatenate([p[2] for p in self.parts]),
            np.concatenate([p[3] for p in self.parts]),
            np.concatenate([p[4] for p in self.parts]))


def _complete_sector(columns: dict) -> dict:
    """Fill whichever of (r, theta) / (r2, cos_theta) is missing from the other, in float32."""
    out = dict(columns)
    with np.errstate(all="ignore"):
        if "r2" not in out:
            out["r2"] = out["r"] * out["r"]
        if "r" not in out:
            out["r"] = np.sqrt(out["r2"])
        if "cos_theta" not in out:
            out["cos_theta"] = np.cos(out["theta"].astype(np.float64)).astype(F32)
        if "theta" not in out:
            out["theta"] = np.arccos(out["cos_theta"].astype(np.float64)).astype(F32)
    return out


def ulp_step(x: np.ndarray, steps) -> np.ndarray:
    """x moved by `steps` representable float32 values (nextafter applied |steps| times)."""
    bits = np.asarray(x, dtype=F32).view(np.int32).astype(np.int64)
    ordered = np.where(bits < 0, -(bits & 0x7FFFFFFF), bits) + np.asarray(steps, dtype=np.int64)
    back = np.where(ordered < 0, (-ordered) | 0x80000000, ordered)
    return back.astype(np.uint32).view(F32)


# ---------------------------------------------------------------------------- sector

def _random_sectors(rng, n: int, offset: float = 0.0) -> dict:
    phi = rng.uniform(0, 2 * np.pi, n)
    return {"cx": offset + rng.uniform(-1, 1, n), "cy": offset + rng.uniform(-1, 1, n),
            "ux": np.cos(phi), "uy": np.sin(phi),
            "r": rng.uniform(0.05, 2, n), "theta": rng.uniform(0.01, np.pi - 0.01, n),
            "px": offset + rng.uniform(-1, 1, n), "py": offset + rng.uniform(-1, 1, n)}


def _random_bits(rng, n: int, low: int = -20, high: int = 20, positive=False) -> np.ndarray:
    """float32 values with uniformly random sign, exponent in [low, high] and mantissa."""
    mantissa = 1 + rng.integers(0, 2**23, n) / 2**23
    sign = 1 if positive else rng.choice([-1, 1], n)
    return (sign * np.ldexp(mantissa, rng.integers(low, high + 1, n))).astype(F32)


def _moves(base: dict, axis: str) -> dict:
    """Each row of `base` repeated for -64..+64 ulp steps of p along one axis."""
    n = len(base["px"])
    rows = {k: np.repeat(np.asarray(v, dtype=F32), len(ULP_MOVES)) for k, v in base.items()}
    rows[axis] = ulp_step(rows[axis], np.tile(ULP_MOVES, n))
    return rows


def _grid(base_row: dict) -> dict:
    """Kettner-style: a 256 x 256 grid of nextafter steps around one point."""
    steps = np.arange(GRID_SIDE) - GRID_SIDE // 2
    sx, sy = np.meshgrid(steps, steps, indexing="ij")
    rows = {k: np.full(GRID_SIDE**2, F32(v)) for k, v in base_row.items()}
    rows["px"] = ulp_step(rows["px"], sx.ravel())
    rows["py"] = ulp_step(rows["py"], sy.ravel())
    return rows


def _on_arc(rng, n: int) -> dict:
    s = _f32(_random_sectors(rng, n))
    phi = np.arctan2(s["uy"], s["ux"]) + s["theta"].astype(float) * rng.uniform(-0.9, 0.9, n)
    r = s["r"].astype(float)
    s["px"], s["py"] = s["cx"] + r * np.cos(phi), s["cy"] + r * np.sin(phi)
    return s


def _on_edge(rng, n: int) -> dict:
    s = _f32(_random_sectors(rng, n))
    phi = np.arctan2(s["uy"], s["ux"]) + s["theta"].astype(float) * rng.choice([-1, 1], n)
    t = s["r"].astype(float) * rng.uniform(0.1, 0.9, n)
    s["px"], s["py"] = s["cx"] + t * np.cos(phi), s["cy"] + t * np.sin(phi)
    return s


def _f32(columns: dict) -> dict:
    return {k: np.asarray(v, dtype=F32) for k, v in columns.items()}


def _exactly(values64: np.ndarray) -> np.ndarray:
    """Rows whose float64 values survive the trip through float32 unchanged."""
    return np.all(np.asarray(values64, dtype=np.float64) == np.asarray(values64, dtype=F32).astype(np.float64), axis=0)


def _pythagorean_arc_rows() -> dict:
    """p exactly on the arc: c + (a, b)·2^k with r = c·2^k for triples (a, b, c)."""
    rows = {k: [] for k in ("cx", "cy", "ux", "uy", "r", "theta", "px", "py")}
    for a, b, c in ((3, 4, 5), (5, 12, 13), (8, 15, 17), (7, 24, 25), (20, 21, 29), (12, 35, 37)):
        for k in (-20, -10, -3, 0, 3, 10, 20):
            for sx, sy in ((1, 1), (-1, 1), (1, -1), (-1, -1)):
                for x, y in ((a, b), (b, a)):
                    for cx, cy in ((0.0, 0.0), (0.5, -0.25), (-3.0, 2.0)):
                        px, py = cx + sx * x * 2.0**k, cy + sy * y * 2.0**k
                        if not _exactly(np.array([[px], [py]]))[0]:
                            continue
                        for key, value in (("cx", cx), ("cy", cy), ("ux", sx * x / c), ("uy", sy * y / c),
                                           ("r", c * 2.0**k), ("theta", 1.0), ("px", px), ("py", py)):
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
                    for key, value in (("cx", cx), ("cy", cy), ("ux", ux), ("uy", uy), ("r", 4.0),
                                       ("cos_theta", cos), ("px", cx - t * uy), ("py", cy + t * ux)):
                        rows[key].append(value)
    return rows


def _apex_rows() -> dict:
    rows = {k: [] for k in ("cx", "cy", "ux", "uy", "r", "cos_theta", "px", "py")}
    for cx, cy, px, py in ((0.0, 0.0, 0.0, 0.0), (0.0, 0.0, -0.0, -0.0), (-0.0, 0.0, 0.0, -0.0),
                           (0.25, -0.5, 0.25, -0.5), (-7.0, 1e3, -7.0, 1e3)):
        for cos in (0.5, -0.5, 0.0, -0.0, 1 - 2.0**-24, -1 + 2.0**-24):
            for ux, uy in ((1.0, 0.0), (0.6, 0.8)):
                for key, value in (("cx", cx), ("cy", cy), ("ux", ux), ("uy", uy), ("r", 1.0),
                                   ("cos_theta", cos), ("px", px), ("py", py)):
                    rows[key].append(value)
    return rows


def _with_special_values(base: dict, slots: tuple[str, ...]) -> dict:
    """Copies of `base` with each special value in each slot."""
    n = len(base["px"])
    out = {k: [] for k in base}
    for slot in slots:
        for value in SPECIAL_VALUES:
            for k, v in base.items():
                out[k].append(np.full(n, value, dtype=F32) if k == slot else np.asarray(v, dtype=F32))
    return {k: np.concatenate(v) for k, v in out.items()}


def _add_random_groups(b: _Builder, rng, count: int, random_rows) -> None:
    """Random rows around the origin, then offset to 1e3 and 1e5, where float32 cancellation bites."""
    b.add("random", random_rows(rng, count))
    for offset in (1e3, 1e5):
        b.add(f"offset {offset:g}", random_rows(rng, count, offset))


def sector_cases(count: int, seed: int) -> CaseSet:
    rng = np.random.default_rng(seed)
    b = _Builder("sector")
    near = max(1, count // 258)
    _add_random_groups(b, rng, count, _random_sectors)
    bits = {k: _random_bits(rng, count) for k in ("cx", "cy", "px", "py")}
    phi = rng.uniform(0, 2 * np.pi, count)
    b.add("bit patterns", {**bits, "ux": np.cos(phi), "uy": np.sin(phi), "r2": _random_bits(rng, count, positive=True),
                           "cos_theta": rng.uniform(-1, 1, count)})
    for name, maker in (("near arc", _on_arc), ("near edge", _on_edge)):
        base = maker(rng, near)
        b.add(f"{name} ±64 ulp", {**_moves(base, "px")})
        b.add(f"{name} ±64 ulp", {**_moves(base, "py")})
        b.add(f"{name} grid", _grid({k: v[0] for k, v in maker(rng, 1).items()}))
    b.add("exact arc", _pythagorean_arc_rows(), exact=True)
    b.add("exact edge", _perpendicular_rows(), exact=True, exact_r_theta=False)  # theta = float32(pi/2) != pi/2
    b.add("exact apex", _apex_rows(), exact=True)
    degenerate = _random_sectors(rng, 64)
    for cos in (1 - 2.0**-24, 0.0, -1 + 2.0**-24):
        b.add("cos_theta extreme", {**{k: v for k, v in degenerate.items() if k != "theta"},
                                    "cos_theta": np.full(64, cos)})
    tiny = _random_sectors(rng, 64)
    for name, scale in (("tiny r2", 1e-16), ("huge r2", 1e15)):
        b.add(name, {k: np.asarray(v) * (1 if k in ("ux", "uy", "theta") else scale) for k, v in tiny.items()})
    for scale in (1 + 2.0**-10, 1e3, 1e-3):
        b.add("non-unit u", {**degenerate, "ux": degenerate["ux"] * scale, "uy": degenerate["uy"] * scale})
    denormal = _random_sectors(rng, 32)
    b.add("denormal D", {**denormal, "cx": np.zeros(32), "cy": np.zeros(32),
                         "px": rng.uniform(-1, 1, 32) * 1e-40, "py": rng.uniform(-1, 1, 32) * 1e-40})
    special = _f32(_random_sectors(rng, 8))
    b.add("special values", _with_special_values(
        {k: v for k, v in special.items()}, ("cx", "cy", "ux", "uy", "r", "theta", "px", "py")))
    special_r2 = {**{k: v for k, v in special.items() if k not in ("r", "theta")},
                  "r2": special["r"] * special["r"], "cos_theta": np.cos(special["theta"].astype(float))}
    b.add("special values", _with_special_values(_f32(special_r2), ("r2", "cos_theta")))
    cases = b.build()
    return _with_metamorphic(cases, rng, count)


# ---------------------------------------------------------------------------- triangle

def _random_triangles(rng, n: int, offset: float = 0.0) -> dict:
    return {k: offset + rng.uniform(-1, 1, n) for k in (*TRIANGLE_ARRAYS, "px", "py")}


def _on_triangle_edge(rng, n: int) -> dict:
    t = _f32(_random_triangles(rng, n))
    s = rng.uniform(0.05, 0.95, n)
    t["px"] = t["ax"] + s * (t["bx"].astype(float) - t["ax"])
    t["py"] = t["ay"] + s * (t["by"].astype(float) - t["ay"])
    return t


#: The point-in-triangle article's case: exactly inside; its typo twin is exactly outside.
ARTICLE_TRIANGLE = {"ax": 261.137939, "ay": 8.13000488, "bx": 73.6379318, "by": 8.13000488,
                    "cx": 76.9379349, "cy": 10.2300053, "px": 74.4069519, "py": 8.6093819}
ARTICLE_TRIANGLE_TYPO = {**ARTICLE_TRIANGLE, "py": 8.6193819}


def _exact_triangle_rows() -> tuple[dict, dict]:
    """Integer triangles (scaled, offset): points on vertices and edges; degenerate triangles."""
    on_boundary = {k: [] for k in (*TRIANGLE_ARRAYS, "px", "py")}
    degenerate = {k: [] for k in (*TRIANGLE_ARRAYS, "px", "py")}
    triangles = (((0, 0), (8, 0), (0, 8)), ((0, 0), (8, 8), (-4, 12)), ((1, 1), (9, 3), (3, 7)))
    points = lambda a, b, c: [a, b, c, ((a[0] + b[0]) / 2, (a[1] + b[1]) / 2), ((b[0] + c[0]) / 2, (b[1] + c[1]) / 2),
                              ((c[0] + a[0]) / 2, (c[1] + a[1]) / 2)]
    for (a, b, c) in triangles:
        for k in (-12, 0, 12):
            for ox, oy in ((0.0, 0.0), (0.5, -0.25), (1024.0, 1024.0)):
                for order in ((a, b, c), (a, c, b)):
                    scaled = [(ox + x * 2.0**k, oy + y * 2.0**k) for x, y in order]
                    for px, py in points(*order):
                        values = [*scaled[0], *scaled[1], *scaled[2], ox + px * 2.0**k, oy + py * 2.0**k]
                        if _exactly(np.array(values)[:, None])[0]:
                            for key, value in zip((*TRIANGLE_ARRAYS, "px", "py"), values):
                                on_boundary[key].append(value)
                    # collinear: c on the line ab beyond b; points on and off the line
                    ax_, ay_ = scaled[0]
                    bx_, by_ = scaled[1]
                    line_c = (2 * bx_ - ax_, 2 * by_ - ay_)
                    for px, py in ((bx_, by_), ((ax_ + bx_) / 2, (ay_ + by_) / 2), (ax_ + 2.0**k, ay_)):
                        values = [ax_, ay_, bx_, by_, *line_c, px, py]
                        if _exactly(np.array(values)[:, None])[0]:
                            for key, value in zip((*TRIANGLE_ARRAYS, "px", "py"), values):
                                degenerate[key].append(value)
    return on_boundary, degenerate


def triangle_cases(count: int, seed: int) -> CaseSet:
    rng = np.random.default_rng(seed)
    b = _Builder("triangle")
    near = max(1, count // 258)
    _add_random_groups(b, rng, count, _random_triangles)
    b.add("bit patterns", {k: _random_bits(rng, count) for k in (*TRIANGLE_ARRAYS, "px", "py")})
    thin_base = 1000 + rng.uniform(-4, 4, (4, count))
    t = rng.random(count)
    thin = {"ax": thin_base[0], "ay": thin_base[1], "bx": thin_base[2], "by": thin_base[3]}
    thin["cx"] = ulp_step(F32(thin["ax"] + t * (thin["bx"] - thin["ax"])), rng.integers(-4, 5, count))
    thin["cy"] = ulp_step(F32(thin["ay"] + t * (thin["by"] - thin["ay"])), rng.integers(-4, 5, count))
    thin["px"], thin["py"] = 1000 + rng.uniform(-4, 4, (2, count))
    b.add("thin at 1e3", thin)
    base = _on_triangle_edge(rng, near)
    b.add("near edge ±64 ulp", _moves(base, "px"))
    b.add("near edge ±64 ulp", _moves(base, "py"))
    b.add("near edge grid", _grid({k: v[0] for k, v in _on_triangle_edge(rng, 1).items()}))
    on_boundary, degenerate = _exact_triangle_rows()
    b.add("exact vertex/edge", on_boundary, exact=True)
    b.add("exact degenerate", degenerate, exact=True)
    b.add("article case", {k: [v] for k, v in ARTICLE_TRIANGLE.items()})
    b.add("article typo case", {k: [v] for k, v in ARTICLE_TRIANGLE_TYPO.items()})
    special = _f32(_random_triangles(rng, 8))
    b.add("special values", _with_special_values(special, (*TRIANGLE_ARRAYS, "px", "py")))
    return _with_metamorphic(b.build(), rng, count)


# ---------------------------------------------------------------------------- metamorphic

def _transforms(family: str):
    """Maps that leave the exact answer unchanged: name -> columns -> columns."""
    pairs = (("cx", "cy"), ("ux", "uy"), ("px", "py")) if family == "sector" else \
        (("ax", "ay"), ("bx", "by"), ("cx", "cy"), ("px", "py"))

    def swap(c):
        return {**c, **{x: c[y] for x, y in pairs}, **{y: c[x] for x, y in pairs}}

    def negate(c):
        return {**c, **{k: -c[k] for pair in pairs for k in pair}}

    def rotate(c):
        return {**c, **{x: -c[y] for x, y in pairs}, **{y: c[x] for x, y in pairs}}

    def scale(c, k=8):
        points = [k_ for pair in pairs for k_ in pair if not k_.startswith("u")]
        out = {**c, **{k_: c[k_] * F32(2.0**k) for k_ in points}}
        if family == "sector":
            out["r"], out["r2"] = c["r"] * F32(2.0**k), c["r2"] * F32(4.0**k)
        return out

    transforms = {"swap x,y": swap, "negate": negate, "rotate 90°": rotate, "scale 2^8": scale,
                  "scale 2^-8": lambda c: scale(c, -8)}
    if family == "triangle":
        transforms["rotate vertices"] = lambda c: {**c, "ax": c["bx"], "ay": c["by"], "bx": c["cx"],
                                                   "by": c["cy"], "cx": c["ax"], "cy": c["ay"]}
    return transforms


def _normal_or_zero(columns: dict) -> np.ndarray:
    """Rows with no under/overflow risk after scaling: every value 0 or comfortably normal."""
    ok = np.ones(len(columns["px"]), dtype=bool)
    for v in columns.values():
        magnitude = np.abs(v.astype(np.float64))
        ok &= np.isfinite(magnitude) & ((magnitude == 0) | ((magnitude > 2.0**-100) & (magnitude < 2.0**100)))
    return ok


def _with_metamorphic(cases: CaseSet, rng, count: int) -> CaseSet:
    eligible = np.flatnonzero(_normal_or_zero(cases.columns))
    chosen = np.sort(rng.choice(eligible, size=min(count, eligible.size), replace=False))
    base = {k: v[chosen] for k, v in cases.columns.items()}
    parts = [cases]
    for name, transform in _transforms(cases.family).items():
        with np.errstate(all="ignore"):
            columns = transform(base)
        parts.append(CaseSet(cases.family, columns, np.full(chosen.size, f"metamorphic: {name}", dtype=object),
                             cases.exact_boundary[chosen], cases.exact_boundary_r_theta[chosen], chosen))
    return CaseSet(cases.family, {k: np.concatenate([p.columns[k] for p in parts]) for k in cases.columns},
                   np.concatenate([p.group for p in parts]), np.concatenate([p.exact_boundary for p in parts]),
                   np.concatenate([p.exact_boundary_r_theta for p in parts]),
                   np.concatenate([p.source for p in parts]))


def generate(family: str, count: int, seed: int) -> CaseSet:
    if count < 1:
        raise SectorbenchError(f"--cases must be at least 1 (got {count})")
    return (sector_cases if family == "sector" else triangle_cases)(count, seed)


def from_npz(path, family: str) -> CaseSet:
    """User-supplied cases, one row per (shape, point) pair (array names in the README)."""
    try:
        data = dict(np.load(path))
    except (OSError, ValueError) as exc:
        raise SectorbenchError(f"{path}: cannot read cases ({exc})") from None
    required = (("cx", "cy", "ux", "uy", "px", "py") if family == "sector" else (*TRIANGLE_ARRAYS, "px", "py"))
    missing = [k for k in required if k not in data]
    if family == "sector" and not ({"r2", "cos_theta"} <= data.keys() or {"r", "theta"} <= data.keys()):
        missing.append("r2 and cos_theta (or r and theta)")
    if missing:
        raise SectorbenchError(f"{path}: missing arrays for the {family} family: {', '.join(missing)}")
    lengths = {len(np.ravel(data[k])) for k in required}
    if len(lengths) != 1 or 0 in lengths:
        raise SectorbenchError(f"{path}: arrays must be one-dimensional, non-empty and of equal length")
    b = _Builder(family)
    keep = set(FAMILY_ARRAYS[family]) | {"px", "py"}
    b.add("input", {k: np.ravel(v) for k, v in data.items() if k in keep})
    return b.build()
