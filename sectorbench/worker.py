"""One build's worker subprocess, and the parent's handle on it.

Each build runs in its own process: a -ffast-math library built by gcc switches the
whole process to flush-to-zero / denormals-are-zero when it is loaded, and a kernel
may crash.  The parent keeps a clean floating-point environment and survives.

Protocol: one JSON object per line on stdin, one reply per line on stdout.
"""

from __future__ import annotations

import json
import os
import subprocess
import sys
import tempfile
import time
from pathlib import Path

import numpy as np

from . import SectorbenchError
from .kernels import DISABLE_ISA_ENV, Kernel, disabled_features

PACKAGE_PARENT = str(Path(__file__).resolve().parent.parent)


class WorkerCrashed(SectorbenchError):
    """The worker process died (a kernel crashed, or it was killed)."""


class WorkerError(SectorbenchError):
    """The worker reported an error it caught."""


# ---------------------------------------------------------------------------- parent side

class Worker:
    """A running worker for one shared library."""

    def __init__(self, library: Path, disable_isa: tuple[str, ...] = ()):
        self.library = Path(library)
        self._stderr = tempfile.TemporaryFile(mode="w+")
        env = {**os.environ, "PYTHONPATH": os.pathsep.join(filter(None, [PACKAGE_PARENT, os.environ.get("PYTHONPATH")])),
               DISABLE_ISA_ENV: ",".join(sorted(disabled_features(disable_isa)))}
        self._process = subprocess.Popen(
            [sys.executable, "-m", "sectorbench.worker", str(self.library)],
            stdin=subprocess.PIPE, stdout=subprocess.PIPE, stderr=self._stderr, text=True, env=env)

    def request(self, op: str, **fields) -> dict:
        try:
            self._process.stdin.write(json.dumps({"op": op, **fields}) + "\n")
            self._process.stdin.flush()
            line = self._process.stdout.readline()
        except (BrokenPipeError, OSError):
            line = ""
        if not line:
            raise WorkerCrashed(self._death_notice())
        reply = json.loads(line)
        if "error" in reply:
            raise WorkerError(reply["error"])
        return reply

    def _death_notice(self) -> str:
        code = self._process.wait(timeout=30)
        self._stderr.seek(0)
        tail = self._stderr.read().strip().splitlines()[-3:]
        how = f"killed by signal {-code}" if code < 0 else f"exited with status {code}"
        return f"worker {how}" + (f": {' / '.join(tail)}" if tail else "")

    def load(self, scene, scratch: Path) -> None:
        """Make `scene` the worker's current scene."""
        self.request("scene", path=str(save_scene(scene, scratch)))

    def evaluate(self, kernel: str, scratch: Path) -> np.ndarray:
        """The kernel's 0/1 answers on the current scene: (N, M) for a grid, (M,) for pairs."""
        out = Path(scratch) / f"eval-{kernel}.npy"
        self.request("evaluate", kernel=kernel, out=str(out))
        answers = np.load(out)
        out.unlink()
        return answers.astype(bool)

    def describe(self) -> tuple[list[Kernel], dict]:
        reply = self.request("describe")
        return [Kernel.from_dict(row) for row in reply["kernels"]], reply["fp_environment"]

    def close(self) -> None:
        if self._process.poll() is None:
            try:
                self._process.stdin.close()
                self._process.wait(timeout=10)
            except (OSError, subprocess.TimeoutExpired):
                self._process.kill()
                self._process.wait()
        self._stderr.close()

    def __enter__(self) -> "Worker":
        return self

    def __exit__(self, *exc) -> None:
        self.close()


def save_scene(scene, directory: Path) -> Path:
    """Write a scene where a worker can load it (arrays unpadded; the worker re-pads)."""
    path = Path(directory) / f"scene-{scene.digest()[:16]}.npz"
    if not path.exists():
        meta = json.dumps({"kind": scene.kind, "family": scene.family, "seed": scene.seed, "layout": scene.layout})
        np.savez(path, __meta__=np.array(meta), **{name: scene.column(name) for name in scene.arrays})
    return path


def load_scene(path: Path):
    from .scenes import FAMILY_ARRAYS, make_scene

    with np.load(path) as data:
        meta = json.loads(str(data["__meta__"]))
        columns = {name: data[name] for name in FAMILY_ARRAYS[meta["family"]]}
        return make_scene(meta["kind"], meta["family"], columns, data["px"], data["py"],
                          meta["seed"], meta["layout"])


# ---------------------------------------------------------------------------- worker side

def fp_environment() -> dict:
    """Whether this process flushes subnormal results / treats subnormal inputs as zero."""
    return {"denormals_are_zero": 5e-324 + 0.0 == 0.0, "flush_to_zero": 2.2250738585072014e-308 / 2 == 0.0}


