"""Which mutants a score was measured on, and whether that is the sample a card's floor judges.

A card's ``mutation: {min_score: S}`` floor was set on one sample: the
default one (:data:`FLOOR`). A score is a number about the mutants it ran, so
it can judge the floor only when it ran those mutants, judged the same way:

- **drawn**: the mutants of the claimed code as it is (the bytes are the
  score's binding, :func:`harness.mutation.score.score_digest`: the card, its
  claim, its witnesses, the covered files, the settings and the numerics line
  of the configuration, so a score measured under another configuration or
  ``KVPROOF_*`` setting is stale, never another sample), sampled by
  :func:`harness.mutation.generate.sample` with the sampling seed and at most
  ``max_mutants`` a card, or only the ``--mutant`` keys chosen;
- **judged**: under the Hypothesis profile and seed the mutants ran under
  (:func:`harness.mutation.stage.mutant_config`: a ``release`` run's mutants
  run under ``ci`` with seed 0, as a ``ci`` run's do) and the run's default
  ``--timeout`` (a mutant that runs past its limit counts as detected);
- by this kvproof's generator and sampler (:data:`SAMPLER_VERSION`).

:class:`Sample` holds those parameters; its :attr:`Sample.key` is what the
ledger stores with every score. A score whose drawn mutants are exactly the
floor sample's, judged under the floor's conditions, is stored with
``FLOOR.key`` whatever its own parameters (``--max-mutants 0`` on a card with
fewer than 40 mutants draws them all, as the default does): only such a score
judges a floor. Any other is shown, "measured on a partial sample (...)" or
"measured on another sample (...)" (:func:`difference`), and never judges;
not even below the floor, since a score on other mutants says nothing of the
floor's (it is shown, with the mutants it ran). How the mutants run (``-j``,
``--slow``, the executor) is not part of a sample: every path gives the same
statuses (tests/harness/mutation/test_mutate_fast.py).
"""

from __future__ import annotations

import hashlib
from collections.abc import Iterable
from dataclasses import dataclass

from harness.project import command as run_command

# NOTE: bump when generate.py, cgen.py or generate.sample change which mutants a (seed, max_mutants) draws or
# what a key names, or when a FLOOR constant below changes: every score measured before then stops judging.
SAMPLER_VERSION = 1
DEFAULT_MAX_MUTANTS = 40  # the floor sample's --max-mutants
FLOOR_SEED = 0  # the floor sample's sampling seed (mutate --seed)
FLOOR_PROFILE = "ci"  # the Hypothesis profile the floor sample's mutants run under
FLOOR_HYPOTHESIS_SEED = 0  # ... and their Hypothesis seed (the ci profile's own)
FLOOR_TIMEOUT_S = 60.0  # the run's default --timeout (harness.request.RunRequest.timeout)


@dataclass(frozen=True)
class Sample:
    """What a mutation score was measured on: which mutants were drawn, and how they were judged."""

    seed: int = FLOOR_SEED  # the sampling seed
    max_mutants: int | None = DEFAULT_MAX_MUTANTS  # at most this many a card; None: every mutant
    chosen: tuple[str, ...] = ()  # only these mutant keys (--mutant), no sampling
    profile: str = FLOOR_PROFILE  # the Hypothesis profile the mutants ran under
    hypothesis_seed: int | None = FLOOR_HYPOTHESIS_SEED  # their Hypothesis seed
    timeout_s: float = FLOOR_TIMEOUT_S  # the run's default per-witness timeout (a mutant's limit is below it)
    sampler: int = SAMPLER_VERSION

    @property
    def conditions(self) -> str:
        """How its mutants were judged (a mutant's status depends on these, not on which others were drawn)."""
        return (
            f"sampler {self.sampler}; mutants under {self.profile}, Hypothesis seed {self.hypothesis_seed}; "
            f"timeout {self.timeout_s:g} s"
        )

    @property
    def key(self) -> str:
        """The sample as the ledger stores it: :attr:`conditions`, then the draw."""
        if self.chosen:
            digest = hashlib.sha256("\n".join(sorted(self.chosen)).encode()).hexdigest()[:12]
            draw = f"chosen {len(self.chosen)} ({digest})"
        else:
            most = "every mutant" if self.max_mutants is None else f"at most {self.max_mutants}"
            draw = f"seed {self.seed}; {most}"
        return f"{self.conditions}; {draw}"

    @property
    def judges_like_floor(self) -> bool:
        """Its mutants were judged as the floor sample's are (same conditions, nothing chosen by hand)."""
        return not self.chosen and self.conditions == FLOOR.conditions


