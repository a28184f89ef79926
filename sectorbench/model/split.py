"""The one splitter of shapes among threads: run, verify and the query API all use it.

Contiguous shares, as even as integers allow (their sizes differ by at most one), in order:
a shape's answers never depend on which share it falls in, so hit counts are the same for
every thread count.
"""

from __future__ import annotations


def shape_ranges(n_shapes: int, parts: int) -> list[tuple[int, int]]:
    """[0, n_shapes) as `parts` contiguous (begin, end) ranges; some are empty when parts > n_shapes."""
    if parts < 1:
        raise ValueError(f"parts must be at least 1 (got {parts})")
    bounds = [n_shapes * k // parts for k in range(parts + 1)]
    return list(zip(bounds, bounds[1:]))
