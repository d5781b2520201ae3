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
import reprlib
from collections import OrderedDict
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

from cryptography import x509

from attestation.certchain import X509_ERRORS, load_cert_any, load_pem_chain
from attestation.errors import MalformedCollateralError
from attestation.intel.tcb import QeIdentity, TcbInfo
from attestation.limits import DEFAULT_LIMITS, Limits, check_pem_count, check_size

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


def _load_crl(der: bytes, what: str, limits: Limits = DEFAULT_LIMITS) -> x509.CertificateRevocationList:
    check_size(der, limits.max_crl_bytes, what)
    try:
        crl = x509.load_der_x509_crl(der)
        crl.issuer.rfc4514_string()
        _ = (crl.last_update_utc, crl.next_update_utc, crl.signature_hash_algorithm)
        len(crl)  # the revoked entries are looked up (``is_revoked``), never iterated in Python
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
    limits: Limits = field(default=DEFAULT_LIMITS, repr=False)
    """The caps its parts are parsed under (``verify`` checks the policy's caps as well)."""

    format = FORMAT_INTEL

    def check_limits(self, limits: Limits) -> None:
        """Refuse any part over its cap (lengths and certificate counts only: nothing is parsed)."""
        for text, name in ((self.tcb_info, "the TCB info"), (self.qe_identity, "the QE identity")):
            check_size(text, limits.max_document_bytes, name)
        for sig, name in ((self.tcb_info_signature, "TCB info"), (self.qe_identity_signature, "QE identity")):
            check_size(sig, limits.max_signature_bytes, f"the {name} signature")
        for crl, name in ((self.root_ca_crl, "the root CA CRL"), (self.pck_crl, "the PCK CRL")):
            check_size(crl, limits.max_crl_bytes, name)
        for chain, name in (
            (self.tcb_info_issuer_chain, "TCB info issuer chain"),
            (self.qe_identity_issuer_chain, "QE identity issuer chain"),
            (self.pck_crl_issuer_chain, "PCK CRL issuer chain"),
        ):
            check_size(chain, limits.max_pem_chain_bytes, name)
            check_pem_count(chain.encode(), limits.max_collateral_chain_certs, name, evidence=False)

    def _chain(self, text: str, what: str) -> list[x509.Certificate]:
        lim = self.limits
        return load_pem_chain(
            text.encode(),
            what,
            evidence=False,
            max_certs=lim.max_collateral_chain_certs,
            max_bytes=lim.max_pem_chain_bytes,
            max_cert_bytes=lim.max_certificate_bytes,
        )

    @functools.cached_property
    def tcb_info_parsed(self) -> TcbInfo:
        """The parsed TCB info (parse it only once its signature has been checked)."""
        check_size(self.tcb_info, self.limits.max_document_bytes, "the TCB info")
        return TcbInfo.parse(self.tcb_info)

    @functools.cached_property
    def qe_identity_parsed(self) -> QeIdentity:
        """The parsed QE identity (parse it only once its signature has been checked)."""
        check_size(self.qe_identity, self.limits.max_document_bytes, "the QE identity")
        return QeIdentity.parse(self.qe_identity)

    @functools.cached_property
    def tcb_info_chain(self) -> list[x509.Certificate]:
        """The TCB signing chain, leaf first."""
        return self._chain(self.tcb_info_issuer_chain, "TCB info issuer chain")

    @functools.cached_property
    def qe_identity_chain(self) -> list[x509.Certificate]:
        """The QE identity signing chain, leaf first."""
        return self._chain(self.qe_identity_issuer_chain, "QE identity issuer chain")

    @functools.cached_property
    def pck_crl_chain(self) -> list[x509.Certificate]:
        """The PCK CRL issuer chain, PCK CA first."""
        return self._chain(self.pck_crl_issuer_chain, "PCK CRL issuer chain")

    @functools.cached_property
    def root_crl(self) -> x509.CertificateRevocationList:
        """The root CA CRL."""
        return _load_crl(self.root_ca_crl, "root CA CRL", self.limits)

    @functools.cached_property
    def pck_crl_parsed(self) -> x509.CertificateRevocationList:
        """The PCK CA CRL."""
        return _load_crl(self.pck_crl, "PCK CRL", self.limits)

    def size(self) -> int:
        """The bytes of its parts (what a cache is charged for it, times a parse factor)."""
        return sum(len(getattr(self, k)) for k in _INTEL_KEYS)

    def preload(self) -> IntelCollateral:
        """Parse everything now (a cache does this once, so verify only checks).

        The chains and CRLs are parsed; the TCB info and QE identity JSON only once their signatures
        verify (``verify`` does that), so a forged multi-megabyte document costs no parse.
        """
        for name in (
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
    limits: Limits = field(default=DEFAULT_LIMITS, repr=False)

    format = FORMAT_SNP

    def check_limits(self, limits: Limits) -> None:
        """Refuse any part over its cap (lengths and certificate counts only)."""
        check_size(self.vcek, limits.max_pem_chain_bytes, "the VCEK")
        check_size(self.cert_chain, limits.max_pem_chain_bytes, "the ASK/ARK chain")
        check_pem_count(self.cert_chain, limits.max_snp_chain_certs, "the ASK/ARK chain", evidence=False)
        if self.crl is not None:
            check_size(self.crl, limits.max_crl_bytes, "the AMD CRL")

    def size(self) -> int:
        """The bytes of its parts."""
        return len(self.vcek) + len(self.cert_chain) + len(self.crl or b"")

    @functools.cached_property
    def vcek_cert(self) -> x509.Certificate:
        """The parsed VCEK."""
        return load_cert_any(self.vcek, "VCEK")

    @functools.cached_property
    def chain(self) -> list[x509.Certificate]:
        """The parsed ASK (and ARK)."""
        lim = self.limits
        return load_pem_chain(
            self.cert_chain,
            "ASK/ARK chain",
            evidence=False,
            max_certs=lim.max_snp_chain_certs,
            max_bytes=lim.max_pem_chain_bytes,
            max_cert_bytes=lim.max_certificate_bytes,
        )

    @functools.cached_property
    def crl_parsed(self) -> x509.CertificateRevocationList | None:
        """The parsed CRL, if given."""
        return None if self.crl is None else _load_crl(self.crl, "AMD ARK CRL", self.limits)

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
    limits: Limits = field(default=DEFAULT_LIMITS, repr=False)

    format = FORMAT_NVIDIA

    def check_limits(self, limits: Limits) -> None:
        """Refuse a chain over its caps (length and certificate count only)."""
        check_size(self.cert_chain, limits.max_pem_chain_bytes, "the GPU certificate chain")
        check_pem_count(
            self.cert_chain, limits.max_gpu_chain_certs, "the GPU certificate chain", evidence=False
        )

    def size(self) -> int:
        """The bytes of its parts."""
        return len(self.cert_chain)

    @functools.cached_property
    def chain(self) -> list[x509.Certificate]:
        """The parsed chain."""
        lim = self.limits
        return load_pem_chain(
            self.cert_chain,
            "GPU certificate chain",
            evidence=False,
            max_certs=lim.max_gpu_chain_certs,
            max_bytes=lim.max_pem_chain_bytes,
            max_cert_bytes=lim.max_certificate_bytes,
        )

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


PARSE_FACTOR = 4
"""A parsed collateral entry is charged this many times its JSON text (certificates, CRLs, parsed JSON)."""


class CollateralCache:
    """A validator-side cache of parsed collateral, keyed by the SHA-256 of its JSON text.

    Miners ship collateral with their evidence; many miners share a platform, so the same collateral
    arrives many times. The cache parses each distinct document once (certificates, CRLs, TCB info), so
    ``verify`` only checks signatures and windows. It never reads the clock: ``evict_expired(now)``
    drops Intel entries whose TCB info or QE identity ``nextUpdate`` has passed. It is bounded both in
    entries (``max_entries``) and in bytes (``max_bytes``, each entry charged ``PARSE_FACTOR`` times its
    text); every text is checked against ``limits`` before it is parsed.
    """

    def __init__(
        self, max_entries: int = 256, max_bytes: int = 32 * 1024 * 1024, limits: Limits = DEFAULT_LIMITS
    ) -> None:
        self._max = max_entries
        self._max_bytes = max_bytes
        self._limits = limits
        self._entries: OrderedDict[bytes, Collateral] = OrderedDict()
        self._sizes: dict[bytes, int] = {}
        self._bytes = 0
        self.hits = 0
        self.misses = 0

    def __len__(self) -> int:
        return len(self._entries)

    @property
    def held_bytes(self) -> int:
        """Estimated bytes held: ``PARSE_FACTOR`` times the text of each entry."""
        return self._bytes

    def _drop(self, key: bytes) -> None:
        del self._entries[key]
        self._bytes -= self._sizes.pop(key)

    def get(self, text: str | bytes) -> Collateral:
        """Return the parsed collateral for ``text`` (parsing and preloading it on a miss)."""
        check_size(text, self._limits.max_collateral_bytes, "the collateral")  # before hashing it
        raw = text.encode() if isinstance(text, str) else text
        key = hashlib.sha256(raw).digest()
        hit = self._entries.get(key)
        if hit is not None:
            self._entries.move_to_end(key)
            self.hits += 1
            return hit
        self.misses += 1
        coll = loads_collateral(raw, self._limits)
        coll.preload()
        size = PARSE_FACTOR * len(raw)
        if size > self._max_bytes:
            return coll
        self._entries[key] = coll
        self._sizes[key] = size
        self._bytes += size
        while len(self._entries) > self._max or self._bytes > self._max_bytes:
            self._drop(next(iter(self._entries)))
        return coll

    def evict_expired(self, now: dt.datetime) -> int:
        """Drop Intel collateral past its nextUpdate at ``now`` (or undecodable); returns how many."""
        dead = [k for k, c in self._entries.items() if isinstance(c, IntelCollateral) and _expired(c, now)]
        for k in dead:
            self._drop(k)
        return len(dead)


def _expired(c: IntelCollateral, now: dt.datetime) -> bool:
    try:
        return min(c.tcb_info_parsed.next_update, c.qe_identity_parsed.next_update) < now
    except MalformedCollateralError:
        return True