FLOOR = Sample()  # the sample every floor (mutation.min_score) was set on, and the only one that judges it


def on_floor(sample: Sample, drawn: Iterable[str], floor_drawn: Iterable[str]) -> bool:
    """Whether a score measured on ``sample``, whose mutants were ``drawn`` (keys), is a score on the floor's
    sample: judged as the floor's are, and exactly the mutants the floor's sample draws from the same code
    (``floor_drawn``), whatever the parameters that drew them."""
    return sample.judges_like_floor and set(drawn) == set(floor_drawn)


def stored_key(sample: Sample, floor: bool) -> str:
    """The key stored with a score: :data:`FLOOR`'s when it was measured on the floor's sample, else its own."""
    return FLOOR.key if floor else sample.key


def is_partial(sample: Sample) -> bool:
    """A sample that runs fewer mutants than the floor's (chosen keys, a smaller --max-mutants)."""
    smaller = sample.max_mutants is not None and (FLOOR.max_mutants is None or sample.max_mutants < FLOOR.max_mutants)
    return bool(sample.chosen) or smaller


def difference(sample: Sample) -> str:
    """Why a score measured on ``sample`` does not judge a floor: ``measured on a partial sample (at most 1
    mutant a card, not 40)``; every parameter that differs from :data:`FLOOR`'s is named."""
    parts = []
    if sample.sampler != FLOOR.sampler:
        parts.append(f"kvproof sampler version {sample.sampler}, not {FLOOR.sampler}")
    if sample.chosen:
        parts.append(f"only the {len(sample.chosen)} mutant key(s) given with --mutant")
    else:
        if sample.max_mutants != FLOOR.max_mutants:
            most = "every mutant" if sample.max_mutants is None else f"at most {sample.max_mutants} mutant(s) a card"
            parts.append(f"{most}, not at most {FLOOR.max_mutants}")
        if sample.seed != FLOOR.seed:
            parts.append(f"sampling seed {sample.seed}, not {FLOOR.seed}")
    if (sample.profile, sample.hypothesis_seed) != (FLOOR.profile, FLOOR.hypothesis_seed):
        parts.append(
            f"mutants under {sample.profile} with Hypothesis seed {sample.hypothesis_seed}, "
            f"not {FLOOR.profile} with seed {FLOOR.hypothesis_seed}"
        )
    if sample.timeout_s != FLOOR.timeout_s:
        parts.append(f"--timeout {sample.timeout_s:g} s, not {FLOOR.timeout_s:g}")
    if not parts:  # the same parameters, another draw: only when the sampler changed what they draw
        parts.append("a draw other than the floor sample's")
    return f"measured on {'a partial' if is_partial(sample) else 'another'} sample ({'; '.join(parts)})"


OLDER = "measured on another sample (by an older kvproof, which did not record its sample)"


def command(card_id: str) -> str:
    """The command that measures a card's score on its floor's sample, as it runs here (project.command)."""
    return run_command(f"mutate {card_id}")


__all__ = [
    "DEFAULT_MAX_MUTANTS",
    "FLOOR",
    "OLDER",
    "SAMPLER_VERSION",
    "Sample",
    "command",
    "difference",
    "is_partial",
    "on_floor",
    "stored_key",
]
