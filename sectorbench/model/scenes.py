"""Seeded scenes: N shapes x M points as aligned, padded float32 structure-of-arrays.

Which arrays a shape and a point have, and which scene kinds exist, is up to the
families (`sectorbench.families`); this module holds what every scene shares.  Every
scene is reproducible bit for bit from (kind, n, m, seed): generators use numpy's PCG64
streams and IEEE-exact float32/float64 arithmetic only (each family's generator says
where it uses anything else).
"""

from __future__ import annotations

import errno
import fcntl
import hashlib
import mmap
import os
from collections.abc import Mapping
from dataclasses import dataclass, field
from types import MappingProxyType

import numpy as np

from ..errors import SectorbenchError

#: Arrays are padded to a multiple of the widest vector (AVX-512: 16 float32).
PAD_FLOATS = 16
ALIGN_BYTES = 64
#: Arrays per shape the size check assumes when it cannot ask the family.
MAX_SHAPE_ARRAYS = 8
#: Most points a scene may have: the count loops add one block's hits (up to 8 shapes
#: times M) in a 32-bit counter, which keeps compiler-vectorised loops at full width.
MAX_POINTS = 2**28


@dataclass(frozen=True)
class Scene:
    """N shapes and M points; every array is read-only, 64-byte aligned, `stride` long.

    Pad elements are NaN, so no comparison on them is true; SIMD kernels also mask
    the lanes past M, so padding can never count as a hit.
    """

    kind: str
    family: str
    seed: int | None
    n_shapes: int
    n_points: int
    arrays: Mapping[str, np.ndarray] = field(repr=False)
    point_arrays: tuple[str, ...] = ("px", "py")
    #: "grid": every shape against every point; "pairs": shape j against point j.
    layout: str = "grid"
    #: The family's name for its shapes ("sectors"): the key of N in describe().
    shape_noun: str = "shapes"
    #: The family's extra arrays (Family.extra_arrays): data of other lengths or types.
    extra: Mapping[str, np.ndarray] = field(default_factory=dict, repr=False)
    #: The generator's options as used, defaults filled in (e.g. a game's world and radii).
    options: Mapping[str, float] = field(default_factory=dict)

    @property
    def stride(self) -> int:
        return padded_length(max(self.n_points, self.n_shapes if self.layout == "pairs" else 0))

    @property
    def tests(self) -> int:
        return self.n_points if self.layout == "pairs" else self.n_shapes * self.n_points

    def column(self, name: str) -> np.ndarray:
        """The unpadded values of one array."""
        length = self.n_points if name in self.point_arrays or self.layout == "pairs" else self.n_shapes
        return self.arrays[name][:length]

    def digest(self) -> str:
        """SHA-256 of the scene's identity and unpadded values (for reproducibility checks)."""
        sha = hashlib.sha256(f"{self.kind}|{self.family}|{self.layout}|{self.n_shapes}|{self.n_points}".encode())
        for name in sorted(self.arrays):
            sha.update(name.encode())
            sha.update(self.column(name).tobytes())
        for name in sorted(self.extra):
            sha.update(f"extra {name}".encode())
            sha.update(np.ascontiguousarray(self.extra[name]).tobytes())
        return sha.hexdigest()

    def describe(self) -> dict:
        return {
            "kind": self.kind,
            "family": self.family,
            "seed": self.seed,
            self.shape_noun: self.n_shapes,
            "points": self.n_points,
            **({"options": dict(self.options)} if self.options else {}),
        }


