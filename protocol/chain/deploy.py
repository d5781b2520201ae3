"""Deploying ``TesseraNetwork`` (which creates its token) from the committed artifacts."""

from __future__ import annotations

from eth_account.signers.local import LocalAccount
from eth_utils import to_checksum_address
from hexbytes import HexBytes
from web3 import Web3
from web3.exceptions import ContractLogicError

from protocol.chain.abi import artifacts, decode_revert
from protocol.chain.errors import TransactionFailed
from protocol.chain.transport import retrying
from protocol.rounds.deployment import NetworkParams


def deploy_network(w3: Web3, account: LocalAccount, params: NetworkParams) -> tuple[str, str, int, str]:
    """Deploys ``TesseraNetwork`` (which creates its token). Returns (network, token, block, tx hash)."""
    params.validate()
    art = artifacts()["TesseraNetwork"]
    factory = w3.eth.contract(abi=art["abi"], bytecode=art["bytecode"])
    ctor = factory.constructor(params.as_tuple())
    chain_id = retrying(lambda: int(w3.eth.chain_id), "eth_chainId")
    try:
        gas = retrying(lambda: ctor.estimate_gas({"from": account.address}), "deploy")
    except ContractLogicError as exc:
        raise decode_revert("constructor", exc.data) from None
    nonce = retrying(lambda: w3.eth.get_transaction_count(account.address, "pending"), "nonce")
    tx = ctor.build_transaction(
        {"from": account.address, "nonce": nonce, "gas": int(gas * 1.2), "chainId": chain_id}
    )
    signed = account.sign_transaction(tx)
    tx_hash = retrying(lambda: bytes(w3.eth.send_raw_transaction(signed.raw_transaction)), "deploy")
    receipt = retrying(lambda: w3.eth.wait_for_transaction_receipt(HexBytes(tx_hash), timeout=300), "deploy")
    if receipt["status"] != 1:
        raise TransactionFailed(f"deployment transaction 0x{tx_hash.hex()} failed")
    network = to_checksum_address(str(receipt["contractAddress"]))
    token = w3.eth.contract(address=network, abi=art["abi"]).functions.token().call()
    return network, to_checksum_address(token), int(receipt["blockNumber"]), "0x" + tx_hash.hex()
