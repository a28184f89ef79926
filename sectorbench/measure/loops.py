"""The one idea of a timed loop, and its three kinds in the worker: a C row, a Python peer, a broadphase.

The worker (server.Server), the runner and verify see only TimedLoop: a loop's record
(kernels.Kernel: its modes, and `noop_reason`, why it has no NoOperation twin, None when it
has one), its twin, a warm-up, k passes over a shape range, its answers for verify, and what
it reports beyond time as declared LoopExtras fields.  The kinds differ only inside here.
"""

from __future__ import annotations

import ctypes
import functools
import mmap
import os
import time
from collections.abc import Callable
from dataclasses import replace
from pathlib import Path
from typing import Any, Protocol

import numpy as np

from ..model.kernels import Kernel, parse_takes, skip_reason
from ..model.split import shape_ranges
from ..model.text import shown_line
from .deadlines import ROW_COUNT_COPIES_MAX, ROW_COUNT_SHAPES_MAX
from .messages import LoopExtras, LoopRef, Shapes, Timed

#: A prepared index is built this many times; the fastest build is its build time (the
#: first build also pays for page faults of fresh memory).
INDEX_BUILDS = 3
#: The loops a C row has: the predicate inlined, and called through a pointer.
C_MODES = ("inline", "call")
#: A peer or a broadphase has one loop, timed as production code runs it.
ONE_LOOP = ("inline",)
#: Why a broadphase has no NoOperation twin.
END_TO_END = "timed end to end (index build + query): nothing to subtract"
#: Calibration stops growing the call count here, whatever min_time asks.
MAX_CALLS = 2**30


#: A grid row's bytes before eval_grid runs over a shape range: a loop that writes rows outside
#: its range (ignoring shape_begin/shape_end) is caught by the bytes it changed.
UNTOUCHED_BYTE = 0xFF


#: sys/mman.h's PROT_NONE, which Python's mmap does not name: a page no one may read or write.
PROT_NONE = 0
#: The bytes of an answers buffer's last page past its end (answers_buffer): a loop that writes
#: past its answers by fewer bytes than the page holds is caught by the bytes it changed.
SLACK_BYTE = 0xA5


@functools.cache
def _mprotect():
    libc = ctypes.CDLL(None, use_errno=True)
    libc.mprotect.argtypes = [ctypes.c_void_p, ctypes.c_size_t, ctypes.c_int]
    return libc.mprotect


