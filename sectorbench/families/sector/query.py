"""The query API: which points lie in which sectors, in this process (sectorbench.query)."""

from __future__ import annotations

import contextlib
import ctypes
import ctypes.util
import dataclasses
import functools
import logging
import platform
import threading
import time
from collections.abc import Mapping
from pathlib import Path

import numpy as np

from ...native.build import BuildConfig, build, library_path
from ...native.loader import interface
from . import UNIT_TOLERANCE
from .broadphase import BROADPHASES, FASTEST, ISA_CODES, ISA_NAMES, Engine, Hits, OverLimit

#: The library query loads into the caller's process: plain -O2, never fast-math (a gcc
#: -ffast-math library sets flush-to-zero / denormals-are-zero for the whole process when it is
#: loaded), and never the user's flags.  Its kernels pin their products against FMA
#: contraction, so the answers are those of the brute-force kernels of every build.
QUERY_BUILD = BuildConfig(("-O2",))
#: max_hits' default: 2^28 hits, 1 GiB of int32 indices.  Sectors are queried in chunks of at
#: most this many candidates (the points their boxes touch), so a query whose answer would not
#: fit stops with a clear error after about this much memory, not when the machine runs out.
MAX_HITS = 2**28
#: The largest max_hits taken: the bound goes to C as an int64, and 2^62 hits are 16 EiB.
MAX_HITS_LIMIT = 2**62
#: The most points a query takes: hits are int32 indices.
MAX_POINTS = 2**31 - 1
#: The most threads a query splits into (the C side's BP_MAX_PARTS, bp_internal.h): more run as this many.
MAX_THREADS = 64
#: kernel= names: the narrow phase's predicate, as the brute-force kernels are named.
KERNELS = {"auto": "auto", **{ISA_NAMES[code]: isa for isa, code in ISA_CODES.items() if code}}

_engine: Engine | None = None
_library: Path | None = None
_lock = threading.Lock()
#: Where the query API says what it does (Python's logging; the "sectorbench" logger).
logger = logging.getLogger("sectorbench")


def engine(asked: bool = False) -> Engine:
    """The in-process broadphase, built (cached) and loaded on first use.

    The first use says so once on the "sectorbench" logger: a compile (a few seconds, once per
    machine and compiler) as a WARNING when a query() call meets it unasked, since a caller
    timing its first frame would otherwise see a silent stall; as INFO when prepare() asked
    for it, or when the library was already built.
    """
    global _engine, _library
    with _lock:
        if _engine is None:
            started = time.perf_counter()
            library = library_path(QUERY_BUILD)
            if library.exists():
                logger.info("sectorbench: loading the query library %s", library)
            else:
                (logger.info if asked else logger.warning)(
                    "sectorbench: compiling the query library (once per machine and compiler, a few seconds; "
                    "cached in %s); call sectorbench.prepare() at start-up to do it ahead of the first query",
                    library.parent,
                )
            ffi = interface()
            _library = build(QUERY_BUILD)
            _engine = Engine(ffi, ffi.dlopen(str(_library), ffi.RTLD_NOW | ffi.RTLD_NODELETE))  # see Engine
            logger.info("sectorbench: query library ready in %.1f s", time.perf_counter() - started)
        return _engine


def prepare() -> Path:
    """Build (or find in the cache) and load the query library now, ahead of the first query().

    The first query() otherwise compiles it (a few seconds, once per machine and compiler) and
    loads it (a few ms) before answering; later calls take only their own time.  Call it at
    start-up, outside anything you time.  Returns the library's path.  Safe to call again
    (and from several threads): the library is built and loaded once per process.
    """
    engine(asked=True)
    return _library


def release_buffers() -> int:
    """Give back the index and hit buffers the broadphase keeps between calls; returns their bytes."""
    with _lock:
        loaded = _engine
    return int(loaded.lib.sb_bp_pool_release()) if loaded is not None else 0


