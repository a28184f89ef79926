"""Result records, the JSON schema, and atomic load/save.

Schema history:
  1  first version: scene, env, config, results[] with raw samples.
  2  results[] gain threads, cycles_per_test, loop_vector, bound_*, counted_*, ipc;
     env gains counters and the clock of every round; overhead_kernel names a
     NoOperation loop shape ("noop[scalar b1, 6 arrays]").  Version 1 files still load.
     Later, still 2 (optional fields, absent in older files): broadphase rows add broadphase,
     index_build_s, index_build_samples_s, candidates, narrow_phase; scene gains options and
     config gains broadphase and scene_options.  Results gain working_set_bytes, net_valid,
     validity, speedup_basis, speedup_reference; the run gains exact_count.  C kernel rows add code_sha256 and
     source_sha256 (the gate's "unchanged code").  The run gains count_allowance and
     count_allowance_sample, and rows answers_differ and answers_note (compare/answers.py).
     Broadphase rows add index_scatter.
"""

from __future__ import annotations

import contextlib
import contextvars
import errno
import fcntl
import json
import os
import re
import stat
import tempfile
from collections.abc import Callable
from dataclasses import asdict, dataclass, field, replace
from datetime import UTC, datetime
from pathlib import Path
from typing import BinaryIO, NamedTuple

from ..errors import SectorbenchError
from ..interrupts import remove_abandoned
from .text import shortened_path

SCHEMA_VERSION = 2
#: Versions this sectorbench reads (older ones lack fields, which take their defaults).
READABLE_SCHEMAS = (1, 2)
#: Where --save writes and a trend plot reads: results/ of the current directory, the same
#: rule for a checkout (run from its top, as the Makefile does) and an installed package.
RESULTS_DIR = Path("results")
#: The largest result file read: a long run of many builds and kernels saves a few MB;
#: 256 MiB is far above any real one and stops a wrong file (an image, /dev/zero behind a
#: link) from being read into memory.
MAX_RESULT_BYTES = 256 * 2**20


#: The keys of a result's scene description other than its shape count, which each
#: family names after its shapes ("sectors", "triangles").
SCENE_KEYS = ("kind", "family", "seed", "points", "options")


def scene_shapes(scene: dict) -> int | None:
    """N of a saved scene description, whatever the family calls its shapes."""
    return next((value for key, value in scene.items() if key not in SCENE_KEYS), None)


#: How the notes of measure/timing.net_time begin where a row's net time is not clearly above 0
#: (clamped at 0, or its interval over the rounds reaches 0).  The note, kept in the row's
#: warnings and so in every saved file, is that decision: a speedup or ratio on such a net
#: divides by noise (KernelResult.net_above_zero).
NET_NOT_ABOVE_ZERO_NOTES = ("net time <= 0", "net time not clearly above 0")

#: A peer's row's cc (its flags are measure.runner.PEER_FLAGS): no compiler builds a peer.
PEER_CC = "python"


class RowKey(NamedTuple):
    """What identifies a row of a run (KernelResult.key): the gate pairs two runs' rows by it.

    An --against run holds two rows of each key, told apart by KernelResult.side."""

    kernel: str
    cc: str
    flags: str
    mode: str
    threads: int = 1

    def with_kernel(self, kernel: str) -> RowKey:
        """The same row (build, mode, threads) of another kernel: e.g. the reference's."""
        return self._replace(kernel=kernel)


