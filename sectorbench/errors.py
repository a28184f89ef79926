"""The error every layer raises for a problem the user can fix; the bottom of the import graph."""


class SectorbenchError(Exception):
    """A problem the user can fix (bad input, a compile error, an unreadable file).

    The CLI prints its message on one line and exits with status 2.
    """
