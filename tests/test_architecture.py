"""The tree is the architecture: its parts import downwards only (no cycle), model/ nothing but
numpy, only cli/ prints, one module loads C through cffi, and the harness never names a family."""

from __future__ import annotations

import ast
import io
import re
import sys
import tokenize
from pathlib import Path

from sectorbench.families import all_families

ROOT = Path(__file__).resolve().parent.parent
PACKAGE = ROOT / "sectorbench"
#: Every registered family: one added by its registration line is guarded from then on (a fixed
#: list of the first three let the harness name a fourth, a probe's "circle", unnoticed).
FAMILIES = tuple(family.name for family in all_families())
FAMILY_WORD = re.compile(rf"\b({'|'.join(FAMILIES)})\b")


def module_name(path: Path) -> str:
    parts = list(path.relative_to(ROOT).with_suffix("").parts)
    return ".".join(parts[:-1] if parts[-1] == "__init__" else parts)


def part_of(module: str) -> str:
    """The unit of the architecture a module belongs to: its subpackage of sectorbench (every
    family together is one part), or the top-level module itself."""
    parts = module.split(".")
    if len(parts) >= 2 and (PACKAGE / parts[1]).is_dir():
        return ".".join(parts[:2])
    return module


def is_module(name: str) -> bool:
    path = ROOT.joinpath(*name.split("."))
    return path.is_dir() or path.with_suffix(".py").exists()


def imports(path: Path) -> set[str]:
    """Every sectorbench module `path` imports, at the top or inside a function."""
    module = module_name(path)
    base = module.split(".") if path.name == "__init__.py" else module.split(".")[:-1]
    found = set()
    for node in ast.walk(ast.parse(path.read_text())):
        if isinstance(node, ast.Import):
            found |= {alias.name for alias in node.names if alias.name.startswith("sectorbench")}
        elif isinstance(node, ast.ImportFrom):
            if node.level:
                target = ".".join(base[: len(base) - node.level + 1] + ([node.module] if node.module else []))
            else:
                target = node.module or ""
            if target.startswith("sectorbench"):
                for alias in node.names:  # `from . import runner` imports the module runner, not the package
                    module = f"{target}.{alias.name}"
                    found.add(module if is_module(module) else target)
    return found


def graph() -> dict[str, set[str]]:
    edges: dict[str, set[str]] = {}
    for path in PACKAGE.rglob("*.py"):
        source = part_of(module_name(path))
        for target in imports(path):
            target_part = part_of(target)
            if target_part != source:
                edges.setdefault(source, set()).add(target_part)
    return edges


def find_cycle(edges: dict[str, set[str]]) -> list[str] | None:
    state: dict[str, int] = {}
    stack: list[str] = []

    def visit(node: str) -> list[str] | None:
        state[node] = 1
        stack.append(node)
        for nxt in sorted(edges.get(node, ())):
            if state.get(nxt) == 1:
                return stack[stack.index(nxt) :] + [nxt]
            if nxt not in state and (cycle := visit(nxt)):
                return cycle
        state[node] = 2
        stack.pop()
        return None

    for node in sorted(edges):
        if node not in state and (cycle := visit(node)):
            return cycle
    return None


def test_the_parts_import_one_another_without_a_cycle():
    cycle = find_cycle(graph())
    assert cycle is None, " -> ".join(cycle)


def test_a_cycle_would_be_found():  # the check itself has teeth
    assert find_cycle({"a": {"b"}, "b": {"c"}, "c": {"a"}}) == ["a", "b", "c", "a"]
    assert find_cycle({"a": {"b"}, "b": {"c"}}) is None


#: The parts from the top down (DESIGN.md's tree): a part imports only parts below it.  present/
#: sits above compare/: its tables and plots show what compare computes, and compare never
#: imports present.  The bottom row imports nothing of sectorbench's: the error every layer
#: raises, the handling of interrupts and child processes, the version.
LAYERS = (
    ("sectorbench.__main__",),
    ("sectorbench.cli", "sectorbench"),  # the command line and the package's public API
    ("sectorbench.check",),
    ("sectorbench.measure",),
    ("sectorbench.present",),
    ("sectorbench.compare",),
    ("sectorbench.families",),
    ("sectorbench.native",),
    ("sectorbench.oracle",),
    ("sectorbench.model",),
    ("sectorbench.errors", "sectorbench.interrupts", "sectorbench.version"),
)


