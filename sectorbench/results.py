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
import stat
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
#: Where --save writes and a trend plot reads: results/ of the current directory, the same
#: rule for a checkout (run from its top, as the Makefile does) and an installed package.
RESULTS_DIR = Path("results")


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
    status: str  # ok | skipped | crashed | timed-out
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
    #: A kernel's prepared index (its prepare hook, e.g. the aabr family's BCS) or a broadphase
    #: row's index: median build time, apart from a kernel's timing but part of a broadphase
    #: row's end-to-end time (median_s = net_s: no NoOperation is subtracted from those).
    index_build_s: float | None = None
    index_build_samples_s: list[float] = field(default_factory=list)
    index_bytes: int | None = None  # a prepared index's memory
    broadphase: str | None = None  # a broadphase row (run --broadphase): its name
    candidates: int | None = None  # pairs its narrow phase tested per pass
    narrow_phase: str | None = None  # the brute-force kernel whose predicate it runs
    #: How the kernel left the worker's FP environment (restored before every other kernel), if it changed it.
    fp_environment_change: str | None = None

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
        if data.get("schema") not in READABLE_SCHEMAS:
            readable = ", ".join(map(str, READABLE_SCHEMAS))
            raise SectorbenchError(
                f"unsupported results schema {data.get('schema')!r} (this sectorbench reads schemas {readable})"
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

    Readers never see a half-written file.  Only a regular file is ever replaced, and only
    with `overwrite` (otherwise a hard link claims the name, which fails if it exists, even
    if the file appeared while we were writing); a replaced file keeps its permission
    bits, a new one gets 0666 less the umask, as any program's new file does.  A symbolic
    link is written through: its target is what gets replaced.
    """
    path = check_output(path, overwrite, create_dir=True)
    path.parent.mkdir(parents=True, exist_ok=True)
    fd, partial = tempfile.mkstemp(prefix=f".{path.name}.", dir=path.parent)
    try:
        with os.fdopen(fd, "wb") as stream:
            write(stream)
            stream.flush()
            existing = _regular_or_none(path, overwrite)
            os.fchmod(stream.fileno(), stat.S_IMODE(existing.st_mode) if existing else 0o666 & ~_umask())
            os.fsync(stream.fileno())
        if overwrite:
            _regular_or_none(path, overwrite)  # what sits there now, just before the rename
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


def _umask() -> int:
    """The process's umask (reading it means setting it: set it straight back)."""
    mask = os.umask(0o022)
    os.umask(mask)
    return mask


_KINDS = (
    (stat.S_ISDIR, "a directory"),
    (stat.S_ISCHR, "a character device"),
    (stat.S_ISBLK, "a block device"),
    (stat.S_ISFIFO, "a FIFO"),
    (stat.S_ISSOCK, "a socket"),
)


def _regular_or_none(path: Path, overwrite: bool) -> os.stat_result | None:
    """The stat of the regular file at `path`, None if nothing is there; else SectorbenchError."""
    try:
        info = os.stat(path)
    except (FileNotFoundError, NotADirectoryError):  # the latter: check_directory says which is a file
        return None
    except OSError as exc:
        raise SectorbenchError(f"{path}: cannot write here ({exc.strerror})") from None
    if not stat.S_ISREG(info.st_mode):
        kind = next((name for test, name in _KINDS if test(info.st_mode)), "not a regular file")
        raise SectorbenchError(f"{path} is {kind}: sectorbench writes only regular files, even with --force")
    if not overwrite:
        raise SectorbenchError(f"{path} exists; choose another path or pass --force to replace it")
    return info


def check_output(path: Path, overwrite: bool, create_dir: bool = False) -> Path:
    """Refuse, before any work, an output path the final write would refuse or fail on.

    What exists there must be a regular file, and `overwrite` set; its directory must
    exist (or, with `create_dir`, be creatable) and take a new file, which is tried: a
    temporary file is made and removed there.  Returns the path to write: a symbolic
    link's target.
    """
    path = Path(path)
    if path.is_symlink():
        path = Path(os.path.realpath(path))
    _regular_or_none(path, overwrite)
    check_directory(path.parent, create=create_dir, what=f"{path}: ")
    return path


def check_directory(directory: Path, create: bool = False, what: str = "") -> None:
    """`directory` takes new files (or, with `create`, can be made and would); else SectorbenchError."""
    directory = Path(directory)
    existing = directory
    while not existing.exists() and existing != existing.parent:
        if existing.is_symlink():  # a dangling link in the way
            raise SectorbenchError(f"{what}{existing} is a broken symbolic link")
        existing = existing.parent
    if not existing.is_dir():
        raise SectorbenchError(f"{what}{existing} is a file, not a directory")
    if existing != directory and not create:
        raise SectorbenchError(f"{what}directory {directory} does not exist")
    try:
        fd, probe = tempfile.mkstemp(prefix=".sectorbench-probe-", dir=existing)
    except OSError as exc:
        raise SectorbenchError(f"{what}cannot create files in {existing} ({exc.strerror})") from None
    os.close(fd)
    os.unlink(probe)


def timestamped_path(directory: Path = RESULTS_DIR, label: str = "run") -> Path:
    stamp = datetime.now(UTC).strftime("%Y%m%dT%H%M%SZ")
    return Path(directory) / f"{label}-{stamp}.json"


def save_new(result: RunResult, directory: Path = RESULTS_DIR, label: str = "run") -> Path:
    """Save under a new timestamped name in `directory` (suffixed -2, -3, ... if that second is taken)."""
    first = timestamped_path(directory, label)
    for attempt in range(1, 100):
        path = first if attempt == 1 else first.with_name(f"{first.stem}-{attempt}.json")
        if not os.path.lexists(path):
            try:
                return save(result, path)
            except SectorbenchError:
                if not os.path.lexists(path):
                    raise
    raise SectorbenchError(f"no free name for {first} (tried -2 to -99)")


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
