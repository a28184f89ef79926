"""Compile the C kernels into a cached shared library: the only module that runs the compiler.

The compiler is called directly with exactly the user's flags (setuptools would add
Python's own CFLAGS), plus `-shared -fPIC` and `-lm`.  The library's name is a hash of
every source, the flags, the compiler's path and `--version`, so a path is never
reused for different content (dlopen would return the library already loaded there).
It is written under a temporary name and renamed, so two runs at once never load a
half-written file.
"""

from __future__ import annotations

import hashlib
import os
import re
import shlex
import shutil
import subprocess
import tempfile
from dataclasses import dataclass
from functools import cache
from importlib import resources
from pathlib import Path

from ..errors import SectorbenchError


def _kernels_dir() -> Path:
    """The C sources: package data of `sectorbench.kernels_c`, the repository's kernels_c/.

    pyproject.toml maps that package onto the top-level kernels_c/ directory, so an
    editable install reads the checkout's files and a wheel carries its own copy.
    """
    try:
        return Path(str(resources.files("sectorbench.kernels_c")))
    except ModuleNotFoundError:  # a bare checkout on PYTHONPATH, not installed
        return Path(__file__).resolve().parent.parent.parent / "kernels_c"


KERNELS_DIR = _kernels_dir()
#: The harness: the ABI, the row and loop templates, the table.  Every other folder of
#: kernels_c/ is a family's C side; a family's folder may declare more C interface in abi.h.
HARNESS_DIR = KERNELS_DIR / "harness"
ABI_HEADER = HARNESS_DIR / "sb_abi.h"
FAMILY_ABI = "abi.h"
#: Folders of kernels_c/ holding C that is not linked into the library (programs with a main()).
NOT_LINKED = ("drivers",)

#: Default compiler: $CC, else the system's `cc`.
DEFAULT_CC = os.environ.get("CC", "cc")
DEFAULT_FLAGS = "-O2"


class BuildError(SectorbenchError):
    """The compiler is missing or rejected the sources; the message holds its output."""


@dataclass(frozen=True)
class BuildConfig:
    """One build: a compiler and its exact flags."""

    flags: tuple[str, ...] = (DEFAULT_FLAGS,)
    cc: str = DEFAULT_CC
    #: More C files to link in (tests add deliberately broken kernels this way).
    extra_sources: tuple[Path, ...] = ()

    @classmethod
    def parse(cls, flags: str, cc: str = DEFAULT_CC, extra_sources: tuple[Path, ...] = ()) -> BuildConfig:
        try:
            words = tuple(shlex.split(flags))
        except ValueError as exc:
            raise BuildError(f"cannot parse --flags {flags!r}: {exc}") from None
        return cls(words, cc, tuple(Path(p).resolve() for p in extra_sources))

    @property
    def label(self) -> str:
        """The flags as the user wrote them, prefixed by the compiler when it is not the default."""
        return build_label(self.cc, " ".join(self.flags), show_cc=self.cc != DEFAULT_CC)


def build_label(cc: str, flags: str, show_cc: bool) -> str:
    """How a build is named everywhere: its flags, after the compiler when several are shown."""
    flags = flags or "(no flags)"
    return f"{cc} {flags}" if show_cc else flags


def _linked(path: Path) -> bool:
    return path.relative_to(KERNELS_DIR).parts[0] not in NOT_LINKED


def sources(config: BuildConfig) -> list[Path]:
    """Every C file of kernels_c/ (the harness and each family's folder), then the user's."""
    return sorted(p for p in KERNELS_DIR.rglob("*.c") if _linked(p)) + list(config.extra_sources)


def headers() -> list[Path]:
    return sorted(KERNELS_DIR.rglob("*.h"))


def include_dirs() -> list[Path]:
    """The harness first (sb_common.h, which user kernels include), then each family's folder."""
    folders = sorted({p.parent for p in headers()} - {HARNESS_DIR})
    return [HARNESS_DIR, *folders]


def cdef_source() -> str:
    """The declarations cffi needs: sb_abi.h, then each family's abi.h (none holds preprocessor lines)."""
    family_abis = sorted(p for p in KERNELS_DIR.glob(f"*/{FAMILY_ABI}") if p.parent != HARNESS_DIR)
    return "\n".join(path.read_text() for path in (ABI_HEADER, *family_abis))


