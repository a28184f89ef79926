"""`verify` and `kernels`: check kernels and list them."""

from __future__ import annotations

import functools
import json

import click

from ..check.verify import VerifyConfig, resolve
from ..families import all_families
from ..model.results import write_text_atomic
from ..model.text import shown_path
from ..native.build import DEFAULT_FLAGS
from .app import Reporter, main, note, note_cache_fallback, stdout
from .measure import kernel_timeout_option
from .options import (
    INPUT_PATH,
    KERNELS_DEFAULT,
    SEED,
    build_configs,
    build_options,
    check_outputs,
    comma_list,
    family_option,
    given_options,
    output_options,
    refuse_unused,
)


@main.command("verify")
@family_option(
    "The family whose kernels to check [default: the family of --kernels; without, the first registered family]."
)
@click.option(
    "--kernels",
    multiple=True,
    callback=comma_list,
    help=f"Kernels to check [default: {KERNELS_DEFAULT}].",
)
@build_options((DEFAULT_FLAGS,))
@click.option(
    "--cases",
    default=VerifyConfig.cases,
    show_default=True,
    type=click.IntRange(min=1),
    help="Rows per random generator (near-boundary, exact and special cases come on top).",
)
@click.option(
    "--seed",
    default=VerifyConfig.seed,
    show_default=True,
    type=SEED,
    help="Seed of the generated cases (an integer >= 0).",
)
@click.option(
    "--show",
    default=VerifyConfig.show,
    show_default=True,
    type=click.IntRange(min=0),
    help="Print the first K wrong inputs of each kernel.",
)
@click.option(
    "--strict-special",
    is_flag=True,
    help="Fail fast-math builds on NaN/inf/subnormal/-0.0 inputs too [default: off].",
)
@click.option(
    "--input",
    "input_path",
    type=INPUT_PATH,
    help="Check these cases (.npz, one row per pair) instead of generated ones [default: generated].",
)
@click.option(
    "--coverage",
    "coverage_only",
    is_flag=True,
    help="Print how many exact rows the generated cases put on each side of every boundary piece, per "
    "region of the parameters, instead of checking kernels (the oracle only: nothing is built); "
    "exit 1 if a cell is empty [default: off].",
)
@click.option(
    "--jobs",
    type=click.IntRange(min=1),
    default=None,
    help="Processes judging the case batches; the result is the same for any number [default: one per CPU].",
)
@click.option(
    "--scheduler",
    metavar="ADDRESS",
    default=None,
    help="A Dask scheduler (tcp://host:8786) whose workers judge the batches instead; each builds its own "
    "library, and one whose compilers or CPU features differ is refused (needs sectorbench[cluster]) "
    "[default: none, local processes].",
)
@kernel_timeout_option
@output_options
def verify_command(
    family,
    kernels,
    flags,
    cc,
    sources,
    disable_isa,
    cases,
    seed,
    show,
    strict_special,
    input_path,
    coverage_only,
    jobs,
    scheduler,
    kernel_timeout,
    json_path,
    force,
):
    """Check kernels against the exact oracle; exit 1 if any fails."""
    from ..check.verify import read_input, verify
    from ..families import get
    from ..present.report import VERIFY_DROP, failing_inputs_lines, failing_inputs_table, fit, verify_table

    check_outputs(force, json_path, inputs=(input_path, *sources))
    ctx = click.get_current_context()
    if input_path is not None:
        refuse_unused(given_options(ctx, ("cases", "seed")), "to generated cases, not to --input's")
    if coverage_only:
        # the oracle alone counts the cases: nothing is built, run or shown
        built = ("flags", "cc", "sources", "disable_isa", "show", "strict_special", "jobs", "scheduler")
        refuse_unused(given_options(ctx, (*built, "kernel_timeout")), "to checking kernels, not to --coverage")
        _coverage_command(family, cases, seed, input_path, kernels, json_path, force)
    note_cache_fallback()
    config = VerifyConfig(
        family=family,
        kernels=kernels,
        builds=build_configs(flags, cc, sources),
        cases=cases,
        seed=seed,
        strict_special=strict_special,
        show=show,
        input_path=input_path,
        disable_isa=disable_isa,
        jobs=jobs,
        scheduler=scheduler,
        kernel_timeout=kernel_timeout,
    )
    config = resolve(config)  # the family, and the kernels' names, settled before anything is built
    if input_path is not None:  # a bad file, or one whose expected answers are wrong, is refused before any build
        read_input(get(config.family), input_path)
    with Reporter() as progress:
        result = verify(config, lambda what, total=None: progress(what))
    for address, worker in result.env.get("workers", {}).items():  # when every worker is refused, verify raised
        if worker.get("refused"):
            note(f"Dask worker {address}: refused, it judged no batch: {worker['refused']}")
    console = stdout()
    console.print(fit(verify_table(result), console.width, VERIFY_DROP))
    for verdict in result.kernels:
        if verdict.failing:
            console.print(fit(failing_inputs_table(verdict), console.width))
            for line in failing_inputs_lines(verdict):
                console.print(line, soft_wrap=True, highlight=False)
    if json_path is not None:
        write_text_atomic(json_path, json.dumps(result.to_dict(), indent=1) + "\n", overwrite=force)
        note(f"saved {shown_path(json_path)}")
    click.get_current_context().exit(0 if result.passed else 1)


