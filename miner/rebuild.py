"""theta_{r+1} rebuilt by a miner from what it already has, instead of downloaded.

Validators merge the updates the on-chain consensus accepted (every miner with a positive consensus score,
weighted by it) into theta_r with :func:`training.merge.next_checkpoint`, whose result IEEE-754 defines bit
for bit on every machine. A miner that holds theta_r (parameters and outer momentum) and the accepted
updates (a few kB each, fetched by digest and checked against the round's on-chain commitments) computes the
same checkpoint; only a digest equal to the certified one is used, anything else falls back to fetching
the checkpoint, so a rebuild can save bytes but never change what a miner trains from.
"""

from __future__ import annotations

from collections.abc import Mapping

from torch import Tensor

from protocol.errors import ProtocolError
from protocol.runspec import COMPUTE_LOCK, RunSpec
from protocol.wire.tensorblob import join_checkpoint, split_checkpoint, tensors_digest
from protocol.wire.update import decode_update
from training.errors import TrainingError
from training.merge import next_checkpoint


def accepted(consensus: Mapping[str, int]) -> list[tuple[str, int]]:
    """The miners whose updates the merge uses, with their weights, in the validators' order."""
    return [(miner, score) for miner, score in sorted(consensus.items()) if score > 0]


def rebuild_checkpoint(
    spec: RunSpec,
    theta: Mapping[str, Tensor],
    consensus: Mapping[str, int],
    updates: Mapping[str, bytes],
) -> tuple[dict[str, Tensor], str] | None:
    """theta_{r+1} (``param/*`` and ``momentum/*``) and its digest (``0x`` + hex) from theta_r's tensors,
    round r's consensus and the accepted miners' update bytes (already checked against their commitments);
    None when an accepted update is missing or does not decode (the caller then fetches the checkpoint)."""
    params, momentum = split_checkpoint(theta)
    shapes = {n: tuple(t.shape) for n, t in params.items()}
    contributions = []
    for miner, score in accepted(consensus):
        data = updates.get(miner)
        if data is None:
            return None
        try:
            update = decode_update(data, None, shapes, spec.codec)
            contributions.append((float(score), miner, update.pseudo_gradient()))
        except ProtocolError:
            return None
    try:
        with COMPUTE_LOCK:
            new_params, new_momentum = next_checkpoint(
                params, momentum, contributions, spec.outer, spec.merge
            )
    except TrainingError:
        return None
    tensors = join_checkpoint(new_params, new_momentum)
    return tensors, tensors_digest(tensors)
