"""Inputs built to break float32 predicate kernels (for `verify`): what every family shares.

A CaseSet is one row per (shape, point) pair, float32 columns as the kernels take them,
plus where each row came from and whether it lies EXACTLY on the boundary by
construction (so a wrong answer there is logic, never rounding).  Each family writes
its own generators (families/*/cases.py) from the pieces here; everything is drawn
from one seeded generator.
"""

from __future__ import annotations

from collections.abc import Callable, Mapping
from dataclasses import dataclass, field

import numpy as np

from . import SectorbenchError
from .scenes import make_scene

F32 = np.float32
SPECIAL_VALUES = (np.nan, np.inf, -np.inf, -0.0, 1e-40)  # 1e-40 is a float32 subnormal
ULP_MOVES = np.arange(-64, 65)
GRID_SIDE = 256
#: The key of `CaseSet.exact_boundary` for a family's usual parametrisation.
DEFAULT = ""


@dataclass
class CaseSet:
    family: str
    columns: dict[str, np.ndarray]
    group: np.ndarray  # generator of each row
    #: exactly on the boundary by construction, per parametrisation a kernel may take
    #: (DEFAULT, plus what the family names, e.g. the sector's "r,theta")
    exact_boundary: dict[str, np.ndarray]
    #: metamorphic rows: index of the row they were transformed from, else -1
    source: np.ndarray = field(default=None)

    def __len__(self) -> int:
        return len(self.group)

    def scene(self, rows: slice | np.ndarray = slice(None), shift: int = 0):
        """The rows as a pairs-layout scene, optionally after `shift` copies of row 0."""
        columns = {k: v[rows] for k, v in self.columns.items()}
        if shift:
            columns = {k: np.concatenate([np.repeat(v[:1], shift), v]) for k, v in columns.items()}
        return make_scene("verify", self.family, columns, layout="pairs")


class Builder:
    """Collects groups of rows for one family; `build()` makes the CaseSet."""

    def __init__(self, family):
        self.family = family
        self.parts: list[tuple[dict, str, dict[str, np.ndarray], np.ndarray]] = []

    def add(
        self, group: str, columns: dict, exact=False, exact_for: Mapping[str, bool] | None = None, source=None
    ) -> None:
        """Add rows; `exact` flags exact-boundary rows, `exact_for` overrides it per parametrisation."""
        n = len(columns[self.family.point_arrays[0]])
        if n == 0:
            return
        columns = {k: np.asarray(v, dtype=F32).reshape(n) for k, v in columns.items()}
        columns = self.family.complete_columns(columns)
        flags = {DEFAULT: np.broadcast_to(np.asarray(exact, dtype=bool), n)}
        for label, value in (exact_for or {}).items():
            flags[label] = np.broadcast_to(np.asarray(value, dtype=bool), n)
        source = np.full(n, -1) if source is None else source
        self.parts.append((columns, group, flags, source))

    def build(self) -> CaseSet:
        names = (*self.family.shape_arrays, *self.family.point_arrays)
        labels = dict.fromkeys(label for part in self.parts for label in part[2])
        return CaseSet(
            self.family.name,
            {k: np.concatenate([p[0][k] for p in self.parts]) for k in names},
            np.concatenate([np.full(len(p[3]), p[1], dtype=object) for p in self.parts]),
            {label: np.concatenate([p[2].get(label, p[2][DEFAULT]) for p in self.parts]) for label in labels},
            np.concatenate([p[3] for p in self.parts]),
        )


def ulp_step(x: np.ndarray, steps) -> np.ndarray:
    """x moved by `steps` representable float32 values (nextafter applied |steps| times)."""
    bits = np.asarray(x, dtype=F32).view(np.int32).astype(np.int64)
    ordered = np.where(bits < 0, -(bits & 0x7FFFFFFF), bits) + np.asarray(steps, dtype=np.int64)
    back = np.where(ordered < 0, (-ordered) | 0x80000000, ordered)
    return back.astype(np.uint32).view(F32)


def random_bits(rng, n: int, low: int = -20, high: int = 20, positive=False) -> np.ndarray:
    """float32 values with uniformly random sign, exponent in [low, high] and mantissa."""
    mantissa = 1 + rng.integers(0, 2**23, n) / 2**23
    sign = 1 if positive else rng.choice([-1, 1], n)
    return (sign * np.ldexp(mantissa, rng.integers(low, high + 1, n))).astype(F32)


def ulp_moves(base: dict, axis: str) -> dict:
    """Each row of `base` repeated for -64..+64 ulp steps of one column."""
    n = len(base[axis])
    rows = {k: np.repeat(np.asarray(v, dtype=F32), len(ULP_MOVES)) for k, v in base.items()}
    rows[axis] = ulp_step(rows[axis], np.tile(ULP_MOVES, n))
    return rows


def ulp_grid(base_row: dict, x: str = "px", y: str = "py") -> dict:
    """Kettner-style: a 256 x 256 grid of nextafter steps of (x, y) around one row."""
    steps = np.arange(GRID_SIDE) - GRID_SIDE // 2
    sx, sy = np.meshgrid(steps, steps, indexing="ij")
    rows = {k: np.full(GRID_SIDE**2, F32(v)) for k, v in base_row.items()}
    rows[x] = ulp_step(rows[x], sx.ravel())
    rows[y] = ulp_step(rows[y], sy.ravel())
    return rows