def layer_of(part: str) -> int | None:
    return next((place for place, layer in enumerate(LAYERS) if part in layer), None)


def upward(edges: dict[str, set[str]]) -> list[str]:
    """The imports of a part from a part in its own layer or above."""
    return sorted(
        f"{source} -> {target}"
        for source, targets in edges.items()
        for target in targets
        if layer_of(target) <= layer_of(source)
    )


def test_every_part_has_its_layer():
    parts = {part_of(module_name(path)) for path in PACKAGE.rglob("*.py")}
    assert not [part for part in sorted(parts) if layer_of(part) is None], "add it to LAYERS"


def test_arrows_point_down_only():
    assert not upward(graph())


def test_an_arrow_up_would_be_found():  # the check itself has teeth
    assert upward({"sectorbench.model": {"sectorbench.native"}}) == ["sectorbench.model -> sectorbench.native"]
    assert upward({"sectorbench.native": {"sectorbench.model"}}) == []


def outside_imports(path: Path) -> set[str]:
    """The top-level names of what `path` imports from outside sectorbench."""
    found = set()
    for node in ast.walk(ast.parse(path.read_text())):
        if isinstance(node, ast.Import):
            found |= {alias.name.split(".")[0] for alias in node.names}
        elif isinstance(node, ast.ImportFrom) and not node.level:
            found.add((node.module or "").split(".")[0])
    return found - {"sectorbench", "__future__"}


def test_model_imports_nothing_but_numpy_and_the_standard_library():
    allowed = set(sys.stdlib_module_names) | {"numpy"}
    found = {
        str(path.relative_to(ROOT)): sorted(outside_imports(path) - allowed)
        for path in (PACKAGE / "model").rglob("*.py")
    }
    assert not {path: names for path, names in found.items() if names}


#: Calls that write to the terminal or end the process: only cli/ makes them (DESIGN.md:
#: library code returns values).  A name like print or sys.exit, or any click.* function.
ENDING_OR_PRINTING = {"print", "exit", "quit", "sys.exit", "os._exit", "sys.stdout.write", "sys.stderr.write"}
#: The worker process's own programs: their output is captured for the parent, and the
#: parent reads their exit status; they are not the sectorbench command.
WORKER_PROGRAMS = ("measure/server.py", "measure/forkserver.py")


def dotted(node: ast.expr) -> str:
    if isinstance(node, ast.Name):
        return node.id
    if isinstance(node, ast.Attribute):
        return f"{dotted(node.value)}.{node.attr}"
    return ""


def printing_calls(source: str) -> list[str]:
    """Calls (and raises of SystemExit) that print or end the process, with their lines."""
    found = []
    for node in ast.walk(ast.parse(source)):
        if isinstance(node, ast.Call):
            name = dotted(node.func)
            if name in ENDING_OR_PRINTING or name.startswith("click."):
                found.append(f"{node.lineno}: {name}(")
        elif isinstance(node, ast.Raise) and node.exc is not None:
            raised = node.exc.func if isinstance(node.exc, ast.Call) else node.exc
            if dotted(raised) == "SystemExit":
                found.append(f"{node.lineno}: raise SystemExit")
        elif isinstance(node, (ast.Import, ast.ImportFrom)):
            names = [alias.name for alias in node.names] if isinstance(node, ast.Import) else [node.module or ""]
            if any(name.split(".")[0] == "click" for name in names):
                found.append(f"{node.lineno}: import click")
    return sorted(found, key=lambda call: int(call.split(":")[0]))


def test_only_the_cli_prints_or_ends_the_process():
    found = {}
    for path in PACKAGE.rglob("*.py"):
        relative = path.relative_to(PACKAGE)
        if relative.parts[0] == "cli" or str(relative) in WORKER_PROGRAMS:
            continue
        if calls := printing_calls(path.read_text()):
            found[str(relative)] = calls
    assert not found, found


def test_printing_would_be_found():
    source = "import sys\nprint('x')\nsys.exit(2)\nraise SystemExit(1)\nclick.echo('y')\n"
    assert printing_calls(source) == ["2: print(", "3: sys.exit(", "4: raise SystemExit", "5: click.echo("]
    assert printing_calls("table = render(rows)\n") == []


def test_one_cffi_loader():
    """native/loader.py is the only module that makes an FFI: every library is loaded through
    the one C interface it parses."""
    users = sorted(str(p.relative_to(PACKAGE)) for p in PACKAGE.rglob("*.py") if "cffi" in outside_imports(p))
    assert users == ["native/loader.py"]


