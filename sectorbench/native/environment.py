"""Environment fingerprints stored with every result, so results compare honestly.

``machine_fingerprint()`` describes the CPU, OS, Python and this checkout;
``compiler_fingerprint(cc)`` describes one compiler and what ``-march=native``
means to it; ``compare_fingerprints(a, b)`` lists differences worth a warning.

Privacy: no host names, user names, IP addresses or home directories are
recorded. Paths and compiler output under the home directory show it as ``~``.

Field classes (dotted paths; a path matches wherever its components appear
contiguously, so the same lists work for a bare fingerprint or one nested in a
result file, e.g. ``environment.machine.cpu.isa``):

* Critical -- a difference means the numbers come from different hardware or
  different generated code: CPU vendor, model name, family/model/stepping,
  ISA list, logical cores, hypervisor, OS machine type, the compiler's
  ``--version`` first line and its ``-march=native`` expansion. A field present
  on only one side is also reported.
* Volatile -- expected to change between runs of the same setup, so never
  reported: time, nominal and measured MHz, and the clock measured each round
  (``cpu MHz`` in cpuinfo is often the current frequency, and the measured clock
  varies run to run), any load reading, the sectorbench
  commit and dirty flag and why the commit is unknown (code changes are tracked by the result itself), the
  Python version (the harness, not the timed kernel), click and rich (UI only),
  and the full ``--version`` text (its first line is already critical).
* Everything else (governor, boost, kernel release, numpy/cffi versions,
  container, compiler path, ...) is reported as a note when both sides have it
  and it differs, since it can affect timings but does not invalidate them.
"""

from __future__ import annotations

import copy
import functools
import importlib.metadata
import os
import platform
import re
import shutil
import subprocess
from datetime import UTC, datetime
from pathlib import Path

__all__ = [
    "CRITICAL_FIELDS",
    "ISA_FLAGS",
    "VOLATILE_FIELDS",
    "compare_fingerprints",
    "compiler_fingerprint",
    "machine_fingerprint",
]

# The x86 extensions that change which code paths compilers and kernels use.
ISA_FLAGS = (
    "sse2",
    "sse4_1",
    "avx",
    "avx2",
    "fma",
    "bmi2",
    "avx512f",
    "avx512dq",
    "avx512bw",
    "avx512vl",
    "avx512cd",
    "avx512vnni",
    "avx512_bf16",
    "avx512_fp16",
)
# Linux spells a few flags differently from the names used above.
_CPUINFO_ALIASES = {"avx512_vnni": "avx512vnni"}

CRITICAL_FIELDS = (
    "cpu.vendor",
    "cpu.model_name",
    "cpu.family",
    "cpu.model",
    "cpu.stepping",
    "cpu.isa",
    "cpu.logical_cores",
    "virtualization.hypervisor",
    "os.machine",
    "version_line",  # compiler fingerprint
    "march_native",  # compiler fingerprint
)
VOLATILE_FIELDS = (
    "time_utc",
    "cpu.nominal_mhz",
    "cpu.measured_mhz",
    "cpu.measured_mhz_per_round",  # the runner's clock reading of every round
    "cpu.clock_failure",  # why a round's reading is missing
    "load",  # a load average or per-round load reading, wherever one is recorded
    "sectorbench.commit",
    "sectorbench.dirty",
    "sectorbench.reason",  # why the commit is unknown
    "python.version",
    "packages.click",
    "packages.rich",
    "version_text",  # compiler fingerprint
)

_PACKAGES = ("numpy", "cffi", "click", "rich")
_CPU_SYSFS = Path("/sys/devices/system/cpu")


# --------------------------------------------------------------------------
# small helpers


#: What points git at a repository other than the one above the folder it runs in (the
#: location part of `git rev-parse --local-env-vars`).
GIT_REPOSITORY_VARIABLES = frozenset(
    {
        "GIT_DIR",
        "GIT_WORK_TREE",
        "GIT_COMMON_DIR",
        "GIT_INDEX_FILE",
        "GIT_OBJECT_DIRECTORY",
        "GIT_ALTERNATE_OBJECT_DIRECTORIES",
    }
)


