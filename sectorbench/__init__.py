"""sectorbench: benchmark and verify small float32 geometric kernels written in C."""

__version__ = "0.1.0"


class SectorbenchError(Exception):
    """A problem the user can fix (bad input, a compile error, an unreadable file).

    The CLI prints its message on one line and exits with status 2.
    """


def __getattr__(name):
    """The query API, imported on first use (it loads numpy and cffi, which the CLI's other
    commands need not wait for): `query` and `prepare` are the family's own functions, so
    help(sectorbench.query) shows their whole documentation."""
    if name == "Hits":
        from .families.sector.broadphase import Hits

        return Hits
    if name in ("query", "prepare"):
        from .families.sector import query as api

        return getattr(api, name)
    raise AttributeError(f"module 'sectorbench' has no attribute {name!r}")


def __dir__():
    return sorted([*globals(), "Hits", "prepare", "query"])