@dataclass(frozen=True)
class KernelResult:
    kernel: str
    family: str
    flags: str
    cc: str
    mode: str
    status: str  # ok | skipped | crashed | timed-out | build-failed (its --flags set did not compile or link)
    reason: str | None = None
    hits: int | None = None  # the first round's count
    #: The other counts its rounds returned, where they were not all `hits` (sorted): a kernel
    #: right in the first round and wrong after is judged on every count (compare/answers.py).
    hits_seen: list[int] = field(default_factory=list)
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
    speedup: float | None = None  # the reference kernel's time / this one's (see speedup_basis), same build and mode
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
    index_scatter: str | None = None  # how its index build wrote the points (plain, write-combined)
    #: Bytes each block of shapes reads again (measure/validity.working_set): what is compared with L2.
    working_set_bytes: int | None = None
    #: False where net = gross - NoOperation does not measure the kernel (measure/validity.judge),
    #: with the reason in `validity`; None where nothing was subtracted or it was not judged.
    net_valid: bool | None = None
    validity: str | None = None
    speedup_basis: str | None = None  # "net", or "gross" where any row of the run has net_valid False
    speedup_reference: str | None = None  # the kernel the speedup is relative to
    #: The count loop's machine code for this row's mode, normalised (native/code_identity.py):
    #: equal in two runs, the kernel ran the same instructions on the same constants.
    code_sha256: str | None = None
    #: Everything of the kernel's build but the compiler: its row's C file, the headers and
    #: the flags.  Equal while code_sha256 differs: the toolchain changed the code.
    source_sha256: str | None = None
    #: run --against: which side of the A/B comparison the row belongs to, "base" or "head".
    side: str | None = None
    #: --metric instructions: valgrind's count over one pass of the loop, and of its NoOperation twin.
    instructions: int | None = None
    overhead_instructions: int | None = None
    instructions_tests: int | None = None  # the tests they were counted over (a share of a large scene)
    instructions_reason: str | None = None  # why there is no count (valgrind missing, AVX-512, ...)
    #: How the kernel left the worker's FP environment (restored before every other kernel), if it changed it.
    fp_environment_change: str | None = None
    #: Where the row's count lies further from the run's yardstick than rounding allows
    #: (compare/answers.py): the row's count minus the yardstick's, and the sentence saying so.
    #: Such a row is never ranked (no speedup shown, never the fastest build).  None: it does not.
    answers_differ: int | None = None
    answers_note: str | None = None

    @property
    def net_above_zero(self) -> bool:
        """Whether the row's net time is clearly above 0: timing gave it no note saying otherwise
        (NET_NOT_ABOVE_ZERO_NOTES).  A row nothing was subtracted from has no such note."""
        return not any(warning.startswith(NET_NOT_ABOVE_ZERO_NOTES) for warning in self.warnings)

    @property
    def percent_of_bound(self) -> float | None:
        """bound / measured gross cycles per test, as a percentage (100 = at the bound)."""
        if self.bound_cycles_per_test and self.cycles_per_test:
            return 100 * self.bound_cycles_per_test / self.cycles_per_test
        return None

    @property
    def net_instructions_per_test(self) -> float | None:
        """Instructions a test adds to its loop (valgrind's counts, NoOperation subtracted)."""
        if self.instructions is None or self.overhead_instructions is None or not self.instructions_tests:
            return None
        return (self.instructions - self.overhead_instructions) / self.instructions_tests

    @property
    def key(self) -> RowKey:
        return RowKey(self.kernel, self.cc, self.flags, self.mode, self.threads)


def shows_cc(keys) -> bool:
    """Whether labels must name the compiler: the C rows (not the peers', which have none)
    come from more than one."""
    return len({key.cc for key in keys if key.cc != PEER_CC}) > 1


@dataclass(frozen=True)
class RunResult:
    scene: dict
    env: dict
    config: dict
    results: list[KernelResult]
    #: The exact oracle's count over the scene, where the family can produce it cheaply
    #: (Family.exact_count): what rows' hits are judged against.  None: not computed.
    exact_count: int | None = None
    #: How far each kernel's count may lie from the exact count by float32 rounding alone: the
    #: scene's pairs in its rounding band (Family.count_allowance), counted over every pair, or
    #: estimated from count_allowance_sample pairs.  None: the family bounds no such difference.
    count_allowance: dict[str, int] | None = None
    count_allowance_sample: int | None = None
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


