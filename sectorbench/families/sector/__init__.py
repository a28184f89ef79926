"""The sector family: is point p inside the circular sector (c, u, r, theta)?

p is inside when |p − c| < r and the angle between p − c and u is below theta; the arc,
both edge rays and the apex are outside.  Kernels take (cx, cy, ux, uy, r2, cos_theta) or
(cx, cy, ux, uy, r, theta), then (px, py); C side: kernels_c/sector_*.c.
"""

from __future__ import annotations

import numpy as np

from ...errors import SectorbenchError
from ...oracle.exact import has_special_input
from .. import register
from ..base import BooleanFamily
from ..scene_kinds import make_scene
from . import cases as sector_cases
from .cases import TRANSFORMS, case_parts, random_sectors
from .oracle import judged_rows, sector_inside, self_check_sector, unit_u_band
from .scenes import GAME_SCENES, OPTIONS, SCENES

#: How far |u|^2 may be from 1 for a kernel taking theta to be judged (see applicable).
UNIT_TOLERANCE = 2.0**-20
#: A row's .contract for kernels that test the angle to u, ignoring |u|.
UNIT_U = "unit u"


def takes_unit_u(kernel) -> bool:
    """Judged on unit-u rows only: it takes theta (an angle to u), or declares the contract."""
    return "theta" in kernel.takes or UNIT_U in kernel.contract


def angle_to_u(columns) -> np.ndarray:
    """The angle between p − c and u, in float64 (NaN at the apex or for NaN input)."""
    c = {name: columns[name].astype(np.float64) for name in ("cx", "cy", "ux", "uy", "px", "py")}
    dx, dy = c["px"] - c["cx"], c["py"] - c["cy"]
    with np.errstate(all="ignore"):
        return np.arctan2(np.abs(c["ux"] * dy - c["uy"] * dx), c["ux"] * dx + c["uy"] * dy)


def half_angle(columns, kernel) -> np.ndarray:
    """theta as the kernel takes it: its theta column, or acos of its cos_theta."""
    if "theta" in kernel.takes:
        return columns["theta"].astype(np.float64)
    with np.errstate(all="ignore"):
        return np.arccos(np.clip(columns["cos_theta"].astype(np.float64), -1, 1))


