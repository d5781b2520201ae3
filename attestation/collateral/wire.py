"""The JSON wire format of collateral: one JSON object of strings.

Intel (the form Intel PCS/PCCS data takes in dcap-qvl)::

    {"format": "intel-dcap",                    (optional for Intel: the default)
     "pck_crl_issuer_chain": PEM, "root_ca_crl": hex DER, "pck_crl": hex DER,
     "tcb_info_issuer_chain": PEM, "tcb_info": exact signed JSON text, "tcb_info_signature": hex r||s,
     "qe_identity_issuer_chain": PEM, "qe_identity": exact signed JSON text, "qe_identity_signature": hex}

AMD SEV-SNP::

    {"format": "amd-sev-snp", "vcek": PEM (or hex DER), "cert_chain": PEM ASK then ARK,
     "crl": hex DER (optional: the ARK's CRL from AMD KDS)}

NVIDIA H100::

    {"format": "nvidia-h100", "cert_chain": PEM device chain, leaf (attestation key) first}

Signatures are over the raw strings ``tcb_info`` and ``qe_identity``: never re-serialize them.
"""

from __future__ import annotations

import json
import reprlib
from pathlib import Path
from typing import Any

from attestation.collateral.kinds import (
    FORMAT_INTEL,
    FORMAT_NVIDIA,
    FORMAT_SNP,
    INTEL_KEYS,
    Collateral,
    IntelCollateral,
    NvidiaCollateral,
    SnpCollateral,
)
from attestation.errors import MalformedCollateralError
from attestation.limits import DEFAULT_LIMITS, Limits, check_size


def _hexfield(d: dict[str, Any], key: str) -> bytes:
    v = d.get(key)
    if not isinstance(v, str):
        raise MalformedCollateralError(f"collateral: {key} must be a string")
    try:
        return bytes.fromhex(v)
    except ValueError:
        raise MalformedCollateralError(f"collateral: {key} is not hex") from None


def _strfield(d: dict[str, Any], key: str) -> str:
    v = d.get(key)
    if not isinstance(v, str):
        raise MalformedCollateralError(f"collateral: {key} must be a string")
    return v


def collateral_from_dict(d: Any, limits: Limits = DEFAULT_LIMITS) -> Collateral:
    """Build collateral from its JSON form (see the module doc); every part is checked against ``limits``."""
    coll = _from_dict(d, limits)
    coll.check_limits(limits)
    return coll


def _from_dict(d: Any, limits: Limits) -> Collateral:
    if not isinstance(d, dict):
        raise MalformedCollateralError("collateral must be a JSON object")
    fmt = d.get("format", FORMAT_INTEL)
    if fmt == FORMAT_INTEL:
        missing = [k for k in INTEL_KEYS if k not in d]
        if missing:
            raise MalformedCollateralError(f"Intel collateral lacks {missing}")
        return IntelCollateral(
            pck_crl_issuer_chain=_strfield(d, "pck_crl_issuer_chain"),
            root_ca_crl=_hexfield(d, "root_ca_crl"),
            pck_crl=_hexfield(d, "pck_crl"),
            tcb_info_issuer_chain=_strfield(d, "tcb_info_issuer_chain"),
            tcb_info=_strfield(d, "tcb_info"),
            tcb_info_signature=_hexfield(d, "tcb_info_signature"),
            qe_identity_issuer_chain=_strfield(d, "qe_identity_issuer_chain"),
            qe_identity=_strfield(d, "qe_identity"),
            qe_identity_signature=_hexfield(d, "qe_identity_signature"),
            limits=limits,
        )
    if fmt == FORMAT_SNP:
        vcek_s = _strfield(d, "vcek")
        vcek = vcek_s.encode() if vcek_s.lstrip().startswith("-----") else _hexfield(d, "vcek")
        crl = _hexfield(d, "crl") if d.get("crl") is not None else None
        return SnpCollateral(vcek, _strfield(d, "cert_chain").encode(), crl, limits)
    if fmt == FORMAT_NVIDIA:
        return NvidiaCollateral(_strfield(d, "cert_chain").encode(), limits)
    raise MalformedCollateralError(
        f"unknown collateral format {reprlib.repr(fmt)} (intel-dcap, amd-sev-snp, nvidia-h100)"
    )


class _NotFlat(Exception):
    """Raised from the JSON decoder's hooks: the collateral is not one object of strings."""


def _no_number(text: str) -> object:
    raise _NotFlat(f"a number ({reprlib.repr(text)})")


def _one_object() -> Any:
    seen = 0

    def hook(pairs: list[tuple[str, Any]]) -> dict[str, Any]:
        nonlocal seen
        seen += 1
        if seen > 1:
            raise _NotFlat("a nested object")
        return dict(pairs)

    return hook


def loads_collateral(text: str | bytes, limits: Limits = DEFAULT_LIMITS) -> Collateral:
    """Parse collateral JSON text: one object whose values are strings (or null).

    Refused before parsing when over ``max_collateral_bytes``; while parsing, at the first number or
    the second object (the decoder's hooks raise), so no input builds more than the cap's worth of
    arrays of empty values.
    """
    check_size(text, limits.max_collateral_bytes, "the collateral")
    try:
        data = json.loads(
            text,
            parse_int=_no_number,
            parse_float=_no_number,
            parse_constant=_no_number,
            object_pairs_hook=_one_object(),
        )
    except _NotFlat as exc:
        raise MalformedCollateralError(
            f"collateral must be one JSON object of strings; it holds {exc}"
        ) from None
    except (ValueError, RecursionError) as exc:
        raise MalformedCollateralError(f"collateral is not JSON ({exc})") from None
    return collateral_from_dict(data, limits)


def load_collateral(path: str | Path, limits: Limits = DEFAULT_LIMITS) -> Collateral:
    """Read a collateral JSON file (at most ``max_collateral_bytes`` are read)."""
    try:
        with Path(path).open("rb") as f:
            text = f.read(limits.max_collateral_bytes + 1)
    except OSError as exc:
        raise MalformedCollateralError(f"collateral file {path}: {exc}") from None
    return loads_collateral(text, limits)


def dumps_collateral(c: Collateral) -> str:
    """The JSON wire form of ``c``."""
    return json.dumps(c.to_dict(), indent=1)
