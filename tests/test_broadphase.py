"""The broadphase: identical hits to brute force on seeded and adversarial scenes, a box that
holds every hit (kernel's and exact), and the game scenes' options."""

from __future__ import annotations

import contextlib
import json
import platform
import subprocess
import sys
from pathlib import Path

import numpy as np
import pytest

from sectorbench.errors import SectorbenchError
from sectorbench.families import scene_kinds as scenes
from sectorbench.families.sector.broadphase import ISA_CODES, cell_size
from sectorbench.families.sector.oracle import sector_inside
from sectorbench.families.sector.peers import NumpyPeer
from sectorbench.families.sector.query import engine

F32 = np.float32
COLUMNS = ("cx", "cy", "ux", "uy", "r2", "cos_theta")
#: The index has its write-combined way, and chooses, only on x86 (elsewhere: plain stores).
X86 = platform.machine() in ("x86_64", "AMD64", "i386", "i686")


def brute_force(columns) -> list[np.ndarray]:
    """Each sector's hits by the numpy peer (sse2_nosqrt's operations, in numpy)."""
    peer, m = NumpyPeer(), len(columns["px"])
    with np.errstate(all="ignore"):
        return [
            np.flatnonzero(
                peer.pairs(
                    {
                        **{k: np.full(m, columns[k][i], dtype=F32) for k in COLUMNS},
                        "px": columns["px"],
                        "py": columns["py"],
                    }
                )
            )
            for i in range(len(columns["cx"]))
        ]


def hits_of(kind, columns, **options):
    columns = {k: np.ascontiguousarray(v, dtype=F32) for k, v in columns.items()}
    return engine().hits(kind, columns, len(columns["cx"]), len(columns["px"]), **options)


def assert_identical(columns):
    """none, grid and morton give the same CSR, and it is the numpy peer's, sector by sector."""
    columns = {k: np.ascontiguousarray(v, dtype=F32) for k, v in columns.items()}
    none = hits_of("none", columns)
    for kind in ("grid", "morton"):
        other = hits_of(kind, columns)
        assert np.array_equal(other.offsets, none.offsets), kind
        assert np.array_equal(other.indices, none.indices), kind
    reference = brute_force(columns)
    for i, expected in enumerate(reference):
        assert np.array_equal(none.indices[none.offsets[i] : none.offsets[i + 1]], expected), i
    return none


def sector(cx, cy, ux, uy, r, theta):
    r, theta = np.asarray(r, dtype=np.float64), np.asarray(theta, dtype=np.float64)
    return {
        "cx": np.asarray(cx, dtype=F32),
        "cy": np.asarray(cy, dtype=F32),
        "ux": np.asarray(ux, dtype=F32),
        "uy": np.asarray(uy, dtype=F32),
        "r2": (r.astype(F32) * r.astype(F32)).astype(F32),
        "cos_theta": np.cos(theta).astype(F32),
    }


def ulps(values, k):
    """values moved by -k..k float32 ulps."""
    values = np.asarray(values, dtype=F32)
    out = [values]
    up, down = values, values
    for _ in range(k):
        up, down = np.nextafter(up, F32(np.inf)), np.nextafter(down, F32(-np.inf))
        out += [up, down]
    return np.concatenate(out)


# ---------------------------------------------------------------- adversarial scenes


def borders_scene(rng):
    """Points exactly on the grid's cell borders (r = 8: cell 4) and the Morton cells'
    (extent 100, q = 5: 3.125), and 1 ulp either side; apexes on the lattice, u along the axes
    and the diagonals, so box sides fall on borders."""
    lattice = np.concatenate([np.arange(0, 101, 4.0), np.arange(0, 101, 3.125)])
    x = ulps(lattice, 1)
    px, py = (a.ravel() for a in np.meshgrid(x, x[::7]))
    n = 300
    diagonal = np.sqrt(F32(0.5))
    directions = np.array([(1, 0), (-1, 0), (0, 1), (0, -1), (diagonal, diagonal), (-diagonal, diagonal)], dtype=F32)
    d = directions[rng.integers(0, len(directions), n)]
    theta = rng.choice([np.pi / 4, np.pi / 2, 3 * np.pi / 4, 1e-3, np.pi - 1e-3], n)
    columns = sector(rng.choice(lattice, n), rng.choice(lattice, n), d[:, 0], d[:, 1], np.full(n, 8.0), theta)
    return {**columns, "px": px, "py": py}


def edges_scene(rng):
    """Points on the world's edges and corners and 1-2 ulps outside; apexes on the edges, just
    outside and 1e4 away with radii that reach in."""
    t = rng.uniform(0, 1000, 400).astype(F32)
    edge = ulps(np.array([0.0, 1000.0], dtype=F32), 2)
    px = np.concatenate([np.repeat(edge, len(t)), np.tile(t, len(edge)), np.repeat(edge, len(edge))])
    py = np.concatenate([np.tile(t, len(edge)), np.repeat(edge, len(t)), np.tile(edge, len(edge))])
    n = 200
    gauss = rng.standard_normal((2, n))
    u = gauss / np.hypot(*gauss)
    cx = rng.choice(np.concatenate([edge, [-1e4, 1.1e4], t[:20]]), n)
    cy = rng.choice(np.concatenate([edge, [-1e4, 1.1e4], t[:20]]), n)
    r = np.where(np.abs(cx - 500) > 5000, 1.2e4, rng.uniform(1, 300, n))
    columns = sector(cx, cy, u[0], u[1], r, rng.uniform(0.01, 3.1, n))
    return {**columns, "px": px, "py": py}


