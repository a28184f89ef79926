"""Same-job A/B: the kernels of a git ref (or an old copy of a --source file) against the
working tree's, built with the same flags and compiler and timed in the same rounds.

A committed baseline goes stale when the runner's hardware changes; base and head measured
in one job, interleaved, share whatever the machine does meanwhile.  This module only
prepares the base's builds (materialising the ref's sources in a scratch directory with
`git archive` / `git show`), splits the run into its two sides for the gate, and confirms a
regression by measuring its pair again; runner.run times both sides as more series of the
same run (RunConfig.base_builds).
"""

from __future__ import annotations

import io
import os
import re
import subprocess
import tarfile
from collections.abc import Callable
from dataclasses import dataclass, replace
from pathlib import Path

from ..errors import SectorbenchError
from ..model.results import BASE_SIDE, HEAD_SIDE, RowKey, RunResult, shows_cc
from ..native.build import ABI_HEADER, FAMILY_ABI, HARNESS_DIR, KERNELS_DIR, BuildConfig
from .gate import OVERHEAD, GateReport, row_label

#: What marks a git checkout as sectorbench's own: its kernels' ABI header.
CHECKOUT_MARK = Path("kernels_c") / HARNESS_DIR.name / ABI_HEADER.name
#: git commands here read a repository's objects: a minute is far beyond any of them.
GIT_TIMEOUT_S = 60
#: Where git looks for a ref written short (refs.c's ref_rev_parse_rules): a name found in two
#: of them, or also the start of a hash, is ambiguous.
REF_PLACES = ("refs/{}", "refs/tags/{}", "refs/heads/{}", "refs/remotes/{}", "refs/remotes/{}/HEAD")
#: What tells git which repository to read, in place of the one above the folder it runs in.
GIT_LOCATION = ("GIT_DIR", "GIT_WORK_TREE")


@dataclass(frozen=True)
class Against:
    """The base side of an A/B run: its builds (one per head build, same order) and what to say."""

    label: str  # e.g. "HEAD~1 (3f2a9c1)" or the old file's path
    base_builds: tuple[BuildConfig, ...]
    head_builds: tuple[BuildConfig, ...]
    notes: tuple[str, ...] = ()


def _git(args: list[str], cwd: Path, binary: bool = False, env: dict[str, str] | None = None, given=None):
    """git `args` run in `cwd`, with the environment git_environment made (C messages by default),
    `given` on its standard input."""
    try:
        return subprocess.run(
            ["git", *args],
            cwd=cwd,
            input=given,
            capture_output=True,
            text=not binary,
            timeout=GIT_TIMEOUT_S,
            check=False,
            env=env if env is not None else git_environment(),
        )
    except FileNotFoundError:
        if not Path(cwd).is_dir():  # subprocess says the same when the folder to run in is gone
            raise SectorbenchError(f"--against: {cwd} is not a folder (git was to run there)") from None
        raise SectorbenchError("--against needs git, which is not installed") from None
    except subprocess.TimeoutExpired:
        raise SectorbenchError(f"git {' '.join(args)} took over {GIT_TIMEOUT_S} s in {cwd}") from None


def git_environment(cwd: Path | None = None) -> dict[str, str]:
    """The environment git runs in here: C messages, and GIT_DIR/GIT_WORK_TREE, where the
    environment sets them (a hook's GIT_DIR=.git, a CI job's), made absolute as git reads them
    from `cwd`, the folder the user ran sectorbench in.

    git reads them relative to the folder it runs in, and these commands run in the folders of
    the files compared: a relative GIT_DIR named nothing there ("not in a git checkout"), and a
    GIT_DIR without GIT_WORK_TREE made that folder the top of the work tree (src/mine.c was
    mine.c, "not in REF: its kernels are new, not compared", exit 0)."""
    # GIT_OPTIONAL_LOCKS=0: `git status` here only reads (it would refresh and rewrite the index)
    env = dict(os.environ, LC_ALL="C", GIT_OPTIONAL_LOCKS="0")
    if cwd is None or not any(env.get(name) for name in GIT_LOCATION):
        return env
    done = _git(["rev-parse", "--absolute-git-dir", "--show-toplevel"], cwd, env=env)
    found = done.stdout.removesuffix("\n").split("\n")
    if done.returncode != 0 or len(found) != 2:
        named = ", ".join(f"{name}={env[name]}" for name in GIT_LOCATION if env.get(name))
        raise SectorbenchError(
            f"--against: git will not read the repository that {named} name: {_said(done)}{_safe_directory_hint(done)}"
        )
    env["GIT_DIR"], env["GIT_WORK_TREE"] = found
    return env


