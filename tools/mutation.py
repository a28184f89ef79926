"""make mutation: the mutation score of `verify` on tests/data's mutant and correct kernels.

Prints one row per kernel (mutant or correct variant: caught?, class, generator) and the
score; exits 1 unless every mutant is caught and every correct variant passes.
Usage: python tools/mutation.py [--cases N] [--seed S]...
"""

from __future__ import annotations

import argparse
import sys
import time
from pathlib import Path

from rich.console import Console
from rich.table import Table

from sectorbench.check.mutation import score

DATA = Path(__file__).resolve().parent.parent / "tests" / "data"
SOURCES = [DATA / "broken_kernels.c", DATA / "mutants.c", DATA / "correct_variants.c"]


def main() -> int:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--cases", type=int, default=20_000)
    parser.add_argument("--seed", type=int, action="append", help="repeatable; default 0")
    args = parser.parse_args()
    console = Console()
    ok = True
    for seed in args.seed or [0]:
        start = time.perf_counter()
        results = score(SOURCES, cases=args.cases, seed=seed)
        table = Table(title=f"mutation score: --cases {args.cases}, seed {seed}", title_justify="left")
        for name in ("kernel", "family", "bug", "expected", "verdict", "class", "caught by"):
            table.add_column(name)
        for r in results:
            style = "" if r.as_expected else "bold red"
            table.add_row(
                r.kernel,
                r.family,
                r.summary,
                "caught" if r.mutant else "passes",
                r.verdict,
                r.klass or "–",
                r.generator or "–",
                style=style,
            )
        console.print(table)
        mutants = [r for r in results if r.mutant]
        caught = sum(r.as_expected for r in mutants)
        correct = [r for r in results if not r.mutant]
        console.print(
            f"seed {seed}: {caught}/{len(mutants)} mutants caught ({caught / len(mutants):.0%}), "
            f"{sum(r.as_expected for r in correct)}/{len(correct)} correct variants pass "
            f"({time.perf_counter() - start:.1f} s)"
        )
        ok &= all(r.as_expected for r in results)
    return 0 if ok else 1


if __name__ == "__main__":
    sys.exit(main())
