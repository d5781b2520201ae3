"""What a validator accepts: pinned roots, allowed measurements, debug, lowest TCB status, freshness.

A :class:`Policy` is plain data, passed to ``verify`` as an argument; :func:`load_policy` reads the JSON
form (documented in docs/attestation.md). Every allow-list that is ``None`` is not checked; a production
network pins its measurements.
"""

from __future__ import annotations

import dataclasses
import datetime as dt
import enum
import json
import reprlib
from collections.abc import Mapping
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

from attestation.errors import MalformedCollateralError
from attestation.limits import DEFAULT_LIMITS, Limits, limits_from_dict
from attestation.roots import AMD_ARK_MILAN_DER, INTEL_SGX_ROOT_CA_DER, NVIDIA_DEVICE_IDENTITY_CA_DER


class TcbStatus(enum.Enum):
    """Intel TCB statuses, from best to worst (Intel PCS TCB info / QE identity ``tcbStatus``)."""

    UP_TO_DATE = "UpToDate"
    SW_HARDENING_NEEDED = "SWHardeningNeeded"
    CONFIGURATION_NEEDED = "ConfigurationNeeded"
    CONFIGURATION_AND_SW_HARDENING_NEEDED = "ConfigurationAndSWHardeningNeeded"
    OUT_OF_DATE = "OutOfDate"
    OUT_OF_DATE_CONFIGURATION_NEEDED = "OutOfDateConfigurationNeeded"
    REVOKED = "Revoked"

    @property
    def rank(self) -> int:
        """0 for the best status; larger is worse."""
        return _RANK[self]

    def at_least(self, lowest: TcbStatus) -> bool:
        """Whether this status is ``lowest`` or better."""
        return self.rank <= lowest.rank

    @classmethod
    def parse(cls, text: str) -> TcbStatus:
        """Parse a ``tcbStatus`` string; unknown strings are malformed collateral."""
        try:
            return cls(text)
        except ValueError:
            raise MalformedCollateralError(
                f"unknown TCB status {reprlib.repr(text)} in the collateral"
            ) from None


_RANK = {s: i for i, s in enumerate(TcbStatus)}


