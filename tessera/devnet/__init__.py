"""The devnet: the whole Tessera network on one machine (``tessera devnet``, end-to-end tests)."""