def _run(args: list[str], timeout: float, cwd: str | None = None) -> subprocess.CompletedProcess:
    """Run a command capturing text output; raises OSError/TimeoutExpired."""
    # LC_ALL=C: gcc translates "[enabled]" and friends, which would break parsing.
    # GIT_OPTIONAL_LOCKS=0: keeps `git status` from rewriting the index (read-only).
    # Without the variables that point git at a repository: the checkout holding this package
    # is the one found from its folder (a hook's or a CI job's GIT_DIR named the user's
    # project, whose commit was recorded as sectorbench's).
    env = {name: value for name, value in os.environ.items() if name not in GIT_REPOSITORY_VARIABLES}
    env.update(LC_ALL="C", GIT_OPTIONAL_LOCKS="0")
    return subprocess.run(
        args,
        capture_output=True,
        text=True,
        errors="replace",
        timeout=timeout,
        cwd=cwd,
        env=env,
        stdin=subprocess.DEVNULL,
    )


def _run_cc(args: list[str], timeout: float) -> subprocess.CompletedProcess:
    """A compiler probe, through the build module (in its own process group, killed on interrupt)."""
    from .build import run_compiler

    return run_compiler(args, timeout, env=dict(os.environ, LC_ALL="C"))


def _tilde(text: str) -> str:
    """Replace the home directory with ``~`` wherever it appears in text."""
    home = os.path.expanduser("~").rstrip("/")
    if not home or home == "~":
        return text
    # Only whole path components: home=/root must not turn /rootfs into ~fs.
    return re.sub(re.escape(home) + r"(?![\w.-])", "~", text)


def _read_text(path: Path | str) -> str | None:
    try:
        return Path(path).read_text().strip()
    except OSError:
        return None


def _int_or_str(value: str | None) -> int | str | None:
    if value is None:
        return None
    return int(value) if value.isdigit() else value


# --------------------------------------------------------------------------
# machine


def _cpuinfo() -> dict[str, str]:
    """Key/value pairs of the first processor block of /proc/cpuinfo ({} elsewhere)."""
    text = _read_text("/proc/cpuinfo")
    if not text:
        return {}
    info: dict[str, str] = {}
    for line in text.split("\n\n", 1)[0].splitlines():
        key, sep, value = line.partition(":")
        if sep:
            info.setdefault(key.strip(), value.strip())
    return info


def _isa(info: dict[str, str]) -> list[str]:
    raw = info.get("flags", "").split()
    present = {_CPUINFO_ALIASES.get(flag, flag) for flag in raw}
    return sorted(present.intersection(ISA_FLAGS))


def _boost() -> bool | None:
    """True/False if turbo/boost state is readable, else None."""
    boost = _read_text(_CPU_SYSFS / "cpufreq/boost")
    if boost in ("0", "1"):
        return boost == "1"
    no_turbo = _read_text(_CPU_SYSFS / "intel_pstate/no_turbo")
    if no_turbo in ("0", "1"):
        return no_turbo == "0"
    return None


def _cpu(info: dict[str, str]) -> dict:
    mhz = info.get("cpu MHz")
    try:
        available = len(os.sched_getaffinity(0))
    except (AttributeError, OSError):  # not Linux
        available = None
    return {
        "vendor": info.get("vendor_id"),
        "model_name": info.get("model name") or platform.processor() or None,
        "family": _int_or_str(info.get("cpu family")),
        "model": _int_or_str(info.get("model")),
        "stepping": _int_or_str(info.get("stepping")),
        "isa": _isa(info),
        "logical_cores": os.cpu_count(),
        # Differs from logical_cores under taskset/cgroup CPU pinning.
        "available_cores": available,
        # CPU time a period this process's cgroup may use, in CPUs (docker --cpus, a CI runner's
        # limit); None: no quota.  Pinning leaves the cores, a quota makes a loop wait.
        "quota_cores": cpu_quota_cores(),
        "nominal_mhz": round(float(mhz), 1) if mhz else None,
        "measured_mhz": None,  # filled in by the caller (measured in C)
        "governor": _read_text(_CPU_SYSFS / "cpu0/cpufreq/scaling_governor"),
        "boost": _boost(),
        "caches": cpu_caches(),
    }