def _coverage_command(family, cases, seed, input_path, kernels, json_path, force) -> None:
    """verify --coverage: the coverage table of the generated cases; exit 1 if a cell is empty."""
    from ..check.coverage import coverage
    from ..present.coverage import coverage_table
    from ..present.report import fit

    if input_path is not None or kernels:
        raise click.UsageError("--coverage counts the generated cases: it takes neither --input nor --kernels")
    family = family or all_families()[0].name  # as verify's: without --family, the first registered
    with Reporter() as progress:
        progress(f"coverage of the {family} family's cases")
        result = coverage(family, cases, seed)
    console = stdout()
    console.print(fit(coverage_table(result), console.width, ()))
    if json_path is not None:
        write_text_atomic(json_path, json.dumps(result.to_dict(), indent=1) + "\n", overwrite=force)
        note(f"saved {shown_path(json_path)}")
    click.get_current_context().exit(0 if result.passed else 1)


@main.command("kernels")
@build_options((DEFAULT_FLAGS,))
def kernels_command(flags, cc, sources, disable_isa):
    """List the kernels, what each needs, and whether this CPU has it (for every build given).

    A build that fails (flags the compiler rejects, a library that fails to load) is named with
    why and the other builds are listed; exit 2 only if every build fails."""
    from ..measure.builds import FailedBuild, open_build, usable
    from ..measure.runner import PEER_BUILD
    from ..measure.worker import BuildSession, Worker
    from ..native.build import build
    from ..present.report import fit, kernels_table

    note_cache_fallback()
    opened = []
    for config in build_configs(flags, cc, sources):
        session = open_build(config, functools.partial(BuildSession, config, disable_isa=disable_isa))
        session.close()  # its kernels were read as it started (a --source constructor that fails: its rows say so)
        opened.append(session)
    usable(opened)  # every build failed: that is the error (one build: the compiler's whole message)
    listings: dict[tuple, list[str]] = {}  # identical listings are shown once, for all their builds
    for session in opened:
        if isinstance(session, FailedBuild):  # a build that did not build has no kernels to list: why, in one line
            whole = (
                " (list this build alone for the compiler's whole message)" if session.reason != session.summary else ""
            )
            note(
                f"note: {session.config.label}: {session.status}, its kernels are not listed: {session.summary}{whole}"
            )
        else:
            listings.setdefault(tuple(session.kernels), []).append(session.config.label)
    with Worker(build(PEER_BUILD), disable_isa, peers=True) as worker:  # the peers: Python, flags do not apply
        peers, _ = worker.describe()
    console = stdout()
    for kernels, labels in listings.items():
        shown = labels if len(labels) < len(flags) * len(cc) else []
        console.print(fit(kernels_table(list(kernels), shown), console.width))
    if peers:
        console.print(fit(kernels_table(peers, ["peers: Python, compiler flags do not apply"]), console.width))
