"""The three kinds of collateral (Intel DCAP, AMD SEV-SNP, NVIDIA H100): their parts, caps and parsed views.

Each is a frozen dataclass of the raw parts as shipped (see :mod:`attestation.collateral.wire` for the
JSON form); the parsed certificates, CRLs and documents are cached properties, parsed on first use under
the collateral's :class:`~attestation.limits.Limits`.
"""

from __future__ import annotations

import functools
from dataclasses import dataclass, field

from cryptography import x509

from attestation.certchain import X509_ERRORS, load_cert_any, load_pem_chain
from attestation.errors import MalformedCollateralError
from attestation.intel.tcb import QeIdentity, TcbInfo
from attestation.limits import DEFAULT_LIMITS, Limits, check_pem_count, check_size

FORMAT_INTEL = "intel-dcap"
FORMAT_SNP = "amd-sev-snp"
FORMAT_NVIDIA = "nvidia-h100"

INTEL_KEYS = (
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
"""The parts of Intel collateral, as named in its JSON form."""


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
        return sum(len(getattr(self, k)) for k in INTEL_KEYS)

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