def default_cache_dir() -> Path:
    if "SECTORBENCH_CACHE" in os.environ:
        return Path(os.environ["SECTORBENCH_CACHE"])
    return Path(os.environ.get("XDG_CACHE_HOME", Path.home() / ".cache")) / "sectorbench"


@cache
def compiler_identity(cc: str) -> tuple[str, str]:
    """(resolved path, `cc --version` output); BuildError if the compiler is missing."""
    path = shutil.which(cc)
    if path is None:
        raise BuildError(f"compiler {cc!r} not found (set --cc or $CC)")
    try:
        version = subprocess.run([path, "--version"], capture_output=True, text=True, timeout=60).stdout
    except (OSError, subprocess.TimeoutExpired) as exc:
        raise BuildError(f"compiler {cc!r} does not run: {exc}") from None
    return path, version


def cache_key(config: BuildConfig) -> str:
    path, version = compiler_identity(config.cc)
    sha = hashlib.sha256()
    for part in (path, version, "\0".join(config.flags), cdef_source()):
        sha.update(part.encode())
        sha.update(b"\0")
    for source in sources(config) + headers():
        sha.update(str(source.relative_to(KERNELS_DIR) if source.is_relative_to(KERNELS_DIR) else source).encode())
        sha.update(source.read_bytes())
    return sha.hexdigest()[:24]


def library_path(config: BuildConfig, cache_dir: Path | None = None) -> Path:
    """Where build(config) puts its library (it exists once built: a cached build is free)."""
    return Path(cache_dir or default_cache_dir()) / f"sectorbench-{cache_key(config)}.so"


def build(config: BuildConfig, cache_dir: Path | None = None) -> Path:
    """Return the path of the shared library for `config`, compiling it if it is not cached."""
    cache_dir = Path(cache_dir or default_cache_dir())
    cache_dir.mkdir(parents=True, exist_ok=True)
    library = library_path(config, cache_dir)
    if library.exists():
        return library
    cc_path, _ = compiler_identity(config.cc)
    fd, partial = tempfile.mkstemp(prefix=library.stem + ".", suffix=".partial", dir=cache_dir)
    os.close(fd)
    command = [
        cc_path,
        *config.flags,
        "-shared",
        "-fPIC",
        *(f"-I{folder}" for folder in include_dirs()),
        *map(str, sources(config)),
        "-o",
        partial,
        "-lm",
    ]
    try:
        completed = subprocess.run(command, capture_output=True, text=True, timeout=600)
        if completed.returncode != 0:
            message = (completed.stderr or completed.stdout).strip()
            raise BuildError(f"compiling with {config.label!r} failed:\n{message}")
        with open(partial, "rb") as output:
            if output.read(4) != b"\x7fELF":  # nothing, or not a shared library: never cache it
                raise BuildError(f"{config.cc!r} exited 0 but wrote no shared library: is it a C compiler?")
        os.replace(partial, library)
    finally:
        if os.path.exists(partial):
            os.unlink(partial)
    return library


#: A kernel row as the preprocessor leaves it: `sb_kernel NAME = { .name = "...", ... .family = "..." ... };`.
_ROW = re.compile(r"\bsb_kernel\s+\w+\s*=\s*\{(.*?)\};", re.S)
_FIELD = r'\.{}\s*=\s*"([^"]*)"'


@cache
def kernel_index(config: BuildConfig) -> dict[str, str] | None:
    """Every kernel row's name and family in `config`'s sources, read by preprocessing them
    (about half a second; nothing is compiled), so that a misspelt --kernels name is refused
    before a build.  None when the preprocessor fails (the build then reports why)."""
    cc_path, _ = compiler_identity(config.cc)
    command = [cc_path, *config.flags, "-E", "-P", *(f"-I{folder}" for folder in include_dirs())]
    try:
        completed = subprocess.run(
            [*command, *map(str, sources(config))], capture_output=True, text=True, timeout=120, errors="replace"
        )
    except (OSError, subprocess.TimeoutExpired):
        return None
    if completed.returncode != 0:
        return None
    index = {}
    for row in _ROW.finditer(completed.stdout):
        name, family = re.search(_FIELD.format("name"), row.group(1)), re.search(_FIELD.format("family"), row.group(1))
        if name:
            index[name.group(1)] = family.group(1) if family else ""
    return index