def f32(columns: dict) -> dict:
    return {k: np.asarray(v, dtype=F32) for k, v in columns.items()}


def exactly_float32(values64: np.ndarray) -> np.ndarray:
    """Rows whose float64 values survive the trip through float32 unchanged."""
    return np.all(np.asarray(values64, dtype=np.float64) == np.asarray(values64, dtype=F32).astype(np.float64), axis=0)


def with_special_values(base: dict, slots: tuple[str, ...]) -> dict:
    """Copies of `base` with each special value in each slot."""
    n = len(next(iter(base.values())))
    out = {k: [] for k in base}
    for slot in slots:
        for value in SPECIAL_VALUES:
            for k, v in base.items():
                out[k].append(np.full(n, value, dtype=F32) if k == slot else np.asarray(v, dtype=F32))
    return {k: np.concatenate(v) for k, v in out.items()}


def add_random_groups(builder: Builder, rng, count: int, random_rows) -> None:
    """Random rows around the origin, then offset to 1e3 and 1e5, where float32 cancellation bites."""
    builder.add("random", random_rows(rng, count))
    for offset in (1e3, 1e5):
        builder.add(f"offset {offset:g}", random_rows(rng, count, offset))


# ---------------------------------------------------------------------------- metamorphic

Transform = Callable[[dict], dict]


def coordinate_transforms(
    pairs: tuple[tuple[str, str], ...],
    positions: tuple[str, ...],
    scale_others: Callable[[dict, dict, int], dict] | None = None,
) -> dict[str, Transform]:
    """Maps that leave a planar predicate's exact answer unchanged.

    pairs: the (x, y) column pairs (positions and directions), rotated and swapped
    together; positions: the columns scaled by 2^k; scale_others(columns, scaled, k)
    scales the family's other lengths (a radius, a squared radius) to match.
    """

    def swap(c):
        return {**c, **{x: c[y] for x, y in pairs}, **{y: c[x] for x, y in pairs}}

    def negate(c):
        return {**c, **{k: -c[k] for pair in pairs for k in pair}}

    def rotate(c):
        return {**c, **{x: -c[y] for x, y in pairs}, **{y: c[x] for x, y in pairs}}

    def scale(c, k=8):
        out = {**c, **{name: c[name] * F32(2.0**k) for name in positions}}
        return scale_others(c, out, k) if scale_others else out

    return {
        "swap x,y": swap,
        "negate": negate,
        "rotate 90°": rotate,
        "scale 2^8": scale,
        "scale 2^-8": lambda c: scale(c, -8),
    }


def normal_or_zero(columns: dict) -> np.ndarray:
    """Rows with no under/overflow risk after scaling: every value 0 or comfortably normal."""
    ok = np.ones(len(next(iter(columns.values()))), dtype=bool)
    for v in columns.values():
        magnitude = np.abs(v.astype(np.float64))
        ok &= np.isfinite(magnitude) & ((magnitude == 0) | ((magnitude > 2.0**-100) & (magnitude < 2.0**100)))
    return ok


def with_metamorphic(cases: CaseSet, rng, count: int, transforms: Mapping[str, Transform]) -> CaseSet:
    """`cases` plus up to `count` transformed copies per transform of randomly chosen rows."""
    eligible = np.flatnonzero(normal_or_zero(cases.columns))
    chosen = np.sort(rng.choice(eligible, size=min(count, eligible.size), replace=False))
    base = {k: v[chosen] for k, v in cases.columns.items()}
    parts = [cases]
    for name, transform in transforms.items():
        with np.errstate(all="ignore"):
            columns = transform(base)
        parts.append(
            CaseSet(
                cases.family,
                columns,
                np.full(chosen.size, f"metamorphic: {name}", dtype=object),
                {label: flags[chosen] for label, flags in cases.exact_boundary.items()},
                chosen,
            )
        )
    return CaseSet(
        cases.family,
        {k: np.concatenate([p.columns[k] for p in parts]) for k in cases.columns},
        np.concatenate([p.group for p in parts]),
        {label: np.concatenate([p.exact_boundary[label] for p in parts]) for label in cases.exact_boundary},
        np.concatenate([p.source for p in parts]),
    )


# ---------------------------------------------------------------------------- user input


def read_npz(path) -> dict[str, np.ndarray]:
    """The arrays of a user's .npz case file, flattened; SectorbenchError naming the file."""
    try:
        return {k: np.ravel(v) for k, v in np.load(path).items()}
    except (OSError, ValueError) as exc:
        raise SectorbenchError(f"{path}: cannot read cases ({exc})") from None


def check_input_arrays(path, family: str, data: dict, required: tuple[str, ...], extra_missing=()) -> None:
    missing = [k for k in required if k not in data] + list(extra_missing)
    if missing:
        raise SectorbenchError(f"{path}: missing arrays for the {family} family: {', '.join(missing)}")
    lengths = {len(data[k]) for k in required}
    if len(lengths) != 1 or 0 in lengths:
        raise SectorbenchError(f"{path}: arrays must be one-dimensional, non-empty and of equal length")