def onecell_scene(rng):
    """Every point in one 0.001-wide square (on the float32 lattice there, with duplicates)."""
    p = rng.uniform(500, 500.001, (2, 5000))
    n = 200
    gauss = rng.standard_normal((2, n))
    u = gauss / np.hypot(*gauss)
    c = rng.uniform(499.999, 500.002, (2, n))
    columns = sector(c[0], c[1], u[0], u[1], 10.0 ** rng.uniform(-5, 1, n), rng.uniform(0.01, 3.1, n))
    return {**columns, "px": p[0], "py": p[1]}


def tinyhuge_scene(rng):
    """Tiny and huge sectors, theta near 0 and near pi, apexes exactly on points."""
    p = rng.uniform(-100, 100, (2, 4000)).astype(F32)
    n = 300
    gauss = rng.standard_normal((2, n))
    u = gauss / np.hypot(*gauss)
    on = rng.integers(0, p.shape[1], n)
    r = rng.choice([1e-6, 1e-3, 0.1, 5.0, 2000.0, 1e5], n)
    theta = rng.choice([1e-7, 1e-4, 3.4e-4, 0.5, np.pi / 2, np.pi - 1e-4, np.pi - 1e-7], n)
    columns = sector(p[0, on], p[1, on], u[0], u[1], r, theta)
    columns["cos_theta"][:5] = (1.0, -1.0, 0.0, -0.0, 1.0)  # k exactly +-1 and +-0
    return {**columns, "px": p[0], "py": p[1]}


def quantisation_scene(rng):
    """A world at 1e6 (float32 step 0.0625: about one Morton cell) plus an outlier that
    stretches the extent, and sectors of a few steps."""
    p = rng.uniform(1e6, 1e6 + 64, (2, 4000)).astype(F32)
    p[:, 0] = (-3e5, 3e5)
    n = 300
    gauss = rng.standard_normal((2, n))
    u = gauss / np.hypot(*gauss)
    c = p[:, rng.integers(0, p.shape[1], n)]
    columns = sector(c[0], c[1], u[0], u[1], rng.uniform(0.05, 8, n), rng.uniform(0.01, 3.1, n))
    return {**columns, "px": p[0], "py": p[1]}


