"""Typed requests and replies between the parent (worker.Worker) and a worker (server.Server).

Every message is a frozen dataclass; on the wire it is one JSON object {"type": class name,
...fields}, framed by multiprocessing.connection on the private channel (never the worker's
stdout, which a kernel may print to).  decode() rebuilds the dataclass and refuses any other
type, so a reply is either what the request asked for or a Failure.  Each request is numbered
and its reply carries the number: a reply to another request (a kernel's forked child
answering, or a kernel writing into the channel) is told apart from the answer.
"""

from __future__ import annotations

import dataclasses
import json
from dataclasses import dataclass, field

#: A shape range [begin, end) of the current scene; None in a request means every shape.
Shapes = tuple[int, int]


@dataclass(frozen=True)
class LoopRef:
    """Which loop to run: a kernel's (or, noop=True, its NoOperation twin), in a mode, split
    among `threads` threads, over `shapes` (None: all of them)."""

    kernel: str
    mode: str = "inline"
    noop: bool = False
    threads: int = 1
    shapes: Shapes | None = None


@dataclass(frozen=True)
class LoopExtras:
    """What a loop reports beyond time: every field declared here, None when it does not apply.

    index_build_s/index_bytes: a prepared index (once, at warm-up) or a broadphase's index
    (each sample: it is built inside the timed pass); candidates/narrow_phase/broadphase/
    index_scatter: a broadphase's pairs tested, its narrow phase's kernel, its own name and how
    its index is written; jit_s: a JIT peer's first call, before timing."""

    jit_s: float | None = None
    index_build_s: float | None = None
    index_bytes: int | None = None
    candidates: int | None = None
    narrow_phase: str | None = None
    broadphase: str | None = None
    index_scatter: str | None = None


# ---------------------------------------------------------------- requests


@dataclass(frozen=True)
class Describe:
    """The build's kernels (every timed loop's record) and what the worker found."""


@dataclass(frozen=True)
class LoadScene:
    path: str


@dataclass(frozen=True)
class Calibrate:
    loop: LoopRef
    min_time_s: float


@dataclass(frozen=True)
class Sample:
    loop: LoopRef
    calls: int


@dataclass(frozen=True)
class Evaluate:
    """The kernel's answers on the current scene, written as .npy into the worker's answers
    file (a descriptor it was started with: server.main's --answers); for a grid scene,
    rows `shapes` only (None: every shape).  With `count_mode` ("inline", "call"), a pairs
    scene's rows each counted by that count loop instead (loops.CRowLoop.row_counts)."""

    kernel: str
    shapes: Shapes | None = None
    count_mode: str | None = None


@dataclass(frozen=True)
class Clock:
    """The clock in MHz, from sb_dependent_multiplies."""


@dataclass(frozen=True)
class Release:
    """Release the kernel's prepared index on the current scene (if it has one), before the
    next scene is loaded: in a request of its own, so that a .release() that crashes is
    charged to its kernel."""

    kernel: str


# ---------------------------------------------------------------- replies


@dataclass(frozen=True)
class Described:
    kernels: list[dict]  # kernels.Kernel.to_dict() of every timed loop
    fp_environment: dict  # the build's, recorded when the library was loaded
    counters: dict  # {"available": bool, "reason": str | None}
    cpus: int
    cpu_features: list[str]
    name_clashes: list[str]  # rows named as an earlier row of the build: "name (/a/k.c:L and /b/k.c:L)"
    fp_change_at_load: str | None = None  # how loading the library changed it (restored at once)


@dataclass(frozen=True)
class SceneLoaded:
    tests: int


@dataclass(frozen=True)
class Timed:
    """Seconds per call and the hits of the last call, over `calls` calls (a calibration's
    final count, or a sample's); cycles and instructions per call where counters work.
    hits_seen: the lowest and highest counts of all its calls where they differ from `hits`
    (a kernel wrong on some calls only), else empty."""

    seconds: float
    hits: int
    calls: int
    hits_seen: list[int] = field(default_factory=list)
    cycles: float | None = None
    instructions: float | None = None
    extras: LoopExtras = field(default_factory=LoopExtras)
    fp_change: str | None = None  # how the kernel left the FP environment, if it changed it
    #: What else of the worker process it changed (process_state): the worker is replaced.
    process_change: str | None = None


@dataclass(frozen=True)
class Evaluated:
    answers: int
    fp_change: str | None = None
    process_change: str | None = None


@dataclass(frozen=True)
class ClockRead:
    mhz: float


@dataclass(frozen=True)
class Released:
    released: bool  # False: the kernel had no index
    process_change: str | None = None


@dataclass(frozen=True)
class Failure:
    """The worker caught an exception handling the request; process_change: what the row
    had changed in the worker process meanwhile (the likely cause: no descriptor left)."""

    error: str
    process_change: str | None = None


MESSAGES = {
    cls.__name__: cls
    for cls in (
        Describe,
        LoadScene,
        Calibrate,
        Sample,
        Evaluate,
        Clock,
        Release,
        Described,
        SceneLoaded,
        Timed,
        Evaluated,
        ClockRead,
        Released,
        Failure,
    )
}
#: Fields holding a nested message, by name.
_NESTED = {"loop": LoopRef, "extras": LoopExtras}


class ProtocolError(ValueError):
    """Bytes on the channel that are not a message."""


def encode(message, request_id: int) -> bytes:
    """A request with its number, or a reply with the number of the request it answers."""
    fields = {"type": type(message).__name__, "request_id": request_id, **dataclasses.asdict(message)}
    return json.dumps(fields).encode()


def _build(cls, fields: dict):
    names = {f.name for f in dataclasses.fields(cls)}
    if not set(fields) <= names:
        raise ProtocolError(f"{cls.__name__} has no field {', '.join(sorted(set(fields) - names))}")
    values = {}
    for name, value in fields.items():
        if name in _NESTED and isinstance(value, dict):
            value = _build(_NESTED[name], value)
        elif name == "shapes" and value is not None:
            value = tuple(value)
        values[name] = value
    return cls(**values)


def decode(data: bytes) -> tuple[int, object]:
    """The request number and the message."""
    try:
        fields = json.loads(data)
        cls = MESSAGES[fields.pop("type")]
        request_id = fields.pop("request_id")
        if not isinstance(request_id, int):
            raise TypeError(f"request_id {request_id!r}")
        return request_id, _build(cls, fields)
    except (ValueError, KeyError, TypeError, AttributeError) as exc:
        raise ProtocolError(f"not a message: {data[:80]!r} ({type(exc).__name__}: {exc})") from None
