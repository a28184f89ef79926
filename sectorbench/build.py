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
import shlex
import shutil
import subprocess
import tempfile
from dataclasses import dataclass
from functools import cache
from importlib import resources
from pathlib import Path

from . import SectorbenchError


def _kernels_dir() -> Path:
    """The C sources: package data of `sectorbench.kernels_c`, the repository's kernels_c/.

    pyproject.toml maps that package onto the top-level kernels_c/ directory, so an
    editable install reads the checkout's files and a wheel carries its own copy.
    """
    try:
        return Path(str(resources.files("sectorbench.kernels_c")))
    except ModuleNotFoundError:  # a bare checkout on PYTHONPATH, not installed
        return Path(__file__).resolve().parent.parent / "kernels_c"


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
    #: Another kernels_c/ tree to build from (run --against: the kernels of a git ref); None: this package's.
    kernels_dir: Path | None = None

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


def _linked(path: Path, kernels_dir: Path = KERNELS_DIR) -> bool:
    return path.relative_to(kernels_dir).parts[0] not in NOT_LINKED


def kernels_dir_of(config: BuildConfig | None) -> Path:
    """The kernels_c/ tree a build compiles: its own (run --against), else this package's."""
    return Path(config.kernels_dir) if config is not None and config.kernels_dir is not None else KERNELS_DIR


def sources(config: BuildConfig) -> list[Path]:
    """Every C file of kernels_c/ (the harness and each family's folder), then the user's."""
    root = kernels_dir_of(config)
    return sorted(p for p in root.rglob("*.c") if _linked(p, root)) + list(config.extra_sources)


def headers(config: BuildConfig | None = None) -> list[Path]:
    return sorted(kernels_dir_of(config).rglob("*.h"))


def include_dirs(config: BuildConfig | None = None) -> list[Path]:
    """The harness first (sb_common.h, which user kernels include), then each family's folder."""
    harness = kernels_dir_of(config) / HARNESS_DIR.name
    folders = sorted({p.parent for p in headers(config)} - {harness})
    return [harness, *folders]


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
    root = kernels_dir_of(config)
    for source in sources(config) + headers(config):
        sha.update(str(source.relative_to(root) if source.is_relative_to(root) else source).encode())
        sha.update(source.read_bytes())
    return sha.hexdigest()[:24]


def build(config: BuildConfig, cache_dir: Path | None = None) -> Path:
    """Return the path of the shared library for `config`, compiling it if it is not cached."""
    cache_dir = Path(cache_dir or default_cache_dir())
    cache_dir.mkdir(parents=True, exist_ok=True)
    library = cache_dir / f"sectorbench-{cache_key(config)}.so"
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
        *(f"-I{folder}" for folder in include_dirs(config)),
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


#: The C programs of kernels_c/drivers/ (never linked into a library: each has a main()).
DRIVERS_DIR = KERNELS_DIR / NOT_LINKED[0]
#: Where valgrind's client-request headers (valgrind/callgrind.h) are looked for: Debian's
#: valgrind package installs them under /usr/include, a source build under /usr/local/include.
VALGRIND_INCLUDE_DIRS = (Path("/usr/include"), Path("/usr/local/include"))
#: A driver is compiled like this, whatever the kernels' flags: it only dlopens a build and calls it.
DRIVER_FLAGS = ("-O2", "-std=c11")


def valgrind_include_dir() -> Path | None:
    """The folder holding valgrind/callgrind.h, or None when valgrind's headers are not installed."""
    return next((folder for folder in VALGRIND_INCLUDE_DIRS if (folder / "valgrind" / "callgrind.h").is_file()), None)


def build_driver(name: str, cc: str = DEFAULT_CC, cache_dir: Path | None = None) -> Path:
    """Compile kernels_c/drivers/NAME.c into a program, cached by its source, the ABI and the compiler.

    Only built where valgrind's headers exist (the drivers use its client requests);
    BuildError says how to get them otherwise."""
    include = valgrind_include_dir()
    if include is None:
        raise BuildError("valgrind's headers (valgrind/callgrind.h) are not installed: apt-get install valgrind")
    source = DRIVERS_DIR / f"{name}.c"
    cc_path, version = compiler_identity(cc)
    sha = hashlib.sha256()
    for part in (cc_path, version, "\0".join(DRIVER_FLAGS), source.read_text(), ABI_HEADER.read_text(), str(include)):
        sha.update(part.encode())
        sha.update(b"\0")
    cache_dir = Path(cache_dir or default_cache_dir())
    cache_dir.mkdir(parents=True, exist_ok=True)
    program = cache_dir / f"driver-{name}-{sha.hexdigest()[:24]}"
    if program.exists():
        return program
    fd, partial = tempfile.mkstemp(prefix=program.name + ".", suffix=".partial", dir=cache_dir)
    os.close(fd)
    command = [cc_path, *DRIVER_FLAGS, f"-I{HARNESS_DIR}", f"-I{include}", str(source), "-o", partial, "-ldl"]
    try:
        completed = subprocess.run(command, capture_output=True, text=True, timeout=600)
        if completed.returncode != 0:
            raise BuildError(f"compiling the {name} driver failed:\n{(completed.stderr or completed.stdout).strip()}")
        os.chmod(partial, 0o755)
        os.replace(partial, program)
    finally:
        if os.path.exists(partial):
            os.unlink(partial)
    return program
