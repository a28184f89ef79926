"""The command line (see app.py); importing the command modules registers them on `main`."""

from .endings import ending_while_importing

with ending_while_importing():  # a second or more: Ctrl-C meanwhile is one line, not a traceback
    from . import check, export, measure, query, saved  # noqa: F401
    from .app import main

__all__ = ["main"]