def repository_root(path: Path, env: dict[str, str] | None = None) -> Path | None:
    """The top of the git work tree holding `path` (a folder), or None."""
    done = _git(["rev-parse", "--show-toplevel"], path, env=env)
    if done.returncode == 0:
        # only git's newline taken off: a checkout at "/tmp/my repo " keeps its trailing space
        # (strip() made it a folder that does not exist, and every git command then "needed git")
        return Path(done.stdout.removesuffix("\n"))
    said = " ".join(line.strip() for line in done.stderr.splitlines() if line.strip())
    if not said or "not a git repository" in said:
        return None
    # A repository git will not read: one owned by another user ("detected dubious ownership",
    # a CI container's checkout), or of a newer format.  Said in git's words, with its advice:
    # it was "not in a git checkout (use --against-source OLD.c)".
    raise SectorbenchError(
        f"--against: git will not read the repository holding {path}: {said.removeprefix('fatal: ')}"
        + _safe_directory_hint(done)
    )


#: What git's refusal of a repository owned by another user ends with: the command that trusts it.
SAFE_DIRECTORY_ADVICE = "git config --global --add safe.directory "


def _safe_directory_hint(done: subprocess.CompletedProcess) -> str:
    """Where git refused a repository owned by another user and its advice (`git config --global
    --add safe.directory PATH`) cannot work here, what does: a CI container's user often has no
    home it may write (HOME=/), and that command then fails too ("could not lock config file
    //.gitconfig: Permission denied").  The same exception given in the environment
    (GIT_CONFIG_COUNT/KEY/VALUE, which git reads as command-line configuration, where it honours
    safe.directory) needs no file.  Trusting the repository stays the user's decision."""
    text = done.stderr if isinstance(done.stderr, str) else done.stderr.decode(errors="replace")
    advised = next((line.strip() for line in text.splitlines() if SAFE_DIRECTORY_ADVICE in line), None)
    if advised is None or _global_git_config_writable():
        return ""
    path = advised.partition(SAFE_DIRECTORY_ADVICE)[2]
    return (
        f" (git's global config cannot be written here, {_global_git_config_place()}: give the exception in the"
        f" environment instead, GIT_CONFIG_COUNT=1 GIT_CONFIG_KEY_0=safe.directory GIT_CONFIG_VALUE_0={path})"
    )


def _global_git_config_place() -> str:
    """Where `git config --global` writes, as words: $GIT_CONFIG_GLOBAL, else ~/.gitconfig."""
    if os.environ.get("GIT_CONFIG_GLOBAL"):
        return f"GIT_CONFIG_GLOBAL={os.environ['GIT_CONFIG_GLOBAL']}"
    home = os.environ.get("HOME")
    return f"HOME={home}" if home else "HOME is not set"


def _global_git_config_writable() -> bool:
    """Whether `git config --global` can write its file: it writes FILE.lock beside it, then
    renames, so the folder must be writable."""
    target = os.environ.get("GIT_CONFIG_GLOBAL") or (
        os.path.join(os.environ["HOME"], ".gitconfig") if os.environ.get("HOME") else None
    )
    if target is None:
        return False
    folder = os.path.dirname(os.path.abspath(target))
    return os.access(folder, os.W_OK | os.X_OK) and (not os.path.exists(target) or os.access(target, os.W_OK))


