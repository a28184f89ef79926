"""`query`: which points lie in which sectors of a seeded scene, saved as CSR in a .npz file."""

from __future__ import annotations

import json
from pathlib import Path

import click
import numpy as np

from .. import SectorbenchError
from ..families.sector.broadphase import BROADPHASES
from ..families.sector.query import MAX_HITS
from ..results import write_atomic
from ..scenes import generate
from .app import main, note
from .options import SEED, check_outputs, checked_threads, game_options


@main.command("query")
@click.option("--scene", default="game", show_default=True, help="A sector scene kind (game, clustered, uniform, ...).")
@click.option("-n", "--sectors", default=10_000, show_default=True, help="N: sectors of the scene.")
@click.option("-m", "--points", default=200_000, show_default=True, help="M: points of the scene.")
@click.option("--seed", default=0, show_default=True, type=SEED, help="Scene seed (an integer >= 0).")
@game_options
@click.option(
    "--broadphase",
    default="auto",
    show_default=True,
    type=click.Choice(("auto", *BROADPHASES)),
    help="Point index (auto: grid, the measured fastest).",
)
@click.option(
    "--threads",
    default="1",
    show_default=True,
    callback=lambda ctx, param, value: checked_threads(value),
    help="Threads, each taking a range of sectors.",
)
@click.option(
    "--max-hits",
    default=MAX_HITS,
    show_default=True,
    type=click.IntRange(min=1),
    help="Stop with an error past this many hits (4 bytes each): the answer's memory bound.",
)
@click.option(
    "--out", required=True, type=click.Path(dir_okay=False, path_type=Path), help="The .npz file to write (required)."
)
@click.option("--force", is_flag=True, help="Replace an existing --out file [default: off].")
def query_command(scene, sectors, points, seed, world, rmin, rmax, broadphase, threads, max_hits, out, force):
    """Write the hits of a scene's sectors (offsets, indices, counts) to OUT, with the scene's description."""
    from .. import query
    from ..families import family_of_scene

    check_outputs(force, out)
    if family_of_scene(scene).name != "sector":
        raise click.UsageError(f"query answers sector scenes; {scene!r} is a {family_of_scene(scene).name} scene")
    made = generate(scene, sectors, points, seed, {"world": world, "rmin": rmin, "rmax": rmax})
    columns = {name: made.column(name) for name in made.arrays}
    try:
        hits = query(columns, columns, broadphase=broadphase, threads=threads, max_hits=max_hits)
    except ValueError as exc:  # the API's bad-input error; here an option's value caused it
        raise SectorbenchError(str(exc).replace("max_hits=", "--max-hits ").replace("max_hits", "--max-hits")) from None
    meta = {"scene": made.describe(), "broadphase": broadphase, "threads": threads}

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
        f"{hits.total} hits of {sectors} sectors x {points} points: index {hits.index_build_s * 1e3:.1f} ms, "
        f"query {hits.query_s * 1e3:.1f} ms; saved {out}"
    )
