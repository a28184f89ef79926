"""verify's teeth as a number: every mutant caught, every correct variant passes (make mutation)."""

from __future__ import annotations

from pathlib import Path

import pytest

from sectorbench.check.mutation import score

DATA = Path(__file__).parent / "data"
SOURCES = [DATA / "broken_kernels.c", DATA / "mutants.c", DATA / "correct_variants.c"]


@pytest.fixture(scope="module")
def default_score():
    return {r.kernel: r for r in score(SOURCES)}


def test_at_least_25_new_mutants_of_both_families_and_3_correct_variants(default_score):
    mutants = [r for r in default_score.values() if r.mutant]
    assert len(mutants) >= 30 and {r.family for r in mutants} == {"sector", "triangle"}
    assert sum(not r.mutant for r in default_score.values()) >= 3


def test_every_mutant_caught_and_every_correct_variant_passes(default_score):
    wrong = {k: (r.verdict, r.klass, r.generator) for k, r in default_score.items() if not r.as_expected}
    assert not wrong


def test_the_tail_mask_bug_is_caught_on_the_case_rows_by_its_count_loops(default_score):
    """Its pairs and grid evaluations are right; only the count loops lose the tail's hits.  The
    loop scenes caught it first, until every case row was counted by each count loop over
    2 x lanes + 1 copies of its point (a tail of one): now the first case rows do."""
    assert default_score["m_tail_mask"].generator == "random"


def test_the_minus_zero_quadrant_bug_is_caught_by_signed_zero_rows(default_score):
    assert default_score["m_atan_quadrant"].generator == "signed-zero D"


@pytest.mark.parametrize("seed", [1, 2, 3, 4, 5])
def test_no_mutant_depends_on_luck(seed):
    missed = [r.kernel for r in score(SOURCES, seed=seed) if r.mutant and not r.as_expected]
    assert not missed


def test_the_range_bug_is_caught_by_the_split_range_loop_check(default_score):
    """Its loops are right over all shapes; only a loop over a share of them (as run --threads calls it) sees it."""
    assert default_score["m_ignores_range"].generator.startswith("loop check, shapes [")
