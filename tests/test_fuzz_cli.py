"""Every subcommand against a table of bad inputs: exit 2, exactly one line on stderr, nothing
on stdout, no traceback, and nothing written where it runs (files, FIFOs and modes unchanged).

The table runs in one directory holding the files the inputs name (a FIFO, a regular file in
the way of a directory, damaged case files, saved results); each row is checked against a
snapshot of it.  Most rows fail while parsing or checking options; the few that need a build
reuse the session's -O2 build.
"""

from __future__ import annotations

import io
import json
import os
import zipfile
from pathlib import Path

import numpy as np
import pytest
from click.testing import CliRunner

from sectorbench.cli import main
from sectorbench.native.build import BuildConfig, build

DATA = Path(__file__).parent / "data"
TINY = ["-n", "20", "-m", "500", "--repeat", "2", "--min-time", "0.001", "--flags", "-O2"]
SECTOR = ("cx", "cy", "ux", "uy", "r2", "cos_theta", "px", "py")


def sector_arrays(n: int = 3, **override) -> dict:
    return {**{name: np.full(n, 0.5, dtype=np.float32) for name in SECTOR}, **override}


@pytest.fixture(scope="module")
def workdir(tmp_path_factory, o2_library):
    where = tmp_path_factory.mktemp("fuzz")
    # Builds the rows need, made now: a cold build may outlast the 5 s before a heartbeat line.
    build(BuildConfig.parse("-O2", extra_sources=(DATA / "missing_isa_kernel.c",)))
    runs = tmp_path_factory.mktemp("fuzz-runs")
    ok = runs / "ok.json"
    result = CliRunner().invoke(main, ["run", *TINY, "--kernels", "basic,sse2", "--json", str(ok)])
    assert result.exit_code == 0, result.output
    (where / "ok.json").write_text(ok.read_text())
    other = json.loads(ok.read_text())
    other["scene"]["seed"] = 99
    (where / "other-scene.json").write_text(json.dumps(other))
    (where / "garbage.json").write_text("{not json")
    (where / "existing.json").write_text("precious")
    (where / "existing.png").write_text("precious")
    (where / "file.txt").write_text("in the way")
    (where / "bad.toml").write_text("default = 25\n")
    (where / "old.c").write_text((DATA / "missing_isa_kernel.c").read_text())
    (where / "adir").mkdir()
    os.mkfifo(where / "fifo.json")
    os.mkfifo(where / "fifo.png")
    os.mkfifo(where / "fifo.npz")
    (where / "empty.npz").write_bytes(b"")
    (where / "corrupt.npz").write_bytes(b"PK\x03\x04" + os.urandom(200))
    np.save(where / "array.npy", np.zeros(3, dtype=np.float32))
    (where / "text.npz").write_text("cx,cy,ux\n1,2,3\n")
    np.savez(where / "lengths.npz", **sector_arrays(px=np.zeros(5, dtype=np.float32)))
    np.savez(where / "strings.npz", **sector_arrays(cx=np.array(["a", "b", "c"])))
    np.savez(where / "complex.npz", **sector_arrays(cy=np.ones(3, dtype=np.complex64)))
    np.savez(where / "overflow.npz", **sector_arrays(px=np.array([0.0, 1e300, 2.0])))
    np.savez(where / "missing.npz", **{k: v for k, v in sector_arrays().items() if k != "px"})
    np.savez(where / "table.npz", **sector_arrays(px=np.zeros((3, 2), dtype=np.float32)))
    np.savez(where / "rows0.npz", **sector_arrays(0))
    with zipfile.ZipFile(where / "notnpy.npz", "w") as archive:
        archive.writestr("cx.npy", "not an array")
    # issue 17: result files of every wrong shape, links onto inputs, a lying .npz header
    for name, change in BAD_RESULTS.items():
        data = json.loads(ok.read_text())
        change(data)
        (where / f"{name}.json").write_text(json.dumps(data))
    (where / "latin.json").write_bytes(b'{"results": "\xff"}')
    (where / "list.json").write_text("[]")
    os.link(where / "ok.json", where / "hard-ok.md")
    (where / "sym-ok.md").symlink_to("ok.json")
    os.link(where / "ok.json", where / "hard-ok.png")
    (where / "zero.json").symlink_to("/dev/zero")
    with zipfile.ZipFile(where / "liar.npz", "w") as archive:
        header = io.BytesIO()
        np.lib.format.write_array_header_1_0(header, {"descr": "<f4", "fortran_order": False, "shape": (10**12,)})
        archive.writestr("cx.npy", header.getvalue() + bytes(16))
    (where / "s.json").write_text("precious")
    return where


