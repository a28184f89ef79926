"""The command line (see app.py); importing the command modules registers them on `main`."""

import os

# Before numpy's import: its OpenBLAS starts a thread per core there, and where it cannot (a
# container's pids limit below the core count, ulimit -u) it raises SIGINT in this process, which
# ended every command with "interrupted" and status 130.  The command line calls no BLAS, and
# its workers are held to one thread alike (measure/worker.py, WORKER_ENV).
os.environ.setdefault("OPENBLAS_NUM_THREADS", "1")

from .endings import ending_while_importing  # noqa: E402

with ending_while_importing():  # a second or more: Ctrl-C meanwhile is one line, not a traceback
    from . import check, export, measure, query, saved  # noqa: F401
    from .app import main

__all__ = ["main"]
