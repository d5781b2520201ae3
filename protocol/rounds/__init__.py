"""The nodes' view of a round, which :mod:`protocol.chain` builds on (never the reverse). No
re-exports: import the module that defines a name.

Modules:

- ``anvil``: start and stop a local anvil for the devnet, the tests and the benchmark
- ``audits``: ``audit_draw``: a round's audit draw, the twin of ``Consensus.auditDraw``; its vectors
- ``auditspec``: ``AuditSpec``: the run file's audit section (c, K, slash, run size) -> contract params
- ``consensus``: ``settle``: medians and payouts, the twin of the Solidity ``Consensus``; its vectors
- ``coordinator``: ``Coordinator``: the narrow, typed round view the nodes work against
- ``deployment``: ``Deployment``, ``NetworkParams``: where a run's contracts live, with which parameters
- ``economics``: ``RunEconomics``, ``audit_rate_bps``: the audit rate q that makes cheating lose money
- ``epochs``: the seed and registry a round's assignment is drawn from (assignment epochs)
- ``memcoordinator``: ``MemoryCoordinator``, ``MemoryLedger``: the round view in memory, for tests and the attack harness
- ``memslashing``: ``MemorySlashing``, ``SlashingBook``: the in-memory ledger's slashing (proofs, reports, votes)
- ``phases``: ``Phase``: the one phase enum
"""
