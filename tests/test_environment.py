"""Tests for sectorbench.native.environment (fast: no benchmarks, one real compiler call)."""

import copy
import getpass
import json
import os
import platform
import re
import shutil
import socket
import subprocess
import sys
from pathlib import Path

import pytest

from sectorbench.native import environment as environment_module
from sectorbench.native.environment import ISA_FLAGS, compare_fingerprints, compiler_fingerprint, machine_fingerprint

posix_only = pytest.mark.skipif(os.name != "posix", reason="fake compiler is a sh script")


def _appears(name: str, text: str) -> bool:
    """True if name occurs in text as a whole token (not inside a longer word).

    Token matching still catches names inside paths, FQDNs and user@host, but
    avoids false alarms for short names: host "vm" vs "kvm", user "al" vs "fall".
    """
    return re.search(rf"(?<![A-Za-z0-9]){re.escape(name)}(?![A-Za-z0-9])", text) is not None


# ---------------------------------------------------------------- machine


def test_machine_fingerprint_is_json_serialisable():
    fp = machine_fingerprint()
    assert json.loads(json.dumps(fp)) == fp


def test_machine_fingerprint_runs_no_compiler(monkeypatch):
    """Every result carries it, so it stays cheap: no compiler is asked (the compilers' own
    description is the build's). Checked by what it runs, not by a time a busy machine can exceed."""

    def no_compiler(*args, **kwargs):
        raise AssertionError(f"machine_fingerprint ran a compiler: {args}")

    monkeypatch.setattr(environment_module, "_run_cc", no_compiler)
    assert machine_fingerprint()["cpu"]


def test_cpu_section():
    cpu = machine_fingerprint()["cpu"]
    assert cpu["measured_mhz"] is None  # filled in by the caller
    assert cpu["logical_cores"] == os.cpu_count()
    assert cpu["isa"] == sorted(cpu["isa"])
    assert set(cpu["isa"]) <= set(ISA_FLAGS)
    if sys.platform.startswith("linux"):
        assert cpu["model_name"]
    if platform.machine() in ("x86_64", "AMD64") and sys.platform.startswith("linux"):
        assert "sse2" in cpu["isa"]  # baseline of every x86-64 CPU


@pytest.mark.parametrize(
    ("cgroup", "files", "expected"),
    [
        ("0::/ci/job\n", {"ci/cpu.max": "150000 100000", "cpu.max": "max 100000"}, 1.5),  # pure v2
        ("0::/job\n", {"unified/cpu.max": "50000 100000"}, 0.5),  # hybrid: v2 under unified/
        ("3:cpu,cpuacct:/a/b\n", {"cpu,cpuacct/a/cpu.cfs_quota_us": "20000", "cpu,cpuacct/a/b/cpu.cfs_quota_us": "-1",
                                   "cpu,cpuacct/a/cpu.cfs_period_us": "100000",
                                   "cpu,cpuacct/a/b/cpu.cfs_period_us": "100000"}, 0.2),
        ("1:cpu:/\n", {"cpu/cpu.cfs_quota_us": "-1", "cpu/cpu.cfs_period_us": "100000"}, None),  # no quota
        ("0::/\n", {"cpu.max": "max 100000"}, None),
    ],
)  # fmt: skip
def test_a_cgroups_cpu_quota_is_read_as_cpus(tmp_path, cgroup, files, expected):
    """The smallest quota over the process's cgroup and its ancestors (an ancestor's 0.2 CPUs
    binds a child group without a quota of its own)."""
    (tmp_path / "cgroup").write_text(cgroup)
    for name, text in files.items():
        (tmp_path / "fs" / name).parent.mkdir(parents=True, exist_ok=True)
        (tmp_path / "fs" / name).write_text(text + "\n")
    assert environment_module.cpu_quota_cores(tmp_path / "cgroup", tmp_path / "fs") == expected


def test_project_git_fields_are_consistent():
    git = machine_fingerprint()["sectorbench"]
    assert git["dirty"] in (True, False, None)
    if git["commit"] is not None:
        assert re.fullmatch(r"[0-9a-f]{40,64}", git["commit"])


