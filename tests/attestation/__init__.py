"""Tests of `attestation/`."""