def _column(table, name: str, argument: str):
    """table[name] of a mapping, a structured array or a DataFrame, or None if it has no such column."""
    names = getattr(getattr(table, "dtype", None), "names", None)
    if names is not None:
        return table[name] if name in names else None
    if isinstance(table, Mapping) or hasattr(table, "columns"):
        try:
            return table[name] if name in table else None
        except TypeError:
            return None
    raise ValueError(f"{argument} must be a mapping of column name to array, a structured array or a DataFrame")


def float32_column(values, argument: str, finite: bool = True) -> np.ndarray:
    """values as contiguous float32 (no copy if they already are); ValueError naming the
    argument and the first index that float32 cannot hold exactly, or (unless finite=False,
    for a caller that counts them itself) a NaN or infinity; MemoryError naming it when its
    copy or checks do not fit (numpy's own said only a shape: of which argument?)."""
    try:
        return _float32_column(values, argument, finite)
    except MemoryError:
        rows = _rows(values)
        raise MemoryError(
            f"{argument}: no memory to convert its {rows:,} values to float32 and check them "
            f"({rows * 4 / 2**30:.1f} GiB a copy): give contiguous float32 columns, which are read in place"
        ) from None


def _rows(values) -> int:
    """How many values a column or array holds, read without converting it (0 if unsized)."""
    try:
        return len(values)
    except TypeError:
        return 0


def _float32_column(values, argument: str, finite: bool) -> np.ndarray:
    if isinstance(values, np.ma.MaskedArray):  # np.asarray would drop the mask, and the masked values count
        raise ValueError(f"{argument} is a masked array: fill or drop its masked values first")
    array = np.asarray(values)
    if array.ndim != 1:
        raise ValueError(f"{argument} must be one-dimensional (got shape {array.shape})")
    if not (np.issubdtype(array.dtype, np.floating) or np.issubdtype(array.dtype, np.integer)):
        raise ValueError(f"{argument} has dtype {array.dtype}, which does not convert to float32")
    with np.errstate(over="ignore"):  # a value past float32's range is refused below, not warned of
        converted = np.ascontiguousarray(array, dtype=np.float32)
    if array.dtype != np.float32:
        lossy = _inexact(array, converted)
        if lossy.any():
            i = int(np.argmax(lossy))
            raise ValueError(
                f"{argument}[{i}] = {array[i].item()!r} is not exactly a float32 (convert it yourself to round)"
            )
    if finite and not np.isfinite(converted).all():
        i = int(np.argmax(~np.isfinite(converted)))
        raise ValueError(f"{argument}[{i}] is {converted[i]} (NaN and infinities are not positions or sizes)")
    return converted


def _inexact(array: np.ndarray, converted: np.ndarray) -> np.ndarray:
    """Where float32 `converted` is not exactly `array` (NaN aside), compared in a type that
    holds both exactly: a float type at least as wide as float32, else (integers, float16)
    float64, and Python integers past 2^53, where float64 rounds too."""
    with np.errstate(all="ignore"):
        if np.issubdtype(array.dtype, np.floating) and array.dtype.itemsize >= 4:
            lossy = converted.astype(array.dtype) != array
            return lossy & ~np.isnan(array)
        lossy = converted.astype(np.float64) != array.astype(np.float64)
    if np.issubdtype(array.dtype, np.integer):
        for i in np.flatnonzero(np.abs(converted.astype(np.float64)) >= 2.0**53):
            lossy[i] = int(converted[i]) != int(array[i])
    return lossy


def _not_positive(name: str, values: np.ndarray, i: int) -> str:
    """Why values[i] is refused: not above 0 as this thread's floating-point mode reads it.  A
    positive subnormal under the caller's denormals-are-zero mode compares as 0 and printed as
    "0.0 is not > 0"; its bits say what it is."""
    said = f"sectors[{name!r}][{i}] = {values[i]} is not > 0"
    bits = int(values[i : i + 1].view(np.uint32)[0])
    if bits and bits < 0x00800000:  # positive, below float32's smallest normal
        said += f" (0x{bits:08x}: a subnormal, which this thread's denormals-are-zero mode reads as 0)"
    return said


