"""Input generators shared by the hypothesis tests and the fuzz campaign: mutated real evidence, random
bytes, mutated collateral. Every generated input goes through parse and verify; the only exceptions
allowed out are ``AttestationError`` subclasses."""

from __future__ import annotations

import dataclasses
import datetime as dt
import functools
import json
import random
from collections.abc import Callable
from dataclasses import dataclass
from typing import Any

from attestation import Binding, Policy, detect_format, parse_evidence, verify
from attestation.amd.report import SnpReport
from attestation.collateral import (
    Collateral,
    IntelCollateral,
    NvidiaCollateral,
    SnpCollateral,
    collateral_from_dict,
    loads_collateral,
)
from attestation.errors import AttestationError
from attestation.intel.quote import CERT_PCK_CHAIN, CERT_QE_REPORT, CertificationData, Quote
from attestation.limits import DEFAULT_LIMITS, PEM_CERT_MARKER
from attestation.nvidia.spdm import GpuReport
from attestation.policy import policy_from_dict
from attestation.simulated import SimulatedEnclave
from tests.attestation.attest_support import (
    NVIDIA_TIME,
    SNP_TIME,
    intel_policy,
    intel_vectors,
    nvidia_collateral,
    nvidia_report,
    snp_collateral,
    snp_report,
    utc,
)


@dataclass(frozen=True)
class Seed:
    """One real (or simulated) evidence with what verifies it."""

    name: str
    evidence: bytes
    collateral: Collateral
    collateral_json: dict[str, Any] | None
    policy: Policy
    now: dt.datetime
    expected: Binding | bytes | None


SIM_NOW = utc(2026, 11, 22, 12)
SIM_BINDING = Binding(31337, 9, "0x" + "42" * 20, bytes(range(32)))


def seeds() -> list[Seed]:
    """The real Intel, AMD, NVIDIA evidence and one simulated TDX quote."""
    out = []
    for name, vec in intel_vectors().items():
        out.append(
            Seed(name, vec.quote, vec.collateral, vec.collateral_json, intel_policy(), vec.inside, None)
        )
    out.append(
        Seed("snp", snp_report(), snp_collateral(), None, Policy(dangerous_allow_debug=True), SNP_TIME, None)
    )
    out.append(Seed("nvidia", nvidia_report(), nvidia_collateral(), None, Policy(), NVIDIA_TIME, None))
    enc = SimulatedEnclave.from_seed(b"fuzz")
    coll = enc.collateral(SIM_NOW)
    out.append(
        Seed(
            "simulated",
            enc.quote(SIM_BINDING.report_data()),
            coll,
            coll.to_dict(),
            enc.policy(),
            SIM_NOW,
            SIM_BINDING,
        )
    )
    return out


def mutate_bytes(rng: random.Random, data: bytes) -> bytes:
    """One to four random edits: flip, set, insert, delete, truncate, duplicate a span, splice zeros."""
    b = bytearray(data)
    for _ in range(rng.randint(1, 4)):
        op = rng.randrange(8)
        n = len(b)
        if n == 0:
            b += rng.randbytes(rng.randint(1, 64))
            continue
        pos = rng.randrange(n)
        if op == 0:
            b[pos] ^= 1 << rng.randrange(8)
        elif op == 1:
            b[pos] = rng.choice((0, 0xFF, 0x7F, 0x80, rng.randrange(256)))
        elif op == 2:
            b[pos:pos] = rng.randbytes(rng.randint(1, 8))
        elif op == 3:
            del b[pos : pos + rng.randint(1, 8)]
        elif op == 4:
            del b[pos:]
        elif op == 5:
            end = min(n, pos + rng.randint(1, 64))
            b[pos:pos] = b[pos:end]
        elif op == 6:
            # Length fields: write a random little-endian u16/u32 somewhere.
            width = rng.choice((2, 4))
            b[pos : pos + width] = rng.randrange(1 << (8 * width)).to_bytes(width, "little")
        else:
            b[pos : pos + 4] = bytes(4)
    return bytes(b)


