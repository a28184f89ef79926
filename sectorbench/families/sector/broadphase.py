"""The sector broadphase, Python side: index the points, query the sectors, CSR hits.

The C side is kernels_c/sector/broadphase/ (bp_internal.h lists its files by job: the box,
the narrow phase, the grid, the Morton order, the query, threads).  This module drives it
through a loaded library (cffi `ffi`, `lib`), for both callers: the worker, which times it
end to end in `run --broadphase`, and the in-process query API (sectorbench.query).  Every
choice of a setting lives here, with its reason.
"""

from __future__ import annotations

import time
from collections.abc import Mapping
from concurrent.futures import ThreadPoolExecutor
from dataclasses import dataclass

import numpy as np

from ...model.kernels import DISABLE_ISA_ENV, disabled_features

#: none: every pair (the brute-force kernels); grid, morton: a point index first.
BROADPHASES = ("none", "grid", "morton")
#: Indexes of points (the broadphases that build one).
INDEXED = ("grid", "morton")
#: The measured fastest on game and clustered scenes (README "Game scale": grid beat morton by
#: 1.2-2x end to end, with ~4.5x fewer candidates than seed 003's 2 x 2 Morton cells).
FASTEST = "grid"
#: Cell side = this x the median radius.  The prototype's sweep on game 20k x 200k found a flat
#: optimum from 0.3x to 2x the median r; half of it sits in the middle.  The C side raises it to
#: about one point per cell (sqrt(area / M)), below which smaller cells only add runs; the grid
#: keeps the square's area in cells twice as tall and half as wide (index_grid.c).
CELL_PER_RADIUS = 0.5
#: The shape arrays the narrow phase reads (sb_bp_sectors), in its order.
SECTOR_COLUMNS = ("cx", "cy", "ux", "uy", "r2", "cos_theta")
#: sb_bp_query's isa argument: 0 = the best this CPU has.
ISA_CODES = {"auto": 0, "avx512": 3, "avx2": 2, "sse2": 1}
ISA_NAMES = {3: "avx512_nosqrt", 2: "avx2_nosqrt", 1: "sse2_nosqrt"}
#: The CPU features each narrow phase needs, as its brute-force kernel's row lists them
#: (sb_common.h's SB_*_FEATURES; narrow.c's sb_bp_isa_supported asks the CPU for the same).
ISA_FEATURES = {3: ("avx512f", "avx512dq", "popcnt"), 2: ("avx2",), 1: ("sse2",)}
#: At most this many index builds to let the C side choose its scatter (it takes 3 of each way)
SETTLE_BUILDS = 12
#: sb_bp_scatter_way's answers
SCATTER_WAYS = {0: "not chosen yet", 1: "plain", 2: "write-combined"}


class BroadphaseError(RuntimeError):
    """The C side refused (an ISA this CPU lacks) or ran out of memory."""


class BroadphaseOutOfMemory(BroadphaseError, MemoryError):
    """The C side could not allocate: a MemoryError too, which the CLI reports as the machine's
    limit in one line (a plain BroadphaseError was an internal error)."""


class OverLimit(BroadphaseError):
    """The sectors' boxes touch more candidates than the caller's limit (nothing was allocated)."""


@dataclass(frozen=True, eq=False)  # == over arrays is ambiguous: same_as compares the hits
class Hits:
    """Which points each sector holds, as CSR: sector i's points are
    indices[offsets[i]:offsets[i + 1]], ascending; counts[i] is their number.  Two answers are
    compared with same_as (== is identity, and a Hits can be a dict key or in a set).

    candidates: the (sector, point) pairs the narrow phase tested (N x M for broadphase
    "none"); index_build_s and query_s: the C side's seconds building the point index and
    answering the query (boxes, runs, narrow phase, sorting, CSR), the Python around them aside;
    broadphase: the one that answered ("auto" resolved), as query sets it."""

    offsets: np.ndarray  # int64, N + 1
    indices: np.ndarray  # int32
    candidates: int = 0  # pairs the narrow phase tested
    index_build_s: float = 0.0  # building the point index (0 for none)
    query_s: float = 0.0  # boxes, runs, narrow phase, sorting, CSR
    broadphase: str | None = None  # "grid", "morton" or "none"; None: not said (an Engine's own call)

    @property
    def counts(self) -> np.ndarray:
        """The number of points in each sector (int64, N)."""
        return np.diff(self.offsets)

    @property
    def total(self) -> int:
        """The number of (sector, point) hits."""
        return int(self.offsets[-1])

    def same_as(self, other: Hits) -> bool:
        """The same pairs in the same order (the timings and candidate counts aside)."""
        return np.array_equal(self.offsets, other.offsets) and np.array_equal(self.indices, other.indices)


