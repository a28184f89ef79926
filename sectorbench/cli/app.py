"""The command line's frame: the group, one-line errors, consoles and progress.

The CLI (this package) is the only part of sectorbench that prints or chooses exit
codes: 0 ok, 1 a check failed (verify, regress), 2 usage, build or internal error.
"""

from __future__ import annotations

import os
import sys
from pathlib import Path

import click
from rich.console import Console
from rich.progress import BarColumn, MofNCompleteColumn, Progress, TextColumn, TimeElapsedColumn

from .. import SectorbenchError, __version__
from ..families import all_families
from ..results import save, timestamped_path, write_text_atomic

#: Tables going to a file or pipe are not squeezed into 80 columns.
PIPED_WIDTH = 160
stderr = Console(stderr=True)


def stdout() -> Console:
    console = Console()
    return console if console.is_terminal else Console(width=PIPED_WIDTH)


class OneLineErrors(click.Group):
    """Report every user error as one line on stderr with exit status 2, never a traceback."""

    def main(self, args=None, prog_name="sectorbench", complete_var=None, standalone_mode=True, **extra):
        try:
            code = super().main(args, prog_name, complete_var, standalone_mode=False, **extra)
        except click.exceptions.Abort:
            click.echo("sectorbench: interrupted", err=True)
            code = 130
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
        if standalone_mode:
            sys.exit(code if isinstance(code, int) else 0)
        return code


def make_progress() -> Progress:
    return Progress(
        TextColumn("{task.description}"),
        BarColumn(),
        MofNCompleteColumn(),
        TimeElapsedColumn(),
        console=stderr,
        transient=True,
    )


@click.group(cls=OneLineErrors, context_settings={"help_option_names": ["-h", "--help"]})
@click.version_option(__version__, prog_name="sectorbench")
def main():
    """Benchmark and verify float32 point-in-sector kernels written in C."""
    all_families()  # a family module that fails to import stops here, in one line


def run_gate(baseline, current, config, markdown_path, force, baseline_label, current_label) -> None:
    from ..gate import gate
    from ..report import gate_markdown, gate_table

    report = gate(baseline, current, config)
    stdout().print(gate_table(report))
    if markdown_path is not None:
        write_text_atomic(markdown_path, gate_markdown(report, baseline_label, current_label), overwrite=force)
        stderr.print(f"saved {markdown_path}")
    names = ", ".join(f"{r.kernel} [{r.flags}, {r.mode}]" for r in report.regressions)
    stderr.print(
        f"{len(report.regressions)} regression(s)"
        + (f": {names}" if names else "")
        + f", {len(report.improvements)} improvement(s)"
    )
    click.get_current_context().exit(report.exit_code)


def write_json(result, json_path: Path | None, force: bool, save_to_results: bool = False, label: str = "run"):
    for path, overwrite in ((json_path, force), (timestamped_path(label=label) if save_to_results else None, False)):
        if path is not None:
            save(result, path, overwrite=overwrite)
            stderr.print(f"saved {path}")