@dataclass(frozen=True)
class Policy:
    """The acceptance policy of a validator. Every field is an argument of ``verify``; nothing is global."""

    intel_roots: tuple[bytes, ...] = (INTEL_SGX_ROOT_CA_DER,)
    """DER certificates of the roots Intel PCK chains and collateral must lead to."""
    amd_roots: tuple[bytes, ...] = (AMD_ARK_MILAN_DER,)
    """DER certificates of the AMD root keys (ARK) VCEK chains must lead to."""
    nvidia_roots: tuple[bytes, ...] = (NVIDIA_DEVICE_IDENTITY_CA_DER,)
    """DER certificates of the NVIDIA roots GPU device chains must lead to."""
    min_tcb_status: TcbStatus = TcbStatus.SW_HARDENING_NEEDED
    """The lowest acceptable Intel TCB status (after merging platform, QE and TDX module statuses)."""
    refused_advisories: frozenset[str] = frozenset()
    """Intel advisory ids (INTEL-SA-xxxxx) that refuse a quote even when its status is acceptable."""
    allowed_mrtd: frozenset[bytes] | None = None
    """TDX: allowed MRTD values (48 bytes); None: not checked."""
    allowed_rtmr: tuple[frozenset[bytes] | None, ...] = (None, None, None, None)
    """TDX: allowed values of RTMR0..RTMR3 (48 bytes each); None entries are not checked."""
    allowed_mrenclave: frozenset[bytes] | None = None
    """SGX: allowed MRENCLAVE values (32 bytes)."""
    allowed_mrsigner: frozenset[bytes] | None = None
    """SGX: allowed MRSIGNER values (32 bytes)."""
    allowed_snp_measurements: frozenset[bytes] | None = None
    """SEV-SNP: allowed launch MEASUREMENT values (48 bytes)."""
    snp_min_tcb: Mapping[str, int] | None = None
    """SEV-SNP: lowest acceptable REPORTED_TCB components (keys: bootloader, tee, snp, microcode, fmc)."""
    snp_allowed_vmpls: frozenset[int] | None = None
    """SEV-SNP: VMPLs the report may come from; None: any."""
    allowed_gpu_measurements: Mapping[int, frozenset[bytes]] | None = None
    """NVIDIA: measurement block index -> allowed digests; indices not named are not checked."""
    dangerous_allow_debug: bool = False
    """Accept debug enclaves/TDs/VMs. Their memory is readable by the host: never in production."""
    max_collateral_age: dt.timedelta | None = None
    """Freshness: Intel TCB info and QE identity must have been issued at most this long before ``now``."""
    min_tcb_evaluation_data_number: int | None = None
    """Freshness: lowest acceptable Intel ``tcbEvaluationDataNumber`` of TCB info and QE identity."""
    accept_unknown_tcb: bool = False
    """Intel quotes verified without collateral (signatures, QE report, PCK chain only): accept them with
    TCB status ``Unknown`` (revocation unchecked too) instead of refusing with ``TcbUnknownError``."""
    limits: Limits = DEFAULT_LIMITS
    """Size and count caps on evidence and collateral, checked before anything is parsed."""
    name: str = "production"
    """A label printed in verdicts (``production``, ``development``, a network name)."""
    extra: Mapping[str, Any] = field(default_factory=dict)
    """Unused by verify; kept so a policy file can carry notes."""

    @classmethod
    def development(cls, dev_root_der: bytes, **overrides: Any) -> Policy:
        """A policy that pins only a simulated enclave's development root (no vendor root)."""
        base = cls(intel_roots=(dev_root_der,), amd_roots=(), nvidia_roots=(), name="development")
        return dataclasses.replace(base, **overrides)

    def to_dict(self) -> dict[str, Any]:
        """The JSON form of this policy (see :func:`policy_from_dict`)."""

        def hexset(s: frozenset[bytes] | None) -> list[str] | None:
            return None if s is None else sorted(b.hex() for b in s)

        return {
            "name": self.name,
            "intel_roots": [r.hex() for r in self.intel_roots],
            "amd_roots": [r.hex() for r in self.amd_roots],
            "nvidia_roots": [r.hex() for r in self.nvidia_roots],
            "min_tcb_status": self.min_tcb_status.value,
            "refused_advisories": sorted(self.refused_advisories),
            "allowed_mrtd": hexset(self.allowed_mrtd),
            "allowed_rtmr": [hexset(s) for s in self.allowed_rtmr],
            "allowed_mrenclave": hexset(self.allowed_mrenclave),
            "allowed_mrsigner": hexset(self.allowed_mrsigner),
            "allowed_snp_measurements": hexset(self.allowed_snp_measurements),
            "snp_min_tcb": None if self.snp_min_tcb is None else dict(self.snp_min_tcb),
            "snp_allowed_vmpls": None if self.snp_allowed_vmpls is None else sorted(self.snp_allowed_vmpls),
            "allowed_gpu_measurements": None
            if self.allowed_gpu_measurements is None
            else {str(k): hexset(v) for k, v in sorted(self.allowed_gpu_measurements.items())},
            "dangerous_allow_debug": self.dangerous_allow_debug,
            "max_collateral_age_s": None
            if self.max_collateral_age is None
            else self.max_collateral_age.total_seconds(),
            "min_tcb_evaluation_data_number": self.min_tcb_evaluation_data_number,
            "accept_unknown_tcb": self.accept_unknown_tcb,
            "limits": self.limits.to_dict(),
        }


