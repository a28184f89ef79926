"""`verify` and `kernels`: check kernels and list them."""

from __future__ import annotations

import json
from pathlib import Path

import click

from ..build import BuildConfig
from ..families import all_families
from ..results import write_text_atomic
from ..verify import VerifyConfig
from .app import Reporter, main, note, stdout
from .measure import kernel_timeout_option
from .options import SEED, RegistryChoice, build_configs, build_options, check_outputs, comma_list, output_options


@main.command("verify")
@click.option(
    "--family",
    type=RegistryChoice(lambda: [f.name for f in all_families()]),
    default="sector",
    show_default=True,
    help="The family whose kernels to check.",
)
@click.option(
    "--kernels",
    multiple=True,
    callback=comma_list,
    help="Kernels to check [default: the family's, known-bad ones left out].",
)
@build_options(("-O2",))
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
    default=0,
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
    type=click.Path(exists=True, dir_okay=False, path_type=Path),
    help="Check these cases (.npz, one row per pair) instead of generated ones [default: generated].",
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
    kernel_timeout,
    json_path,
    force,
):
    """Check kernels against the exact oracle; exit 1 if any fails."""
    from ..families import get
    from ..report import VERIFY_DROP, failing_inputs_table, fit, verify_table
    from ..verify import verify

    check_outputs(force, json_path)
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
        kernel_timeout=kernel_timeout,
    )
    if input_path is not None:
        get(family).input_cases(input_path)  # a bad file is refused before anything is built
    with Reporter() as progress:
        result = verify(config, lambda what, total=None: progress(what))
    console = stdout()
    console.print(fit(verify_table(result), console.width, VERIFY_DROP))
    for verdict in result.kernels:
        if verdict.failing:
            console.print(failing_inputs_table(verdict))
    if json_path is not None:
        write_text_atomic(json_path, json.dumps(result.to_dict(), indent=1) + "\n", overwrite=force)
        note(f"saved {json_path}")
    click.get_current_context().exit(0 if result.passed else 1)


@main.command("kernels")
@build_options((BuildConfig().flags[0],))
def kernels_command(flags, cc, sources, disable_isa):
    """List the kernels, what each needs, and whether this CPU has it (for every build given)."""
    from ..build import build
    from ..report import fit, kernels_table
    from ..worker import Worker

    listings: dict[tuple, list[str]] = {}  # identical listings are shown once, for all their builds
    for config in build_configs(flags, cc, sources):
        with Worker(build(config), disable_isa) as worker:
            kernels, _ = worker.describe()
        listings.setdefault(tuple(kernels), []).append(config.label)
    console = stdout()
    for kernels, labels in listings.items():
        console.print(fit(kernels_table(list(kernels), labels if len(labels) < len(flags) * len(cc) else []), None))
