"""Compile the C kernels into a cached shared library: the only module that runs the compiler.

The compiler is called directly with exactly the user's flags (setuptools would add
Python's own CFLAGS), plus `-shared -fPIC`, `-lm` and the warnings of WARNING_FLAGS, which
come first so that a `-w` or `-Wno-...` of the user's wins.  What the compiler says about a
build that succeeds is kept beside it (LIBRARY.warnings; see compiler_warnings).  The
library's name is a hash of every source, the flags, the compiler's path and `--version`, and
beside it is the list of every other file its compiles read (the compiler's own `-MD` list: a
header of an `-I` folder, `-include`'s file, the system's headers), of the headers present in
every folder the preprocessor searched, of the files the flags name and of the libraries they
link by name (-lfoo, as the linker finds it): a cached library is used only while all of them
are as they were (see _cached).  It is written under a temporary name and renamed, so two runs
at once never load a half-written file.
"""

from __future__ import annotations

import codecs
import contextlib
import contextvars
import errno
import fcntl
import glob
import hashlib
import json
import os
import re
import shlex
import shutil
import stat
import subprocess
import tempfile
import time
from dataclasses import dataclass
from functools import cache
from importlib import resources
from pathlib import Path

from ..errors import SectorbenchError
from ..interrupts import kill_session, run_in_own_session, scratch_directory, signals_held
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

#: Default compiler: $CC (an empty one counts as unset), else the system's `cc`.
DEFAULT_CC = os.environ.get("CC") or "cc"
DEFAULT_FLAGS = "-O2"
#: Every compile is a warning check too: a build is not compiled again just to be checked
#: (tests/test_c_warnings.py reads these builds' warnings), and a --source kernel's author
#: sees what the compiler noticed.  Warnings change no code; they are in every key here.
WARNING_FLAGS = ("-Wall", "-Wextra")
#: The longest a compile may take: every kernel of every family with heavy flags (-O3
#: -flto -march=native) takes well under a minute here; ten minutes is generous even on
#: a loaded CI machine, and a hung compiler (or a `--cc` wrapper that waits) still ends.
COMPILE_TIMEOUT_S = 600.0
#: The end (a time.monotonic()) of the command the compilers run for, and what to say when one
#: is stopped there (compile_deadline): a run's --max-minutes bounds its builds as its kernels.
_COMMAND_END: contextvars.ContextVar[tuple[float, str] | None] = contextvars.ContextVar("command_end", default=None)
#: The longest the preprocessing that reads a build's kernel rows may take (0.45 s here).
PREPROCESS_TIMEOUT_S = 120.0
#: A private build directory older than this was left by a run killed mid-compile
#: (SIGKILL): removed by the next build into the same cache.
STALE_BUILD_S = 2 * COMPILE_TIMEOUT_S
#: Compilers one build runs at once: each folder of kernels_c/ is its own object (see units),
#: the largest started first, so a build takes about its largest folder's time on as many cores.
COMPILE_JOBS = len(os.sched_getaffinity(0)) if hasattr(os, "sched_getaffinity") else (os.cpu_count() or 1)
#: Where the objects of kernels_c/ are kept, in the cache: named by the hash of the compiler,
#: the flags, the folder's files and every header of its tree, so builds that differ only in
#: the user's --source files (or a git ref whose folder is the same) compile only what differs.
OBJECTS_DIR = "objects"
#: The lock files of builds and objects being compiled, in the cache (see _locked).
LOCKS_DIR = "locks"
#: Flags only the linker reads.  clang warns about them on a compile-only step (an error under
#: -Werror), so a build that has one compiles and links in one command, as a whole.
_LINKER_FLAGS = {"-s", "-pie", "-no-pie", "-rdynamic", "-static", "-shared", "-nostdlib", "-nostartfiles",
                 "-nodefaultlibs", "-Xlinker", "-T"}  # fmt: skip
_LINKER_PREFIXES = ("-Wl,", "-l", "-L", "-fuse-ld=", "-static-")


class BuildError(SectorbenchError):
    """The compiler is missing or rejected the sources; the message holds its output."""


class CacheError(BuildError):
    """The build cache is unusable: every build's error, not one build's."""


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
        if "" in words:  # cc would look for an input file named "" and fail after the scene is made
            raise BuildError(
                f"--flags {flags!r}: an empty quoted argument ('' or \"\") reaches the compiler as a file name"
            )
        bad = refused(words)
        if bad is not None:
            raise BuildError(f"--flags {flags!r}: {bad[0]} is refused: it {bad[1]}")
        return cls(words, cc, tuple(Path(p).resolve() for p in extra_sources))

    @property
    def compile_flags(self) -> tuple[str, ...]:
        """What the compiler is given: the harness's warnings, then the user's flags (theirs win)."""
        return WARNING_FLAGS + self.flags

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
    return _kernel_sources(config) + list(config.extra_sources)


def _kernel_sources(config: BuildConfig) -> list[Path]:
    root = kernels_dir_of(config)
    return sorted(p for p in root.rglob("*.c") if _linked(p, root))


def units(config: BuildConfig) -> list[tuple[str, list[Path]]]:
    """kernels_c/'s translation units: one per folder, its C files in name order, each unit
    named by its folder ("sector-broadphase").  A folder's files are compiled as one unit (a
    file #including each of them), so the harness header and <immintrin.h> they all include
    are parsed once a folder, not once a file: gcc spends 0.4 s of its 0.35-1.4 s per file
    here on that header alone.  Their file-scope names must therefore differ."""
    root = kernels_dir_of(config)
    by_folder: dict[Path, list[Path]] = {}
    for source in _kernel_sources(config):
        by_folder.setdefault(source.parent, []).append(source)
    return [("-".join(folder.relative_to(root).parts) or root.name, files) for folder, files in by_folder.items()]


def headers(config: BuildConfig | None = None) -> list[Path]:
    return sorted(kernels_dir_of(config).rglob("*.h"))


def local_headers(source: Path) -> list[Path]:
    """The headers beside a --source file (*.h in its folder), which it may include: they are
    part of its build's identity, so editing one rebuilds the library instead of reusing it."""
    return sorted(Path(source).parent.glob("*.h"))


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
    """The build cache's folder (see cache_choice)."""
    return cache_choice()[0]


#: The build cache's last resort: TMPDIR/sectorbench-cache-UID, private to this user.
FALLBACK_CACHE_PREFIX = "sectorbench-cache-"


def cache_choice() -> tuple[Path, str | None]:
    """(the build cache's folder, None; or, where it is the fallback, why).

    $SECTORBENCH_CACHE, else $XDG_CACHE_HOME/sectorbench, else ~/.cache/sectorbench (an empty
    variable counts as unset: it would otherwise mean the current directory), made absolute
    from the current directory: each build compiles in its private directory, where a relative
    `relcache/...` named nothing ("cc1: fatal error: ... No such file").  Where neither variable
    is set and ~/.cache/sectorbench cannot be made or written (a CI container job run as a user
    with no home: HOME=/ read-only, or a uid with no passwd entry and HOME unset), the cache is
    a private folder of this user's in the temp folder (private_temp_cache): every build had
    failed there, "build cache /.cache/sectorbench is unusable (Permission denied)"."""
    if os.environ.get("SECTORBENCH_CACHE"):
        return Path(os.path.abspath(os.environ["SECTORBENCH_CACHE"])), None
    if os.environ.get("XDG_CACHE_HOME"):
        return Path(os.path.abspath(Path(os.environ["XDG_CACHE_HOME"]) / "sectorbench")), None
    try:
        home_cache = Path(os.path.abspath(Path.home() / ".cache" / "sectorbench"))
    except RuntimeError:  # HOME unset, and no passwd entry for this uid
        why = f"HOME is not set and uid {os.geteuid()} has no home directory"
    else:
        why = _unwritable(home_cache)
        if why is None:
            return home_cache, None
    return private_temp_cache(), why


