"""The Intel SGX extension of a PCK certificate (OID 1.2.840.113741.1.13.1).

Intel SGX PCK Certificate and CRL Profile, section "Intel SGX PCK Certificate": a SEQUENCE of
(OID, value) pairs; we read PPID (.1), TCB (.2: comp01..16 SVN .2.1-.2.16, PCESVN .2.17, CPUSVN .2.18),
PCE-ID (.3), FMSPC (.4) and SGX type (.5).
"""

from __future__ import annotations

from dataclasses import dataclass

from cryptography import x509

from attestation.der import (
    TAG_ENUMERATED,
    TAG_INTEGER,
    TAG_OCTET_STRING,
    TAG_OID,
    TAG_SEQUENCE,
    decode_integer,
    decode_oid,
    read_one,
    read_tlvs,
)
from attestation.errors import MalformedEvidenceError
from attestation.memo import bytes_memo, deep_cost

SGX_EXTENSION_OID = "1.2.840.113741.1.13.1"
_WHAT = "PCK certificate SGX extension"


@dataclass(frozen=True)
class PckExtension:
    """The fields of the PCK certificate's SGX extension the TCB evaluation needs."""

    ppid: bytes
    cpu_svn_components: tuple[int, ...]
    pce_svn: int
    cpu_svn: bytes
    pce_id: bytes
    fmspc: bytes
    sgx_type: int


def _pairs(seq_contents: bytes) -> dict[str, tuple[int, bytes]]:
    out: dict[str, tuple[int, bytes]] = {}
    for item in read_tlvs(seq_contents, _WHAT):
        if item.tag != TAG_SEQUENCE:
            raise MalformedEvidenceError(f"{_WHAT}: expected a SEQUENCE entry")
        parts = read_tlvs(item.value, _WHAT)
        if len(parts) != 2 or parts[0].tag != TAG_OID:
            raise MalformedEvidenceError(f"{_WHAT}: expected (OID, value) entries")
        out[decode_oid(parts[0].value, _WHAT)] = (parts[1].tag, parts[1].value)
    return out


def _get(pairs: dict[str, tuple[int, bytes]], oid: str, tag: int, name: str) -> bytes:
    if oid not in pairs:
        raise MalformedEvidenceError(f"{_WHAT}: {name} ({oid}) is missing")
    got_tag, value = pairs[oid]
    if got_tag != tag:
        raise MalformedEvidenceError(f"{_WHAT}: {name} has tag 0x{got_tag:02x}, expected 0x{tag:02x}")
    return value


def _ext_cost(cert: x509.Certificate, *, result: object) -> int:
    return deep_cost(cert) + 512


@bytes_memo(4 * 1024 * 1024, _ext_cost)
def parse_pck_extension(cert: x509.Certificate) -> PckExtension:
    """Read the SGX extension of a PCK leaf certificate."""
    try:
        ext = cert.extensions.get_extension_for_oid(x509.ObjectIdentifier(SGX_EXTENSION_OID))
    except x509.ExtensionNotFound:
        raise MalformedEvidenceError(
            "the PCK certificate has no SGX extension: it is not an Intel PCK certificate"
        ) from None
    except ValueError as exc:
        raise MalformedEvidenceError(f"the PCK certificate extensions cannot be decoded ({exc})") from None
    raw = ext.value
    data = raw.value if isinstance(raw, x509.UnrecognizedExtension) else b""
    top = _pairs(read_one(data, TAG_SEQUENCE, _WHAT))
    base = SGX_EXTENSION_OID
    ppid = _get(top, base + ".1", TAG_OCTET_STRING, "PPID")
    tcb = _pairs(_get(top, base + ".2", TAG_SEQUENCE, "TCB"))
    comps = tuple(
        decode_integer(_get(tcb, f"{base}.2.{i}", TAG_INTEGER, f"SGX TCB comp{i:02d} SVN"), _WHAT)
        for i in range(1, 17)
    )
    pce_svn = decode_integer(_get(tcb, f"{base}.2.17", TAG_INTEGER, "PCESVN"), _WHAT)
    cpu_svn = _get(tcb, f"{base}.2.18", TAG_OCTET_STRING, "CPUSVN")
    pce_id = _get(top, base + ".3", TAG_OCTET_STRING, "PCE-ID")
    fmspc = _get(top, base + ".4", TAG_OCTET_STRING, "FMSPC")
    sgx_type = decode_integer(_get(top, base + ".5", TAG_ENUMERATED, "SGX type"), _WHAT)
    if len(fmspc) != 6 or len(pce_id) != 2 or len(cpu_svn) != 16:
        raise MalformedEvidenceError(f"{_WHAT}: FMSPC, PCE-ID or CPUSVN has the wrong length")
    return PckExtension(ppid, comps, pce_svn, cpu_svn, pce_id, fmspc, sgx_type)
