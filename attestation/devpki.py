"""The development PKI of :mod:`attestation.simulated`: keys, certificates, CRLs and signatures.

Keys derive from a seed; certificates have fixed serials and validity and RFC 6979 signatures, so the
same seed gives the same bytes. The PCK certificate carries Intel's SGX extension, encoded here by a
minimal DER writer. Nothing here is secret or secure.
"""

from __future__ import annotations

import datetime as dt
import hashlib

from cryptography import x509
from cryptography.hazmat.primitives import hashes, serialization
from cryptography.hazmat.primitives.asymmetric import ec
from cryptography.hazmat.primitives.asymmetric.utils import decode_dss_signature
from cryptography.x509.oid import NameOID

from attestation.intel.pck import SGX_EXTENSION_OID

NOT_BEFORE = dt.datetime(2020, 1, 1, tzinfo=dt.UTC)
NOT_AFTER = dt.datetime(2100, 1, 1, tzinfo=dt.UTC)
_P256_ORDER = 0xFFFFFFFF00000000FFFFFFFFFFFFFFFFBCE6FAADA7179E84F3B9CAC2FC632551


# --- a minimal DER encoder for the SGX extension -----------------------------------------------------------


def _der(tag: int, body: bytes) -> bytes:
    n = len(body)
    if n < 0x80:
        return bytes([tag, n]) + body
    ln = n.to_bytes((n.bit_length() + 7) // 8, "big")
    return bytes([tag, 0x80 | len(ln)]) + ln + body


def _der_int(v: int, tag: int = 0x02) -> bytes:
    raw = v.to_bytes(max(1, (v.bit_length() + 8) // 8), "big")
    return _der(tag, raw)


def _der_oid(dotted: str) -> bytes:
    arcs = [int(a) for a in dotted.split(".")]
    out = bytearray([40 * arcs[0] + arcs[1]])
    for a in arcs[2:]:
        chunk = [a & 0x7F]
        a >>= 7
        while a:
            chunk.append(0x80 | (a & 0x7F))
            a >>= 7
        out += bytes(reversed(chunk))
    return _der(0x06, bytes(out))


def _pair(oid: str, value: bytes) -> bytes:
    return _der(0x30, _der_oid(oid) + value)


def sgx_extension_der(fmspc: bytes, pce_id: bytes, cpu_svn: bytes, pce_svn: int, ppid: bytes) -> bytes:
    """The DER value of a PCK certificate's SGX extension (OID 1.2.840.113741.1.13.1)."""
    base = SGX_EXTENSION_OID
    tcb = b"".join(_pair(f"{base}.2.{i + 1}", _der_int(cpu_svn[i])) for i in range(16))
    tcb += _pair(f"{base}.2.17", _der_int(pce_svn)) + _pair(f"{base}.2.18", _der(0x04, cpu_svn))
    body = (
        _pair(f"{base}.1", _der(0x04, ppid))
        + _pair(f"{base}.2", _der(0x30, tcb))
        + _pair(f"{base}.3", _der(0x04, pce_id))
        + _pair(f"{base}.4", _der(0x04, fmspc))
        + _pair(f"{base}.5", _der_int(0, tag=0x0A))
    )
    return _der(0x30, body)


# --- keys and certificates ----------------------------------------------------------------------------------


def derive_key(seed: bytes, label: str) -> ec.EllipticCurvePrivateKey:
    """The P-256 key named ``label`` of the platform derived from ``seed`` (deterministic)."""
    digest = hashlib.sha512(b"tessera/simulated-enclave/" + label.encode() + b"/" + seed).digest()
    return ec.derive_private_key(int.from_bytes(digest, "big") % (_P256_ORDER - 1) + 1, ec.SECP256R1())


def dev_name(cn: str) -> x509.Name:
    """A development subject/issuer name (organization "Tessera Development (NOT Intel)")."""
    return x509.Name(
        [
            x509.NameAttribute(NameOID.COMMON_NAME, cn),
            x509.NameAttribute(NameOID.ORGANIZATION_NAME, "Tessera Development (NOT Intel)"),
            x509.NameAttribute(NameOID.COUNTRY_NAME, "US"),
        ]
    )


def make_cert(
    subject: x509.Name,
    key: ec.EllipticCurvePrivateKey,
    issuer: x509.Name,
    issuer_key: ec.EllipticCurvePrivateKey,
    serial: int,
    ca: bool,
    extra: list[x509.ExtensionType] | None = None,
) -> x509.Certificate:
    """A certificate valid from NOT_BEFORE to NOT_AFTER (a CA's or a leaf's key usages), RFC 6979-signed."""
    b = (
        x509.CertificateBuilder()
        .subject_name(subject)
        .issuer_name(issuer)
        .public_key(key.public_key())
        .serial_number(serial)
        .not_valid_before(NOT_BEFORE)
        .not_valid_after(NOT_AFTER)
        .add_extension(x509.BasicConstraints(ca=ca, path_length=None), critical=True)
        .add_extension(
            x509.KeyUsage(
                digital_signature=not ca,
                content_commitment=not ca,
                key_encipherment=False,
                data_encipherment=False,
                key_agreement=False,
                key_cert_sign=ca,
                crl_sign=ca,
                encipher_only=False,
                decipher_only=False,
            ),
            critical=True,
        )
        .add_extension(x509.SubjectKeyIdentifier.from_public_key(key.public_key()), critical=False)
        .add_extension(
            x509.AuthorityKeyIdentifier.from_issuer_public_key(issuer_key.public_key()), critical=False
        )
    )
    for ext in extra or []:
        b = b.add_extension(ext, critical=False)
    return b.sign(issuer_key, hashes.SHA256(), ecdsa_deterministic=True)


def raw_signature(key: ec.EllipticCurvePrivateKey, data: bytes) -> bytes:
    """A deterministic ECDSA P-256/SHA-256 signature of ``data`` as Intel writes them: r || s, 64 bytes."""
    r, s = decode_dss_signature(key.sign(data, ec.ECDSA(hashes.SHA256(), deterministic_signing=True)))
    return r.to_bytes(32, "big") + s.to_bytes(32, "big")


def pem(*certs: x509.Certificate) -> bytes:
    """The certificates as one PEM chain."""
    return b"".join(c.public_bytes(serialization.Encoding.PEM) for c in certs)


def iso_time(t: dt.datetime) -> str:
    """A time as Intel's collateral writes it (``2025-06-19T10:16:03Z``)."""
    return t.astimezone(dt.UTC).strftime("%Y-%m-%dT%H:%M:%SZ")


def crl_der(
    issuer: x509.Certificate,
    key: ec.EllipticCurvePrivateKey,
    issue: dt.datetime,
    nxt: dt.datetime,
    revoked: list[x509.Certificate],
) -> bytes:
    """A DER CRL by ``issuer`` (signed with ``key``) for [issue, nxt] revoking ``revoked``."""
    b = (
        x509.CertificateRevocationListBuilder()
        .issuer_name(issuer.subject)
        .last_update(issue)
        .next_update(nxt)
    )
    for cert in revoked:
        b = b.add_revoked_certificate(
            x509.RevokedCertificateBuilder().serial_number(cert.serial_number).revocation_date(issue).build()
        )
    return b.sign(key, hashes.SHA256(), ecdsa_deterministic=True).public_bytes(serialization.Encoding.DER)