def _unwritable(folder: Path) -> str | None:
    """Why `folder` cannot be made or written by this user, or None."""
    try:
        folder.mkdir(parents=True, exist_ok=True)
    except OSError as exc:
        return f"{folder} cannot be made: {exc.strerror or exc}"
    if not folder.is_dir():
        return f"{folder} is not a directory"
    if not os.access(folder, os.W_OK | os.X_OK):
        return f"{folder} is not writable"
    return None


def private_temp_cache() -> Path:
    """TMPDIR/sectorbench-cache-UID, made 0700, and used only if it is a directory (not a link)
    of this user's that no one else may write to: in a temp folder others write to (/tmp),
    another user could have made it first, or a link by its name, and handed this user's runs
    libraries of theirs to load.  CacheError names what is wrong with it."""
    uid = os.geteuid()
    folder = Path(tempfile.gettempdir()) / f"{FALLBACK_CACHE_PREFIX}{uid}"
    try:
        with contextlib.suppress(FileExistsError):
            folder.mkdir(mode=0o700)
        info = folder.lstat()
    except OSError as exc:
        raise _cache_error(folder, exc) from None
    if stat.S_ISLNK(info.st_mode):
        wrong = "a symbolic link"
    elif not stat.S_ISDIR(info.st_mode):
        wrong = "not a directory"
    elif info.st_uid != uid:
        wrong = f"owned by {_user_name(info.st_uid)}"
    elif info.st_mode & (stat.S_IWGRP | stat.S_IWOTH):
        wrong = f"group or others may write to it, mode {stat.S_IMODE(info.st_mode):o}"
    else:
        return folder
    raise CacheError(
        f"build cache {folder} is refused ({wrong}: another user may have made it): remove it,"
        " or set SECTORBENCH_CACHE to a writable directory"
    )


@cache
def repeated_build(configs: list[BuildConfig] | tuple[BuildConfig, ...]) -> tuple[int, int] | None:
    """The places (first, again) of the first build given twice ("-O2" and " -O2 " are one), or
    None: measured or checked twice, a build would be twin rows."""
    seen: dict[BuildConfig, int] = {}
    for place, config in enumerate(configs):
        if config in seen:
            return seen[config], place
        seen[config] = place
    return None


def compiler_identity(cc: str) -> tuple[str, str]:
    """(resolved path, `cc --version` output); BuildError if the compiler is missing."""
    path = shutil.which(cc)
    if path is None:
        raise BuildError(f"compiler {cc!r} {_why_not_runnable(cc)} (set --cc or $CC)")
    # Absolute (links kept: gcc-12, ccache's), since compilers run in a private folder of the
    # cache: --cc ./mygcc was found here, then "./mygcc: not found" there
    path = os.path.abspath(path)
    try:
        version = run_compiler([path, "--version"], timeout=60).stdout
    except (OSError, subprocess.TimeoutExpired) as exc:
        raise BuildError(f"compiler {cc!r} does not run: {exc}{_no_process_hint(exc)}") from None
    return path, version


def _why_not_runnable(cc: str) -> str:
    """Why shutil.which found no compiler `cc`: given by its path, one that is there but that
    this user may not run, or that is behind a folder closed to them (a CI runner's user and a
    compiler under /root), was "not found" as a missing one was."""
    if os.sep not in cc:
        return "not found"
    try:
        info = os.stat(cc)
    except PermissionError:  # stat needs no right on the file: a folder on its path refused
        return "cannot be reached: a folder on its path is closed to this user"
    except OSError:
        return "not found"
    if stat.S_ISDIR(info.st_mode):
        return "is a directory"
    return "is not executable by this user"


def _no_process_hint(exc: BaseException) -> str:
    """Where starting a process failed for want of processes (EAGAIN from fork) or of file
    descriptors (its pipes), what limits them: "[Errno 11] Resource temporarily unavailable"
    named neither (a container's probe)."""
    if isinstance(exc, OSError) and exc.errno == errno.EAGAIN:
        return " (no process may start: a limit on processes, ulimit -u or a container's pids limit)"
    if isinstance(exc, OSError) and exc.errno == errno.EMFILE:
        return " (the limit on open files, ulimit -n)"
    return ""


def cache_key(config: BuildConfig) -> str:
    path, version = compiler_identity(config.cc)
    sha = hashlib.sha256()
    for part in (path, version, "\0".join(config.compile_flags), cdef_source(), LINK_ORDER, *_search_env()):
        sha.update(part.encode())
        sha.update(b"\0")
    root = kernels_dir_of(config)
    mine = [header for source in config.extra_sources for header in local_headers(source)]
    for source in sources(config) + headers(config) + sorted(set(mine)):
        sha.update(str(source.relative_to(root) if source.is_relative_to(root) else source).encode())
        sha.update(source.read_bytes())
    return sha.hexdigest()[:24]


def library_path(config: BuildConfig, cache_dir: Path | None = None) -> Path:
    """Where build(config) puts its library (it exists once built: a cached build is free)."""
    return Path(cache_dir or default_cache_dir()) / f"sectorbench-{cache_key(config)}.so"


@contextlib.contextmanager
def compile_deadline(end: float, reason: str):
    """Within the block, a build's compilers and the preprocessing of its sources stop at `end`
    (a time.monotonic()) if their own timeout has not stopped them first, and the BuildError
    says `reason`.  A --source file that took 34 s to compile held `run --max-minutes 0.2`
    for 38 s; one including a FIFO, for 841 s."""
    token = _COMMAND_END.set((end, reason))
    try:
        yield
    finally:
        _COMMAND_END.reset(token)


def _within_command(timeout_s: float) -> tuple[float, str | None]:
    """A compiler's deadline from now (time.monotonic()): its own timeout or the command's end,
    whichever comes first, with the command's reason when that is the one."""
    own = time.monotonic() + timeout_s
    command = _COMMAND_END.get()
    if command is not None and command[0] < own:
        return command[0], command[1]
    return own, None


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
    if _cached(library):
        return library
    with _locked(cache_dir, [library.name]):  # two processes asking for one library: one compiles it
        if _cached(library, remove=True):  # a damaged one goes now: no other process is writing it
            return library
        if library.exists():  # a file it read has changed: what was read from its code is stale too
            _forget_derived(library)
        return _build(config, cache_dir, library)


def failure_line(message: str) -> str:
    """A compiler's failure in one line, for a row: the first line ("compiling with '-m32'
    failed:") and the first of the compiler's lines that says error."""
    lines = [line.strip() for line in message.splitlines() if line.strip()]
    if len(lines) <= 1:
        return message.strip()
    cause = next((line for line in lines[1:] if re.search(r"\berror\b", line)), lines[1])
    return f"{lines[0]} {cause}"


def _forget_derived(library: Path) -> None:
    """Remove what was kept beside a library about its code (LIBRARY-STEM.kernels.json, its
    loops' analyses, its code fingerprints) when it is about to be rebuilt under the same name."""
    for derived in library.parent.glob(f"{glob.escape(library.stem)}.*"):
        if not derived.name.startswith(library.name):  # not the library or its own sidecars
            with contextlib.suppress(OSError):
                derived.unlink()


