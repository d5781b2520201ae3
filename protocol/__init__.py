"""What crosses a process boundary: ids, messages, wire codecs, digests, chain and DHT clients.

A name is imported from the module that defines it (``protocol.chain``'s ``__init__`` is that package's
API). Subpackages and modules:

- ``chain/``: the web3 client of the settlement contracts (``Chain``) and the round view over them
- ``node/``: the node runtime both roles share: settings, runtime, HTTP app, records, traffic
- ``p2p/``: peer-to-peer: the DHT, discovery, signed record books, bounded HTTP transfer
- ``rounds/``: the nodes' view of a round: coordinator, consensus, audit draw, economics, deployment
- ``wire/``: wire formats: the update, records, tensors, canonical JSON, commitments, BLS, keys
- ``errors``: ``ProtocolError``, the package's exception root
- ``pidlock``: a lock file naming its holder: one node per data dir, one per DHT key
- ``recipe``: ``run_recipe``: the one recipe, written by ``tessera runspec init`` and the devnet
- ``runspec``: ``RunSpec``: the run file both roles share (configs, corpus, tokenizer, genesis, audits)
"""

import sys as _sys

# ``py_ecc`` (imported by eth_account/web3 and by protocol.wire.bls) runs ``sys.setrecursionlimit(100000)`` at
# import; with that limit CPython's C JSON decoder overflows the C stack (SIGSEGV) on deeply nested input
# instead of raising RecursionError. Import its (lazy, cheap) package here once, keeping the limit, so no
# later import of it can raise the limit (docs/security.md F1).
_limit = _sys.getrecursionlimit()
try:
    import py_ecc as _py_ecc  # noqa: F401
finally:
    _sys.setrecursionlimit(_limit)
del _limit
