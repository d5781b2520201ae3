"""What crosses a process boundary: ids, messages, wire codecs, digests, chain and DHT clients."""

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
