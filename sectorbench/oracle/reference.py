"""An independent reference for the oracles: the extended reals spelled out with Fractions.

Each family writes its predicate a second time, one row at a time, from its definition,
with these operations; the oracle's self-check compares a sample of rows with it.  It
shares no code with `exact.py` (no filter, no scaling to integers, no numpy
arithmetic), so a bug in one is unlikely to be repeated in the other.

A finite value is a Fraction, ±∞ is the float ±inf, and an undefined form (∞ − ∞,
0·∞), like a NaN input, is None.
"""

from __future__ import annotations

import math
from fractions import Fraction

import numpy as np


def extended(value) -> Fraction | float | None:
    """Exact value of a float32 input: a Fraction, ±inf as a float, None for NaN."""
    x = float(value)
    if math.isnan(x):
        return None
    if math.isinf(x):
        return x
    with np.errstate(over="ignore"):
        if float(np.float32(x)) != x:
            raise ValueError(f"{value!r} is not a float32 value")
    return Fraction(x)


def is_infinite(x) -> bool:
    return isinstance(x, float)


def neg(x):
    return None if x is None else -x


def absolute(x):
    return None if x is None else abs(x)


def add(x, y):
    if x is None or y is None:
        return None
    if is_infinite(x) and is_infinite(y) and x != y:
        return None  # ∞ − ∞
    if is_infinite(x):
        return x
    if is_infinite(y):
        return y
    return x + y


def sub(x, y):
    return add(x, neg(y))


def mul(x, y):
    if x is None or y is None:
        return None
    if is_infinite(x) or is_infinite(y):
        if x == 0 or y == 0:
            return None  # 0·∞
        return math.inf if (x > 0) == (y > 0) else -math.inf
    return x * y


def less(x, y) -> bool:
    """x < y over the extended reals; false if either side is undefined."""
    return x is not None and y is not None and x < y


def margin_kind(x, y) -> str:
    """The margin class of the constraint comparing x with y (see exact.margin_class)."""
    if x is None or y is None:
        return "undefined"  # margin NaN
    if is_infinite(x) or is_infinite(y):
        return "infinite"  # margin +inf
    return "zero" if x == y else "finite"


def sign_of(x) -> int:
    """The sign of an extended value, 0 for an undefined one."""
    return 0 if x is None else (x > 0) - (x < 0)
