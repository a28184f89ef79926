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
import signal
import subprocess
import tempfile
import time
from dataclasses import dataclass
from functools import cache
from importlib import resources
from pathlib import Path

from ..errors import SectorbenchError
from .compiler_flags import refused


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
#: The longest a compile may take: every kernel of every family with heavy flags (-O3
#: -flto -march=native) takes well under a minute here; ten minutes is generous even on
#: a loaded CI machine, and a hung compiler (or a `--cc` wrapper that waits) still ends.
COMPILE_TIMEOUT_S = 600.0
#: A private build directory older than this was left by a run killed mid-compile
#: (SIGKILL): removed by the next build into the same cache.
STALE_BUILD_S = 2 * COMPILE_TIMEOUT_S


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
        bad = refused(words)
        if bad is not None:
            raise BuildError(f"--flags {flags!r}: {bad[0]} is refused: it {bad[1]}")
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
    """$SECTORBENCH_CACHE, else $XDG_CACHE_HOME/sectorbench, else ~/.cache/sectorbench
    (an empty variable counts as unset: it would otherwise mean the current directory)."""
    if os.environ.get("SECTORBENCH_CACHE"):
        return Path(os.environ["SECTORBENCH_CACHE"])
    return Path(os.environ.get("XDG_CACHE_HOME") or Path.home() / ".cache") / "sectorbench"


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


def library_path(config: BuildConfig, cache_dir: Path | None = None) -> Path:
    """Where build(config) puts its library (it exists once built: a cached build is free)."""
    return Path(cache_dir or default_cache_dir()) / f"sectorbench-{cache_key(config)}.so"


def build(config: BuildConfig, cache_dir: Path | None = None) -> Path:
    """Return the path of the shared library for `config`, compiling it if it is not cached.

    A cached library is used only if its checksum (LIBRARY.sha256, written once the library
    is in place) matches: a truncated or damaged one is rebuilt, not loaded.  The compiler
    runs in a private directory of the cache (its working directory and TMPDIR), in its own
    process group, killed with its children on timeout or when sectorbench is interrupted.
    """
    cache_dir = Path(cache_dir or default_cache_dir())
    _usable_cache(cache_dir)
    library = library_path(config, cache_dir)
    if library.exists() and _intact(library):
        return library
    cc_path, _ = compiler_identity(config.cc)
    _remove_stale_builds(cache_dir)
    try:
        private = Path(tempfile.mkdtemp(prefix=f"{library.stem}.", suffix=BUILD_SUFFIX, dir=cache_dir))
    except OSError as exc:
        raise _cache_error(cache_dir, exc) from None
    output = private / library.name
    command = [
        cc_path,
        *config.flags,
        "-shared",
        "-fPIC",
        *(f"-I{folder}" for folder in include_dirs(config)),
        *map(str, sources(config)),
        "-o",
        str(output),
        "-lm",
    ]
    try:
        completed = _compile(command, private, config)
        if completed.returncode != 0:
            message = (completed.stderr or completed.stdout).strip()
            raise BuildError(f"compiling with {config.label!r} failed:\n{message}")
        try:
            with open(output, "rb") as stream:
                is_elf = stream.read(4) == b"\x7fELF"
        except OSError:
            is_elf = False
        if not is_elf:  # nothing, or not a shared library: never cache it
            raise BuildError(f"{config.cc!r} exited 0 but wrote no shared library: is it a C compiler?")
        digest = _sha256(output)

        try:
            os.replace(output, library)
            _write_checksum(library, digest)
        except OSError as exc:
            raise _cache_error(cache_dir, exc) from None
    finally:
        shutil.rmtree(private, ignore_errors=True)
    return library


#: The suffix of a private build directory in the cache.
BUILD_SUFFIX = ".build"
CHECKSUM_SUFFIX = ".sha256"


def _cache_error(cache_dir: Path, exc: OSError) -> BuildError:
    return BuildError(
        f"build cache {cache_dir} is unusable ({exc.strerror or exc}): set SECTORBENCH_CACHE to a writable directory"
    )


