"""The tree is the architecture: no import cycle between its parts, and the harness never names a family."""

from __future__ import annotations

import ast
import io
import re
import tokenize
from pathlib import Path

ROOT = Path(__file__).resolve().parent.parent
PACKAGE = ROOT / "sectorbench"
FAMILIES = ("sector", "triangle", "aabr")
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
