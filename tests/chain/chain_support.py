"""Helpers of the chain tests: a deployed network with its actors (:func:`make_net`), funded accounts,
mining on anvil. The fixtures that start anvil and deploy are in ``conftest.py``."""

from __future__ import annotations

import dataclasses

from eth_account import Account
from eth_account.signers.local import LocalAccount
from web3 import Web3

from protocol.chain import Chain, deploy_network
from protocol.rounds.anvil import Anvil
from protocol.rounds.deployment import Deployment, NetworkParams
from protocol.rounds.phases import Phase
from protocol.wire.bls import BlsKeyPair

FAST = NetworkParams(
    unbonding_blocks=20,
    commit_blocks=8,
    reveal_blocks=8,
    score_commit_blocks=8,
    score_reveal_blocks=8,
    # today's lifecycle (pay owed at once); vesting and committees: tests/chain/test_settlement_rules.py
    vesting_rounds=0,
)


def fund_eth(w3: Web3, address: str, wei: int = 10**21) -> None:
    """Gives ``address`` gas money on anvil."""
    w3.provider.make_request("anvil_setBalance", [address, hex(wei)])  # type: ignore[arg-type]


def mine(w3: Web3, blocks: int) -> None:
    """Mines ``blocks`` empty blocks."""
    w3.provider.make_request("anvil_mine", [hex(blocks)])  # type: ignore[arg-type]


def new_account(w3: Web3) -> LocalAccount:
    acct: LocalAccount = Account.create()
    fund_eth(w3, acct.address)
    return acct


@dataclasses.dataclass
class Net:
    """A deployed network with handles for its actors."""

    w3: Web3
    deployment: Deployment
    deployer: Chain
    miners: list[Chain]
    validators: list[Chain]
    bls_keys: list[BlsKeyPair]

    def as_(self, acct: LocalAccount) -> Chain:
        return Chain(self.w3, self.deployment, acct)

    def reader(self) -> Chain:
        return Chain(self.w3, self.deployment)

    def fresh_round(self) -> int:
        """Finalizes the current (empty) round so that a new Commit phase starts now; returns its number."""
        r = self.reader()
        st = r.round_state()
        while st.phase is not Phase.FINALIZE:
            self.mine_past_deadline()
            self.deployer.advance()
            st = r.round_state()
        self.deployer.finalize_round(st.round)
        return st.round + 1

    def mine_past_deadline(self) -> None:
        st = self.reader().round_state()
        now = self.w3.eth.block_number
        if st.deadline >= now:
            mine(self.w3, st.deadline - now + 1)


def make_net(
    w3: Web3, anvil: Anvil, n_miners: int = 3, n_validators: int = 3, params: NetworkParams = FAST
) -> Net:
    deployer = new_account(w3)
    network, token, block, tx = deploy_network(w3, deployer, params)
    dep = Deployment(
        chain_id=anvil.chain_id,
        network=network,
        token=token,
        block=block,
        deployer=deployer.address,
        params=params,
        rpc_url=anvil.rpc_url,
        tx={"network": tx},
    )
    boss = Chain(w3, dep, deployer)
    miners, validators, keys = [], [], []
    for _ in range(n_miners):
        a = new_account(w3)
        boss.transfer(a.address, params.min_miner_stake * 10)
        c = Chain(w3, dep, a)
        c.register_miner(params.min_miner_stake)
        miners.append(c)
    for i in range(n_validators):
        a = new_account(w3)
        boss.transfer(a.address, params.min_validator_stake * 10)
        k = BlsKeyPair.generate(bytes([i + 1]) * 32)
        c = Chain(w3, dep, a)
        c.register_validator(params.min_validator_stake, k)
        validators.append(c)
        keys.append(k)
    return Net(w3, dep, boss, miners, validators, keys)
