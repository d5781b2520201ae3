"""X.509 certificate chains to pinned vendor roots, with typed errors for every way they fail."""

from __future__ import annotations

import base64
import binascii
import datetime as dt
import re
import warnings
from collections.abc import Sequence

from cryptography import x509
from cryptography.exceptions import InvalidSignature, UnsupportedAlgorithm
from cryptography.hazmat.primitives import serialization
from cryptography.x509.verification import ExtensionPolicy, PolicyBuilder, Store, VerificationError

from attestation.errors import (
    BadChainError,
    CertificateExpiredError,
    CertificateNotYetValidError,
    CollateralExpiredError,
    CollateralNotYetValidError,
    CollateralTooLargeError,
    EvidenceTooLargeError,
    MalformedCollateralError,
    MalformedError,
    MalformedEvidenceError,
    ValidityWindowError,
)
from attestation.limits import DEFAULT_LIMITS, check_pem_count, check_size
from attestation.memo import bytes_memo, deep_cost

MEMO_BYTES = 8 * 1024 * 1024
"""Byte budget of each memo of this module (an accepted chain costs a few KB)."""

X509_ERRORS: tuple[type[Exception], ...] = (
    ValueError,
    TypeError,
    UnsupportedAlgorithm,
    x509.DuplicateExtension,
    x509.InvalidVersion,
    x509.UnsupportedGeneralNameType,
)
"""Everything cryptography raises on malformed certificates, CRLs and keys."""
_SIGNATURE_ERRORS: tuple[type[Exception], ...] = (*X509_ERRORS, InvalidSignature)
_PATH_ERRORS: tuple[type[Exception], ...] = (*X509_ERRORS, VerificationError)


def _quiet_load(loader, data):  # type: ignore[no-untyped-def]
    # AMD's VCEKs carry serial number 0, which cryptography reports with a deprecation warning.
    with warnings.catch_warnings():
        warnings.simplefilter("ignore")
        return loader(data)


def _force(cert: x509.Certificate, what: str, err: type[MalformedError]) -> x509.Certificate:
    """Decode every lazily parsed field we use, so later accesses cannot raise untyped errors."""
    try:
        with warnings.catch_warnings():
            warnings.simplefilter("ignore")
            _ = (cert.subject, cert.issuer)
            _ = (cert.not_valid_before_utc, cert.not_valid_after_utc, cert.serial_number)
            cert.public_key()
            _ = cert.signature_hash_algorithm
            for _ext in cert.extensions:
                pass
    except X509_ERRORS as exc:
        raise err(f"{what}: a certificate cannot be decoded ({exc})") from None
    return cert


_PEM_BLOCK = re.compile(rb"-----BEGIN CERTIFICATE-----\r?\n([A-Za-z0-9+/=\r\n]*?)-----END CERTIFICATE-----")
_PEM_GAP = re.compile(rb"[\r\n\x00]*")


def split_pem(
    pem: bytes,
    what: str,
    err: type[MalformedError] = MalformedEvidenceError,
    max_der: int = DEFAULT_LIMITS.max_certificate_bytes,
) -> list[bytes]:
    """Strictly split concatenated PEM certificates into DER blobs.

    Only CERTIFICATE blocks separated by line breaks (and NUL padding at the end) are allowed, and each
    block must be canonical base64 (so no two different texts carry the same certificates) of at most
    ``max_der`` bytes (checked on the base64 length, before decoding).
    """
    ders: list[bytes] = []
    pos = 0
    for m in _PEM_BLOCK.finditer(pem):
        if not _PEM_GAP.fullmatch(pem, pos, m.start()):
            raise err(f"{what}: unexpected bytes between PEM certificates at offset {pos}")
        body = m.group(1)
        lines = body.split(b"\n")
        if lines[-1] != b"":
            raise err(f"{what}: a PEM certificate does not end its base64 with a line break")
        b64 = b"".join(line[:-1] if line.endswith(b"\r") else line for line in lines)
        if len(b64) > (max_der + 2) // 3 * 4:
            big = EvidenceTooLargeError if err is MalformedEvidenceError else CollateralTooLargeError
            raise big(f"{what}: a certificate is over the {max_der:,}-byte cap")
        try:
            der = base64.b64decode(b64, validate=True)
        except (ValueError, binascii.Error):
            raise err(f"{what}: a PEM certificate is not valid base64") from None
        if base64.b64encode(der) != b64:
            raise err(f"{what}: a PEM certificate is not canonical base64")
        ders.append(der)
        pos = m.end()
    if not _PEM_GAP.fullmatch(pem, pos):
        raise err(f"{what}: unexpected bytes after the last PEM certificate (offset {pos})")
    return ders