_ROOT_ALIASES = {
    "intel-sgx-root-ca": INTEL_SGX_ROOT_CA_DER,
    "amd-ark-milan": AMD_ARK_MILAN_DER,
    "nvidia-device-identity-ca": NVIDIA_DEVICE_IDENTITY_CA_DER,
}


def policy_from_dict(data: Mapping[str, Any]) -> Policy:
    """Build a :class:`Policy` from its JSON form; absent keys keep the production defaults.

    Byte values are hex strings; roots are hex DER or one of the aliases ``intel-sgx-root-ca``,
    ``amd-ark-milan``, ``nvidia-device-identity-ca``.
    """
    known = {f.name for f in dataclasses.fields(Policy)} | {"max_collateral_age_s"}
    unknown = set(data) - known
    if unknown:
        raise MalformedCollateralError(f"policy: unknown keys {sorted(unknown)}")
    try:
        kw: dict[str, Any] = {}

        def hexset(v: Any) -> frozenset[bytes] | None:
            return None if v is None else frozenset(bytes.fromhex(x) for x in v)

        def roots(v: Any) -> tuple[bytes, ...]:
            return tuple(_ROOT_ALIASES[x] if x in _ROOT_ALIASES else bytes.fromhex(x) for x in v)

        for key in ("intel_roots", "amd_roots", "nvidia_roots"):
            if key in data:
                kw[key] = roots(data[key])
        if "min_tcb_status" in data:
            kw["min_tcb_status"] = TcbStatus.parse(data["min_tcb_status"])
        if "refused_advisories" in data:
            kw["refused_advisories"] = frozenset(data["refused_advisories"])
        for key in ("allowed_mrtd", "allowed_mrenclave", "allowed_mrsigner", "allowed_snp_measurements"):
            if key in data:
                kw[key] = hexset(data[key])
        if "allowed_rtmr" in data:
            rt = [hexset(v) for v in data["allowed_rtmr"]]
            if len(rt) != 4:
                raise ValueError("allowed_rtmr needs 4 entries (RTMR0..RTMR3)")
            kw["allowed_rtmr"] = tuple(rt)
        if data.get("snp_min_tcb") is not None:
            kw["snp_min_tcb"] = {str(k): int(v) for k, v in data["snp_min_tcb"].items()}
        if data.get("snp_allowed_vmpls") is not None:
            kw["snp_allowed_vmpls"] = frozenset(int(v) for v in data["snp_allowed_vmpls"])
        if data.get("allowed_gpu_measurements") is not None:
            kw["allowed_gpu_measurements"] = {
                int(k): hexset(v) for k, v in data["allowed_gpu_measurements"].items()
            }
        if "dangerous_allow_debug" in data:
            kw["dangerous_allow_debug"] = bool(data["dangerous_allow_debug"])
        if data.get("max_collateral_age_s") is not None:
            kw["max_collateral_age"] = dt.timedelta(seconds=float(data["max_collateral_age_s"]))
        if data.get("min_tcb_evaluation_data_number") is not None:
            kw["min_tcb_evaluation_data_number"] = int(data["min_tcb_evaluation_data_number"])
        if "accept_unknown_tcb" in data:
            kw["accept_unknown_tcb"] = bool(data["accept_unknown_tcb"])
        if data.get("limits") is not None:
            kw["limits"] = limits_from_dict(data["limits"])
        if "name" in data:
            kw["name"] = str(data["name"])
    except (ValueError, TypeError, KeyError, AttributeError) as exc:
        raise MalformedCollateralError(f"policy: {exc}") from None
    return Policy(**kw)


def load_policy(path: str | Path) -> Policy:
    """Read a policy JSON file."""
    try:
        data = json.loads(Path(path).read_text())
    except (OSError, ValueError, RecursionError) as exc:
        raise MalformedCollateralError(f"policy file {path}: {exc}") from None
    if not isinstance(data, dict):
        raise MalformedCollateralError(f"policy file {path}: expected a JSON object")
    return policy_from_dict(data)