def _first(mask: np.ndarray) -> int:
    return int(np.argmax(mask))


def sector_columns(sectors) -> dict[str, np.ndarray]:
    """The narrow phase's float32 columns from the caller's sectors, checked."""
    columns = {}
    for name in ("cx", "cy", "ux", "uy"):
        value = _column(sectors, name, "sectors")
        if value is None:
            raise ValueError(f"sectors lacks column {name!r} (needs cx, cy, ux, uy and r2, cos_theta or r, theta)")
        columns[name] = float32_column(value, f"sectors[{name!r}]")
    r2, cos_theta = _column(sectors, "r2", "sectors"), _column(sectors, "cos_theta", "sectors")
    r, theta = _column(sectors, "r", "sectors"), _column(sectors, "theta", "sectors")
    if r2 is not None and cos_theta is not None:
        columns["r2"] = float32_column(r2, "sectors['r2']")
        columns["cos_theta"] = float32_column(cos_theta, "sectors['cos_theta']")
        if (bad := ~(columns["r2"] > 0)).any():
            raise ValueError(_not_positive("r2", columns["r2"], _first(bad)))
        k = columns["cos_theta"]
        if (bad := ~((k >= -1) & (k <= 1))).any():
            raise ValueError(f"sectors['cos_theta'][{_first(bad)}] = {k[_first(bad)]} is outside [-1, 1]")
    elif r is not None and theta is not None:
        r32, theta32 = float32_column(r, "sectors['r']"), float32_column(theta, "sectors['theta']")
        if (bad := ~(r32 > 0)).any():
            raise ValueError(_not_positive("r", r32, _first(bad)))
        if (bad := ~((theta32 > 0) & (theta32.astype(np.float64) < np.pi))).any():
            raise ValueError(f"sectors['theta'][{_first(bad)}] = {theta32[_first(bad)]} is outside (0, pi)")
        with np.errstate(over="ignore", under="ignore"):
            columns["r2"] = r32 * r32  # float32, as the scenes compute it
        if (bad := ~((columns["r2"] > 0) & np.isfinite(columns["r2"]))).any():
            i = _first(bad)
            raise ValueError(f"sectors['r'][{i}] = {r32[i]}: its square {columns['r2'][i]} is not a float32 > 0")
        columns["cos_theta"] = np.cos(theta32.astype(np.float64)).astype(np.float32)
    else:
        raise ValueError("sectors needs columns r2 and cos_theta, or r and theta")
    # A column of the other pair given too must say what the pair answered from does.
    from_r2 = r2 is not None and cos_theta is not None
    others = {"r": r, "theta": theta} if from_r2 else {"r2": r2, "cos_theta": cos_theta}
    for name, given in others.items():
        if given is not None:
            _check_agrees(columns, name, float32_column(given, f"sectors[{name!r}]"))
    # named as the caller gave them: r2, cos_theta were derived from r, theta when only those came
    given = {"r2": "r", "cos_theta": "theta"} if r2 is None or cos_theta is None else {}
    lengths = {given.get(name, name): len(v) for name, v in columns.items()}
    if len(set(lengths.values())) > 1:
        raise ValueError(f"sectors' columns differ in length: {lengths}")
    with np.errstate(all="ignore"):
        length2 = columns["ux"].astype(np.float64) ** 2 + columns["uy"].astype(np.float64) ** 2
    if (bad := ~(np.abs(length2 - 1) <= UNIT_TOLERANCE)).any():
        i = _first(bad)
        raise ValueError(
            f"sectors['ux'], sectors['uy'][{i}] is not a unit vector: |u|^2 = {length2[i]:.9g} "
            f"(allowed: 1 +- {UNIT_TOLERANCE:.3g})"
        )
    return columns


