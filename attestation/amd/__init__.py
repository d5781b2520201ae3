"""AMD SEV-SNP attestation reports: parsing and verification against the VCEK chain.

Modules:

- ``report``: the ATTESTATION_REPORT (versions 2 to 5): strict parsing that round-trips
- ``verify``: ``verify_snp``: VCEK signature, ARK -> ASK -> VCEK chain, TCB extensions
"""