#: A name past NAME_MAX (255 bytes), and a path past PATH_MAX (4096) of names within it.
LONG_NAME = "x" * 300
LONG_PATH = "/".join(["y" * 200] * 25)


def _first_row(**changes):
    return lambda data: data["results"][0].update(**changes)


BAD_RESULTS = {
    "results-dict": lambda data: data.update(results={}),
    "row-list": lambda data: data["results"].__setitem__(0, [1, 2]),
    "scene-list": lambda data: data.update(scene=[]),
    "samples-str": _first_row(samples_s=["fast"]),
    "samples-nan": _first_row(samples_s=[float("nan")]),
    "samples-inf": _first_row(samples_s=[float("inf")]),
    "samples-null": _first_row(samples_s=[None]),
    "net-inf": _first_row(net_samples_s=[float("inf")]),
    # the parts of env the gate, tables and exports walk (they raised TypeError, AttributeError)
    "env-compilers-list": lambda data: data["env"].update(compilers=[1]),
    "env-compiler-int": lambda data: data["env"].update(compilers={"cc": 5}),
    "env-machine-list": lambda data: data["env"].update(machine=[1]),
    "env-cpu-str": lambda data: data["env"]["machine"].update(cpu="fast"),
    "env-builds-ints": lambda data: data["env"].update(builds=[1]),
    "no-rows": lambda data: data.update(results=[]),
    "all-crashed": lambda data: [row.update(status="crashed", samples_s=[]) for row in data["results"]],
}


def snapshot(directory: Path) -> dict:
    """Every entry: its type, mode, size and modification time."""
    entries = {}
    for path in sorted(directory.rglob("*")):
        info = os.lstat(path)
        entries[str(path.relative_to(directory))] = (info.st_mode, info.st_size, info.st_mtime_ns)
    return entries


RUN_LIKE = [
    # timing settings
    ("--min-time", "-1"),
    ("--min-time", "0"),
    ("--min-time", "nan"),
    ("--min-time", "inf"),
    ("--min-time", "-inf"),
    ("--min-time", "11"),
    ("--min-time", "soon"),
    ("--repeat", "0"),
    ("--repeat", "-3"),
    ("--repeat", "1001"),
    ("--repeat", "2.5"),
    ("--max-minutes", "0"),
    ("--max-minutes", "nan"),
    # sizes and seeds
    ("-n", "0"),
    ("-n", "-1"),
    ("-m", "0"),
    ("-n", "ten"),
    ("-n", "1e6"),
    ("-n", "3000000", "-m", "3000000"),
    ("-n", "100000000000"),
    ("--repeat", "1000", "--min-time", "10"),
    ("--seed", "-1"),
    ("--seed", "x"),
    ("--scene", "nonsense"),
    ("--scene", ""),
    # kernels, builds, ISAs
    ("--kernels", ""),
    ("--kernels", ",,"),
    ("--kernels", "nope"),
    ("--kernels", "noop[scalar b1, 6 arrays]"),
    ("--kernels", "orient", "--scene", "uniform"),  # a triangle kernel on a sector scene
    ("--kernels", "orient,naive"),  # two families: which one is meant?
    ("--mode", "sideways"),
    ("--mode", "inline", "--mode", "inline"),
    ("--flags", "-O1", "--flags", "-O1"),
    ("--flags", "-O1", "--flags", " -O1 "),
    ("--flags", "-O2 '"),
    ("--cc", "no-such-compiler-xyz"),
    ("--cc", "/bin/true"),
    ("--disable-isa", "nosuchisa"),
    ("--disable-isa", ""),
    ("--source", "no-such-file.c"),
    ("--source", "adir"),
    ("--source", str(DATA / "broken_kernels.c"), "--source", str(DATA / "broken_kernels.c")),
    ("--source", "fifo.json"),  # a FIFO would block the compiler, a device never end
    ("--source", "/dev/zero"),
    ("--against-source", "fifo.json"),
    ("--against", ""),  # `--against "$(git merge-base ...)"` when there is no merge base
    (
        "--source",
        str(DATA / "missing_isa_kernel.c"),
        "--against-source",
        "old.c",
        "--json",
        "old.c",
        "--force",
        "--repeat",
        "5",
    ),  # enough rounds for the A/B's alpha: refused only because old.c is an input
    # outputs
    ("--json", "/dev/null", "--force"),
    ("--json", "fifo.json", "--force"),
    ("--json", "existing.json"),
    ("--json", "adir"),
    ("--json", "file.txt/out.json"),
    ("--json", "no-such-dir/out.json"),
    ("--json", "/proc/x.json"),
    ("--save", "--json", "fifo.json", "--force"),
    # issue 17: flags that redirect the compiler's output, thread counts past the cap
    ("--flags", "-O1 -Wl,-o,s.json"),
    ("--flags", "-O2 -o s.json"),
    ("--flags", "-O2 -S"),
    ("--flags", "-O2 -MD -MF s.json"),
    ("--flags", "-O2 @s.json"),
    ("--flags", "-O2 -save-temps"),
    ("--flags", "-O2 -fdump-tree-all=s.json"),
    ("--threads", "1180591620717411303424"),
    ("--threads", "x"),
    ("--threads", "0"),
]

