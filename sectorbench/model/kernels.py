"""Kernel records read from the C table, CPU support, and selection by name."""

from __future__ import annotations

import os
from dataclasses import asdict, dataclass

#: Features to treat as missing (comma-separated), e.g. to measure the fallbacks of a
#: machine without AVX-512 on one that has it.  The CLI's --disable-isa fills it too.
DISABLE_ISA_ENV = "SECTORBENCH_DISABLE_ISA"


@dataclass(frozen=True)
class Kernel:
    """One row of the C table (sb_abi.h's sb_kernel), as Python sees it."""

    name: str
    family: str
    takes: tuple[str, ...]  # the shape arrays it reads, in parameter order
    isa: tuple[str, ...]  # CPU features it needs
    loop: str  # loop shape, e.g. "sse2 x4 b1"
    summary: str
    source: str  # file:line of its row
    lanes: int
    block: int
    known_bad: bool  # a known-bad reference: run only when named
    rounding_bound: float  # 0: the family's default
    tolerance: float  # declared tolerance, 0 for a strict kernel
    #: Why this kernel cannot run here (a missing CPU feature), or None.
    skip_reason: str | None = None
    #: The status of its rows when it cannot run: "skipped" (the CPU lacks a feature), or
    #: "crashed" / "timed-out" (its --source file's constructor, or the build's own library, killed
    #: or hung the build's load), "build-failed" (the compiler rejected its build, or the dynamic
    #: loader its library: measure/builds.py).
    unrun_status: str = "skipped"
    #: "C" for a row of the library, "python" for a peer (sectorbench/peers.py).
    language: str = "C"
    #: Preconditions beyond the family's (the row's .contract, e.g. "unit u"), which verify honours.
    contract: str = ""
    #: The loops it has ("inline", "call": a C row; a peer or a broadphase has one, "inline").
    modes: tuple[str, ...] = ("inline", "call")
    #: Why it has no NoOperation twin (a loop timed end to end), or None when it has one.
    noop_reason: str | None = None
    #: Measured when no kernel is named (False: a peer, a broadphase, run only when asked for).
    by_default: bool = True
    #: A row of a --source file: untrusted, so its NoOperation twin stands for itself alone.
    from_source: bool = False

    @property
    def is_default(self) -> bool:
        return not self.known_bad and self.by_default

    @property
    def is_peer(self) -> bool:
        return self.language != "C"

    @property
    def runnable(self) -> bool:
        return self.skip_reason is None

    @property
    def overhead_key(self) -> str:
        """Kernels with the same loop shape and arity share one NoOperation measurement; a
        --source row's twin is its own (a twin that counted hits would make every net of its
        shape wrong)."""
        shared = f"noop[{self.loop}, {len(self.takes)} arrays]"
        return f"{shared} of {self.name}" if self.from_source else shared

    def to_dict(self) -> dict:
        return {**asdict(self), "takes": list(self.takes), "isa": list(self.isa), "modes": list(self.modes)}

    @classmethod
    def from_dict(cls, row: dict) -> Kernel:
        return cls(**{**row, "takes": tuple(row["takes"]), "isa": tuple(row["isa"]), "modes": tuple(row["modes"])})


#: What separates the names a --kernels option lists (cli.options.comma_list, which also strips
#: the spaces around each).
NAME_SEPARATOR = ","


def name_problem(name: str) -> str | None:
    """Why no --kernels option can select a row by this name, or None: a --source row named
    "a,b" ran in every default run and could not be chosen alone, nor left out."""
    if not name.strip():
        return "it has no name"
    if NAME_SEPARATOR in name:
        return f"its name {name!r} holds {NAME_SEPARATOR!r}, which separates the names --kernels lists"
    if name != name.strip():
        return f"its name {name!r} starts or ends with a space, which --kernels strips"
    return None


def parse_takes(text: str) -> tuple[str, ...]:
    """The row's `takes` tuple as the C preprocessor spelled it: "(cx, cy, r2)"."""
    return tuple(name.strip() for name in text.strip().strip("()").split(",") if name.strip())


def disabled_features(extra: tuple[str, ...] = ()) -> frozenset[str]:
    from_env = os.environ.get(DISABLE_ISA_ENV, "")
    return frozenset(f.strip() for f in (*from_env.split(","), *extra) if f.strip())


#: How skip_reason's two sentences end: the kernel needs a feature this run's CPU lacks, or that
#: --disable-isa masks.  A row skipped so says what the machine is, not what its code does.
_LACKS_CPU = ", which this CPU lacks"
_DISABLED = f", disabled by --disable-isa/${DISABLE_ISA_ENV}"


def skip_reason(isa: tuple[str, ...], cpu_has: dict[str, bool], disabled: frozenset[str]) -> str | None:
    masked = [f for f in isa if f in disabled]
    if masked:
        return f"needs {', '.join(masked)}{_DISABLED}"
    missing = [f for f in isa if not cpu_has.get(f, False)]
    if missing:
        return f"needs {', '.join(missing)}{_LACKS_CPU}"
    return None


def lacks_cpu_feature(reason: str | None) -> bool:
    """Whether a skipped row's reason is skip_reason's: the machine (or --disable-isa) lacks a
    feature the kernel needs."""
    return bool(reason) and reason.startswith("needs ") and reason.endswith((_LACKS_CPU, _DISABLED))