def test_project_git_is_the_checkout_holding_the_package_whatever_git_dir_says(tmp_path, monkeypatch):
    """A hook's or a CI job's GIT_DIR names the user's project: its commit was recorded as
    sectorbench's own (`sectorbench.commit`), and its state as the package's `dirty`."""
    package_root = Path(environment_module.__file__).resolve().parent.parent.parent
    expected = machine_fingerprint()["sectorbench"]
    other = tmp_path / "other"
    other.mkdir()
    command = ["git", "-c", "user.email=t@e", "-c", "user.name=t"]
    subprocess.run([*command, "init", "-q"], cwd=other, check=True)
    subprocess.run([*command, "commit", "-q", "--allow-empty", "-m", "other"], cwd=other, check=True)
    monkeypatch.setenv("GIT_DIR", str(other / ".git"))
    assert machine_fingerprint()["sectorbench"] == expected
    if (package_root / ".git").exists():  # a checkout (the test suite's): its commit, not the other's
        assert expected["commit"] is not None


def test_a_checkout_git_will_not_read_says_why_its_commit_is_unknown(monkeypatch):
    """A CI container's checkout, owned by another uid (git's own test switch makes it so, for a
    real git): git refuses it, and the commit was null with nothing saying why.  It is not read
    anyway: trusting it is the user's call (safe.directory)."""
    package_root = Path(environment_module.__file__).resolve().parent.parent.parent
    if not (package_root / ".git").exists():
        pytest.skip("the package is not in a git checkout here")
    monkeypatch.setenv("GIT_TEST_ASSUME_DIFFERENT_OWNER", "1")
    git = machine_fingerprint()["sectorbench"]
    assert git["commit"] is None and git["dirty"] is None
    assert git["reason"].startswith("detected dubious ownership in repository at ")
    monkeypatch.delenv("GIT_TEST_ASSUME_DIFFERENT_OWNER")
    assert "reason" not in machine_fingerprint()["sectorbench"]


# ---------------------------------------------------------------- privacy


def test_no_host_or_user_names_in_fingerprints():
    fingerprints = [machine_fingerprint()]
    if shutil.which("cc"):
        fingerprints.append(compiler_fingerprint("cc"))
    text = json.dumps(fingerprints)
    names = {socket.gethostname(), os.uname().nodename, getpass.getuser()}
    for name in filter(None, names):
        assert not _appears(name, text), f"{name!r} leaked into the fingerprint"
    # For root the user name is a common word; what actually identifies the
    # account is its home directory, which must never appear either.
    home = os.path.expanduser("~")
    if home not in ("/", "~"):
        assert not _appears(home, text)


def _fake_compiler(directory, version: str, gcc_help: str = "", clang_dump: str = ""):
    """Write a sh script that answers --version, gcc's -Q query and clang's -###."""
    script = directory / "fakecc"
    script.write_text(
        "#!/bin/sh\n"
        'case "$*" in\n'
        f"  *--version*) printf '%s\\n' '{version}' 'InstalledDir: {directory}' ;;\n"
        f"  *--help=target*) [ -n '{gcc_help}' ] || exit 1; printf '{gcc_help}' ;;\n"
        f"  *-###*) [ -n '{clang_dump}' ] || exit 1; printf '%s\\n' '{clang_dump}' >&2 ;;\n"
        "  *) exit 1 ;;\n"
        "esac\n"
    )
    script.chmod(0o755)
    return str(script)


@posix_only
def test_compiler_under_home_is_shown_with_tilde(tmp_path, monkeypatch):
    bindir = tmp_path / "bin"
    bindir.mkdir()
    monkeypatch.setenv("HOME", str(tmp_path))
    cc = _fake_compiler(bindir, "fakecc 1.0", gcc_help="  -march=  \\t\\tfakearch\\n  -mavx2 \\t\\t[enabled]\\n")
    fp = compiler_fingerprint(cc)
    assert fp["path"] == "~/bin/fakecc"
    assert "InstalledDir: ~/bin" in fp["version_text"]
    assert str(tmp_path) not in json.dumps(fp)


# ---------------------------------------------------------------- compiler


@pytest.mark.skipif(shutil.which("cc") is None, reason="no cc on PATH")
def test_real_cc_has_version_and_march():
    fp = compiler_fingerprint("cc")
    assert fp["path"]
    assert fp["version_line"]
    assert fp["march_native"]["march"]
    assert json.loads(json.dumps(fp)) == fp


def test_missing_compiler_gives_error_entry():
    fp = compiler_fingerprint("no-such-cc-xyz")
    assert fp["path"] is None
    assert "no-such-cc-xyz" in fp["error"]


def test_compiler_fingerprint_is_cached_but_returns_copies():
    first = compiler_fingerprint("no-such-cc-xyz")
    first["path"] = "tampered"
    assert compiler_fingerprint("no-such-cc-xyz")["path"] is None


