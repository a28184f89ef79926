"""Capture run/verify/compare --json from two sectorbench checkouts on fixed seeds and
compare the documents field by field, timings aside.

Usage: python tools/capture_compare.py BEFORE AFTER [--out DIR] [--only NAME] [--reuse] [--report FILE]

BEFORE and AFTER are checkouts (git worktrees) of sectorbench.  Each command below runs
once in each, one at a time, with PYTHONPATH set to the checkout and a private build cache
per side ($SECTORBENCH_CACHE = --cache-root-<label>).  An editable install of sectorbench in
the interpreter's environment would otherwise lend its kernels_c/ to a checkout that lacks
sectorbench/kernels_c (setuptools' _EditableFinder answers `sectorbench.kernels_c`): a
sitecustomize.py on PYTHONPATH takes that finder out of sys.meta_path, and each side is
checked to import its package and read its C sources from its own checkout before any run.

An option a side's `--help` does not list, or a value outside its listed choices, skips
the command on that side (reported, not guessed at).  Compared: every JSON field; a field
whose name has a part (split at '_') in IGNORED_PARTS, or is in IGNORED_NAMES (timings,
values derived from them, the machine), is compared for presence only.  Lists of rows
(dicts with a "kernel") are matched by the row's identity (ROW_KEYS), not by position.
Prose fields (PROSE_NAMES: warnings, notes) are compared with every number replaced by '#'
since their numbers are measured; which notes a row gets can still depend on the timings.

Printed per command: exit codes, the REQUIRED fields missing from any row, identical fields,
fields only in BEFORE (a removed or renamed field: a finding), fields only in AFTER
(additions), differing values, differing prose, and an outcome: identical, additions only,
prose differs (values equal), differences (a value, a removed field or the exit code), or
not compared (a side could not run it).
"""

from __future__ import annotations

import argparse
import json
import os
import re
import subprocess
import sys
import tempfile
from dataclasses import dataclass
from pathlib import Path

#: Each capture: a name and the CLI arguments, "{json}" standing for the output file.  Old
#: spellings (-n/--sectors) are used: the new CLI keeps them as aliases.
CAPTURES: list[tuple[str, list[str]]] = [
    # N x M = 500,000 <= 2^19: the newer run counts the exact oracle's hits (exact_count).
    (
        "run-uniform",
        "run --scene uniform -n 100 -m 5000 --seed 7 --flags -O2 --kernels naive,basic,sse2,avx2 "
        "--repeat 3 --json {json}".split(),
    ),
    (
        "run-triangles",
        "run --scene triangles -n 100 -m 5000 --seed 7 --flags -O2 --kernels orient,recast_cross,recast_dot "
        "--repeat 3 --json {json}".split(),
    ),
    (
        "run-polygons",
        "run --scene polygons -n 50 -m 200 --seed 7 --flags -O2 --kernels scan,scan_avx2,hill,bcs_search "
        "--repeat 3 --json {json}".split(),
    ),
    # N x M = 1,000,000: no exact count; a broadphase row (index_build_s, candidates, narrow_phase).
    (
        "run-game-broadphase",
        "run --scene game -n 200 -m 5000 --seed 7 --flags -O2 --kernels basic,avx2 --broadphase none "
        "--broadphase grid --repeat 3 --json {json}".split(),
    ),
    (
        "verify-sector",
        "verify --family sector --kernels naive,basic,cross,lut,sse2,avx2,avx512_nosqrt --flags -O2 "
        "--cases 2000 --seed 3 --json {json}".split(),
    ),
    (
        "verify-triangle",
        "verify --family triangle --kernels orient,recast_cross,recast_dot --flags -O2 --cases 2000 "
        "--seed 3 --json {json}".split(),
    ),
    (
        "verify-aabr",
        "verify --family aabr --kernels scan,scan_avx2,hill,bcs_search --flags -O2 --cases 2000 "
        "--seed 3 --json {json}".split(),
    ),
    (
        "compare",
        [
            *"compare -n 200 -m 5000 --seed 7 --kernels naive,sse2 --flags -O2".split(),
            "--flags",
            "-O2 -ffast-math",
            *"--repeat 3 --json {json}".split(),
        ],
    ),
]