def cpu_quota_cores(proc_cgroup: str = "/proc/self/cgroup", root: Path | str = "/sys/fs/cgroup") -> float | None:
    """The smallest CPU quota over this process's cgroup and its ancestors, in CPUs (cgroup v2
    cpu.max "quota period", v1 cpu.cfs_quota_us / cpu.cfs_period_us); None where there is none
    or it cannot be read (not Linux)."""
    text = _read_text(proc_cgroup)
    if not text:
        return None
    quotas = []
    for line in text.splitlines():
        parts = line.split(":", 2)
        if len(parts) != 3:
            continue
        _, controllers, path = parts
        if controllers == "":  # v2: one hierarchy, at root (pure v2) or root/unified (hybrid)
            places = [Path(root) / "unified", Path(root)]
        elif "cpu" in controllers.split(","):
            places = [Path(root) / controllers, Path(root) / "cpu"]
        else:
            continue
        steps = Path(path.lstrip("/")).parts
        for place in places:  # the group and each ancestor up to the hierarchy's root
            groups = (place.joinpath(*steps[:depth]) for depth in range(len(steps), -1, -1))
            quotas += [q for group in groups if (q := _group_quota(group, v2=controllers == "")) is not None]
    return round(min(quotas), 3) if quotas else None


def _group_quota(group: Path, v2: bool) -> float | None:
    """One cgroup's CPU quota in CPUs (v2 cpu.max, v1 cpu.cfs_quota_us / cpu.cfs_period_us);
    None where it has none ("max", -1) or none can be read."""
    if v2:
        quota, _, period = (_read_text(group / "cpu.max") or "").partition(" ")
    else:
        quota, period = _read_text(group / "cpu.cfs_quota_us"), _read_text(group / "cpu.cfs_period_us")
    if quota and period and quota.isdigit() and period.isdigit() and int(period) > 0:
        return int(quota) / int(period)
    return None


def _cache_size_bytes(text: str | None) -> int | None:
    """sysfs's cache size ("32K", "512K", "32768K", "1M") in bytes."""
    m = re.fullmatch(r"(\d+)\s*([KMG]?)", text or "")
    return int(m.group(1)) * {"": 1, "K": 2**10, "M": 2**20, "G": 2**30}[m.group(2)] if m else None


@functools.cache
def _cpu_caches(root: str) -> tuple:
    caches = []
    for index in sorted(Path(root).glob("index*")):
        level, kind = _read_text(index / "level"), _read_text(index / "type")
        size = _cache_size_bytes(_read_text(index / "size"))
        if level and level.isdigit() and kind and size:
            caches.append((int(level), kind, size))
    return tuple(caches)


def cpu_caches(root: Path | str = _CPU_SYSFS / "cpu0/cache") -> list[dict]:
    """CPU 0's caches from sysfs, innermost first: [{"level": 1, "type": "Data", "size_bytes": 32768}, ...];
    [] where sysfs does not say (not Linux, some containers).  What measure/validity compares a
    loop's working set with."""
    return [{"level": level, "type": kind, "size_bytes": size} for level, kind, size in _cpu_caches(str(root))]


def _detect_virt(kind: str) -> str | None:
    """systemd-detect-virt --vm/--container output, None if absent or "none"."""
    if shutil.which("systemd-detect-virt") is None:
        return None
    try:
        out = _run(["systemd-detect-virt", f"--{kind}"], timeout=1.0).stdout.strip()
    except (OSError, subprocess.SubprocessError):
        return None
    return out if out and out != "none" else None


def _virtualization(info: dict[str, str]) -> dict:
    hypervisor = _detect_virt("vm") or _read_text("/sys/hypervisor/type")
    if hypervisor is None and "hypervisor" in info.get("flags", "").split():
        hypervisor = "unknown"  # the CPU says we are a guest, but not under what
    return {"hypervisor": hypervisor, "container": _detect_virt("container")}


