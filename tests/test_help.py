"""Every option of every subcommand says what it does and what it defaults to."""

from __future__ import annotations

import click
import pytest
from click.testing import CliRunner

from sectorbench.cli import main

OPTIONS = [
    (name, param)
    for name, command in sorted(main.commands.items())
    for param in command.params
    if isinstance(param, click.Option) and param.name not in ("help", "version")
]


def test_every_subcommand_has_options_to_check():
    assert {name for name, _ in OPTIONS} >= {"run", "compare", "verify", "kernels", "regress", "plot"}


@pytest.mark.parametrize("command, option", OPTIONS, ids=[f"{c} {o.opts[-1]}" for c, o in OPTIONS])
def test_option_has_help_with_its_default(command, option):
    assert option.help and len(option.help) > 10, f"{command} {option.opts}: no help"
    shows_default = option.show_default is True and option.default is not None and not option.is_flag
    assert shows_default or "[default: " in option.help or option.required, (
        f"{command} {option.opts[-1]}: the help does not say its default"
    )
    if option.is_flag:
        assert "[default: " in option.help
    # click would add its own "[default: cc]" after "[default: $CC, else cc]."
    assert not (option.show_default is True and "[default: " in option.help), f"{command} {option.opts[-1]}: twice"


def test_help_renders_the_defaults():
    result = CliRunner().invoke(main, ["compare", "--help"])
    assert result.exit_code == 0
    for text in ("[default: 10]", "--quick", "--max-minutes", "[default: 60.0]"):
        assert text in result.output


#: Help texts that live in another engineer's file and are still to be mended there.
NOT_YET: dict[tuple[str, str], str] = {}


@pytest.mark.parametrize(
    "command, option",
    [
        pytest.param(c, o, marks=[pytest.mark.xfail(reason=NOT_YET[c, o.name])] if (c, o.name) in NOT_YET else [])
        for c, o in OPTIONS
    ],
    ids=[f"{c} {o.opts[-1]}" for c, o in OPTIONS],
)
def test_required_is_said_once(command, option):
    """click adds "[required]" to a required option's help itself."""
    assert "(required)" not in option.help, f"{command} {option.opts[-1]}: says (required) besides click's [required]"


FORCES = [(command, option) for command, option in OPTIONS if option.name == "force"]


@pytest.mark.parametrize("command, option", FORCES, ids=[command for command, _ in FORCES])
def test_every_force_says_what_it_replaces_and_its_default_alike(command, option):
    assert "regular file" in option.help and option.help.endswith("[default: refuse]."), f"{command}: {option.help}"


def test_verify_says_which_kernels_it_leaves_out():
    kernels = next(option for command, option in OPTIONS if command == "verify" and option.name == "kernels")
    assert "known-bad ones left out" in kernels.help and "peers (numpy, numba, kdtree)" in kernels.help


@pytest.mark.parametrize("size", [["-n", "0"], ["-m", "0"], ["--shapes", "-3"]])
def test_query_names_the_size_option_it_refuses(tmp_path, size):
    result = CliRunner().invoke(main, ["query", *size, "--out", str(tmp_path / "hits.npz")])
    assert result.exit_code == 2 and not (tmp_path / "hits.npz").exists()
    named = "'-n' / '--shapes'" if size[0] in ("-n", "--shapes") else "'-m' / '--points'"
    assert named in result.output and "--sectors and --points" not in result.output, result.output
