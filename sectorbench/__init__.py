"""sectorbench: benchmark and verify small float32 geometric kernels written in C."""

__version__ = "0.1.0"


class SectorbenchError(Exception):
    """A problem the user can fix (bad input, a compile error, an unreadable file).

    The CLI prints its message on one line and exits with status 2.
    """


def query(sectors, points, *, broadphase="auto", kernel="auto", threads=1):
    """Which points lie in which sectors: see sectorbench.families.sector.query.query."""
    from .families.sector.query import query as sector_query

    return sector_query(sectors, points, broadphase=broadphase, kernel=kernel, threads=threads)


def verify(**arguments):
    """Check kernels against the exact oracle from a test suite: see sectorbench.check.api.verify."""
    from .check.api import verify as check_kernels

    return check_kernels(**arguments)


def __getattr__(name):
    if name == "Hits":
        from .families.sector.broadphase import Hits

        return Hits
    raise AttributeError(f"module 'sectorbench' has no attribute {name!r}")