def test_only_native_runs_the_compiler():
    """native/build.py's run_compiler is the one way to the compiler: called only in native/
    (build.py builds; environment.py asks it for its version and -march=native)."""
    callers = sorted(
        str(path.relative_to(PACKAGE))
        for path in PACKAGE.rglob("*.py")
        if any(
            isinstance(node, ast.Call) and dotted(node.func).split(".")[-1] == "run_compiler"
            for node in ast.walk(ast.parse(path.read_text()))
        )
    )
    assert callers == ["native/build.py", "native/environment.py"]


def names_of_families(source: str) -> list[str]:
    """Identifiers and string literals (docstrings and comments aside) that name a family."""
    tree = ast.parse(source)
    docstrings = {
        (node.body[0].lineno, node.body[0].col_offset)
        for node in ast.walk(tree)
        if isinstance(node, (ast.Module, ast.ClassDef, ast.FunctionDef, ast.AsyncFunctionDef))
        and node.body
        and isinstance(node.body[0], ast.Expr)
        and isinstance(node.body[0].value, ast.Constant)
        and isinstance(node.body[0].value.value, str)
    }
    found = []
    for token in tokenize.generate_tokens(io.StringIO(source).readline):
        if token.type == tokenize.NAME and token.string in FAMILIES:
            found.append(token.string)
        elif token.type == tokenize.STRING and token.start not in docstrings and FAMILY_WORD.search(token.string):
            found.append(token.string)
    return found


def test_the_harness_never_names_a_family():
    named = {}
    for path in PACKAGE.rglob("*.py"):
        if "families" in path.relative_to(PACKAGE).parts:
            continue
        if found := names_of_families(path.read_text()):
            named[str(path.relative_to(ROOT))] = found
    for path in (ROOT / "kernels_c" / "harness").iterdir():
        if found := re.findall(rf'"({"|".join(FAMILIES)})"', path.read_text()):
            named[str(path.relative_to(ROOT))] = found
    assert not named, named


def test_naming_a_family_would_be_found():
    assert names_of_families('x = families.get("sector")\n') == ['"sector"']
    assert names_of_families('"""About the sector family."""\nsectorbench = 1\n') == []


# ------------------------------------------------------------------ one translation unit a folder

#: Feature-test macros: they act only before the first system header of a translation unit.
FEATURE_MACROS = re.compile(r"^\s*#\s*define\s+(_GNU_SOURCE|_DEFAULT_SOURCE|_POSIX_C_SOURCE|_XOPEN_SOURCE)\b", re.M)
DEFINE = re.compile(r"^\s*#\s*define\s+(\w+)", re.M)
UNDEF = re.compile(r"^\s*#\s*undef\s+(\w+)", re.M)


def test_a_folders_files_compile_as_one_unit_without_leaking_into_each_other():
    """native/build.py compiles each folder of kernels_c/ as one unit (its files #included in
    name order): a macro one file leaves defined must not be a word of a later file (it would
    change that file's meaning silently), and a feature-test macro acts only in a folder's first
    file (later ones come after the first file's system headers)."""
    from sectorbench.native.build import BuildConfig, units

    for name, files in units(BuildConfig.parse("-O2")):
        for position, source in enumerate(files):
            text = source.read_text()
            if position > 0:
                assert not FEATURE_MACROS.search(text), f"{source}: a feature-test macro after the unit's first file"
            leaked = set(DEFINE.findall(text)) - set(UNDEF.findall(text))
            for later in files[position + 1 :]:
                words = set(re.findall(r"\w+", later.read_text()))
                assert not leaked & words, (
                    f"{source.name}'s macros {sorted(leaked & words)} reach {later} in unit {name}"
                )


def test_importing_the_package_loads_no_numpy():
    """`import sectorbench` (and so `python -m sectorbench` before the CLI sets its environment)
    loads no numpy: the CLI holds OpenBLAS to one thread before numpy's import, and a module
    reached from the package's __init__ that imported numpy undid that (deadlines.py, once)."""
    import subprocess

    code = "import sys, sectorbench; assert 'numpy' not in sys.modules, 'numpy loaded'"
    done = subprocess.run([sys.executable, "-c", code], capture_output=True, text=True)
    assert done.returncode == 0, done.stderr
