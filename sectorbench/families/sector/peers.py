"""The sector peers: the numpy and numba code a careful Python user writes.

All three decide the same predicate as sse2_nosqrt, in float32 throughout, with the same
operations in the same order — D = p − c, s = dx·dx + dy·dy, a = dx·ux + dy·uy, and the
sign-aware squares (s < r2) & (a·|a| > s·(k·|k|)), boundary outside, NaN outside — so
their answers match that kernel's pair for pair.

Why they are written this way (measured on this machine when they were written; the peers
against the C kernels: docs/findings/2026-11-21-zen4.md):
 * numpy: one sector against all points, every ufunc writing into preallocated float32
   buffers (no temporaries, no float64 promotion: the sector's values are float32
   scalars); blocking the points or broadcasting N x M was slower.
 * numba: the sector's values are loaded once into locals, unconditionally.  The
   short-circuit `if s < r2[i] and dx*ux[i] + ... :` loads ux[i], uy[i], cos_theta[i]
   only when the radius test passes, so LLVM turns them into masked gathers (5-7x
   slower); branch-free `(s < r2) & (...)` on hoisted values vectorises with no gathers.
 * numba: the per-sector counter is int32, narrowed at every step (int32 + bool is int64
   in numba, and an int64 accumulator halves the vector lanes: 8 instead of 16 in zmm).
 * numba: fastmath stays off: it would fuse products into FMAs (other roundings, answers
   that differ from the C kernels') and assume no NaN, voiding NaN-is-outside.
 * numba_parallel: prange over sectors, one reduction of the total per thread; each
   thread streams all points (they stay in its L2).  nogil lets --threads split too.
"""

from __future__ import annotations

import numpy as np

from ..peers import Peer

F32 = np.float32
TAKES = ("cx", "cy", "ux", "uy", "r2", "cos_theta")


class NumpyPeer(Peer):
    name, family, loop, takes = "numpy", "sector", "numpy per sector", TAKES
    summary = "numpy float32, one sector against all points, ufuncs into preallocated buffers"

    def count(self, arrays, begin, end):
        px, py = arrays["px"], arrays["py"]
        dx, dy, s, a, t = (np.empty_like(px) for _ in range(5))
        inside, angle = np.empty(px.shape, dtype=bool), np.empty(px.shape, dtype=bool)
        hits = 0
        for i in range(begin, end):
            cx, cy, ux, uy, r2, k = (arrays[name][i] for name in TAKES)
            np.subtract(px, cx, out=dx)
            np.subtract(py, cy, out=dy)
            np.multiply(dx, dx, out=s)
            np.multiply(dy, dy, out=t)
            np.add(s, t, out=s)
            np.multiply(dx, ux, out=a)
            np.multiply(dy, uy, out=t)
            np.add(a, t, out=a)
            np.less(s, r2, out=inside)
            np.absolute(a, out=t)
            np.multiply(a, t, out=a)
            np.multiply(s, k * abs(k), out=t)
            np.greater(a, t, out=angle)
            np.logical_and(inside, angle, out=inside)
            hits += int(np.count_nonzero(inside))
        return hits

    def noop(self, arrays, begin, end, never):
        px, py = arrays["px"], arrays["py"]
        t, answer = np.empty_like(px), np.empty(px.shape, dtype=bool)
        never = F32(never)
        hits = 0
        for _ in range(begin, end):
            np.add(px, py, out=t)
            np.greater(t, never, out=answer)
            hits += int(np.count_nonzero(answer))
        return hits

    def pairs(self, arrays):
        cx, cy, ux, uy, r2, k = (arrays[name] for name in TAKES)
        with np.errstate(all="ignore"):
            dx, dy = arrays["px"] - cx, arrays["py"] - cy
            s, a = dx * dx + dy * dy, dx * ux + dy * uy
            return (s < r2) & (a * np.abs(a) > s * (k * np.abs(k)))

    def grid(self, arrays, n_shapes):
        return np.stack(
            [
                self.pairs(
                    {
                        **{name: np.full_like(arrays["px"], arrays[name][i]) for name in TAKES},
                        "px": arrays["px"],
                        "py": arrays["py"],
                    }
                )
                for i in range(n_shapes)
            ]
        )


