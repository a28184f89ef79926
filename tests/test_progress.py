"""What a person sees while it runs: a plan and its expected time first, progress that names
the series ("calibrating basic [-O2, inline]") with the time left, a heartbeat when stderr is
not a terminal, and sizes refused with how long they would take."""

from __future__ import annotations

import io
import json
import time

import pytest
from click.testing import CliRunner
from rich.console import Console

from sectorbench.cli import main
from sectorbench.cli.app import Reporter
from sectorbench.cli.measure import QUICK
from sectorbench.errors import SectorbenchError
from sectorbench.measure import runner
from sectorbench.measure.runner import RunConfig, _TimeLeft, run
from sectorbench.measure.timing import Series, TimingConfig, duration, estimate_s
from sectorbench.native.build import DEFAULT_CC, BuildConfig


def test_run_reports_a_plan_then_named_steps_with_the_time_left():
    config = RunConfig(
        sectors=20,
        points=500,
        kernels=("basic", "sse2"),
        builds=(BuildConfig.parse("-O2"),),
        timing=TimingConfig(repeat=3, min_sample_s=0.001),
    )
    steps, plans = [], []
    run(config, lambda what, left_s=None: steps.append((what, left_s)), plans.append)
    assert len(plans) == 1 and plans[0].series == 4 and plans[0].rows[0][:4] == ("basic", DEFAULT_CC, "-O2", "inline")
    assert "1 build × 2 kernels × 1 mode (+ 2 NoOperation loops), 3 rounds" in plans[0].describe()
    whats = [what for what, _ in steps]
    assert "calibrating basic [-O2, inline]" in whats
    assert any(what.startswith("round 3/3: sse2 [-O2, inline]") for what in whats)
    assert not any("BuildConfig(" in what or "(" == what[:1] for what in whats)
    timed = [left for what, left in steps if what.startswith("round")]
    assert all(left is not None and left >= 0 for left in timed)
    assert timed[-1] < timed[0]  # the time left shrinks as rounds are taken


def test_time_left_uses_the_calibrated_call_counts():
    timing = TimingConfig(repeat=4, min_sample_s=0.01)
    done = Series(key="a", label="a", calibrate=None, take=None, calls=100, seconds_per_call=1e-4, samples=[0.01])
    fresh = Series(key="b", label="b", calibrate=None, take=None)
    clock = _TimeLeft([done, fresh], timing, tests=10_000)
    # a: 3 samples of 100 x 0.1 ms left; b: calibration (2 min-times) and 4 samples, priced like a
    assert clock.left_s() == pytest.approx(3 * 0.01 + 0.02 + 4 * 0.012)


def test_heartbeat_when_stderr_is_not_a_terminal(capsys):
    console = Console(file=io.StringIO(), force_terminal=False)
    with Reporter(console, heartbeat_s=0.05) as progress:
        progress("calibrating basic [-O2, inline]", 125.0)
        time.sleep(0.3)
    lines = capsys.readouterr().err.splitlines()
    assert len(lines) >= 3
    assert lines[0].startswith("sectorbench: calibrating basic [-O2, inline] (")
    assert "elapsed, about 2.1 min left)" in lines[0]


def test_the_live_bar_shows_a_step_as_written():
    """A step names kernels and flags, a --source kernel's or a saved file's: "[/]" was rich
    markup in the bar, and a MarkupError."""
    console = Console(file=io.StringIO(), force_terminal=True, width=120)
    with Reporter(console) as progress:
        progress("calibrating [/][bold]x [-O2, inline]", 5.0)
    assert "calibrating [/][bold]x [-O2, inline]" in console.file.getvalue()


def test_an_absurd_run_is_refused_with_how_long_it_would_take(monkeypatch):
    def no_scene(*args, **kwargs):
        raise AssertionError("the scene was generated before the refusal")

    monkeypatch.setattr(runner.scene_kinds, "generate", no_scene)
    with pytest.raises(SectorbenchError, match=r"would take about 2\.5 days .* --max-minutes"):
        run(RunConfig(sectors=3_000_000, points=3_000_000, timing=TimingConfig(repeat=2, min_sample_s=0.001)))
    assert estimate_s(2, 10**8, TimingConfig(), 4.0) == pytest.approx(2 * (0.4 + 5 * 0.4))


def test_a_run_its_plan_puts_over_max_minutes_is_refused_before_timing(tmp_path):
    """Checked before the build with one kernel (the fewest series), the default kernels' plan
    said "about 58 s" and the run started under --max-minutes 0.3: calibration ate the budget,
    every row came back timed-out, exit 0.  The plan, every series counted, is checked too."""
    args = ["run", "-n", "1000", "-m", "100000", "--flags", "-O0", "--repeat", "10", "--max-minutes", "1"]
    result = CliRunner().invoke(main, args)
    assert result.exit_code == 2, result.output
    # refused before the scene is made (cli/measure.check_default_kernels_time), or by the plan
    assert "would take about" in result.stderr and "over the limit of 1 min" in result.stderr
    assert "calibrating" not in result.stderr


@pytest.mark.parametrize(
    "seconds, text", [(0.25, "250 ms"), (42, "42 s"), (210, "3.5 min"), (7560, "2.1 h"), (216000, "2.5 days")]
)
def test_durations_read_as_a_person_says_them(seconds, text):
    assert duration(seconds) == text


def test_compare_quick_prints_its_plan_and_uses_the_smaller_scene(tmp_path):
    out = tmp_path / "quick.json"
    args = ["compare", "--quick", "-n", "20", "--min-time", "0.001", "--kernels", "basic"]
    result = CliRunner().invoke(main, [*args, "--flags", "-O0", "--flags", "-O2", "--json", str(out)])
    assert result.exit_code == 0, result.output
    plan = [line for line in result.stderr.splitlines() if line.startswith("plan:")]
    assert len(plan) == 1 and "2 builds × 1 kernel × 1 mode" in plan[0] and f"{QUICK['repeat']} rounds" in plan[0]
    assert "about" in plan[0]
    data = json.loads(out.read_text())
    assert data["scene"]["points"] == QUICK["points"] and data["config"]["repeat"] == QUICK["repeat"]


def test_kernels_builds_every_flag_set_given():
    """A flag set the compiler rejects costs its own listing, as it costs a run its own rows: it
    is named with the compiler's error and the other builds are listed (it stopped the command,
    exit 2, with none listed); only every build failing is the command's error."""
    result = CliRunner().invoke(main, ["kernels", "--flags", "-O2", "--flags", "-O2 -fno-such-flag-xyz"])
    assert result.exit_code == 0, result.output
    assert "kernels (-O2)" in result.stdout and "basic" in result.stdout, result.stdout
    (line,) = [line for line in result.stderr.splitlines() if "-fno-such-flag-xyz" in line]
    assert line.startswith("note: -O2 -fno-such-flag-xyz: build-failed, its kernels are not listed: "), line
    assert "error" in line, line  # the compiler's
    result = CliRunner().invoke(main, ["kernels", "--flags", "-O2 -fno-such-flag-xyz", "--flags", "-O2 -fno-other-xyz"])
    assert result.exit_code == 2, result.output
    (line,) = result.stderr.splitlines()
    assert "every build failed" in line and "-fno-such-flag-xyz" in line and "-fno-other-xyz" in line, line
