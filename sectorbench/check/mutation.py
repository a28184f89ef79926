"""The verifier's teeth as a number: verify mutant kernels and score how many are caught.

A mutant is a `.known_bad` row of the given C files, each a bug seen in real code; a
row of those files that is not known-bad is a correct variant, which must pass.
`score()` runs verify on them per family and says, for each, whether it was caught,
in which class and by which generator; tools/mutation.py prints it (`make mutation`).
"""

from __future__ import annotations

import contextlib
from dataclasses import dataclass
from pathlib import Path

from ..measure.worker import BuildSession
from ..native.build import DEFAULT_FLAGS, BuildConfig, build
from .verify import VerifyConfig, verify


@dataclass(frozen=True)
class MutantResult:
    kernel: str
    family: str
    summary: str
    mutant: bool  # False: a correct variant, which must pass
    verdict: str
    klass: str | None  # class of the first failing input (a loop check is a logic-bug)
    generator: str | None  # the generator (case group) of the first failing input

    @property
    def as_expected(self) -> bool:
        return (self.verdict == "FAIL") == self.mutant


def score(
    sources: list[Path], *, cases: int = VerifyConfig.cases, seed: int = VerifyConfig.seed, flags: str = DEFAULT_FLAGS
) -> list[MutantResult]:
    """Every row defined in `sources`, verified at `cases` and `seed` with one build of `flags`."""
    config = BuildConfig.parse(flags, extra_sources=tuple(sources))
    names = {Path(source).name for source in sources}
    with contextlib.closing(BuildSession(config, build(config))) as session:
        kernels = session.kernels
    mine = [k for k in kernels if k.source.split(":")[0] in names]
    results = []
    for family in dict.fromkeys(k.family for k in mine):
        chosen = [k for k in mine if k.family == family]
        outcome = verify(
            VerifyConfig(
                family=family, kernels=tuple(k.name for k in chosen), builds=(config,), cases=cases, seed=seed, show=1
            )
        )
        verdicts = {v.kernel: v for v in outcome.kernels}
        for kernel in chosen:
            verdict = verdicts[kernel.name]
            first = verdict.failing[0] if verdict.failing and verdict.verdict == "FAIL" else None
            results.append(
                MutantResult(
                    kernel.name,
                    family,
                    kernel.summary,
                    kernel.known_bad,
                    verdict.verdict if verdict.status == "ok" else f"{verdict.status}: {verdict.reason}",
                    first["class"] if first else None,
                    first["group"] if first else None,
                )
            )
    return results
