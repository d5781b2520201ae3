"""The nodes' view of a round: ``coordinator`` (the interface), ``memcoordinator`` (in memory, for tests and
the attack harness), ``consensus`` (the settlement the contract computes), ``phases``, ``deployment`` and
``anvil`` (a local chain for dev and tests). :mod:`protocol.chain` builds on these (its ``coordinator`` is
this view over the contract); nothing here imports it. No re-exports: import the module that defines a
name."""
