"""The registry's front for scenes: every family's kinds by name, their options, generation.

The Scene value itself is model.scenes's; this module finds the family a kind (or an older
spelling of one) belongs to and asks it.
"""

from __future__ import annotations

import inspect
from collections.abc import Mapping

import numpy as np

from ..errors import SectorbenchError
from ..model.scenes import Scene, build_scene, check_size
from . import all_families, family_of_scene, get, resolve_scene


def make_scene(
    kind: str,
    family: str,
    columns: Mapping[str, np.ndarray],
    seed: int | None = None,
    layout: str = "grid",
    extra: Mapping[str, np.ndarray] | None = None,
    options: Mapping[str, float] | None = None,
) -> Scene:
    """A Scene of `family`'s arrays (model.scenes.build_scene, the family found by name)."""
    return build_scene(kind, get(family).scene_arrays, columns, seed, layout, extra, options)


def kinds() -> dict[str, str]:
    """Every scene kind of every registered family: kind -> family name (older spellings,
    Family.scene_aliases, are accepted wherever a kind is, but not listed)."""
    return {kind: family.name for family in all_families() for kind in family.scenes}


def describe(kind: str, n: int, m: int, seed: int = 0, options: Mapping[str, float] | None = None) -> dict:
    """What generate(kind, n, m, seed, options).describe() is, without generating the scene
    (a generator records its options, defaults filled in, as resolved_options does)."""
    kind, options = resolve_scene(kind, options)
    family = family_of_scene(kind)
    resolved = resolved_options(kind, options)
    return {
        "kind": kind,
        "family": family.name,
        "seed": seed,
        family.shape_noun: n,
        "points": m,
        **({"options": resolved} if resolved else {}),
    }


def resolved_options(kind: str, options: Mapping[str, float] | None) -> dict[str, float]:
    """A scene's options are its generator's keyword-only parameters (e.g. a game's world and
    radii): those given (not None) over their defaults.  One it does not take is refused in
    one line."""
    kind, options = resolve_scene(kind, options)
    parameters = inspect.signature(family_of_scene(kind).scenes[kind]).parameters
    accepted = {name: p.default for name, p in parameters.items() if p.kind is p.KEYWORD_ONLY}
    given = {name: value for name, value in (options or {}).items() if value is not None}
    unknown = sorted(set(given) - set(accepted))
    if unknown:
        names = ", ".join(f"--{name}" for name in unknown)
        raise SectorbenchError(
            f"{names} does not apply to {kind} scenes"
            + (f" (they take: {', '.join(sorted(accepted))})" if accepted else "")
        )
    return {**accepted, **given}


def scene_cost(kind: str, n: int, m: int, options: Mapping[str, float] | None = None) -> tuple[int, float]:
    """Family.scene_cost of a scene of `kind` with these options (an alias resolved)."""
    kind, options = resolve_scene(kind, options)
    return family_of_scene(kind).scene_cost(kind, n, m, resolved_options(kind, options))


def check_scene_size(kind: str, n: int, m: int, options: Mapping[str, float] | None = None) -> None:
    """check_size for a scene of `kind`: its family's arrays, and what else making it costs."""
    family = family_of_scene(resolve_scene(kind, options)[0])
    extra_bytes = scene_cost(kind, n, m, options)[0] if n > 0 and m > 0 else 0
    check_size(n, m, len(family.shape_arrays), len(family.point_arrays), extra_bytes)


def generate(kind: str, n: int, m: int, seed: int = 0, options: Mapping[str, float] | None = None) -> Scene:
    """Generate a scene of `kind` with n shapes and m points from `seed`; `options` are the
    generator's keyword arguments (e.g. world, rmin, rmax of a game scene), None for its default."""
    kind, options = resolve_scene(kind, options)
    family = family_of_scene(kind)
    check_scene_size(kind, n, m, options)
    if seed < 0:
        raise SectorbenchError(f"--seed must be >= 0 (got {seed})")
    return family.scenes[kind](n, m, seed, **resolved_options(kind, options))
