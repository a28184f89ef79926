"""Result records, the JSON schema, and atomic load/save.

Schema history:
  1  first version: scene, env, config, results[] with raw samples.
  2  results[] gain threads, cycles_per_test, loop_vector, bound_*, counted_*, ipc;
     env gains counters and the clock of every round; overhead_kernel names a
     NoOperation loop shape ("noop[scalar b1, 6 arrays]").  Version 1 files still load.
     Later, still 2 (optional fields, absent in older files): broadphase rows add broadphase,
     index_build_s, index_build_samples_s, candidates, narrow_phase; scene gains options and
     config gains broadphase and scene_options.
"""

from __future__ import annotations

import json
import os
import tempfile
from collections.abc import Callable
from dataclasses import asdict, dataclass, field
from datetime import UTC, datetime
from pathlib import Path
from typing import BinaryIO

from . import SectorbenchError

SCHEMA_VERSION = 2
#: Versions this sectorbench reads (older ones lack fields, which take their defaults).
READABLE_SCHEMAS = (1, 2)
RESULTS_DIR = Path(__file__).resolve().parent.parent / "results"


#: The keys of a result's scene description other than its shape count, which each
#: family names after its shapes ("sectors", "triangles").
SCENE_KEYS = ("kind", "family", "seed", "points", "options")


def scene_shapes(scene: dict) -> int | None:
    """N of a saved scene description, whatever the family calls its shapes."""
    return next((value for key, value in scene.items() if key not in SCENE_KEYS), None)


@dataclass(frozen=True)
class KernelResult:
    kernel: str
    family: str
    flags: str
    cc: str
    mode: str
    status: str  # ok | skipped | crashed
    reason: str | None = None
    hits: int | None = None
    tests: int = 0
    hit_rate: float | None = None
    calls: int = 0
    samples_s: list[float] = field(default_factory=list)
    median_s: float | None = None
    min_s: float | None = None
    spread: float | None = None  # (max - min) / median
    overhead_kernel: str | None = None
    overhead_samples_s: list[float] = field(default_factory=list)
    overhead_s: float | None = None
    net_samples_s: list[float] = field(default_factory=list)
    net_s: float | None = None
    ns_per_test: float | None = None
    speedup: float | None = None  # naive's net time / this net time, same build and mode
    warnings: list[str] = field(default_factory=list)
    threads: int = 1
    jit_s: float | None = None  # a peer's first call (its JIT compilation), not in the timing
    cycles_per_test: float | None = None  # gross (the whole loop), at the clock measured each round
    loop_vector: str | None = None  # the hot loop as compiled: scalar, xmm, ymm or zmm (machine_code.py)
    bound_cycles_per_test: float | None = None  # llvm-mca's lower bound for that loop, one core
    bound_model: str | None = None
    bound_reason: str | None = None  # why there is no bound
    counted_cycles_per_test: float | None = None  # hardware counters, where perf_event_open works
    instructions_per_test: float | None = None
    ipc: float | None = None
    #: A broadphase row (run --broadphase): its name, and its median index build time, which is
    #: part of its end-to-end time (median_s = net_s: no NoOperation is subtracted).
    broadphase: str | None = None
    index_build_s: float | None = None
    index_build_samples_s: list[float] = field(default_factory=list)
    candidates: int | None = None  # pairs its narrow phase tested per pass
    narrow_phase: str | None = None  # the brute-force kernel whose predicate it runs

    @property
    def percent_of_bound(self) -> float | None:
        """bound / measured gross cycles per test, as a percentage (100 = at the bound)."""
        if self.bound_cycles_per_test and self.cycles_per_test:
            return 100 * self.bound_cycles_per_test / self.cycles_per_test
        return None

    @property
    def build_key(self) -> tuple[str, str]:
        return (self.cc, self.flags)


@dataclass(frozen=True)
class RunResult:
    scene: dict
    env: dict
    config: dict
    results: list[KernelResult]
    created: str = field(default_factory=lambda: datetime.now(UTC).isoformat(timespec="seconds"))
    schema: int = SCHEMA_VERSION

    def to_dict(self) -> dict:
        return asdict(self)

    @classmethod
    def from_dict(cls, data: dict) -> RunResult:
        if data.get("schema") != SCHEMA_VERSION:
            raise SectorbenchError(
                f"unsupported results schema {data.get('schema')!r} (this sectorbench reads schema {SCHEMA_VERSION})"
            )
        fields = {k: v for k, v in data.items() if k in cls.__dataclass_fields__}
        fields["results"] = [
            KernelResult(**{k: v for k, v in row.items() if k in KernelResult.__dataclass_fields__})
            for row in data["results"]
        ]
        return cls(**fields)


def save(result: RunResult, path: Path, overwrite: bool = False) -> Path:
    """Write `result` as JSON atomically (temporary file, then rename).

    An existing file is never replaced unless `overwrite` is set.
    """
    return write_text_atomic(Path(path), json.dumps(result.to_dict(), indent=1) + "\n", overwrite)


def write_text_atomic(path: Path, text: str, overwrite: bool = False) -> Path:
    return write_atomic(path, lambda stream: stream.write(text.encode()), overwrite)


def write_atomic(path: Path, write: Callable[[BinaryIO], object], overwrite: bool = False) -> Path:
    """Write a file through a temporary name in the same directory, then rename.

    Readers never see a half-written file; an existing file is replaced only with
    `overwrite` (otherwise a hard link claims the name, which fails if it exists,
    even if the file appeared while we were writing).
    """
    path = Path(path)
    check_output(path, overwrite)
    path.parent.mkdir(parents=True, exist_ok=True)
    fd, partial = tempfile.mkstemp(prefix=f".{path.name}.", dir=path.parent)
    try:
        with os.fdopen(fd, "wb") as stream:
            write(stream)
            stream.flush()
            os.fsync(stream.fileno())
        if overwrite:
            os.replace(partial, path)
        else:
            os.link(partial, path)
            os.unlink(partial)
    except FileExistsError:
        os.unlink(partial)
        raise SectorbenchError(f"{path} exists; choose another path or pass --force to replace it") from None
    except BaseException:
        if os.path.exists(partial):
            os.unlink(partial)
        raise
    return path


def check_output(path: Path, overwrite: bool) -> None:
    """Refuse to write `path` if it exists and `overwrite` is not set."""
    if Path(path).exists() and not overwrite:
        raise SectorbenchError(f"{path} exists; choose another path or pass --force to replace it")


def timestamped_path(directory: Path = RESULTS_DIR, label: str = "run") -> Path:
    stamp = datetime.now(UTC).strftime("%Y%m%dT%H%M%SZ")
    return Path(directory) / f"{label}-{stamp}.json"


def load(path: Path) -> RunResult:
    try:
        data = json.loads(Path(path).read_text())
    except FileNotFoundError:
        raise SectorbenchError(f"{path}: no such file") from None
    except (OSError, json.JSONDecodeError) as exc:
        raise SectorbenchError(f"{path}: not a sectorbench result ({exc})") from None
    if not isinstance(data, dict) or "results" not in data:
        raise SectorbenchError(f"{path}: not a sectorbench result (no 'results')")
    try:
        return RunResult.from_dict(data)
    except TypeError as exc:
        raise SectorbenchError(f"{path}: malformed result ({exc})") from None
