"""The HTTP connection to a JSON-RPC node (:func:`http_web3`): a ``Web3`` that asks for the chain id once per
process, sends only the headers a JSON-RPC request needs (:data:`RPC_HEADERS`) and, given a traffic
ledger, counts every exchange there by method (``eth_call:<function>`` for a contract read)."""

from __future__ import annotations

import functools

from eth_utils import keccak
from web3 import Web3
from web3.types import RPCEndpoint

from protocol.chain.abi import abi_type, artifacts
from protocol.node.traffic import TrafficLedger, rpc_session


@functools.cache
def _function_names() -> dict[str, str]:
    """``0x`` + selector -> name of every function, and ``0x`` + topic -> name of every event, of the network
    and token contracts (the traffic ledger's labels)."""
    arts = artifacts()
    out: dict[str, str] = {}
    for contract in ("TesseraToken", "TesseraNetwork"):
        for item in arts[contract]["abi"]:
            if item["type"] in ("function", "event"):
                sig = f"{item['name']}({','.join(abi_type(i) for i in item['inputs'])})"
                digest = keccak(text=sig)
                out["0x" + (digest[:4] if item["type"] == "function" else digest).hex()] = item["name"]
    return out


#: The headers of a JSON-RPC request: requests' defaults (``Accept``, ``Connection: keep-alive``, the default
#: of HTTP/1.1 anyway) and web3's 49-byte agent were 132 of the ~200 header bytes every request sent, a
#: fifth of a validator's RPC bytes. gzip stays accepted: a provider may compress large answers.
#: (None drops a session default; requests adds ``Host`` and ``Content-Length``.)
RPC_HEADERS = {
    "Content-Type": "application/json",
    "User-Agent": "tessera",
    "Accept-Encoding": "gzip",
    "Accept": None,
    "Connection": None,
}


def http_web3(url: str, timeout: float = 30, traffic: TrafficLedger | None = None) -> Web3:
    """A ``Web3`` over HTTP that asks the node for its chain id once per process, not per request.

    web3's validation middleware reads ``eth_chainId`` before every ``eth_call`` and ``eth_estimateGas``:
    two extra round trips per contract read, 43% of a devnet's RPC bytes. The chain id cannot
    change under a connection (``Chain.connect`` checks it against the deployment), so it is cached.
    With ``traffic``, every JSON-RPC exchange is counted there (ledger).
    """
    provider = Web3.HTTPProvider(
        url,
        request_kwargs={"timeout": timeout, "headers": RPC_HEADERS},
        session=rpc_session(traffic, _function_names()) if traffic is not None else None,
        cache_allowed_requests=True,
        cacheable_requests={RPCEndpoint("eth_chainId")},
        request_cache_validation_threshold=None,  # no extra eth_chainId to pick a threshold
    )
    return Web3(provider)
