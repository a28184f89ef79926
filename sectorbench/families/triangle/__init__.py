"""The triangle family: is point p strictly inside triangle abc (2D)?

The family of the point-in-triangle precision article (recastnavigation's
dtClosestHeightPointTriangle).  Strict kernels: edges, vertices and degenerate
triangles are outside.  Tolerant kernels declare their tolerance and are judged against
the exact predicate widened by it.  C side: kernels_c/triangle.c.
"""

from __future__ import annotations

import numpy as np

from .. import register
from ..base import BooleanFamily
from .cases import TRIANGLE_ARRAYS, triangle_cases
from .oracle import self_check_triangle, verify_rows
from .scenes import SCENES

#: The tolerance of the recastnavigation kernels, which the self-check also covers.
RECAST_TOLERANCE = float(np.float32(1e-4))


class TriangleFamily(BooleanFamily):
    name = "triangle"
    shape_noun = "triangles"
    shape_arrays = TRIANGLE_ARRAYS
    oracle_arrays = (*TRIANGLE_ARRAYS, "px", "py")
    scenes = SCENES

    def case_generator(self, count, seed):
        return triangle_cases(self, count, seed)

    def exact_rows(self, columns, kernel):
        return verify_rows(*columns.values(), tolerance=kernel.tolerance)

    def self_check(self, case_set, rng, size):
        columns = [case_set.columns[name] for name in self.oracle_arrays]
        for tolerance in (0.0, RECAST_TOLERANCE):
            self_check_triangle(*columns, rng=rng, tolerance=tolerance, size=size)


FAMILY = register(TriangleFamily())
