"""The shape of a saved result, checked as a whole before anything else is done with it.

The schema is declarative: the fields of the dataclasses that hold a result
(results.RunResult, results.KernelResult) and their annotations are the types a saved
file must have; SAMPLE_RULES adds what a type cannot say (samples are finite, times
positive).  `check_run` walks a parsed JSON document against them and raises
SectorbenchError naming the first bad place ("results[3].samples_s[7] is 'fast', not a
number") — never a TypeError or KeyError from deeper down, long after a build.

Unknown fields are allowed (a newer sectorbench's optional additions); missing fields
take their defaults, as in older files, except those without a default.
"""

from __future__ import annotations

import functools
import math
import types
import typing
from dataclasses import MISSING, fields, is_dataclass

from ..errors import SectorbenchError

#: Per-field rules beyond the type, for lists of seconds.  Measured pass times and index
#: build times are > 0 (stats works on their logarithms); a net time (pass minus its
#: NoOperation) may be zero or negative but is a real number.
SAMPLE_RULES = {
    "samples_s": "positive",
    "overhead_samples_s": "positive",
    "index_build_samples_s": "positive",
    "net_samples_s": "finite",
}
#: The shortest time a pass or a build can take: a subnormal "time" divided by a pass's tests
#: underflows to 0, which pyperf refuses (and a log of it is -inf).
MIN_TIME_S = 1e-15
#: The longest: 30 years (1e300 s passed every check and overflowed the exports' ns).
MAX_TIME_S = 1e9
#: The most samples a list of them may hold: ten times --repeat's limit (1 000) and its re-measured
#: rounds.  The gate pairs every baseline sample with every current one (a Hodges-Lehmann
#: ratio), so a hand-made file of 10^5 samples a row would have asked for 80 GB.
MAX_SAMPLES = 10_000
#: Counts that are at least 1 when present (a pass of 0 tests; -5 tests gave negative ns a test).
AT_LEAST_ONE = ("tests", "threads", "instructions_tests")
#: Instruction counts, never below 0 when present: a count of -5 was gated as an improvement
#: (ratio -0.000) and exported to Bencher as -1.25e-06 instructions a test.
NOT_NEGATIVE = ("instructions", "overhead_instructions", "instructions_per_test")
#: The values a row's side may have (None outside an A/B run): another would drop the row
#: unseen when an A/B run's head rows are taken (results.head_rows).
SIDES = (None, "base", "head")
#: The statuses a row may have: another would be neither measured nor a failure to the gate.
STATUSES = ("ok", "skipped", "crashed", "timed-out", "build-failed")
#: The numbers of env.machine.cpu the exports read: (JSON types, least value).
CPU_NUMBERS = {"logical_cores": (int, 1), "measured_mhz": (int | float, 0), "nominal_mhz": (int | float, 0)}
#: The parts of `env` that the gate, the tables and the exports walk, when present: their
#: types, and their items' (the rest of env is a free-form description of the machine).
ENV_PARTS = {"machine": (dict, None), "compilers": (dict, dict), "builds": (list, dict), "counters": (dict, None)}


def _describe(value) -> str:
    text = repr(value)
    return text if len(text) <= 40 else text[:37] + "..."


def _type_name(expected) -> str:
    origin = typing.get_origin(expected)
    if origin in (typing.Union, types.UnionType):
        return " or ".join(_type_name(a) for a in typing.get_args(expected))
    if origin is list:
        return "a list"
    if origin is dict or expected is dict:
        return "an object"
    return {str: "a string", int: "an integer", float: "a number", bool: "true or false", type(None): "null"}.get(
        expected, getattr(expected, "__name__", str(expected))
    )


def _matches(value, expected) -> bool:
    """value (parsed JSON) is of the annotated type `expected` (containers checked shallowly)."""
    origin = typing.get_origin(expected)
    if origin in (typing.Union, types.UnionType):
        return any(_matches(value, option) for option in typing.get_args(expected))
    if expected is type(None):
        return value is None
    if expected is float:  # JSON writes 2.0 as 2
        return isinstance(value, int | float) and not isinstance(value, bool)
    if expected is int:
        return isinstance(value, int) and not isinstance(value, bool)
    if origin is list or expected is list:
        return isinstance(value, list)
    if origin is dict or expected is dict:
        return isinstance(value, dict)
    return isinstance(value, expected)


@functools.cache
def _type_hints(cls) -> dict:
    """`cls`'s annotations, evaluated once: typing evaluates them anew on every call (1.2 ms for
    KernelResult), and a file of 3 million small rows held `regress` for an hour before this."""
    return typing.get_type_hints(cls)


