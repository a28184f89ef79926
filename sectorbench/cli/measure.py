"""`run` and `compare`: measure kernels."""

from __future__ import annotations

import shutil

import click

from ..errors import SectorbenchError
from ..families.scene_kinds import describe as describe_scene
from ..measure.deadlines import DEFAULT_KERNEL_TIMEOUT_S
from ..measure.runner import MAX_RUN_MINUTES, Plan, RunConfig, resolve, run
from ..measure.timing import DEFAULT_MIN_SAMPLE_S, DEFAULT_REPEAT, MODES, TimingConfig
from ..native.build import build_label
from .ab import gate_revision, metric_option, print_instructions, run_ab, with_metric
from .app import (
    Reporter,
    load_plain,
    main,
    note,
    note_cache_fallback,
    result_json,
    run_gate,
    stdout,
    write_exports,
    write_json,
)
from .options import (
    INPUT_PATH,
    KERNELS_DEFAULT,
    SEED,
    SceneCommand,
    broadphase_option,
    build_configs,
    build_options,
    check_outputs,
    comma_list,
    export_option,
    family_option,
    gate_options,
    given_scene_options,
    make_gate_config,
    output_options,
    refuse_unused_gate_options,
    regular_files,
    scene_option,
    threads_option,
    unique,
)

#: `run` compares the article's pair by default: plain -O2 and -O2 with fast math
#: (the article's default vs /fp:fast builds).
DEFAULT_RUN_FLAGS = ("-O2", "-O2 -ffast-math")


def timing_options(default_repeat: int):
    def decorate(command):
        command = kernel_timeout_option(command)
        command = click.option(
            "--max-minutes",
            default=MAX_RUN_MINUTES,
            show_default=True,
            type=float,
            help="Refuse a run expected to take longer (checked before it starts, and again once calibrated).",
        )(command)
        command = click.option(
            "--min-time",
            "min_sample_s",
            default=DEFAULT_MIN_SAMPLE_S,
            show_default=True,
            type=float,
            help="Minimum seconds per sample, above 0 and at most 10; the call count is calibrated to reach it.",
        )(command)
        command = click.option(
            "--repeat",
            default=default_repeat,
            show_default=True,
            type=int,
            help="Samples (interleaved rounds) per kernel, 1 to 1000.",
        )(command)
        return command

    return decorate


def kernel_timeout_option(command):
    return click.option(
        "--kernel-timeout",
        default=DEFAULT_KERNEL_TIMEOUT_S,
        show_default=True,
        type=float,
        help="Seconds a kernel may go without answering (the floor of every deadline) before its worker "
        "is killed and its row is timed-out.",
    )(command)


def size_options(command):
    command = click.option(
        "--seed", default=RunConfig.seed, show_default=True, type=SEED, help="Scene seed (an integer >= 0)."
    )(command)
    command = click.option(
        "-m",
        "--points",
        default=RunConfig.points,
        show_default=True,
        help="M: points, each tested against every shape.",
    )(command)
    command = click.option(
        "-n",
        "--shapes",
        "--sectors",
        "sectors",
        default=RunConfig.sectors,
        show_default=True,
        help="N: shapes of the family (--sectors, its older name, works too).",
    )(command)
    return command


