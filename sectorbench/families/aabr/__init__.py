"""The aabr family: the axis-aligned bounding rectangle of a convex polygon rotated about
its centre, as the four extreme vertices (maxX, maxY, minX, minY) — the aabr article's
"bounds caching structure" (BCS) against scans and binary searches.

Its answer is four indices, not a bit: eval_* write int32[4] per test (answers() packs
them into one int64 per test, 16 bits a side, for verify's row-wise comparisons); the
count loops return the sum of the indices.  A shape slot holds a polygon index ("poly");
the polygons are extra arrays (polygons.pack); a rotation is (angle, c, s).  Kernels
reading the BCS build it in their row's prepare hook, whose time and memory `run`
reports apart (index_build_s, index_bytes).  C side: kernels_c/aabr.h and aabr.c.
"""

from __future__ import annotations

from dataclasses import dataclass

import numpy as np

from ...errors import SectorbenchError
from .. import register
from ..base import Family, Reference
from ..scene_kinds import make_scene
from . import cases as aabr_cases
from . import oracle
from .polygons import ellipse_polygon, pack, random_angles, regular_polygon, unpack
from .scenes import ALIASES, OPTIONS, SCENES, scene_cost

#: A kernel row's .contract for kernels that assume a (weakly) convex polygon: verify
#: judges them only on polygons that are convex exactly in float32.
CONVEX = "convex"
SIDE_BITS = 16


@dataclass(frozen=True)
class AabrReference(Reference):
    """The oracle's answers (lowest exact extremes, packed) and the rows it judges."""

    case_set: object = None


def pack_answers(indices: np.ndarray) -> np.ndarray:
    """int32[..., 4] -> int64[...]: side k in bits 16k .. 16k+15 (indices < 65536)."""
    indices = np.asarray(indices).astype(np.int64) & 0xFFFF
    return sum(indices[..., k] << (SIDE_BITS * k) for k in range(4))


def unpack_answers(packed: np.ndarray) -> np.ndarray:
    packed = np.asarray(packed, dtype=np.int64)
    return np.stack([(packed >> (SIDE_BITS * k)) & 0xFFFF for k in range(4)], axis=-1)


class AabrFamily(Family):
    name = "aabr"
    shape_noun = "polygons"
    shape_arrays = ("poly",)
    point_arrays = ("angle", "c", "s")
    extra_arrays = {"polygons": np.int32, "vx": np.float32, "vy": np.float32}
    scenes = SCENES
    scene_options = OPTIONS
    #: Its oracle (the extreme vertices, exactly) costs ~0.1 ms a test on polygons of up to
    #: 1 024 vertices: the loop check's scenes as run makes them stay small, past a tile of 1 024.
    run_check_size = (8, 1040)
    scene_aliases = ALIASES
    answer_dtype = np.int32
    answer_width = 4
    default_rounding_bound = 8.0  # angle units of 2^-24 rad; see oracle.py
    count_column = "checksum"  # the count loops sum the answers' indices
    count_difference = (
        "the checksum (the sum of the four extreme vertices' indices over all tests) differs by k from "
        "{expected}: some answers name another vertex (a tied extreme, equally right; float32 rounding "
        "near a tie; or a logic difference; see `sectorbench verify --family {family}`)"
    )
    #: Its kernels' hot loops run inside one test (scan: over the polygon's vertices; hill and
    #: the BCS: a search), so cycles per iteration are not cycles per test: no bound is derived.
    hot_loop_over_points = False
    #: A test scans or searches a polygon's vertices: on the default mixed polygons (-O2, this
    #: 2-core VM) scan took 556 ns a test, scan_avx2 123, scan_avx512 60, hill 121, bcs_search 13,
    #: bcs_coherent 147; the sector kernels' 4 ns put the plan 10 to 50 times too low.
    typical_ns_per_test = 150.0
    typical_ns_note = "scan takes ~550 on mixed polygons"

    def count_cell(self, hits, tests):
        return str(hits)

    def scene_cost(self, kind, n, m, options):
        return scene_cost(kind, n, options)

    def case_parts(self, count):
        return aabr_cases.case_parts(count)

    def case_batches(self, count, seed, batch_rows=None):
        return aabr_cases.case_batches(self, count, seed)

    def cases(self, count, seed):
        return aabr_cases.all_cases(self, count, seed)

    def input_cases(self, path):
        raise SectorbenchError(
            f"verify --input: the aabr family reads no case files yet ({path}); its cases are generated"
        )

    def loop_scene(self, n, m, rng):
        """n polygons (random and regular, 3 .. 64 vertices) at m random rotations."""
        polygons = [
            ellipse_polygon(rng, int(rng.integers(3, 65))) if i % 2 else regular_polygon(int(rng.integers(3, 65)))
            for i in range(n)
        ]
        columns = {"poly": np.arange(n, dtype=np.float32), **random_angles(rng, m)}
        return make_scene("loop check", self.name, columns, extra=pack(polygons))

    def reference(self, case_set, kernel):
        columns = case_set.columns
        answer, _, _ = oracle.judge_rows(unpack(case_set.extra), columns["poly"], columns["c"], columns["s"])
        nothing = np.zeros(len(case_set), dtype=bool)
        return AabrReference(pack_answers(answer), np.zeros(len(case_set)), nothing, nothing, case_set)

    def reference_key(self, kernel):
        return "aabr"

    def answers(self, raw):
        return pack_answers(raw)

    def judge(self, case_set, answers):
        """(mismatch, margin) per row of the kernel's packed answers."""
        columns = case_set.columns
        _, mismatch, margin = oracle.judge_rows(
            unpack(case_set.extra), columns["poly"], columns["c"], columns["s"], unpack_answers(answers)
        )
        return mismatch, margin

    def compare(self, kernel, case_set, reference, answers):
        return self.judge(case_set, answers)

    def applicable(self, kernel, case_set):
        if kernel.contract != CONVEX:
            return np.ones(len(case_set), dtype=bool)
        convex = case_set.extra.get("convex")
        if convex is None:
            from .polygons import convexity

            convex = np.array([convexity(x, y) != "nonconvex" for x, y in unpack(case_set.extra)])
        return np.asarray(convex)[case_set.columns["poly"].astype(np.int64)]

    coverage_sides = ("before the key, or tied", "at or after it, or untied")

    def coverage_cells(self):
        return aabr_cases.coverage_cells()

    def coverage_rows(self, case_set, reference):
        return aabr_cases.coverage_rows(case_set)

    def self_check(self, case_set, rng, size):
        columns = case_set.columns
        oracle.self_check(unpack(case_set.extra), columns["poly"], columns["c"], columns["s"], rng, size)

    def describe_answer(self, value):
        return ", ".join(f"{side} {int(i)}" for side, i in zip(oracle.SIDES, unpack_answers(value)))

    def check_loops(self, kernel, reference, grid, counts, bound):
        """The grid loop against the oracle (beyond the bound is wrong), and each count loop's
        checksum against the sum of the grid's indices (the same kernel: it must be equal)."""
        problems = []
        mismatch, margin = self.judge(reference.case_set, grid)
        applicable = self.applicable(kernel, reference.case_set)
        beyond = mismatch & (margin > bound) & applicable
        if beyond.any():
            problems.append(f"eval_grid wrong on {int(beyond.sum())} tests beyond rounding")
        expected = int(unpack_answers(grid).sum())
        for loop, checksum in counts.items():
            if checksum != expected:
                problems.append(f"{loop} returns checksum {checksum}, its grid loop's indices sum to {expected}")
        return problems


FAMILY = register(AabrFamily())
