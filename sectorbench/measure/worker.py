"""The parent's side of a build's worker subprocess (the worker itself is server.py).

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
from pathlib import Path

import numpy as np

from ..errors import SectorbenchError
from ..model.kernels import DISABLE_ISA_ENV, Kernel, disabled_features

PACKAGE_PARENT = str(Path(__file__).resolve().parent.parent.parent)
#: Saved scenes name a family's extra arrays with this prefix (apart from its columns).
EXTRA_PREFIX = "extra:"


class WorkerCrashed(SectorbenchError):
    """The worker process died (a kernel crashed, or it was killed)."""


class WorkerError(SectorbenchError):
    """The worker reported an error it caught."""


class Worker:
    """A running worker for one shared library."""

    def __init__(self, library: Path, disable_isa: tuple[str, ...] = (), peers: bool = False):
        self.library = Path(library)
        self.disabled = disabled_features(disable_isa)
        self._stderr = tempfile.TemporaryFile(mode="w+")
        env = {
            **os.environ,
            "PYTHONPATH": os.pathsep.join(filter(None, [PACKAGE_PARENT, os.environ.get("PYTHONPATH")])),
            DISABLE_ISA_ENV: ",".join(sorted(self.disabled)),
        }
        self._process = subprocess.Popen(
            [sys.executable, "-m", "sectorbench.measure.server", str(self.library), *(["--peers"] if peers else [])],
            stdin=subprocess.PIPE,
            stdout=subprocess.PIPE,
            stderr=self._stderr,
            text=True,
            env=env,
        )

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
        lines = self._stderr.read().strip().splitlines()
        # A Python traceback: its last line says what happened; frames are for SECTORBENCH_DEBUG.
        tail = lines[-1:] if any(line.startswith("Traceback") for line in lines) else lines[-3:]
        how = f"killed by signal {-code}" if code < 0 else f"exited with status {code}"
        return f"worker {how}" + (f": {' / '.join(tail)}" if tail else "")

    def load(self, scene, scratch: Path) -> None:
        """Make `scene` the worker's current scene."""
        self.request("scene", path=str(save_scene(scene, scratch)))

    def evaluate(self, kernel: str, scratch: Path, shapes: tuple[int, int] | None = None) -> np.ndarray:
        """The kernel's raw answers on the current scene: (N, M) for a grid, (M,) for pairs.

        shapes=(begin, end): the grid loop over those shapes only (the other rows hold
        server.UNTOUCHED_BYTE unless the loop wrote there)."""
        out = Path(scratch) / f"eval-{kernel}.npy"
        extra = {} if shapes is None else {"shapes": [int(shapes[0]), int(shapes[1])]}
        self.request("evaluate", kernel=kernel, out=str(out), **extra)
        answers = np.load(out)
        out.unlink()
        return answers

    def describe(self) -> tuple[list[Kernel], dict]:
        """The build's kernels, and what else the worker found: fp_environment, counters, cpus.

        SectorbenchError if a --disable-isa feature is not one the build knows."""
        reply = self.request("describe")
        known = reply.pop("cpu_features")
        unknown = sorted(self.disabled - set(known))
        if unknown:
            raise SectorbenchError(
                f"unknown CPU feature {', '.join(unknown)} in --disable-isa/${DISABLE_ISA_ENV}; "
                f"known: {', '.join(known) or 'none (not an x86 build)'}"
            )
        return [Kernel.from_dict(row) for row in reply.pop("kernels")], reply

    def kill(self) -> None:
        """Stop the worker at once (the run was interrupted); close() still releases the rest."""
        if self._process.poll() is None:
            self._process.kill()
            self._process.wait()

    def close(self) -> None:
        if self._process.poll() is None:
            try:
                self._process.stdin.close()
                self._process.wait(timeout=10)
            except (OSError, subprocess.TimeoutExpired):
                self._process.kill()
                self._process.wait()
        self._stderr.close()

    def __enter__(self) -> Worker:
        return self

    def __exit__(self, *exc) -> None:
        self.close()


class BuildSession:
    """A build's library and its worker on one scene, restarted after a crash."""

    def __init__(
        self,
        config,
        library: Path,
        scene_path: Path | None = None,
        disable_isa: tuple[str, ...] = (),
        peers: bool = False,
    ):
        self.config, self.library, self.scene_path = config, library, scene_path
        self.disable_isa, self.peers = disable_isa, peers
        self.worker: Worker | None = None
        self.kernels: list[Kernel] = []
        self.info: dict = {}  # fp_environment, counters, cpus: see server.Server.describe
        self.restart()

    def restart(self) -> None:
        """A fresh worker with this session's scene loaded (the previous one, if any, is closed)."""
        if self.worker is not None:
            self.worker.close()
        self.worker = Worker(self.library, self.disable_isa, self.peers)
        self.kernels, self.info = self.worker.describe()
        if self.scene_path is not None:
            self.worker.request("scene", path=str(self.scene_path))

    def use(self, scene_path: Path) -> None:
        """Make `scene_path` this session's scene (also after a restart)."""
        self.scene_path = scene_path
        self.worker.request("scene", path=str(scene_path))

    def close(self) -> None:
        if self.worker is not None:
            self.worker.close()

    def kernel(self, name: str) -> Kernel:
        return next(k for k in self.kernels if k.name == name)


def save_scene(scene, directory: Path) -> Path:
    """Write a scene where a worker can load it (arrays unpadded; the worker re-pads)."""
    path = Path(directory) / f"scene-{scene.digest()[:16]}.npz"
    if not path.exists():
        meta = {"kind": scene.kind, "family": scene.family, "seed": scene.seed, "layout": scene.layout}
        meta["options"] = dict(scene.options)
        extra = {EXTRA_PREFIX + name: values for name, values in scene.extra.items()}
        columns = {name: scene.column(name) for name in scene.arrays}
        np.savez(path, __meta__=np.array(json.dumps(meta)), **columns, **extra)
    return path


def load_scene(path: Path):
    from ..families.scene_kinds import make_scene

    with np.load(path) as data:
        meta = json.loads(str(data["__meta__"]))
        columns = {name: data[name] for name in data.files if name != "__meta__" and not name.startswith(EXTRA_PREFIX)}
        extra = {name[len(EXTRA_PREFIX) :]: data[name] for name in data.files if name.startswith(EXTRA_PREFIX)}
        options = meta.get("options")
        return make_scene(meta["kind"], meta["family"], columns, meta["seed"], meta["layout"], extra, options)
