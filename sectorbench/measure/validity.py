"""When "kernel time minus its NoOperation" measures the kernel, and what a table ranks by.

The NoOperation twin runs the kernel's loop with its loads and its counting but no
arithmetic; net = gross - NoOperation assumes the two costs add up.  They add up while the
loop is bound by its arithmetic and its data sit in the core's own caches.  When each block
of shapes streams the points from beyond L2, the NoOperation's time is mostly waiting for
loads, which the real loop hides under its arithmetic: subtracting it then removes time the
kernel never spent, and net understates the kernel's cost (docs/methodology.md, "When the
NoOperation subtraction holds", has the measurement).

The rule (`judge`), deterministic part first:
  1. the working set of a pass (`working_set`: what each block of shapes reads again, the
     points' arrays of a grid, everything of a pairs scene) exceeds the L2 cache read from
     sysfs — a fact of the scene, the kernel's record and the machine, never of a noisy
     sample; within L2 no row is marked;
  2. and the measurement shows the overlap: net cycles per test below the kernel's own
     derived bound (llvm-mca's, when there is one), or the NoOperation taking more than
     NOOP_SHARE_LIMIT of the gross time.
A loop far faster than its NoOperation (LOADS_SKIPPED_SHARE) skips the loads, so it is never
marked: its net-time note says why its net is 0.
A marked row says "memory-bound: net understates its cost"; where any row of a table is
marked, its speedups and its ranking use gross (end-to-end) time (`basis`).

Everything here is a pure function of values, so the rule is tested on numbers.
"""

from __future__ import annotations

from collections.abc import Iterable, Mapping, Sequence
from dataclasses import dataclass

#: Past this share of the gross time, a NoOperation beyond L2 marks the row: its time is then
#: mostly loads the kernel's arithmetic may hide entirely, so net may be understated by up to
#: a third (0.25 / 0.75) — more than the differences between kernels a table is read for.
#: Measured here (Zen 3, L2 512 KiB, game scene, -O3 -march=native): beyond L2 the SIMD
#: kernels' NoOperations take 0.5 to 0.9 of the gross, scalar ones 0.1 to 0.4.
NOOP_SHARE_LIMIT = 0.25
#: A kernel's loop makes at least its NoOperation's loads, so its gross time is not far below the
#: NoOperation's.  Past this share (the NoOperation twice the kernel's whole time) the loop does
#: not make them (optimised away, or a different loop shape, as the net-time note says): no load
#: time can hide under its arithmetic, so the share is no evidence of overlap and must neither
#: mark the row memory-bound nor switch the table to gross time.  Measured here: a constant
#: kernel ran in 1/1000 of its NoOperation's time; memory-bound SIMD loops' shares are 0.5 to 0.9.
LOADS_SKIPPED_SHARE = 2.0
#: The cache level whose overflow makes the subtraction suspect: each core's own (private)
#: L2; beyond it every block of shapes re-reads the points from a shared L3 or from memory.
PRIVATE_LEVEL = 2
#: The bytes of one value of the scenes' arrays (float32).
VALUE_BYTES = 4

MEMORY_BOUND = "memory-bound: net understates its cost"
NET = "net"
GROSS = "gross"


@dataclass(frozen=True)
class WorkingSet:
    """What one pass over a scene touches, in bytes."""

    touched_bytes: int  # distinct bytes a pass reads: points, the kernel's shape arrays, extra arrays
    reused_bytes: int  # what each block of shapes reads again, so must stay cached: the points of a grid
    streamed_bytes: int  # bytes loaded per pass: the points once per block of shapes, the rest once


