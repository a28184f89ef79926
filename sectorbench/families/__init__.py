"""The registry of families: each is one module (or package) plus its C file(s).

Registering a family is one line: its module's name in BUILTIN below, or, for a family
of your own, in $SECTORBENCH_FAMILIES (comma-separated importable module names; the
workers inherit it).  Each such module calls `register(...)` with its Family when
imported.  See docs/extending.md, "Add a family".
"""

from __future__ import annotations

import importlib
import os
import threading

from ..errors import SectorbenchError
from .base import BooleanFamily, Family, Reference, SceneOption

__all__ = [
    "BooleanFamily",
    "Family",
    "Reference",
    "SceneOption",
    "all_families",
    "family_of_scene",
    "get",
    "register",
    "resolve_scene",
]

BUILTIN = (
    "sectorbench.families.sector",
    "sectorbench.families.triangle",
    "sectorbench.families.aabr",
)
FAMILIES_ENV = "SECTORBENCH_FAMILIES"

_registry: dict[str, Family] = {}
_loaded = False  # the family modules' import has started (a module may ask for the registry)
_load_error: SectorbenchError | None = None
#: Threads asking at once wait for the first one's imports (they read a half-filled registry:
#: "module 'sectorbench' has no attribute 'query'" in a probe's threads); re-entrant, since a
#: family module may ask for the registry while it is imported.
_load_lock = threading.RLock()


def register(family: Family) -> Family:
    """Make `family` known to the harness; its scene kinds must not clash with others'."""
    clash = {kind for other in _registry.values() if other.name != family.name for kind in other.scenes}
    clash &= set(family.scenes)
    if clash:
        raise SectorbenchError(f"family {family.name}: scene kind {', '.join(sorted(clash))} is taken")
    _registry[family.name] = family
    return family


def _load() -> None:
    """Import every family module once; a failure is reported again on every later call."""
    global _loaded, _load_error
    with _load_lock:
        if not _loaded:
            _loaded = True
            for module in _modules():
                try:
                    importlib.import_module(module)
                except Exception as exc:  # the module is the user's: any failure is theirs to read
                    _load_error = SectorbenchError(
                        f"cannot load family module {module!r} (from ${FAMILIES_ENV}): {type(exc).__name__}: {exc}"
                    )
                    break
    if _load_error is not None:
        raise _load_error


def _modules() -> list[str]:
    return [*BUILTIN, *(name.strip() for name in os.environ.get(FAMILIES_ENV, "").split(",") if name.strip())]


def all_families() -> list[Family]:
    """Every registered family, in the order their modules are listed (BUILTIN, then
    $SECTORBENCH_FAMILIES), whatever order they were imported in: the first is the default
    family of run and verify."""
    _load()
    modules = _modules()

    def rank(family: Family) -> int:
        module = type(family).__module__
        return next(
            (i for i, name in enumerate(modules) if module == name or module.startswith(name + ".")), len(modules)
        )

    return sorted(_registry.values(), key=rank)


def get(name: str) -> Family:
    _load()
    try:
        return _registry[name]
    except KeyError:
        raise SectorbenchError(f"unknown family {name!r}; choose one of: {', '.join(_registry)}") from None


def family_of_scene(kind: str) -> Family:
    """The family of a scene kind, or of an older spelling of one (Family.scene_aliases)."""
    for family in all_families():
        if kind in family.scenes or kind in family.scene_aliases:
            return family
    kinds = [k for family in all_families() for k in family.scenes]
    raise SectorbenchError(f"unknown scene kind {kind!r}; choose one of: {', '.join(kinds)}")


def resolve_scene(kind: str, options=None) -> tuple[str, dict]:
    """(kind, options) with an older spelling replaced by its kind and options; options given
    (not None) win over the alias's."""
    given = {name: value for name, value in (options or {}).items() if value is not None}
    family = family_of_scene(kind)
    if kind in family.scene_aliases:
        base, alias_options = family.scene_aliases[kind]
        return base, {**alias_options, **given}
    return kind, given


def scene_options(families=None) -> dict[str, SceneOption]:
    """The scene options of `families` (default every family) by name (a name two families
    declare is one option)."""
    return {option.name: option for family in families or all_families() for option in family.scene_options}


def public_api(name: str):
    """The object a family offers as `sectorbench.<name>` (Family.public_api), or None."""
    for family in all_families():
        if name in family.public_api:
            module, attribute = family.public_api[name].split(":")
            return getattr(importlib.import_module(module), attribute)
    return None


def public_api_names() -> list[str]:
    return [name for family in all_families() for name in family.public_api]
