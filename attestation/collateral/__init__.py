"""Collateral: what a verifier needs besides the evidence, its JSON wire format, and a validator cache.

Import them from here. Modules:

- ``cache``: the :class:`CollateralCache`, bounded in entries and bytes
- ``kinds``: the three kinds (:class:`IntelCollateral`, :class:`SnpCollateral`, :class:`NvidiaCollateral`)
- ``wire``: their JSON form (``loads_collateral``, ``load_collateral``, ``dumps_collateral``)
"""

from attestation.collateral.cache import PARSE_FACTOR, CollateralCache
from attestation.collateral.kinds import (
    FORMAT_INTEL,
    FORMAT_NVIDIA,
    FORMAT_SNP,
    Collateral,
    IntelCollateral,
    NvidiaCollateral,
    SnpCollateral,
)
from attestation.collateral.wire import (
    collateral_from_dict,
    dumps_collateral,
    load_collateral,
    loads_collateral,
)

__all__ = [
    "FORMAT_INTEL",
    "FORMAT_NVIDIA",
    "FORMAT_SNP",
    "PARSE_FACTOR",
    "Collateral",
    "CollateralCache",
    "IntelCollateral",
    "NvidiaCollateral",
    "SnpCollateral",
    "collateral_from_dict",
    "dumps_collateral",
    "load_collateral",
    "loads_collateral",
]
