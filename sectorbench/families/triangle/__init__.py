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
from ..scene_kinds import make_scene
from . import cases as triangle_cases
from .cases import TRANSFORMS, TRIANGLE_ARRAYS, case_parts, random_triangles
from .oracle import judged_rows, self_check_triangle, triangle_inside
from .scenes import SCENES

#: The tolerance of the recastnavigation kernels, which the self-check also covers.
RECAST_TOLERANCE = float(np.float32(1e-4))


class TriangleFamily(BooleanFamily):
    name = "triangle"
    shape_noun = "triangles"
    shape_arrays = TRIANGLE_ARRAYS
    oracle_arrays = (*TRIANGLE_ARRAYS, "px", "py")
    scenes = SCENES
    #: The tolerance widens each barycentric coordinate by eps: at 2^-7 the band holds every
    #: row the coverage table counts beside an edge (within 2^-7 of the longest edge), so no
    #: more is granted (`return 1` passed with 1e30); the recastnavigation kernels declare 1e-4.
    max_tolerance = 2.0**-7
    tolerance_unit = "barycentric"

    transforms = TRANSFORMS

    def case_parts(self, count):
        return case_parts(count)

    def loop_scene(self, n, m, rng):
        """Half the triangles large (circumradius 4 about the origin: they hold [-1, 1]^2,
        either winding); the other half random."""
        columns = {k: np.asarray(v, dtype=np.float64) for k, v in random_triangles(rng, n).items()}
        large = n // 2
        turn = rng.uniform(0, 2 * np.pi, large)
        winding = np.where(rng.random(large) < 0.5, 1.0, -1.0)
        for vertex, name in enumerate("abc"):
            angle = turn + winding * vertex * 2 * np.pi / 3
            columns[name + "x"][:large], columns[name + "y"][:large] = 4 * np.cos(angle), 4 * np.sin(angle)
        points = rng.uniform(-1, 1, (2, m))
        shapes = {k: v.astype(np.float32) for k, v in columns.items() if k in TRIANGLE_ARRAYS}
        return make_scene(
            "loop check", self.name, {**shapes, "px": points[0].astype(np.float32), "py": points[1].astype(np.float32)}
        )

    def exact_rows(self, columns, kernel):
        return judged_rows(columns, kernel.tolerance)

    def coverage_cells(self):
        return triangle_cases.coverage_cells()

    def coverage_rows(self, case_set, reference):
        return triangle_cases.coverage_rows(case_set.columns, reference)

    def strict_inside(self, columns):
        return triangle_inside(*(columns[name] for name in self.oracle_arrays))

    def self_check(self, case_set, rng, size):
        columns = [case_set.columns[name] for name in self.oracle_arrays]
        for tolerance in (0.0, RECAST_TOLERANCE):
            self_check_triangle(*columns, rng=rng, tolerance=tolerance, size=size)


FAMILY = register(TriangleFamily())