@posix_only
def test_gcc_style_march_native(tmp_path):
    help_text = (
        "The following options are target specific:\\n"
        "  -march=                     \\t\\tznver4\\n"
        "  -mavx512f                   \\t\\t[enabled]\\n"
        "  -mamx-tile                  \\t\\t[disabled]\\n"
        "  -msse4.1                    \\t\\t[enabled]\\n"
        "  Known valid arguments for -march= option:\\n"
        "    i386 i486 znver4\\n"
    )
    fp = compiler_fingerprint(_fake_compiler(tmp_path, "gcc (GCC) 13.2.0", gcc_help=help_text))
    assert fp["march_native"] == {"style": "gcc", "march": "znver4", "features": ["avx512f", "sse4.1"]}
    assert "error" not in fp


@posix_only
def test_clang_style_march_native(tmp_path):
    dump = (
        ' "/usr/bin/clang-18" "-cc1" "-triple" "x86_64-pc-linux-gnu"'
        ' "-target-cpu" "znver5" "-target-feature" "+avx512f"'
        ' "-target-feature" "-amx-tile" "-target-feature" "+avx2"'
    )
    fp = compiler_fingerprint(_fake_compiler(tmp_path, "clang version 18.1.8", clang_dump=dump))
    assert fp["version_line"] == "clang version 18.1.8"
    assert fp["march_native"] == {"style": "clang", "march": "znver5", "features": ["avx2", "avx512f"]}


@posix_only
def test_unknown_march_native_is_an_error_not_an_exception(tmp_path):
    fp = compiler_fingerprint(_fake_compiler(tmp_path, "weirdcc 0.1"))
    assert fp["version_line"] == "weirdcc 0.1"
    assert fp["march_native"] is None
    assert fp["error"]


# ---------------------------------------------------------------- comparison


@pytest.fixture
def environment():
    compiler = {
        "cc": "gcc",
        "path": "/usr/bin/gcc",
        "version_line": "gcc (Debian 12.2.0-14) 12.2.0",
        "version_text": "gcc (Debian 12.2.0-14) 12.2.0\nCopyright ...",
        "march_native": {"style": "gcc", "march": "znver3", "features": ["avx2", "avx512f"]},
    }
    return {"machine": machine_fingerprint(), "compiler": compiler}


def test_identical_fingerprints_have_no_warnings(environment):
    assert compare_fingerprints(environment, copy.deepcopy(environment)) == []


def test_changed_cpu_model_is_critical(environment):
    other = copy.deepcopy(environment)
    other["machine"]["cpu"]["model_name"] = "Some Other CPU"
    [warning] = compare_fingerprints(environment, other)
    assert warning.startswith("critical:") and "cpu.model_name" in warning


def test_changed_compiler_version_is_critical(environment):
    other = copy.deepcopy(environment)
    other["compiler"]["version_line"] = "gcc (GCC) 14.1.0"
    [warning] = compare_fingerprints(environment, other)
    assert warning.startswith("critical:") and "compiler.version_line" in warning


def test_changed_isa_lists_the_difference(environment):
    other = copy.deepcopy(environment)
    other["compiler"]["march_native"]["features"] = ["avx2"]
    [warning] = compare_fingerprints(environment, other)
    assert "only in a: avx512f" in warning


def test_volatile_fields_are_ignored(environment):
    other = copy.deepcopy(environment)
    other["machine"]["time_utc"] = "1999-01-01T00:00:00+00:00"
    other["machine"]["cpu"]["nominal_mhz"] = 1234.5
    other["machine"]["cpu"]["measured_mhz"] = 4321.0
    other["machine"]["sectorbench"] = {"commit": "0" * 40, "dirty": True}
    other["compiler"]["version_text"] = "something else"
    assert compare_fingerprints(environment, other) == []


def test_missing_field_warns_only_when_critical(environment):
    other = copy.deepcopy(environment)
    del other["machine"]["cpu"]["governor"]
    assert compare_fingerprints(environment, other) == []
    del other["machine"]["cpu"]["isa"]
    [warning] = compare_fingerprints(environment, other)
    assert warning.startswith("critical:") and "cpu.isa missing in b" in warning


def test_other_differences_are_notes_after_criticals(environment):
    other = copy.deepcopy(environment)
    other["machine"]["cpu"]["governor"] = "some-governor"
    other["machine"]["cpu"]["logical_cores"] = 999
    warnings = compare_fingerprints(environment, other)
    assert [w.split(":")[0] for w in warnings] == ["critical", "note"]
    assert "cpu.governor" in warnings[1]
