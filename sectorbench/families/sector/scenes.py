"""Sector scenes.

Every scene is reproducible bit for bit from (kind, n, m, seed): the generators use
only IEEE-exact float32/float64 arithmetic (+, *, /, sqrt) on numpy's PCG64 streams,
plus libm's cos for cos_theta, which is rounded to float32 from float64.

Kinds:
  uniform        the article's ranges: c, p uniform in [-1, 1]^2, u a random unit
                 vector, r in (0, 2], theta in (0, pi), r2 = r*r and
                 cos_theta = cos(theta) rounded to float32.
  article        a bit-exact replica of the published program's data (MSVC rand()
                 after srand(0)); its point loop fills only the first N points, so
                 points N..M-1 stay at (0, 0), a quirk of the original.
  article-fixed  the same stream, all M points filled.
  game           a game's world: a square of side `world` (default 1000), points and apexes
                 uniform in it, r uniform in [rmin, rmax] (default 2..20), theta in (0, pi),
                 u a random unit vector: cones far smaller than the world.
  clustered      crowds: the points in CLUSTERS Gaussian clusters (centres uniform in the
                 middle 90 % of the world, sigma uniform in [5, 40] x world / 1000), 70 % of
                 the apexes drawn from the same crowds and 30 % uniform; r, theta, u as game.
                 (numpy's normal draws use its own log/exp: reproducible for one numpy version.)
"""

from __future__ import annotations

import math

import numpy as np

from ...errors import SectorbenchError
from ...model.scenes import Scene, streams
from ..base import SceneOption
from ..scene_kinds import make_scene

#: The largest float32 strictly below pi: theta must stay < pi, and float32(pi) > pi.
THETA_MAX = np.nextafter(np.float32(np.pi), np.float32(0))


def cos_float32(theta: np.ndarray) -> np.ndarray:
    # libm's cos, not numpy's SIMD one, whose last bit may differ between CPUs.
    return np.array([math.cos(float(t)) for t in theta], dtype=np.float64).astype(np.float32)


def sector_columns(cx, cy, ux, uy, r, theta) -> dict[str, np.ndarray]:
    r = np.asarray(r, dtype=np.float32)
    theta = np.asarray(theta, dtype=np.float32)
    return {
        "cx": cx,
        "cy": cy,
        "ux": ux,
        "uy": uy,
        "r": r,
        "theta": theta,
        "r2": r * r,
        "cos_theta": cos_float32(theta),
    }


def uniform(n: int, m: int, seed: int) -> Scene:
    shapes, points = streams(seed)
    centre = shapes.uniform(-1.0, 1.0, (2, n)).astype(np.float32)
    gauss = shapes.standard_normal((2, n))
    direction = (gauss / np.sqrt(gauss[0] ** 2 + gauss[1] ** 2)).astype(np.float32)
    r = (2.0 * (1.0 - shapes.random(n))).astype(np.float32)  # (0, 2]
    theta = np.minimum((np.pi * (1.0 - shapes.random(n))).astype(np.float32), THETA_MAX)
    theta = np.maximum(theta, np.float32(np.finfo(np.float32).tiny))  # (0, pi)
    p = points.uniform(-1.0, 1.0, (2, m)).astype(np.float32)
    columns = sector_columns(centre[0], centre[1], direction[0], direction[1], r, theta)
    return make_scene("uniform", "sector", {**columns, "px": p[0], "py": p[1]}, seed)


class MsvcRand:
    """The Microsoft C runtime's rand(): state = state * 214013 + 2531011, srand(seed) sets the state."""

    RAND_MAX = 32767

    def __init__(self, seed: int = 0):
        self.state = seed & 0xFFFFFFFF

    def next(self) -> int:
        self.state = (self.state * 214013 + 2531011) & 0xFFFFFFFF
        return (self.state >> 16) & 0x7FFF

    def uniform(self, lo: float, hi: float, count: int = 1) -> np.ndarray:
        """The article's Uniform(lo, hi) = rand() * (hi - lo) / RAND_MAX + lo, in float32."""
        draws = np.array([self.next() for _ in range(count)], dtype=np.float32)
        lo32, hi32 = np.float32(lo), np.float32(hi)
        return draws * (hi32 - lo32) / np.float32(self.RAND_MAX) + lo32


def article(n: int, m: int, seed: int, fill_all_points: bool = False) -> Scene:
    rand = MsvcRand(seed)
    columns = {name: np.empty(n, dtype=np.float32) for name in ("cx", "cy", "ux", "uy", "r", "theta")}
    one = np.float32(1.0)
    for i in range(n):
        columns["cx"][i], columns["cy"][i] = rand.uniform(-1.0, 1.0, 2)
        ux, uy = rand.uniform(-1.0, 1.0, 2)
        inverse_length = one / np.sqrt(ux * ux + uy * uy)
        columns["ux"][i], columns["uy"][i] = ux * inverse_length, uy * inverse_length
        columns["r"][i] = rand.uniform(0.0, 2.0)[0]
        columns["theta"][i] = rand.uniform(0.0, float(np.float32(np.pi)))[0]
    filled = m if fill_all_points else min(n, m)
    p = rand.uniform(-1.0, 1.0, 2 * filled).reshape(filled, 2).T
    px = np.zeros(m, dtype=np.float32)
    py = np.zeros(m, dtype=np.float32)
    px[:filled], py[:filled] = p[0], p[1]
    c = columns
    sectors = sector_columns(c["cx"], c["cy"], c["ux"], c["uy"], c["r"], c["theta"])
    return make_scene(
        "article-fixed" if fill_all_points else "article", "sector", {**sectors, "px": px, "py": py}, seed
    )