#: KernelResult.side of an A/B run's rows (run --against): the code compared against, and the code now.
BASE_SIDE, HEAD_SIDE = "base", "head"


def head_rows(result: RunResult, name: str) -> tuple[RunResult, str | None]:
    """An A/B run's head rows as a plain run (the code as it was measured then: what a later
    gate compares with, and what a dashboard tracks), with a line saying so; any other run as
    it is, with None.  Its base rows are the code it was compared against, in the same run.
    The rows lose their side: a plain run's rows, they go on the series of the runs before
    and after it (a trend drew them as a series of their own, "· head")."""
    if not any(row.side for row in result.results):
        return result, None
    head = replace(result, results=[replace(row, side=None) for row in result.results if row.side == HEAD_SIDE])
    return head, f"{name}: an A/B run (run --against): its head rows are taken, its base rows left out"


def save(result: RunResult, path: Path, overwrite: bool = False) -> Path:
    """Write `result` as JSON atomically (temporary file, then rename).

    An existing file is never replaced unless `overwrite` is set.
    """
    return write_text_atomic(Path(path), json.dumps(result.to_dict(), indent=1) + "\n", overwrite)


def write_text_atomic(path: Path, text: str, overwrite: bool = False) -> Path:
    return write_atomic(path, text_writer(text), overwrite)


def text_writer(text: str) -> Callable[[BinaryIO], object]:
    return lambda stream: stream.write(text.encode())


class WriteFailed(SectorbenchError):
    """write_atomic could not write `path`; `write` writes what it would have held, so that
    the caller can leave a rescue copy (see write_rescue) instead of losing it."""

    def __init__(self, message: str, path: Path, write: Callable[[BinaryIO], object]):
        super().__init__(message)
        self.path, self.write = Path(path), write


def write_atomic(path: Path, write: Callable[[BinaryIO], object], overwrite: bool = False) -> Path:
    """Write a file through a temporary name in the same directory, then rename.

    Readers never see a half-written file.  Only a regular file is ever replaced, and only
    with `overwrite` (otherwise a hard link claims the name, which fails if it exists, even
    if the file appeared while we were writing); a replaced file keeps its permission
    bits, a new one gets 0666 less the umask, as any program's new file does.  A symbolic
    link is written through: its target is what gets replaced.  Any failure is a
    WriteFailed, carrying `write` for a rescue copy.
    """
    try:
        return _write_atomic(Path(path), write, overwrite)
    except SectorbenchError as exc:
        raise WriteFailed(str(exc), path, write) from None


#: The running command's inputs (guard_command_files): an output is checked against them before
#: the command's work and, here, again just before it is renamed into place, so an output swapped
#: for a link to an input while the command ran does not replace that input.
_inputs: contextvars.ContextVar[tuple[Path, ...]] = contextvars.ContextVar("inputs", default=())
#: Each named output's real path (links followed) when the command checked it: an output that
#: leads elsewhere when written (a link put in its place meanwhile) is not written there.
_output_targets: contextvars.ContextVar[dict[str, str] | None] = contextvars.ContextVar("output_targets", default=None)


def guard_command_files(inputs, outputs=()) -> None:
    """From now on, write_atomic never replaces one of `inputs`, and writes each of `outputs`
    only where it leads now."""
    _inputs.set(tuple(Path(p) for p in inputs if p is not None))
    _output_targets.set({os.path.abspath(p): os.path.realpath(p) for p in outputs if p is not None})


def guard_more_inputs(inputs, what: str) -> None:
    """`inputs` are the running command's too (the files its sources include, known once they
    are preprocessed): an output already named that is one of them is refused now, before any
    work, and write_atomic never replaces one.  `what` says what they are."""
    inputs = tuple(Path(p) for p in inputs)
    for output, target in (_output_targets.get() or {}).items():
        for source in inputs:
            if same_file(output, source):
                also = "" if target == os.path.realpath(source) == output else f" ({source})"
                raise SectorbenchError(
                    f"{shortened_path(output)} is {what}{also}: outputs never replace inputs, even with --force"
                )
    _inputs.set((*_inputs.get(), *inputs))


