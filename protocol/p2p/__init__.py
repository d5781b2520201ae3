"""Peer-to-peer: the ``dht`` and its ``dhtvalidator``, ``discovery``, the ``recordbook`` of peers' signed
records, and ``transfer`` (bounded HTTP fetches over ``blobs``). No re-exports: import the module that
defines a name."""