@main.command("run", cls=SceneCommand)
@size_options
@family_option("The family to time [default: the scene's; without --scene, the first registered family].")
@scene_option("[default: the family's first]; its options follow below (--world, --vertices, ...)")
@click.option(
    "--kernels",
    multiple=True,
    callback=comma_list,
    help=f"Kernels to time, e.g. naive,sse2 [default: {KERNELS_DEFAULT}].",
)
@broadphase_option
@build_options(DEFAULT_RUN_FLAGS)
@click.option(
    "--mode",
    "modes",
    multiple=True,
    default=RunConfig.modes,
    show_default=True,
    type=click.Choice(MODES),
    callback=unique,
    help="inline: predicate inlined in the loop; call: called through a pointer per test (repeatable).",
)
@threads_option
@timing_options(DEFAULT_REPEAT)
@output_options
@export_option
@click.option(
    "--save", "save_to_results", is_flag=True, help="Also save a timestamped JSON under ./results [default: off]."
)
@click.option(
    "--baseline",
    type=INPUT_PATH,
    help="Gate this run against a saved result: exit 1 on a significant regression [default: no gate].",
)
@gate_options
@click.option(
    "--against",
    metavar="REF",
    help="Same-job A/B: also build your --source files (and, in a sectorbench checkout, kernels_c/) as they "
    "are at this git ref, time both in the same rounds and gate head against base [default: no A/B].",
)
@click.option(
    "--against-source",
    type=INPUT_PATH,
    callback=regular_files,
    help="Same-job A/B against this old copy of the one --source file (a file outside git) [default: none].",
)
@click.option(
    "--confirm/--no-confirm",
    default=True,
    help="Gate mode: re-measure a kernel flagged as regressed once, in fresh rounds; it fails only if flagged "
    "again [default: --confirm].",
)
@metric_option("a gate (--baseline, --against) then uses the counts where both sides have them.")
def run_command(
    sectors,
    points,
    seed,
    family,
    scene,
    kernels,
    broadphases,
    flags,
    cc,
    sources,
    disable_isa,
    modes,
    threads,
    repeat,
    min_sample_s,
    max_minutes,
    kernel_timeout,
    json_path,
    force,
    exports,
    save_to_results,
    baseline,
    alpha,
    threshold,
    thresholds,
    normalize,
    markdown_path,
    against,
    against_source,
    confirm,
    metric,
    **scene_values,
):
    """Time kernels over a seeded scene, NoOperation overhead subtracted."""
    if against is not None and not against.strip():
        # what `--against "$(git merge-base origin/main HEAD)"` passes when the merge base is
        # missing (a shallow clone): silently running without the gate would pass every change
        raise click.UsageError("--against needs a git ref, and got an empty one (did git merge-base fail?)")
    if against and against_source:
        raise click.UsageError("give --against or --against-source, not both")
    if baseline and (against or against_source):
        raise click.UsageError("--baseline gates against a saved result, --against in the same run: give one")
    refuse_unused_gate_options(click.get_current_context(), baseline or against or against_source)
    check_outputs(
        force,
        json_path,
        markdown_path,
        *(path for _, path in exports),
        save=save_to_results,
        inputs=(baseline, thresholds, against_source, *sources),
    )
    gate_config = make_gate_config(alpha, threshold, thresholds, normalize)
    note_cache_fallback()
    config = RunConfig(
        scene=scene,
        family=family,
        sectors=sectors,
        points=points,
        seed=seed,
        kernels=kernels,
        builds=build_configs(flags, cc, sources),
        modes=modes,
        timing=TimingConfig(repeat=repeat, min_sample_s=min_sample_s),
        disable_isa=disable_isa,
        threads=threads,
        max_minutes=max_minutes,
        kernel_timeout=kernel_timeout,
        broadphases=broadphases,
        scene_options=given_scene_options(scene_values),
    )
    config = resolve(config)  # an unknown or mismatched scene is refused here, before any work
    check_default_kernels_time(config)
    baseline_result = checked_baseline(baseline, config, gate_config, metric) if baseline else None
    if against or against_source:
        check_ab_rounds(config, gate_config, metric)
        run_ab(
            config,
            against,
            against_source,
            sources,
            gate_config,
            confirm,
            metric,
            json_path,
            force,
            save_to_results,
            markdown_path,
            exports,
        )
        return
    result = with_metric(config, metric, lambda: measure(config, baseline_result, gate_config))
    from ..present.report import RUN_DROP, fit, run_table

    console = stdout()
    console.print(fit(run_table(result), console.width, RUN_DROP, whole_lines=True))
    print_instructions(result, metric, gated=baseline_result is not None)
    saved = write_json(result, json_path, force, save_to_results)
    write_exports(result, exports, force, gated=baseline_result is not None, saved=saved)
    if baseline_result is not None:
        revise = gate_revision(config, baseline_result, result, gate_config, confirm, metric)
        run_gate(
            baseline_result,
            result,
            gate_config,
            markdown_path,
            force,
            str(baseline),
            "this run",
            rescue=result_json(result),
            revise=revise,
        )