def _numba_kernels():
    """The numba functions, compiled lazily (numba is optional; importing it costs ~0.4 s)."""
    global _NUMBA
    if _NUMBA is not None:
        return _NUMBA
    from numba import njit, prange

    @njit(nogil=True, inline="always")
    def sector_hits(cx, cy, ux, uy, r2, k, px, py):
        kk = k * abs(k)
        hits = np.int32(0)
        for j in range(px.shape[0]):
            dx = px[j] - cx
            dy = py[j] - cy
            s = dx * dx + dy * dy
            a = dx * ux + dy * uy
            hits = np.int32(hits + ((s < r2) & (a * abs(a) > s * kk)))
        return hits

    # numba runs prange as range when parallel is off: one source for both variants.
    def count(cx, cy, ux, uy, r2, k, px, py, begin, end):
        total = 0
        for i in prange(begin, end):
            total += sector_hits(cx[i], cy[i], ux[i], uy[i], r2[i], k[i], px, py)
        return total

    def noop(px, py, begin, end, never):
        total = 0
        for _ in prange(begin, end):
            hits = np.int32(0)
            for j in range(px.shape[0]):
                hits = np.int32(hits + (px[j] + py[j] > never))
            total += hits
        return total

    @njit(nogil=True)
    def pairs(cx, cy, ux, uy, r2, k, px, py, out):
        for j in range(px.shape[0]):
            dx = px[j] - cx[j]
            dy = py[j] - cy[j]
            s = dx * dx + dy * dy
            a = dx * ux[j] + dy * uy[j]
            out[j] = (s < r2[j]) & (a * abs(a) > s * (k[j] * abs(k[j])))

    _NUMBA = {
        "count": njit(nogil=True)(count),
        "count_parallel": njit(nogil=True, parallel=True)(count),
        "noop": njit(nogil=True)(noop),
        "noop_parallel": njit(nogil=True, parallel=True)(noop),
        "pairs": pairs,
    }
    return _NUMBA


_NUMBA = None


class NumbaPeer(Peer):
    name, family, loop, takes, requires = "numba", "sector", "numba loops", TAKES, ("numba",)
    summary = "numba @njit, branch-free, float32 throughout, int32 counter: vectorises to 16 lanes"
    parallel = False

    def _function(self, kind):
        return _numba_kernels()[f"{kind}_parallel" if self.parallel else kind]

    def count(self, arrays, begin, end):
        columns = [arrays[name] for name in (*TAKES, "px", "py")]
        return int(self._function("count")(*columns, begin, end))

    def noop(self, arrays, begin, end, never):
        return int(self._function("noop")(arrays["px"], arrays["py"], begin, end, F32(never)))

    def pairs(self, arrays):
        out = np.zeros(len(arrays["px"]), dtype=np.bool_)
        _numba_kernels()["pairs"](*(arrays[name] for name in (*TAKES, "px", "py")), out)
        return out

    def grid(self, arrays, n_shapes):
        m = len(arrays["px"])
        return np.stack(
            [
                self.pairs(
                    {
                        **{name: np.full(m, arrays[name][i], dtype=F32) for name in TAKES},
                        "px": arrays["px"],
                        "py": arrays["py"],
                    }
                )
                for i in range(n_shapes)
            ]
        )


class NumbaParallelPeer(NumbaPeer):
    name, loop, parallel = "numba_parallel", "numba prange loops", True
    summary = "numba @njit(parallel=True): prange over sectors, one reduction per thread"