class SectorFamily(BooleanFamily):
    name = "sector"
    shape_noun = "sectors"
    shape_arrays = ("cx", "cy", "ux", "uy", "r", "theta", "r2", "cos_theta")
    oracle_arrays = ("cx", "cy", "ux", "uy", "r2", "cos_theta", "px", "py")
    scenes = SCENES
    scene_options = OPTIONS
    reference_kernel = "naive"  # the article's kernel: its speedups are against it
    typical_ns_note = "naive takes ~13"
    #: A tolerance of t rad makes every point within t of the edge rays either answer: at the
    #: needle region's width every needle cone is wholly in the band (a kernel ignoring the
    #: angle passed with 10), so no more is granted; lut, the widest shipped, declares 2e-3.
    max_tolerance = sector_cases.EXTREME_THETA
    tolerance_unit = "rad"

    transforms = TRANSFORMS

    def case_parts(self, count):
        return case_parts(count)

    def loop_scene(self, n, m, rng):
        """Half the sectors wide (theta in (2.6, 3.1), r = 4, apex near the origin): they hold
        nearly all of [-1, 1]^2; the other half random."""
        wide = n // 2
        columns = {k: np.asarray(v) for k, v in random_sectors(rng, n).items()}
        columns["cx"][:wide], columns["cy"][:wide] = rng.uniform(-0.2, 0.2, (2, wide))
        columns["r"][:wide], columns["theta"][:wide] = 4.0, rng.uniform(2.6, 3.1, wide)
        columns = self.complete_columns({k: v.astype(np.float32) for k, v in columns.items()})
        points = rng.uniform(-1, 1, (2, m)).astype(np.float32)
        return make_scene("loop check", self.name, {**columns, "px": points[0], "py": points[1]})

    def complete_columns(self, columns):
        """Fill whichever of (r, theta) / (r2, cos_theta) is missing from the other, in float32."""
        out = dict(columns)
        with np.errstate(all="ignore"):
            if "r2" not in out:
                out["r2"] = out["r"] * out["r"]
            if "r" not in out:
                out["r"] = np.sqrt(out["r2"])
            if "cos_theta" not in out:
                out["cos_theta"] = np.cos(out["theta"].astype(np.float64)).astype(np.float32)
            if "theta" not in out:
                out["theta"] = np.arccos(out["cos_theta"].astype(np.float64)).astype(np.float32)
        return out

    def input_cases(self, path):
        """A case file may give both size pairs: they must then agree as the query API requires
        (query.pair_disagreement: r2 = r*r, cos_theta = cos(theta) in float32, within one float32
        step).  The oracle judged r2, cos_theta while a kernel taking r, theta read r, theta: one
        right on its own inputs (naive) failed as a logic bug on a file with r2 1, r 2."""
        import zipfile

        from .query import pair_disagreement

        case_set = super().input_cases(path)
        with zipfile.ZipFile(path) as archive:  # the columns the file gives (input_cases read it whole)
            given = {name.removesuffix(".npy") for name in archive.namelist()}
        columns = case_set.columns
        if {"r2", "cos_theta"} <= given:
            answered, others = columns, [name for name in ("r", "theta") if name in given]
        else:  # answered from r, theta: an r2 or cos_theta beside them must be theirs
            answered = self.complete_columns({"r": columns["r"], "theta": columns["theta"]})
            others = [name for name in ("r2", "cos_theta") if name in given]
        for name in others:
            found = pair_disagreement(answered, name, columns[name])
            if found is not None:
                row, value, derived = found
                pair = "r2, cos_theta" if name in ("r", "theta") else "r, theta"
                raise SectorbenchError(
                    f"{path}: {name} disagrees with {pair} at row {row}: {float(value)!r} there, {float(derived)!r} "
                    f"from {name} {float(columns[name][row])!r} (r2 = r*r, cos_theta = cos(theta) in float32, "
                    "within one float32 step); give one pair, or both agreeing"
                )
        return case_set

    def required_input(self, data):
        pair_given = {"r2", "cos_theta"} <= data.keys() or {"r", "theta"} <= data.keys()
        return ("cx", "cy", "ux", "uy", "px", "py"), [] if pair_given else ["r2 and cos_theta (or r and theta)"]

    def nominal_takes(self):
        """(r2, cos_theta): the parametrisation of the oracle; (r, theta) is translated to it."""
        return tuple(name for name in self.shape_arrays if name not in ("r", "theta"))

    def reference_key(self, kernel):
        return "theta" in kernel.takes, takes_unit_u(kernel), kernel.tolerance

    def exact_rows(self, columns, kernel):
        """The oracle's verdict; for a tolerant kernel (its row's .tolerance, an angle in
        radians) either answer is right for a point whose angle to u lies within the
        tolerance of theta: those rows' margin is 0 and they are never exact."""
        inside, margin, exact_rows, evaluable = judged_rows(columns, takes_theta="theta" in kernel.takes)
        if takes_unit_u(kernel):  # where |u| = 1 ± 2^-21 decides, u taken as unit is as right as not
            band = unit_u_band(columns)
            margin, exact_rows = np.where(band, 0.0, margin), exact_rows & ~band
        if kernel.tolerance:
            band = np.abs(angle_to_u(columns) - half_angle(columns, kernel)) <= kernel.tolerance
            margin, exact_rows = np.where(band, 0.0, margin), exact_rows & ~band
        return inside, margin, exact_rows, evaluable

    def strict_inside(self, columns):
        return sector_inside(*(columns[name] for name in self.oracle_arrays))

    def subnormal_intermediates(self, columns):
        """D = p - c, its squares and |D|² = dx² + dy², exactly from the float32 inputs (float64
        holds each exactly), any of them in float32's subnormal range: FTZ makes it 0 (the
        "subnormal lengths" rows; and a "scale 2^8" copy whose |D|² is normal but whose dx² is
        not: FTZ zeroed both squares, and naive, polar and lut failed it as a logic bug under
        -ffast-math at seed 3)."""
        dx = columns["px"].astype(np.float64) - columns["cx"].astype(np.float64)
        dy = columns["py"].astype(np.float64) - columns["cy"].astype(np.float64)
        with np.errstate(over="ignore", invalid="ignore"):
            parts = (dx, dy, dx * dx, dy * dy, dx * dx + dy * dy)
            return np.logical_or.reduce([(v != 0) & (np.abs(v) < np.finfo(np.float32).tiny) for v in parts])

    def applicable(self, kernel, case_set):
        """Rows on which a kernel can be judged against the (r2, cos_theta) oracle.

        A kernel taking (r, theta) is judged through r2 = r*r and cos_theta = cos(theta);
        that translation is faithful only inside its contract (0 < r < inf, 0 < theta < pi,
        |u| = 1 to within 2^-20, nothing special in r, theta, r2, cos_theta).  Outside it
        (theta = inf: every angle is smaller, yet cos(inf) is NaN; u of length 1000: the
        angle to u is unchanged, D·u is not) the row says nothing about the kernel.  A
        kernel that tests the angle to u whatever it takes says so with .contract =
        "unit u", and is judged on unit-u rows only.
        """
        rows = np.ones(len(case_set), dtype=bool)
        c = case_set.columns
        if "theta" in kernel.takes:
            rows &= ~has_special_input(c["r"], c["theta"], c["r2"], c["cos_theta"])
            rows &= (c["r"] > 0) & (c["theta"] > 0) & (c["theta"] < np.pi)
        if takes_unit_u(kernel):
            with np.errstate(all="ignore"):
                length2 = c["ux"].astype(np.float64) ** 2 + c["uy"].astype(np.float64) ** 2
            rows &= np.abs(length2 - 1) <= UNIT_TOLERANCE
        return rows

    def peers(self):
        from .peers import PEERS

        return PEERS

    def broadphases(self):
        from .broadphase import BROADPHASES

        return BROADPHASES

    def default_broadphases(self, scene_kind):
        """Every pair on the article's small scenes; the measured fastest index at game scale."""
        from .broadphase import FASTEST

        return (FASTEST,) if scene_kind in GAME_SCENES else ("none",)

    query_scene = "game"
    public_api = {
        "query": f"{__name__}.query:query",
        "prepare": f"{__name__}.query:prepare",
        "Hits": f"{__name__}.broadphase:Hits",
        "release_buffers": f"{__name__}.query:release_buffers",
    }

    def prepare_query(self):
        from .query import prepare

        prepare()

    def query(self, shapes, points, *, broadphase="auto", kernel="auto", threads=1, **limits):
        from .query import query

        return query(shapes, points, broadphase=broadphase, kernel=kernel, threads=threads, **limits)

    def broadphase_engine(self, ffi, lib):
        from .broadphase import Engine

        return Engine(ffi, lib)

    def coverage_cells(self):
        return sector_cases.coverage_cells()

    def coverage_rows(self, case_set, reference):
        return sector_cases.coverage_rows(case_set.columns, reference, self.default_rounding_bound)

    def self_check(self, case_set, rng, size):
        self_check_sector(*(case_set.columns[name] for name in self.oracle_arrays), rng=rng, size=size)


FAMILY = register(SectorFamily())
