"""Which kernels a run or a verify measures: names checked before any build, the family's
default set, C kernels and peers told apart by the registry."""

from __future__ import annotations

from ..errors import SectorbenchError
from ..model.kernels import Kernel


def peer_names(family) -> set[str]:
    """The names of a family's peers (kernels in Python), which a peer worker runs."""
    return {peer.name for peer in family.peers()}


def split_names(names, family) -> tuple[list[str], list[str]]:
    """--kernels split into C kernel names and peer names, each in the user's order."""
    peers = peer_names(family)
    return [n for n in names if n not in peers], [n for n in names if n in peers]


def select(kernels: list[Kernel], names: list[str] | None, family: str) -> list[Kernel]:
    """The kernels to measure: the family's default set, or exactly `names` in that order.

    The default set is the family's C kernels that are not known-bad; peers run only
    when named.
    """
    by_name = {k.name: k for k in kernels}
    if not names:
        return [k for k in kernels if k.family == family and k.is_default]
    unknown = [n for n in names if n not in by_name]
    if unknown:
        known = ", ".join(k.name for k in kernels)
        raise SectorbenchError(f"unknown kernel {', '.join(unknown)}; known kernels: {known}")
    chosen = [by_name[n] for n in dict.fromkeys(names)]
    check_family([k.name for k in chosen], {k.name: k.family for k in chosen}, family)
    return chosen


def check_family(names, known: dict[str, str], family: str) -> None:
    """Refuse named kernels of another family than the run's (known: name -> family; names
    it does not hold are left to check_names)."""
    wrong_family = [name for name in dict.fromkeys(names) if known.get(name, family) != family]
    if wrong_family:
        raise SectorbenchError(
            f"kernel {', '.join(wrong_family)} is not of the {family} family "
            f"(choose the family with --family or a scene of that family)"
        )


def check_names(names, known: dict[str, str]) -> None:
    """Refuse, before anything is built, names that no kernel, peer or broadphase has; the
    closest known name is suggested.  known: name -> family."""
    import difflib

    unknown = [name for name in dict.fromkeys(names) if name not in known]
    if not unknown:
        return
    hints = []
    for name in unknown:
        close = difflib.get_close_matches(name, list(known), n=1, cutoff=0.6)
        hints.append(f"{name} (did you mean {close[0]}?)" if close else name)
    by_family: dict[str, list[str]] = {}
    for name, family in known.items():
        by_family.setdefault(family, []).append(name)
    listing = "; ".join(f"{family}: {', '.join(names)}" for family, names in by_family.items())
    raise SectorbenchError(f"unknown kernel {', '.join(hints)}; known kernels: {listing}")


def infer_family(names, known: dict[str, str]) -> str | None:
    """The one family every named kernel belongs to, None when none is named; named kernels
    of several families are refused (--family cannot be guessed then)."""
    families = sorted({known[name] for name in names if name in known})
    if len(families) > 1:
        raise SectorbenchError(f"--kernels names kernels of several families ({', '.join(families)}): choose one")
    return families[0] if families else None


def known_kernels(config) -> dict[str, str] | None:
    """name -> family of every kernel a build of `config` holds (kernel_index) and every peer;
    None when the sources could not be read without building them."""
    from ..families import all_families
    from ..native.build import kernel_index

    index = kernel_index(config)
    if index is None:
        return None
    peers = {peer.name: family.name for family in all_families() for peer in family.peers()}
    # --kernels sends a peer's name to the peers' worker: a C row of that name never ran, the
    # peer ran in its place (and the build's worker refuses it too, when it is started at all)
    taken = next((name for name in index if name in peers), None)
    if taken is not None:
        raise SectorbenchError(
            f"two kernels are named {taken} (the {taken} peer and a row of your --source files): "
            "each kernel needs a name of its own (rename yours)"
        )
    return {**index, **peers}
