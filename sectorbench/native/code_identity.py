"""A kernel's machine code as a fingerprint that survives unrelated code moving.

The gate must not call a kernel slower when its machine code did not change (LNT's
open FIXME): the difference is noise, whatever the samples say.  Comparing raw bytes
would not do: adding a kernel anywhere in the library moves every function after it,
and with them every jump target, call and RIP-relative displacement.  So a function is
hashed as ``machine_code.disassemble`` shows it, normalised:

- addresses are dropped; a branch inside the function names its target by the index
  of the instruction it lands on (``L12``);
- a call, jump or address taken of another function of the library names it and
  appends that function's own normalised code (recursively, each once): the predicate
  a ``call``-mode loop calls through a pointer is part of its identity.  A PLT stub
  (``sqrtf@plt``) is named, not followed: its code is the dynamic linker's;
- a RIP-relative operand becomes ``RIP`` followed by the bytes it reads when they lie in
  a read-only section (a constant: 1.0f, a mask, a lookup table); the size read is the
  data object's (from the symbol table) when the operand points at the start of one, else
  the operand width implied by the instruction;
- a RIP-relative operand in writable data (a global ``int reps = 1;`` the loop reads)
  becomes the object's name and its initial bytes, from the file's .data (zeros in .bss):
  a changed initial value changes what the loop does, not one instruction of it.  A
  global of the library is read through its GOT slot (``-fPIC``: it may be interposed),
  whose bytes the dynamic linker fills in; the slot's relocation (``objdump -R``) names
  the symbol, and the operand becomes that symbol's name and initial bytes the same way
  (or ``fn:`` and its code, for a function of the library).  Pointers stored in data are
  hashed as the file holds them (their relocations' addends are not followed);
- alignment padding (``nop``, ``xchg %ax,%ax``, ``cs nopw ...``) is dropped: it moves
  with the function's address.

Two libraries whose fingerprints of a function agree run the same instructions on the
same constants.  A fingerprint is cached next to the library (which never changes under
its cache key).
"""

from __future__ import annotations

import bisect
import hashlib
import json
import re
import subprocess
from dataclasses import dataclass
from pathlib import Path

from .machine_code import disassemble, strip_prefixes

__all__ = ["CACHE_VERSION", "code_fingerprints", "normalized_code"]

#: Bumped when the normalisation changes, so no cached fingerprint of the old rule is reused.
#: 2: writable data a function reads (directly or through the GOT) is hashed by its initial bytes.
CACHE_VERSION = 2

_COMMENT_TARGET = re.compile(r"\s*#\s*([0-9a-f]+)\s+<([^>]+)>\s*$")
_DIRECT = re.compile(r"^((?:j[a-z]+|call|loop[a-z]*|jmp)\s+)([0-9a-f]+)\s+<[^>]+>$")
_RIP = re.compile(r"-?0x[0-9a-f]+\(%rip\)")
_PADDING = re.compile(r"^(?:(?:data16|cs|ds)\s+)*nop[a-z]*\b|^xchg\s+%ax,%ax$")
_SECTION = re.compile(r"^\s*\d+\s+(\S+)\s+([0-9a-f]+)\s+([0-9a-f]+)\s+[0-9a-f]+\s+([0-9a-f]+)\s")
#: A data object of ``objdump -t``: address, seven flag characters (the last ``O``), section,
#: size, name.
_SYMBOL = re.compile(r"^([0-9a-f]+)\s.{6}O\s+(\S+)\s+([0-9a-f]+)\s+(\S+)$")
#: A GOT slot the dynamic linker fills with a symbol's address: ``OFFSET R_X86_64_GLOB_DAT NAME@@Base``.
_GOT_SLOT = re.compile(r"^([0-9a-f]+)\s+R_X86_64_GLOB_DAT\s+([^@\s]+)")
#: Bytes a RIP-relative load reads, by what the instruction names: scalar single/double
#: and broadcasts first, then the widest vector register, then an integer register.
_SCALAR_SIZES = (
    (re.compile(r"broadcastb$"), 1),
    (re.compile(r"broadcastw$"), 2),
    (re.compile(r"(?:broadcastss|broadcastd|ss|movd)$"), 4),
    (re.compile(r"(?:broadcastsd|broadcastq|sd|movq|movddup)$"), 8),
)
_REGISTER_SIZES = (("%zmm", 64), ("%ymm", 32), ("%xmm", 16), ("%r", 8), ("%e", 4))


