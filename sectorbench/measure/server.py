"""The worker process: loads one build's library and runs its kernels on request.

Started by worker.Worker as `python -m sectorbench.measure.server LIBRARY`; reads one JSON
request per line on stdin and answers one line on stdout.  Whatever a kernel does to
this process (FTZ/DAZ from a fast-math library, a crash) stays here.
"""

from __future__ import annotations

import json
import os
import sys
import time
from concurrent.futures import ThreadPoolExecutor
from dataclasses import replace
from pathlib import Path

import numpy as np

from ..model.kernels import Kernel, disabled_features, parse_takes, skip_reason
from ..model.split import shape_ranges
from .worker import load_scene

#: A prepared index is built this many times; the fastest build is its build time (the
#: first build also pays for page faults of fresh memory).
INDEX_BUILDS = 3
#: evaluate with a shape range fills the grid with this byte first: rows outside the range
#: keep it (every byte), so a loop that writes beyond its range shows.
UNTOUCHED_BYTE = 0xFF


def fp_environment() -> dict:
    """Whether this process flushes subnormal results / treats subnormal inputs as zero."""
    return {"denormals_are_zero": 5e-324 + 0.0 == 0.0, "flush_to_zero": 2.2250738585072014e-308 / 2 == 0.0}


class Server:
    """One build's kernels, or, with peers=True, the families' peers (the library then only
    serves the clock and counters: a plain -O2 build, never fast-math)."""

    def __init__(self, library: str, peers: bool = False):
        import cffi

        from ..native.build import cdef_source

        self.ffi = cffi.FFI()
        self.ffi.cdef(cdef_source())
        self.lib = self.ffi.dlopen(library)
        count = self.ffi.new("size_t *")
        table = self.lib.sb_kernel_table(count)
        rows = sorted((table[i] for i in range(count[0])), key=lambda row: (self.ffi.string(row.source), row.line))
        self.rows = {}
        self.kernels: dict[str, Kernel] = {}
        self.peers: dict[str, object] = {}
        if peers:
            from ..families import all_families

            for peer in (p for family in all_families() for p in family.peers()):
                self.peers[peer.name] = peer
                self.kernels[peer.name] = peer_kernel(peer)
        else:
            for row in rows:
                kernel = self._kernel(row)
                self.rows[kernel.name] = row
                self.kernels[kernel.name] = kernel
        self.scene = None
        self._indexes: dict[str, tuple] = {}  # kernel -> (row, prepared index, its build time and bytes)
        self._c_scenes: dict[tuple, object] = {}
        self._keep_alive: list = []
        self._pools: dict[int, ThreadPoolExecutor] = {}
        self.counters_error = self.lib.sb_counters_open()

    def _text(self, pointer) -> str:
        return self.ffi.string(pointer).decode() if pointer != self.ffi.NULL else ""

    def _kernel(self, row) -> Kernel:
        from ..families import get

        isa = tuple(f for f in self._text(row.isa).split(",") if f)
        cpu_has = {f: bool(self.lib.sb_cpu_supports(f.encode())) for f in isa}
        kernel = Kernel(
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
            skip_reason=skip_reason(isa, cpu_has, disabled_features()),
        )
        try:
            problem = get(kernel.family).check_kernel(kernel)
        except Exception as exc:  # an unknown family: the row cannot run, the others can
            problem = str(exc)
        if problem and kernel.runnable:
            kernel = replace(kernel, skip_reason=f"row error: {problem}")
        return kernel

    def _runnable_row(self, name: str):
        kernel = self.kernels.get(name)
        if kernel is None:
            raise KeyError(f"no kernel {name!r} in this build")
        if not kernel.runnable:
            raise RuntimeError(f"kernel {name} is not runnable here: {kernel.skip_reason}")
        return self.peers[name] if kernel.is_peer else self.rows[name]

    def _shape_range(self, shapes) -> tuple[int, int]:
        """A request's `shapes` = [begin, end] (the shapes its loops test), checked; all by default."""
        n = self.scene.n_shapes
        if shapes is None:
            return 0, n
        begin, end = (int(x) for x in shapes)
        if not 0 <= begin <= end <= n:
            raise ValueError(f"shapes [{begin}, {end}) is not a range of the scene's {n} shapes")
        return begin, end

    def _c_scenes_for(self, kernel: Kernel, threads: int = 1, shapes=None) -> list:
        """The scene as the kernel reads it (its shape arrays in the order of its `takes`),
        as one sb_scene per thread, each testing a contiguous share of the shapes in `shapes`."""
        row = None if kernel.is_peer else self.rows[kernel.name]
        prepared = row is not None and row.prepare != self.ffi.NULL
        first, last = self._shape_range(shapes)
        key = (kernel.takes, threads, kernel.name if prepared else None, first, last)
        if key not in self._c_scenes:
            scene = self.scene
            parts = []
            for begin, end in ((first + b, first + e) for b, e in shape_ranges(last - first, threads)):
                c_scene = self.ffi.new("sb_scene *")
                c_scene.n_shapes = scene.n_shapes
                c_scene.n_points = scene.n_points
                c_scene.stride = scene.stride
                c_scene.shape_begin, c_scene.shape_end = begin, end
                c_scene.never = float("inf")  # loaded at run time, so no compiler can fold the NoOperation
                for k, name in enumerate(scene.point_arrays):
                    c_scene.point[k] = self._pointer(scene.arrays[name])
                for k, name in enumerate(kernel.takes):
                    c_scene.shape[k] = self._pointer(scene.arrays[name])
                for k, name in enumerate(scene.extra):
                    c_scene.extra[k] = self._pointer(scene.extra[name], "char[]")
                self._keep_alive.append(c_scene)
                parts.append(c_scene)
            if prepared:
                index = self._prepare(row, parts[0])
                for c_scene in parts:
                    c_scene.prepared = index
            self._c_scenes[key] = parts
        return self._c_scenes[key]

    def _c_scene(self, kernel: Kernel):
        return self._c_scenes_for(kernel)[0]

    def _pointer(self, array, ctype: str = "float[]"):
        pointer = self.ffi.from_buffer(ctype, array)
        self._keep_alive.append(pointer)
        return pointer

    def _prepare(self, row, c_scene):
        """Build the row's index for the scene (the best of INDEX_BUILDS builds is its
        build time); released when the scene changes."""
        name = self._text(row.name)
        seconds = []
        for _ in range(INDEX_BUILDS):
            start = time.perf_counter_ns()
            index = row.prepare(c_scene)
            seconds.append((time.perf_counter_ns() - start) / 1e9)
            if index == self.ffi.NULL:
                raise MemoryError(f"{name}: prepare() returned NULL (out of memory?)")
            if len(seconds) < INDEX_BUILDS:
                row.release(index)
        size = int(row.prepared_bytes(index)) if row.prepared_bytes != self.ffi.NULL else None
        self._indexes[name] = (row, index, {"index_build_s": min(seconds), "index_bytes": size})
        return index

    def _release_indexes(self) -> None:
        for row, index, _ in self._indexes.values():
            if row.release != self.ffi.NULL:
                row.release(index)
        self._indexes = {}

    def index(self, msg):
        """The kernel's prepared index on the current scene: its build time and memory
        ({} for a kernel without one)."""
        kernel = self.kernels[msg["kernel"]]
        if kernel.is_peer or self.rows[kernel.name].prepare == self.ffi.NULL:
            return {}
        self._runnable_row(kernel.name)
        self._c_scene(kernel)
        return self._indexes[kernel.name][2]

    # ---------------------------------------------------------------- requests

    def describe(self, msg):
        return {
            "kernels": [k.to_dict() for k in self.kernels.values()],
            "fp_environment": fp_environment(),
            "counters": {
                "available": self.counters_error == 0,
                "reason": None if self.counters_error == 0 else f"perf_event_open: {os.strerror(self.counters_error)}",
            },
            "cpus": len(os.sched_getaffinity(0)) if hasattr(os, "sched_getaffinity") else os.cpu_count(),
            "cpu_features": [f for f in self.ffi.string(self.lib.sb_cpu_features()).decode().split(",") if f],
        }

    def load(self, msg):
        self._release_indexes()
        self.scene = load_scene(Path(msg["path"]))
        self._c_scenes, self._keep_alive = {}, [self.scene]
        return {"tests": self.scene.tests}

    def _time(self, function, c_scenes: list, calls: int) -> dict:
        """Seconds per call and the hits, over `calls` calls; with several scenes, one
        thread per scene (cffi releases the GIL around each call), all joined per call."""
        pool = self._pool(len(c_scenes)) if len(c_scenes) > 1 else None
        cycles0, instructions0 = self._counters()
        start = time.perf_counter_ns()
        for _ in range(calls):
            if pool is None:
                hits = function(c_scenes[0])
            else:
                hits = sum(pool.map(function, c_scenes))
        elapsed = time.perf_counter_ns() - start
        cycles1, instructions1 = self._counters()
        reply = {"seconds": elapsed / 1e9 / calls, "hits": int(hits)}
        if self.counters_error == 0 and pool is None:
            reply["cycles"] = (cycles1 - cycles0) / calls
            reply["instructions"] = (instructions1 - instructions0) / calls
        return reply

    def _counters(self) -> tuple[int, int]:
        cycles, instructions = self.ffi.new("uint64_t *"), self.ffi.new("uint64_t *")
        self.lib.sb_counters_read(cycles, instructions)
        return cycles[0], instructions[0]

    def _pool(self, threads: int) -> ThreadPoolExecutor:
        if threads not in self._pools:
            self._pools[threads] = ThreadPoolExecutor(threads, thread_name_prefix="sectorbench")
        return self._pools[threads]

    def _broadphase_count(self, msg):
        """A broadphase end to end (index build + query of every shape) as one call; each call's
        index build time is kept in self.index_build_s."""
        from ..families import get

        family = get(self.scene.family)
        if msg["broadphase"] not in family.broadphases() or msg["broadphase"] == "none":
            raise ValueError(f"no broadphase {msg['broadphase']!r} in the {family.name} family")
        if msg["mode"] != "inline":
            raise ValueError(f"a broadphase has one loop, not a {msg['mode']} loop (it runs in --mode inline)")
        engine = family.broadphase_engine(self.ffi, self.lib)
        self.narrow_phase = engine.narrow_phase()
        threads = msg.get("threads", 1)
        pool = self._pool(threads) if threads > 1 else None
        scene = self.scene
        columns = {name: scene.arrays[name] for name in scene.arrays}

        def one_pass(_):
            hits = engine.hits(msg["broadphase"], columns, scene.n_shapes, scene.n_points, threads=threads, pool=pool)
            self.index_build_s.append(hits.index_build_s)
            self.candidates = hits.candidates
            return hits.total

        return one_pass, [None]

    def _count(self, msg):
        """The loop to time and its scenes: the kernel's, or its NoOperation twin (msg["noop"])."""
        if msg.get("broadphase"):
            return self._broadphase_count(msg)
        row = self._runnable_row(msg["kernel"])
        if self.kernels[msg["kernel"]].is_peer:
            return self._peer_count(row, msg)
        loops = {
            ("inline", False): row.count_inline,
            ("call", False): row.count_call,
            ("inline", True): row.noop_inline,
            ("call", True): row.noop_call,
        }
        scenes = self._c_scenes_for(self.kernels[msg["kernel"]], msg.get("threads", 1), msg.get("shapes"))
        return loops[(msg["mode"], bool(msg.get("noop")))], scenes

    def _peer_count(self, peer, msg):
        """A peer's loop over each thread's share of the shapes (the "scenes" are ranges)."""
        if msg["mode"] != "inline":
            raise ValueError(f"{peer.name} has one loop, not a {msg['mode']} loop (peers run in --mode inline)")
        arrays = {name: self.scene.column(name) for name in self.scene.arrays}
        threads, (first, last) = msg.get("threads", 1), self._shape_range(msg.get("shapes"))
        ranges = [(first + begin, first + end) for begin, end in shape_ranges(last - first, threads)]
        if msg.get("noop"):
            return (lambda part: peer.noop(arrays, *part, float("inf"))), ranges
        return (lambda part: peer.count(arrays, *part)), ranges

    def calibrate(self, msg):
        """The smallest call count whose total lasts >= min_time_s, growing like pyperf's.

        A peer is first called on a tiny slice: its JIT compilation, reported as jit_s."""
        jit = {}
        if not msg.get("broadphase") and self.kernels[msg["kernel"]].is_peer and not msg.get("noop"):
            arrays = {name: self.scene.column(name) for name in self.scene.arrays}
            jit["jit_s"] = self._runnable_row(msg["kernel"]).warm(arrays)
        function, c_scenes = self._count(msg)
        self.index_build_s = []
        calls = 1
        while True:
            reply = self._time(function, c_scenes, calls)
            total = reply["seconds"] * calls
            if total >= msg["min_time_s"] or calls >= 2**30:
                return {**reply, **jit, "calls": calls}
            growth = msg["min_time_s"] * 1.2 / total if total > 0 else 10
            calls = int(calls * min(max(growth, 2), 10))

    def sample(self, msg):
        function, c_scenes = self._count(msg)
        self.index_build_s = []
        reply = self._time(function, c_scenes, msg["calls"])
        if msg.get("broadphase"):
            reply["index_build_s"] = sum(self.index_build_s) / len(self.index_build_s)
            reply["candidates"] = self.candidates
            reply["narrow_phase"] = self.narrow_phase
        return reply

    def evaluate(self, msg):
        from ..families import get

        row = self._runnable_row(msg["kernel"])
        kernel, scene = self.kernels[msg["kernel"]], self.scene
        dtype, width = get(scene.family).answer_dtype, get(scene.family).answer_width
        shapes = msg.get("shapes")
        if shapes is not None and scene.layout == "pairs":
            raise ValueError("shapes applies to a grid scene; a pairs scene has one shape per point")
        first, last = self._shape_range(shapes)
        if kernel.is_peer:
            arrays = {name: scene.column(name) for name in scene.arrays}
            if scene.layout == "pairs":
                result = row.pairs(arrays)
            elif shapes is None:
                result = row.grid(arrays, scene.n_shapes)
            else:  # the peer on its share of the shapes; the other rows keep UNTOUCHED_BYTE
                shape_arrays = get(scene.family).shape_arrays
                share = {k: v[first:last] if k in shape_arrays else v for k, v in arrays.items()}
                result = np.empty((scene.n_shapes, scene.n_points), dtype=dtype)
                result.view(np.uint8)[:] = UNTOUCHED_BYTE
                result[first:last] = row.grid(share, last - first)
            np.save(msg["out"], result.astype(dtype))
            return {"answers": int(result.size)}
        c_scene = self._c_scenes_for(kernel, 1, shapes)[0]
        if scene.layout == "pairs":
            out = np.zeros(scene.stride * width, dtype=dtype)
            row.eval_pairs(c_scene, self.ffi.from_buffer(out))
            result = out.reshape(scene.stride, width)[: scene.n_points]
        else:
            out = np.zeros(scene.n_shapes * scene.stride * width, dtype=dtype)
            if shapes is not None:  # rows outside the range must stay as they are: a loop writing there is wrong
                out.view(np.uint8)[:] = UNTOUCHED_BYTE
            row.eval_grid(c_scene, self.ffi.from_buffer(out))
            result = out.reshape(scene.n_shapes, scene.stride, width)[:, : scene.n_points]
        if width == 1:
            result = result[..., 0]
        np.save(msg["out"], result)
        return {"answers": int(result.size)}

    def clock(self, msg):
        """Clock in MHz from dependent adds (one per cycle): the best of twelve ~0.3 ms runs.

        Short runs: on a shared or virtual machine one of them is likely to run
        undisturbed, and the undisturbed one is the clock (see runner._cycles)."""
        iterations = 1_000_000
        best = min(self._timed_adds(iterations) for _ in range(12))
        return {"mhz": iterations / best / 1e6}

    def _timed_adds(self, iterations: int) -> float:
        start = time.perf_counter_ns()
        self.lib.sb_dependent_adds(iterations)
        return (time.perf_counter_ns() - start) / 1e9

    def handle(self, msg: dict) -> dict:
        handler = {
            "describe": self.describe,
            "scene": self.load,
            "calibrate": self.calibrate,
            "sample": self.sample,
            "evaluate": self.evaluate,
            "clock": self.clock,
            "index": self.index,
        }[msg["op"]]
        return handler(msg)


def peer_kernel(peer) -> Kernel:
    """A peer as a kernel record: one loop, no CPU feature, skipped if a module is missing."""
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
    )


def main(argv: list[str]) -> int:
    try:
        server = Server(argv[0], peers="--peers" in argv[1:])
    except Exception as exc:  # one line for the parent's report, not a traceback
        print(f"cannot load {Path(argv[0]).name}: {type(exc).__name__}: {exc}", file=sys.stderr)
        return 3
    for line in sys.stdin:
        try:
            reply = server.handle(json.loads(line))
        except Exception as exc:  # reported to the parent, which decides what it means
            reply = {"error": f"{type(exc).__name__}: {exc}"}
        sys.stdout.write(json.dumps(reply) + "\n")
        sys.stdout.flush()
    return 0


if __name__ == "__main__":
    sys.exit(main(sys.argv[1:]))