def working_set(
    n_shapes: int,
    n_points: int,
    point_arrays: int,
    shape_arrays: int,
    layout: str = "grid",
    block: int = 1,
    extra_bytes: int = 0,
) -> WorkingSet:
    """The working set of a pass: `point_arrays` arrays of n_points values, `shape_arrays`
    (the kernel's `takes`) of n_shapes values, plus the family's extra arrays.

    A grid tests every shape against every point: each block of `block` shapes loads every
    point once, so the points are streamed ceil(N / block) times and must stay cached in
    between, while a shape's values (and its extra data, e.g. a polygon's vertices) are read
    once a pass.  Pairs (shape j against point j) read everything once a pass, and all of it
    again the next pass.
    """
    shape_rows = n_points if layout == "pairs" else n_shapes
    points = point_arrays * n_points * VALUE_BYTES
    shapes = shape_arrays * shape_rows * VALUE_BYTES
    touched = points + shapes + extra_bytes
    if layout == "pairs":
        return WorkingSet(touched, touched, touched)
    blocks = -(-n_shapes // max(1, block))
    return WorkingSet(touched, points, points * blocks + shapes + extra_bytes)


def private_cache_bytes(caches: Iterable[Mapping]) -> int | None:
    """The size of the core's L2 (data or unified) from environment.cpu_caches(), or None."""
    sizes = [
        c["size_bytes"]
        for c in caches
        if c.get("level") == PRIVATE_LEVEL and c.get("type") in ("Data", "Unified") and c.get("size_bytes")
    ]
    return max(sizes) if sizes else None


def cache_level(size_bytes: int, caches: Iterable[Mapping]) -> str | None:
    """The innermost data cache `size_bytes` fits in ("L1", "L2", ...), "memory" past the
    last, None when the caches are unknown."""
    data = sorted(
        (c["level"], c["size_bytes"]) for c in caches if c.get("type") in ("Data", "Unified") and c.get("size_bytes")
    )
    if not data:
        return None
    return next((f"L{level}" for level, size in data if size_bytes <= size), "memory")


@dataclass(frozen=True)
class Validity:
    net_valid: bool
    reason: str | None  # why net does not hold (MEMORY_BOUND and the evidence), None when it does
    #: Within L2, the same evidence (net below the loop's bound, a large NoOperation share): the
    #: NoOperation's own loop overhead may overlap the kernel's arithmetic (the fastest SIMD
    #: loops).  Said, but not ranked on: no cache overflows, and the rule's gate is that fact.
    note: str | None = None


def judge(
    working_set_bytes: int,
    l2_bytes: int | None,
    gross_s: float,
    noop_s: float | None,
    net_s: float | None,
    gross_cycles_per_test: float | None = None,
    bound_cycles_per_test: float | None = None,
) -> Validity:
    """Whether a row's net time measures its kernel (see the module doc for the rule).

    With no L2 size known (no sysfs) the working set cannot clear a row, so the measured
    evidence decides alone.  A bound may be missing (no llvm-mca, a loop that calls out):
    the NoOperation's share decides then.
    """
    if noop_s is None or net_s is None or not gross_s or gross_s <= 0:
        return Validity(True, None)
    if noop_s / gross_s > LOADS_SKIPPED_SHARE:  # not the loop the NoOperation twins: nothing overlaps
        return Validity(True, None)
    evidence = []
    if bound_cycles_per_test and gross_cycles_per_test:
        net_cycles = gross_cycles_per_test * net_s / gross_s
        if net_cycles < bound_cycles_per_test:
            evidence.append(f"net {net_cycles:.3g} cycles/test, below the loop's bound {bound_cycles_per_test:.3g}")
    share = noop_s / gross_s
    if share > NOOP_SHARE_LIMIT:
        evidence.append(f"NoOperation {share:.0%} of the gross time (over {NOOP_SHARE_LIMIT:.0%})")
    if l2_bytes is not None and working_set_bytes <= l2_bytes:
        note = (
            f"{'; '.join(evidence)}: the NoOperation's loop overhead may overlap this kernel's arithmetic, "
            "so read net as a lower estimate (the data fit in L2: not ranked by gross time)"
            if evidence
            else None
        )
        return Validity(True, None, note)
    if not evidence:
        return Validity(True, None)
    where = (
        f"working set {working_set_bytes / 2**10:,.0f} KiB > L2 {l2_bytes / 2**10:,.0f} KiB"
        if l2_bytes is not None
        else f"working set {working_set_bytes / 2**10:,.0f} KiB, cache sizes unknown"
    )
    return Validity(False, f"{MEMORY_BOUND} ({where}; {'; '.join(evidence)}): ranked by gross time")


def basis(net_valid: Sequence[bool | None]) -> str:
    """What a table's speedups and ranking use: gross time where any row's net does not hold."""
    return GROSS if any(valid is False for valid in net_valid) else NET
