"""Intel DCAP ECDSA quotes (SGX and TDX): parsing, collateral, TCB matching, verification."""