def _short_history_hint(ref: str, root: Path, env: dict[str, str] | None) -> str:
    """Where `ref` is an ancestor (X~n, X^) of a commit that exists, that the history stops
    short of it: HEAD~1 of a repository's first commit was a bare "unknown ref"."""
    start = re.match(r"(.+?)[~^]", ref)
    if start is None or start.group(1).startswith("-"):
        return ""
    found = _git(["rev-parse", "--verify", "--quiet", f"{start.group(1)}^{{commit}}"], root, env=env)
    return f" ({start.group(1)} has no such ancestor: its history is shorter)" if found.returncode == 0 else ""


def resolve(ref: str, root: Path, env: dict[str, str] | None = None) -> str:
    """The commit `ref` names in the repository at `root`; SectorbenchError if none."""
    # No ref or hash begins with "-": git would read it as one of its options.
    named = None if ref.startswith("-") else _git(["rev-parse", "--verify", "--quiet", ref], root, env=env)
    found = named.stdout.strip() if named is not None and named.returncode == 0 else ""
    if found:
        _refuse_ambiguous(ref, root, env)
    # What it names, tags peeled, looked up: rev-parse takes any full hash without looking it
    # up, so a PR's base SHA absent from a one-commit-deep clone was "names a object, not a
    # commit" (and ":/message", which `^{commit}` appended to turned into another search, was
    # "names a commit, not a commit").
    kind = _git(["cat-file", "-t", f"{found}^{{}}"], root, env=env).stdout.strip() if found else ""
    if not kind:
        # CI's default checkout is one commit deep: the merge base or HEAD~1 is simply not there.
        shallow = _git(["rev-parse", "--is-shallow-repository"], root, env=env).stdout.strip() == "true"
        hint = (
            " (a shallow clone: fetch the history, `fetch-depth: 0` in actions/checkout or `git fetch --unshallow`)"
            if shallow
            else _short_history_hint(ref, root, env)
        )
        raise SectorbenchError(f"--against {ref}: unknown ref in the git repository {root}{hint}")
    if kind != "commit":  # a tree or a blob: a ref, not a commit
        raise SectorbenchError(f"--against {ref}: names a {kind}, not a commit, in the git repository {root}")
    return _git(["rev-parse", "--verify", "--quiet", f"{found}^{{commit}}"], root, env=env).stdout.strip()


def _refuse_ambiguous(ref: str, root: Path, env: dict[str, str] | None) -> None:
    """SectorbenchError if `ref` names two things (a tag and a branch of that name, a ref and
    the start of a hash): git takes one with a warning on stderr, which no one reads in CI, and
    the gate compared against whichever it was."""
    # rev-parse --verify keeps the warning to itself; cat-file says it
    looked = _git(["-c", "core.warnAmbiguousRefs=true", "cat-file", "-t", ref], root, env=env)
    warned = re.search(r"refname '(.+)' is ambiguous", looked.stderr)
    if warned is None:
        return
    name = warned.group(1)  # the part of `ref` that is ambiguous: "dup" of "dup~1"
    places = [place.format(name) for place in REF_PLACES]
    meanings = _git(["for-each-ref", "--format=%(refname)", *places], root, env=env).stdout.split()
    if len(meanings) < 2:
        meanings.append(f"an object whose hash begins with {name}")
    raise SectorbenchError(
        f"--against {ref}: {name} is ambiguous in the git repository {root}: it names {' and '.join(meanings)}; "
        "give one in full (refs/heads/..., refs/tags/..., or the whole hash)"
    )


def _said(done: subprocess.CompletedProcess) -> str:
    """What git said on stderr, on one line."""
    text = done.stderr if isinstance(done.stderr, str) else done.stderr.decode(errors="replace")
    return " ".join(line.strip() for line in text.splitlines() if line.strip()).removeprefix("fatal: ")


def _absent(commit: str, relative: str, root: Path, env: dict[str, str] | None) -> bool:
    """True if `commit` has nothing at `relative`: read from its trees alone (which a partial
    clone holds), so a file that is there but unreadable is not taken for one that is not."""
    listed = _git(["ls-tree", "-z", "--name-only", commit, "--", relative], root, env=env)
    return listed.returncode == 0 and not listed.stdout