def _put_in_cache(output: Path, target: Path, said: str, read: dict | None = None) -> None:
    """Rename a fresh library (or driver) into the cache as `target`, with its sidecars: the old
    checksum goes first (this build's sidecars beside an old file never pass for whole), the
    compiler's warnings before the file (never one without them), the files its compiles read
    (`read`, see _what_it_read; None for a driver, whose name says it all, or for a library
    when a compiler wrote no list: _cached then never takes it), and the checksum last, the
    mark of a whole one."""
    digest = _sha256(output)
    _sidecar(target, CHECKSUM_SUFFIX).unlink(missing_ok=True)
    _write_sidecar(target, WARNINGS_SUFFIX, said)
    if read:
        _write_sidecar(target, DEPENDENCIES_SUFFIX, json.dumps(read))
    else:
        _sidecar(target, DEPENDENCIES_SUFFIX).unlink(missing_ok=True)
    os.replace(output, target)
    _write_checksum(target, digest)


def _cached(library: Path, remove: bool = False) -> bool:
    """The library is in the cache, whole, and every file its compiles read, every folder they
    searched and every file its flags name is as it was (a library without that list, of an
    older sectorbench or of a compiler that wrote none, is built again).
    remove: a damaged library goes (only under its lock: without it, a library another build
    has just put in place, its checksum not yet written, would be taken for a damaged one)."""
    if not (library.exists() and _intact(library, remove)):
        return False
    return _still_as_read(_dependencies(library))


@contextlib.contextmanager
def _private_build(cache_dir: Path, target: Path):
    """The private directory of one build of `target` in the cache (its compilers' working
    directory and TMPDIR), removed whole when the build ends, however it ends; stale ones a
    killed build left are removed first."""
    _remove_stale_builds(cache_dir)
    made = False
    try:
        with scratch_directory(f"{target.name}.", cache_dir, BUILD_SUFFIX) as private:
            made = True
            yield private
    except OSError as exc:
        if made and exc.errno not in CACHE_FILESYSTEM_ERRNOS:  # the build's own error, not the cache's
            raise
        raise _cache_error(cache_dir, exc) from None


def _build(config: BuildConfig, cache_dir: Path, library: Path) -> Path:
    cc_path, _ = compiler_identity(config.cc)
    options, libraries = _libraries_last(config.compile_flags)
    with _private_build(cache_dir, library) as private:
        output = private / library.name
        if any(_linker_flag(flag) for flag in config.flags):
            files = [_unit_file(private, name, files) for name, files in units(config)] + list(config.extra_sources)
            whole = [cc_path, *options, "-shared", "-fPIC", *_includes(config), *map(str, files)]
            # What each file reads, from the preprocessor alone (one command's -MD keeps only its last file's list)
            lists = [private / f"{number}-listing.d" for number in range(len(files))]
            listing = [cc_path, *_without_linker_flags(config.compile_flags), *_includes(config), "-M", "-x", "c"]
            commands = [[*listing, str(file), *_listed_into(deps)] for file, deps in zip(files, lists)]
            said = _run_compilers([[*whole, "-o", str(output), *libraries, "-lm"], *commands], private, config)[:1]
            read = _all_read([_what_it_read(deps, config, private) for deps in lists])
        else:
            objects, said, read = _objects(config, cc_path, cache_dir, private)
            link = [cc_path, *options, "-shared", "-fPIC", *objects, "-o", str(output), *libraries, "-lm"]
            said += _run_compilers([link], private, config)
        try:
            with open(output, "rb") as stream:
                is_elf = stream.read(4) == b"\x7fELF"
        except OSError:
            is_elf = False
        if not is_elf:  # nothing, or not a shared library: never cache it
            raise BuildError(f"{config.cc!r} exited 0 but wrote no shared library: is it a C compiler?")
        try:
            _put_in_cache(output, library, "".join(said), read)
        except OSError as exc:
            raise _cache_error(cache_dir, exc) from None
    return library


@contextlib.contextmanager
def _locked(cache_dir: Path, names: list[str]):
    """An exclusive lock (flock) on cache_dir/locks/NAME for each name while the block runs:
    what one process compiles, another waiting for the same file then finds in the cache.
    Taken in sorted order, so two builds never wait on each other in a cycle; the kernel
    releases them when a holder dies, however it dies.  A lock file is opened for reading: flock
    needs no more, and one another user made (a run as root, `sudo -E`, in the user's cache) is
    read-only to this user, who could not build anything it named ("build cache ... is unusable
    (Permission denied)"), though the cache's folder was theirs and the files in it replaceable."""
    folder = cache_dir / LOCKS_DIR
    try:
        folder.mkdir(exist_ok=True)
        with contextlib.ExitStack() as held:
            for name in sorted(set(names)):
                fd = os.open(folder / name, os.O_RDONLY | os.O_CREAT | os.O_CLOEXEC, 0o666)
                held.callback(os.close, fd)
                fcntl.flock(fd, fcntl.LOCK_EX)
            yield
    except OSError as exc:
        if exc.filename is not None and str(exc.filename).startswith(str(folder)):
            raise _cache_error(cache_dir, exc) from None
        raise


def _linker_flag(flag: str) -> bool:
    return flag in _LINKER_FLAGS or flag.startswith(_LINKER_PREFIXES)


#: What the link order of _libraries_last is part of every library's name for: libraries built
#: with the -l before the inputs are not taken from the cache for the same flags.
LINK_ORDER = "libraries after the inputs"


def _libraries_last(flags: tuple[str, ...]) -> tuple[list[str], list[str]]:
    """The flags split into those that go before the inputs and the libraries and linker options
    that go after them, in their own order: the linker takes from a static library only the
    symbols the inputs read before it still need, so a library given first (-lfoo, or an
    archive by its path) linked nothing and the kernel's load failed ("undefined symbol").
    -Wl, options go with them, since -Bstatic, --whole-archive and --as-needed apply to the
    libraries that follow."""
    before, after = [], []
    for number, flag in enumerate(flags):
        previous = flags[number - 1] if number else ""
        if previous == "-l" or (flag.startswith(("-l", "-Wl,")) and previous not in _SEPARATE_ARGUMENT):
            after.append(flag)
        elif _LINKER_INPUT.search(flag) and previous not in _SEPARATE_ARGUMENT:
            after.append(flag)
        else:
            before.append(flag)
    return before, after


#: A library or object given by its path (absolute: a relative one names nothing in the private
#: build directory).
_LINKER_INPUT = re.compile(r"^/.*\.(a|o|so(\.[0-9]+)*)$")
#: Options whose argument is the next word, which is theirs, not an input (-include /x/y.o).
_SEPARATE_ARGUMENT = frozenset(
    {"-include", "-imacros", "-isystem", "-idirafter", "-iquote", "-iprefix", "-isysroot", "-I", "-L", "-B", "-D",
     "-U", "-x", "-T", "-MF", "-MT", "-MQ", "--sysroot", "--param", "-u", "-z", "-e"}
)  # fmt: skip


def _includes(config: BuildConfig) -> list[str]:
    return [f"-I{folder}" for folder in include_dirs(config)]


def _object_key(common: bytes, files: list[Path], root: Path) -> str:
    """A unit's object name in the cache: `common` (the compiler, the flags and every header of
    the tree, hashed once a build), then each file's place in the tree and its bytes."""
    sha = hashlib.sha256(common)
    for source in files:
        sha.update(str(source.relative_to(root)).encode() + b"\0")
        sha.update(source.read_bytes() + b"\0")
    return sha.hexdigest()[:24]


def _objects_common(config: BuildConfig, cc_path: str, version: str, root: Path) -> bytes:
    sha = hashlib.sha256()
    for part in (cc_path, version, "\0".join(config.compile_flags), *_search_env()):
        sha.update(part.encode() + b"\0")
    for header in headers(config):
        sha.update(str(header.relative_to(root)).encode())
        sha.update(header.read_bytes())
    return sha.digest()


