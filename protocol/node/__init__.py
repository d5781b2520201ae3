"""The node runtime both roles share. No re-exports: import the module that defines a name.

Modules:

- ``account``: a node's own account on the chain: stake, rewards owed and claimed, balance
- ``api``: the HTTP app every node serves (``create_node_app``) and its metrics (``NodeMetrics``)
- ``connections``: ``NodeConnections``: what every service of a node is given, the same for both roles
- ``dhttraffic``: the DHT daemon's bytes in the traffic ledger, from ``sockstats``
- ``jsonrecord``: persisted records as dataclasses: typed keys, checked on load
- ``loop``: the step loop: step, wait, and retry a failure with backoff
- ``recordstore``: ``RecordStore``: both nodes' per-round records in one atomic state file
- ``rolenode``: ``RoleNode``: the base of both nodes (``act``, ``status``, routes; start/step/run/stop)
- ``roundreport``: ``RoundReport``: one INFO line per round per node; its figures typed, in ``/status``
- ``settings``: typed config loading with sections: defaults < TOML < env < flags
- ``sockstats``: the kernel's TCP counters per socket (``sock_diag``), read from outside
- ``start``: ``NodeRuntime``: how a node process starts, steps and stops serving
- ``statusdoc``: ``NodeStatus``: the ``/status`` document typed, shared fields once, each role's part
- ``traffic``: ``TrafficLedger``: every byte a node moves, by round and kind
- ``trafficsums``: sums over nodes' ledgers (by kind, fixed terms, bits per parameter) for reports
"""
