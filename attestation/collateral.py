"""Collateral: what a verifier needs besides the evidence, its JSON wire format, and a validator cache.

Wire format: one JSON object of strings. Intel (the form Intel PCS/PCCS data takes in dcap-qvl)::

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

import datetime as dt
import functools
import hashlib
import json
from collections import OrderedDict
from dataclasses import dataclass
from pathlib import Path
from typing import Any

from cryptography import x509

from attestation.certchain import X509_ERRORS, load_cert_any, load_pem_chain
from attestation.errors import MalformedCollateralError
from attestation.intel.tcb import QeIdentity, TcbInfo

FORMAT_INTEL = "intel-dcap"
FORMAT_SNP = "amd-sev-snp"
FORMAT_NVIDIA = "nvidia-h100"

_INTEL_KEYS = (
    "pck_crl_issuer_chain",
    "root_ca_crl",
    "pck_crl",
    "tcb_info_issuer_chain",
    "tcb_info",
    "tcb_info_signature",
    "qe_identity_issuer_chain",
    "qe_identity",
    "qe_identity_signature",
)


def _load_crl(der: bytes, what: str) -> x509.CertificateRevocationList:
    try:
        crl = x509.load_der_x509_crl(der)
        crl.issuer.rfc4514_string()
        _ = (crl.last_update_utc, crl.next_update_utc, crl.signature_hash_algorithm)
        for revoked in crl:
            _ = revoked.serial_number
    except X509_ERRORS as exc:
        raise MalformedCollateralError(f"{what}: the CRL cannot be decoded ({exc})") from None
    return crl


@dataclass(frozen=True, eq=False)
class IntelCollateral:
    """Intel DCAP collateral for one platform (FMSPC) and TEE type; parsed parts are cached."""

    pck_crl_issuer_chain: str
    root_ca_crl: bytes
    pck_crl: bytes
    tcb_info_issuer_chain: str
    tcb_info: str
    tcb_info_signature: bytes
    qe_identity_issuer_chain: str
    qe_identity: str
    qe_identity_signature: bytes

    format = FORMAT_INTEL

    @functools.cached_property
    def tcb_info_parsed(self) -> TcbInfo:
        """The parsed TCB info."""
        return TcbInfo.parse(self.tcb_info)

    @functools.cached_property
    def qe_identity_parsed(self) -> QeIdentity:
        """The parsed QE identity."""
        return QeIdentity.parse(self.qe_identity)

    @functools.cached_property
    def tcb_info_chain(self) -> list[x509.Certificate]:
        """The TCB signing chain, leaf first."""
        return load_pem_chain(self.tcb_info_issuer_chain.encode(), "TCB info issuer chain", evidence=False)

    @functools.cached_property
    def qe_identity_chain(self) -> list[x509.Certificate]:
        """The QE identity signing chain, leaf first."""
        return load_pem_chain(
            self.qe_identity_issuer_chain.encode(), "QE identity issuer chain", evidence=False
        )

    @functools.cached_property
    def pck_crl_chain(self) -> list[x509.Certificate]:
        """The PCK CRL issuer chain, PCK CA first."""
        return load_pem_chain(self.pck_crl_issuer_chain.encode(), "PCK CRL issuer chain", evidence=False)

    @functools.cached_property
    def root_crl(self) -> x509.CertificateRevocationList:
        """The root CA CRL."""
        return _load_crl(self.root_ca_crl, "root CA CRL")

    @functools.cached_property
    def pck_crl_parsed(self) -> x509.CertificateRevocationList:
        """The PCK CA CRL."""
        return _load_crl(self.pck_crl, "PCK CRL")

    def preload(self) -> IntelCollateral:
        """Parse everything now (a cache does this once, so verify only checks)."""
        for name in (
            "tcb_info_parsed",
            "qe_identity_parsed",
            "tcb_info_chain",
            "qe_identity_chain",
            "pck_crl_chain",
            "root_crl",
            "pck_crl_parsed",
        ):
            getattr(self, name)
        return self

    def to_dict(self) -> dict[str, str]:
        """The JSON wire form."""
        return {
            "format": FORMAT_INTEL,
            "pck_crl_issuer_chain": self.pck_crl_issuer_chain,
            "root_ca_crl": self.root_ca_crl.hex(),
            "pck_crl": self.pck_crl.hex(),
            "tcb_info_issuer_chain": self.tcb_info_issuer_chain,
            "tcb_info": self.tcb_info,
            "tcb_info_signature": self.tcb_info_signature.hex(),
            "qe_identity_issuer_chain": self.qe_identity_issuer_chain,
            "qe_identity": self.qe_identity,
            "qe_identity_signature": self.qe_identity_signature.hex(),
        }


@dataclass(frozen=True, eq=False)
class SnpCollateral:
    """AMD SEV-SNP collateral: the chip's VCEK and the ASK/ARK chain (and optionally the ARK's CRL)."""

    vcek: bytes
    """The VCEK certificate, DER or PEM."""
    cert_chain: bytes
    """PEM: the ASK then (optionally) the ARK."""
    crl: bytes | None = None
    """DER CRL signed by the ARK (AMD KDS ``/vcek/v1/{product}/crl``), optional."""

    format = FORMAT_SNP

    @functools.cached_property
    def vcek_cert(self) -> x509.Certificate:
        """The parsed VCEK."""
        return load_cert_any(self.vcek, "VCEK")

    @functools.cached_property
    def chain(self) -> list[x509.Certificate]:
        """The parsed ASK (and ARK)."""
        return load_pem_chain(self.cert_chain, "ASK/ARK chain", evidence=False)

    @functools.cached_property
    def crl_parsed(self) -> x509.CertificateRevocationList | None:
        """The parsed CRL, if given."""
        return None if self.crl is None else _load_crl(self.crl, "AMD ARK CRL")

    def preload(self) -> SnpCollateral:
        """Parse everything now."""
        _ = (self.vcek_cert, self.chain, self.crl_parsed)
        return self

    def to_dict(self) -> dict[str, str]:
        """The JSON wire form."""
        vcek = self.vcek.decode() if self.vcek.lstrip().startswith(b"-----") else self.vcek.hex()
        out = {"format": FORMAT_SNP, "vcek": vcek, "cert_chain": self.cert_chain.decode()}
        if self.crl is not None:
            out["crl"] = self.crl.hex()
        return out


@dataclass(frozen=True, eq=False)
class NvidiaCollateral:
    """NVIDIA GPU collateral: the device certificate chain read by SPDM GET_CERTIFICATE, leaf first."""

    cert_chain: bytes

    format = FORMAT_NVIDIA

    @functools.cached_property
    def chain(self) -> list[x509.Certificate]:
        """The parsed chain."""
        return load_pem_chain(self.cert_chain, "GPU certificate chain", evidence=False)

    def preload(self) -> NvidiaCollateral:
        """Parse everything now."""
        _ = self.chain
        return self

    def to_dict(self) -> dict[str, str]:
        """The JSON wire form."""
        return {"format": FORMAT_NVIDIA, "cert_chain": self.cert_chain.decode()}


Collateral = IntelCollateral | SnpCollateral | NvidiaCollateral


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


def collateral_from_dict(d: Any) -> Collateral:
    """Build collateral from its JSON form (see the module doc)."""
    if not isinstance(d, dict):
        raise MalformedCollateralError("collateral must be a JSON object")
    fmt = d.get("format", FORMAT_INTEL)
    if fmt == FORMAT_INTEL:
        missing = [k for k in _INTEL_KEYS if k not in d]
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
        )
    if fmt == FORMAT_SNP:
        vcek_s = _strfield(d, "vcek")
        vcek = vcek_s.encode() if vcek_s.lstrip().startswith("-----") else _hexfield(d, "vcek")
        crl = _hexfield(d, "crl") if d.get("crl") is not None else None
        return SnpCollateral(vcek, _strfield(d, "cert_chain").encode(), crl)
    if fmt == FORMAT_NVIDIA:
        return NvidiaCollateral(_strfield(d, "cert_chain").encode())
    raise MalformedCollateralError(
        f"unknown collateral format {fmt!r} (intel-dcap, amd-sev-snp, nvidia-h100)"
    )


def loads_collateral(text: str | bytes) -> Collateral:
    """Parse collateral JSON text."""
    try:
        data = json.loads(text)
    except (ValueError, RecursionError) as exc:
        raise MalformedCollateralError(f"collateral is not JSON ({exc})") from None
    return collateral_from_dict(data)


def load_collateral(path: str | Path) -> Collateral:
    """Read a collateral JSON file."""
    try:
        text = Path(path).read_bytes()
    except OSError as exc:
        raise MalformedCollateralError(f"collateral file {path}: {exc}") from None
    return loads_collateral(text)


def dumps_collateral(c: Collateral) -> str:
    """The JSON wire form of ``c``."""
    return json.dumps(c.to_dict(), indent=1)


class CollateralCache:
    """A validator-side cache of parsed collateral, keyed by the SHA-256 of its JSON text.

    Miners ship collateral with their evidence; many miners share a platform, so the same collateral
    arrives many times. The cache parses each distinct document once (certificates, CRLs, TCB info), so
    ``verify`` only checks signatures and windows. It never reads the clock: ``evict_expired(now)``
    drops Intel entries whose TCB info or QE identity ``nextUpdate`` has passed.
    """

    def __init__(self, max_entries: int = 256) -> None:
        self._max = max_entries
        self._entries: OrderedDict[bytes, Collateral] = OrderedDict()
        self.hits = 0
        self.misses = 0

    def __len__(self) -> int:
        return len(self._entries)

    def get(self, text: str | bytes) -> Collateral:
        """Return the parsed collateral for ``text`` (parsing and preloading it on a miss)."""
        raw = text.encode() if isinstance(text, str) else text
        key = hashlib.sha256(raw).digest()
        hit = self._entries.get(key)
        if hit is not None:
            self._entries.move_to_end(key)
            self.hits += 1
            return hit
        self.misses += 1
        coll = loads_collateral(raw)
        coll.preload()
        self._entries[key] = coll
        while len(self._entries) > self._max:
            self._entries.popitem(last=False)
        return coll

    def evict_expired(self, now: dt.datetime) -> int:
        """Drop Intel collateral past its nextUpdate at ``now``; returns how many were dropped."""
        dead = [
            k
            for k, c in self._entries.items()
            if isinstance(c, IntelCollateral)
            and min(c.tcb_info_parsed.next_update, c.qe_identity_parsed.next_update) < now
        ]
        for k in dead:
            del self._entries[k]
        return len(dead)
