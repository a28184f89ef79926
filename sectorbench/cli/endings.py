"""How the command line ends on a signal of ENDING_SIGNALS: its one line, and the handler for
the moment before any command's handler is installed (app.OneLineErrors), while the command
modules import.

Light on purpose (the standard library and interrupts.py): it is imported before numpy, click,
rich and the families, which take a second or more to import on a loaded machine.
"""

from __future__ import annotations

import contextlib
import os
import signal
import sys
import threading
from collections.abc import Iterator

from ..interrupts import ENDING_SIGNALS


def ending_line(signum: int) -> str:
    """The line sectorbench ends with on `signum`."""
    if signum == signal.SIGINT:
        return "sectorbench: interrupted; scratch files removed"
    return f"sectorbench: terminated ({signal.Signals(signum).name}); scratch files removed"


def _end_while_importing(signum, frame):
    with contextlib.suppress(OSError, ValueError):  # a closed stderr: the exit status says it
        sys.stderr.write(ending_line(signum) + "\n")
        sys.stderr.flush()
    # At once, not by raising SystemExit: an exception a handler raises while an import compiles a
    # module's source (no .pyc: PYTHONDONTWRITEBYTECODE) was lost now and then, and the command
    # ran on to exit 0 under the line "interrupted".  Nothing needs cleaning up yet.
    os._exit(128 + signum)


@contextlib.contextmanager
def ending_while_importing() -> Iterator[None]:
    """While the block (the command modules' imports) runs, an ending signal ends the process
    with its line and status 128 + N: nothing is running and no scratch file exists yet.  Before,
    Ctrl-C in the first second of any command printed a KeyboardInterrupt traceback of the import
    under way, and SIGTERM or SIGHUP ended it without a word.  A signal the caller ignores
    (nohup) stays ignored; the handlers before the block are back after it (a test process that
    imports the CLI keeps its own)."""
    if threading.current_thread() is not threading.main_thread():
        yield
        return
    previous = {}
    for sig in ENDING_SIGNALS:
        handler = signal.getsignal(sig)
        if handler is not signal.SIG_IGN:
            previous[sig] = signal.signal(sig, _end_while_importing)
    try:
        yield
    finally:
        for sig, handler in previous.items():
            signal.signal(sig, handler)
