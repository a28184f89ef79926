"""Opening the builds of a run or a verify: one build that fails costs its own rows, not the command.

run, compare and verify build every --flags set and start a worker on each library
(worker.BuildSession).  A set the compiler rejects (`-m32` without 32-bit headers), or whose
library fails as it loads (`-march` of another CPU: SIGILL; `-mabi=ms`: SIGSEGV;
`-fsanitize=address`: the ASan runtime must come first; `-fvisibility=hidden`: the harness's
symbols are hidden), is a FailedBuild: no worker, and every row it would have had is
`build-failed` or `crashed` (`timed-out` for a load that hung) with the reason, while the
other builds run and are shown and saved.  Its rows are those of the builds that work (the
same kernels, modes and thread counts), so a table or matrix shows the hole where the build
is.  Only when every build fails is the command an error (SectorbenchError: exit 2), as one
failing build alone always was.
"""

from __future__ import annotations

import re
import signal
from collections.abc import Callable
from dataclasses import replace
from pathlib import Path

from ..errors import SectorbenchError
from ..model.kernels import Kernel
from .worker import BuildSession, WorkerCrashed, WorkerTimedOut, failure_status

#: The status of the rows of a build the compiler rejected.
BUILD_FAILED = "build-failed"
#: What a build's load killed by SIGILL most likely means.
SIGILL_HINT = "this CPU lacks an instruction the build's flags use (an -march or -m option for another CPU?)"


class FailedBuild:
    """A build with no library or no worker: its rows fail with `reason` (one line), `status`
    says how; `error` is what build() or the load raised (the compiler's whole output).  It
    answers what run and verify ask of a BuildSession about rows that did not run."""

    peers = False
    library = None
    worker = None
    info = None
    load_failure = None

    def __init__(self, config, status: str, reason: str, error: SectorbenchError, side: str | None = None):
        self.config, self.status, self.error, self.side = config, status, error, side
        #: Why, in one line (the compiler's first error); `reason` adds where the rest is kept.
        self.summary = reason
        more = len([line for line in str(error).splitlines() if line.strip()]) - len(reason.splitlines()) - 1
        kept = f" (and {more} more line{'s' if more > 1 else ''}: in --json, env.builds[].failure)"
        self.reason = reason + (kept if more > 0 and status == BUILD_FAILED else "")
        #: The rows it would have had (see rows_like): none until the builds that work are known.
        self.kernels: list[Kernel] = []

    def rows_like(self, kernels: list[Kernel]) -> None:
        """Its rows are `kernels` (a working build's), each failing with this build's reason."""
        self.kernels = [replace(k, skip_reason=self.reason, unrun_status=self.status) for k in kernels]

    def environment_entry(self) -> dict:
        """Its part of a result's env.builds: how it failed, in its rows' line and whole (all the
        compiler said)."""
        return {
            "cc": self.config.cc,
            "flags": list(self.config.flags),
            "status": self.status,
            "reason": self.reason,
            "failure": str(self.error),
        }

    def close(self) -> None:
        pass

    def kill(self) -> None:
        pass

    def printed_note(self, who: str) -> None:
        return None

    def process_note(self, who: str) -> None:
        return None

    def release_failure(self, who: str) -> None:
        return None

    def fork_server_replaced(self) -> list[str]:
        return []


def open_build(config, start: Callable[[Path], BuildSession], side: str | None = None) -> BuildSession | FailedBuild:
    """The build of `config`, started by start(library); a FailedBuild if the compiler rejects it
    or its library fails to load.  Any other error (a refused --disable-isa, an unusable cache,
    an interrupt) is still the command's."""
    from ..native.build import BuildError, CacheError, build, compiler_identity, failure_line

    compiler_identity(config.cc)  # a compiler that is not there is the command's error, as an unusable cache
    try:
        library = build(config)
    except CacheError:
        raise
    except BuildError as exc:
        return FailedBuild(config, BUILD_FAILED, failure_line(str(exc)), exc, side)
    try:
        return start(library)
    except (WorkerCrashed, WorkerTimedOut) as exc:
        why = load_failure(str(exc))
        return FailedBuild(config, failure_status(exc), why, type(exc)(why), side)


def usable(opened: list) -> list[BuildSession]:
    """The builds of `opened` that work, in order; each failed one is given the rows of a working
    one (of its own A/B side when there is one).  SectorbenchError when none works: a single
    failing build with its own error as it always was, several with each one's reason."""
    failed = [b for b in opened if isinstance(b, FailedBuild)]
    working = [b for b in opened if not isinstance(b, FailedBuild)]
    built = [b for b in working if not b.peers]
    if failed and not built:
        if len(failed) == 1:
            raise failed[0].error
        reasons = "; ".join(f"{b.config.label}: {b.summary}" for b in failed)
        raise SectorbenchError(f"every build failed: {reasons}")
    for build in failed:
        model = next((b for b in built if b.side == build.side), built[0])
        build.rows_like(model.kernels)
    return working


def load_failure(message: str) -> str:
    """Why a build's library failed to load, with what a SIGILL there means."""
    if re.search(rf"killed by signal {int(signal.SIGILL)}\b", message):
        return f"{message}: {SIGILL_HINT}"
    return message
