"""NVIDIA H100 confidential-computing attestation reports (SPDM 1.1 GET_MEASUREMENTS).

Modules:

- ``spdm``: the GET_MEASUREMENTS request and MEASUREMENTS response
- ``verify``: verification: SPDM signature, device chain, nonce, measurements
"""
