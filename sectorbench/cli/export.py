"""`export`: a saved result in a format a dashboard or comparison tool reads."""

from __future__ import annotations

import click

from ..compare.export import FORMATS, render
from ..model.results import write_text_atomic
from ..model.text import shown_path
from .app import load_plain, main, note, say_rows_left_out
from .options import INPUT_PATH, OUTPUT_PATH, check_outputs


@main.command("export")
@click.argument("result", type=INPUT_PATH)
@click.option(
    "--format",
    "fmt",
    required=True,
    type=click.Choice(sorted(FORMATS)),
    help="The format, see docs/exports.md.",
)
@click.option("--out", required=True, type=OUTPUT_PATH, help="The file to write.")
@click.option("--force", is_flag=True, help="Replace an existing file (a regular file only) [default: refuse].")
def export_command(result, fmt, out, force):
    """Write RESULT (a saved run or compare) as pyperf, bmf (Bencher), gbench (Google Benchmark) or gha JSON."""
    from ..compare.gate import check_usable

    check_outputs(force, out, inputs=(result,))
    loaded = load_plain(result)
    check_usable(loaded, str(result))  # what regress refuses is not exported either
    text = render(loaded, fmt)
    say_rows_left_out(loaded)
    note(f"saved {shown_path(write_text_atomic(out, text, overwrite=force))}")