def _refuse_inputs(path: Path) -> None:
    for source in _inputs.get():
        if same_file(path, source):
            raise SectorbenchError(f"{path} is now the same file as the input {source}: outputs never replace inputs")


def _refuse_redirected(path: Path) -> None:
    checked = (_output_targets.get() or {}).get(os.path.abspath(path))
    if checked is not None and os.path.realpath(path) != checked:
        raise SectorbenchError(
            f"{path} now leads to {os.path.realpath(path)}, not to {checked} as when the command began: "
            "a file the command was not named is never replaced"
        )


def _write_atomic(path: Path, write: Callable[[BinaryIO], object], overwrite: bool) -> Path:
    _refuse_redirected(path)
    named, path = path, check_output(path, overwrite, create_dir=True)
    created = not path.parent.exists()  # --save's results/: gone again if nothing is written into it
    try:
        path.parent.mkdir(parents=True, exist_ok=True)
        _remove_abandoned_partials(path)
        fd, partial = tempfile.mkstemp(prefix=_partial_prefix(path.name), suffix=PARTIAL_SUFFIX, dir=path.parent)
        fcntl.flock(fd, fcntl.LOCK_EX)  # held while it is written: see _remove_abandoned_partials
    except OSError as exc:
        raise SectorbenchError(f"{path}: cannot write ({exc.strerror or exc})") from None
    try:
        with os.fdopen(fd, "wb") as stream:
            write(stream)
            stream.flush()
            existing = _regular_or_none(path, overwrite)
            os.fchmod(stream.fileno(), stat.S_IMODE(existing.st_mode) if existing else 0o666 & ~_umask())
            os.fsync(stream.fileno())
        _refuse_inputs(path)
        _refuse_redirected(named)  # and again at the last moment: the write took time
        if overwrite:
            _regular_or_none(path, overwrite)  # what sits there now, just before the rename
            os.replace(partial, path)
        else:
            os.link(partial, path)
            os.unlink(partial)
    except FileExistsError:
        os.unlink(partial)
        raise SectorbenchError(f"{path} exists; choose another path or pass --force to replace it") from None
    except OSError as exc:  # the disk filled up, the directory went away, ...
        _discard(partial, path.parent if created else None)
        raise SectorbenchError(f"{path}: cannot write ({exc.strerror or exc})") from None
    except BaseException:
        _discard(partial, path.parent if created else None)
        raise
    return path


def _discard(partial: str, created: Path | None) -> None:
    """The half-written file, and the folder the write created for it if nothing else is in it
    (an interrupted --save had left an empty results/)."""
    if os.path.exists(partial):
        os.unlink(partial)
    if created is not None:
        with contextlib.suppress(OSError):  # not empty, or gone: left as it is
            created.rmdir()


#: The end of an output's temporary name, ".NAME.XXXXXXXX.sectorbench-partial": one a killed
#: command left is told from any file of the user's by it (and by its lock, which no process holds).
PARTIAL_SUFFIX = ".sectorbench-partial"


def _remove_abandoned_partials(path: Path) -> None:
    """An output's temporary files that a command killed with SIGKILL left beside it (a CI job's
    timeout while `query --out` wrote 370 MB): removed by the next write of the same output."""
    prefix = _partial_prefix(path.name)
    whole = len(prefix) + 8 + len(PARTIAL_SUFFIX)  # mkstemp's 8 random characters between

    def lock_of(entry: os.DirEntry) -> Path | None:  # a partial file is its own lock
        name = entry.name
        ours = name.startswith(prefix) and name.endswith(PARTIAL_SUFFIX) and len(name) == whole
        return Path(entry.path) if ours else None

    remove_abandoned(path.parent, lock_of, is_dir=False)


