"""Shared loaders for the attestation tests and the fuzz campaign: real vectors, pinned times, policies."""

from __future__ import annotations

import datetime as dt
import json
from dataclasses import dataclass
from pathlib import Path

from attestation import IntelCollateral, NvidiaCollateral, Policy, SnpCollateral, TcbStatus
from attestation.collateral import collateral_from_dict
from attestation.nvidia.spdm import decode_report_text

VECTORS = Path(__file__).parent / "vectors"


def utc(*args: int) -> dt.datetime:
    """A UTC datetime."""
    return dt.datetime(*args, tzinfo=dt.UTC)  # type: ignore[misc, arg-type]


@dataclass(frozen=True)
class IntelVector:
    """One real Intel quote with its collateral and the README's window."""

    name: str
    quote: bytes
    collateral_json: dict[str, str]
    start: dt.datetime
    end: dt.datetime

    @property
    def collateral(self) -> IntelCollateral:
        c = collateral_from_dict(self.collateral_json)
        assert isinstance(c, IntelCollateral)
        return c

    @property
    def inside(self) -> dt.datetime:
        return self.start + dt.timedelta(days=1)


def intel_vectors() -> dict[str, IntelVector]:
    """The SGX v3 and TDX v4 quotes with their windows (from intel-dcap/README.md)."""
    d = VECTORS / "intel-dcap"
    windows = {
        "sgx_quote": (utc(2025, 6, 19, 10, 56, 11), utc(2025, 7, 19, 10, 1, 18)),
        "tdx_quote": (utc(2025, 6, 19, 10, 32, 27), utc(2025, 7, 19, 10, 0, 35)),
    }
    return {
        name: IntelVector(
            name,
            (d / name).read_bytes(),
            json.loads((d / f"{name}_collateral.json").read_text()),
            *windows[name],
        )
        for name in windows
    }


def intel_policy() -> Policy:
    """Production roots, lowest TCB status low enough for the SGX vector (ConfigurationAndSWHardeningNeeded)."""
    return Policy(min_tcb_status=TcbStatus.CONFIGURATION_AND_SW_HARDENING_NEEDED)


SNP_TIME = utc(2023, 6, 1)
NVIDIA_TIME = utc(2025, 1, 1)
NVIDIA_NONCE = bytes.fromhex("931d8dd0add203ac3d8b4fbde75e115278eefcdceac5b87671a748f32364dfcb")


def snp_report() -> bytes:
    """The real Milan v2 report."""
    return (VECTORS / "amd-sev-snp" / "attestation.bin").read_bytes()


def snp_collateral() -> SnpCollateral:
    """VCEK + ASK/ARK."""
    d = VECTORS / "amd-sev-snp"
    return SnpCollateral((d / "vcek.testcer").read_bytes(), (d / "ask_ark_milan.pem").read_bytes())


def nvidia_report() -> bytes:
    """The real H100 report, binary."""
    return decode_report_text((VECTORS / "nvidia-h100" / "hopperAttestationReport.txt").read_text())


def nvidia_collateral() -> NvidiaCollateral:
    """The 5-certificate device chain."""
    return NvidiaCollateral((VECTORS / "nvidia-h100" / "hopperCertChain.txt").read_bytes())


def flip(data: bytes, pos: int, mask: int = 0x01) -> bytes:
    """``data`` with byte ``pos`` XORed with ``mask``."""
    b = bytearray(data)
    b[pos] ^= mask
    return bytes(b)