def _usable_cache(cache_dir: Path) -> None:
    try:
        cache_dir.mkdir(parents=True, exist_ok=True)
    except OSError as exc:
        raise _cache_error(cache_dir, exc) from None
    if not cache_dir.is_dir():
        raise BuildError(
            f"build cache {cache_dir} is unusable (not a directory): set SECTORBENCH_CACHE to a writable directory"
        )
    if not os.access(cache_dir, os.W_OK | os.X_OK):
        raise BuildError(
            f"build cache {cache_dir} is unusable (not writable): set SECTORBENCH_CACHE to a writable directory"
        )


def _sha256(path: Path) -> str:
    sha = hashlib.sha256()
    with open(path, "rb") as stream:
        for block in iter(lambda: stream.read(1 << 20), b""):
            sha.update(block)
    return sha.hexdigest()


def _checksum_path(library: Path) -> Path:
    return library.with_name(library.name + CHECKSUM_SUFFIX)


def _write_checksum(library: Path, digest: str) -> None:
    """LIBRARY.sha256, written (atomically) after the library is renamed into place."""
    sidecar = _checksum_path(library)
    fd, partial = tempfile.mkstemp(prefix=f".{sidecar.name}.", dir=library.parent)
    try:
        with os.fdopen(fd, "w") as stream:
            stream.write(digest + "\n")
        os.replace(partial, sidecar)
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
    command = [cc_path, *config.flags, "-E", "-P", *(f"-I{folder}" for folder in include_dirs(config))]
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


def _intact(library: Path) -> bool:
    """The cached library matches the checksum written with it; a damaged one (and its
    checksum) is removed so that it is rebuilt."""
    try:
        intact = _checksum_path(library).read_text().strip() == _sha256(library)
    except (OSError, UnicodeDecodeError):
        intact = False
    if not intact:
        for path in (library, _checksum_path(library)):
            try:
                path.unlink()
            except OSError:
                pass
    return intact


def _remove_stale_builds(cache_dir: Path) -> None:
    """Private build directories a killed run left behind (older than STALE_BUILD_S), and
    the *.partial libraries of sectorbench versions that compiled into the cache itself."""
    now = time.time()
    for leftover in [*cache_dir.glob(f"sectorbench-*{BUILD_SUFFIX}"), *cache_dir.glob("sectorbench-*.partial")]:
        try:
            if now - leftover.lstat().st_mtime > STALE_BUILD_S:
                if leftover.is_dir() and not leftover.is_symlink():
                    shutil.rmtree(leftover, ignore_errors=True)
                else:
                    leftover.unlink()
        except OSError:
            pass


def _compile(command: list[str], private: Path, config: BuildConfig) -> subprocess.CompletedProcess:
    """Run the compiler in `private` (cwd and TMPDIR) in its own process group; on timeout,
    or when this process is interrupted (Ctrl-C, SIGTERM), the whole group is killed."""
    env = {**os.environ, "TMPDIR": str(private)}
    try:
        process = subprocess.Popen(
            command,
            cwd=private,
            env=env,
            stdin=subprocess.DEVNULL,
            stdout=subprocess.PIPE,
            stderr=subprocess.PIPE,
            text=True,
            errors="replace",
            start_new_session=True,
        )
    except OSError as exc:
        raise BuildError(f"compiler {config.cc!r} does not run: {exc.strerror or exc}") from None
    try:
        stdout, stderr = process.communicate(timeout=COMPILE_TIMEOUT_S)
    except subprocess.TimeoutExpired:
        _kill_group(process)
        raise BuildError(
            f"compiling with {config.label!r} took longer than {COMPILE_TIMEOUT_S:g} s: the compiler was stopped"
        ) from None
    except BaseException:
        _kill_group(process)
        raise
    return subprocess.CompletedProcess(command, process.returncode, stdout, stderr)


def _kill_group(process: subprocess.Popen) -> None:
    try:
        os.killpg(process.pid, signal.SIGKILL)
    except (ProcessLookupError, PermissionError):
        pass
    process.communicate()


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
