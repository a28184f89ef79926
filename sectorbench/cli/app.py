"""The command line's frame: the group, one-line errors, consoles and progress.

The CLI (this package) is the only part of sectorbench that prints or chooses exit
codes: 0 ok, 1 a check failed (verify, regress), 2 usage, build or internal error.
"""

from __future__ import annotations

import os
import signal
import sys
import threading
import time
from pathlib import Path

import click
from rich.console import Console
from rich.progress import BarColumn, Progress, TextColumn, TimeElapsedColumn

from .. import SectorbenchError, __version__
from ..families import all_families
from ..results import RESULTS_DIR, save, save_new, write_text_atomic
from ..timing import duration

#: Tables going to a file or pipe are not squeezed into 80 columns.
PIPED_WIDTH = 160
#: With stderr piped (a CI log), one progress line this often, so a long step is not silence.
HEARTBEAT_S = 5.0
#: Exit status after SIGTERM, the shell's convention (128 + 15); scratch files are removed first.
SIGTERM_EXIT = 143
stderr = Console(stderr=True)


class Terminated(BaseException):
    """SIGTERM arrived (a CI runner cancelling the job): unwind like Ctrl-C, cleaning up."""


def _on_sigterm(signum, frame):
    signal.signal(signal.SIGTERM, signal.SIG_IGN)  # a second one must not interrupt the cleanup
    raise Terminated()


def note(text: str) -> None:
    """One line on stderr, never wrapped."""
    stderr.print(text, soft_wrap=True, highlight=False)


def stdout() -> Console:
    console = Console()
    return console if console.is_terminal else Console(width=PIPED_WIDTH)


class OneLineErrors(click.Group):
    """Report every user error as one line on stderr with exit status 2, never a traceback."""

    def main(self, args=None, prog_name="sectorbench", complete_var=None, standalone_mode=True, **extra):
        in_main_thread = threading.current_thread() is threading.main_thread()
        previous = signal.signal(signal.SIGTERM, _on_sigterm) if in_main_thread else None
        try:
            code = super().main(args, prog_name, complete_var, standalone_mode=False, **extra)
        except click.exceptions.Abort:
            click.echo("sectorbench: interrupted", err=True)
            code = 130
        except Terminated:
            click.echo("sectorbench: terminated (SIGTERM); scratch files removed", err=True)
            code = SIGTERM_EXIT
        except click.ClickException as exc:
            click.echo(f"sectorbench: error: {exc.format_message()}", err=True)
            code = 2
        except SectorbenchError as exc:
            click.echo(f"sectorbench: error: {exc}", err=True)
            code = 2
        except Exception as exc:  # a bug: one line unless asked for the traceback
            if os.environ.get("SECTORBENCH_DEBUG"):
                raise
            click.echo(
                f"sectorbench: internal error: {type(exc).__name__}: {exc} (set SECTORBENCH_DEBUG=1 for the traceback)",
                err=True,
            )
            code = 2
        finally:
            if in_main_thread:
                signal.signal(signal.SIGTERM, previous)
        if standalone_mode:
            sys.exit(code if isinstance(code, int) else 0)
        return code


class Reporter:
    """Progress on stderr: a live bar on a terminal, else a heartbeat line every HEARTBEAT_S.

    update(what, left_s): what is being done (e.g. "calibrating basic [-O2, inline]") and
    the seconds expected to be left, when known.
    """

    def __init__(self, console: Console | None = None, heartbeat_s: float | None = None):
        self.console = console or stderr
        self.heartbeat_s = heartbeat_s or HEARTBEAT_S
        self.what, self.left_s, self.updated = "starting", None, time.monotonic()
        self.started = self.updated
        self._bar: Progress | None = None
        self._stop = threading.Event()
        self._thread: threading.Thread | None = None

    def __enter__(self) -> Reporter:
        if self.console.is_terminal:
            self._bar = Progress(
                TextColumn("{task.description}"),
                BarColumn(),
                TextColumn("{task.fields[left]}"),
                TimeElapsedColumn(),
                console=self.console,
                transient=True,
            )
            self._bar.__enter__()
            self._task = self._bar.add_task(self.what, total=None, left="")
        else:
            self._thread = threading.Thread(target=self._beat, daemon=True)
            self._thread.start()
        return self

    def __exit__(self, *exc) -> None:
        self._stop.set()
        if self._thread is not None:
            self._thread.join()
        if self._bar is not None:
            self._bar.__exit__(*exc)

    def __call__(self, what: str, left_s: float | None = None, **_) -> None:
        self.update(what, left_s)

    def update(self, what: str, left_s: float | None = None) -> None:
        self.what, self.left_s, self.updated = what, left_s, time.monotonic()
        if self._bar is not None:
            elapsed = self.updated - self.started
            total = None if left_s is None else elapsed + left_s
            left = "" if left_s is None else f"about {duration(left_s)} left"
            self._bar.update(self._task, description=what, total=total, completed=elapsed, left=left)

    def status(self) -> str:
        now = time.monotonic()
        text = f"sectorbench: {self.what} ({duration(now - self.started)} elapsed"
        if self.left_s is not None:
            text += f", about {duration(max(0.0, self.left_s - (now - self.updated)))} left"
        return text + ")"

    def _beat(self) -> None:
        while not self._stop.wait(self.heartbeat_s):
            click.echo(self.status(), err=True)


@click.group(cls=OneLineErrors, context_settings={"help_option_names": ["-h", "--help"]})
@click.version_option(__version__, prog_name="sectorbench")
def main():
    """Benchmark and verify float32 point-in-sector kernels written in C."""
    all_families()  # a family module that fails to import stops here, in one line


def run_gate(baseline, current, config, markdown_path, force, baseline_label, current_label, revise=None) -> None:
    """revise(report) -> report, if given, runs between the gate and its output (instruction
    counts, --confirm's re-measurement)."""
    from ..gate import gate
    from ..report import GATE_DROP, fit, gate_markdown, gate_table

    report = gate(baseline, current, config)
    if revise is not None:
        report = revise(report)
    console = stdout()
    console.print(fit(gate_table(report), console.width, GATE_DROP))
    if markdown_path is not None:
        write_text_atomic(markdown_path, gate_markdown(report, baseline_label, current_label), overwrite=force)
        note(f"saved {markdown_path}")
    names = ", ".join(f"{r.kernel} [{r.flags}, {r.mode}]" for r in report.regressions)
    note(
        f"{len(report.regressions)} regression(s)"
        + (f": {names}" if names else "")
        + f", {len(report.improvements)} improvement(s)"
    )
    click.get_current_context().exit(report.exit_code)


def write_json(result, json_path: Path | None, force: bool, save_to_results: bool = False, label: str = "run"):
    if json_path is not None:
        note(f"saved {save(result, json_path, overwrite=force)}")
    if save_to_results:
        note(f"saved {save_new(result, RESULTS_DIR, label)}")
