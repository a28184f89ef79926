"""The sector family: is point p inside the circular sector (c, u, r, theta)?

p is inside when |p − c| < r and the angle between p − c and u is below theta; the arc,
both edge rays and the apex are outside.  Kernels take (cx, cy, ux, uy, r2, cos_theta) or
(cx, cy, ux, uy, r, theta), then (px, py); C side: kernels_c/sector_*.c.
"""

from __future__ import annotations

import numpy as np

from ...cases import DEFAULT
from ...exact import has_special_input
from .. import register
from ..base import BooleanFamily
from .cases import R_THETA, sector_cases
from .oracle import self_check_sector, verify_rows
from .scenes import SCENES


class SectorFamily(BooleanFamily):
    name = "sector"
    shape_noun = "sectors"
    shape_arrays = ("cx", "cy", "ux", "uy", "r", "theta", "r2", "cos_theta")
    oracle_arrays = ("cx", "cy", "ux", "uy", "r2", "cos_theta", "px", "py")
    scenes = SCENES

    def case_generator(self, count, seed):
        return sector_cases(self, count, seed)

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

    def required_input(self, data):
        pair_given = {"r2", "cos_theta"} <= data.keys() or {"r", "theta"} <= data.keys()
        return ("cx", "cy", "ux", "uy", "px", "py"), [] if pair_given else ["r2 and cos_theta (or r and theta)"]

    def exact_rows(self, columns, kernel):
        return verify_rows(*columns.values())

    def applicable(self, kernel, case_set):
        """Rows on which a kernel can be judged against the (r2, cos_theta) oracle.

        A kernel taking (r, theta) is judged through r2 = r*r and cos_theta = cos(theta);
        that translation is faithful only inside its contract (0 < r < inf, 0 < theta < pi,
        nothing special in r, theta, r2, cos_theta).  Outside it (e.g. theta = inf: every
        angle is smaller, yet cos(inf) is NaN) the row says nothing about the kernel.
        """
        rows = np.ones(len(case_set), dtype=bool)
        if "theta" in kernel.takes:
            c = case_set.columns
            rows &= ~has_special_input(c["r"], c["theta"], c["r2"], c["cos_theta"])
            rows &= (c["r"] > 0) & (c["theta"] > 0) & (c["theta"] < np.pi)
        return rows

    def exact_boundary(self, kernel, case_set):
        if kernel.tolerance:
            return np.zeros(len(case_set), dtype=bool)
        return case_set.exact_boundary[R_THETA if "theta" in kernel.takes else DEFAULT]

    def self_check(self, case_set, rng, size):
        self_check_sector(*(case_set.columns[name] for name in self.oracle_arrays), rng=rng, size=size)


FAMILY = register(SectorFamily())
