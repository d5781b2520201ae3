"""TEE evidence: parsers and a pure ``verify(evidence, collateral, policy, now)``, plus a simulated enclave.

Imports nothing else of Tessera's.
"""
