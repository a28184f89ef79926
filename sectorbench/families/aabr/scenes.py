"""aabr scenes: N polygons x M rotations (a grid: every polygon at every rotation).

Kinds:
  polygons            random convex polygons (hull of stratified points on a random
                      ellipse), vertex counts log-uniform in 4 .. 1024; random rotations
  polygons-coherent   the same polygons; one frame-coherent turning sequence
  regular             regular polygons of 4 .. 1024 vertices (many exact ties); random
  polygons<V>, polygons<V>-coherent   every polygon has V vertices (V in SIZES): the
                      crossover benchmark's scenes
"""

from __future__ import annotations

import numpy as np

from ...scenes import Scene, make_scene, streams
from .polygons import F32, coherent_angles, ellipse_polygon, pack, random_angles, regular_polygon

SIZES = (4, 8, 16, 32, 64, 128, 256, 512, 1024)
FEWEST, MOST = 4, 1024


def _scene(kind, n, m, seed, polygons, angles) -> Scene:
    shapes, points = streams(seed)
    made = [polygons(shapes, i) for i in range(n)]
    columns = {"poly": np.arange(n, dtype=F32), **angles(points, m)}
    return make_scene(kind, "aabr", columns, seed, extra=pack(made))


def _mixed_size(rng) -> int:
    return int(np.exp(rng.uniform(np.log(FEWEST), np.log(MOST + 1))))


def _kind(name, polygons, angles):
    def generate(n: int, m: int, seed: int) -> Scene:
        return _scene(name, n, m, seed, polygons, angles)

    generate.__doc__ = f"aabr scene kind {name!r}"
    return generate


def _sized(vertices):
    return lambda rng, i: ellipse_polygon(rng, vertices)


SCENES = {
    "polygons": _kind("polygons", lambda rng, i: ellipse_polygon(rng, _mixed_size(rng)), random_angles),
    "polygons-coherent": _kind(
        "polygons-coherent", lambda rng, i: ellipse_polygon(rng, _mixed_size(rng)), coherent_angles
    ),
    "regular": _kind(
        "regular",
        lambda rng, i: regular_polygon(_mixed_size(rng), 1.0, int(rng.integers(2)), int(rng.integers(FEWEST))),
        random_angles,
    ),
}
for _v in SIZES:
    SCENES[f"polygons{_v}"] = _kind(f"polygons{_v}", _sized(_v), random_angles)
    SCENES[f"polygons{_v}-coherent"] = _kind(f"polygons{_v}-coherent", _sized(_v), coherent_angles)