def _show(commit: str, relative: str, root: Path, env: dict[str, str] | None = None) -> bytes | None:
    """The file at `relative` (from the repository's top) in `commit`, or None if absent there."""
    done = _git(["show", f"{commit}:{relative}"], root, binary=True, env=env)
    if done.returncode == 0:
        return done.stdout
    if _absent(commit, relative, root, env):
        return None
    # there but not readable: a partial clone (--filter=blob:none) whose remote cannot be
    # reached, a damaged object.  It was "not in REF: its kernels are new, not compared", and
    # the gate passed without comparing them.
    raise SectorbenchError(f"--against: git could not read {relative} at {commit[:10]} in {root}: {_said(done)}")


def _headers_at(commit: str, folder: str | None, root: Path, env: dict[str, str]) -> dict[str, bytes]:
    """The .h files in `folder` (None: the top) at `commit`, by their names from the top: listed
    with their object ids, then read by one git process (a `git show` each took 16 s for a
    folder of 3,000 headers)."""
    # -z: names as they are, NUL-separated; without it git quotes a name with a non-ASCII
    # byte ("k \303\251/mine.h") and a split on spaces cuts "my header.h" in two, so such
    # headers were never written and the base side failed to compile ("mine.h: No such file")
    listed = _git(["ls-tree", "-z", commit, *([folder + "/"] if folder else [])], root, env=env)
    wanted: dict[str, str] = {}  # name -> object id
    for entry in listed.stdout.split("\0") if listed.returncode == 0 else ():
        described, _, name = entry.partition("\t")  # "<mode> <type> <id>\t<name>"
        _mode, kind, oid = (described.split() + ["", "", ""])[:3]
        if name.endswith(".h") and kind == "blob":  # a symbolic link's blob is its target, as git show gives it
            wanted[name] = oid
    if not wanted:
        return {}
    done = _git(
        ["cat-file", "--batch"], root, binary=True, env=env, given="".join(f"{o}\n" for o in wanted.values()).encode()
    )
    out, at, headers = done.stdout, 0, {}
    for name in wanted:  # one answer per line asked, in order: "<id> blob <size>\n<bytes>\n"
        end = out.find(b"\n", at)
        said = out[at:end].split() if end >= 0 else []
        if len(said) != 3 or said[1] != b"blob":  # "<id> missing": a partial clone's remote out of reach
            raise SectorbenchError(
                f"--against: git could not read {name} at {commit[:10]} in {root}: {_said(done) or 'missing'}"
            )
        size = int(said[2])
        headers[name] = out[end + 1 : end + 1 + size]
        at = end + 1 + size + 1
    return headers


def _kernels_at(commit: str, root: Path, scratch: Path, env: dict[str, str] | None = None) -> Path:
    """kernels_c/ of `commit`, extracted under scratch (git archive: no work tree, no checkout)."""
    done = _git(["archive", "--format=tar", commit, "kernels_c"], root, binary=True, env=env)
    if done.returncode != 0:
        if _absent(commit, "kernels_c", root, env):
            raise SectorbenchError(f"--against: {commit[:12]} has no kernels_c/ in {root}")
        raise SectorbenchError(f"--against: git could not read kernels_c/ at {commit[:10]} in {root}: {_said(done)}")
    target = scratch / "kernels"
    try:
        with tarfile.open(fileobj=io.BytesIO(done.stdout)) as archive:
            _extract_in_place(archive, target)
    except (_UnsafeMember, *_FILTER_ERRORS) as exc:  # a link out of the tree, a device: never written outside
        raise SectorbenchError(f"--against: kernels_c/ at {commit[:12]} holds what is not extracted: {exc}") from None
    return target / "kernels_c"


class _UnsafeMember(Exception):
    """A member that would be written outside the target, or is not a file, folder or link."""


#: tarfile's extraction filters came with Python 3.11.4 (and 3.8.17, 3.9.17, 3.10.12).
_FILTER_ERRORS = (tarfile.FilterError,) if hasattr(tarfile, "FilterError") else ()