def cell_size(r2: np.ndarray) -> float:
    """The index's cell side (the grid's cells have its square's area): CELL_PER_RADIUS x the median
    radius of the sectors that can hold a point."""
    with np.errstate(all="ignore"):
        r = np.sqrt(r2[np.isfinite(r2) & (r2 > 0)].astype(np.float64))
    return max(CELL_PER_RADIUS * float(np.median(r)), 1e-30) if len(r) else 1.0


class Engine:
    """The broadphase of one loaded library (the worker's build, or query's plain one).

    The library must be loaded with RTLD_NODELETE: its threads outlive a call (kept for the
    next one, parked in its code), so unmapping it, as a garbage-collected cffi library does
    at exit, would pull the code from under them."""

    def __init__(self, ffi, lib):
        self.ffi, self.lib = ffi, lib
        # The features --disable-isa/$SECTORBENCH_DISABLE_ISA mask, masked here too (the C picks
        # its instruction sets from the CPU: `run --disable-isa avx512f` timed a grid row whose
        # narrow phase, sort and keys were AVX-512 all the same)
        self.disabled = disabled_features()
        allowed = next((code for code in (3, 2, 1) if not self.disabled & set(ISA_FEATURES[code])), 0)
        lib.sb_bp_allow(allowed, "bmi2" not in self.disabled)

    def narrow_phase(self, isa: str = "auto") -> str:
        """The brute-force kernel whose predicate the narrow phase runs here."""
        code = ISA_CODES[isa] or self.lib.sb_bp_best_isa()
        masked = sorted(self.disabled & set(ISA_FEATURES[code or 1]))  # 0: none left, not even SSE2
        if masked:
            raise BroadphaseError(f"it needs {', '.join(masked)}, disabled by ${DISABLE_ISA_ENV}")
        if not self.lib.sb_bp_isa_supported(code):
            raise BroadphaseError(f"this CPU lacks {isa}")
        return ISA_NAMES[code]

    def scatter_way(self, threads: int, points: int) -> str:
        """How this process's index builds of `points` points on `threads` threads now write
        them: "plain" or "write-combined", chosen by timing both on the first builds of over
        2**18 points ("not chosen yet" before; kernels_c/sector/broadphase/index.c)."""
        return SCATTER_WAYS[self.lib.sb_bp_scatter_way(threads, points)]

    def index_scatter(self, kind: str, threads: int, points: int) -> str | None:
        """scatter_way for `kind`'s index; None for "none", which builds no index."""
        return self.scatter_way(threads, points) if kind in INDEXED else None

    def warm(self, kind: str, columns: Mapping[str, np.ndarray], m: int, threads: int = 1) -> None:
        """What timing `kind` on these points needs done first: the scatter's choice."""
        self.settle_scatter(kind, columns["px"], columns["py"], m, columns["r2"], threads)

    def settle_scatter(self, kind: str, px: np.ndarray, py: np.ndarray, m: int, r2: np.ndarray, threads: int) -> str:
        """Build the index until this process has chosen how builds of these points write them
        (their first builds of over 2**18 points time both ways), so that the builds timed
        after it all do as the rest will; the way, as scatter_way says it."""
        for _ in range(SETTLE_BUILDS):
            if kind not in INDEXED or self.scatter_way(threads, m) != "not chosen yet":
                break
            before = self.lib.sb_bp_scatter_trials(threads)
            self.build(kind, px, py, m, r2, threads)
            if self.lib.sb_bp_scatter_trials(threads) == before:  # too few finite points to be a trial
                break
        return self.scatter_way(threads, m)

    def _floats(self, array, keep: list):
        pointer = self.ffi.from_buffer("float[]", array)
        keep.append(pointer)
        return pointer

    def sectors(self, columns: Mapping[str, np.ndarray], n: int, keep: list):
        """An sb_bp_sectors over float32 columns (no copy; `keep` holds them alive)."""
        s = self.ffi.new("sb_bp_sectors *")
        s.n = n
        for name in SECTOR_COLUMNS:
            setattr(s, name, self._floats(columns[name], keep))
        keep.append(s)
        return s

    def build(self, kind: str, px: np.ndarray, py: np.ndarray, m: int, r2: np.ndarray, threads: int = 1):
        """The point index, built on `threads` C threads (freed when the returned handle dies)."""
        keep: list = []
        x, y = self._floats(px, keep), self._floats(py, keep)
        cell = cell_size(r2)
        # Held from inside the call: a Ctrl-C that came during the build is raised as the call
        # returns, where a returned pointer was lost (300 interrupted queries of 500 000 points
        # left 1.8 GB behind); the slot frees whatever it still holds when it dies.
        slot = self.ffi.gc(self.ffi.new("sb_bp_index *[1]"), self._free_index_slot)
        if kind == "grid":
            self.lib.sb_bp_grid_build_into(x, y, m, cell, threads, slot)
        elif kind == "morton":
            self.lib.sb_bp_morton_build_into(x, y, m, cell, -1, threads, slot)
        else:
            raise ValueError(f"no index for broadphase {kind!r}; choose from {', '.join(INDEXED)}")
        index, slot[0] = slot[0], self.ffi.NULL  # emptied first: an interrupt here loses it, never frees it twice
        if index == self.ffi.NULL:
            raise BroadphaseOutOfMemory(f"building the {kind} index of {m:,} points failed")
        return self.ffi.gc(index, self.lib.sb_bp_index_free)

    def _free_index_slot(self, slot) -> None:
        self.lib.sb_bp_index_free(slot[0])

    def finite_points(self, index) -> int:
        """The points `index` holds: those whose coordinates are both finite."""
        return int(self.lib.sb_bp_index_kept(index))

    def bounds(self, index, columns: Mapping[str, np.ndarray], n: int) -> np.ndarray:
        """Per sector, the candidates its box touches in `index`: an upper bound on its hits."""
        keep: list = []
        sectors = self.sectors(columns, n, keep)
        bound = np.empty(n, dtype=np.int64)
        self.lib.sb_bp_bounds(index, sectors, 0, n, self.ffi.from_buffer("int64_t[]", bound))
        return bound

    def _one(self, run, begin: int, end: int):
        # Freed with its arrays unless _take claims them: a Ctrl-C during the query is raised
        # as the call returns, and the answer it wrote here must not be lost (see build)
        out = self.ffi.gc(self.ffi.new("sb_bp_hits *"), self.lib.sb_bp_hits_free)
        status = run(begin, end, out)
        if status == -1:
            raise BroadphaseError("the narrow phase's ISA is not supported by this CPU")
        if status == -3:
            raise OverLimit("the sectors' boxes touch more candidates than max_candidates")
        if status != 0:
            raise BroadphaseOutOfMemory("the broadphase query could not allocate its hits")
        return out

    def _take(self, out) -> tuple[np.ndarray, np.ndarray]:
        """Zero-copy numpy views of one C result (C frees the arrays when the views die)."""
        n, nhits = out.n, out.nhits
        offsets, indices = out.offsets, out.indices
        out.offsets = out.indices = self.ffi.NULL  # the views own them now (emptied first, as in build)
        offsets = self.ffi.gc(offsets, self.lib.sb_bp_free)
        indices = self.ffi.gc(indices, self.lib.sb_bp_free)
        off = np.frombuffer(self.ffi.buffer(offsets, (n + 1) * 8), dtype=np.int64)
        idx = np.frombuffer(self.ffi.buffer(indices, max(nhits, 1) * 4), dtype=np.int32)[:nhits]
        return off, idx

    def hits(
        self,
        kind: str,
        columns: Mapping[str, np.ndarray],
        n: int,
        m: int,
        threads: int = 1,
        isa: str = "auto",
        pool: ThreadPoolExecutor | None = None,
        index=None,
        max_candidates: int = 0,
    ) -> Hits:
        """Build (unless kind is none) and query: CSR hits of all n sectors against m points.

        threads > 1 runs the index build and the query on that many C threads (the build's
        histograms and scatter over shares of the points, the query over contiguous shares of
        the sectors, cut as model/split.py's shape_ranges cuts them), one cffi call each,
        which releases the GIL; the CSR is the same for every thread count.  `pool` is accepted
        for callers that keep one, and unused: the threads are C's.  `index`: one built() before
        (the query's chunks of sectors share one), else it is built here and timed.
        max_candidates > 0 (indexed kinds): OverLimit, before the answer's buffers are allocated,
        when the sectors' boxes touch more candidates than that (the bound on their hits)."""
        del pool
        keep: list = []
        sectors = self.sectors(columns, n, keep)
        code = ISA_CODES[isa]
        start = time.perf_counter()
        built_here = False
        if kind == "none":
            px, py = self._floats(columns["px"], keep), self._floats(columns["py"], keep)

            def run(begin, end, out):
                return self.lib.sb_bp_none(px, py, m, sectors, begin, end, code, threads, out)

        else:
            built_here = index is None
            if built_here:
                index = self.build(kind, columns["px"], columns["py"], m, columns["r2"][:n], threads)

            def run(begin, end, out):
                return self.lib.sb_bp_query(index, sectors, begin, end, code, threads, max_candidates, out)

        built = time.perf_counter()
        out = self._one(run, 0, n)
        offsets, indices = self._take(out)
        done = time.perf_counter()
        index_s = built - start if kind != "none" and built_here else 0.0
        return Hits(offsets, indices, int(out.candidates), index_s, done - built)

    def stream_floor(self, px: np.ndarray, py: np.ndarray, out: np.ndarray) -> float:
        """Seconds to read px, py once and write `out` (int32, the hits' size) once: the floor
        a query is measured against (kernels_c/sector/broadphase/floor.c)."""
        keep: list = []
        x, y = self._floats(px, keep), self._floats(py, keep)
        target = self.ffi.from_buffer("int32_t[]", out)
        start = time.perf_counter()
        self.lib.sb_bp_stream(x, y, len(px), target, len(out))
        return time.perf_counter() - start