ROWS = (
    [("run", *TINY, *bad) for bad in RUN_LIKE]
    + [("compare", *TINY, *bad) for bad in RUN_LIKE[::3]]
    + [
        # run's gate
        ("run", *TINY, "--markdown", "gate.md"),
        ("run", *TINY, "--normalize", "overhead"),
        ("run", *TINY, "--alpha", "0.05"),
        ("run", *TINY, "--confirm"),
        ("run", *TINY, "--no-confirm"),
        ("run", *TINY, "--baseline", "no-such.json"),
        ("run", *TINY, "--baseline", "garbage.json"),
        ("run", *TINY, "--baseline", "other-scene.json"),
        ("run", *TINY, "--baseline", "ok.json", "--alpha", "0.7"),
        ("run", *TINY, "--baseline", "ok.json", "--threshold", "25"),
        ("run", *TINY, "--baseline", "ok.json", "--thresholds", "bad.toml"),
        ("run", *TINY, "--baseline", "ok.json", "--json", "x.json", "--markdown", "x.json"),
        ("run", *TINY, "--baseline", "ok.json", "--markdown", "fifo.json", "--force"),
        ("run", *TINY, "--baseline", "ok.json", "--kernels", "basic"),
        ("run", *TINY, "--baseline", "ok.json", "--normalize", "naive", "--kernels", "basic,sse2"),
        # issue 17: outputs that are inputs, baselines of every wrong shape
        ("run", *TINY, "--baseline", "ok.json", "--markdown", "hard-ok.md", "--force"),
        ("run", *TINY, "--baseline", "ok.json", "--markdown", "sym-ok.md", "--force"),
        ("run", *TINY, "--baseline", "ok.json", "--json", "ok.json", "--force"),
        ("run", *TINY, "--baseline", "fifo.json"),
        ("run", *TINY, "--baseline", "zero.json"),
        *[("run", *TINY, "--baseline", f"{name}.json") for name in BAD_RESULTS],
        # compare's own
        ("compare", *TINY, "--preset", "nope"),
        ("compare", *TINY, "--cc", "no-such-cc-1", "--cc", "no-such-cc-2"),
        ("compare", *TINY, "--quick", "--repeat", "0"),
        # every row it names would be skipped: nothing to time (it exited 0, a table of skips)
        ("run", *TINY, "--kernels", "sse2", "--disable-isa", "sse2", "--json", "skipped.json"),
        ("compare", *TINY, "--flags", "-O1", "--kernels", "sse2,sse2_nosqrt", "--disable-isa", "sse2"),
        # verify
        ("verify", "--seed", "-1"),
        ("verify", "--seed", "1.5"),
        ("verify", "--cases", "0"),
        ("verify", "--show", "-1"),
        ("verify", "--family", "nope"),
        ("verify", "--kernels", ""),
        ("verify", "--kernels", "nope"),
        ("verify", "--family", "sector", "--kernels", "orient"),  # orient is a triangle kernel
        ("verify", "--kernels", "orient,naive"),  # two families: which one is meant?
        ("verify", "--kernels", "naiv"),  # misspelt: refused before any build
        ("verify", "--kernels", "sse2,sse2_nosqrt", "--disable-isa", "sse2"),
        ("verify", "--source", str(DATA / "missing_isa_kernel.c"), "--kernels", "needs_fp16"),
        ("verify", "--disable-isa", "nosuchisa"),
        ("verify", "--flags", "-O2", "--flags", "-O2"),
        ("verify", "--cc", "/bin/true"),
        ("verify", "--json", "/dev/null", "--force"),
        ("verify", "--json", "fifo.json", "--force"),
        ("verify", "--json", "existing.json"),
        ("verify", "--input", "no-such.npz"),
        ("verify", "--input", "adir"),
        ("verify", "--input", "empty.npz"),
        ("verify", "--input", "corrupt.npz"),
        ("verify", "--input", "array.npy"),
        ("verify", "--input", "text.npz"),
        ("verify", "--input", "lengths.npz"),
        ("verify", "--input", "strings.npz"),
        ("verify", "--input", "complex.npz"),
        ("verify", "--input", "overflow.npz"),
        ("verify", "--input", "missing.npz"),
        ("verify", "--input", "table.npz"),
        ("verify", "--input", "rows0.npz"),
        ("verify", "--input", "notnpy.npz"),
        ("verify", "--family", "triangle", "--input", "overflow.npz"),
        ("verify", "--input", "liar.npz"),
        ("verify", "--input", "empty.npz", "--seed", "5"),  # the file's cases: no seed generates them
        ("verify", "--coverage", "--cc", "gcc"),  # the oracle alone: nothing is built
        ("verify", "--coverage", "--flags", "-O3"),
        ("verify", "--coverage", "--source", str(DATA / "shadowing_kernel.c")),
        ("verify", "--coverage", "--show", "5"),
        ("verify", "--coverage", "--strict-special"),
        ("verify", "--coverage", "--disable-isa", "sse2"),
        ("verify", "--coverage", "--kernel-timeout", "5"),
        ("verify", "--input", "fifo.json"),
        ("verify", "--flags", "-O2 -Wl,-o,s.json"),
        ("verify", "--source", "fifo.json"),
        ("verify", "--cases", "100", "--source", str(DATA / "shadowing_kernel.c"), "--kernels", "basic"),
        # kernels
        ("kernels", "--flags", "-O2 -c"),
        ("kernels", "--cc", "/bin/true"),
        ("kernels", "--cc", "no-such-compiler-xyz"),
        ("kernels", "--flags", "-O2 '"),
        ("kernels", "--flags", "-O2", "--flags", "-O2"),
        ("kernels", "--disable-isa", "nosuchisa"),
        ("kernels", "--source", "no-such-file.c"),
        # regress
        ("regress",),
        ("regress", "ok.json"),
        ("regress", "no-such.json", "ok.json"),
        ("regress", "garbage.json", "ok.json"),
        ("regress", "ok.json", "other-scene.json"),
        ("regress", "ok.json", "ok.json", "--alpha", "0"),
        ("regress", "ok.json", "ok.json", "--threshold", "-1"),
        ("regress", "ok.json", "ok.json", "--thresholds", "bad.toml"),
        ("regress", "ok.json", "ok.json", "--thresholds", "fifo.json"),
        ("regress", "ok.json", "ok.json", "--markdown", "/dev/null", "--force"),
        ("regress", "ok.json", "ok.json", "--markdown", "existing.json"),
        ("regress", "ok.json", "ok.json", "--markdown", "file.txt/gate.md"),
        ("regress", "ok.json", "ok.json", "--markdown", "ok.json", "--force"),
        ("regress", "ok.json", "ok.json", "--markdown", "hard-ok.md", "--force"),
        ("regress", "ok.json", "ok.json", "--markdown", "sym-ok.md", "--force"),
        ("regress", "fifo.json", "ok.json"),
        ("regress", "ok.json", "fifo.json"),
        ("regress", "/dev/zero", "ok.json"),
        ("regress", "zero.json", "ok.json"),
        ("regress", "latin.json", "ok.json"),
        ("regress", "list.json", "ok.json"),
        *[("regress", f"{name}.json", "ok.json") for name in BAD_RESULTS],
        *[("regress", "ok.json", f"{name}.json") for name in BAD_RESULTS if name not in ("no-rows", "all-crashed")],
        # plot
        ("plot", "ok.json", "--out", "hard-ok.png", "--force"),
        ("plot", "fifo.json", "--out", "x.png"),
        *[("plot", f"{name}.json", "--out", "x.png") for name in BAD_RESULTS if name not in ("no-rows", "all-crashed")],
        # query
        ("query", "--rmax", "1e39", "--out", "q.npz"),
        ("query", "--world", "inf", "--out", "q.npz"),
        ("query", "--threads", "100000", "--out", "q.npz"),
        ("query", "--max-hits", "0", "--out", "q.npz"),
        ("query", "--max-hits", "99999999999999999999", "--out", "q.npz"),
        # export
        ("export", "ok.json", "--format", "pyperf", "--out", "ok.json", "--force"),
        *[("export", f"{name}.json", "--format", "gbench", "--out", "x.json") for name in BAD_RESULTS if "env" in name],
        ("export", "ok.json", "--format", "bmf", "--out", "sym-ok.md", "--force"),
        ("export", "ok.json", "--format", "gha", "--out", "hard-ok.md", "--force"),
        ("query", "-n", "500", "-m", "20000", "--rmax", "1e6", "--max-hits", "1000", "--out", "q.npz"),
        ("query", "--out", "fifo.npz", "--force"),
        ("plot", "ok.json"),
        ("plot", "ok.json", "--out", "x.gif"),
        ("plot", "ok.json", "--out", "existing.png"),
        ("plot", "ok.json", "--out", "fifo.png", "--force"),
        ("plot", "ok.json", "--out", "file.txt/x.png"),
        ("plot", "ok.json", "ok.json", "--out", "x.png"),
        ("plot", "--out", "x.png", "--chart", "trend"),
        ("plot", "garbage.json", "--out", "x.png"),
        ("plot", "ok.json", "--out", "x.png", "--chart", "pie"),
        ("plot", "ok.json", "--out", "x.png", "--chart", "bar", "--kernel", "basic"),  # a trend's options
        ("plot", "ok.json", "--out", "x.png", "--flags", "-O2"),
        ("plot", "ok.json", "--out", "x.png", "--chart", "heatmap", "--mode", "inline"),
        # outputs named too long for the system (ENAMETOOLONG was an internal error), and
        # spelt as a directory (`--out newdir/` wrote a file named newdir)
        ("run", *TINY, "--json", f"{LONG_NAME}.json"),
        ("run", *TINY, "--json", f"{LONG_NAME}/x.json"),
        ("run", *TINY, "--export", f"gha={LONG_NAME}.json"),
        ("verify", "--json", f"{LONG_NAME}.json"),
        ("regress", "ok.json", "ok.json", "--markdown", f"{LONG_NAME}.md"),
        ("query", "-n", "10", "-m", "100", "--out", f"{LONG_NAME}.npz"),
        ("plot", "ok.json", "--out", f"{LONG_NAME}.png"),
        ("export", "ok.json", "--format", "gha", "--out", f"{LONG_NAME}.json"),
        ("export", "ok.json", "--format", "gha", "--out", f"{LONG_PATH}.json"),
        ("export", f"{LONG_NAME}.json", "--format", "gha", "--out", "x.json"),
        ("regress", "ok.json", f"{LONG_PATH}.json"),
        ("export", "ok.json", "--format", "gha", "--out", "newdir/"),
        ("export", "ok.json", "--format", "gha", "--out", "newdir/."),
        ("run", *TINY, "--json", "rdir/"),
        ("run", *TINY, "--export", "gha=edir/"),
        ("verify", "--json", "vdir/"),
        ("query", "-n", "10", "-m", "100", "--out", "qdir/"),
        ("plot", "ok.json", "--out", "pdir/"),
        ("regress", "ok.json", "ok.json", "--markdown", "mdir/"),
        # an output where --save makes results/: the run wrote the file, then rescued its results
        ("run", *TINY, "--kernels", "basic", "--save", "--json", "results"),
        ("run", *TINY, "--kernels", "basic", "--save", "--export", "gha=./results"),
        ("compare", *TINY, "--kernels", "basic", "--save", "--json", "results"),
        # query's --out of another suffix: an npz under a .json name
        ("query", "-n", "10", "-m", "100", "--out", "q.json"),
        ("query", "-n", "10", "-m", "100", "--out", "q"),
        # plot's empty --kernel: it drew a bar chart, as if --kernel had been left out
        ("plot", "ok.json", "--out", "t.svg", "--kernel", ""),
        ("plot", "ok.json", "--out", "t.svg", "--kernel", " "),
        # the time to make a scene's polygons, in Python, counted before it is made (80 s here)
        ("run", *TINY, "-n", "400000", "-m", "1", "--scene", "polygons", "--vertices", "4", "--max-minutes", "1"),
        # the group
        ("no-such-command",),
        ("--no-such-option",),
    ]
)


