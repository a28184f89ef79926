"""`query`: which points lie in which shapes of a seeded scene, saved as CSR in a .npz file."""

from __future__ import annotations

import json

import click
import numpy as np

from ..errors import SectorbenchError
from ..families import all_families, family_of_scene
from ..families.scene_kinds import generate
from ..model.results import write_atomic
from ..model.text import shown_path
from .app import main, note, note_cache_fallback
from .options import (
    OUTPUT_PATH,
    SEED,
    RegistryChoice,
    SceneChoice,
    SceneCommand,
    check_outputs,
    checked_threads,
    given_scene_options,
)

#: What query writes (numpy's savez, whatever the name): an --out of another suffix is refused,
#: as plot refuses one it cannot draw; `--out q.json` wrote a zip under a .json name.
QUERY_SUFFIX = ".npz"


def _query_families():
    return [f for f in all_families() if f.query_scene]


@main.command("query", cls=SceneCommand, families=_query_families)
@click.option(
    "--scene",
    default=None,
    type=SceneChoice(_query_families),
    help="A scene kind of a family that answers queries [default: that family's game-scale scene, game].",
)
@click.option(
    "-n",
    "--shapes",
    "--sectors",
    "shapes",
    default=10_000,
    show_default=True,
    type=click.IntRange(min=1),  # refused here, where the option's own name can be given
    help="N: shapes of the scene.",
)
@click.option(
    "-m", "--points", default=200_000, show_default=True, type=click.IntRange(min=1), help="M: points of the scene."
)
@click.option("--seed", default=0, show_default=True, type=SEED, help="Scene seed (an integer >= 0).")
@click.option(
    "--broadphase",
    default="auto",
    show_default=True,
    type=RegistryChoice(lambda: ["auto", *dict.fromkeys(b for f in _query_families() for b in f.broadphases())]),
    help="Point index (auto: the family's measured fastest).",
)
@click.option(
    "--threads",
    default="1",
    show_default=True,
    callback=lambda ctx, param, value: checked_threads(value),
    help="Threads, each taking a range of shapes (N, or all: the CPUs this process may use).",
)
@click.option(
    "--max-hits",
    default=None,
    type=click.IntRange(min=1, max=2**62),  # a query's bound is an int64 in C
    help="Stop with an error past this many hits (4 bytes each): the answer's memory bound "
    "[default: the family's, 2^28 hits for sectors].",
)
@click.option("--out", required=True, type=OUTPUT_PATH, help=f"The {QUERY_SUFFIX} file to write.")
@click.option("--force", is_flag=True, help="Replace an existing --out file (a regular file only) [default: refuse].")
def query_command(scene, shapes, points, seed, broadphase, threads, max_hits, out, force, **scene_values):
    """Write the hits of a scene's shapes (offsets, indices, counts) to OUT, with the scene's description."""
    if out.suffix.lower() != QUERY_SUFFIX:
        raise SectorbenchError(
            f"{out}: query writes {QUERY_SUFFIX} files (numpy's zip of arrays); give a path ending in {QUERY_SUFFIX}"
        )
    check_outputs(force, out)
    note_cache_fallback()
    answering = _query_families()
    if not answering:
        raise SectorbenchError("no registered family answers queries")
    family = family_of_scene(scene) if scene else answering[0]  # --scene lists the answering families' kinds only
    made = generate(scene or family.query_scene, shapes, points, seed, given_scene_options(scene_values))
    columns = {name: made.column(name) for name in made.arrays}
    family.prepare_query()  # the library first, asked for: the query's own log is then the CLI's line below
    limit = {} if max_hits is None else {"max_hits": max_hits}
    try:
        hits = family.query(columns, columns, broadphase=broadphase, threads=threads, **limit)
    except ValueError as exc:  # the API's bad-input error; here an option's value caused it
        raise SectorbenchError(str(exc).replace("max_hits=", "--max-hits ").replace("max_hits", "--max-hits")) from None
    meta = {"scene": made.describe(), "broadphase": hits.broadphase, "threads": threads}  # "auto" resolved

    def write(stream):
        np.savez(
            stream,
            offsets=hits.offsets,
            indices=hits.indices,
            counts=hits.counts,
            meta=np.array(json.dumps(meta)),
        )

    write_atomic(out, write, overwrite=force)
    note(
        f"{hits.total} hits of {shapes} {family.shape_noun} x {points} points: "
        f"index {hits.index_build_s * 1e3:.1f} ms, query {hits.query_s * 1e3:.1f} ms; saved {shown_path(out)}"
    )
