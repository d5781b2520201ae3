"""Adversarial validator modes, as subclasses of :class:`validator.node.ValidatorNode`.

Each overrides only the scoring step it cheats on; the rest (seed, reveal, settlement, merge, certify)
is the honest node's code, so the contract and the other validators see a normal participant.

- :class:`CopierValidator` does not verify; it commits the previous round's consensus scores (weight
  copying; the current round's scores are hidden by commit-reveal);
- :class:`RandomValidator` does not verify; it commits uniform random scores;
- :class:`ColludingValidator` verifies, then gives ``favoured`` the maximum score (a colluding minority);
- :class:`SilentValidator` verifies and commits but never reveals;
- :class:`BadSignerValidator` does everything honestly but serves a certificate signature of another
  checkpoint digest (valid BLS, wrong message), which would sink every aggregate that includes it;
- :class:`FalseReporterValidator` verifies and scores honestly, but reports every miner it audits as
  having left its audit unanswered (reverse attack: with c = 1 its report alone used to slash).
"""

from __future__ import annotations

import random
from typing import Any

from protocol.rounds.consensus import SCORE_MAX
from protocol.rounds.coordinator import RoundState
from validator.audits import report_unanswered, unanswered
from validator.checkpoints import Checkpoints
from validator.context import AuditRole, Verdict
from validator.node import ValidatorNode, compose


class _ScoringValidator(ValidatorNode):
    """Commits ``self.choose_scores(r, miners)`` instead of its verdicts' scores."""

    lazy = True
    """Skip verification (the copier and the random scorer save that compute)."""

    def choose_scores(self, round: int, miners: list[str]) -> list[int]:
        """The score vector to commit (ascending miner address order)."""
        raise NotImplementedError

    def _verify_all(self, st: RoundState, theta: Any, until_done: bool = False) -> bool | None:
        return super()._verify_all(st, theta, until_done) if not self.lazy else None

    def _round_scores(self, round: int, miners: list[str]) -> list[int]:
        return [max(0, min(SCORE_MAX, int(s))) for s in self.choose_scores(round, miners)]


class CopierValidator(_ScoringValidator):
    """Weight copier: the previous round's consensus score of each miner (0 for a newcomer)."""

    def choose_scores(self, round: int, miners: list[str]) -> list[int]:
        """Last round's consensus."""
        prev = self.coord.settlement(round - 1) if round > 1 else None
        cons = {k.lower(): v for k, v in (prev.consensus if prev else {}).items()}
        if not cons:  # nothing to copy: the mean honest score is unknown, so a flat middle score
            return [SCORE_MAX // 10 for _ in miners]
        return [int(cons.get(m.lower(), 0)) for m in miners]


class RandomValidator(_ScoringValidator):
    """Uniform random scores."""

    def __init__(self, *args: Any, seed: int = 0, **kwargs: Any) -> None:
        super().__init__(*args, **kwargs)
        self.rng = random.Random(seed)

    def choose_scores(self, round: int, miners: list[str]) -> list[int]:
        """Random."""
        return [self.rng.randint(0, SCORE_MAX) for _ in miners]


class ColludingValidator(_ScoringValidator):
    """Verifies honestly, then scores ``favoured`` at the maximum (and, with ``punish``, the rest at 0)."""

    lazy = False

    def __init__(self, *args: Any, favoured: str = "", punish: bool = False, **kwargs: Any) -> None:
        super().__init__(*args, **kwargs)
        self.favoured = favoured.lower()
        self.punish = punish

    def choose_scores(self, round: int, miners: list[str]) -> list[int]:
        """Honest verdicts, bent towards the favoured miner."""
        out = []
        for m in miners:
            if m.lower() == self.favoured:
                out.append(SCORE_MAX)
            elif self.punish:
                out.append(0)
            else:
                v = self.state.verdict(round, m)
                out.append(v.score if v else 0)
        return out


class SilentValidator(ValidatorNode):
    """Verifies and commits its scores, but never reveals them."""

    def _reveal_scores(self, round: int) -> None:
        return None


class _BadSigningCheckpoints(Checkpoints):
    """Signs the certificate of the bit-flipped digest."""

    def sign_checkpoint(self, round: int, digest: bytes) -> bytes:
        return self.conn.coord.sign_checkpoint(round, bytes(x ^ 0xFF for x in digest))


class BadSignerValidator(ValidatorNode):
    """Signs (and serves) the certificate of a digest other than the one it merged: the honest node
    composed with a checkpoints service that signs the wrong digest."""

    def __init__(
        self, cfg: Any, spec: Any, coord: Any, discovery: Any, private_key: str, **kwargs: Any
    ) -> None:
        kwargs["services"] = compose(
            cfg,
            spec,
            coord,
            discovery,
            check_evidence=kwargs.get("check_evidence"),
            traffic=kwargs.get("traffic"),
            checkpoints=_BadSigningCheckpoints,
        )
        super().__init__(cfg, spec, coord, discovery, private_key, **kwargs)


class FalseReporterValidator(ValidatorNode):
    """The honest node, except that every miner it audits (on its committee) and was served by is also
    reported unanswered: the lie that "not served" cannot disprove on chain."""

    def _record_verdict(self, round: int, miner: str, verdict: Verdict) -> None:
        super()._record_verdict(round, miner, verdict)
        if (
            verdict.evidence.get("audit") == AuditRole.AUDIT
            and not verdict.provable
            and not unanswered(verdict)
        ):
            report_unanswered(self.coord, verdict)