def checked_baseline(baseline, config: RunConfig, gate_config, metric: str):
    """run --baseline's result, refused before any work when this run cannot be gated on it:
    another scene, builds or rows it lacks, or too few rounds for a time gate to reach alpha."""
    from dataclasses import replace

    from ..compare.gate import (
        COUNTS_OF_ONE_BUILD,
        check_power,
        check_scene,
        check_selection,
        compiler_versions,
        native_expansions,
        other_compiler,
        other_native,
    )
    from ..measure.instructions import unavailable
    from ..measure.runner import build_row
    from ..model.results import PEER_CC
    from ..native.environment import compiler_fingerprint

    baseline_result = load_plain(baseline)
    check_scene(
        baseline_result, describe_scene(config.scene, config.sectors, config.points, config.seed, config.scene_options)
    )
    builds = [build_row(build)[::-1] for build in config.builds]  # (cc, flags), as a row's key
    check_selection(baseline_result, builds, config.modes, config.threads)
    repeat = config.timing.repeat
    if metric != "instructions":
        check_power(baseline_result, repeat, gate_config.alpha)
        return baseline_result
    if (missing := unavailable()) is not None:
        timed, why = baseline_result.results, f"no row can be counted, each is gated on time ({missing})"
    else:
        # Rows the baseline counted may be gated on counts, which need no rounds: known after
        # counting (ab.count_revision); those it did not count, or counted with another compiler
        # than this run's (gate.comparable_counts), are gated on time, surely
        versions, natives = compiler_versions(baseline_result), native_expansions(baseline_result)
        now = {cc: compiler_fingerprint(cc).get("version_line") for cc in versions if cc != PEER_CC}
        native_now = {cc: compiler_fingerprint(cc).get("march_native") for cc in natives if cc != PEER_CC}
        timed = [
            row
            for row in baseline_result.results
            if row.instructions is None
            or other_compiler(row.cc, versions, now)
            or other_native(row.cc, row.flags.split(), natives, native_now)
        ]
        other = next((row for row in timed if row.instructions is not None), None)
        why = other and (
            f"BASELINE counted {other.kernel} with {versions[other.cc]}, this run's {other.cc} is "
            f"{now[other.cc]}: {COUNTS_OF_ONE_BUILD}, and such rows are gated on time"
            if other_compiler(other.cc, versions, now)
            else f"{other.kernel} [{other.flags}]: {other_native(other.cc, other.flags.split(), natives, native_now)}: "
            f"{COUNTS_OF_ONE_BUILD}, and such rows are gated on time"
        )
    try:
        if timed:
            check_power(replace(baseline_result, results=timed), repeat, gate_config.alpha)
    except SectorbenchError as exc:
        if not why:
            raise
        # said with why counts do not spare the rounds, as check_ab_rounds says it
        raise SectorbenchError(f"--metric instructions: {why}; and {exc}") from None
    return baseline_result


def check_ab_rounds(config: RunConfig, gate_config, metric: str) -> None:
    """run --against's rounds, refused before any build when a time gate cannot reach alpha
    with them.  Counts need no rounds, but every row valgrind cannot count is gated on time:
    without valgrind that is every row, so refused now; one that cannot be counted (AVX-512
    code, valgrind failing on it) is known after counting, and refused then (ab.count_revision)."""
    from ..compare import gate
    from ..measure.instructions import unavailable

    uncountable = unavailable() if metric == "instructions" else None
    if metric == "time" or uncountable:
        try:
            gate.check_ab_rounds(config.timing.repeat, gate_config.alpha)
        except SectorbenchError as exc:
            if uncountable is None:
                raise
            # said with why counts do not spare the rounds here: a --metric instructions run
            # with few rounds on purpose read only "--repeat 3: ... cannot reach alpha"
            raise SectorbenchError(
                f"--metric instructions: no row can be counted, each is gated on time ({uncountable}); and {exc}"
            ) from None


