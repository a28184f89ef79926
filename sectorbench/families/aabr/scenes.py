"""aabr scenes: N polygons x M rotations (a grid: every polygon at every rotation).

Kinds:
  polygons            random convex polygons (hull of stratified points on a random
                      ellipse); options: vertices (V for every polygon, 0: log-uniform in
                      4 .. 1024) and coherent (one frame-coherent turning sequence instead
                      of random rotations)
  regular             regular polygons of 4 .. 1024 vertices (many exact ties); random
                      rotations, or coherent ones
Older spellings, kept as aliases: polygons-coherent, polygons<V>, polygons<V>-coherent (V in
SIZES, the crossover benchmark's scenes).
"""

from __future__ import annotations

import numpy as np

from ...errors import SectorbenchError
from ...model.scenes import Scene, streams
from ..base import SceneOption
from ..scene_kinds import make_scene
from .polygons import F32, coherent_angles, ellipse_polygon, pack, random_angles, regular_polygon

SIZES = (4, 8, 16, 32, 64, 128, 256, 512, 1024)
FEWEST, MOST = 4, 1024


def _scene(kind, n, m, seed, polygons, angles, vertices, coherent) -> Scene:
    shapes, points = streams(seed)
    made = [polygons(shapes, i) for i in range(n)]
    columns = {"poly": np.arange(n, dtype=F32), **angles(points, m)}
    options = {"coherent": coherent} if vertices is None else {"vertices": vertices, "coherent": coherent}
    return make_scene(kind, "aabr", columns, seed, extra=pack(made), options=options)


def _mixed_size(rng) -> int:
    return int(np.exp(rng.uniform(np.log(FEWEST), np.log(MOST + 1))))


def _sized(vertices):
    return lambda rng, i: ellipse_polygon(rng, vertices)


def check_vertices(vertices: int) -> None:
    if vertices != 0 and not FEWEST <= vertices <= MOST:
        raise SectorbenchError(f"--vertices must be 0 (mixed) or from {FEWEST} to {MOST} (got {vertices})")


def polygons(n: int, m: int, seed: int, *, vertices: int = 0, coherent: bool = False) -> Scene:
    check_vertices(vertices)
    made = _sized(vertices) if vertices else lambda rng, i: ellipse_polygon(rng, _mixed_size(rng))
    return _scene("polygons", n, m, seed, made, coherent_angles if coherent else random_angles, vertices, coherent)


def regular(n: int, m: int, seed: int, *, coherent: bool = False) -> Scene:
    def made(rng, i):
        return regular_polygon(_mixed_size(rng), 1.0, int(rng.integers(2)), int(rng.integers(FEWEST)))

    return _scene("regular", n, m, seed, made, coherent_angles if coherent else random_angles, None, coherent)


#: What making a scene's polygons costs, in Python, one polygon at a time: the size and time
#: checks count it before the scene is made (`run -n 5000000 --scene polygons --vertices 1024`
#: was let through, to build for hours).  Measured at commit 4ea0e1d on this 2-core machine:
#: generate("polygons", N, 2, 0, {"vertices": V}) took 199 us a polygon at V = 4 (N = 2e4, 4e4)
#: and 730 us at V = 1024 (N = 4e3), 1.2 ms in `run -n 50000 -m 1 --vertices 1024` (58 s before its
#: plan line; 0.9 us a vertex); mixed sizes (V = 0: 195 vertices on average) 404 us;
#: generate("regular", 1000, 2) 3.1-4.1 ms a polygon.  A process tree's peak Pss (sampled every
#: 20 ms) of `run --scene polygons --vertices 1024 -n 1000|3000 -m 2 --repeat 1 --flags -O2
#: --kernels scan`: 116 and 302 MB, 91 B a vertex.
POLYGON_S, VERTEX_S = 200e-6, 0.9e-6
MIXED_POLYGON_S, REGULAR_POLYGON_S = 450e-6, 4.5e-3
MIXED_VERTICES = 195
PEAK_BYTES_PER_VERTEX = 96


def scene_cost(kind: str, n: int, options) -> tuple[int, float]:
    """(peak bytes, seconds) of making `kind`'s n polygons, beyond the scene's columns."""
    vertices = (options.get("vertices") or 0) if kind == "polygons" else 0
    check_vertices(vertices)  # out of range: said so, not priced
    if vertices:
        return PEAK_BYTES_PER_VERTEX * n * vertices, n * (POLYGON_S + vertices * VERTEX_S)
    each_s = MIXED_POLYGON_S if kind == "polygons" else REGULAR_POLYGON_S
    return PEAK_BYTES_PER_VERTEX * n * MIXED_VERTICES, n * each_s


SCENES = {"polygons": polygons, "regular": regular}
OPTIONS = (
    SceneOption("vertices", int, f"Vertices of every polygon, {FEWEST} to {MOST}; 0: mixed (polygons scenes)"),
    SceneOption("coherent", bool, "Frame-coherent rotations (a turning character) instead of random ones"),
)
ALIASES = {"polygons-coherent": ("polygons", {"coherent": True})}
for _v in SIZES:
    ALIASES[f"polygons{_v}"] = ("polygons", {"vertices": _v})
    ALIASES[f"polygons{_v}-coherent"] = ("polygons", {"vertices": _v, "coherent": True})