#: The game scenes' defaults: a world far larger than any cone, as in the game
#: code that calls this test once per character per cone.
GAME_WORLD = 1000.0
GAME_RMIN = 2.0
GAME_RMAX = 20.0
#: Crowds in a clustered scene, and the share of its apexes drawn from them (the rest uniform).
CLUSTERS = 64
CLUSTERED_APEX_SHARE = 0.7


#: The largest --world and --rmax (and 1 / the smallest --rmin): a radius squared (r2) and a
#: squared distance across the world must stay within float32 (3.4e38, smallest normal 1.2e-38),
#: or r2 overflows to inf (or rounds to 0) and every check trips.
GAME_SIZE_LIMIT = 1e18


def check_game_options(world: float, rmin: float, rmax: float) -> None:
    if not (math.isfinite(world) and 0 < world <= GAME_SIZE_LIMIT):
        raise SectorbenchError(f"--world must be a positive number up to {GAME_SIZE_LIMIT:g} (got {world})")
    if not (math.isfinite(rmin) and math.isfinite(rmax) and 0 < rmin <= rmax):
        raise SectorbenchError(f"--rmin and --rmax must satisfy 0 < rmin <= rmax (got {rmin}, {rmax})")
    if rmax > GAME_SIZE_LIMIT:
        raise SectorbenchError(f"--rmax must be at most {GAME_SIZE_LIMIT:g}: r squared must fit a float32 (got {rmax})")
    if rmin < 1 / GAME_SIZE_LIMIT:
        raise SectorbenchError(
            f"--rmin must be at least {1 / GAME_SIZE_LIMIT:g}: r squared must not round to 0 (got {rmin})"
        )


def random_cones(shapes: np.random.Generator, n: int, rmin: float, rmax: float) -> dict[str, np.ndarray]:
    """u a random unit vector, r uniform in [rmin, rmax], theta uniform in (0, pi)."""
    gauss = shapes.standard_normal((2, n))
    direction = (gauss / np.sqrt(gauss[0] ** 2 + gauss[1] ** 2)).astype(np.float32)
    r = (rmin + (rmax - rmin) * shapes.random(n)).astype(np.float32)
    theta = np.minimum((np.pi * (1.0 - shapes.random(n))).astype(np.float32), THETA_MAX)
    theta = np.maximum(theta, np.float32(np.finfo(np.float32).tiny))
    return {"ux": direction[0], "uy": direction[1], "r": r, "theta": theta}


def game(n: int, m: int, seed: int, *, world: float = GAME_WORLD, rmin: float = GAME_RMIN, rmax: float = GAME_RMAX):
    check_game_options(world, rmin, rmax)
    shapes, points = streams(seed)
    apex = shapes.uniform(0.0, world, (2, n)).astype(np.float32)
    cone = random_cones(shapes, n, rmin, rmax)
    p = points.uniform(0.0, world, (2, m)).astype(np.float32)
    columns = sector_columns(apex[0], apex[1], cone["ux"], cone["uy"], cone["r"], cone["theta"])
    options = {"world": world, "rmin": rmin, "rmax": rmax}
    return make_scene("game", "sector", {**columns, "px": p[0], "py": p[1]}, seed, options=options)


def clustered(
    n: int, m: int, seed: int, *, world: float = GAME_WORLD, rmin: float = GAME_RMIN, rmax: float = GAME_RMAX
) -> Scene:
    check_game_options(world, rmin, rmax)
    shapes, points = streams(seed)
    crowds = np.random.Generator(np.random.PCG64(np.random.SeedSequence([seed, 1])))
    centre = crowds.uniform(0.05 * world, 0.95 * world, (CLUSTERS, 2))
    sigma = crowds.uniform(5.0, 40.0, CLUSTERS) * (world / 1000.0)

    def draw(rng: np.random.Generator, count: int) -> np.ndarray:
        which = rng.integers(0, CLUSTERS, count)
        return (centre[which] + rng.standard_normal((count, 2)) * sigma[which, None]).T

    p = draw(points, m).astype(np.float32)
    apex = draw(shapes, n)
    uniform_apex = shapes.random(n) >= CLUSTERED_APEX_SHARE
    apex[:, uniform_apex] = shapes.uniform(0.0, world, (2, int(uniform_apex.sum())))
    apex = apex.astype(np.float32)
    cone = random_cones(shapes, n, rmin, rmax)
    columns = sector_columns(apex[0], apex[1], cone["ux"], cone["uy"], cone["r"], cone["theta"])
    options = {"world": world, "rmin": rmin, "rmax": rmax}  # CLUSTERS is fixed, not an option
    return make_scene("clustered", "sector", {**columns, "px": p[0], "py": p[1]}, seed, options=options)


#: Scenes at game scale: a world far larger than the cones (run's default broadphase is an index).
GAME_SCENES = ("game", "clustered")

OPTIONS = (
    SceneOption("world", float, f"Side of the square world (game, clustered scenes) [default: {GAME_WORLD:g}]"),
    SceneOption("rmin", float, f"Smallest sector radius (game, clustered scenes) [default: {GAME_RMIN:g}]"),
    SceneOption("rmax", float, f"Largest sector radius (game, clustered scenes) [default: {GAME_RMAX:g}]"),
)

SCENES = {
    "uniform": uniform,
    "article": article,
    "article-fixed": lambda n, m, seed: article(n, m, seed, fill_all_points=True),
    "game": game,
    "clustered": clustered,
}
