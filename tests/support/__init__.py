"""Helpers shared by more than one test suite (no tests here); a suite's own helpers stay in its folder.

- ``rounds``: one round's updates built by the miner's code and verified by the validator's (validator,
  miner and network tests).
- ``merge_case``: a fixed merge case, identical on every machine; also run as a script by path
  (``tests/validator/test_merge_reproducible.py``) and pinned by ``tests/training/make_golden.py``.
- ``bombs``: crafted updates whose header declares a costly decode, and a peak-memory probe (fuzz and
  protocol tests).
- ``devnet_view``: a stubbed devnet for rendering its live view without processes (network and training
  tests).
"""