def _unit_file(private: Path, name: str, files: list[Path]) -> Path:
    """The C file of one unit: an #include of each of its files by absolute path (so the
    compiler's messages name the real file and line)."""
    unit = private / f"unit-{name}.c"
    unit.write_text("".join(f'#include "{source.resolve()}"\n' for source in files))
    return unit


def object_paths(config: BuildConfig, cache_dir: Path | None = None) -> list[tuple[str, list[Path], Path, bool]]:
    """Where a build's objects are kept in the cache, in link order: (name, its files, path,
    whether it is a --source file's) for each unit of kernels_c/, then each --source file."""
    cc_path, version = compiler_identity(config.cc)
    root = kernels_dir_of(config)
    store = Path(cache_dir or default_cache_dir()) / OBJECTS_DIR
    common = _objects_common(config, cc_path, version, root)
    keyed = [
        (name, files, store / f"{name}-{_object_key(common, files, root)}.o", False) for name, files in units(config)
    ]
    common += "\0".join(_includes(config)).encode()
    keyed += [(source.stem, [source], store / f"{SOURCE_PREFIX}{source.stem}-{_source_key(common, source)}.o", True)
              for source in config.extra_sources]  # fmt: skip
    return keyed


def _objects(config: BuildConfig, cc_path: str, cache_dir: Path, private: Path) -> tuple[list, list, dict | None]:
    """Every unit as an object, in link order, what the compiler said of each, and the files
    their compiles read ({path: sha256}, see _what_it_read; None if a compiler wrote no list).
    kernels_c/'s units come from the object cache when there (compiled and added to it when
    not), named by the compiler, the flags and their files; so does each --source file, one
    object each, named by the compiler, the flags, the include path and its own path and bytes.
    Either is taken from the cache only while every file its compile read (the compiler's own
    list, -MD) still has the bytes it had and every folder it searched the same headers: a
    header included from anywhere (an -I folder's <math.h>, an -include file, a system header),
    edited or added since, compiles it again."""
    try:
        (cache_dir / OBJECTS_DIR).mkdir(exist_ok=True)
    except OSError as exc:
        raise _cache_error(cache_dir, exc) from None
    keyed = object_paths(config, cache_dir)
    missing = [cached.name for _, _, cached, _ in keyed if not cached.exists()]
    with _locked(cache_dir, missing):  # objects another build is compiling now: wait, then take them
        return _compiled(config, cc_path, keyed, private)


def _compiled(config: BuildConfig, cc_path: str, keyed: list, private: Path) -> tuple[list, list, dict | None]:
    objects, said, commands, kept, lists = [], [], [], [], []
    for number, (name, files, cached, mine) in enumerate(keyed):  # mine: a --source file
        listed = _dependencies(cached)
        if cached.exists() and _intact(cached) and _still_as_read(listed):
            objects.append(str(cached))
            said.append(compiler_warnings(cached) or "")
            lists.append(listed)
            continue
        source = files[0] if mine else _unit_file(private, name, files)
        fresh = private / f"{number}-{name}.o"
        # -x c: a --source file is C whatever its name ends in (gcc takes my.txt for a linker input)
        command = [cc_path, *config.compile_flags, "-fPIC", *_includes(config), "-c", "-x", "c", str(source)]
        command += _listed_into(fresh.with_suffix(".d"))
        commands.append((sum(f.stat().st_size for f in files), len(objects), [*command, "-o", str(fresh)]))
        objects.append(str(fresh))
        said.append("")
        kept.append((len(objects) - 1, fresh, cached, mine))
    # the largest first (bytes of C), so the last to finish is not a long one started late
    commands.sort(key=lambda c: -c[0])
    for (_, place, _), text in zip(commands, _run_compilers([c for _, _, c in commands], private, config)):
        said[place] = text
    for place, fresh, cached, _ in kept:
        if not fresh.is_file():
            raise BuildError(f"{config.cc!r} exited 0 but wrote no object file: is it a C compiler?")
        listed = _what_it_read(fresh.with_suffix(".d"), config, private)
        lists.append(listed)
        if listed is None:
            continue  # a compiler that wrote no list of what it read: its object is linked, never kept
        partial = cached.with_name(f".{cached.name}.{os.getpid()}.partial")
        try:  # a copy under a temporary name, renamed: another build may be linking the same object
            shutil.copyfile(fresh, partial)
            _sidecar(cached, CHECKSUM_SUFFIX).unlink(missing_ok=True)  # as for a library (see _build)
            _write_sidecar(cached, WARNINGS_SUFFIX, said[place])
            _write_sidecar(cached, DEPENDENCIES_SUFFIX, json.dumps(listed))
            os.replace(partial, cached)
            _write_checksum(cached, _sha256(cached))
        except OSError:
            pass  # the object cache only saves time; the fresh object is linked either way
        finally:  # a copy cut short (a full disk, a signal) goes: it was left, on the full disk too
            with contextlib.suppress(OSError):
                partial.unlink()  # renamed into place: nothing there
    return objects, said, _all_read(lists)


def _source_key(common: bytes, source: Path) -> str:
    """A --source file's object name in the cache: `common` (the compiler, the flags, kernels_c/'s
    headers, the include path and the compiler's from the environment), then the file's absolute
    path (its __FILE__) and bytes."""
    sha = hashlib.sha256(common)
    sha.update(str(source).encode() + b"\0" + source.read_bytes())
    return sha.hexdigest()[:24]


def _read_depfile(path: Path) -> dict[str, str] | None:
    """The files a compile read, from its -MD list (make's syntax, the target named `object`
    by -MT: `object: FILE FILE \\`, spaces in a name escaped), each with its sha256 now; None
    if there is no list."""
    try:
        text = path.read_text()
    except OSError:
        return None
    # a relative name: from the compiler's directory
    paths = [(path.parent / name).resolve() for name in _depfile_names(text)]
    try:
        return {str(dependency): _sha256(dependency) for dependency in paths}
    except OSError:
        return None


def _depfile_names(text: str) -> list[str]:
    """The names in an -MD list (make's syntax, the target named `object`: `object: FILE FILE \\`,
    spaces in a name escaped), as written."""
    _, _, listed = text.replace("\\\n", " ").partition("object: ")
    return [name.replace("\\ ", " ").replace("$$", "$") for name in re.split(r"(?<!\\)\s+", listed) if name]


def _listed_into(depfile: Path) -> list[str]:
    """The options that make a compile (or, after -M, a preprocessing alone) list every file it
    read in `depfile` (the target named `object`: see _read_depfile)."""
    return ["-MD", "-MF", str(depfile), "-MT", "object"]


def _what_it_read(depfile: Path, config: BuildConfig, private: Path) -> dict[str, str] | None:
    """What one compile of `config` depended on, for the cache: every file it read (its -MD
    list, each with its sha256; the files of the private build directory left out: its unit
    file is named by its files, and the directory goes with the build), the headers of every
    folder it searched (see _searched_folders), the files the flags name (see _named_files) and
    the libraries they link by name (see _linked_libraries).  None if the compiler wrote no list."""
    listed = _read_depfile(depfile)
    if listed is None:
        return None
    mine = Path(private).resolve()
    listed = {name: sha for name, sha in listed.items() if not Path(name).is_relative_to(mine)}
    listed.update(_searched_folders(listed, config, private))
    listed.update(_named_files(config.flags))
    listed.update(_linked_libraries(config, private))
    return listed


