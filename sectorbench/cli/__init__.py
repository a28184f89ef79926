"""The command line (see app.py); importing the command modules registers them on `main`."""

from . import check, export, measure, query, saved  # noqa: F401
from .app import main

__all__ = ["main"]