#: A field whose name has one of these parts (split at '_') is a timing or the machine's.
IGNORED_PARTS = {"s", "ns", "ms", "mhz", "cycles", "times", "samples", "spread", "created", "utc"}
#: Whole names set aside: the machine, and values derived from times alone.
IGNORED_NAMES = {"env", "machine", "fingerprint", "speedup", "calls", "ipc", "instructions_per_test"}
#: Prose whose numbers are measured: compared with the numbers masked.
PROSE_NAMES = {"warnings", "notes", "validity", "note"}
#: Fields every row must keep (the issue's list for run/compare, verify's per-kernel verdict).
REQUIRED = {
    "results": ("kernel", "status", "hits", "tests", "median_s", "net_s", "overhead_s", "flags", "index_build_s"),
    "kernels": ("kernel", "flags", "cc", "status", "cases", "mismatches", "verdict"),
}
#: What identifies a row of a results or kernels list.
ROW_KEYS = ("kernel", "flags", "cc", "mode", "threads", "broadphase", "side")

SITECUSTOMIZE = """\
import sys

sys.meta_path[:] = [f for f in sys.meta_path if getattr(f, "__name__", "") != "_EditableFinder"]
"""

CHECK_IMPORT = """\
import importlib, json, sectorbench
kernels = None
for name in ("sectorbench.native.build", "sectorbench.build"):
    try:
        kernels = str(importlib.import_module(name).KERNELS_DIR)
        break
    except ImportError:
        continue
print(json.dumps({"package": sectorbench.__file__, "kernels_c": kernels}))
"""

#: Options whose value may start with '-' (compiler flags).
VALUED = {"--flags"}

NUMBER = re.compile(r"[-+]?\d+(?:[.,]\d+)*(?:[eE][-+]?\d+)?")


@dataclass
class Side:
    label: str
    checkout: Path
    env: dict[str, str]
    folder: Path  # captures and the working directory of every command (never a checkout)
    commit: str = ""
    dirty: bool = False


def git(checkout: Path, *args: str) -> str:
    return subprocess.run(["git", "-C", str(checkout), *args], capture_output=True, text=True, check=True).stdout


def make_side(label: str, checkout: Path, site: Path, cache: Path, out: Path) -> Side:
    env = dict(os.environ)
    env.update(
        PYTHONPATH=f"{site}{os.pathsep}{checkout}",
        SECTORBENCH_CACHE=str(cache),
        COLUMNS="120",
        NO_COLOR="1",
    )
    env.pop("SECTORBENCH_FAMILIES", None)
    side = Side(label, checkout, env, out / label)
    side.folder.mkdir(parents=True, exist_ok=True)
    side.commit = git(checkout, "rev-parse", "HEAD").strip()
    side.dirty = bool(git(checkout, "status", "--porcelain", "--untracked-files=no").strip())
    return side


def check_imports(side: Side, python: str) -> dict:
    out = subprocess.run(
        [python, "-c", CHECK_IMPORT], env=side.env, cwd=side.folder, capture_output=True, text=True, check=True
    )
    where = json.loads(out.stdout)
    root = side.checkout.resolve()
    for what, path in where.items():
        if path is None or not Path(path).resolve().is_relative_to(root):
            raise SystemExit(f"{side.label}: {what} is {path}, not under {root}")
    return where


def help_text(side: Side, python: str, command: str, cache: dict) -> str:
    if command not in cache:
        out = subprocess.run(
            [python, "-m", "sectorbench", command, "--help"],
            env={**side.env, "COLUMNS": "400"},  # one option a line: its choices unwrapped
            cwd=side.folder,
            capture_output=True,
            text=True,
        )
        cache[command] = out.stdout
    return cache[command]


