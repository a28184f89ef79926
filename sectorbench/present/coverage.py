"""The coverage table (check/coverage.py): rows per (boundary piece, region) cell and side."""

from __future__ import annotations

from rich.table import Table
from rich.text import Text


def coverage_table(result) -> Table:
    """One row per declared cell; an empty side in red (a hole in verify's cases)."""
    table = Table(
        title=f"coverage: {result.family} family, --cases {result.cases}, seed {result.seed}",
        title_justify="left",
        caption=f"{len(result.cells) - len(result.empty)}/{len(result.cells)} cells filled on both sides "
        f"({result.rows} rows examined)",
        caption_justify="left",
    )
    table.add_column("piece", no_wrap=True)
    table.add_column("region", no_wrap=True)
    for side in result.sides:
        table.add_column(side, justify="right")
    piece = None
    for cell in result.cells:
        counts = [Text(str(n), style="" if n else "bold red") for n in (cell.first, cell.second)]
        table.add_row(cell.piece if cell.piece != piece else "", cell.region, *counts)
        piece = cell.piece
    return table
