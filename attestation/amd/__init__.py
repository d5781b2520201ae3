"""AMD SEV-SNP attestation reports: parsing and verification against the VCEK chain."""