def unsupported(argv: list[str], text: str) -> list[str]:
    """The options of argv that this side's --help does not list, and values outside an
    option's listed choices ("--scene polygons" where --scene is [uniform|game|...])."""
    missing = []
    for index, option in enumerate(argv):
        if not option.startswith("-") or (index and argv[index - 1] in VALUED):
            continue
        # the option's own line: "  -n, --shapes, --sectors INTEGER  ..." (not a mention in a help text)
        listed = re.search(rf"^\s*(?:--?[\w-]+,\s*)*{re.escape(option)}(?![\w-])[^\n]*", text, re.M)
        if not listed:
            missing.append(option)
            continue
        choices = re.search(r"\[([\w-]+(?:\|[\w-]+)+)\]", listed.group(0))
        value = argv[index + 1] if index + 1 < len(argv) else None
        if choices and value is not None and value not in choices.group(1).split("|"):
            missing.append(f"{option} {value}")
    return missing


def capture(side: Side, python: str, name: str, argv: list[str], reuse: bool, helps: dict) -> dict:
    folder = side.folder
    path = folder / f"{name}.json"
    meta_path = folder / f"{name}.meta.json"
    if reuse and meta_path.exists():
        return json.loads(meta_path.read_text())
    missing = unsupported(argv, help_text(side, python, argv[0], helps))
    args = [a.replace("{json}", str(path)) for a in argv]
    meta = {"argv": ["sectorbench", *argv], "missing_options": missing, "rc": None, "json": None}
    if not missing:
        path.unlink(missing_ok=True)
        with open(folder / f"{name}.stdout", "w") as so, open(folder / f"{name}.stderr", "w") as se:
            proc = subprocess.run(
                [python, "-m", "sectorbench", *args], env=side.env, cwd=folder, stdout=so, stderr=se, timeout=1800
            )
        meta["rc"] = proc.returncode
        meta["json"] = str(path) if path.exists() else None
    meta_path.write_text(json.dumps(meta, indent=1))
    return meta


# ---------------------------------------------------------------------------- comparison


def ignored(name: str) -> bool:
    low = name.lower()
    return low in IGNORED_NAMES or bool(IGNORED_PARTS & set(low.split("_")))


def row_id(row: dict) -> str:
    return "[" + ",".join(f"{k}={row[k]}" for k in ROW_KEYS if k in row and row[k] is not None) + "]"


def is_rows(value) -> bool:
    return isinstance(value, list) and bool(value) and all(isinstance(v, dict) and "kernel" in v for v in value)


def flatten(value, path: str, into: dict, order: dict) -> None:
    """Leaves of a JSON document by path; rows keyed by identity, their order kept apart.

    A field set aside (timings, the machine) is a leaf ("aside", None): its presence is
    compared, its value and what it holds are not.
    """
    if isinstance(value, dict) and value:
        for key, item in value.items():
            if ignored(key):
                into[f"{path}.{key}".lstrip(".")] = ("aside", None)
            else:
                flatten(item, f"{path}.{key}", into, order)
    elif is_rows(value):
        ids = [row_id(row) for row in value]
        order[path.lstrip(".")] = ids
        for ident, row in zip(ids, value):
            flatten(row, f"{path}{ident}", into, order)
    elif isinstance(value, list) and any(isinstance(v, dict | list) for v in value):
        for index, item in enumerate(value):
            flatten(item, f"{path}[{index}]", into, order)
    else:
        leaf = path.rsplit(".", 1)[-1].split("[", 1)[0]
        into[path.lstrip(".")] = ("masked", mask(value)) if leaf in PROSE_NAMES else ("exact", value)


def missing_required(doc: dict) -> list[str]:
    """REQUIRED fields absent from a row of results (run, compare) or kernels (verify)."""
    missing = []
    for key, names in REQUIRED.items():
        rows = doc.get(key)
        if rows is None:
            continue
        for row in rows:
            missing += [f"{key}{row_id(row)}.{n}" for n in names if n not in row]
    if "results" not in doc and "kernels" not in doc:
        missing.append("results or kernels")
    return missing


