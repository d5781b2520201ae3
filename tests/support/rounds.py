"""One round's honest (and transformed) updates built by the miner's code, verified by the validator's."""

from __future__ import annotations

from dataclasses import dataclass, field

import torch
from torch import Tensor

from miner.behaviour import Behaviour
from miner.work import BuiltUpdate, RoundInputs, build_update
from protocol.runspec import RunSpec
from protocol.wire.commitments import update_commitment
from protocol.wire.tensorblob import tensors_digest
from training.config import InnerConfig
from training.data import Dataset, prepare
from validator.context import Incoming, RoundContext, Verdict
from validator.errors import SourceMismatchError
from validator.pipeline import VerificationPipeline
from validator.policy import VerifyPolicy

CHAIN_ID = 31337
CONTRACT = "0x" + "11" * 20
MINERS = ["0x" + f"{i:040x}" for i in (0xA1, 0xB2)]
VALIDATOR = "0x" + "c3" * 20


@dataclass
class Round:
    spec: RunSpec
    ds: Dataset
    checkpoint: dict[str, Tensor]
    digest: bytes
    assign_seed: bytes = b"\x01" * 32
    seed: bytes = b"\x02" * 32
    round: int = 2
    published: dict[str, dict[str, Tensor]] = field(default_factory=dict)
    """Error-feedback residuals the miners serve, by state digest (F12)."""
    updates: dict[tuple[int, str], bytes] = field(default_factory=dict)
    """Earlier updates by (round, hex digest): what ``fetch_source`` finds."""

    def ctx(self, validator: str = VALIDATOR) -> RoundContext:
        return RoundContext(
            spec=self.spec,
            dataset=self.ds,
            round=self.round,
            chain_id=CHAIN_ID,
            contract=CONTRACT,
            validator=validator,
            checkpoint=self.checkpoint,
            checkpoint_digest=self.digest,
            assign_seed=self.assign_seed,
            seed=self.seed,
            registry=MINERS,
        )

    def build(
        self, miner: str, behaviour: Behaviour | None = None, after: BuiltUpdate | None = None
    ) -> BuiltUpdate:
        """The miner's update; ``after``: its earlier update whose residual it carries."""
        built = build_update(
            self.spec,
            self.ds,
            RoundInputs(
                round=self.round,
                miner=miner,
                checkpoint=self.checkpoint,
                checkpoint_digest=self.digest,
                assign_seed=self.assign_seed,
                registry=MINERS,
                ef_state=after.ef_state if after else {},
                ef_source=(after.round, after.digest) if after else None,
            ),
            behaviour or Behaviour(),
        )
        self.published.update(built.published())
        self.updates[(built.round, built.digest.hex())] = built.update
        return built

    def fetch_source(self, s: int, digest_hex: str) -> bytes:
        if (s, digest_hex) not in self.updates:
            raise SourceMismatchError(f"no committed update {digest_hex[:8]} in round {s}")
        return self.updates[(s, digest_hex)]

    def verify(
        self, miner: str, built: BuiltUpdate, policy: VerifyPolicy, validator: str = VALIDATOR
    ) -> Verdict:
        commitment = update_commitment(CHAIN_ID, CONTRACT, self.round, miner, built.digest)
        by_digest = {
            "0x" + d.hex(): built.states[s]
            for s, d in zip(built.transcript_steps, built.transcript_digests, strict=True)
        }
        by_digest.update(self.published)
        incoming = Incoming(
            miner,
            commitment,
            lambda: built.update,
            lambda d: {k: v.clone() for k, v in by_digest[d].items()},
            fetch_source=self.fetch_source,
        )
        return VerificationPipeline(policy).verify(incoming, self.ctx(validator))


def make_round(steps: int = 6) -> Round:
    torch.set_num_threads(1)
    spec = RunSpec(inner=InnerConfig(steps=steps, transcript_interval=1))
    ds = prepare(spec.load_corpus(), spec.model)
    params = spec.genesis_params()
    digest = bytes.fromhex(tensors_digest({f"param/{k}": v for k, v in params.items()})[2:])
    return Round(spec, ds, params, digest)
