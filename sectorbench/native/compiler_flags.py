"""Compiler flags sectorbench refuses, each with its reason: the one home of that list.

--flags is passed to the compiler word for word, so a flag can redirect what the
compiler writes (over one of the user's files: `-Wl,-o,results.json`) or make it write
no shared library at all.  Such flags are refused before anything is built.  The build
itself runs in a private directory (its working directory and TMPDIR too), so files a
compiler drops beside its output or in its working directory are removed with it; the
flags below are the ones that could write elsewhere, or that would leave no library.

Refused too, though they write nothing: -fprofile-use and clang's -fprofile-instr-use, which
can never find a profile (see _NO_PROFILE), so a "PGO" build would be timed without one.

Allowed on purpose: -v (the compiler describes its steps on stderr, which is captured),
-pipe, -flto, -include/-imacros (they read files: the build cache lists every file a compile
read, native/build.py), -save-temps would only write into the
private directory but is refused all the same (it names no useful output and its
`=obj` form follows -o), as are -fdump-* (their `=FILE` form writes anywhere).
"""

from __future__ import annotations

import os

#: Why a profile-guided build (-fprofile-use, clang's -fprofile-instr-use) is refused: it would
#: silently build without its profile ("profile count data file not found" is only a warning).
_NO_PROFILE = (
    "reads a profile that can never match: each build compiles kernels_c/ from a private directory "
    "of a random name, which the profile's file names (gcc's .gcda, clang's names of static "
    "functions) contain, and the flags that would write one are refused"
)

#: (flag prefix, what it does).  A word is refused when it equals the prefix or starts
#: with it (prefixes ending in "=" or "-" only match longer words).
REFUSED_PREFIXES: tuple[tuple[str, str], ...] = (
    ("-o", "names the output file; sectorbench chooses where the library goes"),
    ("--output", "names the output file; sectorbench chooses where the library goes"),
    ("-E", "only preprocesses: no library would be built"),
    ("-S", "only compiles to assembly: no library would be built"),
    ("-c", "only compiles to object files: no library would be built"),
    ("-fsyntax-only", "only checks the syntax: no library would be built"),
    ("-M", "writes dependency files (-MF names any path) or replaces the compile (-M, -MM)"),
    ("@", "reads more flags from a file, which would go unchecked"),
    ("-save-temps", "keeps intermediate files beside the output or in the working directory"),
    ("-fdump-", "writes compiler dumps (the =FILE form anywhere)"),
    ("-aux-info", "writes prototypes to a file it names"),
    ("-dump", "names or changes the files the compiler writes beside its output"),
    ("-###", "prints the commands instead of running them: no library would be built"),
    ("--help", "prints help instead of compiling"),
    ("--version", "prints the version instead of compiling"),
    ("-print-", "prints a setting instead of compiling"),
    ("--print-", "prints a setting instead of compiling"),
    ("-Xlinker", "passes the next word to the linker unchecked; use -Wl,... (checked)"),
    ("-Xassembler", "passes the next word to the assembler unchecked; use -Wa,... (checked)"),
    ("-Xpreprocessor", "passes the next word to the preprocessor unchecked; use -Wp,... (checked)"),
    ("-foptimization-record-file", "writes an optimisation record to a file it names"),
    ("-fsave-optimization-record", "writes an optimisation record beside the output"),
    ("-fprofile-generate", "makes the library write profile files wherever it runs"),
    ("-fprofile-instr-generate", "makes the library write profile files wherever it runs"),
    ("-fcs-profile-generate", "makes the library write profile files wherever it runs"),
    ("-fprofile-arcs", "makes the library write profile files wherever it runs"),
    ("--coverage", "makes the library write coverage files wherever it runs"),
    ("-coverage", "makes the library write coverage files wherever it runs"),
    ("-fprofile-use", _NO_PROFILE),
    ("-fprofile-instr-use", _NO_PROFILE),
    ("-ftest-coverage", "writes coverage notes beside the output"),
    ("-fcallgraph-info", "writes call-graph files beside the output"),
    ("-fstack-usage", "writes stack-usage files beside the output"),
    ("-ftime-trace", "writes a time trace (the =FILE form anywhere)"),
    ("-fcrash-diagnostics-dir", "writes crash reports into a directory it names"),
)