def _extract_in_place(archive: tarfile.TarFile, target: Path) -> None:
    """Extract with tarfile's "data" filter; before Python 3.11.4 (Debian 12's 3.11.2), its
    refusals by hand: a name or a link that leaves the target, anything but a file, a folder
    or a symbolic link."""
    if hasattr(tarfile, "data_filter"):
        archive.extractall(target, filter="data")
        return
    root = os.path.abspath(target)
    for member in archive.getmembers():
        place = os.path.normpath(os.path.join(root, member.name))
        linked = os.path.normpath(os.path.join(os.path.dirname(place), member.linkname)) if member.issym() else place
        if not (member.isfile() or member.isdir() or member.issym()):
            raise _UnsafeMember(f"{member.name} is not a file, a folder or a symbolic link")
        if os.path.isabs(member.name) or os.path.isabs(member.linkname) and member.issym():
            raise _UnsafeMember(f"{member.name} is an absolute path or a link to one")
        if os.path.commonpath([root, place]) != root or os.path.commonpath([root, linked]) != root:
            raise _UnsafeMember(f"{member.name} would be outside the destination")
    archive.extractall(target)  # every member checked above


#: C comments, which say nothing to cffi: a ref whose ABI headers differ only in them is comparable.
_C_COMMENT = re.compile(r"/\*.*?\*/|//[^\n]*", re.DOTALL)


def _abi_text(kernels_dir: Path) -> str:
    """What the worker's cffi declares (sb_abi.h and each family's abi.h), comments and spacing
    aside, to check both sides share it."""
    family_abis = sorted(p for p in kernels_dir.glob(f"*/{FAMILY_ABI}") if p.parent.name != HARNESS_DIR.name)
    abi = kernels_dir / HARNESS_DIR.name / ABI_HEADER.name
    if not abi.is_file():
        return ""
    text = "\n".join(p.read_text() for p in (abi, *family_abis))
    return " ".join(_C_COMMENT.sub(" ", text).split())