def _partial_prefix(name: str) -> str:
    """The temporary name's start: ".NAME.", cut short where NAME with it, mkstemp's 8 random
    characters and PARTIAL_SUFFIX would pass NAME_MAX_BYTES (a 250-byte name was checked, the
    work done, and then its temporary name was too long)."""
    budget = NAME_MAX_BYTES - len("..") - 8 - len(PARTIAL_SUFFIX)
    while len(os.fsencode(name)) > budget:  # cut by characters: a UTF-8 one is never split
        name = name[:-1]
    return f".{name}."


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
    if _mount_point(path):
        raise SectorbenchError(
            f"{path} is a mount point (a file bound there): the rename that writes every output cannot "
            "replace it; bind its directory instead, or write elsewhere"
        )
    if not overwrite:
        raise SectorbenchError(f"{path} exists; choose another path or pass --force to replace it")
    return info


#: This process's mounts.  A file can be a mount point (a single file bound there, as
#: `docker run -v $PWD/out.json:/work/out.json` makes) and a rename onto it fails (EBUSY), so an
#: output there failed only after the work, its results rescued inside the container.
#: os.path.ismount cannot tell: a bind within one filesystem keeps the device and inode.
MOUNT_TABLE = "/proc/self/mountinfo"


def _mount_point(path: Path) -> bool:
    """`path` (links followed) is a mount point; False where the mount table cannot be read."""
    try:
        with open(MOUNT_TABLE, "rb") as stream:
            table = stream.read()
    except OSError:
        return False
    target = os.fsencode(os.path.realpath(path))
    for line in table.splitlines():
        fields = line.split(b" ")  # the fifth is the mount point, with space, tab, newline and \ as \ooo
        if len(fields) > 4 and re.sub(rb"\\([0-7]{3})", lambda m: bytes([int(m[1], 8)]), fields[4]) == target:
            return True
    return False


def check_output(path: Path, overwrite: bool, create_dir: bool = False) -> Path:
    """Refuse, before any work, an output path the final write would refuse or fail on.

    What exists there must be a regular file, and `overwrite` set; its directory must
    exist (or, with `create_dir`, be creatable) and take a new file, which is tried: a
    temporary file is made and removed there.  Returns the path to write: a symbolic
    link's target.
    """
    named = path = Path(path)
    try:
        _refuse_planted_links(path)
        if path.is_symlink():
            path = Path(os.path.realpath(path))
        existing = _regular_or_none(path, overwrite)
        check_directory(path.parent, create=create_dir, what=f"{path}: ")
        if existing is not None:
            _refuse_sticky(path, existing)
    except OSError as exc:  # pathlib's lstat and stat raise what they do not take for "absent"
        if exc.errno == errno.ENAMETOOLONG:
            raise SectorbenchError(name_too_long(named)) from None
        raise SectorbenchError(f"{named}: cannot write here ({exc.strerror or exc})") from None
    return path


#: Symbolic links followed on one output's path at most (the system's own limit, ELOOP past it).
MAX_LINKS_FOLLOWED = 40


def _refuse_planted_links(path: Path) -> None:
    """Refuse a path that leads through another user's symbolic link in a sticky world-writable
    directory (/tmp), as Linux does (fs.protected_symlinks) unless the link is the follower's or
    the directory owner's.  sectorbench resolves an output's links itself and writes their target
    (os.path.realpath): a link another user planted at /tmp/out.json, leading to /root/.profile
    or to a file not there yet, had root's `--json /tmp/out.json` write there, the system's
    protection bypassed."""
    done, todo, followed = Path("/"), list(Path(os.path.abspath(path)).parts[1:]), 0
    while todo and followed <= MAX_LINKS_FOLLOWED:
        part = todo.pop(0)
        if part == "..":
            done = done.parent
            continue
        here = done / part
        try:
            link = os.lstat(here)
        except OSError:  # not there: nothing further on the path is either
            return
        if not stat.S_ISLNK(link.st_mode):
            done = here
            continue
        folder = os.stat(done)
        sticky_and_open = folder.st_mode & stat.S_ISVTX and folder.st_mode & stat.S_IWOTH
        if sticky_and_open and link.st_uid not in (os.geteuid(), folder.st_uid):
            raise SectorbenchError(
                f"{shortened_path(here)} is another user's symbolic link in a sticky directory "
                f"({shortened_path(done)}): sectorbench does not write through it, as Linux's fs.protected_symlinks "
                "does not; choose another path"
            )
        target = Path(os.readlink(here))
        done = Path("/") if target.is_absolute() else done
        todo[:0] = [part for part in target.parts if part not in ("/", ".", "")]
        followed += 1


