"""Peer-to-peer. No re-exports: import the module that defines a name.

Modules:

- ``blobs``: digest strings, transfer errors and ``BlobStore``, the serving side of blobs
- ``clientcount``: what this process's HTTP clients move, counted where each exchange is made
- ``dht``: ``DHTNode``: a thin wrapper over a hivemind DHT for signed node records
- ``dhtreads``: ``DhtReadSchedule``: when a node reads a round's records from the DHT again
- ``dhtvalidator``: the record validator every DHT node runs: what a stranger may store
- ``discovery``: ``Discovery``: who serves what, from the DHT, peers' record books, static fallbacks
- ``linkprobe``: ``POST /link/probe`` and its client: a node measures its upload rate to a peer
- ``recordbook``: signed node records over HTTP: discovery when the DHT is poisoned
- ``transfer``: bounded HTTP fetches of blobs by digest (``fetch_blob``, ``get_capped``)
"""
