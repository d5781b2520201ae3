"""NVIDIA H100 confidential-computing attestation reports (SPDM 1.1 GET_MEASUREMENTS)."""