def load_pem_chain(
    pem: bytes,
    what: str,
    *,
    evidence: bool = True,
    max_certs: int = DEFAULT_LIMITS.max_gpu_chain_certs,
    max_bytes: int = DEFAULT_LIMITS.max_pem_chain_bytes,
    max_cert_bytes: int = DEFAULT_LIMITS.max_certificate_bytes,
) -> list[x509.Certificate]:
    """Load the concatenated PEM certificates in ``pem`` (trailing NUL bytes tolerated), leaf first.

    The size of ``pem`` and its number of certificates are capped before anything is decoded
    (``EvidenceTooLargeError`` / ``CollateralTooLargeError``). Memoized by the exact bytes (certificates
    are immutable; the memo is bounded in bytes): many quotes of one platform share a chain.
    """
    pem = bytes(pem)
    check_size(pem, max_bytes, what, evidence=evidence)
    check_pem_count(pem, max_certs, what, evidence=evidence)
    return list(_load_pem_chain(pem, what, evidence, max_cert_bytes))


def _chain_cost(pem: bytes, what: str, evidence: bool, max_cert_bytes: int, *, result: object) -> int:
    return 2 * len(pem) + deep_cost(result)


@bytes_memo(MEMO_BYTES, _chain_cost)
def _load_pem_chain(
    pem: bytes, what: str, evidence: bool, max_cert_bytes: int
) -> tuple[x509.Certificate, ...]:
    err: type[MalformedError] = MalformedEvidenceError if evidence else MalformedCollateralError
    ders = split_pem(pem, what, err, max_cert_bytes)
    if not ders:
        raise err(f"{what}: no certificate found")
    out = []
    for der in ders:
        try:
            cert = _quiet_load(x509.load_der_x509_certificate, der)
        except X509_ERRORS as exc:
            raise err(f"{what}: a certificate cannot be decoded ({exc})") from None
        out.append(_force(cert, what, err))
    return tuple(out)


def _der_cost(der: bytes, what: str = "", *, result: object) -> int:
    return len(der) + deep_cost(result)


@bytes_memo(MEMO_BYTES, _der_cost)
def load_der_cert(der: bytes, what: str = "certificate") -> x509.Certificate:
    """Load one DER certificate (cached: pinned roots are loaded once)."""
    check_size(der, DEFAULT_LIMITS.max_certificate_bytes, what)
    try:
        cert = _quiet_load(x509.load_der_x509_certificate, der)
    except X509_ERRORS as exc:
        raise MalformedCollateralError(f"{what}: the DER certificate cannot be decoded ({exc})") from None
    return _force(cert, what, MalformedCollateralError)


def load_cert_any(data: bytes, what: str, *, evidence: bool = False) -> x509.Certificate:
    """Load one certificate given as PEM or DER (at most one certificate's size, checked first)."""
    check_size(data, DEFAULT_LIMITS.max_pem_chain_bytes, what, evidence=evidence)
    if data.lstrip().startswith(b"-----BEGIN"):
        chain = load_pem_chain(data, what, evidence=evidence, max_certs=1)
        if len(chain) != 1:
            raise MalformedCollateralError(f"{what}: expected one certificate, found {len(chain)}")
        return chain[0]
    err: type[MalformedError] = MalformedEvidenceError if evidence else MalformedCollateralError
    check_size(data, DEFAULT_LIMITS.max_certificate_bytes, what, evidence=evidence)
    try:
        cert = _quiet_load(x509.load_der_x509_certificate, data)
    except X509_ERRORS as exc:
        raise err(f"{what}: the certificate cannot be decoded ({exc})") from None
    return _force(cert, what, err)


