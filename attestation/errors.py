"""Exception root of the attestation package and one typed class per failure class.

Every refusal raised by ``attestation`` is an :class:`AttestationError`; its subclass names the failure
class and its message says what the miner operator can do about it. Callers that only need a verdict
catch :class:`AttestationError`; callers that score or slash differently per cause match the subclass.
"""

from __future__ import annotations


class AttestationError(Exception):
    """Root of every error raised by ``attestation``."""


# --- the evidence or collateral cannot be decoded --------------------------------------------------------


class MalformedError(AttestationError):
    """The evidence or the collateral cannot be decoded (truncated, bad length fields, bad encoding)."""


class MalformedEvidenceError(MalformedError):
    """The quote or report bytes cannot be decoded."""


class MalformedCollateralError(MalformedError):
    """The collateral (JSON, certificates, CRLs, TCB info) cannot be decoded."""


class EvidenceFormatError(MalformedEvidenceError):
    """The evidence is not of the format its collateral is for (or of any supported format)."""


class LimitExceededError(MalformedError):
    """An input is over a size or count cap (``attestation.limits``); refused before it is parsed."""


class EvidenceTooLargeError(MalformedEvidenceError, LimitExceededError):
    """The evidence, or the certificate chain it carries, is over a size or count cap."""


class CollateralTooLargeError(MalformedCollateralError, LimitExceededError):
    """The collateral, or a document, CRL or chain in it, is over a size or count cap."""


# --- the evidence is well-formed but of a kind this verifier does not accept ----------------------------


class UnsupportedError(AttestationError):
    """The evidence is of a version, key type or vendor this verifier does not support."""


class UnsupportedVersionError(UnsupportedError):
    """Unsupported quote, report or protocol version."""


class UnsupportedKeyTypeError(UnsupportedError):
    """Unsupported attestation key type or signature algorithm."""


class UnknownQeVendorError(UnsupportedError):
    """The quote was produced by a quoting enclave of an unknown vendor."""


class UnsupportedCertificationDataError(UnsupportedError):
    """The quote carries a certification data type that cannot be verified offline."""


class CollateralRequiredError(UnsupportedError):
    """The format cannot be checked at all without collateral (SEV-SNP: the VCEK; H100: the device chain)."""


# --- signatures -------------------------------------------------------------------------------------------


class BadSignatureError(AttestationError):
    """A signature over the evidence or the collateral does not verify."""


class QuoteSignatureError(BadSignatureError):
    """The quote/report signature by the attestation key does not verify."""


class QeReportSignatureError(BadSignatureError):
    """The Intel QE report is not signed by the PCK certificate's key."""


class QeReportDataMismatchError(BadSignatureError):
    """The QE report data is not sha256(attestation key || QE auth data): the key is not certified."""


class CollateralSignatureError(BadSignatureError):
    """A collateral document (TCB info, QE identity, CRL) is not signed by its issuer."""


# --- certificate chains and revocation --------------------------------------------------------------------


class BadChainError(AttestationError):
    """A certificate chain does not lead to a pinned vendor root."""


class RevocationError(AttestationError):
    """A certificate is revoked, or its revocation status cannot be established."""


class RevokedError(RevocationError):
    """A certificate in the chain is listed on its issuer's CRL."""


class RevocationUnknownError(RevocationError):
    """No CRL from the right issuer was supplied, so revocation cannot be checked."""


# --- time windows -----------------------------------------------------------------------------------------


class ValidityWindowError(AttestationError):
    """A certificate, CRL or collateral document is outside its validity window at ``now``."""


class CollateralExpiredError(ValidityWindowError):
    """A certificate, CRL or collateral document has expired (or is older than the policy allows)."""


class CollateralNotYetValidError(ValidityWindowError):
    """A certificate, CRL or collateral document is not valid yet at ``now``."""


class CertificateExpiredError(ValidityWindowError):
    """A certificate has expired: of the PCK chain in a quote, a collateral issuer chain, a VCEK or GPU chain."""


class CertificateNotYetValidError(ValidityWindowError):
    """A certificate (of any chain, in the evidence or the collateral) is not valid yet at ``now``."""


# --- platform state and policy ----------------------------------------------------------------------------


class TcbError(AttestationError):
    """The platform's trusted computing base is not acceptable."""


class TcbMismatchError(TcbError):
    """The collateral describes another platform or QE (FMSPC, PCE id, QE identity, VCEK TCB)."""


class TcbNotAcceptableError(TcbError):
    """The TCB status is below the policy's lowest acceptable status, or no TCB level matches."""


class TcbUnknownError(TcbError):
    """No collateral: signatures, QE report and PCK chain verify, but the TCB status and revocation are
    unknown, and the policy does not accept that (``Policy.accept_unknown_tcb``)."""


class MeasurementNotAllowedError(AttestationError):
    """A measurement (MRTD, RTMR, MRENCLAVE, MRSIGNER, SNP measurement, GPU measurement) is not allowed."""


class DebugError(AttestationError):
    """The enclave, TD or VM runs with debugging enabled; refused unless ``dangerous_allow_debug``."""


# --- binding to the update --------------------------------------------------------------------------------


class BindingError(AttestationError):
    """The evidence is not bound to the update being validated."""


class BindingMismatchError(BindingError):
    """The report data (or NVIDIA nonce) is not a binding of this chain and miner."""


class ReplayError(BindingError):
    """The evidence binds this miner but another round or another update: it was replayed."""
