"""The result of an accepted verification: the parsed fields a validator scores and logs."""

from __future__ import annotations

from dataclasses import dataclass, field
from typing import Any


@dataclass(frozen=True)
class AttestationVerdict:
    """An accepted piece of evidence. ``verify`` returns one or raises a typed ``AttestationError``."""

    format: str
    """``intel-tdx``, ``intel-sgx``, ``amd-sev-snp`` or ``nvidia-h100``."""
    report_data: bytes
    """The 64 report-data bytes (SGX/TDX/SNP) or the 32-byte request nonce (NVIDIA)."""
    measurements: dict[str, str]
    """Named measurements, hex (mrtd, rtmr0..3, mrenclave, mrsigner, measurement, gpu.N...)."""
    root: str
    """Subject of the pinned root the chain led to."""
    policy: str
    """The name of the policy that accepted it."""
    debug: bool = False
    """Whether the TEE runs in debug mode (only accepted under ``dangerous_allow_debug``)."""
    tcb_status: str | None = None
    """Intel: merged TCB status; AMD: ``matches VCEK``; NVIDIA: None (not checkable offline)."""
    advisory_ids: tuple[str, ...] = ()
    """Intel security advisories that apply to this platform's TCB level."""
    binding_checked: bool = False
    """Whether the report data was compared with an expected binding."""
    details: dict[str, Any] = field(default_factory=dict)
    """Format-specific fields: FMSPC, SVNs, QE TCB status, SNP TCB, driver version..."""

    @property
    def accepted(self) -> bool:
        """Always True: a refusal is an exception, never an AttestationVerdict."""
        return True

    def to_dict(self) -> dict[str, Any]:
        """A JSON-ready form."""
        return {
            "accepted": True,
            "format": self.format,
            "policy": self.policy,
            "root": self.root,
            "tcb_status": self.tcb_status,
            "advisory_ids": list(self.advisory_ids),
            "debug": self.debug,
            "report_data": self.report_data.hex(),
            "binding_checked": self.binding_checked,
            "measurements": dict(self.measurements),
            "details": dict(self.details),
        }