def against_ref(ref: str, head_builds: tuple[BuildConfig, ...], sources: tuple[Path, ...], scratch: Path, cwd: Path):
    """The base builds of `--against REF`: the --source files as they are in REF (each from its
    own repository), and, when `cwd` is in a sectorbench checkout, that checkout's kernels_c/ at
    REF against its working tree's.  Refuses (SectorbenchError, one line) what cannot be compared."""
    notes: list[str] = []
    env = git_environment(cwd)
    checkout = repository_root(cwd, env)
    if checkout is not None and not (checkout / CHECKOUT_MARK).is_file():
        checkout = None
    if not sources and checkout is None:
        if repository_root(cwd, env) is None:
            raise SectorbenchError(f"--against {ref}: {cwd} is not a git checkout")
        raise SectorbenchError(
            f"--against {ref}: nothing to compare: give --source files tracked by git, or run in a sectorbench checkout"
        )
    head_kernels = base_kernels = None
    commits: dict[Path, str] = {}  # the commit REF names in each repository read
    changed: dict[Path, list[str]] = {}  # what the working tree has uncommitted, in each
    if checkout is not None:
        commits[checkout] = commit = resolve(ref, checkout, env)
        changed[checkout] = _uncommitted(checkout, ["kernels_c"], env)
        base_kernels = _kernels_at(commit, checkout, scratch, env)
        head_kernels = checkout / "kernels_c"
        if head_kernels.resolve() == KERNELS_DIR.resolve():
            head_kernels = None  # this package's own tree: the head builds are the usual ones
        # Both sides are loaded through this sectorbench's cffi declarations: a side whose ABI
        # differs would be called with the wrong layout (a head checkout that is not the
        # installed package once gave "2 improvements, ratio 0.003").
        installed = _abi_text(KERNELS_DIR)
        if head_kernels is not None and _abi_text(head_kernels) != installed:
            raise SectorbenchError(
                f"--against {ref}: the kernels' ABI (sb_abi.h or a family's abi.h) of the working tree "
                f"{checkout} differs from the installed sectorbench's ({KERNELS_DIR.parent}): its kernels cannot "
                "be loaded by it; install this checkout (pip install -e .) and run again"
            )
        if _abi_text(base_kernels) != installed:
            raise SectorbenchError(
                f"--against {ref}: the kernels' ABI (sb_abi.h or a family's abi.h) differs at {commit[:10]}: "
                "its kernels cannot be loaded by this sectorbench"
            )
    base_sources: list[Path] = []
    for number, source in enumerate(sources):
        source = Path(source).resolve()
        root = repository_root(source.parent, env)
        if root is None:
            raise SectorbenchError(f"--against {ref}: {source} is not in a git checkout (use --against-source OLD.c)")
        commits[root] = commit = resolve(ref, root, env)
        if not source.is_relative_to(root.resolve()):  # a GIT_WORK_TREE elsewhere (an internal error, ValueError)
            raise SectorbenchError(
                f"--against {ref}: {source} is outside the work tree {root} that GIT_DIR/GIT_WORK_TREE name"
            )
        relative = source.relative_to(root.resolve()).as_posix()
        text = _show(commit, relative, root, env)
        parent = Path(relative).parent
        folder = None if parent == Path(".") else parent.as_posix()
        beside = f":(glob){folder}/*.h" if folder else ":(glob)*.h"
        changed.setdefault(root, []).extend(_uncommitted(root, [relative, beside], env))
        if text is None:
            notes.append(f"{relative} is not in {ref}: its kernels are new, not compared")
            continue
        # a folder of its own for each file: two projects' "proj/src/mine.c" were one path, the
        # second written over the first, and the base built it twice ("two kernels are named")
        tree = scratch / "sources" / str(number) / root.name
        target = tree / relative
        target.parent.mkdir(parents=True, exist_ok=True)
        target.write_bytes(text)
        # Headers beside it, as they were at REF, so a local #include finds its old self.
        for name, header in _headers_at(commit, folder, root, env).items():
            (tree / name).write_bytes(header)
        base_sources.append(target)
    user = {Path(s).resolve() for s in sources}
    heads, bases = [], []
    for build in head_builds:
        head = replace(build, kernels_dir=head_kernels) if head_kernels is not None else build
        own = tuple(p for p in build.extra_sources if Path(p).resolve() not in user)
        bases.append(replace(build, extra_sources=own + tuple(base_sources), kernels_dir=base_kernels))
        heads.append(head)
    for root, names in changed.items():
        if names := sorted(set(names)):
            listed = ", ".join(names[:3]) + (f" and {len(names) - 3} more" if len(names) > 3 else "")
            notes.append(f"head: the working tree of {root}, with its uncommitted changes ({listed})")
    return Against(_label(ref, commits), tuple(bases), tuple(heads), tuple(notes))


def _label(ref: str, commits: dict[Path, str]) -> str:
    """REF and the commit it names, in each repository when it was read in several (a checkout's
    kernels_c/ and a --source file of another project): "HEAD~1 (a30ecd5663)" named only the
    first, and the base of the other was another commit."""
    if len(set(commits.values())) == 1:
        return f"{ref} ({next(iter(commits.values()))[:10]})"
    return f"{ref} ({', '.join(f'{commit[:10]} in {root.name}' for root, commit in commits.items())})"


def _uncommitted(root: Path, pathspecs: list[str], env: dict[str, str]) -> list[str]:
    """The files `pathspecs` match whose working tree differs from HEAD (changed, staged, added,
    removed or untracked): what the head side compares that no commit holds."""
    done = _git(["status", "--porcelain", "-z", "--untracked-files=all", "--", *pathspecs], root, env=env)
    names, entries = [], iter(done.stdout.split("\0") if done.returncode == 0 else ())
    for entry in entries:  # "XY name"; a rename or a copy is followed by its old name
        if len(entry) > 3:
            names.append(entry[3:])
            if entry[0] in "RC":
                next(entries, None)
    return names