def test_the_table_is_large_enough():
    assert len(ROWS) >= 180
    assert {row[0] for row in ROWS} >= {"run", "compare", "verify", "kernels", "regress", "plot"}


@pytest.mark.parametrize("args", ROWS, ids=[" ".join(row)[:80] for row in ROWS])
def test_bad_input_is_one_line_exit_2_and_nothing_written(args, workdir, monkeypatch):
    monkeypatch.chdir(workdir)
    before = snapshot(workdir)
    result = CliRunner().invoke(main, list(args))
    assert result.exit_code == 2, (result.stdout, result.stderr)
    lines = result.stderr.strip().splitlines()
    assert len(lines) == 1 and lines[0].startswith("sectorbench: "), result.stderr
    assert "Traceback" not in result.stderr and 'File "' not in result.stderr
    assert "internal error" not in result.stderr
    assert result.stdout == ""
    assert snapshot(workdir) == before
    assert (workdir / "s.json").read_text() == "precious"


GOOD = [
    ("verify", "--kernels", "numpy", "--cases", "300"),  # a peer: built and checked in its own worker
    ("verify", "--kernels", "basic,numpy", "--cases", "300", "--disable-isa", "avx512f"),
    ("run", *TINY, "--kernels", "basic", "--disable-isa", "sse2,avx2"),
    ("kernels", "--flags", "-O0", "--flags", "-O2"),
]


@pytest.mark.parametrize("args", GOOD, ids=[" ".join(row)[:80] for row in GOOD])
def test_the_checks_let_good_input_through(args, workdir, monkeypatch):
    monkeypatch.chdir(workdir)
    before = snapshot(workdir)
    result = CliRunner().invoke(main, list(args))
    assert result.exit_code == 0, (result.stdout, result.stderr)
    assert snapshot(workdir) == before


@pytest.mark.parametrize("command", ["run", "verify"])
def test_a_program_that_is_no_compiler_is_named_as_such(command, workdir, monkeypatch):
    """--cc /bin/true preprocesses to nothing: the kernels it "holds" are none, which once read as
    "unknown kernel basic"; the build's own check says what is wrong."""
    monkeypatch.chdir(workdir)
    args = [*TINY, "--cc", "/bin/true", "--kernels", "basic"] if command == "run" else ["--cc", "/bin/true"]
    result = CliRunner().invoke(main, [command, *args] + (["--kernels", "basic"] if command == "verify" else []))
    assert result.exit_code == 2
    assert "is it a C compiler?" in result.stderr and "unknown kernel" not in result.stderr