def mutate_collateral(rng: random.Random, cj: dict[str, Any]) -> dict[str, Any]:
    """One random edit of a collateral dict: drop a key, edit a string, re-type a value, edit inner JSON."""
    d = dict(cj)
    key = rng.choice(sorted(d))
    op = rng.randrange(6)
    value = d[key]
    if op == 0:
        del d[key]
    elif op == 1 and isinstance(value, str) and value:
        pos = rng.randrange(len(value))
        d[key] = value[:pos] + chr(rng.randrange(32, 127)) + value[pos + 1 :]
    elif op == 2:
        d[key] = rng.choice([None, 1, [], {}, "", "zz", "00" * 3])
    elif op == 3 and key in ("tcb_info", "qe_identity"):
        try:
            doc = json.loads(value)
        except ValueError:
            return d
        if isinstance(doc, dict) and doc:
            inner = rng.choice(sorted(doc))
            doc[inner] = rng.choice([None, -1, 2**70, "x", [], {}, [{}], "2025-13-01T00:00:00Z", 1.5])
        d[key] = json.dumps(doc)
    elif op == 4 and isinstance(value, str):
        d[key] = value[: rng.randrange(len(value) + 1)]
    else:
        d["format"] = rng.choice(["intel-dcap", "amd-sev-snp", "nvidia-h100", "x", 3])
    return d


def run_one(fn: Callable[[], object]) -> str:
    """Run ``fn``; return "accept" or the AttestationError class name. Any other exception propagates."""
    try:
        fn()
    except AttestationError as exc:
        return type(exc).__name__
    return "accept"


def check_parsers(data: bytes) -> list[str]:
    """Every parser and the detector on ``data``."""
    outs = [
        run_one(lambda: Quote.parse(data)),
        run_one(lambda: SnpReport.parse(data)),
        run_one(lambda: GpuReport.parse(data)),
        run_one(lambda: detect_format(data)),
        run_one(lambda: parse_evidence(data)),
    ]
    for parsed_cls in (Quote, SnpReport, GpuReport):
        try:
            parsed = parsed_cls.parse(data)  # type: ignore[attr-defined]
        except AttestationError:
            continue
        assert parsed.to_bytes() == data, f"{parsed_cls.__name__} does not round-trip"
    return outs


def check_verify(seed: Seed, evidence: bytes, collateral: Collateral | None = None) -> str:
    """verify() of mutated evidence (and optionally other collateral)."""
    coll = collateral if collateral is not None else seed.collateral
    return run_one(lambda: verify(evidence, coll, seed.policy, seed.now, seed.expected))


def check_collateral(seed: Seed, cj: dict[str, Any]) -> str:
    """Load mutated collateral JSON and verify the seed's evidence with it."""

    def go() -> None:
        coll = loads_collateral(json.dumps(cj))
        verify(seed.evidence, coll, seed.policy, seed.now, seed.expected)

    return run_one(go)


def check_policy(rng: random.Random) -> str:
    """A random policy document."""
    keys = [
        "intel_roots",
        "min_tcb_status",
        "allowed_mrtd",
        "allowed_rtmr",
        "snp_min_tcb",
        "max_collateral_age_s",
    ]
    doc = {
        rng.choice(keys): rng.choice([None, [], ["zz"], ["00"], "UpToDate", "x", {"a": "b"}, 5, [None] * 4])
        for _ in range(rng.randint(1, 3))
    }
    return run_one(lambda: policy_from_dict(doc))


# --- inputs at and over the default caps (the campaign's "oversized" kinds) ---------------------------------

FORMAT_OF_SEED = {
    "sgx_quote": "intel-sgx",
    "tdx_quote": "intel-tdx",
    "simulated": "intel-tdx-simulated",
    "snp": "amd-sev-snp",
    "nvidia": "nvidia-h100",
}
"""The format figures of the campaign are kept per format (the simulated TDX quote apart from real ones)."""

LIM = DEFAULT_LIMITS


@dataclass(frozen=True)
class Case:
    """One campaign input: its format, its generator, and the call that is measured (input built before)."""

    format: str
    kind: str
    run: Callable[[], list[str]]