def against_source(old: Path, head_builds: tuple[BuildConfig, ...], sources: tuple[Path, ...]) -> Against:
    """The base builds of `--against-source OLD.c`: the one --source file replaced by OLD.c."""
    if len(sources) != 1:
        raise SectorbenchError(
            f"--against-source pairs OLD.c with one --source NEW.c (got {len(sources)} --source files)"
        )
    new, old = Path(sources[0]).resolve(), Path(old).resolve()
    if new == old:
        raise SectorbenchError(f"--against-source {old} is the --source file itself")
    bases = tuple(
        replace(b, extra_sources=tuple(old if Path(p).resolve() == new else p for p in b.extra_sources))
        for b in head_builds
    )
    return Against(str(old), bases, tuple(head_builds))


def check_common(
    rows: tuple[RowKey, ...], sides: tuple[str | None, ...], label: str, normalize: str | None = None
) -> None:
    """Before timing: refuse an A/B run whose two sides share no kernel, or whose --normalize
    KERNEL is not timed beside every pair on both sides (as check_rows refuses it for
    --baseline; the gate refused it only after every round was timed)."""
    base = {row for row, side in zip(rows, sides) if side == BASE_SIDE}
    head = {row for row, side in zip(rows, sides) if side == HEAD_SIDE}
    if not base & head:
        raise SectorbenchError(f"--against {label}: no kernel in common between the base and the working tree")
    if normalize in (None, OVERHEAD):
        return
    show_cc = shows_cc(rows)
    for key in sorted(base & head, key=lambda k: (k.cc, k.flags, k.mode, k.threads, k.kernel)):
        reference = key.with_kernel(normalize)
        for side, timed in ((BASE_SIDE, base), (HEAD_SIDE, head)):
            if reference not in timed:
                raise SectorbenchError(
                    f"cannot normalize by {normalize}: no {row_label(reference, show_cc)} on the {side} side "
                    "(--kernels must name it)"
                )


def split(result: RunResult) -> tuple[RunResult, RunResult]:
    """The run's base and head rows as two results the gate pairs by kernel name.

    A kernel only the base has (removed or renamed in the head) stays in the base: the gate
    names it missing and fails, as regress does with a kernel a saved run lost."""
    base = [r for r in result.results if r.side == BASE_SIDE]
    head = [r for r in result.results if r.side == HEAD_SIDE]
    return replace(result, results=base), replace(result, results=head)


def confirm(
    report: GateReport,
    measure_again: Callable[[set[RowKey]], GateReport],
) -> tuple[GateReport, list[str]]:
    """Re-measure the rows `report` flags as regressions, once, in fresh rounds; a row stays a
    regression only if flagged again (a false alarm at rate p becomes one at rate p²).

    Rows gated on deterministic counts (p is NaN there) are not re-measured: a count does not
    change.  measure_again(keys) times those rows anew and gates them; returns the report with
    their new outcome and one line per row saying what happened."""
    flagged = {row.key for row in report.regressions if row.p_slower == row.p_slower}
    if not flagged:
        return report, []
    again = {row.key: row for row in measure_again(flagged).rows}
    lines, rows = [], []
    for row in report.rows:
        if row.key not in flagged:
            rows.append(row)
            continue
        second = again.get(row.key)
        name = f"{row.kernel} [{row.flags}, {row.mode}]"
        if second is None:
            lines.append(f"confirm: {name} could not be re-measured; the first measurement stands")
            rows.append(row)
        elif second.verdict == "regression":
            lines.append(f"confirm: {name} flagged again when re-measured (ratio {second.ratio:.3f}): a regression")
            rows.append(second)
        else:
            lines.append(
                f"confirm: {name} flagged (ratio {row.ratio:.3f}) but {second.verdict} when re-measured "
                f"(ratio {second.ratio:.3f}): not a regression"
            )
            rows.append(second)
    # said in the report too (its table caption and Markdown), whose figures for these rows are
    # now the re-measurement's, which the run's --json, written before it, does not hold
    said = [*lines, "confirm: the rows re-measured show the second measurement; the run's saved JSON holds the first"]
    return replace(report, rows=tuple(rows), warnings=(*report.warnings, *said)), lines