def mask(value):
    if isinstance(value, str):
        return NUMBER.sub("#", value)
    if isinstance(value, list):
        return [mask(v) for v in value]
    return value


def generic(path: str) -> str:
    """A path with its row identities replaced by [*], to group a field over rows."""
    return re.sub(r"\[[^\]]*=[^\]]*\]", "[*]", path)


def compare_docs(before: dict, after: dict) -> dict:
    fb, fa, ob, oa = {}, {}, {}, {}
    flatten(before, "", fb, ob)
    flatten(after, "", fa, oa)
    both = fb.keys() & fa.keys()
    aside = sorted(p for p in both if "aside" in (fb[p][0], fa[p][0]))
    same = sorted(p for p in both if fb[p] == fa[p] and fb[p][0] != "aside")
    differ = sorted(p for p in both if fb[p] != fa[p] and "aside" not in (fb[p][0], fa[p][0]))
    only_b = sorted(fb.keys() - fa.keys())
    only_a = sorted(fa.keys() - fb.keys())
    rows_b = {f"{k}{r}" for k, ids in ob.items() for r in ids}
    rows_a = {f"{k}{r}" for k, ids in oa.items() for r in ids}
    return {
        "after_values": {p: fa[p][1] for p in fa.keys() - fb.keys() if "[" not in p},
        "rows_only_before": sorted(rows_b - rows_a),
        "rows_only_after": sorted(rows_a - rows_b),
        "identical": same,
        "masked_equal": [p for p in same if fb[p][0] == "masked"],
        "only_before": only_b,
        "only_after": only_a,
        "differ": [{"path": p, "before": fb[p][1], "after": fa[p][1]} for p in differ if fb[p][0] == "exact"],
        "differ_prose": [{"path": p, "before": fb[p][1], "after": fa[p][1]} for p in differ if fb[p][0] != "exact"],
        "aside": aside,
        "required_missing": {"before": missing_required(before), "after": missing_required(after)},
        "row_order": {
            k: {"before": ob.get(k), "after": oa.get(k)}
            for k in sorted(ob.keys() | oa.keys())
            if ob.get(k) != oa.get(k)
        },
    }


def grouped(paths: list[str]) -> list[str]:
    counts: dict[str, int] = {}
    for p in paths:
        counts[generic(p)] = counts.get(generic(p), 0) + 1
    return [f"{g}" + (f"  (x{n})" if n > 1 else "") for g, n in counts.items()]


def short(value, width: int = 100) -> str:
    text = json.dumps(value, ensure_ascii=False)
    return text if len(text) <= width else text[: width - 3] + "..."