def with_pck_pem(quote: bytes, pem: bytes) -> bytes:
    """``quote`` with its PCK chain PEM replaced (the chain is outside the quote signature)."""
    q = Quote.parse(quote)
    qe = dataclasses.replace(q.qe, certification_data=CertificationData(CERT_PCK_CHAIN, pem))
    outer = CertificationData(CERT_QE_REPORT, qe.to_bytes(), qe)
    return dataclasses.replace(q, qe=qe, outer_certification=outer).to_bytes()


def _last_cert(pem: bytes) -> bytes:
    pem = pem.rstrip(b"\0\n") + b"\n"
    return pem[pem.rindex(PEM_CERT_MARKER) :]


@functools.lru_cache(maxsize=64)
def _padded_quote(evidence: bytes, copies: int) -> bytes:
    pem = Quote.parse(evidence).pck_certification.data.rstrip(b"\0")
    return with_pck_pem(evidence, pem + _last_cert(pem) * copies + b"\0")


@functools.lru_cache(maxsize=8)
def _huge_text(n: int) -> str:
    return '{"tcbLevels":[' + ",".join(["{}"] * (n // 3)) + "]}"


@functools.lru_cache(maxsize=64)
def _json_structure(body: str, size: int) -> str:
    """A collateral JSON text of about ``size`` characters: one array of ``body`` repeated."""
    return '{"format":[' + body * max(0, (size - 16) // len(body)) + '""]}'


@functools.lru_cache(maxsize=1)
def big_crl() -> bytes:
    """A well-formed DER CRL just under the CRL cap, signed by a throwaway key (refused at its signature)."""
    from cryptography import x509
    from cryptography.hazmat.primitives import hashes, serialization
    from cryptography.hazmat.primitives.asymmetric import ec
    from cryptography.x509.oid import NameOID

    key = ec.generate_private_key(ec.SECP256R1())
    t = dt.datetime(2025, 1, 1, tzinfo=dt.UTC)
    name = x509.Name([x509.NameAttribute(NameOID.COMMON_NAME, "Intel SGX PCK Platform CA")])
    b = x509.CertificateRevocationListBuilder().issuer_name(name).last_update(t)
    b = b.next_update(t + dt.timedelta(days=3650))
    n = (LIM.max_crl_bytes - 2048) // 43
    for i in range(n):
        b = b.add_revoked_certificate(
            x509.RevokedCertificateBuilder().serial_number(2**150 + i).revocation_date(t).build()
        )
    der = b.sign(key, hashes.SHA256()).public_bytes(serialization.Encoding.DER)
    assert len(der) <= LIM.max_crl_bytes, len(der)
    return der


def _size_near(rng: random.Random, cap: int) -> int:
    """A size at, just over, well under or far over ``cap``."""
    return rng.choice((cap, cap + 1, cap - 1, rng.randrange(cap // 2, cap), 2 * cap, 16 * cap))


def oversized_case(rng: random.Random, pool: list[Seed]) -> Case:
    """An input built at or over a default cap, for one seed's format."""
    seed = rng.choice(pool)
    fmt = FORMAT_OF_SEED[seed.name]

    def verify_with(evidence: bytes, coll: Collateral | None = None) -> Callable[[], list[str]]:
        return lambda: [check_verify(seed, evidence, coll)]

    op = rng.randrange(7)
    if op == 6:
        body = rng.choice(("[],", "{},", "0,", '"",', "null,", '[""],', "[[]],", "1e5,"))
        size = _size_near(rng, LIM.max_collateral_bytes)
        wire = _json_structure(body, size)
        return Case(fmt, "oversized/collateral-json-structure", lambda: [check_collateral_text(seed, wire)])
    if op == 0:
        size = _size_near(rng, LIM.max_evidence_bytes)
        ev = seed.evidence + bytes(max(0, size - len(seed.evidence)))
        return Case(fmt, "oversized/evidence-trailing", verify_with(ev))
    coll = seed.collateral
    if isinstance(coll, IntelCollateral):
        if op == 1:
            copies = rng.choice((1, 2, 3, 10, 100, 1000, 5000))
            return Case(fmt, "oversized/pck-chain-padded", verify_with(_padded_quote(seed.evidence, copies)))
        if op == 2:
            pem = Quote.parse(seed.evidence).pck_certification.data.rstrip(b"\0")
            pad = _size_near(rng, LIM.max_pem_chain_bytes) - len(pem)
            ev = with_pck_pem(seed.evidence, pem + b"\n" * max(0, pad - 1) + b"\0")
            return Case(fmt, "oversized/pck-chain-at-cap", verify_with(ev))
        assert seed.collateral_json is not None
        cj = dict(seed.collateral_json)
        if op == 3:
            key = rng.choice(("tcb_info", "qe_identity"))
            size = _size_near(rng, LIM.max_document_bytes)
            cj[key] = (
                _huge_text(size)
                if size > 4 * LIM.max_document_bytes
                else (cj[key] * (size // len(cj[key]) + 1))[:size]
            )
            wire = json.dumps(cj)
            return Case(fmt, "oversized/forged-document", lambda: [check_collateral_text(seed, wire)])
        if op == 4:
            key = rng.choice(("pck_crl", "root_ca_crl"))
            crl = big_crl() if rng.random() < 0.5 else rng.randbytes(_size_near(rng, LIM.max_crl_bytes))
            return Case(
                fmt, "oversized/crl", verify_with(seed.evidence, dataclasses.replace(coll, **{key: crl}))
            )
        key = rng.choice(("tcb_info_issuer_chain", "qe_identity_issuer_chain", "pck_crl_issuer_chain"))
        chain = cj[key].rstrip("\n") + "\n"
        copies = rng.choice((1, 2, 10, 1000))
        padded = chain + _last_cert(chain.encode()).decode() * copies
        return Case(
            fmt,
            "oversized/collateral-chain",
            verify_with(seed.evidence, dataclasses.replace(coll, **{key: padded})),
        )
    if isinstance(coll, SnpCollateral):
        if op in (1, 2, 3):
            copies = rng.choice((1, 2, 10, 1000))
            chain = coll.cert_chain + _last_cert(coll.cert_chain) * copies
            return Case(
                fmt,
                "oversized/collateral-chain",
                verify_with(seed.evidence, dataclasses.replace(coll, cert_chain=chain)),
            )
        vcek = coll.vcek + bytes(_size_near(rng, LIM.max_certificate_bytes) - len(coll.vcek))
        return Case(fmt, "oversized/vcek", verify_with(seed.evidence, dataclasses.replace(coll, vcek=vcek)))
    assert isinstance(coll, NvidiaCollateral)
    copies = rng.choice((1, 2, 3, 10, 1000))
    chain = coll.cert_chain.rstrip(b"\n") + b"\n" + _last_cert(coll.cert_chain) * copies
    return Case(
        fmt,
        "oversized/collateral-chain",
        verify_with(seed.evidence, dataclasses.replace(coll, cert_chain=chain)),
    )


def check_collateral_text(seed: Seed, wire: str) -> str:
    """Load collateral JSON text and verify the seed's evidence with it."""
    return run_one(
        lambda: verify(seed.evidence, loads_collateral(wire), seed.policy, seed.now, seed.expected)
    )


def check_without_collateral(seed: Seed, evidence: bytes, accept_unknown: bool) -> str:
    """verify() with no collateral (TCB unknown, decided by the policy)."""
    pol = dataclasses.replace(seed.policy, accept_unknown_tcb=accept_unknown)
    return run_one(lambda: verify(evidence, None, pol, seed.now, seed.expected))


__all__ = [
    "Case",
    "FORMAT_OF_SEED",
    "Seed",
    "big_crl",
    "check_collateral_text",
    "check_without_collateral",
    "oversized_case",
    "with_pck_pem",
    "check_collateral",
    "check_parsers",
    "check_policy",
    "check_verify",
    "collateral_from_dict",
    "mutate_bytes",
    "mutate_collateral",
    "seeds",
]