def _check_agrees(columns: dict[str, np.ndarray], name: str, given: np.ndarray) -> None:
    """Sectors are answered from r2, cos_theta (derived from r, theta when those alone come): a
    column of the other pair given too must say what they do (pair_disagreement).  A stale r2
    beside a new r answered 29 600 hits where r, theta alone gave 7 868, without a word."""
    answered = {"r": "r2", "theta": "cos_theta", "r2": "r2", "cos_theta": "cos_theta"}[name]
    if len(given) != len(columns[answered]):
        raise ValueError(f"sectors[{name!r}] differs in length from the other columns: give r2, cos_theta or r, theta")
    found = pair_disagreement(columns, name, given)
    if found is not None:
        i, other, derived = found
        raise ValueError(
            f"sectors give {name} beside the columns answered from, and they disagree at [{i}]: "
            f"{answered} {other}, from {name} {derived} (give r2, cos_theta or r, theta, not a mix)"
        )


def pair_disagreement(columns: dict[str, np.ndarray], name: str, given: np.ndarray) -> tuple | None:
    """The first row where `given`, a column of one size pair (r, theta or r2, cos_theta), says
    otherwise than `columns`' r2, cos_theta: (row, that value, the value from `given`), or None.
    They agree when r2 = r*r and cos_theta = cos(theta) as the scenes compute them in float32,
    to within one float32 step (under the caller's directed rounding they round otherwise); the
    query API and verify's case files (families/sector) both ask it."""
    answered = {"r": "r2", "theta": "cos_theta", "r2": "r2", "cos_theta": "cos_theta"}[name]
    with np.errstate(all="ignore"):
        if name == "r":
            derived, other = given * given, columns["r2"]
        elif name == "theta":
            derived, other = np.cos(given.astype(np.float64)).astype(np.float32), columns["cos_theta"]
        else:
            derived, other = given, columns[answered]
        near = (other >= np.nextafter(derived, np.float32(-np.inf))) & (
            other <= np.nextafter(derived, np.float32(np.inf))
        )
    if (bad := ~(near | (np.isnan(derived) & np.isnan(other)))).any():
        i = _first(bad)
        return i, other[i], derived[i]
    return None


def point_columns(points, finite: bool = True) -> tuple[np.ndarray, np.ndarray]:
    """(px, py) as float32 from a mapping or an (M, 2) array (the latter is copied: C reads
    columns); finite=False leaves NaN and infinities to the caller (the index counts them)."""
    if isinstance(points, list | tuple):  # a list of (x, y) pairs: the (M, 2) array it spells
        try:
            points = np.asarray(points) if len(points) else np.zeros((0, 2), dtype=np.float32)
        except ValueError:
            raise ValueError("points as a list must hold (x, y) pairs of numbers") from None
        if points.ndim != 2:
            raise ValueError(f"points as a list must hold (x, y) pairs (got shape {points.shape})")
    if isinstance(points, np.ndarray) and points.dtype.names is None:
        if points.ndim != 2 or points.shape[1] != 2:
            raise ValueError(f"points as an array must have shape (M, 2) (got {points.shape})")
        _check_point_count(len(points))
        px, py = points[:, 0], points[:, 1]
        return float32_column(px, "points[:, 0]", finite), float32_column(py, "points[:, 1]", finite)
    px, py = _column(points, "px", "points"), _column(points, "py", "points")
    if px is None or py is None:
        raise ValueError("points needs columns px and py (or pass an (M, 2) array)")
    _check_point_count(max(_rows(px), _rows(py)))
    px, py = float32_column(px, "points['px']", finite), float32_column(py, "points['py']", finite)
    if len(px) != len(py):
        raise ValueError(f"points['px'] and points['py'] differ in length ({len(px)} != {len(py)})")
    return px, py


