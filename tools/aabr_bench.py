"""The aabr crossover benchmark (`make bench-aabr`): every aabr kernel on polygons
of 4 .. 1024 vertices, random and frame-coherent rotations, through the ordinary runner.

Speed-ups are medians of per-round ratios (the runner interleaves kernels round by round,
so a ratio within one round shares the machine's state), not ratios of medians.
"""

from __future__ import annotations

import statistics
from collections.abc import Callable
from dataclasses import dataclass, field

from sectorbench.families.aabr.scenes import SIZES
from sectorbench.measure.runner import RunConfig, run
from sectorbench.measure.timing import TimingConfig

#: Vertices in all per scene (P = VERTICES // n polygons, at least MIN_POLYGONS): the BCS
#: set stays in L2 (about 400 KB), as in the prototype, so the figures compare.
VERTICES = 8192
MIN_POLYGONS = 16
#: Rotations per polygon (shared by all polygons: they stay in L1).
ROTATIONS = 1024
SEQUENCES = ("random", "coherent")
SCANS = ("scan_avx2", "scan_avx512")


@dataclass(frozen=True)
class BenchConfig:
    sizes: tuple[int, ...] = SIZES
    repeat: int = 9  # rounds: ratios are medians over them
    min_sample_s: float = 0.01  # the runner's default sample length
    seed: int = 0


@dataclass
class Row:
    sequence: str
    vertices: int
    polygons: int
    ns: dict[str, float] = field(default_factory=dict)  # net ns per (polygon, rotation)
    ratio: dict[str, float] = field(default_factory=dict)  # named speed-ups, medians of per-round ratios
    index_build_us_per_polygon: float | None = None
    index_bytes_per_polygon: float | None = None


def _ratio(slow: list[float], fast: list[float]) -> float | None:
    pairs = [a / b for a, b in zip(slow, fast) if b > 0]
    return statistics.median(pairs) if pairs else None


def _best_simd(samples: dict[str, list[float]]) -> list[float] | None:
    """Per round, the faster of the SIMD scans that ran."""
    present = [samples[name] for name in SCANS if name in samples]
    return [min(values) for values in zip(*present)] if present else None


def measure(config: BenchConfig, progress: Callable[[str], None] = lambda what: None) -> list[Row]:
    rows = []
    for sequence in SEQUENCES:
        for n in config.sizes:
            scene = f"polygons{n}" + ("-coherent" if sequence == "coherent" else "")
            polygons = max(MIN_POLYGONS, VERTICES // n)
            progress(f"{scene}: {polygons} polygons x {ROTATIONS} rotations")
            result = run(
                RunConfig(
                    scene=scene,
                    sectors=polygons,
                    points=ROTATIONS,
                    seed=config.seed,
                    timing=TimingConfig(repeat=config.repeat, min_sample_s=config.min_sample_s),
                )
            )
            ok = {r.kernel: r for r in result.results if r.status == "ok" and r.net_samples_s}
            samples = {name: r.net_samples_s for name, r in ok.items()}
            row = Row(sequence, n, polygons, {name: r.ns_per_test for name, r in ok.items()})
            simd = _best_simd(samples)
            pairs = {
                "search/scan": ("scan", "bcs_search"),
                "coherent/scan": ("scan", "bcs_coherent"),
                "search/hill": ("hill", "bcs_search"),
                "coherent/search": ("bcs_search", "bcs_coherent"),
            }
            for label, (slow, fast) in pairs.items():
                if slow in samples and fast in samples:
                    row.ratio[label] = _ratio(samples[slow], samples[fast])
            if simd is not None:
                for label, fast in (("search/best simd", "bcs_search"), ("coherent/best simd", "bcs_coherent")):
                    if fast in samples:
                        row.ratio[label] = _ratio(simd, samples[fast])
            index = ok.get("bcs_search")
            if index is not None and index.index_build_s is not None:
                row.index_build_us_per_polygon = index.index_build_s / polygons * 1e6
                row.index_bytes_per_polygon = index.index_bytes / polygons
            rows.append(row)
    return rows


def crossover(rows: list[Row], sequence: str, label: str) -> int | None:
    """The fewest vertices from which the ratio stays above 1 at every larger size."""
    mine = sorted((r for r in rows if r.sequence == sequence), key=lambda r: r.vertices)
    answer = None
    for row in reversed(mine):
        value = row.ratio.get(label)
        if value is None or value <= 1:
            break
        answer = row.vertices
    return answer


def crossovers(rows: list[Row]) -> dict:
    labels = ("search/scan", "search/best simd", "coherent/scan", "coherent/best simd", "search/hill")
    return {seq: {label: crossover(rows, seq, label) for label in labels} for seq in SEQUENCES}
