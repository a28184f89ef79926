"""`verify` and `kernels`: check kernels and list them."""

from __future__ import annotations

import json
from pathlib import Path

import click

from ..build import BuildConfig
from ..families import all_families
from ..results import write_text_atomic
from ..verify import VerifyConfig
from .app import main, make_progress, stderr, stdout
from .options import RegistryChoice, build_configs, build_options, comma_list, output_options, refuse_existing


@main.command("verify")
@click.option(
    "--family",
    type=RegistryChoice(lambda: [f.name for f in all_families()]),
    default="sector",
    show_default=True,
    help="The family whose kernels to check.",
)
@click.option("--kernels", multiple=True, callback=comma_list, help="Kernels to check (default: the family's).")
@build_options(("-O2",))
@click.option(
    "--cases",
    default=VerifyConfig.cases,
    show_default=True,
    type=click.IntRange(min=1),
    help="Rows per random generator (near-boundary, exact and special cases come on top).",
)
@click.option("--seed", default=VerifyConfig.seed, show_default=True)
@click.option(
    "--show",
    default=0,
    show_default=True,
    type=click.IntRange(min=0),
    help="Print the first K wrong inputs of each kernel.",
)
@click.option("--strict-special", is_flag=True, help="Fail fast-math builds on NaN/inf/subnormal/-0.0 inputs too.")
@click.option(
    "--input",
    "input_path",
    type=click.Path(exists=True, dir_okay=False, path_type=Path),
    help="Check these cases (.npz, one row per pair) instead of generated ones.",
)
@output_options
def verify_command(
    family, kernels, flags, cc, sources, disable_isa, cases, seed, show, strict_special, input_path, json_path, force
):
    """Check kernels against the exact oracle; exit 1 if any fails."""
    from ..report import failing_inputs_table, verify_table
    from ..verify import verify

    refuse_existing(json_path, force)
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
    )
    with make_progress() as bar:
        task = bar.add_task("verify", total=None)
        result = verify(config, lambda what, total=None: bar.update(task, description=what))
    console = stdout()
    console.print(verify_table(result))
    for verdict in result.kernels:
        if verdict.failing:
            console.print(failing_inputs_table(verdict))
    if json_path is not None:
        write_text_atomic(json_path, json.dumps(result.to_dict(), indent=1) + "\n", overwrite=force)
        stderr.print(f"saved {json_path}")
    click.get_current_context().exit(0 if result.passed else 1)


@main.command("kernels")
@build_options((BuildConfig().flags[0],))
def kernels_command(flags, cc, sources, disable_isa):
    """List the kernels, what each needs, and whether this CPU has it."""
    from ..build import build
    from ..report import kernels_table
    from ..worker import Worker

    config = build_configs(flags[:1], cc[:1], sources)[0]
    with Worker(build(config), disable_isa) as worker:
        kernels, _ = worker.describe()
    stdout().print(kernels_table(kernels))
