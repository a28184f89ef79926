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
    assert shows_default or "[default: " in option.help or "(required)" in option.help, (
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
