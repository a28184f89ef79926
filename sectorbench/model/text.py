"""Text from outside (paths, compiler output, a kernel table's strings) as printed: its
characters that are not printable escaped, so that a newline cannot make one line two and a
terminal escape never reaches the terminal."""

from __future__ import annotations

import os

#: How shown_path spells the characters a shell's $'…' has short escapes for.
_PATH_ESCAPES = {"\\": "\\\\", "'": "\\'", "\n": "\\n", "\t": "\\t", "\r": "\\r"}


def shown_path(path) -> str:
    """A path as a note names it: as it is, unless a character of it is not printable (a newline
    split "saved PATH" over two lines, the second read as a line of its own); then in bash's
    $'…' quoting (`ls` shows such a name so too), which a shell reads back as the same path."""
    text = os.fspath(path)
    if text.isprintable():
        return text
    return "$'" + "".join(_escaped(char) for char in text) + "'"


#: shortened_path keeps this many characters at each end of a path too long to name whole.
SHORTENED_ENDS = 40


def shortened_path(path) -> str:
    """shown_path, with the middle of a path too long to read (a 300-byte name, a 5 kB path)
    left out and its length said instead."""
    text = os.fspath(path)
    if len(text) <= 3 * SHORTENED_ENDS:
        return shown_path(text)
    left_out = len(os.fsencode(text[SHORTENED_ENDS:-SHORTENED_ENDS]))
    return shown_path(f"{text[:SHORTENED_ENDS]}…({left_out:,} bytes)…{text[-SHORTENED_ENDS:]}")


def shown_line(text: str) -> str:
    """An error line as printed: its characters that are not printable (a newline in a path it
    names, which made it two lines, or a terminal escape) as the escapes shown_path uses, the
    others as they are; click names such a path so too."""
    if text.isprintable():
        return text
    return "".join(char if char.isprintable() else _escaped(char) for char in text)


def _escaped(char: str) -> str:
    if char in _PATH_ESCAPES:
        return _PATH_ESCAPES[char]
    if char.isprintable():
        return char
    code = ord(char)
    if 0xDC80 <= code <= 0xDCFF:  # a byte that is not UTF-8, as os.fsdecode carries it: that byte
        return f"\\x{code - 0xDC00:02x}"
    if code < 0x80:
        return f"\\x{code:02x}"
    return f"\\u{code:04x}" if code <= 0xFFFF else f"\\U{code:08x}"