def _package_version(name: str) -> str | None:
    try:
        return importlib.metadata.version(name)
    except importlib.metadata.PackageNotFoundError:
        return None


def _project_git() -> dict:
    """Commit and dirty flag of the checkout holding this package (nulls if none), and, where
    the commit is null, why (`reason`): a CI container's checkout owned by another user, which
    git refuses to read ("detected dubious ownership"), gave a null commit that said nothing
    of it.  Such a repository is not read anyway: trusting it is the user's call
    (safe.directory), not sectorbench's."""
    root = Path(__file__).resolve().parent.parent.parent
    # An installed copy may sit inside some unrelated repository (e.g. a venv
    # in another project); its commit would be misleading.
    if {"site-packages", "dist-packages"} & set(root.parts):
        return {"commit": None, "dirty": None, "reason": "an installed package, not a checkout"}
    try:
        head = _run(["git", "rev-parse", "HEAD"], timeout=2.0, cwd=str(root))
        status = _run(["git", "status", "--porcelain"], timeout=5.0, cwd=str(root))
    except (OSError, subprocess.SubprocessError) as exc:
        return {"commit": None, "dirty": None, "reason": _tilde(f"git did not run: {exc}")}
    if status.returncode != 0:  # not a checkout (or git refuses to read it)
        return {"commit": None, "dirty": None, "reason": _git_refusal(status.stderr)}
    # A fresh repository has no HEAD yet but can still be dirty.
    commit = head.stdout.strip() if head.returncode == 0 else None
    found = {"commit": commit, "dirty": bool(status.stdout.strip())}
    return found if commit is not None else {**found, "reason": "the repository has no commit yet"}


def _git_refusal(said: str) -> str:
    """git's first line, without its "fatal: " and with the home directory as ~ ("not a git
    repository ...", "detected dubious ownership in repository at '~/proj'"): the lines after it
    are advice, and newer gits name the repository's owner and the current user there."""
    first = next((line.strip() for line in said.splitlines() if line.strip()), "")
    return _tilde(first.removeprefix("fatal: ")) or "git status failed and said nothing"


def machine_fingerprint() -> dict:
    """Describe this machine, OS, Python and checkout (JSON-serialisable, cheap)."""
    info = _cpuinfo()
    return {
        "time_utc": datetime.now(UTC).isoformat(timespec="seconds"),
        "cpu": _cpu(info),
        "virtualization": _virtualization(info),
        "os": {
            "system": platform.system(),
            "release": platform.release(),
            "machine": platform.machine(),
        },
        "python": {
            "implementation": platform.python_implementation(),
            "version": platform.python_version(),
        },
        "packages": {name: _package_version(name) for name in _PACKAGES},
        "sectorbench": _project_git(),
    }


# --------------------------------------------------------------------------
# compiler

#: Flags that let the compiler use every instruction of the host: their code is what
#: ``march_native`` says, which differs from host to host.
NATIVE_FLAGS = ("-march=native", "-mcpu=native", "-mtune=native")


def uses_native(flags) -> bool:
    """Whether a build's flags (words) make its code the host's (NATIVE_FLAGS)."""
    return any(flag in NATIVE_FLAGS for flag in flags)


def _gcc_march_native(cc: str) -> dict | None:
    """gcc: read the resolved -march= and the enabled -m options from -Q."""
    proc = _run_cc([cc, "-march=native", "-Q", "--help=target"], timeout=30.0)
    march = re.search(r"^\s+-march=\s+(\S+)\s*$", proc.stdout, re.MULTILINE)
    if proc.returncode != 0 or not march:
        return None
    enabled = re.findall(r"^\s+-m(\S+?)\s+\[enabled\]\s*$", proc.stdout, re.MULTILINE)
    return {"style": "gcc", "march": march.group(1), "features": sorted(enabled)}