def check_default_kernels_time(config: RunConfig) -> None:
    """Refuse an oversized run before its scene is made, also when --kernels is not given.

    runner.check_time counts one kernel a build then (the fewest series the run can have),
    and the plan's own check, with every default kernel, came only after the scene was
    generated: `run -n 50000000 -m 1000` spent 47 s and 4.5 GB before "its 24 series would
    take about 4.0 h".  Here, when even every kernel of the family in the first build's
    sources (read without compiling) would not fit, that build's default, runnable kernels
    are counted (listed by a worker: about a second from the cache, the build's compile first
    otherwise, which the run needs anyway) and the run checked
    with them.  A build that fails is left to the run, which reports it."""
    import contextlib
    from dataclasses import replace

    from ..families import get
    from ..families.scene_kinds import check_scene_size
    from ..measure.runner import check_time
    from ..measure.selection import known_kernels, peer_names
    from ..measure.worker import BuildSession
    from ..native.build import build

    if config.kernels or not config.builds:
        return
    family = get(config.family)
    check_scene_size(config.scene, config.sectors, config.points, config.scene_options)
    broadphases = tuple(config.broadphases or family.default_broadphases(config.scene))
    if "none" not in broadphases:  # the kernels are not timed on this scene: only its indexes
        return
    config = replace(config, broadphases=broadphases)
    known = known_kernels(config.builds[0]) or {}
    peers = peer_names(family)
    every = tuple(name for name, of in known.items() if of == family.name and name not in peers)
    try:
        check_time(replace(config, kernels=every))
        return
    except SectorbenchError:
        pass  # over the limit with every kernel: count the ones the run would time
    try:
        first = config.builds[0]
        with contextlib.closing(BuildSession(first, build(first), disable_isa=config.disable_isa)) as session:
            kernels = session.kernels
    except SectorbenchError:
        return
    timed = tuple(k.name for k in kernels if k.family == family.name and k.is_default and k.runnable)
    if timed:
        check_time(replace(config, kernels=timed))


def measure(config: RunConfig, baseline=None, gate_config=None, against_label=None):
    """Run with progress on stderr; the plan is printed (and checked against a baseline) before timing."""

    def on_plan(plan: Plan) -> None:
        if baseline is not None:
            from ..compare.gate import check_rows

            check_rows(baseline, plan.rows, gate_config.normalize, plan.unrunnable)
        if config.base_builds:
            from ..compare.against import check_common

            check_common(plan.rows, plan.sides, against_label, gate_config.normalize if gate_config else None)
        note(plan.describe())

    with Reporter() as progress:
        result = run(config, progress, on_plan)
    for entry in result.env.get("builds", []):
        if entry.get("failure"):  # its rows say so too, but a narrow table may drop their notes
            label = build_label(entry["cc"], " ".join(entry["flags"]), True)
            note(f"note: {label}: {entry['status']} (its rows were not measured): {entry['reason']}")
        said = [line for line in entry.get("compiler_warnings", "").splitlines() if "warning:" in line]
        if said:
            more = f" (and {len(said) - 1} more: --json keeps them)" if len(said) > 1 else ""
            note(f"note: {build_label(entry['cc'], ' '.join(entry['flags']), True)}: {said[0].strip()}{more}")
    return result


#: compare's default builds: a flag ladder, from unoptimised to native fast math.
COMPARE_FLAGS = ("-O0", "-O2", "-O2 -msse2", "-O2 -ffast-math", "-O3 -march=native", "-O3 -march=native -ffast-math")
#: The article's two tables: x87 (Win32 default) vs SSE2 scalar code, each with and without fast math.
#: On x86-64, -mfpmath=387 is what the article's build without /arch:SSE2 was.
ARTICLE_PRESET = dict(
    flags=("-O2 -mfpmath=387", "-O2 -mfpmath=387 -ffast-math", "-O2", "-O2 -ffast-math"),
    scene="article",
    modes=("call",),
)
COMPARE_REPEAT = 10  # 10 paired rounds give a 95 % interval that is not just min..max
#: --quick, a first look: a tenth of the points and half the rounds, about a tenth of the
#: time (the intervals are wider; rerun without it for numbers to keep).
QUICK = dict(points=10_000, repeat=5)