class _Server:
    def __init__(self, library: str):
        import cffi

        from .build import cdef_source
        from .kernels import skip_reason

        self.ffi = cffi.FFI()
        self.ffi.cdef(cdef_source())
        self.lib = self.ffi.dlopen(library)
        count = self.ffi.new("size_t *")
        table = self.lib.sb_kernel_table(count)
        disabled = disabled_features()
        self.rows = {}
        self.kernels = []
        rows = sorted((table[i] for i in range(count[0])),
                      key=lambda row: (self.ffi.string(row.source), row.line))
        for row in rows:
            isa = tuple(f for f in self.ffi.string(row.isa).decode().split(",") if f)
            cpu_has = {f: bool(self.lib.sb_cpu_supports(f.encode())) for f in isa}
            kernel = Kernel(
                name=self.ffi.string(row.name).decode(), family=self.ffi.string(row.family).decode(),
                isa=isa, overhead=self.ffi.string(row.overhead).decode(),
                params=self.ffi.string(row.params).decode(), summary=self.ffi.string(row.summary).decode(),
                source=f"{Path(self.ffi.string(row.source).decode()).name}:{row.line}",
                lanes=row.lanes, flags=row.flags, rounding_bound=row.rounding_bound, tolerance=row.tolerance,
                skip_reason=skip_reason(isa, cpu_has, disabled))
            self.rows[kernel.name] = row
            self.kernels.append(kernel)
        self.scene = None
        self._keep_alive = []

    def _runnable_row(self, name: str):
        row = self.rows.get(name)
        if row is None:
            raise KeyError(f"no kernel {name!r} in this build")
        kernel = next(k for k in self.kernels if k.name == name)
        if not kernel.runnable:
            raise RuntimeError(f"kernel {name} is not runnable here: {kernel.skip_reason}")
        return row

    def describe(self, msg):
        return {"kernels": [k.to_dict() for k in self.kernels], "fp_environment": fp_environment()}

    def scene_(self, msg):
        from .scenes import FAMILY_ARRAYS

        scene = load_scene(Path(msg["path"]))
        c_scene = self.ffi.new("sb_scene *")
        c_scene.n_shapes = scene.n_shapes
        c_scene.n_points = scene.n_points
        c_scene.stride = scene.stride
        keep = [c_scene]
        for name, array in scene.arrays.items():
            pointer = self.ffi.from_buffer("float[]", array)
            keep.append(pointer)
            target = c_scene if name in ("px", "py") else getattr(c_scene, scene.family)
            setattr(target, name, pointer)
        assert set(scene.arrays) == {"px", "py", *FAMILY_ARRAYS[scene.family]}
        self.scene, self._keep_alive = scene, keep + [scene]
        return {"tests": scene.tests}

    def _time(self, function, calls: int) -> tuple[float, int]:
        c_scene = self._keep_alive[0]
        start = time.perf_counter_ns()
        for _ in range(calls):
            hits = function(c_scene)
        elapsed = time.perf_counter_ns() - start
        return elapsed / 1e9 / calls, int(hits)

    def _count_function(self, msg):
        row = self._runnable_row(msg["kernel"])
        return row.count_inline if msg["mode"] == "inline" else row.count_call

    def calibrate(self, msg):
        """The smallest call count whose total lasts >= min_time_s, growing like pyperf's."""
        function = self._count_function(msg)
        calls = 1
        while True:
            per_call, hits = self._time(function, calls)
            total = per_call * calls
            if total >= msg["min_time_s"] or calls >= 2**30:
                return {"calls": calls, "seconds": per_call, "hits": hits}
            growth = msg["min_time_s"] * 1.2 / total if total > 0 else 10
            calls = int(calls * min(max(growth, 2), 10))

    def sample(self, msg):
        seconds, hits = self._time(self._count_function(msg), msg["calls"])
        return {"seconds": seconds, "hits": hits}

    def evaluate(self, msg):
        row = self._runnable_row(msg["kernel"])
        scene = self.scene
        c_scene = self._keep_alive[0]
        if scene.layout == "pairs":
            out = np.zeros(scene.stride, dtype=np.uint8)
            row.eval_pairs(c_scene, self.ffi.from_buffer("uint8_t[]", out))
            result = out[:scene.n_points]
        else:
            out = np.zeros(scene.n_shapes * scene.stride, dtype=np.uint8)
            row.eval_grid(c_scene, self.ffi.from_buffer("uint8_t[]", out))
            result = out.reshape(scene.n_shapes, scene.stride)[:, :scene.n_points]
        np.save(msg["out"], result)
        return {"inside": int(result.sum())}

    def clock(self, msg):
        """Clock in MHz from dependent adds (one per cycle); best of a few tries."""
        iterations = 20_000_000
        best = min(self._timed_adds(iterations) for _ in range(5))
        return {"mhz": iterations / best / 1e6}

    def _timed_adds(self, iterations: int) -> float:
        start = time.perf_counter_ns()
        self.lib.sb_dependent_adds(iterations)
        return (time.perf_counter_ns() - start) / 1e9

    def handle(self, msg: dict) -> dict:
        handler = {"describe": self.describe, "scene": self.scene_, "calibrate": self.calibrate,
                   "sample": self.sample, "evaluate": self.evaluate, "clock": self.clock}[msg["op"]]
        return handler(msg)


def main(argv: list[str]) -> int:
    server = _Server(argv[0])
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
