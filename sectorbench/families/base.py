"""What a family is: the one home of everything the harness asks about a kind of shape.

A family owns its array names, its scene kinds, its exact oracle, its adversarial
cases, the signature of its kernels (its C side: which loop template its rows use)
and how a kernel's answer is compared with the oracle.  The harness (build, worker,
timing, runner, verify, results, report, cli) asks these methods and never names a
family.  `BooleanFamily` does the work shared by predicate families ("is point p
inside shape q?"), whose answer is one bit per (shape, point) pair.
"""

from __future__ import annotations

import math
from collections.abc import Callable, Hashable, Mapping
from dataclasses import dataclass, replace
from pathlib import Path

import numpy as np

from ..errors import SectorbenchError
from ..model import cases
from ..model.cases import EXPECTED_COLUMN, CaseSet, Part, check_input_arrays, is_text, read_npz
from ..model.scenes import SceneArrays

#: The most shapes a kernel row's loop may test per load of points: sb_common.h's SB_BLOCK counts
#: a block's hits in 32 bits, and B x MAX_POINTS (2^28) must stay below 2^32.
MAX_BLOCK = 8
#: The most points a kernel row's loop may declare it tests per step (.lanes): four vectors of the
#: widest ISA (AVX-512, 16 floats).  verify checks 2 x lanes + 1 tail lengths and lanes - 1 shifts
#: of every row, each a scene for every kernel of the build: a --source row declaring 4096 lanes
#: (a tiled loop) made one verify of basic beside it take hours instead of seconds.
MAX_LANES = 64

#: A scene generator: (n shapes, m points, seed, **options) -> Scene; its keyword-only
#: parameters are the kind's options (scene_kinds.resolved_options).
SceneGenerator = Callable[..., "object"]


@dataclass(frozen=True)
class SceneOption:
    """An option of some of a family's scene kinds, which the CLI offers as --NAME.

    Which kinds take it is read from their generators' keyword-only parameters; the
    default shown is the generator's.  type: float, int or bool (a flag).
    """

    name: str
    type: type
    help: str


#: Most tests BooleanFamily.exact_count evaluates: the oracle (float filter, exact fallback)
#: takes about 2 µs a pair in numpy here, so 2^19 pairs cost about a second, small next to a
#: run's calibration; beyond, the reference kernel's count is the yardstick.
EXACT_COUNT_MAX_TESTS = 2**19


@dataclass(frozen=True)
class Reference:
    """The oracle on a case set, for one kernel's contract.

    answer: the exact answer per row; margin: how many float32 roundings a wrong
    answer of that row is from being right (0 exactly on the boundary, +inf where
    rounding cannot explain it, NaN for a row with a NaN input); exact: rows where a
    wrong answer cannot be rounding because the float32 evaluation of what it hinges on
    is exact (no operation rounds), so it is a logic bug; exact_evaluable: rows where
    float32 evaluates the whole predicate exactly.
    """

    answer: np.ndarray
    margin: np.ndarray
    exact: np.ndarray
    exact_evaluable: np.ndarray