def _clang_march_native(cc: str) -> dict | None:
    """clang: read -target-cpu and +features from the -### driver dump."""
    proc = _run_cc([cc, "-march=native", "-###", "-x", "c", "/dev/null", "-c", "-o", "/dev/null"], timeout=30.0)
    cpu = re.search(r'"-target-cpu"\s+"([^"]+)"', proc.stderr)
    if proc.returncode != 0 or not cpu:
        return None
    enabled = re.findall(r'"-target-feature"\s+"\+([^"]+)"', proc.stderr)
    return {"style": "clang", "march": cpu.group(1), "features": sorted(set(enabled))}


@functools.cache
def _compiler_fingerprint(cc: str) -> dict:
    shown_cc = _tilde(cc)
    path = shutil.which(cc)
    if path is None:
        return {"cc": shown_cc, "path": None, "error": f"compiler not found: {shown_cc}"}
    try:
        version = _run_cc([path, "--version"], timeout=10.0)
    except (OSError, subprocess.SubprocessError) as exc:
        return {"cc": shown_cc, "path": None, "error": f"{shown_cc} --version failed: {exc}"}
    text = _tilde(version.stdout.strip())
    if version.returncode != 0 or not text:
        return {"cc": shown_cc, "path": None, "error": f"{shown_cc} --version failed (exit {version.returncode})"}

    result = {
        "cc": shown_cc,
        "path": _tilde(path),
        "version_line": text.splitlines()[0],
        "version_text": text,
        "march_native": None,
    }
    # Try the likely dialect first, then the other one (icx, wrappers, ...).
    probes = [_gcc_march_native, _clang_march_native]
    if "clang" in text.lower():
        probes.reverse()
    for probe in probes:
        try:
            result["march_native"] = probe(path)
        except (OSError, subprocess.SubprocessError):
            continue
        if result["march_native"]:
            break
    else:
        result["error"] = "could not determine what -march=native expands to"
    return result


def compiler_fingerprint(cc: str) -> dict:
    """Describe compiler ``cc`` (path, --version, -march=native expansion); never raises.

    ``path`` is None (and ``error`` set) when the compiler is unusable; ``error``
    alone with ``march_native`` None means only the -march=native probe failed.
    Cached per ``cc`` for the life of the process, since it runs the compiler.
    """
    # Copy so callers can annotate their dict without corrupting the cache.
    return copy.deepcopy(_compiler_fingerprint(cc))


# --------------------------------------------------------------------------
# comparison


def _leaves(tree: dict, prefix: str = ""):
    """Yield (dotted path, value) for every non-dict value in a nested dict."""
    for key, value in tree.items():
        path = f"{prefix}{key}"
        if isinstance(value, dict) and value:
            yield from _leaves(value, path + ".")
        else:
            yield path, value


def _matches(path: str, fields: tuple[str, ...]) -> bool:
    parts = path.split(".")
    for field in fields:
        want = field.split(".")
        if any(parts[i : i + len(want)] == want for i in range(len(parts) - len(want) + 1)):
            return True
    return False


def _describe(a, b) -> str:
    if isinstance(a, list) and isinstance(b, list):
        only_a = ", ".join(str(x) for x in a if x not in b) or "-"
        only_b = ", ".join(str(x) for x in b if x not in a) or "-"
        return f"only in a: {only_a}; only in b: {only_b}"
    return f"{a!r} vs {b!r}"


def compare_fingerprints(a: dict, b: dict) -> list[str]:
    """One-line warnings for differences between fingerprints a and b.

    Critical differences (``critical: ...``) come first, then notes
    (``note: ...``); volatile fields are ignored. See the module docstring.
    """
    left, right = dict(_leaves(a)), dict(_leaves(b))
    critical: list[str] = []
    notes: list[str] = []
    for path in [*left, *(p for p in right if p not in left)]:
        if _matches(path, VOLATILE_FIELDS):
            continue
        is_critical = _matches(path, CRITICAL_FIELDS)
        if path not in right or path not in left:
            if is_critical:
                side, value = ("b", left[path]) if path in left else ("a", right[path])
                critical.append(f"critical: {path} missing in {side} (other side: {value!r})")
        elif left[path] != right[path]:
            line = f"{path} differs: {_describe(left[path], right[path])}"
            (critical if is_critical else notes).append(("critical: " if is_critical else "note: ") + line)
    return critical + notes
