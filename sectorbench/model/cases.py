"""Inputs built to break float32 predicate kernels (for `verify`): what every family shares.

A family describes its cases as a list of `Part`s — named generators ("random",
"near arc ±64 ulp", "exact apex", ...).  Each part's rows come in blocks of at most
BLOCK_ROWS rows, and every block is drawn from its own generator seeded with
(seed, part, block), so the rows do not depend on how many blocks are processed at
once.  `batches()` streams the blocks in batches of at most BATCH_ROWS rows (plus their
metamorphic copies), which bounds verify's memory at any --cases; `generate()` is all
batches in one CaseSet, for small counts and tests.
"""

from __future__ import annotations

import itertools
import math
import pickle
from collections.abc import Callable, Iterator, Mapping
from dataclasses import dataclass, field

import numpy as np

from ..errors import SectorbenchError
from .scenes import SceneArrays, build_scene

F32 = np.float32
SPECIAL_VALUES = (np.nan, np.inf, -np.inf, -0.0, 1e-40)  # 1e-40 is a float32 subnormal
ULP_MOVES = np.arange(-64, 65)
GRID_SIDE = 256
#: Rows per block: the unit of seeding (a block's rows come from its own generator).
BLOCK_ROWS = 4096
#: Rows verify holds at once (plus their metamorphic copies): the bound on its memory.
#: The exact oracle's integer path keeps ~100 bytes per input per row for rows near a
#: boundary, so 2^18 rows stay well under 1 GB whatever --cases is.
BATCH_ROWS = 1 << 18
#: Share of each block's eligible rows copied by every metamorphic transform.
METAMORPHIC_SHARE = 1 / 16

Columns = dict[str, np.ndarray]
Transform = Callable[[dict], dict]


@dataclass(frozen=True)
class Part:
    """One generator: `units` units of `unit_rows` rows each, made by make(rng, units).

    A random generator has unit_rows = 1; one that walks ±64 ulps around each base row
    has unit_rows = 129; a fixed construction is one unit of all its rows.
    """

    group: str
    units: int
    make: Callable[[np.random.Generator, int], Mapping[str, np.ndarray]]
    unit_rows: int = 1
    metamorphic: bool = True  # copies of its rows get the family's transforms

    @property
    def rows(self) -> int:
        return self.units * self.unit_rows


def fixed(group: str, columns: Mapping[str, object], metamorphic: bool = True) -> Part:
    """A part holding a fixed construction."""
    rows = len(next(iter(columns.values())))
    return Part(group, 1 if rows else 0, lambda rng, units: columns, rows, metamorphic)


@dataclass
class CaseSet:
    arrays: SceneArrays  # the family's arrays (Family.scene_arrays)
    columns: Columns
    group: np.ndarray  # generator of each row
    #: metamorphic rows: index (in this set) of the row they were transformed from, else -1
    source: np.ndarray = field(default=None)
    #: index of the set's first row among all rows of the run (batches are numbered on)
    first_row: int = 0
    #: the family's extra arrays (Family.extra_arrays) the rows refer to, e.g. polygons
    extra: dict = field(default_factory=dict)
    #: a case file's text columns (name -> str per row), carried into the failure report
    labels: dict = field(default_factory=dict)
    #: a case file's EXPECTED_COLUMN as the family's answers, or None
    expected: np.ndarray | None = None

    def __len__(self) -> int:
        return len(self.group)

    @property
    def family(self) -> str:
        return self.arrays.family

    def scene(self, rows: slice | np.ndarray = slice(None), shift: int = 0):
        """The rows as a pairs-layout scene, optionally after `shift` copies of row 0."""
        columns = {k: v[rows] for k, v in self.columns.items()}
        if shift:
            columns = {k: np.concatenate([np.repeat(v[:1], shift), v]) for k, v in columns.items()}
        return build_scene("verify", self.arrays, columns, layout="pairs", extra=self.extra)


def case_set(
    family, parts: list[tuple[str, Mapping[str, np.ndarray]]], sources=None, first_row: int = 0, extra=None
) -> CaseSet:
    """A CaseSet from (group, columns) pieces, completed and converted to float32 by the family."""
    names = (*family.shape_arrays, *family.point_arrays)
    pieces, groups = [], []
    for group, columns in parts:
        n = len(columns[family.point_arrays[0]])
        columns = family.complete_columns({k: np.asarray(v, dtype=F32).reshape(n) for k, v in columns.items()})
        pieces.append(columns)
        groups.append(np.full(n, group, dtype=object))
    rows = sum(len(g) for g in groups)
    source = np.full(rows, -1) if sources is None else np.asarray(sources)
    empty = np.zeros(0, dtype=F32)
    return CaseSet(
        family.scene_arrays,
        {k: np.concatenate([p[k] for p in pieces]) if pieces else empty for k in names},
        np.concatenate(groups) if groups else np.zeros(0, dtype=object),
        source,
        first_row,
        dict(extra or {}),
    )