class Family:
    """The interface; see BooleanFamily for a predicate family's defaults."""

    name: str
    shape_noun: str  # plural noun of its shapes: the key of N in a result's scene
    shape_arrays: tuple[str, ...]  # per-shape float32 arrays of its scenes
    point_arrays: tuple[str, ...] = ("px", "py")
    scenes: Mapping[str, SceneGenerator] = {}
    #: The options its scene kinds take (see SceneOption), offered by run, compare and query.
    scene_options: tuple[SceneOption, ...] = ()
    #: Older spellings of a kind with options: alias -> (kind, options), e.g. a kind with its
    #: size in its name.  They keep working; --scene lists only the kinds.
    scene_aliases: Mapping[str, tuple[str, Mapping[str, object]]] = {}
    default_rounding_bound: float = 8.0  # verify's bound for a row that declares none
    #: The largest rounding bound verify grants a row, whatever it declares: 2^10 roundings is a
    #: relative error of 2^-14, more than a float32 expression of a thousand operations makes;
    #: past it a "bound" excuses wrong answers, not rounding (1e30 passed a kernel always naming
    #: vertex 0).  A row declaring more is judged at the cap, and verify says so.
    max_rounding_bound: float = 2.0**10
    #: The largest tolerance verify grants a tolerant kernel (in the family's unit), likewise;
    #: None: the family reads no tolerance.
    max_tolerance: float | None = None
    tolerance_unit: str = ""
    #: The kernel speedups are against (run's table lists it first); None: the first row's.
    reference_kernel: str | None = None
    answer_dtype = np.uint8  # what eval_grid / eval_pairs write per test
    answer_width: int = 1  # values of answer_dtype per test (aabr: four vertex indices)
    #: Family data of other lengths or types (name -> numpy dtype), in sb_scene.extra[] order:
    #: a scene carries them in Scene.extra (e.g. polygon vertices, shared by many shapes).
    extra_arrays: Mapping[str, type] = {}

    #: What run's plan assumes a test of this family costs until its kernels are calibrated (then
    #: the measured call counts replace it): the default sector kernels take 0.6 to 12 ns per test
    #: at -O2 here, 4 on average; the triangle kernels 3 to 7.
    typical_ns_per_test: float = 4.0
    #: Said beside that assumption in the plan: the slowest default kernel, where it is far from it.
    typical_ns_note: str = ""

    #: True where a kernel's innermost (hot) loop steps over the points, a fixed number of tests an
    #: iteration: then machine_code's cycles per iteration, divided by them, bound a test, and its
    #: vector class compares with the NoOperation loop's.  A family whose kernels loop inside one
    #: test (over a polygon's vertices, a search) sets False: run derives no bound for its rows.
    hot_loop_over_points: bool = True

    #: What a count loop returns, as `run`'s table shows it (a boolean family: hits).
    count_column = "hit %"
    #: run's ±k footnote: what a row's count k away from {expected} means, in the family's words.
    count_difference = (
        "hits differ by k from {expected}: the kernels disagree on some pairs (float32 rounding "
        "near the boundary, a kernel's declared tolerance, or a logic difference; see "
        "`sectorbench verify --family {family}`)"
    )

    def count_cell(self, hits: int, tests: int) -> str:
        return f"{hits / tests * 100:.4f}"

    def scene_cost(self, kind: str, n: int, m: int, options: Mapping[str, object]) -> tuple[int, float]:
        """What making a scene of `kind` (its options resolved) costs beyond its shape and point
        arrays, known before it is made: (peak bytes, seconds), which the size and time checks
        add.  Nothing by default: a vectorised generator's cost is its arrays'."""
        return 0, 0.0

    @property
    def scene_arrays(self) -> SceneArrays:
        """What its scenes hold, as the Scene value needs it."""
        return SceneArrays(self.name, self.shape_arrays, self.point_arrays, dict(self.extra_arrays), self.shape_noun)

    # ---- kernels
    def inputs(self, kernel) -> tuple[str, ...]:
        """The columns a kernel reads: its shape arrays, then the points."""
        return (*kernel.takes, *self.point_arrays)

    def subnormal_intermediates(self, columns: dict[str, np.ndarray]) -> np.ndarray | None:
        """Rows whose inputs are normal but whose answer hinges on a value float32 holds only
        as a subnormal (a sector's |D|²): flushed to zero by a fast-math build's FTZ, they
        count as special values, as subnormal inputs do.  None: the family names none."""
        return None

    def check_kernel(self, kernel) -> str | None:
        """Why a kernel row does not fit this family (unknown arrays, a declaration out of range:
        a --source row's .rounding_bound = -5 had verify FAIL a correct kernel on 707 rows, a
        NaN .tolerance showed as "tolerance nan rad"), or None."""
        unknown = [name for name in kernel.takes if name not in self.shape_arrays]
        if unknown:
            return f"takes {', '.join(unknown)}, which the {self.name} family has no arrays for"
        for field in ("rounding_bound", "tolerance"):
            value = getattr(kernel, field)
            if not (math.isfinite(value) and value >= 0):
                return f".{field} = {value:g}: it must be 0 (the family's default) or more"
        if not 1 <= kernel.block <= MAX_BLOCK:
            return f"blocking factor {kernel.block}: it must be from 1 to {MAX_BLOCK}"
        if not 1 <= kernel.lanes <= MAX_LANES:
            return f"{kernel.lanes} lanes: it must be from 1 to {MAX_LANES}"
        return None

    def nominal_takes(self) -> tuple[str, ...]:
        """The shape arrays of the family's own parametrisation (what verify's exact_evaluable counts)."""
        return self.shape_arrays

    def nominal_kernel(self):
        """A strict kernel of the family's own parametrisation, to ask the family about it."""
        from ..model.kernels import Kernel

        return Kernel(
            name="(family)",
            family=self.name,
            takes=self.nominal_takes(),
            isa=(),
            loop="",
            summary="",
            source="",
            lanes=1,
            block=1,
            known_bad=False,
            rounding_bound=0.0,
            tolerance=0.0,
        )

    # ---- verify
    def case_parts(self, count: int) -> list[Part]:
        """The generators of verify's cases; `count` rows per random generator."""
        raise NotImplementedError

    #: Maps that keep the exact answer (cases.coordinate_transforms), applied to a share of each block.
    transforms: dict = {}

    def case_batches(self, count: int, seed: int, batch_rows: int = cases.BATCH_ROWS):
        """verify's cases, streamed in CaseSets of about batch_rows rows (see cases.batches)."""
        return cases.batches(self, self.case_parts(count), seed, self.transforms, batch_rows)

    def cases(self, count: int, seed: int) -> CaseSet:
        """All of verify's cases at once (the rows case_batches streams)."""
        return cases.generate(self, self.case_parts(count), seed, self.transforms)

    def input_cases(self, path: Path) -> CaseSet:
        raise NotImplementedError

    def complete_columns(self, columns: dict) -> dict:
        """Fill arrays derived from others (e.g. r2 from r); the identity by default."""
        return columns

    def reference_key(self, kernel) -> Hashable:
        """What the oracle's answer for a kernel depends on (kernels sharing it share one evaluation)."""
        return kernel.tolerance

    def reference(self, case_set: CaseSet, kernel) -> Reference:
        raise NotImplementedError

    def answers(self, raw: np.ndarray) -> np.ndarray:
        """A kernel's answers as written by eval_*, in the form `compare` takes."""
        return raw

    def compare(
        self, kernel, case_set: CaseSet, reference: Reference, answers: np.ndarray
    ) -> np.ndarray | tuple[np.ndarray, np.ndarray]:
        """mismatch per row, or (mismatch, margin) when the margin depends on the answer
        (which of several wrong answers the kernel gave); else reference.margin is used."""
        raise NotImplementedError

    #: verify's loop check on the scene kinds as `run` makes them: the first kind (the densest)
    #: at N x M (M a multiple of every vector width, above a tile of 1 024 points; hits above
    #: 2^16 on a dense scene), the others with at most 16 shapes (their value ranges, not their
    #: size, are what the small scenes lack).
    run_check_size: tuple[int, int] = (64, 4096)

    def loop_scene(self, n: int, m: int, rng: np.random.Generator):
        """A small grid scene whose shapes hold most points, so that the points in a loop's
        tail (past the last whole vector) are inside: verify checks every loop against the
        oracle on such scenes, for every residue of M.  By default the family's first scene
        kind; override it when those scenes leave most points outside every shape."""
        return next(iter(self.scenes.values()))(n, m, int(rng.integers(2**31)))

    def applicable(self, kernel, case_set: CaseSet) -> np.ndarray:
        """Rows on which the kernel can be judged (inside its contract)."""
        return np.ones(len(case_set), dtype=bool)

    def self_check(self, case_set: CaseSet, rng: np.random.Generator, size: int) -> None:
        """Re-derive a sample with the Fraction reference; raise exact.OracleSelfCheckError.

        verify runs it on every case set.  The default checks nothing: a family whose
        oracle is more than a few exact comparisons should write its predicate a second
        time with reference.py's arithmetic (as sector and triangle do).
        """

    def describe_answer(self, value) -> str:
        return str(value)

    # ---- coverage (check/coverage.py): the cells verify's cases must fill
    #: What the coverage table counts on each side of a boundary piece (its two columns).
    coverage_sides: tuple[str, str] = ("inside", "outside")

    def coverage_cells(self) -> tuple[tuple[str, str], ...]:
        """The declared (boundary piece, parameter region) cells, each to hold rows on both sides."""
        return ()

    def coverage_rows(self, case_set: CaseSet, reference: Reference) -> tuple:
        """Each row's cell: (piece, first_side, regions, counted).

        piece: the boundary piece a row lies just beside (object array, "" for none);
        first_side: True on coverage_sides[0]; regions: one label array per parameter
        dimension (a row counts in one region of each, or in none where its label is None);
        counted: rows that count (for a predicate family, rows the oracle marks exact: a wrong
        answer there is a logic bug).
        """
        raise NotImplementedError(f"the {self.name} family declares no coverage cells")

    def exact_count(self, scene) -> int | None:
        """What the count loops must return on `scene`, from the exact oracle, where it is cheap
        to compute (run judges every row's count against it); None where it is not (too many
        tests, or an answer the oracle does not make unique, such as ties)."""
        return None

    def count_allowance(self, scene, kernels) -> tuple[dict[str, int], int | None] | None:
        """How far each kernel's count may lie from the exact count by float32 rounding alone, as
        ({kernel name: pairs}, pairs sampled or None for every pair); None where the family
        bounds no such difference (aabr: a tied extreme makes any checksum as right)."""
        return None

    def peers(self) -> tuple:
        """Kernels in Python (numpy, numba) a user would write instead (peers.Peer)."""
        return ()

    # ---- broadphase (optional): answer N x M without testing every pair
    def broadphases(self) -> tuple[str, ...]:
        """The run --broadphase choices; "none" is every pair, the family's kernels."""
        return ("none",)

    def default_broadphases(self, scene_kind: str) -> tuple[str, ...]:
        """What run measures when --broadphase is not given, for a scene kind."""
        return ("none",)

    #: What the family offers Python programs as attributes of the sectorbench package:
    #: name -> "module:attribute", imported when first used (e.g. its query function).
    public_api: Mapping[str, str] = {}

    # ---- query (optional): which points each shape holds, in the caller's process
    #: The scene `sectorbench query` uses by default; None: the family has no query.
    query_scene: str | None = None

    def prepare_query(self) -> None:
        """Build and load what query() needs ahead of the first call (which would otherwise do it)."""

    def query(self, shapes, points, *, broadphase: str = "auto", kernel: str = "auto", threads: int = 1, **limits):
        """CSR hits (offsets, indices, counts, total, index_build_s, query_s) of every shape;
        limits: the family's own bounds (e.g. max_hits)."""
        raise NotImplementedError(f"the {self.name} family has no query")

    def broadphase_engine(self, ffi, lib):
        """An object whose hits(name, columns, n, m, threads=, pool=) returns the family's hits
        (with .total, .index_build_s, .candidates), on a build's loaded library, whose
        warm(name, columns, m, threads=) does what must come before such calls are timed, and
        whose index_scatter(name, threads, m) says how their index is written (None: no index)."""
        raise NotImplementedError(f"the {self.name} family has no broadphase")

    def check_loops(
        self, kernel, reference: Reference, grid: np.ndarray, counts: dict[str, int], bound: float
    ) -> list[str]:
        """Problems of a kernel's loops on a loop-check scene (see verify._check_loops).

        grid: the grid loop's answers, flattened like reference; counts: what each count
        loop returned.  Returns one line per loop that is wrong beyond rounding.
        """
        raise NotImplementedError