@dataclass(frozen=True)
class _Section:
    name: str
    start: int
    size: int
    offset: int  # in the file
    contents: bool  # False for .bss: loaded as zeros, not stored in the file


def _sections(library: Path) -> tuple[list[_Section], list[_Section]]:
    """Read-only and writable data sections loaded with the library, from ``objdump -h``
    (flags on the following line)."""
    lines = subprocess.run(
        ["objdump", "-h", str(library)], capture_output=True, text=True, check=True, timeout=60
    ).stdout.splitlines()
    read_only, writable = [], []
    for line, flags in zip(lines, lines[1:]):
        m = _SECTION.match(line)
        if not m or "ALLOC" not in flags or "CODE" in flags:
            continue
        section = _Section(
            m.group(1), int(m.group(3), 16), int(m.group(2), 16), int(m.group(4), 16), "CONTENTS" in flags
        )
        if "READONLY" not in flags:
            writable.append(section)
        elif section.contents:
            read_only.append(section)
    return read_only, writable


def _data_objects(library: Path) -> dict[str, tuple[int, int]]:
    """Name -> (start address, size) of every data object the symbol table names."""
    text = subprocess.run(["objdump", "-t", str(library)], capture_output=True, text=True, check=True, timeout=60)
    objects = {}
    for line in text.stdout.splitlines():
        m = _SYMBOL.match(line)
        if m and int(m.group(3), 16):
            objects[m.group(4)] = (int(m.group(1), 16), int(m.group(3), 16))
    return objects


def _got_slots(library: Path) -> dict[int, str]:
    """GOT slot address -> the symbol whose address the dynamic linker writes there."""
    text = subprocess.run(["objdump", "-R", str(library)], capture_output=True, text=True, check=True, timeout=60)
    return {int(m.group(1), 16): m.group(2) for line in text.stdout.splitlines() if (m := _GOT_SLOT.match(line))}


def _operand_size(text: str) -> int:
    mnemonic = text.split(" ", 1)[0]
    for pattern, size in _SCALAR_SIZES:
        if pattern.search(mnemonic):
            return size
    return next((size for register, size in _REGISTER_SIZES if register in text), 8)


class _Library:
    """What normalising needs to know of one library: its code, constants, data objects and GOT."""

    def __init__(self, library: Path):
        self.path = Path(library)
        self.code = disassemble(self.path)
        self.starts = {instructions[0].address: name for name, instructions in self.code.items() if instructions}
        self.read_only, self.writable = _sections(self.path)
        self.named_objects = _data_objects(self.path)
        self.objects = dict(self.named_objects.values())  # start -> size
        self.object_starts = sorted(self.objects)
        self.object_names = {start: name for name, (start, _) in self.named_objects.items()}
        self.got = _got_slots(self.path)
        self._bytes = self.path.read_bytes()

    def constant(self, address: int, size: int) -> bytes | None:
        """`size` bytes at `address` if they lie in a read-only section, else None.

        An address inside a data object the symbol table names (a lookup table) stands
        for the whole object, and its offset in it.
        """
        return self._object_or_bytes(address, size, self.read_only)

    def initial_data(self, address: int, size: int) -> bytes | None:
        """As `constant`, for writable data: the bytes the library is loaded with."""
        return self._object_or_bytes(address, size, self.writable)

    def object_at(self, address: int) -> str | None:
        """The name of the data object `address` lies in, if the symbol table names one."""
        index = bisect.bisect_right(self.object_starts, address) - 1
        if index >= 0 and address < self.object_starts[index] + self.objects[self.object_starts[index]]:
            return self.object_names[self.object_starts[index]]
        return None

    def _object_or_bytes(self, address: int, size: int, sections: list[_Section]) -> bytes | None:
        index = bisect.bisect_right(self.object_starts, address) - 1
        if index >= 0:
            start = self.object_starts[index]
            if address < start + self.objects[start]:
                whole = self._bytes_in(start, self.objects[start], sections)
                if whole is not None:
                    return (address - start).to_bytes(8, "little") + whole
        return self._bytes_in(address, size, sections)

    def _bytes_in(self, address: int, size: int, sections: list[_Section]) -> bytes | None:
        for section in sections:
            if section.start <= address and address + size <= section.start + section.size:
                if not section.contents:
                    return bytes(size)
                begin = section.offset + address - section.start
                return self._bytes[begin : begin + size]
        return None