def _refuse_sticky(path: Path, existing: os.stat_result) -> None:
    """In a sticky directory (/tmp) only a file's owner, the directory's or root may rename over
    it: `--json /tmp/out.json --force`, out.json another user's, failed (EPERM) after the work."""
    folder = os.stat(path.parent)
    if folder.st_mode & stat.S_ISVTX and os.geteuid() not in (0, existing.st_uid, folder.st_uid):
        raise SectorbenchError(
            f"{path} belongs to another user, in a sticky directory ({path.parent}) where only its owner "
            "may replace it, even with --force: choose another path"
        )


def refuse_directory_spelling(text: str) -> None:
    """SectorbenchError for an output path spelt as a directory ("newdir/", "out/.", ".."):
    pathlib drops the trailing "/" or "/.", and `--out newdir/` wrote a file named newdir."""
    text = os.fsdecode(text)
    if os.path.basename(text) in ("", ".", ".."):
        raise SectorbenchError(f"{shortened_path(text)} names a directory: give the file to write in it")


#: The longest name (one part of a path) most filesystems take (NAME_MAX), and the longest path
#: Linux takes in one call (PATH_MAX, with its final NUL): past either a call fails, ENAMETOOLONG.
NAME_MAX_BYTES, PATH_MAX_BYTES = 255, 4096


def name_too_long(path) -> str:
    """The line for a path the system refused as too long (ENAMETOOLONG), which says which is."""
    longest = max((len(os.fsencode(part)) for part in Path(path).parts), default=0)
    if longest > NAME_MAX_BYTES:
        why = f"a name in it is {longest:,} bytes, most filesystems take {NAME_MAX_BYTES}"
    else:
        why = f"it is {len(os.fsencode(path)):,} bytes, Linux takes {PATH_MAX_BYTES - 1:,}"
    return f"{shortened_path(path)}: the name is too long ({why})"


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


#: A rescue file's name: results that could not be written where asked go to a new file
#: like this (with the failed output's suffix when it holds that output's own content),
#: beside the intended output, else in the temporary directory.
RESCUE_PREFIX, RESCUE_SUFFIX = "rescued-results-", ".json"


def write_rescue(write: Callable[[BinaryIO], object], near: Path | None, suffix: str = RESCUE_SUFFIX) -> Path:
    """Write with `write` (as write_atomic's) to a new rescue file (see RESCUE_PREFIX); its
    path, or SectorbenchError if neither the output's directory nor the temporary directory takes it."""
    places = [Path(near).parent] if near is not None else []
    failures = []
    for directory in [*places, Path(tempfile.gettempdir())]:
        try:
            fd, rescue = tempfile.mkstemp(prefix=RESCUE_PREFIX, suffix=suffix, dir=directory)
        except OSError as exc:
            failures.append(f"{directory}: {exc.strerror or exc}")
            continue
        try:
            with os.fdopen(fd, "wb") as stream:
                write(stream)
                stream.flush()
                os.fsync(stream.fileno())
            return Path(rescue)
        except OSError as exc:
            failures.append(f"{directory}: {exc.strerror or exc}")
            os.unlink(rescue)
        except BaseException:  # a signal cut the write: no half-written rescue file, which no line names
            with contextlib.suppress(OSError):
                os.unlink(rescue)
            raise
    raise SectorbenchError(f"no rescue file could be written either ({'; '.join(failures)})")


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


