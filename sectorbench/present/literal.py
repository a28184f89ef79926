"""Text from users and saved files, handed to rich to be shown as it is written.

rich reads a str as markup: a kernel named "[/]" (a saved results file may hold any name, a
--source kernel's summary any string) raised rich's MarkupError, a traceback, and one named
"[bold]x" showed as a bold "x".  rich's escape() is no cure: it doubles a trailing
backslash, and ":warning:" still becomes an emoji.  A Text is shown as written, on any console.
"""

from __future__ import annotations

from rich.text import Text


def literal(value, style: str = ""):
    """A str as a Text in `style` (a table's title or caption takes "table.title" or
    "table.caption", the style rich gives a str there); anything else (a Text already, a
    renderable) as it is."""
    return Text(value, style=style) if isinstance(value, str) else value
