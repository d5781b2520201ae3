"""The node runtime both roles share: ``settings``, ``start`` (``NodeRuntime``), ``api`` (the HTTP app and
metrics), ``account`` (stake and rewards read from the chain), ``loop`` (the step loop), ``jsonrecord``
(persisted records as dataclasses), ``traffic`` (the ledger), ``sockstats`` (the kernel's TCP counters per
socket) and ``dhttraffic`` (the DHT daemon's bytes in the ledger). No re-exports: import the module that
defines a name."""