def regular_file(path: Path, what: str = "") -> os.stat_result:
    """The stat of the regular file at `path` (links followed); SectorbenchError for
    anything else (a FIFO, a device, a directory), decided without opening it."""
    try:
        info = os.stat(path)
    except FileNotFoundError:
        raise SectorbenchError(f"{what}{path}: no such file") from None
    except OSError as exc:
        raise SectorbenchError(f"{what}{path}: cannot read ({exc.strerror})") from None
    if not stat.S_ISREG(info.st_mode):
        kind = next((name for test, name in _KINDS if test(info.st_mode)), "not a regular file")
        raise SectorbenchError(f"{what}{path} is {kind}: sectorbench reads only regular files")
    return info


def read_input(path: Path, max_bytes: int, what: str = "") -> bytes:
    """The bytes of a regular file of at most `max_bytes`; SectorbenchError otherwise.

    Opened non-blocking (a FIFO swapped in after the stat cannot hang the open) and
    checked again on the open descriptor; at most max_bytes + 1 bytes are ever read.
    """
    regular_file(path, what)
    try:
        fd = os.open(path, os.O_RDONLY | os.O_NONBLOCK | getattr(os, "O_CLOEXEC", 0))
    except OSError as exc:
        raise SectorbenchError(f"{what}{path}: cannot read ({exc.strerror})") from None
    with os.fdopen(fd, "rb") as stream:
        info = os.fstat(fd)
        if not stat.S_ISREG(info.st_mode):
            raise SectorbenchError(f"{what}{path} is not a regular file: sectorbench reads only regular files")
        if info.st_size > max_bytes:
            raise SectorbenchError(f"{what}{path} is {info.st_size:,} bytes, more than the {max_bytes:,} allowed")
        try:
            data = stream.read(max_bytes + 1)
        except OSError as exc:
            raise SectorbenchError(f"{what}{path}: cannot read ({exc.strerror})") from None
    if len(data) > max_bytes:
        raise SectorbenchError(f"{what}{path} is more than the {max_bytes:,} bytes allowed")
    return data


def same_file(a: Path, b: Path) -> bool:
    """a and b are one file (the same inode: through symbolic and hard links); False if either is absent."""
    try:
        return os.path.samestat(os.stat(a), os.stat(b))
    except OSError:
        return False


def parse_result(data, path) -> RunResult:
    """A parsed result document checked against the schema (model/schema.py), as a RunResult."""
    from .schema import check_run

    if isinstance(data, dict) and data.get("kind") == "verify":  # its own output, not "not a result"
        raise SectorbenchError(f"{path}: a verify result (verify --json): give a run's or compare's --json")
    if isinstance(data, dict) and "results" not in data:
        raise SectorbenchError(f"{path}: not a sectorbench result (no 'results')")
    if isinstance(data, dict) and data.get("schema") not in READABLE_SCHEMAS:
        try:
            return RunResult.from_dict(data)  # its one-line message names the versions read
        except SectorbenchError as exc:
            raise SectorbenchError(f"{path}: {exc}") from None
    try:
        check_run(data)
    except SectorbenchError as exc:
        raise SectorbenchError(f"{path}: not a valid sectorbench result: {exc}") from None
    return RunResult.from_dict(data)


def load(path: Path) -> RunResult:
    """A result file, read (a regular file within MAX_RESULT_BYTES) and checked as a whole."""
    raw = read_input(Path(path), MAX_RESULT_BYTES)
    try:
        data = json.loads(raw.decode("utf-8"))
    except UnicodeDecodeError as exc:
        raise SectorbenchError(f"{path}: not a sectorbench result (not UTF-8 text: byte {exc.start})") from None
    except (json.JSONDecodeError, RecursionError) as exc:
        message = str(exc) if isinstance(exc, json.JSONDecodeError) else "nested too deeply"
        raise SectorbenchError(f"{path}: not a sectorbench result ({message})") from None
    return parse_result(data, path)
