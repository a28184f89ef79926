"""sectorbench: benchmark and verify small float32 geometric kernels written in C.

The functions families offer to Python programs are attributes of this package, found in the
registry when first used (`sectorbench.query`, `sectorbench.Hits`: which points lie in which
shapes, at game scale; `sectorbench.prepare()` builds its library ahead of the first call,
`sectorbench.release_buffers()` gives back the memory it keeps between calls);
`help(sectorbench.query)` shows the function's own documentation.  `sectorbench.verify` checks
kernels against the exact oracle from a test suite.
"""

from .check.api import verify as verify  # light: what verify needs is imported when it is called
from .errors import SectorbenchError as SectorbenchError
from .version import __version__ as __version__

#: What this package offers; the families' functions (`query`, `prepare`, `Hits`, ...) are
#: added when `__all__` is read (`from sectorbench import *`, help()).
_OWN_NAMES = ["SectorbenchError", "__version__", "verify"]


def __getattr__(name: str):
    import importlib
    import importlib.util

    if name == "__all__":
        from .families import public_api_names

        return [*_OWN_NAMES, *public_api_names()]
    if name.startswith("_"):
        raise AttributeError(f"module 'sectorbench' has no attribute {name!r}")
    if importlib.util.find_spec(f"{__name__}.{name}") is not None:  # `from . import families` and the like
        return importlib.import_module(f"{__name__}.{name}")
    from .families import public_api

    found = public_api(name)
    if found is None:
        raise AttributeError(f"module 'sectorbench' has no attribute {name!r}")
    globals()[name] = found  # found once: a caller of sectorbench.query every frame pays no lookup
    return found


def __dir__():
    from .families import public_api_names

    return sorted({*globals(), *public_api_names()})