def batches(
    family, parts: list[Part], seed: int, transforms: Mapping[str, Transform], batch_rows: int = BATCH_ROWS
) -> Iterator[CaseSet]:
    """The parts' rows, block by block, in CaseSets of about batch_rows rows (see the module doc)."""
    pending: list[tuple[str, Mapping[str, np.ndarray]]] = []
    sources: list[np.ndarray] = []
    held, first_row = 0, 0
    for part_index, part in enumerate(parts):
        units_per_block = max(1, BLOCK_ROWS // max(part.unit_rows, 1))
        for block_index in range(math.ceil(part.units / units_per_block)):
            units = min(units_per_block, part.units - block_index * units_per_block)
            rng = np.random.default_rng([seed, part_index, block_index])
            block = family.complete_columns(
                {k: np.asarray(v, dtype=F32).ravel() for k, v in part.make(rng, units).items()}
            )
            rows = len(block[family.point_arrays[0]])
            pending.append((part.group, block))
            sources.append(np.full(rows, -1))
            copies = _metamorphic_copies(block, rng, transforms) if part.metamorphic else []
            base = held
            held += rows
            for name, chosen, columns in copies:
                pending.append((f"metamorphic: {name}", columns))
                sources.append(base + chosen)
                held += len(chosen)
            if held >= batch_rows:
                yield case_set(family, pending, np.concatenate(sources), first_row)
                first_row += held
                pending, sources, held = [], [], 0
    if pending:
        yield case_set(family, pending, np.concatenate(sources), first_row)


def generate(family, parts: list[Part], seed: int, transforms: Mapping[str, Transform]) -> CaseSet:
    """All the parts' rows in one CaseSet (the same rows `batches` streams)."""
    return concatenate(family, list(batches(family, parts, seed, transforms, batch_rows=2**62)))


def concatenate(family, sets: list[CaseSet]) -> CaseSet:
    offsets = np.cumsum([0, *(len(s) for s in sets)])[:-1]
    return CaseSet(
        family.scene_arrays,
        {k: np.concatenate([s.columns[k] for s in sets]) for k in sets[0].columns},
        np.concatenate([s.group for s in sets]),
        np.concatenate([np.where(s.source >= 0, s.source + o, -1) for s, o in zip(sets, offsets)]),
        sets[0].first_row,
    )


def _metamorphic_copies(block: Columns, rng, transforms: Mapping[str, Transform]):
    """(name, chosen rows, transformed columns) for each transform, on a share of the eligible rows."""
    eligible = np.flatnonzero(normal_or_zero(block))
    size = min(eligible.size, math.ceil(eligible.size * METAMORPHIC_SHARE))
    if not size or not transforms:
        return []
    chosen = np.sort(rng.choice(eligible, size=size, replace=False))
    base = {k: v[chosen] for k, v in block.items()}
    copies = []
    for name, transform in transforms.items():
        with np.errstate(all="ignore"):
            copies.append((name, chosen, transform(base)))
    return copies


# ---------------------------------------------------------------------------- row makers


def ulp_step(x: np.ndarray, steps) -> np.ndarray:
    """x moved by `steps` representable float32 values (nextafter applied |steps| times)."""
    bits = np.asarray(x, dtype=F32).view(np.int32).astype(np.int64)
    ordered = np.where(bits < 0, -(bits & 0x7FFFFFFF), bits) + np.asarray(steps, dtype=np.int64)
    back = np.where(ordered < 0, (-ordered) | 0x80000000, ordered)
    return back.astype(np.uint32).view(F32)


def random_bits(rng, n: int, low: int = -20, high: int = 20, positive=False) -> np.ndarray:
    """float32 values with uniformly random sign, exponent in [low, high] and mantissa."""
    mantissa = 1 + rng.integers(0, 2**23, n) / 2**23
    sign = 1 if positive else rng.choice([-1, 1], n)
    return (sign * np.ldexp(mantissa, rng.integers(low, high + 1, n))).astype(F32)


def ulp_moves(base: Mapping, axis: str) -> Columns:
    """Each row of `base` repeated for -64..+64 ulp steps of one column."""
    n = len(base[axis])
    rows = {k: np.repeat(np.asarray(v, dtype=F32), len(ULP_MOVES)) for k, v in base.items()}
    rows[axis] = ulp_step(rows[axis], np.tile(ULP_MOVES, n))
    return rows


def ulp_grid(base_row: Mapping, x: str = "px", y: str = "py") -> Columns:
    """Kettner-style: a 256 x 256 grid of nextafter steps of (x, y) around one row."""
    steps = np.arange(GRID_SIDE) - GRID_SIDE // 2
    sx, sy = np.meshgrid(steps, steps, indexing="ij")
    rows = {k: np.full(GRID_SIDE**2, F32(v)) for k, v in base_row.items()}
    rows[x] = ulp_step(rows[x], sx.ravel())
    rows[y] = ulp_step(rows[y], sy.ravel())
    return rows


def f32(columns: Mapping) -> Columns:
    return {k: np.asarray(v, dtype=F32) for k, v in columns.items()}


def exactly_float32(values64: np.ndarray) -> np.ndarray:
    """Rows whose float64 values survive the trip through float32 unchanged."""
    values = np.asarray(values64, dtype=np.float64)
    return np.all(values == np.asarray(values64, dtype=F32).astype(np.float64), axis=0)


def with_special_values(base: Mapping, slots: tuple[str, ...]) -> Columns:
    """Copies of `base` with each special value in each slot."""
    n = len(next(iter(base.values())))
    out = {k: [] for k in base}
    for slot in slots:
        for value in SPECIAL_VALUES:
            for k, v in base.items():
                out[k].append(np.full(n, value, dtype=F32) if k == slot else np.asarray(v, dtype=F32))
    return {k: np.concatenate(v) for k, v in out.items()}


def random_parts(count: int, random_rows) -> list[Part]:
    """Random rows around the origin, then offset to 1e3 and 1e5, where float32 cancellation bites."""
    return [Part("random", count, random_rows)] + [
        Part(f"offset {offset:g}", count, lambda rng, n, offset=offset: random_rows(rng, n, offset))
        for offset in (1e3, 1e5)
    ]


def signed_zero_rows(pairs: tuple[tuple[str, str], ...], assignments: list[Mapping[str, float]], values) -> Columns:
    """Rows whose coordinate differences are ±0.0 in every sign combination.

    For each (p, c) pair of columns whose difference a kernel takes (p − c): rows with
    p − c = −0.0 (p = −0.0, c = +0.0) and +0.0 (both +0.0, and both −0.0), while the
    other pairs' differences take each of `values` (give both signs), for each of the
    `assignments` of the remaining columns.
    """
    zeros = ((-0.0, 0.0), (0.0, 0.0), (-0.0, -0.0))  # (p, c): p − c = −0, +0, +0
    names = (*(name for pair in pairs for name in pair), *assignments[0])
    rows: dict[str, list] = {k: [] for k in names}
    for zero_pair in pairs:
        rest = [pair for pair in pairs if pair != zero_pair]
        for p0, c0 in zeros:
            for diffs in itertools.product(values, repeat=len(rest)):
                for assignment in assignments:
                    rows[zero_pair[0]].append(p0)
                    rows[zero_pair[1]].append(c0)
                    for (p, c), d in zip(rest, diffs):
                        rows[p].append(d)
                        rows[c].append(0.0)
                    for k, v in assignment.items():
                        rows[k].append(v)
    return f32(rows)


# ---------------------------------------------------------------------------- metamorphic


def coordinate_transforms(
    pairs: tuple[tuple[str, str], ...],
    positions: tuple[str, ...],
    scale_others: Callable[[dict, dict, int], dict] | None = None,
) -> dict[str, Transform]:
    """Maps that leave a planar predicate's exact answer unchanged.

    pairs: the (x, y) column pairs (positions and directions), rotated and swapped
    together; positions: the columns scaled by 2^k; scale_others(columns, scaled, k)
    scales the family's other lengths (a radius, a squared radius) to match.
    """

    def swap(c):
        return {**c, **{x: c[y] for x, y in pairs}, **{y: c[x] for x, y in pairs}}

    def negate(c):
        return {**c, **{k: -c[k] for pair in pairs for k in pair}}

    def rotate(c):
        return {**c, **{x: -c[y] for x, y in pairs}, **{y: c[x] for x, y in pairs}}

    def scale(c, k=8):
        out = {**c, **{name: c[name] * F32(2.0**k) for name in positions}}
        return scale_others(c, out, k) if scale_others else out

    return {
        "swap x,y": swap,
        "negate": negate,
        "rotate 90°": rotate,
        "scale 2^8": scale,
        "scale 2^-8": lambda c: scale(c, -8),
    }


def normal_or_zero(columns: Mapping) -> np.ndarray:
    """Rows with no under/overflow risk after scaling: every value 0 or comfortably normal."""
    ok = np.ones(len(next(iter(columns.values()))), dtype=bool)
    for v in columns.values():
        magnitude = np.abs(v.astype(np.float64))
        ok &= np.isfinite(magnitude) & ((magnitude == 0) | ((magnitude > 2.0**-100) & (magnitude < 2.0**100)))
    return ok


# ---------------------------------------------------------------------------- user input


#: What np.savez writes: a zip archive (an empty one starts with the end-of-archive record).
NPZ_MAGIC = (b"PK\x03\x04", b"PK\x05\x06")
NPY_MAGIC = b"\x93NUMPY"
FLOAT32_MAX = float(np.finfo(np.float32).max)
#: A case file's optional column of the answers its author expects, checked against the oracle.
EXPECTED_COLUMN = "expected"
#: numpy kinds of text columns (str, bytes, Python objects): labels, shown with a failing row.
TEXT_KINDS = "USO"
#: What an object array's pickle may name: the array itself, never arbitrary code (a case
#: file is data; np.load(allow_pickle=True) would run whatever the file says).
PICKLED_ARRAY_PARTS = frozenset(
    {
        ("numpy.core.multiarray", "_reconstruct"),
        ("numpy._core.multiarray", "_reconstruct"),
        ("numpy", "ndarray"),
        ("numpy", "dtype"),
    }
)


class _ArrayOnlyUnpickler(pickle.Unpickler):
    """Unpickles an object array of plain Python values (str, int, float, None) and nothing else."""

    def find_class(self, module, name):
        if (module, name) in PICKLED_ARRAY_PARTS:
            return super().find_class(module, name)
        raise pickle.UnpicklingError(f"it names {module}.{name}, which a column of text never needs")


def _object_array(archive, name: str, path) -> np.ndarray:
    """An object-dtype member of an .npz (a column of Python strings), read without running its pickle."""
    try:
        with archive.zip.open(f"{name}.npy") as stream:
            version = np.lib.format.read_magic(stream)
            read_header = (
                np.lib.format.read_array_header_1_0 if version == (1, 0) else np.lib.format.read_array_header_2_0
            )
            read_header(stream)
            values = _ArrayOnlyUnpickler(stream).load()
    except Exception as exc:  # a damaged or hostile member: one line naming it
        raise SectorbenchError(
            f"{path}: array {name!r} holds Python objects that cannot be read as text ({exc})"
        ) from None
    if not isinstance(values, np.ndarray) or any(not isinstance(v, str | bytes | int | float) for v in values.ravel()):
        raise SectorbenchError(f"{path}: array {name!r} holds Python objects other than text and numbers")
    return values


def is_text(values: np.ndarray) -> bool:
    """A label column (str, bytes or Python objects), not coordinates."""
    return values.dtype.kind in TEXT_KINDS


#: The most a case file may hold, uncompressed (its arrays' bytes): 16 million rows of eight
#: float64 columns.  Read from the zip directory and each array's header before anything is
#: decompressed, so a zip bomb is refused at once, in a few kB of memory.
MAX_CASES_BYTES = 1 << 30
#: The most a case file may weigh on disk (compressed data cannot be larger than raw).
MAX_CASES_FILE_BYTES = MAX_CASES_BYTES


def check_npz_sizes(path) -> None:
    """The .npz's arrays, as its zip directory and .npy headers declare them, fit
    MAX_CASES_BYTES, and each declared array fits its member; SectorbenchError otherwise.
    zipfile then never inflates a member past its declared size, so the check holds."""
    import zipfile

    try:
        with zipfile.ZipFile(path) as archive:
            members = archive.infolist()
            declared = sum(info.file_size for info in members)
            if declared > MAX_CASES_BYTES:
                raise SectorbenchError(
                    f"{path}: its arrays would take {declared:,} bytes uncompressed, more than the "
                    f"{MAX_CASES_BYTES:,} allowed"
                )
            for info in members:
                with archive.open(info) as member:
                    version = np.lib.format.read_magic(member)
                    read_header = {
                        (1, 0): np.lib.format.read_array_header_1_0,
                        (2, 0): np.lib.format.read_array_header_2_0,
                    }.get(version)
                    if read_header is None:
                        raise ValueError(f"unsupported .npy version {version}")
                    shape, _, dtype = read_header(member)
                    needed = int(np.prod(shape, dtype=object)) * dtype.itemsize
                    if needed > info.file_size:
                        raise ValueError(
                            f"member {info.filename!r} declares {needed:,} bytes of data but holds {info.file_size:,}"
                        )
    except SectorbenchError:
        raise
    except (OSError, ValueError, EOFError, zipfile.BadZipFile, KeyError, TypeError) as exc:
        message = " ".join(str(exc).split()) or type(exc).__name__
        raise SectorbenchError(f"{path}: a damaged .npz file ({message})") from None


def read_npz(path) -> dict[str, np.ndarray]:
    """The arrays of a user's .npz case file, flattened; SectorbenchError naming the file and the problem."""
    import zipfile

    from .results import regular_file

    info = regular_file(path)  # a FIFO or a device is refused without opening it
    if info.st_size > MAX_CASES_FILE_BYTES:
        raise SectorbenchError(f"{path} is {info.st_size:,} bytes, more than the {MAX_CASES_FILE_BYTES:,} allowed")
    head = _head(path)
    if not head:
        raise SectorbenchError(f"{path}: the file is empty; cases come as an .npz file (numpy.savez)")
    if head.startswith(NPY_MAGIC):
        raise SectorbenchError(f"{path}: a single .npy array; cases come as an .npz file of named arrays (numpy.savez)")
    if not head.startswith(NPZ_MAGIC):
        raise SectorbenchError(f"{path}: not an .npz file (numpy.savez writes a zip archive of named arrays)")
    check_npz_sizes(path)
    try:
        with np.load(path, allow_pickle=False) as archive:
            data = {}
            for name in archive.files:
                try:
                    data[name] = archive[name]
                except ValueError as exc:  # an object array: text columns, read without unpickling code
                    if "allow_pickle" not in str(exc):
                        raise
                    data[name] = _object_array(archive, name, path)
    except (OSError, ValueError, EOFError, zipfile.BadZipFile, KeyError) as exc:
        message = " ".join(str(exc).split()) or type(exc).__name__
        raise SectorbenchError(f"{path}: a damaged .npz file ({message})") from None
    out = {}
    for name, values in data.items():
        if not isinstance(values, np.ndarray):
            raise SectorbenchError(f"{path}: a damaged .npz file (its member {name!r} is not a numpy array)")
        if sum(1 for size in values.shape if size != 1) > 1:
            raise SectorbenchError(f"{path}: array {name!r} has shape {values.shape}; each array is one column")
        out[name] = np.ravel(values)
    return out


def _head(path) -> bytes:
    try:
        with open(path, "rb") as stream:
            return stream.read(6)
    except OSError as exc:
        raise SectorbenchError(f"{path}: cannot read cases ({exc.strerror})") from None


def check_input_arrays(
    path, family: str, data: dict, required: tuple[str, ...], extra_missing=(), not_coordinates=()
) -> None:
    """The case file's arrays: none missing, equal non-zero lengths, real numbers that fit float32
    (except `not_coordinates`: labels and the expected answers, which the family checks)."""
    missing = [k for k in required if k not in data] + list(extra_missing)
    if missing:
        raise SectorbenchError(f"{path}: missing arrays for the {family} family: {', '.join(missing)}")
    lengths = {k: len(v) for k, v in data.items()}
    if len(set(lengths.values())) != 1:
        listed = ", ".join(f"{k} {n}" for k, n in lengths.items())
        raise SectorbenchError(f"{path}: arrays of different lengths ({listed}); one row per pair needs equal lengths")
    if 0 in lengths.values():
        raise SectorbenchError(f"{path}: the arrays are empty; give at least one row")
    for name, values in data.items():
        if name in not_coordinates:
            continue
        if values.dtype.kind not in "fiu":  # bool, complex, dates: not coordinates
            raise SectorbenchError(
                f"{path}: array {name!r} holds {values.dtype} values; cases are real numbers (float32 or wider), "
                f"text labels, and an optional {EXPECTED_COLUMN!r} answer column"
            )
        wide = values.astype(np.float64)
        too_big = np.isfinite(wide) & (np.abs(wide) > FLOAT32_MAX)
        if too_big.any():
            row = int(np.flatnonzero(too_big)[0])
            raise SectorbenchError(
                f"{path}: array {name!r} row {row} is {wide[row]:g}, beyond float32's range (±{FLOAT32_MAX:.4g}); "
                f"write inf if you mean it"
            )