def _check_point_count(m: int) -> None:
    """ValueError past the points an int32 index holds, before their columns are converted: a
    broadcast (2^31, 2) array was copied (16 GiB) before it was refused, or failed as numpy's
    MemoryError naming no argument."""
    if m > MAX_POINTS:
        raise ValueError(f"points has {m:,} rows; at most 2^31 - 1 are indexed by int32")


def query(
    sectors, points, *, broadphase: str = "auto", kernel: str = "auto", threads: int = 1, max_hits: int = MAX_HITS
) -> Hits:
    """Which points lie strictly inside which sectors: CSR `Hits` (offsets, indices, counts).

    sectors: a mapping of column name to array (a dict, a numpy structured array or a pandas
    DataFrame) with cx, cy, ux, uy and either r2, cos_theta or r, theta (u a unit vector to
    within |u|^2 = 1 +- 2^-20, r > 0, theta in (0, pi)); points: a mapping with px, py, or an
    (M, 2) array.  Values must be float32 or convert to it without loss; float32 contiguous
    columns are read in place, not copied.  Bad input raises ValueError naming the argument
    and the first bad index.

    broadphase: "auto" (grid, the measured fastest), "grid", "morton" or "none" (every pair);
    kernel: the narrow phase, "auto" (the best SIMD one here), "avx512_nosqrt", "avx2_nosqrt"
    or "sse2_nosqrt"; threads: the index build and the sectors split among this many C threads
    (the GIL is released meanwhile; at most 64, more run as 64).  The hits are the same for
    every choice: the answer of the float32 kernel avx512_nosqrt and its twins, pair for pair
    (in round-to-nearest: see below).
    Freed index and hit buffers are kept for the next call (fresh pages cost a fault each);
    release_buffers() gives them back.  A process's first six index builds of over 2^18
    points on a thread count time two ways of writing the index and later ones take the
    faster (docs/game-scale.md): on a host where one way is slow, they take longer.

    It runs in this process, not in a worker: the library it loads is built with plain -O2,
    never with fast-math flags, so loading it cannot switch the process to flush-to-zero or
    denormals-are-zero (gcc's -ffast-math crtfastmath does that), and its kernels only read
    the arrays they are given.  The kernels run under the caller's floating-point environment
    (its flush-to-zero, denormals-are-zero, rounding), with its traps held: the call runs
    non-stop, as C99's feholdexcept sets it, and the caller's environment, traps and flags,
    is put back after it (the kernels' float32 arithmetic overflows to infinity by design, on
    coordinates past ~1e19: a trap there killed the process with SIGFPE, where masked it
    gives the IEEE result they are written for).  After the call its controls are compared
    with those it ran under, RuntimeError if they changed.  The hits are the same for
    every thread count and broadphase in any rounding mode; in round-to-nearest they are the
    same for every kernel too (under a directed rounding, the kernels may differ on a pair
    within a rounding of the boundary: avx512_nosqrt rounds a*|a| where the others round
    a*a and copy a's sign).

    The first call builds (once per machine and compiler, a few seconds) and loads that library,
    said once on the "sectorbench" logger; call sectorbench.prepare() at start-up to do it
    ahead of time.  Then a call costs its own work only.
    max_hits bounds the answer's memory (4 bytes a hit): ValueError naming max_hits if there
    are more hits.  When the candidates the sectors' boxes touch (an upper bound on the hits;
    N x M without an index) exceed it, sectors are queried in chunks of at most the hits
    max_hits still allows, so the check comes before more memory is spent; the hits are the
    same.  The call's peak is up to about twice the answer's (a chunk's candidates are staged
    before its hits are sorted out of them, and chunks' answers are joined): 2.05 GiB when
    the default max_hits, 1 GiB of hits, was exceeded.
    """
    if broadphase == "auto":
        broadphase = FASTEST
    if not isinstance(broadphase, str) or broadphase not in BROADPHASES:
        raise ValueError(f"broadphase must be one of auto, {', '.join(BROADPHASES)} (got {broadphase!r})")
    if not isinstance(kernel, str) or kernel not in KERNELS:
        raise ValueError(f"kernel must be one of {', '.join(KERNELS)} (got {kernel!r})")
    if not isinstance(threads, int | np.integer) or isinstance(threads, bool) or threads < 1:
        raise ValueError(f"threads must be an integer >= 1 (got {threads!r})")
    threads = min(int(threads), MAX_THREADS)
    if not isinstance(max_hits, int | np.integer) or isinstance(max_hits, bool) or not 1 <= max_hits <= MAX_HITS_LIMIT:
        raise ValueError(f"max_hits must be an integer from 1 to 2^62 (got {max_hits!r})")
    with _traps_held():  # numpy's checks too: r = 1e20 squared is refused, not trapped
        return _answer(sectors, points, broadphase, kernel, threads, max_hits)