def _spki_cost(cert: x509.Certificate, *, result: bytes) -> int:
    return deep_cost(cert) + len(result)


@bytes_memo(MEMO_BYTES, _spki_cost)
def _spki(cert: x509.Certificate) -> bytes:
    return cert.public_key().public_bytes(
        serialization.Encoding.DER, serialization.PublicFormat.SubjectPublicKeyInfo
    )


def spki_of(cert: x509.Certificate) -> bytes:
    """The DER SubjectPublicKeyInfo of ``cert`` (what a pinned root is identified by)."""
    return _spki(cert)


def subject_of(cert: x509.Certificate) -> str:
    """A readable subject for messages."""
    try:
        return cert.subject.rfc4514_string()
    except X509_ERRORS:
        return "<undecodable subject>"


def check_window(
    not_before: dt.datetime | None,
    not_after: dt.datetime | None,
    now: dt.datetime,
    what: str,
    fix: str,
    *,
    expired: type[ValidityWindowError] = CollateralExpiredError,
    not_yet: type[ValidityWindowError] = CollateralNotYetValidError,
) -> None:
    """Raise the typed validity error when ``now`` is outside [not_before, not_after]."""
    if not_before is not None and now < not_before:
        raise not_yet(
            f"{what} is not valid before {not_before.isoformat()} (verification time {now.isoformat()}); "
            f"{fix}"
        )
    if not_after is not None and now > not_after:
        raise expired(
            f"{what} expired at {not_after.isoformat()} (verification time {now.isoformat()}); {fix}"
        )


def check_cert_window(cert: x509.Certificate, now: dt.datetime, what: str) -> None:
    """Raise the typed validity error when ``cert`` is not valid at ``now``."""
    check_window(
        cert.not_valid_before_utc,
        cert.not_valid_after_utc,
        now,
        f"{what}: certificate '{subject_of(cert)}'",
        "fetch current certificates and collateral from the vendor and attest again",
        expired=CertificateExpiredError,
        not_yet=CertificateNotYetValidError,
    )


def _is_ca(cert: x509.Certificate) -> bool:
    try:
        bc = cert.extensions.get_extension_for_class(x509.BasicConstraints).value
    except x509.ExtensionNotFound:
        return False
    except ValueError:
        return False
    return bool(bc.ca)


def verify_chain(
    chain: Sequence[x509.Certificate],
    roots: Sequence[x509.Certificate],
    now: dt.datetime,
    what: str,
    *,
    require_ca: bool = True,
) -> x509.Certificate:
    """Check ``chain`` (leaf first) signature by signature up to one of the pinned ``roots``.

    The top of the chain is either a pinned root (same subject and public key) or a certificate
    issued directly by one. Every certificate must be valid at ``now``. Returns the pinned root.
    """
    if not chain:
        raise BadChainError(f"{what}: empty certificate chain")
    if not roots:
        raise BadChainError(
            f"{what}: the policy pins no root for this vendor; add the vendor root to the policy"
        )
    for cert in chain:
        check_cert_window(cert, now, what)
    root = chain_root(tuple(chain), tuple(roots), what, require_ca)
    check_cert_window(root, now, what)
    return root


def _args_cost(*args: object, result: object) -> int:
    return deep_cost(args) + deep_cost(result)