def _all_read(lists: list[dict[str, str] | None]) -> dict[str, str] | None:
    """The lists of what each compile of a library read, merged; None if one is missing (the
    library is then never taken from the cache: what it depends on is not known)."""
    merged: dict[str, str] = {}
    for listed in lists:
        if listed is None:
            return None
        merged.update(listed)
    return merged


def _without_linker_flags(flags: tuple[str, ...]) -> list[str]:
    """The flags a preprocessing alone is given: those only the linker reads left out (clang warns
    about them when nothing is linked, an error under -Werror), with the word after `-T`, `-L`
    or `-l` when given apart."""
    kept, skip = [], False
    for flag in flags:
        if skip:
            skip = False
        elif _linker_flag(flag):
            skip = flag in ("-T", "-L", "-l")
        else:
            kept.append(flag)
    return kept


def _search_env() -> list[str]:
    """The compiler's search paths from the environment (_SEARCH_ENV): part of every object's and
    library's name, since they change which folders a compile or a link searches."""
    return [os.environ.get(name, "") for name in _SEARCH_ENV]


#: _search_path's answers in this process, by compiler, flags and _search_env().
_SEARCH_PATHS: dict[tuple, tuple[str, ...]] = {}


def _search_path(cc_path: str, flags: tuple[str, ...], private: Path) -> tuple[str, ...]:
    """Every folder the compiler's preprocessor searches for an #include under `flags`, as it
    lists them under -v: the user's (-I, -iquote, -isystem, -idirafter, --sysroot's), the
    compiler's own and the system's, and those it ignored as missing (a header may appear there
    later).  Absolute paths only: a compile runs in a private directory, so a relative folder
    names nothing of the user's.  Asked once a process (in `private`, as a build's compilers
    run); () if the compiler says none."""
    key = (cc_path, flags, *_search_env())
    if key not in _SEARCH_PATHS:
        _SEARCH_PATHS[key] = _asked_search_path(cc_path, flags, private)
    return _SEARCH_PATHS[key]


def _asked_search_path(cc_path: str, flags: tuple[str, ...], private: Path) -> tuple[str, ...]:
    command = [cc_path, *_without_linker_flags(flags), "-E", "-v", "-x", "c", os.devnull, "-o", os.devnull]
    environment = {**os.environ, "TMPDIR": str(private)}
    try:  # its exit status does not matter: the list comes first
        said = run_compiler(command, timeout=COMPILE_TIMEOUT_S, cwd=private, env=environment).stderr
    except (OSError, subprocess.TimeoutExpired):
        return ()
    folders, listing = [], False
    for line in said.splitlines():
        ignored = re.match(r'\s*ignoring (?:nonexistent|duplicate) directory "(.*)"\s*$', line)
        if ignored:
            folders.append(ignored.group(1))
        elif "search starts here:" in line:
            listing = True
        elif line.startswith("End of search list"):
            listing = False
        elif listing and line.startswith(" "):
            folders.append(line.strip().removesuffix(" (framework directory)"))
    return tuple(dict.fromkeys(str(Path(f).resolve()) for f in folders if Path(f).is_absolute()))


def _named_files(flags: tuple[str, ...]) -> dict[str, str]:
    """The files `flags` name by absolute path, each with its sha256: a -specs= file, a linker
    script (-Wl,-T,...), a sanitizer's ignore list, a sample profile, an -include file (that one
    is in the -MD list too).  The compiler reads them, and no -MD list names most of them."""
    named = {}
    for word in flags:
        for piece in re.split(r"[=,]", word):
            path = Path(piece[piece.find("/") :]) if piece.startswith(("/", "-")) and "/" in piece else None
            if path is not None and path.is_absolute() and path.is_file():
                with contextlib.suppress(OSError):
                    named[str(path.resolve())] = _sha256(path)
    return named


#: A key of a dependency list naming a folder the preprocessor searched, not a file it read.
FOLDER_KEY = "folder:"
#: What an #include names, by the ends of its name: a folder's listing of these is kept.
HEADER_SUFFIXES = (".h", ".hh", ".hpp", ".hxx", ".inc", ".inl", ".def", ".c")


def _searched_folders(listed: dict[str, str], config: BuildConfig, private: Path) -> dict[str, str]:
    """The headers present, when compiled, in every folder the preprocessor searched: each
    read file's own (a quoted #include looks there first), the -I folders of the flags and of
    kernels_c/, and the compiler's whole search path (_search_path: its own folders and the
    system's, /usr/local/include before /usr/include).  A header that appears later in one of
    them (`__has_include`, or one found before the one read: a <math.h> in an -I folder) changes
    what the same bytes compile to, and no file read changed."""
    folders = {str(Path(name).parent) for name in listed}
    cc_path, _ = compiler_identity(config.cc)
    folders.update(_search_path(cc_path, tuple(config.compile_flags), private))
    words = list(config.compile_flags)
    for number, word in enumerate(words):
        for option in ("-I", "-iquote", "-isystem", "-idirafter"):
            if word == option and number + 1 < len(words):
                folders.add(str(Path(words[number + 1]).resolve()))
            elif word.startswith(option) and len(word) > len(option):
                folders.add(str(Path(word[len(option) :]).resolve()))
    folders.update(str(folder) for folder in include_dirs(config))
    return {FOLDER_KEY + folder: _headers_in(Path(folder)) for folder in sorted(folders)}


def _headers_in(folder: Path) -> str:
    try:
        names = sorted(name for name in os.listdir(folder) if name.endswith(HEADER_SUFFIXES))
    except OSError:  # gone, or never there (an -I of a missing folder): so it stays
        names = []
    return hashlib.sha256("\0".join(names).encode()).hexdigest()


#: A key of a dependency list naming, after it, the files an -l could link (a JSON list, in the
#: linker's order), not a file it read: its value says which one is there first, and its bytes.
LIBRARY_KEY = "library:"
#: Linker options (in -Wl, lists) after which an -l takes only a static library, and those after
#: which it takes a shared one first again.
_STATIC_FROM = ("-Bstatic", "-dn", "-non_shared", "-static")
_SHARED_FROM = ("-Bdynamic", "-dy", "-call_shared")


def _linked_libraries(config: BuildConfig, private: Path) -> dict[str, str]:
    """The libraries the flags link by name (-lfoo, -l:libfoo.a, -l foo, in -Wl, lists too), each
    as the linker looks for it: in every -L folder in order (wherever the -L is), then in the
    compiler's and the linker's own folders (see _library_path: a library installed into
    /usr/local/lib is as much the user's as one of an -L folder), libfoo.so before libfoo.a in
    each folder (only libfoo.a under -static or after -Wl,-Bstatic).  Each is listed as every
    file it could be (LIBRARY_KEY) with which of them is there first and its bytes: a library
    rebuilt in place, or one that appears before it in the search (a libfoo.so beside
    libfoo.a), links other code from the same flags and sources.  One found nowhere is listed
    as found nowhere and fails no build: the linker says so if it matters.  (A library named
    by its path, /abs/libfoo.a, is one of _named_files.)"""
    sysroot, folders, wanted = "", [], []
    static = any(flag in ("-static", "-static-pie") for flag in config.flags)
    words = [word for flag in config.flags for word in (flag[4:].split(",") if flag.startswith("-Wl,") else [flag])]
    for word, following in zip(words, [*words[1:], ""]):
        if word.startswith("--sysroot"):
            sysroot = word.removeprefix("--sysroot").removeprefix("=") or following
        elif word in _STATIC_FROM or word in _SHARED_FROM:
            static = word in _STATIC_FROM
        elif word.startswith(("-L", "--library-path=")):
            folders.append(word.removeprefix("--library-path=").removeprefix("-L") or following)
        elif word.startswith(("-l", "--library=")):
            wanted.append((word.removeprefix("--library=").removeprefix("-l") or following, static))
    if not wanted:  # no compiler is asked for its folders
        return {}
    cc_path, _ = compiler_identity(config.cc)
    # "=" or $SYSROOT first: inside the sysroot; a relative folder is the private directory's, where no library is
    folders = [re.sub(r"^(=|\$SYSROOT)", lambda _: sysroot, folder) for folder in folders]
    folders = [folder for folder in folders if Path(folder).is_absolute()]
    folders += _library_path(cc_path, tuple(config.compile_flags), sysroot, private)
    listed = {}
    for name, only_static in filter(lambda pair: pair[0], wanted):
        candidates = [str(Path(folder) / file) for folder in folders for file in _library_files(name, only_static)]
        listed[LIBRARY_KEY + json.dumps(candidates)] = _first_library(candidates)
    return listed


