"""The scenarios of the attack suite: who takes part, who cheats, and in which rounds.

Every scenario runs the adversary beside honest nodes: by default 2 honest validators (equal stake) and
3 honest miners, plus the adversarial participants. Miners stake 100 tokens, validators 1000 (the
deployment defaults). Some cheats need a previous round to copy or replay from; their first round is
honest and is excluded from their "reward while cheating" (``cheat_from``).
"""

from __future__ import annotations

from collections.abc import Callable
from dataclasses import replace
from typing import Any

from miner.behaviour import Behaviour, BehaviourContext
from miner.node import MinerNode
from protocol.chain.coordinator import ChainCoordinator, translate
from protocol.rounds.memcoordinator import MemoryCoordinator
from protocol.rounds.phases import Phase
from protocol.runspec import RunSpec
from protocol.wire.update import Update, decode_update, encode_update
from tessera.attack.auditscenarios import audit_scenarios, ways_around_an_audit
from tessera.attack.casting import (
    DEV_SEED,
    MINER_STAKE,
    VALIDATOR_STAKE,
    Scenario,
    adversary,
    honest,
    tee_validators,
    validator_factory,
)
from tessera.attack.errors import UnknownScenarioError
from tessera.attack.harness import Participant
from tessera.attack.miners import (
    Copier,
    EpochPrepared,
    Forger,
    FreeRiderRandom,
    FreeRiderStale,
    FreeRiderZero,
    LazyMiner,
    LazyOtherData,
    OverfitScorer,
    Poisoner,
    QuoteReplayer,
    Replayer,
    Withholder,
)
from tessera.attack.validators import (
    BadSignerValidator,
    ColludingValidator,
    CopierValidator,
    RandomValidator,
    SilentValidator,
)


def _commitment_copier(victim: Participant) -> Callable[..., Any]:
    """A miner whose coordinator commits the victim's commitment of the round instead of its own."""

    def make(cfg: Any, spec: Any, coord: Any, disc: Any) -> Any:
        class CopyCommit(MemoryCoordinator):
            def commit_update(self, round: int, update_digest: bytes) -> None:
                rd = self._open(round, Phase.COMMIT)
                theirs = rd.commits.get(victim.address)
                if theirs is None:  # victim has not committed yet: commit honestly
                    super().commit_update(round, update_digest)
                    return
                rd.commits[self.address] = theirs
                self._tx()

        if not isinstance(coord, MemoryCoordinator):  # the chain: copy the victim's commitment on-chain

            class ChainCopyCommit(ChainCoordinator):
                def commit_update(self, round: int, update_digest: bytes) -> None:
                    theirs = self.update_commitments(round).get(victim.address)
                    if theirs is None:  # victim has not committed yet: commit honestly
                        super().commit_update(round, update_digest)
                        return
                    translate("commit update", lambda: self.chain.commit_raw(round, theirs))

            coord.__class__ = ChainCopyCommit
            return MinerNode(cfg, spec, coord, disc)
        copying: Any = CopyCommit(coord.ledger, coord.address)
        return MinerNode(cfg, spec, copying, disc)

    return make


