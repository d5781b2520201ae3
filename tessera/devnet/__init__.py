"""The devnet: the whole Tessera network on one machine (``tessera devnet``, end-to-end tests).

Subpackages and modules:

- ``faults/``: ``tessera faults``: fault scenarios on real devnet processes, and the money checks
- ``chainops``: JSON-RPC calls to anvil, the deployment, mining the rest of a finished phase
- ``config``: ``DevnetConfig`` (the devnet's shape) and ``DevnetError``
- ``network``: ``DevnetNetwork``: anvil, the contracts, a DHT peer, validators and miners
- ``payouts``: a round's payouts as the chain's events state them
- ``poison``: a stranger poisoning the devnet's discovery (``poison-dht``)
- ``procs``: the node processes: one ``tessera ... run`` each, own key, data dir, port, log
- ``progress``: one progress line per certified round where there is no live view
- ``proxy``: ``FaultProxy``: a TCP proxy in front of a node's port (blocked port, bad peer)
- ``report``: the devnet's report: loss, rewards, ledgers, fixed terms per round
- ``run``: the driver: R rounds with a live view, then the report
- ``runfile``: the devnet's run file (``run.json``, from ``protocol.recipe``) and its token streams
- ``sizing``: phase windows sized from the measured work each phase holds
- ``work``: ``measure_work``: a round's phases timed here with the nodes' own code
"""