def check_object(data, cls, where: str) -> None:
    """`data` is a JSON object fit for the dataclass `cls`: required fields present, every
    known field of its annotated type, list items of the list's item type."""
    if not isinstance(data, dict):
        raise SectorbenchError(f"{where or 'the file'} is {_type_name(type(data))}, not an object")
    hints = _type_hints(cls)
    for spec in fields(cls):
        name = spec.name
        place = f"{where}.{name}" if where else name
        if name not in data:
            if spec.default is MISSING and spec.default_factory is MISSING:
                raise SectorbenchError(f"{place} is missing")
            continue
        value, expected = data[name], hints[name]
        if not _matches(value, expected):
            raise SectorbenchError(f"{place} is {_describe(value)}, not {_type_name(expected)}")
        item_type = next(iter(typing.get_args(expected)), None) if typing.get_origin(expected) is list else None
        if item_type is not None and not is_dataclass(item_type) and isinstance(value, list):
            _check_length(name, value, place)  # before its items: 21 million took 21 s to walk
            for i, item in enumerate(value):
                if not _matches(item, item_type):
                    raise SectorbenchError(f"{place}[{i}] is {_describe(item)}, not {_type_name(item_type)}")
        _check_numbers(name, value, place)


def _check_length(name: str, value: list, place: str) -> None:
    """A row's list (samples, the counts its rounds saw, warnings) holds at most MAX_SAMPLES
    items, checked before any item is: a 229 MB file of one row with 21 million samples was
    walked item by item for 21 s before its length refused it."""
    if len(value) > MAX_SAMPLES:
        what = "samples" if name in SAMPLE_RULES else "items"
        raise SectorbenchError(
            f"{place} holds {len(value)} {what}, more than the {MAX_SAMPLES} a row may have "
            "(sectorbench records at most 1 000 rounds)"
        )


def _finite(value) -> bool:
    """A JSON number a float holds, neither NaN nor infinite (10**400 is an int no float holds)."""
    try:
        return math.isfinite(float(value))
    except OverflowError:
        return False


def _is_number(value) -> bool:
    return isinstance(value, int | float) and not isinstance(value, bool)


def _check_numbers(name: str, value, place: str) -> None:
    """Every number of a result is finite (NaN, infinities and numbers past a float are never a
    measurement: exports wrote them as invalid JSON, or failed on them); times are > MIN_TIME_S
    where SAMPLE_RULES says so, counts of AT_LEAST_ONE at least 1."""
    rule = SAMPLE_RULES.get(name)
    if rule is not None:
        for i, item in enumerate(value):
            if not _finite(item) or abs(item) > MAX_TIME_S or (rule == "positive" and item < MIN_TIME_S):
                wanted = f"a time from {MIN_TIME_S:g} to {MAX_TIME_S:g} s" if rule == "positive" else "a finite time"
                raise SectorbenchError(f"{place}[{i}] is {_describe(item)}, not {wanted}")
    elif _is_number(value) and not _finite(value):
        raise SectorbenchError(f"{place} is {_describe(value)}, not a finite number")
    elif isinstance(value, list):
        for i, item in enumerate(value):
            if _is_number(item) and not _finite(item):
                raise SectorbenchError(f"{place}[{i}] is {_describe(item)}, not a finite number")
    if name in AT_LEAST_ONE and _is_number(value) and value < 1:
        raise SectorbenchError(f"{place} is {_describe(value)}, not at least 1")
    if name in NOT_NEGATIVE and _is_number(value) and value < 0:
        raise SectorbenchError(f"{place} is {_describe(value)}, not a count (0 or more)")
    if name == "side" and value not in SIDES:
        raise SectorbenchError(f"{place} is {_describe(value)}, not null, 'base' or 'head'")
    if name == "status" and value not in STATUSES:
        raise SectorbenchError(f"{place} is {_describe(value)}, not one of {', '.join(STATUSES)}")


def check_run(data) -> None:
    """A parsed result file has the shape of results.RunResult; else SectorbenchError (one line)."""
    from .results import KernelResult, RunResult

    check_object(data, RunResult, "")
    _check_env(data.get("env") or {})
    for i, row in enumerate(data["results"]):
        check_object(row, KernelResult, f"results[{i}]")


def _check_env(env: dict) -> None:
    for part, (kind, item_kind) in ENV_PARTS.items():
        value = env.get(part)
        if value is None:
            continue
        if not _matches(value, kind):
            raise SectorbenchError(f"env.{part} is {_describe(value)}, not {_type_name(kind)}")
        items = value.items() if isinstance(value, dict) else enumerate(value)
        for key, item in items if item_kind else ():
            if not _matches(item, item_kind):
                place = f"env.{part}.{key}" if isinstance(value, dict) else f"env.{part}[{key}]"
                raise SectorbenchError(f"{place} is {_describe(item)}, not {_type_name(item_kind)}")
    cpu = (env.get("machine") or {}).get("cpu")
    if cpu is not None and not isinstance(cpu, dict):
        raise SectorbenchError(f"env.machine.cpu is {_describe(cpu)}, not an object")
    for name, (kind, least) in CPU_NUMBERS.items():
        value = (cpu or {}).get(name)
        if value is not None and not (
            isinstance(value, kind) and _is_number(value) and _finite(value) and value >= least
        ):
            raise SectorbenchError(f"env.machine.cpu.{name} is {_describe(value)}, not a number >= {least}")
