"""Triangle scenes.

Kinds:
  triangles       triangles with vertices uniform in [-1, 1]^2, points likewise.
  thin-triangles  near-degenerate triangles around (1000, 1000): one vertex a few
                  float32 ulps off the line through the other two.
"""

from __future__ import annotations

import numpy as np

from ...model.scenes import Scene, streams
from ..scene_kinds import make_scene
from .cases import TRIANGLE_ARRAYS


def triangles(n: int, m: int, seed: int) -> Scene:
    shapes, points = streams(seed)
    vertices = shapes.uniform(-1.0, 1.0, (6, n)).astype(np.float32)
    p = points.uniform(-1.0, 1.0, (2, m)).astype(np.float32)
    columns = dict(zip(TRIANGLE_ARRAYS, vertices))
    return make_scene("triangles", "triangle", {**columns, "px": p[0], "py": p[1]}, seed)


def thin_triangles(n: int, m: int, seed: int) -> Scene:
    """Slivers near (1000, 1000), where float32 has ~6e-5 of resolution."""
    shapes, points = streams(seed)
    base = np.float32(1000.0)
    a = base + shapes.uniform(-4.0, 4.0, (2, n))
    b = base + shapes.uniform(-4.0, 4.0, (2, n))
    t = shapes.random(n)
    # c on segment ab, then nudged by a few ulps across it.
    c = a + t * (b - a)
    ulps = shapes.integers(-4, 5, (2, n))
    c32 = c.astype(np.float32)
    c32 = c32 + ulps * np.spacing(c32)
    columns = dict(zip(TRIANGLE_ARRAYS, (*a.astype(np.float32), *b.astype(np.float32), *c32)))
    p = (base + points.uniform(-4.0, 4.0, (2, m))).astype(np.float32)
    return make_scene("thin-triangles", "triangle", {**columns, "px": p[0], "py": p[1]}, seed)


SCENES = {"triangles": triangles, "thin-triangles": thin_triangles}