@main.command("compare", cls=SceneCommand)
@click.option(
    "--preset",
    type=click.Choice(["article"]),
    help="article: its flag pairs, its data, its call loop [default: none, the flag ladder below].",
)
@click.option(
    "--quick",
    is_flag=True,
    help=f"A first look: M={QUICK['points']:,} and {QUICK['repeat']} rounds unless -m/--repeat are given"
    " [default: off].",
)
@size_options
@family_option("The family to time [default: the scene's; without --scene, the first registered family].")
@scene_option("[default: the family's first; article with --preset article]")
@click.option(
    "--kernels",
    multiple=True,
    callback=comma_list,
    help=f"Kernels to time [default: {KERNELS_DEFAULT}].",
)
@build_options(COMPARE_FLAGS)
@click.option(
    "--mode",
    "modes",
    multiple=True,
    type=click.Choice(MODES),
    callback=unique,
    help="Loop mode(s), repeatable [default: inline; call with --preset article].",
)
@threads_option
@timing_options(COMPARE_REPEAT)
@output_options
@export_option
@click.option(
    "--save", "save_to_results", is_flag=True, help="Also save a timestamped JSON under ./results [default: off]."
)
@click.option(
    "--table", is_flag=True, help="Also print the full run table before the matrix [default: the matrix alone]."
)
@metric_option("shown in a table under the matrix and kept in the JSON.")
def compare_command(
    preset,
    quick,
    sectors,
    points,
    seed,
    family,
    scene,
    kernels,
    flags,
    cc,
    sources,
    disable_isa,
    modes,
    threads,
    repeat,
    min_sample_s,
    max_minutes,
    kernel_timeout,
    json_path,
    force,
    exports,
    save_to_results,
    table,
    metric,
    **scene_values,
):
    """Time the kernels under several flag sets and compilers in the same rounds; print the matrix."""
    from ..present.report import RUN_DROP, compare_table, fit, run_table, split, unmeasured_lines

    ctx = click.get_current_context()

    def defaulted(name: str) -> bool:
        return ctx.get_parameter_source(name) == click.core.ParameterSource.DEFAULT

    if preset == "article":
        flags = ARTICLE_PRESET["flags"] if defaulted("flags") else flags
        scene = scene or ARTICLE_PRESET["scene"]
        modes = modes or ARTICLE_PRESET["modes"]
    if quick:
        points = QUICK["points"] if defaulted("points") else points
        repeat = QUICK["repeat"] if defaulted("repeat") else repeat
    check_outputs(force, json_path, *(path for _, path in exports), save=save_to_results, inputs=sources)
    build_configs(flags, cc, sources)  # duplicates are refused before compilers are looked for
    installed = tuple(c for c in cc if shutil.which(c))
    if not installed:
        raise SectorbenchError(f"none of the compilers is installed: {', '.join(cc)}")
    note_cache_fallback()
    config = RunConfig(
        scene=scene,
        family=family,
        sectors=sectors,
        points=points,
        seed=seed,
        kernels=kernels,
        builds=build_configs(flags, installed, sources),
        modes=modes or RunConfig.modes,
        timing=TimingConfig(repeat=repeat, min_sample_s=min_sample_s),
        disable_isa=disable_isa,
        threads=threads,
        max_minutes=max_minutes,
        scene_options=given_scene_options(scene_values),
        kernel_timeout=kernel_timeout,
    )
    config = resolve(config)
    check_default_kernels_time(config)
    for missing in (c for c in cc if c not in installed):
        note(f"compiler {missing!r} is not installed: its builds are left out")
    result = with_metric(config, metric, lambda: measure(config))
    console = stdout()
    if table:
        console.print(fit(run_table(result), console.width, RUN_DROP, whole_lines=True))
    for part in split(compare_table(result), console.width):
        console.print(part)
    for line in unmeasured_lines(result):
        console.print(line, soft_wrap=True, highlight=False, markup=False)
    print_instructions(result, metric)
    saved = write_json(result, json_path, force, save_to_results, label="compare")
    write_exports(result, exports, force, saved=saved)
