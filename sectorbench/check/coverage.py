"""Coverage by construction, counted: how many rows of verify's cases fill each cell.

A family declares its cells (families/base.py: coverage_cells): a boundary piece (the
sector's arc, an edge ray, the apex; a triangle's edge or vertex; ...) crossed with a
region of one parameter dimension (half-angle bin, radius magnitude, offset, shape,
...).  Its coverage_rows says which piece each row lies just beside, on which side,
in which region of each dimension, and whether the row counts (for a predicate family:
the oracle marks it exact, so a kernel's wrong answer there is a logic bug, never
rounding).  `coverage` streams the same batches verify checks, runs the oracle only
(no kernel is built), and counts rows per cell and side; a cell empty on either side
is a hole in verify's cases.
"""

from __future__ import annotations

from dataclasses import dataclass

import numpy as np

from .. import families
from ..errors import SectorbenchError
from ..model import cases


@dataclass(frozen=True)
class CellCount:
    piece: str
    region: str
    first: int  # rows on the family's first side (inside)
    second: int  # rows on its second side (outside)

    @property
    def filled(self) -> bool:
        return self.first > 0 and self.second > 0


@dataclass(frozen=True)
class CoverageResult:
    family: str
    cases: int  # --cases the rows were generated for
    seed: int
    rows: int  # rows examined
    sides: tuple[str, str]
    cells: tuple[CellCount, ...]
    undeclared: dict  # counted rows whose (piece, region) no declared cell names

    @property
    def empty(self) -> list[CellCount]:
        return [cell for cell in self.cells if not cell.filled]

    @property
    def passed(self) -> bool:
        return bool(self.cells) and not self.empty

    def to_dict(self) -> dict:
        return {
            "kind": "coverage",
            "family": self.family,
            "cases": self.cases,
            "seed": self.seed,
            "rows": self.rows,
            "sides": list(self.sides),
            "cells": [
                {"piece": c.piece, "region": c.region, self.sides[0]: c.first, self.sides[1]: c.second}
                for c in self.cells
            ],
        }


def coverage(family_name: str, count: int, seed: int = 0, batch_rows: int = cases.BATCH_ROWS) -> CoverageResult:
    """Rows per declared cell of verify's generated cases (count and seed as verify's)."""
    family = families.get(family_name)
    kernel = family.nominal_kernel()
    declared = family.coverage_cells()
    if not declared:  # Family's default: nothing to count, and coverage_rows would raise
        raise SectorbenchError(
            f"the {family.name} family declares no coverage cells (Family.coverage_cells): "
            f"--coverage has nothing to count; verify --family {family.name} checks its kernels"
        )
    tallies: dict[tuple[str, str], list[int]] = {cell: [0, 0] for cell in declared}
    undeclared: dict[str, int] = {}
    rows = 0
    for case_set in family.case_batches(count, seed, batch_rows):
        rows += len(case_set)
        reference = family.reference(case_set, kernel)
        piece, first_side, regions, counted = family.coverage_rows(case_set, reference)
        keep = counted & (piece != "")
        for labels in regions:
            here = keep & np.not_equal(labels, None)  # None: the row counts in no region of this dimension
            keys = np.char.add(np.char.add(piece[here].astype(str), "\t"), labels[here].astype(str))
            sides = first_side[here]
            for key, side, n in zip(*_unique_pairs(keys, sides)):
                cell = tuple(key.split("\t"))
                if cell in tallies:
                    tallies[cell][0 if side else 1] += n
                else:
                    undeclared[" / ".join(cell)] = undeclared.get(" / ".join(cell), 0) + n
    cells = tuple(CellCount(piece, region, *tallies[(piece, region)]) for piece, region in declared)
    return CoverageResult(family.name, count, seed, rows, family.coverage_sides, cells, undeclared)


def _unique_pairs(keys: np.ndarray, sides: np.ndarray):
    """(key, side, count) for each distinct (key, side)."""
    if not len(keys):
        return [], [], []
    combined = np.char.add(np.where(sides, "1", "0"), keys)
    unique, counts = np.unique(combined, return_counts=True)
    return [u[1:] for u in unique], [u[0] == "1" for u in unique], [int(n) for n in counts]