def band_scene(rng):
    """Points within 3 ulps of each sector's arc ends, edge rays and axis extremes: where the
    float32 kernel and the exact sector disagree, and a too-tight box would lose a hit."""
    n = 120
    gauss = rng.standard_normal((2, n))
    u = gauss / np.hypot(*gauss)
    c = rng.uniform(0, 50, (2, n))
    r = rng.uniform(0.5, 6, n)
    theta = np.concatenate([rng.uniform(1e-7, 1e-3, n // 2), rng.uniform(0.01, 3.14, n - n // 2)])
    columns = sector(c[0], c[1], u[0], u[1], r, theta)
    xs, ys = [], []
    for i in range(n):
        for angle in (theta[i], -theta[i]):
            ca, sa = np.cos(angle), np.sin(angle)
            ex, ey = u[0, i] * ca - u[1, i] * sa, u[0, i] * sa + u[1, i] * ca
            for t in (0.5, 0.999, 1.0):
                xs.append(c[0, i] + t * r[i] * ex)
                ys.append(c[1, i] + t * r[i] * ey)
        for ex, ey in ((1, 0), (-1, 0), (0, 1), (0, -1)):
            xs.append(c[0, i] + r[i] * ex)
            ys.append(c[1, i] + r[i] * ey)
    x, y = ulps(np.array(xs, dtype=F32), 3), ulps(np.array(ys, dtype=F32), 3)
    px = np.concatenate([x, np.tile(np.array(xs, dtype=F32), 7)])
    py = np.concatenate([np.tile(np.array(ys, dtype=F32), 7), y])
    return {**columns, "px": px, "py": py}


ADVERSARIAL = {
    "borders": borders_scene,
    "edges": edges_scene,
    "onecell": onecell_scene,
    "tinyhuge": tinyhuge_scene,
    "quantisation": quantisation_scene,
    "band": band_scene,
}


@pytest.mark.parametrize("name", list(ADVERSARIAL))
def test_adversarial_scenes_give_identical_hits(name):
    columns = ADVERSARIAL[name](np.random.default_rng(12))
    none = assert_identical(columns)
    assert none.total > 0  # the scene does test something


@pytest.mark.parametrize("name", list(ADVERSARIAL))
def test_box_holds_every_kernel_hit_and_every_exact_hit(name):
    columns = {k: np.ascontiguousarray(v, dtype=F32) for k, v in ADVERSARIAL[name](np.random.default_rng(5)).items()}
    runner, n = engine(), len(columns["cx"])
    keep: list = []
    sectors = runner.sectors(columns, n, keep)
    box = runner.ffi.new("double[4]")
    none = hits_of("none", columns)
    px, py = columns["px"].astype(np.float64), columns["py"].astype(np.float64)
    exact_hits = kernel_hits = 0
    for i in range(n):
        if not runner.lib.sb_bp_box(sectors, i, box):
            assert none.offsets[i + 1] == none.offsets[i]
            continue
        inside_box = (px >= box[0]) & (px <= box[1]) & (py >= box[2]) & (py <= box[3])
        accepted = none.indices[none.offsets[i] : none.offsets[i + 1]]
        assert inside_box[accepted].all(), f"sector {i}: a kernel hit lies outside its box"
        kernel_hits += len(accepted)
        # the exact oracle on every point near the sector (a generous disc around the apex)
        r = np.sqrt(float(columns["r2"][i]))
        near = np.flatnonzero(np.hypot(px - columns["cx"][i], py - columns["cy"][i]) <= 1.01 * r + 1e-3)
        if len(near):
            args = [np.full(len(near), columns[k][i], dtype=F32) for k in COLUMNS]
            exact = near[sector_inside(*args, columns["px"][near], columns["py"][near])]
            assert inside_box[exact].all(), f"sector {i}: an exact hit lies outside its box"
            exact_hits += len(exact)
    assert kernel_hits > 0 and exact_hits > 0


@pytest.mark.parametrize("kind", ["game", "clustered"])
def test_seeded_game_scenes_identical_across_broadphases_isas_and_threads(kind):
    scene = scenes.generate(kind, 400, 20_000, seed=3)
    columns = {name: scene.column(name) for name in (*COLUMNS, "px", "py")}
    none = assert_identical(columns)
    for isa in (name for name, code in ISA_CODES.items() if code and engine().lib.sb_bp_isa_supported(code)):
        for kind_ in ("grid", "morton"):
            assert hits_of(kind_, columns, isa=isa).same_as(none), (kind_, isa)
    assert hits_of("grid", columns, threads=3).same_as(none)
    assert none.total > 1000


def test_broadphase_matches_the_harness_kernel_it_reuses(o2_worker, scratch):
    """The narrow phase is avx512_nosqrt's predicate (or its AVX2/SSE2 twin): its hits are
    that kernel's eval_grid, pair for pair, run by the harness's worker."""
    scene = scenes.generate("game", 60, 30_000, seed=4, options={"world": 200.0})
    o2_worker.load(scene, scratch)
    name = engine().narrow_phase()
    grid = o2_worker.evaluate(name).astype(bool)
    columns = {k: scene.column(k) for k in (*COLUMNS, "px", "py")}
    hits = hits_of("grid", columns)
    for i in range(scene.n_shapes):
        assert np.array_equal(hits.indices[hits.offsets[i] : hits.offsets[i + 1]], np.flatnonzero(grid[i]))
    assert hits.total > 0


def test_bit_tricks_match_plain_loops():
    assert engine().lib.sb_bp_selftest_bits(200_000) == 0


@pytest.mark.parametrize("simd", [3, 2, 0], ids=["avx512", "avx2", "portable"])
def test_each_sort_orders_every_size_of_a_sectors_hits(simd):
    """The query sorts with the best sort its CPU has; the others are reached only here.  Every
    size up to 600 (every register count of each network, 1 to 256 ids, and the partition above) and a few
    large ones, ids in ascending runs as a sector's hits arrive, spread over their range (seeds 1
    and 977) or in two dense clusters far apart (seed 0: the partition's pivot is the middle of
    the range); each sorted into a buffer apart (as the query's join does, the source left as it
    was) and in place."""
    lib = engine().lib
    if lib.sb_bp_selftest_sort(simd, 1, 1) == -1:
        pytest.skip(f"this CPU has no {'AVX-512' if simd == 3 else 'AVX2'}")
    sizes = [*range(0, 600), 1023, 1024, 1025, 4099, 20_000]
    wrong = [n for n in sizes for seed in (1, 977, 0) if lib.sb_bp_selftest_sort(simd, n, seed) != 0]
    assert not wrong


@pytest.mark.parametrize("cell", [0.3, 1 / 3, 0.7, 2.9])
def test_grid_cells_of_points_lie_within_the_cells_of_every_box_holding_them(cell):
    """The grid's promise, checked where it could break: points within 3 ulps of the cell
    borders, boxes whose edges are those points and 1e-12 of them either way (the box edges
    are doubles, the points' cells float32 arithmetic); and the vector keys equal the scalar
    ones on every point.  The origin (the smallest point) is not 0, so that the subtraction
    counts."""
    rng = np.random.default_rng(int(cell * 1000))
    origin = F32(10.37)
    lattice = ulps((origin + np.arange(1, 60) * cell).astype(F32), 3)
    # more points than cells (59 x 59), or the grid would widen its cells to one point each
    px = np.concatenate([[origin], rng.choice(lattice, 8000)]).astype(F32)
    py = np.concatenate([[origin], rng.choice(lattice, 8000)]).astype(F32)
    edges = lambda v: v * (1 + rng.choice([-1e-12, 0.0, 1e-12], len(v)))  # noqa: E731
    lo_x, lo_y = edges(rng.choice(lattice, 400).astype(float)), edges(rng.choice(lattice, 400).astype(float))
    width = rng.choice([0.0, cell, 3 * cell], 400)
    boxes = np.ascontiguousarray(np.stack([lo_x, lo_x + width, lo_y, edges(lo_y + width)], axis=1))
    runner = engine()
    pairs = runner.ffi.new("int64_t *")
    wrong = runner.lib.sb_bp_selftest_grid(
        runner.ffi.from_buffer("float[]", px),
        runner.ffi.from_buffer("float[]", py),
        len(px),
        cell,
        runner.ffi.from_buffer("double[]", boxes),
        len(boxes),
        pairs,
    )
    assert wrong == 0
    assert pairs[0] > 1000  # the boxes do hold points near their edges


def test_cell_size_follows_the_median_radius():
    assert cell_size(np.array([4.0, 16.0, 64.0], dtype=F32)) == 0.5 * 4.0
    assert cell_size(np.array([np.nan, -1.0, 0.0], dtype=F32)) == 1.0


def test_game_scene_options_reach_the_generator_and_its_description():
    scene = scenes.generate("game", 500, 2000, seed=1, options={"world": 50.0, "rmin": 1.0, "rmax": 3.0})
    r = np.sqrt(scene.column("r2").astype(np.float64))
    assert scene.column("px").max() <= 50 and scene.column("cx").max() <= 50
    assert 1.0 - 1e-5 <= r.min() and r.max() <= 3.0 + 1e-5
    assert scene.describe()["options"] == {"world": 50.0, "rmin": 1.0, "rmax": 3.0}
    again = scenes.generate("game", 500, 2000, seed=1, options={"world": 50.0, "rmin": 1.0, "rmax": 3.0})
    assert again.digest() == scene.digest()
    assert scenes.generate("game", 500, 2000, seed=2).digest() != scene.digest()


def test_clustered_points_are_crowded():
    scene = scenes.generate("clustered", 100, 50_000, seed=1)
    counts, _, _ = np.histogram2d(scene.column("px"), scene.column("py"), bins=20, range=[[0, 1000], [0, 1000]])
    assert counts.max() > 10 * counts.mean()  # crowds, not a uniform spread


@pytest.mark.parametrize(
    "kind, options, message",
    [
        ("uniform", {"world": 10.0}, "--world does not apply to uniform"),
        ("game", {"world": -1.0}, "--world must be a positive"),
        ("game", {"rmin": 5.0, "rmax": 2.0}, "0 < rmin <= rmax"),
    ],
)
def test_bad_scene_options_are_refused(kind, options, message):
    with pytest.raises(SectorbenchError, match=message):
        scenes.generate(kind, 10, 10, options=options)


def test_run_times_broadphases_in_the_same_rounds_with_identical_hits(tmp_path):
    from sectorbench.measure.runner import RunConfig, run
    from sectorbench.measure.timing import TimingConfig
    from sectorbench.model.results import load, save
    from sectorbench.native.build import BuildConfig

    config = RunConfig(
        scene="clustered",
        sectors=200,
        points=5000,
        kernels=("sse2_nosqrt",),
        builds=(BuildConfig.parse("-O2"),),
        timing=TimingConfig(repeat=2, min_sample_s=0.001),
        broadphases=("none", "grid", "morton"),
        scene_options={"world": 400.0},
        threads=(1, 2),
    )
    result = run(config)
    assert all(r.status == "ok" for r in result.results)
    assert len({r.hits for r in result.results}) == 1 and result.results[0].hits > 0
    assert {(r.kernel, r.threads) for r in result.results} == {
        (k, t) for k in ("sse2_nosqrt", "grid", "morton") for t in (1, 2)
    }
    rows = {r.kernel: r for r in result.results if r.threads == 1}
    for name in ("grid", "morton"):
        assert rows[name].broadphase == name and 0 < rows[name].index_build_s < rows[name].median_s
        assert len(rows[name].samples_s) == 2 and rows[name].candidates > 0
        assert rows[name].index_scatter == "plain"  # 5 000 points: below the trials' 2^18
    assert rows["sse2_nosqrt"].index_scatter is None
    assert result.scene["options"]["world"] == 400.0
    assert result.config["broadphase"] == ["none", "grid", "morton"]
    path = save(result, tmp_path / "run.json")
    saved = {(r.kernel, r.threads): r for r in load(path).results}
    assert saved[("grid", 1)].index_build_s == rows["grid"].index_build_s
    assert saved[("morton", 2)].index_scatter == "plain"


def _cpu_flags() -> set[str]:
    text = Path("/proc/cpuinfo").read_text() if Path("/proc/cpuinfo").exists() else ""
    return set(next((line.split(":", 1)[1].split() for line in text.splitlines() if line.startswith("flags")), []))


@pytest.mark.parametrize("disabled", [("avx512f",), ("avx512f", "avx2"), ("sse2",)], ids=["avx512f", "avx2", "sse2"])
def test_a_broadphase_row_runs_only_what_disable_isa_leaves(disabled):
    """`run --disable-isa avx512f` timed a grid row whose narrow phase (and sort, and keys) were
    AVX-512 all the same: the C picked its instruction sets from the CPU alone."""
    from sectorbench.measure.runner import RunConfig, run
    from sectorbench.measure.timing import TimingConfig
    from sectorbench.native.build import BuildConfig

    if platform.machine() not in ("x86_64", "AMD64"):
        pytest.skip("the broadphase's narrow phases are x86's")
    config = RunConfig(
        scene="game",
        sectors=200,
        points=5000,
        kernels=("basic",),
        builds=(BuildConfig.parse("-O2"),),
        timing=TimingConfig(repeat=2, min_sample_s=0.001),
        broadphases=("none", "grid", "morton"),
        disable_isa=disabled,
    )
    rows = {r.kernel: r for r in run(config).results}
    if "sse2" in disabled:
        for name in ("grid", "morton"):
            assert rows[name].status == "skipped" and "needs sse2, disabled by" in rows[name].reason, rows[name]
        return
    wanted = (("avx512_nosqrt", {"avx512f", "avx512dq", "popcnt"}), ("avx2_nosqrt", {"avx2"}))
    usable = _cpu_flags() - set(disabled)
    expected = next((name for name, needs in wanted if needs <= usable), "sse2_nosqrt")
    for name in ("grid", "morton"):
        assert rows[name].status == "ok" and rows[name].narrow_phase == expected, rows[name]
        assert rows[name].hits == rows["basic"].hits


def test_run_defaults_to_the_fastest_broadphase_at_game_scale():
    from sectorbench.measure.runner import RunConfig, run
    from sectorbench.measure.timing import TimingConfig
    from sectorbench.native.build import BuildConfig

    timing = TimingConfig(repeat=1, min_sample_s=0.001)
    game = run(RunConfig(scene="game", sectors=50, points=500, builds=(BuildConfig.parse("-O2"),), timing=timing))
    assert [r.kernel for r in game.results] == ["grid"]
    with pytest.raises(SectorbenchError, match="--broadphase octree"):
        run(RunConfig(scene="game", sectors=5, points=5, broadphases=("octree",), timing=timing))


@pytest.mark.parametrize("kind", ["game", "clustered"])
def test_kdtree_peer_finds_the_same_hits(kind):
    pytest.importorskip("scipy")
    from sectorbench.families.sector.peers import KdtreePeer

    scene = scenes.generate(kind, 300, 20_000, seed=9)
    columns = {name: scene.column(name) for name in scene.arrays}
    reference = engine().hits("none", columns, scene.n_shapes, scene.n_points)
    sector, point = KdtreePeer().hits(columns, 0, scene.n_shapes)
    assert np.array_equal(np.bincount(sector, minlength=scene.n_shapes), reference.counts)
    assert np.array_equal(point, reference.indices)  # by sector, then ascending point
    assert KdtreePeer().count(columns, 100, 200) == reference.offsets[200] - reference.offsets[100]


def test_the_widening_is_needed_the_exact_sectors_box_misses_kernel_hits():
    """The box test has teeth: for theta near 0 float32 rounds cos(theta) to 1 and the kernel
    accepts points outside the real sector's own box, which the widened box still holds."""
    rng = np.random.default_rng(3)
    n = 400
    gauss = rng.standard_normal((2, n))
    u = (gauss / np.hypot(*gauss)).astype(F32)
    c = rng.uniform(0, 100, (2, n)).astype(F32)
    theta = rng.uniform(1e-7, 1e-4, n)
    columns = sector(c[0], c[1], u[0], u[1], rng.uniform(1, 10, n), theta)
    # points on a thin fan around each axis, up to 3e-4 rad off it: in the float32 kernel's band
    t = rng.uniform(0.05, 1.0, (n, 30))
    off = rng.uniform(-3e-4, 3e-4, (n, 30))
    r = np.sqrt(columns["r2"].astype(np.float64))[:, None] * t
    ux, uy = u[0].astype(np.float64)[:, None], u[1].astype(np.float64)[:, None]
    px = (c[0][:, None] + r * (ux * np.cos(off) - uy * np.sin(off))).astype(F32).ravel()
    py = (c[1][:, None] + r * (uy * np.cos(off) + ux * np.sin(off))).astype(F32).ravel()
    columns = {**columns, "px": px, "py": py}
    none = assert_identical(columns)
    outside_exact_box = 0
    for i in range(n):
        accepted = none.indices[none.offsets[i] : none.offsets[i + 1]]
        rho, k = np.sqrt(float(columns["r2"][i])), float(np.cos(theta[i]))
        s = np.sqrt(max(0.0, 1 - k * k))
        hx, hy = (
            float(u[0, i]) / np.hypot(float(u[0, i]), float(u[1, i])),
            float(u[1, i]) / np.hypot(float(u[0, i]), float(u[1, i])),
        )
        ends_x = [0.0, rho * (hx * k - hy * s), rho * (hx * k + hy * s)]
        ends_y = [0.0, rho * (hy * k + hx * s), rho * (hy * k - hx * s)]
        x, y = px[accepted].astype(np.float64) - float(c[0, i]), py[accepted].astype(np.float64) - float(c[1, i])
        outside_exact_box += int(
            np.count_nonzero((x < min(ends_x)) | (x > max(ends_x)) | (y < min(ends_y)) | (y > max(ends_y)))
        )
    assert outside_exact_box > 0


# ---------------------------------------------------------------- threads, cells, buffers


def one_point_scene(rng):
    """Every point the same (2000 copies): the grid has one cell and the Morton table's extent is 0."""
    n = 150
    gauss = rng.standard_normal((2, n))
    u = gauss / np.hypot(*gauss)
    c = rng.uniform(49, 51, (2, n))
    columns = sector(c[0], c[1], u[0], u[1], rng.uniform(0.1, 5, n), rng.uniform(0.01, 3.1, n))
    return {**columns, "px": np.full(2000, 50.0, dtype=F32), "py": np.full(2000, 50.0, dtype=F32)}


def far_clusters_scene(rng):
    """Two tight crowds 1e4 apart: nearly every cell between them is empty."""
    p = np.concatenate([rng.normal(0, 3, (2, 3000)), rng.normal(1e4, 3, (2, 3000))], axis=1)
    n = 200
    gauss = rng.standard_normal((2, n))
    u = gauss / np.hypot(*gauss)
    c = p[:, rng.integers(0, p.shape[1], n)] + rng.normal(0, 1, (2, n))
    columns = sector(c[0], c[1], u[0], u[1], rng.uniform(0.5, 8, n), rng.uniform(0.01, 3.1, n))
    return {**columns, "px": p[0], "py": p[1]}


def uniform_scene(rng, n, radii, points=40_000):
    """`points` points and n sectors uniform over a 100 x 100 world, radii uniform in radii."""
    p = rng.uniform(0, 100, (2, points))
    gauss = rng.standard_normal((2, n))
    u = gauss / np.hypot(*gauss)
    c = rng.uniform(0, 100, (2, n))
    columns = sector(c[0], c[1], u[0], u[1], rng.uniform(*radii, n), rng.uniform(0.3, 3.1, n))
    return {**columns, "px": p[0], "py": p[1]}


def dense_scene(rng):
    """Thousands of hits per sector: the sort's partition path (above 128 ids with AVX2, 256 with
    AVX-512), not only its networks."""
    return uniform_scene(rng, 120, (5, 40))


def with_non_finite(columns, rng):
    """columns with NaN and infinite coordinates among 500 of its points (never inside: the
    index leaves them out)."""
    px, py = columns["px"].copy(), columns["py"].copy()
    bad = rng.choice(len(px), 500, replace=False)
    px[bad[:200]] = np.nan
    py[bad[150:350]] = np.inf
    px[bad[350:]] = -np.inf
    return {**columns, "px": px, "py": py}


def non_finite_few_cells_scene(rng):
    """Non-finite points in the dense scene (~100 cells: the direct scatter)."""
    return with_non_finite(dense_scene(rng), rng)


def non_finite_many_cells_scene(rng):
    """Non-finite points among 40 000 with small sectors (~16 000 cells: the two-digit sort)."""
    return with_non_finite(uniform_scene(rng, 300, (0.5, 3)), rng)


def non_finite_finest_cells_scene(rng):
    """Non-finite points among 200 000 with tiny sectors (~200 000 cells, 18 key bits: the
    two-digit sort's widest low digit, 10 bits, then 8)."""
    return with_non_finite(uniform_scene(rng, 400, (0.05, 0.5), points=200_000), rng)


CELL_EDGES = {
    "one_point": one_point_scene,
    "non_finite_few_cells": non_finite_few_cells_scene,
    "non_finite_many_cells": non_finite_many_cells_scene,
    "non_finite_finest_cells": non_finite_finest_cells_scene,
    "far_clusters": far_clusters_scene,
    "dense": dense_scene,
    "borders": borders_scene,
    "edges": edges_scene,
}


@pytest.mark.parametrize("name", list(CELL_EDGES))
def test_points_per_cell_edge_cases_give_identical_hits_on_every_thread_count(name):
    """All points in one cell, empty cells, points on cell borders and on the world's edge,
    thousands of hits per sector: brute force's CSR, bit for bit, for grid, morton and none on
    1, 2, 3 and 5 threads (the index build and the query both split)."""
    columns = {k: np.ascontiguousarray(v, dtype=F32) for k, v in CELL_EDGES[name](np.random.default_rng(21)).items()}
    reference = assert_identical(columns)
    assert reference.total > 0
    for kind in ("none", "grid", "morton"):
        for threads in (2, 3, 5):
            assert hits_of(kind, columns, threads=threads).same_as(reference), (kind, threads)


@contextlib.contextmanager
def forced(set_way, way: int):
    """The library's choice set_way sets (a test hook: sb_bp_scatter_force, sb_bp_parts_way)
    forced to `way` while the block runs, then left to the library again (0)."""
    set_way(way)
    try:
        yield
    finally:
        set_way(0)


@pytest.fixture(params=["plain", "write-combined"])
def scatter_way(request):
    """Every index build of the test scatters this way, whatever this process measured."""
    with forced(engine().lib.sb_bp_scatter_force, {"plain": 1, "write-combined": 2}[request.param]):
        yield request.param


def sparse_buckets_scene(rng):
    """20 000 points over ~200 000 cells: a few points in each of the 1024 low buckets of a
    thread's share, so most of a share's lines are shared with the next bucket or part."""
    return uniform_scene(rng, 400, (0.05, 0.3), points=20_000)


SCATTER_SCENES = {
    **{name: scene for name, scene in CELL_EDGES.items() if name != "one_point"},
    "sparse": sparse_buckets_scene,
}


@pytest.mark.parametrize("name", list(SCATTER_SCENES))
def test_each_way_of_scattering_the_index_gives_identical_hits(name, scatter_way):
    """The index's plain and write-combined passes (index.c: the faster on this host is chosen
    at run time) on scenes whose buckets are crowded, sparse or empty, on thread counts whose
    parts share lines: brute force's CSR, bit for bit, for the grid and the Morton table.  Each
    build follows one of another scene of the kind, so that the buffers it takes back from the
    pool hold other points in any slot it should not write."""
    columns, decoy = (
        {k: np.ascontiguousarray(v, dtype=F32) for k, v in SCATTER_SCENES[name](np.random.default_rng(seed)).items()}
        for seed in (23, 24)
    )
    reference = hits_of("none", columns)
    assert engine().scatter_way(1, len(columns["px"])) == (scatter_way if X86 else "plain")
    for kind in ("grid", "morton"):
        for threads in (1, 2, 3, 5):
            hits_of(kind, decoy, threads=threads)
            assert hits_of(kind, columns, threads=threads).same_as(reference), (kind, threads)


@pytest.fixture(params=["caller one, kept threads the rest", "caller all"])
def parts_way(request):
    """Every phase of the test on several threads runs its parts this way (parallel.c): by
    default whoever claims a part first runs it, which on an idle host is mostly the first way
    and on a busy one the second."""
    with forced(engine().lib.sb_bp_parts_way, {"caller one, kept threads the rest": 1, "caller all": 2}[request.param]):
        yield request.param


def test_threads_answer_under_the_callers_rounding_mode(parts_way):
    """Helper threads compute under the calling thread's floating-point environment, as threads
    it created would: kept ones too (created here under round-to-nearest first), so a caller in
    another rounding mode gets the same CSR on every thread count -- and, on this scene of
    points within 3 ulps of the sectors' edges, a different one than under round-to-nearest."""
    import ctypes
    import ctypes.util

    if platform.machine() not in ("x86_64", "AMD64"):
        pytest.skip("FE_UPWARD's value below is x86-64's")
    libm = ctypes.CDLL(ctypes.util.find_library("m"))
    fe_upward = 0x800
    columns = {k: np.ascontiguousarray(v, dtype=F32) for k, v in band_scene(np.random.default_rng(5)).items()}
    nearest = {kind: hits_of(kind, columns, threads=3) for kind in ("grid", "none")}  # threads kept from here on
    previous = libm.fegetround()
    assert libm.fesetround(fe_upward) == 0
    try:
        upward = {(kind, t): hits_of(kind, columns, threads=t) for kind in ("grid", "none") for t in (1, 2, 3)}
    finally:
        libm.fesetround(previous)
    assert not upward["none", 1].same_as(nearest["none"])  # the mode does change hits here
    assert all(hits.same_as(upward["none", 1]) for hits in upward.values())
    assert nearest["grid"].same_as(nearest["none"])


def test_fewer_points_or_sectors_than_threads():
    rng = np.random.default_rng(4)
    columns = {k: np.ascontiguousarray(v, dtype=F32) for k, v in dense_scene(rng).items()}
    # 3 points, one step along u from apexes 0..2: inside those sectors (theta >= 0.3, r >= 5)
    few_points = {**columns, "px": columns["cx"][:3] + columns["ux"][:3], "py": columns["cy"][:3] + columns["uy"][:3]}
    reference = assert_identical(few_points)
    assert reference.total >= 3
    few_sectors = {k: (v[:2] if k in COLUMNS else v) for k, v in columns.items()}
    reference_sectors = assert_identical(few_sectors)
    for kind in ("none", "grid", "morton"):
        for threads in (4, 7):
            assert hits_of(kind, few_points, threads=threads).same_as(reference), (kind, threads)
            assert hits_of(kind, few_sectors, threads=threads).same_as(reference_sectors), (kind, threads)
    empty = {**columns, "px": columns["px"][:0], "py": columns["py"][:0]}
    for kind in ("none", "grid", "morton"):
        hits = hits_of(kind, empty, threads=3)
        assert hits.total == 0 and np.array_equal(hits.offsets, np.zeros(len(columns["cx"]) + 1))


def test_game_scene_at_scale_is_identical_on_one_and_two_threads(parts_way):
    """A game scene big enough that every thread's share holds many cells and sectors."""
    scene = scenes.generate("game", 2000, 200_000, seed=5)
    columns = {name: scene.column(name) for name in (*COLUMNS, "px", "py")}
    reference = hits_of("none", columns)
    for kind in ("grid", "morton"):
        for threads in (1, 2, 4):
            assert hits_of(kind, columns, threads=threads).same_as(reference), (kind, threads)
    assert reference.total > 10_000


def test_kept_buffers_are_reused_and_released():
    """Freed index and hit buffers go to the pool and serve the next call (the same answer),
    and sb_bp_pool_release gives them back."""
    scene = scenes.generate("game", 300, 400_000, seed=6)
    columns = {name: scene.column(name) for name in (*COLUMNS, "px", "py")}
    first = hits_of("grid", columns)
    offsets, indices = first.offsets.copy(), first.indices.copy()
    del first
    again = hits_of("grid", columns, threads=2)
    assert np.array_equal(again.offsets, offsets) and np.array_equal(again.indices, indices)
    del again
    from sectorbench.families.sector.query import release_buffers

    assert release_buffers() >= 3 * 400_000 * 4  # at least the index's xs, ys and ids
    assert release_buffers() == 0
    after = hits_of("grid", columns)
    assert np.array_equal(after.indices, indices)


def test_stream_floor_reads_the_points_and_writes_every_slot():
    rng = np.random.default_rng(8)
    px, py = rng.uniform(0, 1, (2, 1001)).astype(F32)
    out = np.full(777, -1, dtype=np.int32)
    seconds = engine().stream_floor(px, py, out)
    checksum = np.bitwise_xor.reduce(np.concatenate([px.view(np.uint32), py.view(np.uint32)]))
    assert seconds > 0
    assert np.array_equal(out.view(np.uint32), np.arange(777, dtype=np.uint32) ^ checksum)


@pytest.mark.parametrize("threads", [1, 2, 3])
def test_a_query_over_its_candidate_limit_is_refused_before_it_allocates(threads):
    """max_candidates is checked against the whole query's bound (every thread's share summed),
    so query() makes one C call when the answer fits and cuts the sectors only when it may not."""
    from sectorbench.families.sector.broadphase import OverLimit

    made = scenes.generate("game", 200, 3000, 5, {"world": 100.0, "rmin": 2.0, "rmax": 20.0})
    columns = {name: np.ascontiguousarray(made.column(name), dtype=F32) for name in made.arrays}
    runner = engine()
    index = runner.build("grid", columns["px"], columns["py"], 3000, columns["r2"], threads)
    bound = int(runner.bounds(index, columns, 200).sum())
    whole = hits_of("grid", columns, threads=threads, index=index, max_candidates=bound)
    assert whole.same_as(hits_of("none", columns)) and whole.total <= bound
    with pytest.raises(OverLimit):
        hits_of("grid", columns, threads=threads, index=index, max_candidates=bound - 1)


TIGHT_MEMORY_CHILD = r"""
import resource, sys
import numpy as np
from sectorbench.families.sector.query import engine, release_buffers

columns = dict(np.load(sys.argv[1]))
n, m = len(columns["cx"]), len(columns["px"])
runner = engine()
runner.hits("grid", columns, n, m)  # everything loaded and touched once
release_buffers()
size = int(next(line for line in open("/proc/self/status") if line.startswith("VmSize")).split()[1]) * 1024
# room for what the direct scatter allocates, 4 bytes a point each: the keys, xs, ys and ids,
# each with up to 4 MiB of rounding and alignment, and 8 MiB for the rest (a few cells' counts,
# Python); not for the two-digit sort's records on top (16 bytes a point)
room = 4 * (4 * m + (4 << 20)) + (8 << 20)
resource.setrlimit(resource.RLIMIT_AS, (size + room, resource.RLIM_INFINITY))
hits = runner.hits("grid", columns, n, m)
print(" ".join(map(str, hits.offsets.tolist())), "|", " ".join(map(str, hits.indices.tolist())))
"""


@pytest.mark.skipif(not sys.platform.startswith("linux"), reason="address-space limits as Linux reports them")
def test_index_falls_back_to_the_direct_scatter_when_the_records_do_not_fit(tmp_path):
    """Above 4096 cells the index sorts through 16-byte records; in a process whose address space
    holds the index but not those records on top (2 000 000 points: 32 MB more), the build takes
    the direct scatter instead: the same hits, no out-of-memory error."""
    m, n = 2_000_000, 50
    rng = np.random.default_rng(8)
    p = rng.uniform(0, 1000, (2, m))
    gauss = rng.standard_normal((2, n))
    u = gauss / np.hypot(*gauss)
    c = rng.uniform(0, 1000, (2, n))
    columns = sector(c[0], c[1], u[0], u[1], np.full(n, 10.0), np.full(n, 1.0))
    columns = {**columns, "px": p[0].astype(F32), "py": p[1].astype(F32)}
    scene = tmp_path / "scene.npz"
    np.savez(scene, **columns)
    child = [sys.executable, "-c", TIGHT_MEMORY_CHILD, str(scene)]
    done = subprocess.run(child, capture_output=True, text=True, timeout=300)
    assert done.returncode == 0, done.stderr[-2000:]
    offsets, indices = (np.array(part.split(), dtype=np.int64) for part in done.stdout.split("|"))
    expected = hits_of("none", columns)
    assert expected.total > 1000  # the scene does test something
    assert np.array_equal(offsets, expected.offsets) and np.array_equal(indices, expected.indices)


SCATTER_CHILD = r"""
import json, sys
from sectorbench.families import scene_kinds as scenes
from sectorbench.families.sector.query import engine

scene = scenes.generate("game", 400, 300_000, seed=3)
columns = {name: scene.column(name) for name in scene.arrays}
n, m = len(columns["cx"]), len(columns["px"])
runner = engine()
reference = runner.hits("none", columns, n, m)
report = {"hits": reference.total}
for threads in (1, 3):
    before = runner.scatter_way(threads, m)
    same = []
    for call in range(8):  # the first six try each way three times, alternating
        kind = ("grid", "morton")[call % 2]
        index = runner.build(kind, columns["px"], columns["py"], m, columns["r2"], threads)
        report["cells"] = max(report.get("cells", 0), int(runner.lib.sb_bp_index_cells(index)))
        same.append(runner.hits(kind, columns, n, m, index=index, threads=threads).same_as(reference))
    report[threads] = {"before": before, "after": runner.scatter_way(threads, m), "same": same}
print(json.dumps(report))
"""


@pytest.mark.skipif(not X86, reason="the index has one way of scattering off x86")
def test_both_ways_of_scattering_the_index_give_the_same_hits():
    """The index build times its plain and its write-combined passes on a process's first large
    builds (per thread count) and keeps the faster: in a fresh process, the first builds must
    try both (the choice is made only once each ran three times) and every build, either way
    and with parts sharing lines (three threads), must give the brute force's hits."""
    done = subprocess.run([sys.executable, "-c", SCATTER_CHILD], capture_output=True, text=True, timeout=300)
    assert done.returncode == 0, done.stderr[-2000:]
    report = json.loads(done.stdout)
    assert report["hits"] > 10_000 and report["cells"] > 4096  # the two-digit sort, not the direct scatter
    for threads in ("1", "3"):
        assert report[threads]["before"] == "not chosen yet", report
        assert report[threads]["after"] in ("plain", "write-combined"), report
        assert report[threads]["same"] == [True] * 8, report


SETTLE_CHILD = r"""
import json
from sectorbench.families import scene_kinds as scenes
from sectorbench.families.sector.query import engine

runner = engine()
report = {}
for name, m in (("small", 100_000), ("large", 300_000)):
    scene = scenes.generate("game", 400, m, seed=3)
    columns = {name: scene.column(name) for name in scene.arrays}
    runner.warm("grid", columns, m, threads=2)
    report[name] = [runner.scatter_way(2, m), runner.lib.sb_bp_scatter_trials(2), runner.scatter_way(1, m)]
runner.warm("grid", columns, m, threads=2)  # chosen: nothing more to build
report["again"] = runner.lib.sb_bp_scatter_trials(2)
print(json.dumps(report))
"""


@pytest.mark.skipif(not X86, reason="the index has one way of scattering off x86")
def test_warming_a_broadphase_lets_its_index_choose_its_scatter_before_timing():
    """`run` warms a broadphase before timing it (BroadphaseLoop.warm): builds of over 2^18
    points time both ways first, and the timed builds must all scatter the way chosen, not
    alternate.  Smaller builds are no trials (they scatter plain): none are made for them."""
    done = subprocess.run([sys.executable, "-c", SETTLE_CHILD], capture_output=True, text=True, timeout=300)
    assert done.returncode == 0, done.stderr[-2000:]
    report = json.loads(done.stdout)
    assert report["small"] == ["plain", 0, "plain"], report
    assert report["large"][0] in ("plain", "write-combined") and report["large"][1] == 6, report
    assert report["large"][2] == "not chosen yet", report  # chosen per thread count
    assert report["again"] == 6, report