@bytes_memo(MEMO_BYTES, _args_cost)
def chain_root(
    chain: tuple[x509.Certificate, ...], roots: tuple[x509.Certificate, ...], what: str, require_ca: bool
) -> x509.Certificate:
    """The signature checks of ``verify_chain`` (time-independent, so memoized per exact chain)."""
    if len(set(chain)) != len(chain):
        raise BadChainError(f"{what}: a certificate appears twice; send the vendor's chain as it is")
    for child, issuer in zip(chain, chain[1:], strict=False):
        _check_issued(child, issuer, what, require_ca=require_ca)
    top = chain[-1]
    for root in roots:
        if top.subject == root.subject and spki_of(top) == spki_of(root):
            if top != root:
                raise BadChainError(
                    f"{what}: the chain's copy of the root '{subject_of(top)}' differs from the pinned one"
                )
            return root
    for root in roots:
        if top.issuer == root.subject:
            try:
                _check_issued(top, root, what, require_ca=require_ca)
            except BadChainError:
                continue
            return root
    raise BadChainError(
        f"{what}: the chain ends at '{subject_of(top)}', which is not a pinned root "
        f"(pinned: {', '.join(subject_of(r) for r in roots)}); evidence made by a simulated enclave or "
        f"another vendor is refused by this policy"
    )


def _check_issued(child: x509.Certificate, issuer: x509.Certificate, what: str, *, require_ca: bool) -> None:
    if require_ca and not _is_ca(issuer):
        raise BadChainError(f"{what}: '{subject_of(issuer)}' is not a CA certificate")
    try:
        child.verify_directly_issued_by(issuer)
    except _SIGNATURE_ERRORS as exc:
        raise BadChainError(
            f"{what}: '{subject_of(child)}' is not signed by '{subject_of(issuer)}' ({exc or 'bad signature'})"
        ) from None


def verify_path_rfc5280(
    leaf: x509.Certificate,
    intermediates: Sequence[x509.Certificate],
    root: x509.Certificate,
    now: dt.datetime,
    what: str,
) -> None:
    """Full RFC 5280 path validation with cryptography's verifier (CA profile strict, leaf permissive).

    Intel's PCK leaf carries Intel-specific extensions the default end-entity profile refuses, hence the
    permissive leaf policy; the CA certificates still get the full WebPKI CA checks.
    """
    _rfc5280(leaf, tuple(intermediates), root, what)


@bytes_memo(MEMO_BYTES, _args_cost)
def _rfc5280(
    leaf: x509.Certificate, intermediates: tuple[x509.Certificate, ...], root: x509.Certificate, what: str
) -> None:
    # Validity at ``now`` is checked (with typed errors) by verify_chain; the path itself does not depend
    # on time, so it is validated once at an instant inside every certificate's window and memoized.
    certs = (leaf, *intermediates, root)
    at = max(c.not_valid_before_utc for c in certs)
    builder = (
        PolicyBuilder()
        .store(Store([root]))
        .time(at)
        .extension_policies(
            ca_policy=ExtensionPolicy.webpki_defaults_ca(), ee_policy=ExtensionPolicy.permit_all()
        )
    )
    try:
        builder.build_client_verifier().verify(leaf, list(intermediates))
    except _PATH_ERRORS as exc:
        raise BadChainError(f"{what}: path validation to '{subject_of(root)}' failed ({exc})") from None


def crl_signed_by(crl: x509.CertificateRevocationList, cert: x509.Certificate) -> bool:
    """Whether ``crl`` carries a valid signature by ``cert``'s key (False for any unusable key)."""
    try:
        return bool(crl.is_signature_valid(cert.public_key()))  # type: ignore[arg-type]
    except X509_ERRORS:
        return False


def is_revoked(crl: x509.CertificateRevocationList, cert: x509.Certificate, what: str) -> bool:
    """Whether ``cert``'s serial number is on ``crl`` (a lookup in cryptography, no Python iteration)."""
    try:
        return crl.get_revoked_certificate_by_serial_number(cert.serial_number) is not None
    except X509_ERRORS as exc:
        raise MalformedCollateralError(f"{what}: a revoked entry cannot be decoded ({exc})") from None
