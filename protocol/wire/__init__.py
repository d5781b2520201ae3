"""Wire formats. No re-exports: import the module that defines a name.

Modules:

- ``bls``: BLS12-381 keys and signatures for checkpoint certificates (EIP-2537 layout)
- ``canonical``: canonical JSON: one byte string per value
- ``commitments``: the sender-bound commitments the contract checks, computed as it does
- ``keys``: signing keys from an encrypted keystore or a named environment variable
- ``records``: signed node records: who, which round, what it serves, where
- ``tensorblob``: tensor dicts on the wire as safetensors bytes, addressed by state digest
- ``update``: the update (version 4): ``make_update``, encode and decode
- ``updatecost``: what an update may cost before it is decoded: caps, memory, decode time
- ``updateerrors``: ``UpdateError`` and one class per way an update is refused
- ``updateheader``: the update's header: its fields, what it derives, its JSON form and parse
- ``vectors``: the cross-language test vectors' file and command line (``vectors_main``)
"""