def _sybils(n: int) -> list[Participant]:
    """``n`` identities of one operator: the first trains, the others re-label its update (same round)."""
    shared: dict[int, bytes] = {}

    class Leader(Behaviour):
        name = "sybil-leader"

        def update_bytes(self, ctx: BehaviourContext, data: bytes) -> bytes:
            shared[ctx.round] = data
            return data

    class Member(Behaviour):
        name = "sybil"

        def update_bytes(self, ctx: BehaviourContext, data: bytes) -> bytes:
            src = shared.get(ctx.round)
            if src is None:
                return data
            up = decode_update(src)
            return encode_update(Update(replace(up.header, miner=ctx.miner), up.tensors))

    out = [adversary("sybil-leader", Leader(), stake=MINER_STAKE // 4)]
    out += [adversary("sybil", Member(), stake=MINER_STAKE // 4) for _ in range(n - 1)]
    return out


def _build_registry() -> dict[str, Scenario]:
    """Every scenario, in the order ``tessera attack --list`` shows them."""
    scenarios = [
        Scenario("baseline", "baseline", "all honest (the reference run)", lambda: honest()),
        *_free_riders_and_lazy(),
        *_copiers(),
        *_poisoners_forgers_and_sybils(),
        *audit_scenarios(),
        *ways_around_an_audit(),
        *_knowing_ahead(),
        *_validator_scenarios(),
        *_fault_scenarios(),
    ]
    return {sc.name: sc for sc in scenarios}


def _free_riders_and_lazy() -> list[Scenario]:
    """Miners that skip the work: free riders, lazy trainers, a TEE-attested overfitter."""
    return [
        Scenario("free-rider-zero", "miner", "sends a zero update",
                 lambda: [*honest(), adversary("free-rider-zero", FreeRiderZero())]),
        Scenario("free-rider-random", "miner", "sends noise with a real update's norm",
                 lambda: [*honest(), adversary("free-rider-random", FreeRiderRandom())]),
        Scenario("free-rider-stale", "miner", "re-sends its round-1 update", cheat_from=2,
                 build=lambda: [*honest(), adversary("free-rider-stale", FreeRiderStale())]),
        Scenario("lazy-33", "miner", "skips 1/3 of its steps (trains them on other data): 1 of 3 segments",
                 lambda: [*honest(), adversary("lazy-33", LazyMiner(1 / 3, 3))]),
        Scenario("lazy-other-data", "miner", "trains on other data than assigned",
                 lambda: [*honest(), adversary("lazy-other-data", LazyOtherData())]),
        Scenario("overfit-scorer", "miner", "fits the batch it knows at commit time, attested by an honest TEE",
                 tee=True, build=lambda: [*tee_validators(), *honest(0, 3),
                                          adversary("overfit-scorer", OverfitScorer(), True)]),
    ]  # fmt: skip


def _copiers() -> list[Scenario]:
    """Miners that pass off someone's (or their own earlier) work: update, commitment, update and quote
    replays. Their builders read the scenario's shared board."""
    copier = Scenario(
        "copier", "miner", "re-labels another miner's previous revealed update", lambda: [], cheat_from=2
    )
    copier.build = lambda sc=copier: _copier(sc)  # type: ignore[misc]

    def commit_copier() -> list[Participant]:
        parts = honest()
        victim = parts[2]
        return [*parts, Participant("miner", "commitment-copier", MINER_STAKE, _commitment_copier(victim))]

    commitment_copier = Scenario(
        "commitment-copier", "miner", "commits another miner's commitment", commit_copier, provable=False
    )
    replayer = Scenario("replayer", "miner", "re-sends its own previous update", lambda: [], cheat_from=2)
    replayer.build = lambda sc=replayer: [*honest(), adversary("replayer", Replayer(sc.board))]  # type: ignore[misc]
    qr = Scenario(
        "quote-replayer", "miner", "serves its previous round's TEE quote", lambda: [], cheat_from=2, tee=True
    )
    qr.build = lambda sc=qr: [  # type: ignore[misc]
        *tee_validators(),
        *honest(0, 3),
        adversary("quote-replayer", QuoteReplayer(sc.board), evidence=True),
    ]
    return [copier, commitment_copier, replayer, qr]


def _poisoners_forgers_and_sybils() -> list[Scenario]:
    """Miners that poison the model, forge TEE evidence, withhold, or split into Sybil identities."""

    def poisoner(mode: str) -> Callable[[], list[Participant]]:
        return lambda: [*honest(), adversary(f"poisoner-{mode}", Poisoner(mode))]

    out = [
        Scenario(f"poisoner-{mode}", "miner", f"sends its true update {mode}", poisoner(mode))
        for mode in ("scaled", "flip", "huge", "nan")
    ]
    return out + [
        Scenario("forger", "miner", "serves corrupted TEE evidence", tee=True,
                 build=lambda: [*tee_validators(), *honest(0, 3), adversary("forger", Forger("corrupt"), True)]),
        Scenario("forger-mismatch", "miner", "serves a valid quote bound to another digest", tee=True,
                 build=lambda: [*tee_validators(), *honest(0, 3), adversary("forger-mismatch", Forger("mismatch", DEV_SEED), True)]),
        Scenario("forger-public-seed", "miner", "serves well-bound quotes from the old public devnet TEE seed", tee=True,
                 build=lambda: [*tee_validators(), *honest(0, 3), adversary("forger-public-seed", Forger("public-seed"), True)]),
        Scenario("withholder", "miner", "commits but never serves", provable=False,
                 build=lambda: [*honest(), adversary("withholder", Withholder())]),
        Scenario("sybil", "miner", "4 low-stake identities: one trains, three re-label its update",
                 lambda: [*honest(), *_sybils(4)]),
    ]  # fmt: skip


EPOCH_ROUNDS = 8
"""Assignment epochs of the DiPaCo scenarios, as the devnet's (rounds 1-7, then 8-15:
``protocol.rounds.epochs``). A miner prepares at the first round it trains in, 1 on the in-memory chain and
2 on anvil (round 1 is the join round), so a run of up to 6 rounds cheats from its second round on; a longer
one crosses an epoch, whose first round the cheater trains honestly and is paid for."""


def _dipaco_epochs(spec: RunSpec) -> RunSpec:
    """The suite's run as DiPaCo with assignment epochs of :data:`EPOCH_ROUNDS` rounds."""
    return replace(spec, model=replace(spec.model, mode="dipaco"), epoch_rounds=EPOCH_ROUNDS)


def _knowing_ahead() -> list[Scenario]:
    """a DiPaCo miner knows its path, and who shares it, for a whole epoch. It prepares its data at
    the epoch's first round and trains every later round on it (each round's batches come from the round's
    own seed), or identities of one operator copy the one that trains (each miner's batches are its own)."""
    return [
        Scenario("epoch-prepared", "miner",
                 f"DiPaCo, epochs of {EPOCH_ROUNDS} rounds: trains each round of an epoch on its first round's batches",
                 lambda: [*honest(), adversary("epoch-prepared", EpochPrepared())], cheat_from=2,
                 adapt_spec=_dipaco_epochs),
        Scenario("path-sybils", "miner",
                 f"DiPaCo, epochs of {EPOCH_ROUNDS} rounds: 4 low-stake identities, one trains, three re-label its "
                 "update (those on its path know it for the epoch)",
                 lambda: [*honest(), *_sybils(4)], adapt_spec=_dipaco_epochs),
    ]  # fmt: skip


def _validator_scenarios() -> list[Scenario]:
    """Validators that score dishonestly, stay silent or sign another checkpoint."""
    return [
        Scenario("copier-validator", "validator", "a validator (20% of stake) commits last round's consensus",
                 lambda: [*honest(2, 0),
                          Participant("validator", "copier-validator", VALIDATOR_STAKE // 2, validator_factory(CopierValidator)),
                          *honest(0, 3)]),
        Scenario("random-validator", "validator", "a validator (20% of stake) scores at random",
                 lambda: [*honest(2, 0),
                          Participant("validator", "random-validator", VALIDATOR_STAKE // 2, validator_factory(RandomValidator)),
                          *honest(0, 3)]),
        Scenario("colluding-validators", "validator",
                 "a validator with 25% of stake gives a free-riding miner the top score and the others 0",
                 _colluders),
        Scenario("silent-validator", "validator", "a validator verifies and commits but never reveals",
                 lambda: [*honest(2, 0),
                          Participant("validator", "silent-validator", VALIDATOR_STAKE, validator_factory(SilentValidator)),
                          *honest(0, 3)]),
        Scenario("bad-signer-validator", "validator",
                 "a validator (1 of 3) serves a valid signature of another checkpoint digest",
                 scores_dishonestly=False,
                 build=lambda: [*honest(2, 0),
                          Participant("validator", "bad-signer-validator", VALIDATOR_STAKE, validator_factory(BadSignerValidator)),
                          *honest(0, 3)]),
    ]  # fmt: skip


def _fault_scenarios() -> list[Scenario]:
    """Crashed and restarted nodes, a node down for a while, a peer serving corrupt bytes."""
    # participant 0 is a validator, 2 the first honest miner (see honest)
    out = [
        Scenario(label, "fault", f"kill -9 and restart participant {who} in round {rnd}, phase {phase}",
                 lambda: honest(), faults=[(rnd, phase, who)])
        for label, rnd, phase, who in (
            ("fault-miner-crash-commit", 2, 0, 2),
            ("fault-miner-crash-reveal", 2, 1, 2),
            ("fault-validator-crash-verify", 2, 2, 0),
            ("fault-validator-crash-reveal", 2, 3, 0),
        )
    ]  # fmt: skip
    return out + [
        Scenario("fault-miner-down-18s-reveal", "fault", "kill -9 a miner in round 2 REVEAL, restart it 18 s later",
                 lambda: honest(), faults=[(2, 1, 2, 18.0)], phase_blocks=200),
        Scenario("fault-corrupt-server", "miner", "a miner serves bytes that do not match its commitment",
                 lambda: [*honest(), adversary("corrupt-server", _CorruptServer())], provable=False),
    ]  # fmt: skip


class _CorruptServer(Withholder):
    """Serves its committed update with one byte flipped (a faulty or malicious peer)."""

    name = "corrupt-server"

    def served_update(self, ctx: Any, data: bytes) -> bytes:
        """One flipped byte in the middle."""
        b = bytearray(data)
        if b:
            b[len(b) // 2] ^= 0x01
        return bytes(b)


def _copier(sc: Scenario) -> list[Participant]:
    parts = honest()
    victim = parts[2]

    def make(cfg: Any, spec: Any, coord: Any, disc: Any) -> Any:
        return MinerNode(cfg, spec, coord, disc, behaviour=Copier(sc.board, victim.address))

    return [*parts, Participant("miner", "copier", MINER_STAKE, make)]


def _colluders() -> list[Participant]:
    free_rider = adversary("free-rider-zero", FreeRiderZero())

    def make(cfg: Any, spec: Any, coord: Any, disc: Any, key: str, **extra: Any) -> Any:
        return ColludingValidator(
            cfg, spec, coord, disc, key, favoured=free_rider.address, punish=True, **extra
        )

    colluder = Participant("validator", "colluding-validator", VALIDATOR_STAKE, make)
    # miners first: the colluder's factory reads the free rider's address
    return [*honest(0, 3), free_rider, *honest(3, 0), colluder]


_REGISTRY: dict[str, Scenario] | None = None


def registry() -> dict[str, Scenario]:
    """Every scenario by name."""
    global _REGISTRY
    if _REGISTRY is None:
        _REGISTRY = _build_registry()
    return _REGISTRY


def get(name: str) -> Scenario:
    """A scenario by name."""
    try:
        return registry()[name]
    except KeyError:
        raise UnknownScenarioError(f"unknown scenario {name!r}; choose from {sorted(registry())}") from None
