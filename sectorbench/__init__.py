"""sectorbench: benchmark and verify small float32 geometric kernels written in C."""

__version__ = "0.1.0"


class SectorbenchError(Exception):
    """A problem the user can fix (bad input, a compile error, an unreadable file).

    The CLI prints its message on one line and exits with status 2.
    """
