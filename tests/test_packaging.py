"""What the wheel carries: every package of the source tree and the C sources (tools/wheel-check.sh installs it)."""

from __future__ import annotations

import tomllib
from pathlib import Path

from sectorbench.native import build

ROOT = Path(__file__).resolve().parent.parent


def test_every_package_is_listed_for_the_wheel():
    listed = set(tomllib.loads((ROOT / "pyproject.toml").read_text())["tool"]["setuptools"]["packages"])
    on_disk = {".".join(init.parent.relative_to(ROOT).parts) for init in (ROOT / "sectorbench").rglob("__init__.py")}
    c_folders = {"sectorbench.kernels_c"} | {
        ".".join(("sectorbench", *folder.relative_to(ROOT).parts))
        for folder in (ROOT / "kernels_c").rglob("*")
        if folder.is_dir() and any(folder.glob("*.[ch]"))
    }
    missing, stale = sorted((on_disk | c_folders) - listed), sorted(listed - (on_disk | c_folders))
    assert not missing and not stale, f"pyproject.toml's packages: add {missing}, remove {stale}"


def test_extending_md_says_a_builtin_family_lists_its_folders_for_the_wheel():
    # A built-in family's kernels_c/<name>/ must be listed above, which "Add a family" did not say:
    # a contributor following it to the letter (module, C folder, BUILTIN line) failed the test above.
    text = (ROOT / "docs" / "extending.md").read_text()
    section = text[text.index("## Add a family") :]
    assert "kernels_c/<name>/" in section and "`pyproject.toml`'s `packages`" in section


def test_the_c_sources_are_found_as_package_data():
    assert (build.KERNELS_DIR / "harness" / "sb_abi.h").is_file()
    assert (build.KERNELS_DIR / "harness" / "registry.c").is_file()
    assert build.KERNELS_DIR.samefile(ROOT / "kernels_c")  # the development install reads the checkout's files