def _library_files(name: str, only_static: bool) -> list[str]:
    """The names an -l of `name` looks for in each folder, in order: -l:FILE that file alone."""
    if name.startswith(":"):
        return [name[1:]]
    return [f"lib{name}.a"] if only_static else [f"lib{name}.so", f"lib{name}.a"]


def _first_library(candidates: list[str]) -> str:
    """Which of `candidates` the linker takes (the first that is a file) and its bytes, as one
    hash; the hash of nothing if none is there or it cannot be read (the link says why)."""
    sha = hashlib.sha256()
    found = next((name for name in candidates if Path(name).is_file()), None)
    with contextlib.suppress(OSError):
        if found is not None:
            sha.update(f"{found}\0{_sha256(Path(found))}".encode())
    return sha.hexdigest()


#: _library_path's answers in this process, by compiler, flags, sysroot and _search_env().
_LIBRARY_PATHS: dict[tuple, tuple[str, ...]] = {}


def _library_path(cc_path: str, flags: tuple[str, ...], sysroot: str, private: Path) -> tuple[str, ...]:
    """The folders the link searches for an -l after the -L folders: the compiler's own, which
    it passes to the linker (its -print-search-dirs "libraries", LIBRARY_PATH's included), then
    the linker's built-in ones (SEARCH_DIR of GNU ld's default script, --verbose: Debian's
    /usr/local/lib is only there; gold and lld print none, and -m32's other script is not
    asked for).  Asked once a process, as _search_path is; () if neither answers."""
    key = (cc_path, flags, sysroot, *_search_env())
    if key not in _LIBRARY_PATHS:
        _LIBRARY_PATHS[key] = _asked_library_path(cc_path, flags, sysroot, private)
    return _LIBRARY_PATHS[key]


def _asked_library_path(cc_path: str, flags: tuple[str, ...], sysroot: str, private: Path) -> tuple[str, ...]:
    environment = {**os.environ, "TMPDIR": str(private)}

    def said(command: list[str]) -> str:
        try:  # its exit status does not matter (gold, asked for its script, fails: "no input files")
            return run_compiler(command, timeout=COMPILE_TIMEOUT_S, cwd=private, env=environment).stdout
        except (OSError, subprocess.TimeoutExpired):
            return ""

    asked = _without_linker_flags(flags)  # as _asked_search_path's, but the choice of linker is kept
    found = re.search(r"^libraries: =?(.*)$", said([cc_path, *asked, "-print-search-dirs"]), re.MULTILINE)
    folders = found.group(1).split(os.pathsep) if found else []
    chosen = [flag for flag in flags if flag.startswith("-fuse-ld=")]
    linker = said([cc_path, *asked, *chosen, "-print-prog-name=ld"]).strip()
    linker = shutil.which(linker) if linker else None
    if linker is not None:
        script = said([linker, "--verbose"])
        folders += [
            re.sub(r"^=", lambda _: sysroot, folder) for folder in re.findall(r'SEARCH_DIR\("([^"]*)"\)', script)
        ]
    return tuple(dict.fromkeys(str(Path(f).resolve()) for f in folders if Path(f).is_absolute()))


def _dependencies(cached: Path) -> dict[str, str] | None:
    """The files listed beside `cached` (OBJECT.deps), each with its sha256 when compiled; None
    if there is no list, {} if it is damaged."""
    path = _sidecar(cached, DEPENDENCIES_SUFFIX)
    if not path.exists():
        return None
    try:
        return dict(json.loads(path.read_text()))
    except (OSError, ValueError, TypeError):
        return {}


def _still_as_read(listed: dict[str, str] | None) -> bool:
    """Every listed file has the bytes it had when compiled, every listed folder the headers,
    every listed library search the same first file with the same bytes (no list, or an empty
    one: no)."""

    def unchanged(name: str, sha: str) -> bool:
        if name.startswith(FOLDER_KEY):
            return _headers_in(Path(name.removeprefix(FOLDER_KEY))) == sha
        if name.startswith(LIBRARY_KEY):
            return _first_library(json.loads(name.removeprefix(LIBRARY_KEY))) == sha
        return _sha256(Path(name)) == sha

    try:
        return bool(listed) and all(unchanged(name, sha) for name, sha in listed.items())
    except OSError:  # a file it read is gone
        return False


def _run_compilers(commands: list[list[str]], private: Path, config: BuildConfig) -> list[str]:
    """Run the compiler commands, COMPILE_JOBS at once, each in `private` (cwd and TMPDIR) in its
    own process group, their output into files (no pipe to fill); what each said, in order, or
    BuildError with the output of those that failed.  On the deadline (COMPILE_TIMEOUT_S for
    them all), or when this process is interrupted (Ctrl-C, SIGTERM), every group still
    running is killed."""
    env = {**os.environ, "TMPDIR": str(private)}
    deadline, command_ends = _within_command(COMPILE_TIMEOUT_S)
    waiting = list(enumerate(commands))
    running: list[tuple[subprocess.Popen, Path]] = []
    failed: list[str] = []
    try:
        while waiting or running:
            while waiting and len(running) < COMPILE_JOBS:
                number, command = waiting.pop(0)
                log = private / f"compiler-{number}.log"
                try:
                    with open(log, "wb") as stream, signals_held():  # it is in `running` before any signal acts
                        process = subprocess.Popen(
                            memory_capped(command),
                            cwd=private,
                            env=env,
                            stdin=subprocess.DEVNULL,
                            stdout=stream,
                            stderr=subprocess.STDOUT,
                            start_new_session=True,
                        )
                        running.append((process, log))
                except OSError as exc:
                    said = f"{exc.strerror or exc}{_no_process_hint(exc)}"
                    raise BuildError(f"compiler {config.cc!r} does not run: {said}") from None
            done = [(process, log) for process, log in running if process.poll() is not None]
            if not done:
                if time.monotonic() > deadline:
                    if command_ends:
                        raise BuildError(f"compiling with {config.label!r} was stopped: {command_ends}")
                    raise BuildError(
                        f"compiling with {config.label!r} took longer than {COMPILE_TIMEOUT_S:g} s: "
                        "the compiler was stopped"
                    )
                time.sleep(0.005)
                continue
            for process, log in done:
                running.remove((process, log))
                if process.returncode != 0:
                    said = log.read_text(errors="replace").strip()
                    failed.append(said + _low_space(private) if said else _silence(process.returncode, private))
            if failed:
                break
    finally:
        for process, _ in running:
            kill_session(process)
    if failed:
        # two units failing on the same flag say the same thing: once
        raise BuildError(f"compiling with {config.label!r} failed:\n" + "\n".join(dict.fromkeys(failed)))
    return [(private / f"compiler-{number}.log").read_text(errors="replace") for number in range(len(commands))]


