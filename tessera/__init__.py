"""Tessera's command line and the devnet composition root."""

__version__ = "0.1.0"
