"""The audit draw of a round, identical to ``Consensus.auditDraw`` (contracts/src/Consensus.sol).

After a round's update commits close, its seed is fixed; from it anyone computes, per miner, whether the
(miner, round) pair is audited (probability ``q = audit_rate_bps / 10000``) and, if so, its committee of
``c`` validators (indices into the contract's registration-ordered ``validators`` list, ``n`` of them when
the seed was fixed: ``drawSize(round)``), and the witnesses who decide an unanswered-audit report with the
committee (``witness_draw``, ``Consensus.witnessDraw``). The contract settles an audited miner on its
committee's scores only (the others abstain) and lets only the committee report an unanswered audit. The
views ``TesseraNetwork.auditDraw(round, miner)`` and ``auditWitnesses`` return the same; ``python -m
protocol.rounds.audits --write-vectors FILE`` writes the vectors ``contracts/test/Vectors.t.sol`` replays
against the library.
"""

from __future__ import annotations

import random
import sys
from collections.abc import Sequence
from dataclasses import dataclass

from eth_abi import encode
from eth_utils import keccak, to_checksum_address

from protocol.rounds.consensus import BPS, ConsensusError
from protocol.wire.vectors import vectors_file, vectors_main

AUDIT_TAG = b"audit".ljust(32, b"\0")
"""The Solidity ``bytes32("audit")`` of the audit coin."""

REPORT_WINDOW_ROUNDS = 2
"""The contract's ``REPORT_WINDOW_ROUNDS``: an unanswered-audit report about round r takes votes until
round r + 2; after that anyone may close it with ``expireReport`` (the witness that contested it, the
reported miner itself; tests/chain/test_report_closing.py pins the two equal)."""


@dataclass(frozen=True)
class AuditDraw:
    """One (miner, round) pair's draw."""

    audited: bool
    """Whether the pair is audited."""
    committee: int
    """Bitmap of validator indices on its committee (bit i = ``validators[i]``); 0 when not audited."""

    def members(self, validators: Sequence[str]) -> list[str]:
        """The committee's addresses, given the contract's ``validators`` list in registration order."""
        return [v for i, v in enumerate(validators) if self.committee >> i & 1]

    def counts(self, validator_index: int) -> bool:
        """Whether the validator at ``validator_index`` scores this miner in the consensus."""
        return not self.audited or bool(self.committee >> validator_index & 1)


def audit_draw(seed: bytes, miner: str, n: int, audit_rate_bps: int, committee_size: int) -> AuditDraw:
    """``Consensus.auditDraw(seed, miner, n, rateBps, size)``: the audit coin, then ``committee_size``
    distinct indices below ``n`` (``keccak(seed, miner, k) % n`` for k = 0, 1, ..., repeats skipped);
    ``committee_size`` 0 or ``>= n`` means every validator."""
    if len(seed) != 32:
        raise ConsensusError(f"a round seed is 32 bytes, not {len(seed)}")
    if n < 0 or audit_rate_bps < 0 or committee_size < 0:
        raise ConsensusError("n, audit_rate_bps and committee_size must be non-negative")
    miner = to_checksum_address(miner)
    coin = int.from_bytes(keccak(encode(["bytes32", "address", "bytes32"], [seed, miner, AUDIT_TAG])), "big")
    audited = audit_rate_bps >= BPS or coin % BPS < audit_rate_bps
    if not audited or n == 0:
        return AuditDraw(audited, 0)
    if committee_size == 0 or committee_size >= n:
        return AuditDraw(True, (1 << min(n, 256)) - 1)
    committee, left, k = 0, committee_size, 0
    while left:
        pick = int.from_bytes(keccak(encode(["bytes32", "address", "uint256"], [seed, miner, k])), "big") % n
        k += 1
        if not committee >> pick & 1:
            committee |= 1 << pick
            left -= 1
    return AuditDraw(True, committee)


WITNESS_TAG = b"witness".ljust(32, b"\0")
"""The Solidity ``bytes32("witness")`` of the witness draw."""


def witness_draw(seed: bytes, miner: str, n: int, committee: int, size: int) -> int:
    """``Consensus.witnessDraw(seed, miner, n, committee, size)``: the witnesses of an unanswered-audit
    report on ``miner``, a bitmap of up to ``size`` validator indices below ``n`` outside ``committee`` (all
    the others when fewer are left), the k-th try being ``keccak(seed, miner, "witness", k) % n`` (repeats
    and committee members skipped). 0 when the committee is empty or every validator."""
    if len(seed) != 32:
        raise ConsensusError(f"a round seed is 32 bytes, not {len(seed)}")
    if n < 0 or committee < 0 or size < 0:
        raise ConsensusError("n, committee and size must be non-negative")
    members = committee.bit_count()
    if committee == 0 or members >= n:
        return 0
    miner = to_checksum_address(miner)
    witnesses, left, k = 0, min(size, n - members), 0
    while left:
        word = keccak(encode(["bytes32", "address", "bytes32", "uint256"], [seed, miner, WITNESS_TAG, k]))
        bit = 1 << int.from_bytes(word, "big") % n
        k += 1
        if not (committee | witnesses) & bit:
            witnesses |= bit
            left -= 1
    return witnesses


def counted_matrix(draws: Sequence[AuditDraw], revealer_indices: Sequence[int]) -> list[list[bool]]:
    """``counted[j][i]``: whether revealer i (validator index ``revealer_indices[i]``) scores miner j in
    the consensus (``protocol.rounds.consensus.settle``'s ``counted``)."""
    return [[d.counts(ix) for ix in revealer_indices] for d in draws]


def make_vectors(count: int = 60, seed: int = 20261126) -> dict[str, object]:
    """Deterministic draws (all-audited, none, partial committees, n up to 256) and their witnesses
    (``witness_draw`` of each committee) for the forge test."""
    rng = random.Random(seed)
    cases: list[dict[str, object]] = []
    shapes = [(10_000, 0, 3), (0, 1, 3), (10_000, 1, 1), (10_000, 3, 3), (10_000, 5, 3), (5_000, 2, 256)]
    shapes += [
        (rng.choice([0, 1, 500, 5_000, 9_999, 10_000]), rng.randint(0, 12), rng.randint(0, 40))
        for _ in range(count)
    ]
    extra = random.Random(seed + 1)  # audited partial committees: witnesses drawn (earlier cases kept)
    sizes = [extra.randint(1, 12) for _ in range(20)]
    shapes += [(10_000, c, extra.randint(c + 1, 64)) for c in sizes] + [
        (10_000, 128, 256),
        (10_000, 200, 256),
    ]
    for rate, size, n in shapes:
        s = rng.randbytes(32)
        miner = to_checksum_address(rng.randbytes(20))
        d = audit_draw(s, miner, n, rate, size)
        cases.append(
            {
                "seed": "0x" + s.hex(),
                "miner": miner,
                "n": n,
                "rate_bps": rate,
                "size": size,
                "audited": int(d.audited),
                "committee": str(d.committee),
                "witnesses": str(witness_draw(s, miner, n, d.committee, size)),
            }
        )
    return vectors_file("protocol/rounds/audits.py", cases)


def main(argv: Sequence[str] | None = None) -> int:
    """``python -m protocol.rounds.audits --write-vectors FILE`` (``protocol.wire.vectors``)."""
    return vectors_main(make_vectors, __doc__.splitlines()[0], argv)


if __name__ == "__main__":  # pragma: no cover
    sys.exit(main())