#: query_ball_point's radius: sqrt(r2) widened past the float32 kernel's own rounding (it
#: accepts points up to (1 + 8 * 2^-24) sqrt(r2) from the apex, and within 2^-40 of it by
#: underflow: the broadphase's box rule, kernels_c/sector/broadphase/box.c), so no candidate is lost.
KDTREE_RADIUS_SLACK = 8 * 2.0**-24
KDTREE_APEX_PAD = 2.0**-40
#: cKDTree's leaf size (scipy's default); workers=1, as every row of a run is one thread.
KDTREE_LEAFSIZE = 16


class KdtreePeer(Peer):
    """What a Python user reaches for: scipy's cKDTree on the points, query_ball_point on the
    apexes with radius r, then the float32 predicate on the candidates in numpy, in
    sse2_nosqrt's order: its hits are the kernels'.  Each call builds the tree (end to end,
    as the broadphases are timed)."""

    name, family, loop, takes, requires = "kdtree", "sector", "kdtree + numpy", TAKES, ("scipy",)
    summary = "scipy cKDTree.query_ball_point on the apexes (radius r), then the float32 predicate in numpy"

    def unavailable(self):
        missing = super().unavailable()
        return missing and missing.replace("sectorbench[peers]", "sectorbench[kdtree]")

    def hits(self, arrays, begin, end) -> tuple[np.ndarray, np.ndarray]:
        """(sector of each hit, point of each hit) for sectors [begin, end), by sector then point."""
        import itertools

        from scipy.spatial import cKDTree

        px, py = arrays["px"], arrays["py"]
        finite = np.isfinite(px) & np.isfinite(py)
        keep = np.flatnonzero(finite)
        tree = cKDTree(np.column_stack((px[keep], py[keep])).astype(np.float64), leafsize=KDTREE_LEAFSIZE)
        c = {name: arrays[name][begin:end] for name in TAKES}
        with np.errstate(all="ignore"):
            r = np.sqrt(c["r2"].astype(np.float64))
            radius = r * (1 + KDTREE_RADIUS_SLACK) + KDTREE_APEX_PAD * (1 + r)
            usable = np.isfinite(radius) & (radius > 0) & np.isfinite(c["cx"]) & np.isfinite(c["cy"])
        usable_rows = np.flatnonzero(usable)
        apexes = np.column_stack((c["cx"][usable], c["cy"][usable])).astype(np.float64)
        lists = tree.query_ball_point(apexes, radius[usable], workers=1, return_sorted=True)
        counts = np.fromiter(map(len, lists), dtype=np.int64, count=len(lists))
        flat = np.fromiter(itertools.chain.from_iterable(lists), dtype=np.int64, count=int(counts.sum()))
        point = keep[flat]
        sector = np.repeat(usable_rows, counts)
        with np.errstate(all="ignore"):
            dx, dy = px[point] - c["cx"][sector], py[point] - c["cy"][sector]
            s, a = dx * dx + dy * dy, dx * c["ux"][sector] + dy * c["uy"][sector]
            k = c["cos_theta"][sector]
            inside = (s < c["r2"][sector]) & (a * np.abs(a) > s * (k * np.abs(k)))
        return sector[inside] + begin, point[inside]

    def count(self, arrays, begin, end):
        return len(self.hits(arrays, begin, end)[0])

    def noop(self, arrays, begin, end, never):
        # Its loops are scipy's; the NoOperation only reads the points once, as every peer's does.
        return int(np.count_nonzero(arrays["px"] + arrays["py"] > np.float32(never)))

    def pairs(self, arrays):
        return NumpyPeer().pairs(arrays)

    def grid(self, arrays, n_shapes):
        out = np.zeros((n_shapes, len(arrays["px"])), dtype=bool)
        sector, point = self.hits(arrays, 0, n_shapes)
        out[sector, point] = True
        return out


PEERS = (NumpyPeer(), NumbaPeer(), NumbaParallelPeer(), KdtreePeer())
