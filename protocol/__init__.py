"""What crosses a process boundary: ids, messages, wire codecs, digests, chain and DHT clients."""