def _answer(sectors, points, broadphase: str, kernel: str, threads: int, max_hits: int) -> Hits:
    """query's work, its options checked."""
    fp_before = _fp_controls()
    columns = sector_columns(sectors)
    # An index counts the points' NaN and infinities while it reads them anyway: checked here
    # too, they cost a second pass over memory (0.5 ms at 1 000 000 points, the arrays having
    # left the caches since the caller wrote them).
    px, py = point_columns(points, finite=broadphase == "none")
    n, m = len(columns["cx"]), len(px)
    if n == 0 or m == 0:
        if broadphase != "none":  # no index will count them: numpy does
            point_columns(points)
        return Hits(np.zeros(n + 1, dtype=np.int64), np.zeros(0, dtype=np.int32), broadphase=broadphase)
    runner = engine()
    try:
        runner.narrow_phase(KERNELS[kernel])
    except RuntimeError as exc:
        raise ValueError(f"kernel {kernel!r} cannot run here: {exc}") from None
    index, index_s = None, 0.0
    if broadphase != "none":  # one index of the points, shared by every chunk of sectors
        start = time.perf_counter()
        index = runner.build(broadphase, px, py, m, columns["r2"], int(threads))
        index_s = time.perf_counter() - start
        if runner.finite_points(index) < m:
            point_columns(points)  # raises the ValueError naming the first one
            raise RuntimeError("the index counted non-finite points that numpy does not see")

    def answer(bounds: np.ndarray | None, max_candidates: int) -> list[Hits]:
        """The hits of every sector: in one call (bounds None), or in chunks of consecutive
        sectors whose hit bounds stay within what max_hits still allows, plus one, so that an
        answer past max_hits is refused holding about max_hits hits (chunks of max_hits each
        held twice that, and a third chunk's work buffer: 2^14 sectors each over 2^16 points
        peaked at 3.06 GiB before the error, now 2.05)."""
        ends = None if bounds is None else np.cumsum(bounds)
        parts, total, begin = [], 0, 0
        while begin < n:
            end = n if ends is None else _chunk_end(ends, begin, max_hits - total + 1)
            some = {name: values[begin:end] for name, values in columns.items()}
            part = runner.hits(
                broadphase,
                {**some, "px": px, "py": py},
                end - begin,
                m,
                int(threads),
                KERNELS[kernel],
                index=index,
                max_candidates=max_candidates,
            )
            total += part.total
            if total > max_hits:
                raise ValueError(
                    f"more than max_hits={max_hits:,} hits (already {total:,} in sectors 0 to {end - 1} of {n}): "
                    "raise max_hits (4 bytes a hit) or query fewer sectors at a time"
                )
            parts.append(part)
            begin = end
        return parts

    if index is None:
        parts = answer(np.full(n, m, dtype=np.int64), 0)
    else:
        try:  # one call, which bounds its own answer and refuses past max_hits before allocating
            parts = answer(None, int(max_hits))
        except OverLimit:
            parts = None
        if parts is None:  # cut the sectors by their bounds (computed again: the rare case), outside
            # the handler, so that its "more than max_hits" error does not come chained to OverLimit
            parts = answer(runner.bounds(index, columns, n), 0)
    _check_unchanged(fp_before)
    return dataclasses.replace(_joined(parts, index_s), broadphase=broadphase)


