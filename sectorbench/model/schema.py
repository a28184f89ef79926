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
#: Single times that must be real numbers when present (a median of NaN would poison tables).
FINITE_FIELDS = ("median_s", "min_s", "overhead_s", "net_s", "ns_per_test")
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


def check_object(data, cls, where: str) -> None:
    """`data` is a JSON object fit for the dataclass `cls`: required fields present, every
    known field of its annotated type, list items of the list's item type."""
    if not isinstance(data, dict):
        raise SectorbenchError(f"{where or 'the file'} is {_type_name(type(data))}, not an object")
    hints = typing.get_type_hints(cls)
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
            for i, item in enumerate(value):
                if not _matches(item, item_type):
                    raise SectorbenchError(f"{place}[{i}] is {_describe(item)}, not {_type_name(item_type)}")
        _check_numbers(name, value, place)


def _check_numbers(name: str, value, place: str) -> None:
    rule = SAMPLE_RULES.get(name)
    if rule is not None:
        for i, item in enumerate(value):
            if not math.isfinite(item) or (rule == "positive" and item <= 0):
                wanted = "a finite time > 0" if rule == "positive" else "a finite time"
                raise SectorbenchError(f"{place}[{i}] is {_describe(item)}, not {wanted}")
    elif name in FINITE_FIELDS and value is not None and not math.isfinite(value):
        raise SectorbenchError(f"{place} is {_describe(value)}, not a finite number")


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