def _normalized_lines(library: _Library, name: str, callees: list[str]) -> list[str]:
    """One function's instructions, normalised (see the module doc); other functions it
    refers to are appended to `callees`."""
    instructions = [
        i for i in library.code[name] if not _PADDING.match(strip_prefixes(re.sub(r"\s+", " ", i.text.strip())))
    ]
    addresses = [i.address for i in instructions]
    first, last = (addresses[0], addresses[-1]) if addresses else (0, -1)

    def reference(target: int, shown: str) -> str:
        if first <= target <= last:
            return f"L{bisect.bisect_left(addresses, target)}"
        callee = library.starts.get(target)
        if callee is not None:
            if "@" not in callee and callee not in callees:  # a PLT stub is the linker's, not followed
                callees.append(callee)
            return f"fn:{callee}"
        return shown.split("+", 1)[0]  # some data symbol: its name, where it moved to does not matter

    def data(name: str, address: int, size: int) -> str:
        initial = library.initial_data(address, size)
        return f"data:{name}" if initial is None else f"data:{name}={initial.hex()}"

    def operand(target: int, shown: str, size: int) -> str:
        """What a RIP-relative operand stands for (see the module doc)."""
        if target in library.starts:
            return reference(target, shown)
        if (loaded := library.constant(target, size)) is not None:
            return f"const:{loaded.hex()}"
        if (symbol := library.got.get(target)) is not None:  # the slot holds the symbol's address
            if symbol in library.code and library.code[symbol]:
                return "got:" + reference(library.code[symbol][0].address, symbol)
            start, object_size = library.named_objects.get(symbol, (None, 0))
            return "got:" + (symbol if start is None else data(symbol, start, object_size))
        if (name := library.object_at(target)) is not None or library.initial_data(target, size) is not None:
            return data(name or "?", target, size)
        return reference(target, shown)

    lines = []
    for instruction in instructions:
        text = re.sub(r"\s+", " ", instruction.text.strip())
        if m := _COMMENT_TARGET.search(text):
            target, shown = int(m.group(1), 16), m.group(2)
            text = text[: m.start()]
            if _RIP.search(text):
                text = _RIP.sub(f"RIP[{operand(target, shown, _operand_size(text))}]", text)
            else:
                text += f" # {reference(target, shown)}"
        elif m := _DIRECT.match(text):
            target = int(m.group(2), 16)
            text = m.group(1) + reference(target, text[m.end(2) :].strip(" <>"))
        lines.append(text)
    return lines


def normalized_code(library: Path | _Library, function: str) -> str:
    """`function` and every function it refers to, normalised, as one text (what is hashed)."""
    library = library if isinstance(library, _Library) else _Library(library)
    if function not in library.code:
        raise KeyError(function)
    callees = [function]
    parts = []
    for name in callees:  # grows while it is walked: each function's callees, each once
        parts.append(f"== {'' if name == function else name}")
        parts += _normalized_lines(library, name, callees)
    return "\n".join(parts) + "\n"


def code_fingerprints(library: Path, functions: list[str]) -> dict[str, str | None]:
    """sha256 of each function's normalised code; None for a function not in the library.

    Cached in LIBRARY.code-vN.json next to the library.
    """
    library = Path(library)
    cache = library.with_name(f"{library.stem}.code-v{CACHE_VERSION}.json")
    known = json.loads(cache.read_text()) if cache.exists() else {}
    missing = [name for name in functions if name not in known]
    if missing:
        loaded = _Library(library)
        for name in missing:
            known[name] = (
                hashlib.sha256(normalized_code(loaded, name).encode()).hexdigest() if name in loaded.code else None
            )
        partial = cache.with_suffix(".partial")
        partial.write_text(json.dumps(known))
        partial.replace(cache)
    return {name: known[name] for name in functions}