class BooleanFamily(Family):
    """A predicate family: the answer is inside (1) or outside (0) per pair.

    A subclass gives its arrays and scenes, `case_parts(count)`, and its exact oracle as
    `exact_rows(columns, kernel)` on the case set's columns (float32, one row per pair)
    returning (inside, mismatch margin) or, with exact-evaluable rows
    worked out (see exact.exactness_margins), (inside, margin, exact, exact_evaluable);
    plus `self_check`.
    """

    oracle_arrays: tuple[str, ...]

    def exact_rows(self, columns: dict[str, np.ndarray], kernel) -> tuple:
        raise NotImplementedError

    def strict_inside(self, columns: dict[str, np.ndarray]) -> np.ndarray | None:
        """The exact oracle's inside flags of a strict kernel, one per row of float32 columns
        (the family's shape and point arrays), without margins; None: no cheap oracle."""
        return None

    def exact_count(self, scene) -> int | None:
        """The oracle's hit count over the scene, when it has at most EXACT_COUNT_MAX_TESTS tests."""
        if scene.tests > EXACT_COUNT_MAX_TESTS:
            return None
        with np.errstate(all="ignore"):
            inside = self.strict_inside(self._pair_columns(scene))
        return None if inside is None else int(np.count_nonzero(inside))

    def _pair_columns(self, scene, rows: np.ndarray | None = None) -> dict[str, np.ndarray]:
        """The scene's tests as one row per (shape, point) pair: every pair, or those numbered `rows`
        (pair i of a grid scene is shape i // M with point i % M)."""
        names = (*self.shape_arrays, *self.point_arrays)
        if scene.layout == "pairs":
            return {name: scene.column(name) if rows is None else scene.column(name)[rows] for name in names}
        n, m = scene.n_shapes, scene.n_points
        if rows is None:
            columns = {name: np.repeat(scene.column(name), m) for name in self.shape_arrays}
            columns.update({name: np.tile(scene.column(name), n) for name in self.point_arrays})
            return columns
        columns = {name: scene.column(name)[rows // m] for name in self.shape_arrays}
        columns.update({name: scene.column(name)[rows % m] for name in self.point_arrays})
        return columns

    def count_allowance(self, scene, kernels) -> tuple[dict[str, int], int | None]:
        """verify's allowance for a count loop (check_loops), on the scene `run` timed: the pairs a
        kernel may get wrong by rounding (margin <= its rounding bound, capped at the family's;
        not exact-evaluable; or outside its contract), and for a tolerant kernel the pairs its
        declared tolerance answers otherwise than the strict oracle, counted over every pair up to
        EXACT_COUNT_MAX_TESTS.  Beyond, over a seeded sample of that many pairs, scaled to the
        scene as a one-sided upper bound (x + 3 sqrt(x + 1) + 3 pairs of the sample for x seen:
        above 99 % confidence), so that a count is never called wrong for rounding the sample
        happened to miss."""
        sampled = scene.tests > EXACT_COUNT_MAX_TESTS
        rows = None
        if sampled:
            rows = np.sort(np.random.default_rng(0).choice(scene.tests, EXACT_COUNT_MAX_TESTS, replace=False))
        case_set = cases.case_set(self, [("run scene", self._pair_columns(scene, rows))])
        strict = None  # the exact count's own answers, for a tolerant kernel (below)
        allowance, seen = {}, {}
        for kernel in kernels:
            bound = min(kernel.rounding_bound or self.default_rounding_bound, self.max_rounding_bound)
            if self.max_tolerance is not None and kernel.tolerance > self.max_tolerance:
                kernel = replace(kernel, tolerance=self.max_tolerance)
            key = (self.reference_key(kernel), bound, getattr(kernel, "contract", ""), tuple(kernel.takes))
            if key not in seen:
                reference = self.reference(case_set, kernel)
                band = ((reference.margin <= bound) & ~reference.exact) | ~self.applicable(kernel, case_set)
                if kernel.tolerance:
                    # The count is judged against the strict oracle's (exact_count), but a tolerant
                    # kernel (recast_cross) is right to answer as its tolerant predicate does: the
                    # pairs where the two predicates disagree are allowed too, as verify allows them.
                    if strict is None:
                        with np.errstate(all="ignore"):
                            strict = self.strict_inside(case_set.columns)
                    if strict is not None:
                        band |= np.asarray(reference.answer, dtype=bool) != strict
                x = int(np.count_nonzero(band))
                if sampled:
                    x = math.ceil((x + 3 * math.sqrt(x + 1) + 3) * scene.tests / len(case_set))
                seen[key] = x
            allowance[kernel.name] = seen[key]
        return allowance, (len(case_set) if sampled else None)

    def input_cases(self, path: Path) -> CaseSet:
        """A user's case file: the family's arrays, text columns (labels, shown with a failing
        row) and an optional EXPECTED_COLUMN of answers (which verify checks against the oracle)."""
        data = read_npz(path)
        required, extra_missing = self.required_input(data)
        coordinates = {*self.shape_arrays, *self.point_arrays}
        labels = [
            name
            for name, values in data.items()
            if is_text(values) and name != EXPECTED_COLUMN and name not in coordinates  # text where a number belongs
        ]
        not_coordinates = (*labels, *([EXPECTED_COLUMN] if EXPECTED_COLUMN in data else []))
        check_input_arrays(path, self.name, data, required, extra_missing, not_coordinates)
        keep = set(self.shape_arrays) | set(self.point_arrays)
        case_set = cases.case_set(self, [("input", {k: v for k, v in data.items() if k in keep})])
        case_set.labels = {name: data[name].astype(str) for name in labels}
        if EXPECTED_COLUMN in data:
            case_set.expected = self.expected_answers(path, data[EXPECTED_COLUMN])
        return case_set

    def expected_answers(self, path: Path, values: np.ndarray) -> np.ndarray:
        """A case file's expected column as answers: bool, 0/1, or the words describe_answer uses."""
        words = {self.describe_answer(True): True, self.describe_answer(False): False}
        if is_text(values):
            text = values.astype(str)
            unknown = ~np.isin(text, list(words))
            if unknown.any():
                row = int(np.flatnonzero(unknown)[0])
                raise SectorbenchError(
                    f"{path}: {EXPECTED_COLUMN!r} row {row} is {str(text[row])!r}; "
                    f"write {' or '.join(map(repr, words))} (or bool, or 0/1)"
                )
            return np.array([words[t] for t in text], dtype=bool)
        if values.dtype.kind == "b":
            return values.astype(bool)
        if values.dtype.kind in "fiu":
            wrong = ~np.isin(values, (0, 1))
            if wrong.any():
                row = int(np.flatnonzero(wrong)[0])
                raise SectorbenchError(
                    f"{path}: {EXPECTED_COLUMN!r} row {row} is {values[row]}; the answer is bool (or 0/1: 1 = inside)"
                )
            return values.astype(bool)
        raise SectorbenchError(f"{path}: {EXPECTED_COLUMN!r} holds {values.dtype} values; the answer is bool")

    def required_input(self, data: dict) -> tuple[tuple[str, ...], list[str]]:
        """The arrays a case file must have, and any missing alternative groups to report."""
        return (*self.shape_arrays, *self.point_arrays), []

    def reference(self, case_set: CaseSet, kernel) -> Reference:
        with np.errstate(all="ignore"):
            rows = self.exact_rows(case_set.columns, kernel)
        if len(rows) == 2:  # no exact-evaluable rows worked out
            nothing = np.zeros(len(rows[0]), dtype=bool)
            rows = (*rows, nothing, nothing)
        return Reference(*rows)

    def answers(self, raw: np.ndarray) -> np.ndarray:
        return raw.astype(bool)

    def compare(self, kernel, case_set, reference, answers):
        return answers != reference.answer

    def describe_answer(self, value) -> str:
        return "inside" if value else "outside"

    def check_loops(self, kernel, reference, grid, counts, bound):
        """The grid loop pair by pair, and each count loop's hits, against the oracle.

        A pair float32 may get wrong by rounding (margin <= bound, not exact-evaluable)
        may differ; so may a count, by at most the number of such pairs.
        """
        band = (reference.margin <= bound) & ~reference.exact
        problems = []
        beyond = (grid.astype(bool) != reference.answer) & ~band
        if beyond.any():
            problems.append(f"eval_grid wrong on {int(beyond.sum())} pairs beyond rounding")
        expected, allowed = int(reference.answer.sum()), int(band.sum())
        for loop, hits in counts.items():
            if abs(hits - expected) > allowed:
                problems.append(f"{loop} counts {hits} hits, the oracle {expected} (rounding allows ±{allowed})")
        return problems
