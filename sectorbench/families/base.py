"""What a family is: the one home of everything the harness asks about a kind of shape.

A family owns its array names, its scene kinds, its exact oracle, its adversarial
cases, the signature of its kernels (its C side: which loop template its rows use)
and how a kernel's answer is compared with the oracle.  The harness (build, worker,
timing, runner, verify, results, report, cli) asks these methods and never names a
family.  `BooleanFamily` does the work shared by predicate families ("is point p
inside shape q?"), whose answer is one bit per (shape, point) pair.
"""

from __future__ import annotations

from collections.abc import Callable, Hashable, Mapping
from dataclasses import dataclass
from pathlib import Path

import numpy as np

from .. import exact
from ..cases import DEFAULT, CaseSet, check_input_arrays, read_npz

#: A scene generator: (n shapes, m points, seed) -> Scene.
SceneGenerator = Callable[[int, int, int], "object"]


@dataclass(frozen=True)
class Reference:
    """The oracle on a case set, for one kernel's contract.

    answer: the exact answer per row; margin: how many float32 roundings a wrong
    answer of that row is from being right (0 exactly on the boundary, +inf where
    rounding cannot explain it, NaN for a row with a NaN input).
    """

    answer: np.ndarray
    margin: np.ndarray


class Family:
    """The interface; see BooleanFamily for a predicate family's defaults."""

    name: str
    shape_noun: str  # plural noun of its shapes: the key of N in a result's scene
    shape_arrays: tuple[str, ...]  # per-shape float32 arrays of its scenes
    point_arrays: tuple[str, ...] = ("px", "py")
    scenes: Mapping[str, SceneGenerator] = {}
    default_rounding_bound: float = 8.0  # verify's bound for a row that declares none
    answer_dtype = np.uint8  # what eval_grid / eval_pairs write per test

    # ---- kernels
    def inputs(self, kernel) -> tuple[str, ...]:
        """The columns a kernel reads: its shape arrays, then the points."""
        return (*kernel.takes, *self.point_arrays)

    def check_kernel(self, kernel) -> str | None:
        """Why a kernel row does not fit this family (unknown arrays), or None."""
        unknown = [name for name in kernel.takes if name not in self.shape_arrays]
        if unknown:
            return f"takes {', '.join(unknown)}, which the {self.name} family has no arrays for"
        return None

    # ---- verify
    def cases(self, count: int, seed: int) -> CaseSet:
        raise NotImplementedError

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
    ) -> tuple[np.ndarray, np.ndarray]:
        """(mismatch, margin) per row."""
        raise NotImplementedError

    def applicable(self, kernel, case_set: CaseSet) -> np.ndarray:
        """Rows on which the kernel can be judged (inside its contract)."""
        return np.ones(len(case_set), dtype=bool)

    def exact_boundary(self, kernel, case_set: CaseSet) -> np.ndarray:
        """Rows exactly on the boundary the kernel is judged against."""
        return case_set.exact_boundary[DEFAULT]

    def self_check(self, case_set: CaseSet, rng: np.random.Generator, size: int) -> None:
        """Re-derive a sample with the Fraction reference; raise exact.OracleSelfCheckError.

        verify runs it on every case set.  The default checks nothing: a family whose
        oracle is more than a few exact comparisons should write its predicate a second
        time with reference.py's arithmetic (as sector and triangle do).
        """

    def describe_answer(self, value) -> str:
        return str(value)


class BooleanFamily(Family):
    """A predicate family: the answer is inside (1) or outside (0) per pair.

    A subclass gives its arrays and scenes, `case_generator(count, seed)`, and its exact
    oracle as `exact_rows(columns, kernel) -> (inside, mismatch margin)` on the columns
    of its own `oracle_arrays` (float32, one row per pair), plus `self_check`.
    """

    oracle_arrays: tuple[str, ...]

    def case_generator(self, count: int, seed: int) -> CaseSet:
        raise NotImplementedError

    def exact_rows(self, columns: dict[str, np.ndarray], kernel) -> tuple[np.ndarray, np.ndarray]:
        raise NotImplementedError

    def cases(self, count: int, seed: int) -> CaseSet:
        return self.case_generator(count, seed)

    def input_cases(self, path: Path) -> CaseSet:
        from ..cases import Builder

        data = read_npz(path)
        required, extra_missing = self.required_input(data)
        check_input_arrays(path, self.name, data, required, extra_missing)
        builder = Builder(self)
        keep = set(self.shape_arrays) | set(self.point_arrays)
        builder.add("input", {k: v for k, v in data.items() if k in keep})
        return builder.build()

    def required_input(self, data: dict) -> tuple[tuple[str, ...], list[str]]:
        """The arrays a case file must have, and any missing alternative groups to report."""
        return (*self.shape_arrays, *self.point_arrays), []

    def reference(self, case_set: CaseSet, kernel) -> Reference:
        columns = {name: case_set.columns[name] for name in self.oracle_arrays}
        with np.errstate(all="ignore"):
            inside, margin = self.exact_rows(columns, kernel)
        return Reference(inside, margin)

    def answers(self, raw: np.ndarray) -> np.ndarray:
        return raw.astype(bool)

    def compare(self, kernel, case_set, reference, answers):
        return answers != reference.answer, reference.margin

    def exact_boundary(self, kernel, case_set):
        if kernel.tolerance:  # the tolerant predicate's boundary lies elsewhere
            return np.zeros(len(case_set), dtype=bool)
        return super().exact_boundary(kernel, case_set)

    def describe_answer(self, value) -> str:
        return "inside" if value else "outside"


def strict_all_positive(nan_rows, signs, margins) -> tuple[np.ndarray, np.ndarray]:
    """(inside, mismatch margin) of a predicate that holds when every constraint is > 0."""
    inside = np.all(signs > 0, axis=1)
    return inside, exact.mismatch_margin(margins, [signs <= 0], nan_rows)