#: Words inside -Wl, (linker), -Wa, (assembler) and -Wp, (preprocessor) lists that write files.
REFUSED_PASSED: dict[str, tuple[tuple[str, str], ...]] = {
    "-Wl,": (
        ("-o", "makes the linker write its output to a file it names"),
        ("--output", "makes the linker write its output to a file it names"),
        ("-Map", "makes the linker write a map file"),
        ("--Map", "makes the linker write a map file"),
        ("--out-implib", "makes the linker write an import library"),
        ("--dependency-file", "makes the linker write a dependency file"),
        ("@", "reads more linker options from a file, which would go unchecked"),
    ),
    "-Wa,": (
        ("-o", "makes the assembler write its output to a file it names"),
        ("-a", "makes the assembler write a listing file"),
        ("--MD", "makes the assembler write a dependency file"),
        ("@", "reads more assembler options from a file, which would go unchecked"),
    ),
    "-Wp,": (
        ("-o", "makes the preprocessor write its output to a file it names"),
        ("-M", "makes the preprocessor write dependency files"),
        ("@", "reads more preprocessor options from a file, which would go unchecked"),
    ),
}


def _match(word: str, table) -> str | None:
    for prefix, reason in table:
        if word == prefix or (word.startswith(prefix) and (prefix[-1] in "=-,@" or _joined(prefix, word))):
            return reason
    return None


def _joined(prefix: str, word: str) -> bool:
    """`word` is `prefix` with its argument joined on (-ofile, -MFdeps, -Map=x), not another
    flag that happens to share its first letters (-c vs -cpp is not a gcc flag, but -save-temps
    vs -save-temps=obj, -M vs -MD, -o vs -ofile are)."""
    if prefix in ("-o", "-M", "-dump", "-a", "@", "-Map", "--Map", "-save-temps"):
        return True
    return word[len(prefix)] in "=,"


#: Options that name a file or folder, joined (-Iinc, --sysroot=x) or as the next word (-I inc),
#: longest first so -isystem is not read as -i... .  A relative path among them would be
#: looked for in the private build directory (the compiler's working directory), where it
#: names nothing: -Iinc was silently ignored, a math.h in it never read.
PATH_OPTIONS = (
    "-fsanitize-ignorelist=", "-fsanitize-blacklist=", "-fprofile-sample-use=", "--sysroot=", "--sysroot",
    "-idirafter", "-isysroot", "-isystem", "-imacros", "-include", "-iprefix", "-iquote", "-specs=", "-I", "-L", "-B",
)  # fmt: skip


def _relative_path(word: str, following: str | None) -> str | None:
    """The relative path `word` (with the word after it) names, if it is a path option's."""
    for option in PATH_OPTIONS:
        if word == option and not option.endswith("="):
            path = following
        elif word.startswith(option) and len(word) > len(option):
            path = word[len(option) :].removeprefix("=") if option == "--sysroot" else word[len(option) :]
        else:
            continue
        # "=" and "$SYSROOT" start a path inside the sysroot; -I- is an old option, not a folder
        if path and not path.startswith(("/", "=", "$SYSROOT")) and path != "-":
            return path
        return None
    return None


def refused(flags: tuple[str, ...]) -> tuple[str, str] | None:
    """The first word of `flags` sectorbench refuses, and why; None if all are allowed."""
    for index, word in enumerate(flags):
        relative = _relative_path(word, flags[index + 1] if index + 1 < len(flags) else None)
        if relative is not None:
            return word, (
                f"names {relative!r} relative to the working directory, but each build compiles in a private "
                f"directory, where that names nothing: give the path absolute ({os.path.abspath(relative)})"
            )
        reason = _match(word, REFUSED_PREFIXES)
        if reason is None:
            for passed, table in REFUSED_PASSED.items():
                if word.startswith(passed):
                    reason = next(filter(None, (_match(item, table) for item in word[len(passed) :].split(","))), None)
                    break
        if reason is not None:
            return word, reason
    return None