#: Below this much free space where a compiler writes, a compiler failing is said to have
#: perhaps had a full disk (its own message went to a log on that disk, and was lost: all of
#: it, or all but collect2's last line, "ld returned 1 exit status", once ld removed its output).
LOW_SPACE_BYTES = 64 << 20


def _silence(code: int, where: Path) -> str:
    """What to say of a compiler that failed and said nothing."""
    return f"the compiler exited with status {code} and said nothing" + _low_space(where)


def _low_space(where: Path) -> str:
    """What to add to a compiler's failure when the cache's filesystem is nearly full, else ""."""
    try:
        free = shutil.disk_usage(where).free
    except OSError:
        return ""
    if free >= LOW_SPACE_BYTES:
        return ""
    return f"; the cache's filesystem ({where.parent}) has {free // 1024} KiB free: is it full?"


def run_compiler(
    command: list[str], timeout: float, cwd: str | Path | None = None, env: dict | None = None
) -> subprocess.CompletedProcess:
    """One short compiler call (its version, a preprocessing, a probe of -march=native), output
    captured as text, in its own session like a build's compilers (interrupts.run_in_own_session)."""
    return run_in_own_session(memory_capped(command), timeout, cwd, env)


def memory_capped(command: list[str]) -> list[str]:
    """The compiler command run with its address space capped at half the machine's memory
    (`ulimit -v` in a shell that then execs it; where this process's own limit is lower, that
    one stands).  A --source file that included /dev/zero had cc1 take memory until something
    stopped it (4.2 GB when a ulimit did, then "cc1: out of memory"): on a shared CI runner,
    the machine."""
    from ..model.scenes import physical_memory_bytes

    memory = physical_memory_bytes()
    if not memory:
        return command
    return ["/bin/sh", "-c", f'ulimit -v {memory // 2 // 1024} 2>/dev/null; exec "$@"', "sh", *command]


#: The suffix of a private build directory in the cache.
BUILD_SUFFIX = ".build"
#: What a write into the cache (a unit's C file, a compiler's list of what it read) fails with
#: when the cache's filesystem, not the build, is at fault: full (no space, no quota) or made
#: read-only.  Those are the cache's error, named: a full cache was "error: No space left on
#: device", which said neither the file nor the cache.
CACHE_FILESYSTEM_ERRNOS = frozenset({errno.ENOSPC, errno.EDQUOT, errno.EROFS})

CHECKSUM_SUFFIX = ".sha256"
WARNINGS_SUFFIX = ".warnings"
#: Beside every cached object and library: every file its compiles read, every folder they
#: searched, every file the flags name (see _what_it_read), each with its sha256 then.
DEPENDENCIES_SUFFIX = ".deps"
#: Objects of --source files in the object cache are named SOURCE_PREFIX + the file's stem.
SOURCE_PREFIX = "source-"
#: The compiler's own search paths from the environment: part of every object's and library's name.
#: CPATH and C_INCLUDE_PATH add folders to the #include path, LIBRARY_PATH to an -l's (see _library_path).
_SEARCH_ENV = ("CPATH", "C_INCLUDE_PATH", "LIBRARY_PATH")
#: Every file kept beside a cached library or object: removed with it when it is damaged.
SIDECARS = (CHECKSUM_SUFFIX, WARNINGS_SUFFIX, DEPENDENCIES_SUFFIX)


def _cache_error(cache_dir: Path, exc: OSError) -> BuildError:
    reason = exc.strerror or str(exc)
    if exc.errno in (errno.EACCES, errno.EPERM) and exc.filename is not None:
        theirs = _another_users(cache_dir, Path(os.fsdecode(exc.filename)))
        reason += f": {theirs}" if theirs else ""
    return CacheError(f"build cache {cache_dir} is unusable ({reason}): set SECTORBENCH_CACHE to a writable directory")


def _another_users(cache_dir: Path, refused: Path) -> str | None:
    """ "PATH belongs to USER": the nearest of `refused` and its folders within the cache that
    another user owns.  A run as root in this user's cache (`sudo -E`) leaves its locks/ and
    objects/ root's, and the cache's own folder, this user's and writable, was said to be
    unusable with nothing naming what refused."""
    for path in [refused, *refused.parents]:
        if path != cache_dir and cache_dir not in path.parents:
            return None
        try:
            owner = path.lstat().st_uid
        except OSError:  # not there (yet): its folder refused
            continue
        if owner != os.geteuid():
            return f"{path} belongs to {_user_name(owner)}"
    return None


def _user_name(uid: int) -> str:
    try:
        import pwd

        return pwd.getpwuid(uid).pw_name
    except (ImportError, KeyError):
        return f"uid {uid}"


def _usable_cache(cache_dir: Path) -> None:
    try:
        cache_dir.mkdir(parents=True, exist_ok=True)
    except OSError as exc:
        raise _cache_error(cache_dir, exc) from None
    if not cache_dir.is_dir():
        raise CacheError(
            f"build cache {cache_dir} is unusable (not a directory): set SECTORBENCH_CACHE to a writable directory"
        )
    if not os.access(cache_dir, os.W_OK | os.X_OK):
        raise _cache_error(cache_dir, PermissionError(errno.EACCES, "not writable", str(cache_dir)))
    if hasattr(os, "ST_NOEXEC") and os.statvfs(cache_dir).f_flag & os.ST_NOEXEC:
        # Its libraries would be built, then refused by dlopen ("failed to map segment"), which
        # cffi's fallback hid behind "No usable temporary directory" in a worker, 15 s later.
        raise CacheError(
            f"build cache {cache_dir} is unusable (its filesystem is mounted noexec: libraries there cannot be"
            " loaded): set SECTORBENCH_CACHE to a directory on another filesystem"
        )


def _sha256(path: Path) -> str:
    sha = hashlib.sha256()
    with open(path, "rb") as stream:
        for block in iter(lambda: stream.read(1 << 20), b""):
            sha.update(block)
    return sha.hexdigest()


def _sidecar(library: Path, suffix: str) -> Path:
    """LIBRARY + suffix: a file kept beside a cached library or object (its checksum, its warnings)."""
    return library.with_name(library.name + suffix)


def _write_checksum(library: Path, digest: str) -> None:
    """LIBRARY.sha256, written after the library is renamed into place: the mark of a whole one."""
    _write_sidecar(library, CHECKSUM_SUFFIX, digest + "\n")


def _write_sidecar(library: Path, suffix: str, text: str) -> None:
    """LIBRARY + suffix holding `text`, written atomically."""
    sidecar = _sidecar(library, suffix)
    fd, partial = tempfile.mkstemp(prefix=f".{sidecar.name}.", dir=library.parent)
    try:
        with os.fdopen(fd, "w") as stream:
            stream.write(text)
        os.replace(partial, sidecar)
    finally:
        if os.path.exists(partial):
            os.unlink(partial)


def compiler_warnings(library: Path) -> str | None:
    """What the compiler said while building this cached library (or object) -- its
    warnings under WARNING_FLAGS and the user's flags, "" for none; None if not recorded."""
    try:
        return _sidecar(library, WARNINGS_SUFFIX).read_text(errors="replace")
    except OSError:
        return None


#: A kernel row as the preprocessor leaves it: `sb_kernel NAME = { .name = "...", ... .family = "..." ... };`.
_ROW = re.compile(r"\bsb_kernel\s+\w+\s*=\s*\{(.*?)\};", re.S)
#: A field's value: one C string literal or several side by side, with their escapes ("my \"k\""
#: had been read as `my \`, and that row could not be selected).
_FIELD = r'\.{}\s*=\s*((?:"(?:[^"\\]|\\.)*"\s*)+)'
_LITERAL = re.compile(r'"((?:[^"\\]|\\.)*)"')