@contextlib.contextmanager
def _traps_held():
    """The block runs with the floating-point traps masked (feholdexcept: non-stop, flags
    cleared) under the caller's rounding, flush-to-zero and denormals-are-zero; the caller's
    environment is put back after it, whatever the block raised."""
    libm = _libm()
    saved = ctypes.create_string_buffer(FENV_BYTES)
    if libm is None or libm.feholdexcept(saved) != 0:
        yield
        return
    try:
        yield
    finally:
        libm.fesetenv(saved)


class _FEnv(ctypes.Structure):
    """glibc's fenv_t on x86-64: the x87 environment (its control word first), then MXCSR."""

    _fields_ = [("x87_control", ctypes.c_uint16), ("x87_rest", ctypes.c_uint8 * 26), ("mxcsr", ctypes.c_uint32)]


#: Bytes enough for any libc's fenv_t (glibc: 32 on x86-64, 8 on AArch64).
FENV_BYTES = 64
#: MXCSR's exception flags: any float32 work sets some (inexact), so they are not compared.
MXCSR_FLAGS = 0x3F


@functools.cache
def _libm():
    try:
        return ctypes.CDLL(ctypes.util.find_library("m") or "libm.so.6")
    except OSError:
        return None


def _fp_controls() -> tuple[int, ...]:
    """The caller's floating-point controls, read without computing: the rounding mode, and on
    x86-64 glibc the x87 control word and MXCSR (denormals-are-zero, flush-to-zero, traps),
    exception flags aside.  A game may well run with flush-to-zero on, or with traps enabled:
    probing by arithmetic read round-down as denormals-are-zero and raised a trapped underflow."""
    libm = _libm()
    if libm is None:
        return ()
    rounding = libm.fegetround()
    if platform.machine() not in ("x86_64", "AMD64") or platform.libc_ver()[0] != "glibc":
        return (rounding,)
    env = _FEnv()
    libm.fegetenv(ctypes.byref(env))
    return (rounding, env.x87_control, env.mxcsr & ~MXCSR_FLAGS)


def _check_unchanged(before: tuple[int, ...]) -> None:
    """RuntimeError if the call changed the floating-point controls (the library it loaded, or
    its threads); the caller's own settings, whatever they are, are not this call's to judge."""
    after = _fp_controls()
    if after != before:
        names = ("rounding mode", "x87 control word", "MXCSR")
        changed = ", ".join(f"{name} {b:#x} -> {a:#x}" for name, b, a in zip(names, before, after) if a != b)
        raise RuntimeError(f"sectorbench.query changed this process's floating-point environment: {changed}")


def _chunk_end(ends: np.ndarray, begin: int, budget: int) -> int:
    """The end of the chunk of sectors from `begin` whose hit bounds (`ends`: their running sum)
    sum to at most `budget` (a sector alone when its own bound exceeds it): the buffers of the
    chunk's answer then fit in the budget, and a query whose boxes touch few points is one call."""
    before = int(ends[begin - 1]) if begin else 0
    return max(begin + 1, int(np.searchsorted(ends, before + budget, side="right")))


def _joined(parts: list[Hits], index_s: float = 0.0) -> Hits:
    """One CSR of consecutive sector chunks' hits."""
    if len(parts) == 1:
        return dataclasses.replace(parts[0], index_build_s=index_s + parts[0].index_build_s)
    shifts = np.cumsum([0] + [part.total for part in parts[:-1]])
    offsets = np.concatenate([parts[0].offsets[:1]] + [p.offsets[1:] + s for p, s in zip(parts, shifts)])
    return Hits(
        offsets,
        np.concatenate([part.indices for part in parts]),
        sum(part.candidates for part in parts),
        index_s + sum(part.index_build_s for part in parts),
        sum(part.query_s for part in parts),
    )