def padded_length(n: int) -> int:
    return max(PAD_FLOATS, -(-n // PAD_FLOATS) * PAD_FLOATS)


def aligned_array(values: np.ndarray, length: int) -> np.ndarray:
    """A read-only float32 copy of `values`, 64-byte aligned, NaN-padded to `length`."""
    array = np.full(length, np.nan, dtype=np.float32)
    array[: len(values)] = values
    return read_only_copy(array)


#: The name of the scene pages' memfd: how the worker finds their mappings in /proc/self/maps
#: (measure/process_state.py), so that a kernel that unmaps or PROT_NONEs them is charged for it.
SCENE_MEMFD = "sectorbench-scene"


def read_only_copy(array: np.ndarray) -> np.ndarray:
    """`array` copied into pages mapped read-only (page-aligned, so 64-byte aligned too).

    A C kernel gets the scene through `const` pointers, which C lets it cast away: one that
    wrote into its input (an aabr kernel rotating its polygon in place) changed the scene
    of every kernel after it in the worker, and they all failed verify.  In pages no one
    can write, the write is a segmentation fault of that kernel's row alone.  (Without
    memfd_create, not Linux, the copy is only read-only to numpy.)"""
    if not hasattr(os, "memfd_create"):
        buffer = np.empty(array.nbytes + ALIGN_BYTES, dtype=np.uint8)
        offset = (-buffer.ctypes.data) % ALIGN_BYTES
        copy = buffer[offset : offset + array.nbytes].view(array.dtype)
        copy[:] = array
        copy.flags.writeable = False
        return copy
    size = max(array.nbytes, 1)
    try:
        descriptor = os.memfd_create(SCENE_MEMFD, os.MFD_CLOEXEC | os.MFD_ALLOW_SEALING)
        try:
            os.ftruncate(descriptor, size)
            with mmap.mmap(descriptor, size) as writable:
                writable[: array.nbytes] = np.ascontiguousarray(array).data.cast("B")
            _seal(descriptor)
            pages = mmap.mmap(descriptor, size, prot=mmap.PROT_READ)
        finally:
            os.close(descriptor)
    except OSError as exc:  # the machine's limits (a file-size limit counts a memory file too: ulimit -f)
        limit = _LIMIT_OF.get(exc.errno)
        raise SectorbenchError(
            f"cannot hold a scene column ({array.nbytes:,} bytes) in a memory file: {exc.strerror or exc}"
            + (f" ({limit})" if limit else "")
        ) from None
    return np.frombuffer(pages, dtype=array.dtype, count=array.size)


#: The limit behind an errno a memory file can meet, as a shell sets it.
_LIMIT_OF = {errno.EMFILE: "ulimit -n", errno.EFBIG: "ulimit -f"}

#: linux/fcntl.h's F_SEAL_FUTURE_WRITE (Linux 5.1), which Python's fcntl does not name.
F_SEAL_FUTURE_WRITE = 0x0010


def _seal(descriptor: int) -> None:
    """No write to the file from now on, by any descriptor or mapping: a kernel that
    mprotect()s the read-only pages back to writable gets EACCES, as one reopening the memfd
    through /proc gets EPERM.  Before Linux 6.7 only the future-write seal took the right to
    write from a read-only shared mapping, and before 5.1 no seal did (the pages stay
    PROT_READ)."""
    seals = fcntl.F_SEAL_WRITE | fcntl.F_SEAL_SHRINK | fcntl.F_SEAL_GROW
    try:
        fcntl.fcntl(descriptor, fcntl.F_ADD_SEALS, seals | F_SEAL_FUTURE_WRITE | fcntl.F_SEAL_SEAL)
    except OSError:  # EINVAL: a kernel before 5.1
        fcntl.fcntl(descriptor, fcntl.F_ADD_SEALS, seals | fcntl.F_SEAL_SEAL)


@dataclass(frozen=True)
class SceneArrays:
    """What a family's scenes hold (Family.scene_arrays): the arrays a shape and a point have,
    its extra arrays (name -> numpy dtype) and the noun of its shapes."""

    family: str
    shape_arrays: tuple[str, ...]
    point_arrays: tuple[str, ...]
    extra_arrays: Mapping[str, type]
    shape_noun: str


def build_scene(
    kind: str,
    owner: SceneArrays,
    columns: Mapping[str, np.ndarray],
    seed: int | None = None,
    layout: str = "grid",
    extra: Mapping[str, np.ndarray] | None = None,
    options: Mapping[str, float] | None = None,
) -> Scene:
    """Wrap a family's float32 columns (shape and point arrays) in an aligned, padded Scene,
    with its extra arrays as 64-byte aligned read-only copies.  (families.make_scene finds
    `owner` by the family's name.)"""
    family = owner.family
    missing = [name for name in (*owner.shape_arrays, *owner.point_arrays) if name not in columns]
    if missing:
        raise SectorbenchError(f"{family} scene lacks arrays: {', '.join(missing)}")
    n_shapes = len(columns[owner.shape_arrays[0]])
    n_points = len(columns[owner.point_arrays[0]])
    if layout == "pairs" and n_shapes != n_points:
        raise SectorbenchError(f"pairs need as many shapes as points ({n_shapes} != {n_points})")
    length = padded_length(max(n_points, n_shapes if layout == "pairs" else 0))
    shape_length = length if layout == "pairs" else padded_length(n_shapes)
    arrays = {
        name: aligned_array(np.asarray(columns[name], dtype=np.float32), shape_length) for name in owner.shape_arrays
    }
    arrays.update(
        {name: aligned_array(np.asarray(columns[name], dtype=np.float32), length) for name in owner.point_arrays}
    )
    extra = extra or {}
    missing = [name for name in owner.extra_arrays if name not in extra]
    if missing:
        raise SectorbenchError(f"{family} scene lacks extra arrays: {', '.join(missing)}")
    extras = {name: aligned_extra(extra[name], dtype) for name, dtype in owner.extra_arrays.items()}
    return Scene(
        kind,
        family,
        seed,
        n_shapes,
        n_points,
        MappingProxyType(arrays),
        owner.point_arrays,
        layout,
        owner.shape_noun,
        MappingProxyType(extras),
        MappingProxyType(dict(options or {})),
    )


def aligned_extra(values: np.ndarray, dtype) -> np.ndarray:
    """A read-only, 64-byte aligned copy of an extra array, zero-padded by PAD_FLOATS elements."""
    values = np.asarray(values, dtype=dtype)
    array = np.zeros(len(values) + PAD_FLOATS, dtype=dtype)
    array[: len(values)] = values
    return read_only_copy(array)[: len(values)]


#: A command's peak memory for each element of a scene's shape and of its point arrays: 3 to 5
#: float32 copies (the float64 draws, the column, its read-only aligned copy, the workers'
#: copy, query's index).  Counting 4 bytes an element (the arrays alone) let `run -n 268435456`
#: through, to fail with MemoryError.  Measured at commit 4ea0e1d (a process tree's summed Pss
#: sampled every 20 ms; `/usr/bin/time -v`'s Maximum resident set size agrees within 10 %),
#: from two sizes each, per shape of the sector family's 8 arrays and per point of its 2:
#:   run -n 2e6|4e6|8e6 -m 2 --repeat 1 --flags -O2 --kernels basic       68 B a shape (446, 583, 851 MB)
#:   run -n 1 -m 4e6|8e6 --repeat 1 --flags -O2 --kernels basic           20 B a point (393, 471 MB)
#:   run --scene triangles -n 2e6|4e6 -m 2 ... --kernels orient           50 B a triangle, 6 arrays (392, 493 MB)
#:   query --scene uniform -n 2e6|4e6 -m 10 --out q.npz                  105 B a shape (301, 511 MB)
#:   query --scene uniform -n 10 -m 5e6|1e7 --out q.npz                   37 B a point (262, 448 MB)
#: so at most 14 B a shape array's element (112 B a sector) and 20 B a point array's (40 B a
#: point), with PEAK_BASE_BYTES beside (run -n 1e6 -m 2: 328 MB, of which 68 MB the sectors).
PEAK_BYTES_PER_SHAPE_ELEMENT = 14
PEAK_BYTES_PER_POINT_ELEMENT = 20
PEAK_BASE_BYTES = 300 * 2**20


def check_size(
    n: int, m: int, shape_arrays: int = MAX_SHAPE_ARRAYS, point_arrays: int = 2, extra_bytes: int = 0
) -> None:
    """Reject sizes that are not positive or whose command would not fit in memory: its peak
    (PEAK_BYTES_PER_SHAPE_ELEMENT and _POINT_, and `extra_bytes` for the family's extra arrays, e.g. polygon
    vertices) within half the machine's memory and within this process's address-space limit
    (`ulimit -v`)."""
    if n <= 0 or m <= 0:
        raise SectorbenchError(f"-n/--shapes and -m/--points must be positive (got N={n}, M={m})")
    if m > MAX_POINTS:
        raise SectorbenchError(f"--points is at most {MAX_POINTS} (2^28) per scene (got M={m})")
    needed = (
        PEAK_BASE_BYTES
        + PEAK_BYTES_PER_SHAPE_ELEMENT * shape_arrays * padded_length(n)
        + PEAK_BYTES_PER_POINT_ELEMENT * point_arrays * padded_length(m)
        + extra_bytes
    )
    available = physical_memory_bytes()
    if available and needed > available // 2:
        raise SectorbenchError(
            f"a scene of N={n:,} x M={m:,} needs about {_amounts(needed, available // 2)[0]} of memory at its "
            f"peak, more than half of this machine's {available / 2**30:.1f} GiB: use a smaller -n/-m"
        )
    limit = address_space_limit()
    if limit is not None and PEAK_BASE_BYTES > limit:
        # The sizes are not the cause: `run -n 1 -m 1` and verify (which has no -n/-m) were
        # told that "a scene of N=1 x M=1 needs about 0.3 GiB" and to "use a smaller -n/-m".
        raise SectorbenchError(
            f"sectorbench needs about {PEAK_BASE_BYTES >> 20} MiB of memory whatever the scene's size, "
            f"more than this process may use ({limit >> 20} MiB, ulimit -v {limit >> 10}): raise ulimit -v"
        )
    if limit is not None and needed > limit:
        raise SectorbenchError(
            f"a scene of N={n:,} x M={m:,} needs about {_amounts(needed, limit)[0]} of memory at its peak, "
            f"more than this process may use ({_amounts(needed, limit)[1]}, ulimit -v): use a smaller -n/-m"
        )


def _amounts(needed: int, allowed: int) -> tuple[str, str]:
    """Two amounts of memory, in GiB to a tenth unless that shows them equal ("needs about 0.4
    GiB ... (0.4 GiB, ulimit -v)"), then in MiB."""
    if f"{needed / 2**30:.1f}" != f"{allowed / 2**30:.1f}":
        return f"{needed / 2**30:.1f} GiB", f"{allowed / 2**30:.1f} GiB"
    return f"{-(-needed >> 20):,} MiB", f"{allowed >> 20:,} MiB"


def address_space_limit() -> int | None:
    """This process's address-space limit (RLIMIT_AS, the shell's `ulimit -v`); None: none."""
    try:
        import resource

        limit = resource.getrlimit(resource.RLIMIT_AS)[0]
    except (ImportError, OSError, ValueError):
        return None
    return None if limit == resource.RLIM_INFINITY else limit


def physical_memory_bytes() -> int | None:
    try:
        return os.sysconf("SC_PHYS_PAGES") * os.sysconf("SC_PAGE_SIZE")
    except (ValueError, OSError, AttributeError):
        return None


def streams(seed: int) -> tuple[np.random.Generator, np.random.Generator]:
    """Independent streams for shapes and points, so changing N keeps the points."""
    shapes, points = np.random.SeedSequence(seed).spawn(2)
    return np.random.Generator(np.random.PCG64(shapes)), np.random.Generator(np.random.PCG64(points))