def _c_string(literals: str) -> str:
    """The string C makes of adjacent literals (escapes as C reads them, then UTF-8, as the
    library's rows are read)."""
    raw = b"".join(codecs.escape_decode(part.encode())[0] for part in _LITERAL.findall(literals))
    return raw.decode(errors="surrogateescape")


@cache
def kernel_index(config: BuildConfig) -> dict[str, str] | None:
    """Every kernel row's name and family in `config`'s sources, read by preprocessing them
    (nothing is compiled; SB_ROWS_ONLY leaves <immintrin.h> out of sb_common.h, which makes it
    0.45 s instead of 2), so that a misspelt --kernels name is refused before a build.  Kept in
    the cache beside the library it describes (LIBRARY.kernels.json: the same key, so the same
    sources), so a later run of the same build reads it instead.  None when the preprocessor
    fails (the build then reports why)."""
    saved = library_path(config).with_suffix(".kernels.json")
    try:
        known = json.loads(saved.read_text())
        named = isinstance(known, dict) and all(isinstance(k, str) and isinstance(v, str) for k, v in known.items())
        if named and known:  # an empty index (an older version's, of a non-compiler) is read again
            return known
    except (OSError, UnicodeDecodeError, ValueError, RecursionError):
        pass  # absent or damaged: preprocess again, and rewrite it
    index = _preprocessed_index(config)
    if index is not None:
        partial = saved.with_name(f".{saved.name}.{os.getpid()}.partial")
        try:
            partial.write_text(json.dumps(index))
            partial.replace(saved)
        except OSError:  # a full or read-only cache: preprocessed again next time, no more
            with contextlib.suppress(OSError):
                partial.unlink()
    return index


def _preprocessed_index(config: BuildConfig) -> dict[str, str] | None:
    rows = _preprocessed_rows(config, sources(config))
    if rows is None:
        return None
    index = {}
    for row in rows:
        # the last of a field's initializers, as C takes it (SB_KERNEL's own .name, then the row's)
        name, family = (re.findall(_FIELD.format(field), row) for field in ("name", "family"))
        if name:
            index[_c_string(name[-1])] = _c_string(family[-1]) if family else ""
    # kernels_c/ always has rows: none means the "compiler" printed nothing (--cc /bin/true),
    # and the build, not a list of no known kernels, should say what is wrong with it
    return index or None


def source_kernel_rows(config: BuildConfig, source: Path) -> int | None:
    """How many kernel rows the user's C file `source` declares (its own, read by preprocessing
    it alone with `config`'s compiler, flags and include folders); None when that fails (a
    missing compiler, a syntax error: the build says why)."""
    read = _read_source(config, source)
    return None if read is None else read[0]


def source_reads(config: BuildConfig, source: Path) -> tuple[Path, ...]:
    """Every file that preprocessing read (absolute): `source`, the headers it includes, a
    -include of the flags.  They are the command's inputs too: `--source k.c --json k.h --force`
    replaced the header k.c includes.  () when the preprocessing fails."""
    read = _read_source(config, source)
    return () if read is None else read[1]


@cache
def _read_source(config: BuildConfig, source: Path) -> tuple[int, tuple[Path, ...]] | None:
    """The kernel rows `source` declares, and what its preprocessing read (the compiler's own
    -MD list); None when the preprocessing fails."""
    with scratch_directory("sectorbench-source-") as scratch:
        depfile = scratch / "source.d"
        try:
            rows = _preprocessed_rows(config, [source], depfile)
        except BuildError:
            return None
        if rows is None:
            return None
        try:
            names = _depfile_names(depfile.read_text(errors="surrogateescape"))
        except OSError:  # a compiler that writes no list: the rows are still known
            names = []
    return len(rows), tuple(Path(os.path.abspath(name)) for name in names)  # relative: from this directory


def _preprocessed_rows(config: BuildConfig, files: list[Path], depfile: Path | None = None) -> list[str] | None:
    """The text inside each kernel row of `files`, preprocessed; None if the preprocessor fails.
    With `depfile`, the files it read are listed there (see _listed_into)."""
    cc_path, _ = compiler_identity(config.cc)
    command = [
        cc_path,
        *config.flags,
        "-E",
        "-P",
        "-DSB_ROWS_ONLY",
        *(f"-I{f}" for f in include_dirs(config)),
        *(_listed_into(depfile) if depfile is not None else ()),
        "-x",
        "c",
    ]
    deadline, command_ends = _within_command(PREPROCESS_TIMEOUT_S)
    try:
        completed = run_compiler([*command, *map(str, files)], timeout=max(0.0, deadline - time.monotonic()))
    except subprocess.TimeoutExpired:
        if command_ends:  # not a failing preprocessor: the command has no time left for it
            raise BuildError(f"reading the kernel rows of {config.label!r} was stopped: {command_ends}") from None
        return None
    except OSError:
        return None
    if completed.returncode != 0:
        return None
    return [row.group(1) for row in _ROW.finditer(completed.stdout)]


def _intact(library: Path, remove: bool = False) -> bool:
    """The cached library (or object) matches the checksum written with it; with `remove`, a
    damaged one and its sidecars are removed (else a new one replaces it when written)."""
    try:
        intact = _sidecar(library, CHECKSUM_SUFFIX).read_text().strip() == _sha256(library)
    except (OSError, UnicodeDecodeError):
        intact = False
    intact = intact and compiler_warnings(library) is not None
    if not intact and remove:
        for path in (library, *(_sidecar(library, suffix) for suffix in SIDECARS)):
            try:
                path.unlink()
            except OSError:
                pass
    return intact


def _remove_stale_builds(cache_dir: Path) -> None:
    """Private build directories (a library's, a driver's) a killed run left behind (older
    than STALE_BUILD_S), the *.partial files of sectorbench versions that compiled into the
    cache itself, and the object copies a killed build left in objects/ (never looked at there)."""
    now = time.time()
    partials = [*cache_dir.glob("*.partial"), *(cache_dir / OBJECTS_DIR).glob("*.partial")]
    for leftover in [*cache_dir.glob(f"*{BUILD_SUFFIX}"), *partials]:
        try:
            if now - leftover.lstat().st_mtime > STALE_BUILD_S:
                if leftover.is_dir() and not leftover.is_symlink():
                    shutil.rmtree(leftover, ignore_errors=True)
                else:
                    leftover.unlink()
        except OSError:
            pass


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
    _usable_cache(cache_dir)
    program = cache_dir / f"driver-{name}-{sha.hexdigest()[:24]}"
    if _intact(program):  # with a checksum as a library has: a truncated driver dies of SIGBUS under valgrind
        return program
    with _locked(cache_dir, [program.name]):
        if _intact(program, remove=True):
            return program
        with _private_build(cache_dir, program) as private:  # as a library is built: nothing left elsewhere
            output = private / program.name
            command = [cc_path, *DRIVER_FLAGS, f"-I{HARNESS_DIR}", f"-I{include}", str(source), "-o", str(output)]
            environment = {**os.environ, "TMPDIR": str(private)}
            completed = run_compiler([*command, "-ldl", "-lm"], COMPILE_TIMEOUT_S, cwd=private, env=environment)
            if completed.returncode != 0:
                said = (completed.stderr or completed.stdout).strip() or _silence(completed.returncode, private)
                raise BuildError(failure_line(f"compiling the {name} driver failed:\n{said}"))
            os.chmod(output, 0o755)
            try:
                _put_in_cache(output, program, completed.stderr)
            except OSError as exc:
                raise _cache_error(cache_dir, exc) from None
    return program