def report(name: str, mb: dict, ma: dict) -> dict:
    print(f"\n=== {name}: {' '.join(mb['argv'])}")
    result = {"command": mb["argv"], "rc_before": mb["rc"], "rc_after": ma["rc"]}
    for label, meta in (("BEFORE", mb), ("AFTER", ma)):
        if meta["missing_options"]:
            print(f"  {label} does not support {', '.join(meta['missing_options'])}: not run")
    ran = mb["rc"] is not None and ma["rc"] is not None
    print(
        f"  exit code: before {mb['rc']}, after {ma['rc']}" + ("  << DIFFERS" if ran and mb["rc"] != ma["rc"] else "")
    )
    if not (mb["json"] and ma["json"]):
        print("  no JSON on " + " and ".join(lb for lb, m in (("BEFORE", mb), ("AFTER", ma)) if not m["json"]))
        result["outcome"] = "not compared"
        return result
    diff = compare_docs(json.loads(Path(mb["json"]).read_text()), json.loads(Path(ma["json"]).read_text()))
    result.update(diff)
    print(
        f"  identical fields: {len(diff['identical'])} ({len(diff['masked_equal'])} prose equal with numbers masked); "
        f"on both sides but set aside (timings, machine): {len(diff['aside'])}"
    )
    for label, missing in diff["required_missing"].items():
        print(f"  required fields missing in {label.upper()}: {', '.join(missing) if missing else 'none'}")
    for label, key in (("BEFORE", "rows_only_before"), ("AFTER", "rows_only_after")):
        if diff[key]:
            print(f"  rows only in {label}: {', '.join(diff[key])}")
    print(f"  only in BEFORE ({len(diff['only_before'])}):")
    for line in grouped(diff["only_before"]):
        print(f"    - {line}")
    print(f"  only in AFTER ({len(diff['only_after'])}):")
    for line in grouped(diff["only_after"]):
        print(f"    + {line}" + (f" = {short(diff['after_values'][line])}" if line in diff["after_values"] else ""))
    print(f"  differing values ({len(diff['differ'])}):")
    for d in diff["differ"]:
        print(f"    ~ {d['path']}: {short(d['before'])} -> {short(d['after'])}")
    print(f"  differing prose, numbers masked ({len(diff['differ_prose'])}):")
    for d in diff["differ_prose"]:
        print(f"    ~ {d['path']}: {short(d['before'], 200)} -> {short(d['after'], 200)}")
    for key, orders in diff["row_order"].items():
        if orders["before"] and orders["after"] and sorted(orders["before"]) == sorted(orders["after"]):
            print(f"  row order of {key} differs: {orders['before']} -> {orders['after']}")
    if diff["only_before"] or diff["differ"] or mb["rc"] != ma["rc"]:
        result["outcome"] = "differences"
    elif diff["differ_prose"]:
        result["outcome"] = "prose differs"
    else:
        result["outcome"] = "additions only" if diff["only_after"] else "identical"
    print(f"  outcome: {result['outcome']}")
    return result


def main() -> int:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("before", type=Path)
    parser.add_argument("after", type=Path)
    parser.add_argument("--python", default=sys.executable, help="interpreter with click, numpy, rich, cffi")
    parser.add_argument("--out", type=Path, help="captures folder [default: a new temporary folder]")
    parser.add_argument("--cache-root", default="/tmp/cap-cache", help="build caches: <root>-before, <root>-after")
    parser.add_argument("--only", action="append", help="capture names to run (repeatable) [default: all]")
    parser.add_argument("--reuse", action="store_true", help="compare captures already in --out, run the missing")
    parser.add_argument("--report", type=Path, help="also write the comparison as JSON here")
    args = parser.parse_args()

    out = args.out or Path(tempfile.mkdtemp(prefix="sb-captures-"))
    site = out / "site"
    site.mkdir(parents=True, exist_ok=True)
    (site / "sitecustomize.py").write_text(SITECUSTOMIZE)
    sides = [
        make_side(label, path.resolve(), site, Path(f"{args.cache_root}-{label}"), out)
        for label, path in (("before", args.before), ("after", args.after))
    ]
    summary = {"out": str(out), "sides": {}, "captures": {}}
    for side in sides:
        where = check_imports(side, args.python)
        summary["sides"][side.label] = {"checkout": str(side.checkout), "commit": side.commit, "dirty": side.dirty}
        summary["sides"][side.label].update(where)
        dirty = " (dirty)" if side.dirty else ""
        print(f"{side.label}: {side.commit}{dirty}  {where['package']}  {where['kernels_c']}")
    print(f"captures in {out}")

    helps: dict[str, dict] = {side.label: {} for side in sides}
    for name, argv in CAPTURES:
        if args.only and name not in args.only:
            continue
        metas = [capture(side, args.python, name, argv, args.reuse, helps[side.label]) for side in sides]
        summary["captures"][name] = report(name, *metas)

    print("\n=== summary")
    for name, result in summary["captures"].items():
        print(
            f"  {name:22s} {result['outcome']:15s} rc {result['rc_before']}/{result['rc_after']}  "
            f"same {len(result.get('identical', []))}, only-before {len(result.get('only_before', []))}, "
            f"only-after {len(result.get('only_after', []))}, differ {len(result.get('differ', []))}, "
            f"prose {len(result.get('differ_prose', []))}"
        )
    if args.report:
        args.report.write_text(json.dumps(summary, indent=1, default=str))
    return 0


if __name__ == "__main__":
    sys.exit(main())
