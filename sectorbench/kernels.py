"""Kernel records read from the C table, CPU support, and selection by name."""

from __future__ import annotations

import os
from dataclasses import dataclass

from . import SectorbenchError

#: Features to treat as missing (comma-separated), e.g. to measure the fallbacks of a
#: machine without AVX-512 on one that has it.  The CLI's --disable-isa fills it too.
DISABLE_ISA_ENV = "SECTORBENCH_DISABLE_ISA"

SB_NOOP = 1
SB_NOT_DEFAULT = 2


@dataclass(frozen=True)
class Kernel:
    name: str
    family: str
    isa: tuple[str, ...]
    overhead: str
    params: str
    summary: str
    source: str
    lanes: int
    flags: int
    rounding_bound: float
    tolerance: float
    #: Why this kernel cannot run here (a missing CPU feature), or None.
    skip_reason: str | None = None

    @property
    def is_noop(self) -> bool:
        return bool(self.flags & SB_NOOP)

    @property
    def is_default(self) -> bool:
        return not self.flags & (SB_NOOP | SB_NOT_DEFAULT)

    @property
    def runnable(self) -> bool:
        return self.skip_reason is None

    def to_dict(self) -> dict:
        return {"name": self.name, "family": self.family, "isa": list(self.isa), "overhead": self.overhead,
                "params": self.params, "summary": self.summary, "source": self.source, "lanes": self.lanes, "flags": self.flags,
                "rounding_bound": self.rounding_bound, "tolerance": self.tolerance, "skip_reason": self.skip_reason}

    @classmethod
    def from_dict(cls, row: dict) -> "Kernel":
        return cls(**{**row, "isa": tuple(row["isa"])})


def disabled_features(extra: tuple[str, ...] = ()) -> frozenset[str]:
    from_env = os.environ.get(DISABLE_ISA_ENV, "")
    return frozenset(f.strip() for f in (*from_env.split(","), *extra) if f.strip())


def skip_reason(isa: tuple[str, ...], cpu_has: dict[str, bool], disabled: frozenset[str]) -> str | None:
    masked = [f for f in isa if f in disabled]
    if masked:
        return f"needs {', '.join(masked)}, disabled by --disable-isa/${DISABLE_ISA_ENV}"
    missing = [f for f in isa if not cpu_has.get(f, False)]
    if missing:
        return f"needs {', '.join(missing)}, which this CPU lacks"
    return None


def select(kernels: list[Kernel], names: list[str] | None, family: str) -> list[Kernel]:
    """The kernels to measure: the family's default set, or exactly `names` in that order.

    NoOperation kernels are not selected here: the harness adds each kernel's own.
    """
    by_name = {k.name: k for k in kernels}
    if not names:
        return [k for k in kernels if k.family == family and k.is_default]
    unknown = [n for n in names if n not in by_name]
    if unknown:
        known = ", ".join(k.name for k in kernels if not k.is_noop)
        raise SectorbenchError(f"unknown kernel {', '.join(unknown)}; known kernels: {known}")
    chosen = [by_name[n] for n in dict.fromkeys(names)]
    wrong_family = [k.name for k in chosen if k.family != family]
    if wrong_family:
        raise SectorbenchError(f"kernel {', '.join(wrong_family)} is not of the {family} family "
                               f"(choose the family with --family or a scene of that family)")
    return chosen
