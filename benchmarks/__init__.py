"""Benchmarks behind ``tessera bench``: each prints figures and writes a JSON record (and PNGs)."""
