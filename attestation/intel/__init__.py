"""Intel DCAP ECDSA quotes (SGX and TDX): parsing, collateral, TCB matching, verification.

Modules:

- ``collateral_checks``: whether the collateral is authentic and current (verify's steps 4 and 5)
- ``evaluate``: a quote's TCB status against verified collateral (verify's step 6)
- ``layouts``: the fixed-layout parts of a quote: header, SGX report, TD report
- ``pck``: the SGX extension of a PCK certificate
- ``quote``: quotes v3, v4 and v5: strict, bounds-checked parsing that round-trips
- ``tcb``: TCB info and QE identity: parsing and status evaluation
- ``verify``: verification of a quote against collateral and a policy
"""