def answers_buffer(size: int, dtype) -> tuple[np.ndarray, Callable[[], int]]:
    """`size` zeros of `dtype` for a row's eval_grid or eval_pairs to write its answers into,
    and a function giving how many bytes of the rest of its last page the row changed.

    The buffer starts a page of its own, between two pages no one may touch (PROT_NONE): a
    write before it or a page past it is a segmentation fault of that row.  In a numpy array
    (the heap) a few bytes past the end went unnoticed and the row passed verify, and a few
    dozen broke malloc's own records: the worker aborted in whichever allocation met them next
    (in the probes, by luck, one of the same request's)."""
    page = mmap.PAGESIZE
    nbytes = size * np.dtype(dtype).itemsize
    body = max(page, -(-nbytes // page) * page)
    pages = mmap.mmap(-1, body + 2 * page)  # anonymous: zeros
    whole = np.frombuffer(pages, dtype=np.uint8)
    for guard in (whole.ctypes.data, whole.ctypes.data + page + body):
        _mprotect()(guard, page, PROT_NONE)  # should it fail (never seen), the slack still shows a short overrun
    region = whole[page : page + body]
    slack = region[nbytes:]
    slack[:] = SLACK_BYTE
    return region[:nbytes].view(dtype), lambda: int(np.count_nonzero(slack != SLACK_BYTE))


class WroteOutsideItsAnswers(ValueError):
    """A row's eval_grid or eval_pairs wrote past the end of the answers buffer it was given:
    the row's crash (server.Server charges it to the row), never the command's error."""


def share(shapes: Shapes, threads: int) -> list[Shapes]:
    """[begin, end) split among threads (measure.split's even contiguous shares)."""
    begin, end = shapes
    return [(begin + b, begin + e) for b, e in shape_ranges(end - begin, threads)]


class TimedLoop(Protocol):
    """Anything the worker times; see the module's docstring."""

    kernel: Kernel

    def twin(self) -> TimedLoop | None:
        """Its NoOperation twin (same loop, an answer that never holds); None when it is timed
        end to end, kernel.noop_reason saying why."""

    def warm(self, ref: LoopRef) -> LoopExtras:
        """Before calibration: a JIT's first call, a prepared index's build."""

    def passes(self, ref: LoopRef) -> tuple[Callable[[Any], int], list]:
        """One pass as a function of a thread's part, and the parts (one per thread)."""

    def extras(self) -> LoopExtras:
        """What the last pass reported beyond time."""

    def answers(self, shapes: Shapes | None) -> np.ndarray:
        """Its answers on the current scene (verify), rows `shapes` of a grid scene."""

    def calibrate(self, ref: LoopRef, min_time_s: float) -> Timed: ...

    def run(self, ref: LoopRef, calls: int) -> Timed: ...


class LoopBase:
    """calibrate and run for every kind, on top of passes(); `host` is the worker (server.Server):
    the scene, the loaded library, the thread pools, the timer."""

    kernel: Kernel

    def __init__(self, host):
        self.host = host

    def twin(self) -> TimedLoop | None:
        return None

    def warm(self, ref: LoopRef) -> LoopExtras:
        return LoopExtras()

    def extras(self) -> LoopExtras:
        return LoopExtras()

    def _shapes(self, ref: LoopRef) -> Shapes:
        n = self.host.scene.n_shapes
        begin, end = ref.shapes if ref.shapes is not None else (0, n)
        if not 0 <= begin <= end <= n:
            raise ValueError(f"shapes [{begin}, {end}) outside the scene's [0, {n})")
        return begin, end

    def _check_mode(self, ref: LoopRef) -> None:
        if ref.mode not in self.kernel.modes:
            raise ValueError(f"{self.kernel.name} has no {ref.mode} loop (it has {', '.join(self.kernel.modes)})")

    def calibrate(self, ref: LoopRef, min_time_s: float) -> Timed:
        """The smallest call count whose total lasts >= min_time_s, growing like pyperf's."""
        warmed = self.warm(ref)
        function, parts = self.passes(ref)
        calls = 1
        fp_change = None  # a change in any trial, not only in the one whose time is kept
        counts: set[int] = set()  # every trial's, as fp_change: a kernel's first calls are calibration's
        while True:
            timed = self.host.time(function, parts, calls)
            fp_change = fp_change or timed.fp_change
            counts.update(timed.hits_seen, [timed.hits])
            total = timed.seconds * calls
            if total >= min_time_s or calls >= MAX_CALLS:
                seen = sorted({min(counts), max(counts)} - {timed.hits})
                return _with_extras(replace(timed, fp_change=fp_change, hits_seen=seen), warmed)
            growth = min_time_s * 1.2 / total if total > 0 else 10
            calls = int(calls * min(max(growth, 2), 10))

    def run(self, ref: LoopRef, calls: int) -> Timed:
        function, parts = self.passes(ref)
        return _with_extras(self.host.time(function, parts, calls), self.extras())


def _with_extras(timed: Timed, extras: LoopExtras) -> Timed:
    return replace(timed, extras=extras)


class NoOperation(LoopBase):
    """A loop's NoOperation twin: the same passes with an answer that never holds."""

    def __init__(self, of: LoopBase):
        super().__init__(of.host)
        self.of, self.kernel = of, of.kernel

    def passes(self, ref: LoopRef):
        return self.of.noop_passes(ref)

    def answers(self, shapes):
        raise ValueError("a NoOperation loop has no answers")


class CRowLoop(LoopBase):
    """A row of the build's kernel table: count loops inline and through a pointer, their
    NoOperation twins, eval_grid / eval_pairs, and an optional prepared index."""

    def __init__(self, host, row):
        super().__init__(host)
        self.row = row
        self.kernel = self._record(row)

    def _text(self, pointer) -> str:
        """A string of the row, as the tables will print it: a --source row is untrusted, and a
        name holding a terminal escape (clear the screen, move the cursor over other rows'
        figures) or bytes that are not UTF-8 is shown escaped, never raw."""
        ffi = self.host.ffi
        return shown_line(ffi.string(pointer).decode(errors="surrogateescape")) if pointer != ffi.NULL else ""

    def _record(self, row) -> Kernel:
        isa = tuple(f for f in self._text(row.isa).split(",") if f)
        cpu_has = {f: bool(self.host.lib.sb_cpu_supports(f.encode())) for f in isa}
        return Kernel(
            name=self._text(row.name),
            family=self._text(row.family),
            takes=parse_takes(self._text(row.takes)),
            isa=isa,
            loop=self._text(row.loop),
            summary=self._text(row.summary),
            source=f"{Path(self._text(row.source)).name}:{row.line}",
            lanes=row.lanes,
            block=row.block,
            known_bad=bool(row.known_bad),
            contract=self._text(row.contract),
            rounding_bound=row.rounding_bound,
            tolerance=row.tolerance,
            skip_reason=skip_reason(isa, cpu_has, self.host.disabled),
            modes=C_MODES,
        )

    @property
    def prepared(self) -> bool:
        return self.row.prepare != self.host.ffi.NULL

    def twin(self):
        return NoOperation(self)

    def _passes(self, ref: LoopRef, noop: bool):
        self._check_mode(ref)
        loops = {
            ("inline", False): self.row.count_inline,
            ("call", False): self.row.count_call,
            ("inline", True): self.row.noop_inline,
            ("call", True): self.row.noop_call,
        }
        return loops[(ref.mode, noop)], self.host.c_scenes(self, share(self._shapes(ref), ref.threads))

    def passes(self, ref):
        return self._passes(ref, False)

    def noop_passes(self, ref):
        return self._passes(ref, True)

    def warm(self, ref):
        self.passes(ref)  # builds the prepared index, if the row has one
        return self.extras()

    def extras(self):
        index = self.host.index_of(self.kernel.name)
        return LoopExtras() if index is None else LoopExtras(index_build_s=index[0], index_bytes=index[1])

    def prepare(self, c_scene) -> tuple[Any, float, int | None]:
        """The row's index for a scene: (index, fastest of INDEX_BUILDS builds, its bytes)."""
        ffi, row = self.host.ffi, self.row
        seconds = []
        for _ in range(INDEX_BUILDS):
            start = time.perf_counter_ns()
            index = row.prepare(c_scene)
            seconds.append((time.perf_counter_ns() - start) / 1e9)
            if index == ffi.NULL:
                raise MemoryError(f"{self.kernel.name}: prepare() returned NULL (out of memory?)")
            if len(seconds) < INDEX_BUILDS:
                row.release(index)
        size = int(row.prepared_bytes(index)) if row.prepared_bytes != ffi.NULL else None
        return index, min(seconds), size

    def release(self, index) -> None:
        if self.row.release != self.host.ffi.NULL:
            self.row.release(index)

    def answers(self, shapes):
        host, scene = self.host, self.host.scene
        dtype, width = host.family().answer_dtype, host.family().answer_width
        if scene.layout == "pairs":
            if shapes is not None:
                raise ValueError("a pairs scene has no shape range: each shape meets one point")
            c_scene = host.c_scenes(self, [(0, scene.n_shapes)])[0]
            out, overrun = answers_buffer(scene.stride * width, dtype)
            self.row.eval_pairs(c_scene, host.ffi.from_buffer(out))
            self._check_overrun("eval_pairs", overrun())
            result = out.reshape(scene.stride, width)[: scene.n_points]
        else:
            begin, end = self._shapes(LoopRef(self.kernel.name, shapes=shapes))
            c_scene = host.c_scenes(self, [(begin, end)])[0]
            out, overrun = answers_buffer(scene.n_shapes * scene.stride * width, dtype)
            out.view(np.uint8)[:] = UNTOUCHED_BYTE  # so that a write outside the range shows
            self.row.eval_grid(c_scene, host.ffi.from_buffer(out))
            self._check_overrun("eval_grid", overrun())
            grid = out.reshape(scene.n_shapes, scene.stride, width)
            outside = np.concatenate([grid[:begin], grid[end:]])
            if not np.all(np.ascontiguousarray(outside).view(np.uint8) == UNTOUCHED_BYTE):
                raise ValueError(f"eval_grid writes answers of shapes outside its range [{begin}, {end})")
            result = grid[begin:end, : scene.n_points]
        return result[..., 0] if width == 1 else result

    @staticmethod
    def _check_overrun(loop: str, changed: int) -> None:
        if changed:
            raise WroteOutsideItsAnswers(f"{loop} wrote past the end of its answers ({changed} bytes changed there)")

    def row_counts(self, mode: str) -> np.ndarray:
        """Each row of the current pairs scene counted by the `mode` count loop, twice, over
        copies of its shape and its point (row_count_layout, sb_count_rows): the count, -1 where
        the calls differ.  A hand-written count loop is where a kernel's logic lives, and only
        eval_pairs met the cases' boundary points (a count loop answering them inside passed
        verify); with one shape, a blocked loop's block body met none of them either."""
        host, scene = self.host, self.host.scene
        self._check_mode(LoopRef(self.kernel.name, mode))
        if scene.layout != "pairs" or self.prepared:
            raise ValueError("rows are counted on a pairs scene, by a row with no prepared index")
        c_scene = host.c_scenes(self, [(0, scene.n_shapes)])[0]
        out = np.zeros(scene.n_points, dtype=np.int64)
        shapes, copies = row_count_layout(self.kernel)
        status = host.lib.sb_count_rows(
            self.row, mode == "call", c_scene, shapes, copies, host.ffi.from_buffer("int64_t[]", out)
        )
        if status:
            raise ValueError(f"sb_count_rows refused {self.kernel.name}'s {mode} loop: {os.strerror(status)}")
        return out


def row_count_layout(kernel: Kernel) -> tuple[int, int]:
    """The copies of a row's shape and of its point CRowLoop.row_counts counts it over: a
    blocked loop's whole block and a shape left over (one shape where the loop takes them one
    at a time); two vectors and a tail."""
    shapes = min(kernel.block + 1, ROW_COUNT_SHAPES_MAX) if kernel.block > 1 else 1
    return shapes, min(2 * max(kernel.lanes, 1) + 1, ROW_COUNT_COPIES_MAX)


def peer_kernel(peer) -> Kernel:
    """A peer as a kernel record: one loop, no CPU feature, skipped if a module is missing,
    run only when named."""
    return Kernel(
        name=peer.name,
        family=peer.family,
        takes=peer.takes,
        isa=(),
        loop=peer.loop,
        summary=peer.summary,
        source=type(peer).__module__,
        lanes=1,
        block=1,
        known_bad=False,
        rounding_bound=0.0,
        tolerance=0.0,
        skip_reason=peer.unavailable(),
        language="python",
        modes=ONE_LOOP,
        by_default=False,
    )


class PeerLoop(LoopBase):
    """A kernel written in Python (peers.Peer): one loop over each thread's share of the shapes,
    its own NoOperation, and its JIT compilation reported apart (jit_s)."""

    def __init__(self, host, peer):
        super().__init__(host)
        self.peer = peer
        self.kernel = peer_kernel(peer)

    def twin(self):
        return NoOperation(self)

    def _arrays(self) -> dict:
        scene = self.host.scene
        return {name: scene.column(name) for name in scene.arrays}

    def passes(self, ref):
        self._check_mode(ref)
        arrays = self._arrays()
        return (lambda part: self.peer.count(arrays, *part)), share(self._shapes(ref), ref.threads)

    def noop_passes(self, ref):
        self._check_mode(ref)
        arrays = self._arrays()
        return (lambda part: self.peer.noop(arrays, *part, float("inf"))), share(self._shapes(ref), ref.threads)

    def warm(self, ref):
        return LoopExtras(jit_s=self.peer.warm(self._arrays()))

    def answers(self, shapes):
        scene, arrays = self.host.scene, self._arrays()
        if scene.layout == "pairs":
            if shapes is not None:
                raise ValueError("a pairs scene has no shape range: each shape meets one point")
            result = self.peer.pairs(arrays)
        else:
            begin, end = self._shapes(LoopRef(self.kernel.name, shapes=shapes))
            result = self.peer.grid(arrays, scene.n_shapes)[begin:end]
        return result.astype(self.host.family().answer_dtype)


class BroadphaseLoop(LoopBase):
    """A family's broadphase (an index of the points, then a query per shape), timed end to end:
    each pass builds the index (its time reported per sample) and queries every shape."""

    def __init__(self, host, family, name: str):
        super().__init__(host)
        self.family, self.name = family, name
        isa = ("sse2",)  # its narrow phases' least: skipped where it is masked or missing, as a kernel is
        cpu_has = {f: bool(host.lib.sb_cpu_supports(f.encode())) for f in isa}
        self.kernel = Kernel(
            name=name,
            family=family.name,
            takes=(),
            isa=isa,
            skip_reason=skip_reason(isa, cpu_has, host.disabled),
            loop="broadphase",
            summary=f"{name} broadphase: index build + query, end to end",
            source="broadphase",
            lanes=1,
            block=1,
            known_bad=False,
            rounding_bound=0.0,
            tolerance=0.0,
            modes=ONE_LOOP,
            noop_reason=END_TO_END,
            by_default=False,
        )
        self._builds: list[float] = []
        self._candidates: int | None = None
        self._narrow_phase: str | None = None
        self._index_scatter: str | None = None

    def passes(self, ref):
        self._check_mode(ref)
        if ref.shapes is not None:
            raise ValueError(f"the {self.name} broadphase queries every shape: it takes no shape range")
        engine = self.family.broadphase_engine(self.host.ffi, self.host.lib)
        self._narrow_phase = engine.narrow_phase()
        scene = self.host.scene
        self._index_scatter = engine.index_scatter(self.name, ref.threads, scene.n_points)  # warm() settled it
        pool = self.host.pool(ref.threads) if ref.threads > 1 else None
        columns = {name: scene.arrays[name] for name in scene.arrays}
        self._builds = []

        def one_pass(_):
            hits = engine.hits(self.name, columns, scene.n_shapes, scene.n_points, threads=ref.threads, pool=pool)
            self._builds.append(hits.index_build_s)
            self._candidates = hits.candidates
            return hits.total

        return one_pass, [None]

    def extras(self):
        build_s = sum(self._builds) / len(self._builds) if self._builds else None
        return LoopExtras(
            index_build_s=build_s,
            candidates=self._candidates,
            narrow_phase=self._narrow_phase,
            broadphase=self.name,
            index_scatter=self._index_scatter,
        )

    def warm(self, ref):
        engine = self.family.broadphase_engine(self.host.ffi, self.host.lib)
        scene = self.host.scene
        engine.warm(self.name, {name: scene.arrays[name] for name in scene.arrays}, scene.n_points, threads=ref.threads)
        return LoopExtras()

    def answers(self, shapes):
        raise ValueError(f"the {self.name} broadphase is checked through its family's kernels, not by verify")
