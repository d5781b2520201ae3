"""AMD SEV-SNP ATTESTATION_REPORT (versions 2 to 5): strict parsing that round-trips.

Layout: AMD SEV Secure Nested Paging Firmware ABI Specification (pub. 56860), Table 23
"ATTESTATION_REPORT Structure" (rev 1.55+; v2 in rev 1.51), 0x4A0 bytes, little-endian:

0x000 VERSION u32, 0x004 GUEST_SVN u32, 0x008 POLICY u64, 0x010 FAMILY_ID 16, 0x020 IMAGE_ID 16,
0x030 VMPL u32, 0x034 SIGNATURE_ALGO u32, 0x038 CURRENT_TCB u64, 0x040 PLATFORM_INFO u64,
0x048 flags u32 (bit 0 AUTHOR_KEY_EN, bit 1 MASK_CHIP_KEY, bits 4:2 SIGNING_KEY 0=VCEK 1=VLEK 7=none),
0x04C reserved u32, 0x050 REPORT_DATA 64, 0x090 MEASUREMENT 48, 0x0C0 HOST_DATA 32,
0x0E0 ID_KEY_DIGEST 48, 0x110 AUTHOR_KEY_DIGEST 48, 0x140 REPORT_ID 32, 0x160 REPORT_ID_MA 32,
0x180 REPORTED_TCB u64, 0x188 CPUID_FAM_ID u8, CPUID_MOD_ID u8, CPUID_STEP u8 (v3+, else 0),
0x18B reserved 21, 0x1A0 CHIP_ID 64, 0x1E0 COMMITTED_TCB u64, 0x1E8 CURRENT build/minor/major/rsvd,
0x1EC COMMITTED build/minor/major/rsvd, 0x1F0 LAUNCH_TCB u64, 0x1F8 LAUNCH_MIT_VECTOR u64 (v5),
0x200 CURRENT_MIT_VECTOR u64 (v5), 0x208 reserved 152, 0x2A0 SIGNATURE 512 (r 72 LE, s 72 LE, rsvd).

The signature (ECDSA P-384 with SHA-384 when SIGNATURE_ALGO = 1) covers bytes 0x000-0x29F.
POLICY bit 19 is DEBUG (Table 9, "Guest Policy Structure").

The signature area (0x2A0-0x49F) is not covered by the signature, so every byte of it that carries no
signature bit must be zero (as go-sev-guest requires): bytes 48-71 of R and of S (P-384 scalars are 48
bytes) and the 368 reserved bytes after S. Otherwise one signed report would have 2^2944 accepted
encodings.
"""

from __future__ import annotations

import struct
from dataclasses import dataclass

from attestation.errors import MalformedEvidenceError, UnsupportedKeyTypeError, UnsupportedVersionError

REPORT_LEN = 0x4A0
SIGNED_LEN = 0x2A0
SUPPORTED_VERSIONS = (2, 3, 4, 5)
SIG_ALGO_ECDSA_P384_SHA384 = 1
SIG_COMPONENT_LEN = 72
P384_SCALAR_LEN = 48
POLICY_DEBUG_BIT = 1 << 19
POLICY_RESERVED_ONE_BIT = 1 << 17
CPUID_FAMILY_TURIN = 0x1A

_FMT = struct.Struct("<IIQ16s16sIIQQII64s48s32s48s48s32s32sQBBB21s64sQ4s4sQQQ152s512s")
_NAMES = (
    "version",
    "guest_svn",
    "policy",
    "family_id",
    "image_id",
    "vmpl",
    "signature_algo",
    "current_tcb",
    "platform_info",
    "flags",
    "reserved0",
    "report_data",
    "measurement",
    "host_data",
    "id_key_digest",
    "author_key_digest",
    "report_id",
    "report_id_ma",
    "reported_tcb",
    "cpuid_fam_id",
    "cpuid_mod_id",
    "cpuid_step",
    "reserved1",
    "chip_id",
    "committed_tcb",
    "current_version",
    "committed_version",
    "launch_tcb",
    "launch_mit_vector",
    "current_mit_vector",
    "reserved2",
    "signature",
)
assert _FMT.size == REPORT_LEN


@dataclass(frozen=True)
class SnpTcb:
    """A decoded TCB_VERSION (Milan/Genoa layout, or Turin's with an FMC byte)."""

    bootloader: int
    tee: int
    snp: int
    microcode: int
    fmc: int | None = None

    @classmethod
    def decode(cls, raw: int, turin: bool) -> SnpTcb:
        """Decode a u64 TCB_VERSION."""
        b = raw.to_bytes(8, "little")
        if turin:
            return cls(bootloader=b[1], tee=b[2], snp=b[3], microcode=b[7], fmc=b[0])
        return cls(bootloader=b[0], tee=b[1], snp=b[6], microcode=b[7])

    def as_dict(self) -> dict[str, int]:
        """Component name -> SVN."""
        out = {"bootloader": self.bootloader, "tee": self.tee, "snp": self.snp, "microcode": self.microcode}
        if self.fmc is not None:
            out["fmc"] = self.fmc
        return out


@dataclass(frozen=True)
class SnpReport:
    """A parsed SEV-SNP attestation report; ``SnpReport.parse(b).to_bytes() == b``."""

    version: int
    guest_svn: int
    policy: int
    family_id: bytes
    image_id: bytes
    vmpl: int
    signature_algo: int
    current_tcb: int
    platform_info: int
    flags: int
    reserved0: int
    report_data: bytes
    measurement: bytes
    host_data: bytes
    id_key_digest: bytes
    author_key_digest: bytes
    report_id: bytes
    report_id_ma: bytes
    reported_tcb: int
    cpuid_fam_id: int
    cpuid_mod_id: int
    cpuid_step: int
    reserved1: bytes
    chip_id: bytes
    committed_tcb: int
    current_version: bytes
    committed_version: bytes
    launch_tcb: int
    launch_mit_vector: int
    current_mit_vector: int
    reserved2: bytes
    signature: bytes
    trailing: bytes = b""

    @classmethod
    def parse(cls, data: bytes) -> SnpReport:
        """Parse a report (bytes after 0x4A0 are kept in ``trailing``)."""
        if not isinstance(data, bytes | bytearray | memoryview):
            raise MalformedEvidenceError("an SEV-SNP report is bytes")
        data = bytes(data)
        if len(data) < REPORT_LEN:
            raise MalformedEvidenceError(
                f"SEV-SNP report is truncated: {len(data)} bytes, a report is {REPORT_LEN}; send the whole "
                f"report from /dev/sev-guest (SNP_GET_REPORT)"
            )
        values = _FMT.unpack_from(data)
        rep = cls(*values, data[REPORT_LEN:])  # type: ignore[call-arg]
        if rep.version not in SUPPORTED_VERSIONS:
            raise UnsupportedVersionError(
                f"SEV-SNP report version {rep.version} is not supported (2 to 5); update the verifier or "
                f"the guest firmware"
            )
        if rep.signature_algo != SIG_ALGO_ECDSA_P384_SHA384:
            raise UnsupportedKeyTypeError(
                f"SEV-SNP signature algorithm {rep.signature_algo} is not supported (1: ECDSA P-384/SHA-384)"
            )
        sig = rep.signature
        for start, end in (
            (P384_SCALAR_LEN, SIG_COMPONENT_LEN),
            (SIG_COMPONENT_LEN + P384_SCALAR_LEN, 2 * SIG_COMPONENT_LEN),
            (2 * SIG_COMPONENT_LEN, len(sig)),
        ):
            if any(sig[start:end]):
                first = start + next(i for i, b in enumerate(sig[start:end]) if b)
                raise MalformedEvidenceError(
                    f"SEV-SNP report: byte 0x{SIGNED_LEN + first:03X} of the signature area is not zero (the "
                    f"unsigned bytes after R's and S's 48 bytes and after S must be zero); send the report "
                    f"exactly as the firmware wrote it"
                )
        return rep

    def to_bytes(self) -> bytes:
        """The report bytes (and trailing bytes)."""
        return _FMT.pack(*(getattr(self, n) for n in _NAMES)) + self.trailing

    @property
    def signed(self) -> bytes:
        """Bytes 0x000-0x29F, what the signature covers."""
        return self.to_bytes()[:SIGNED_LEN]

    @property
    def r(self) -> int:
        """Signature R (72 bytes little-endian)."""
        return int.from_bytes(self.signature[0:72], "little")

    @property
    def s(self) -> int:
        """Signature S (72 bytes little-endian)."""
        return int.from_bytes(self.signature[72:144], "little")

    @property
    def debug(self) -> bool:
        """POLICY.DEBUG: the hypervisor may debug (read and write) this guest."""
        return bool(self.policy & POLICY_DEBUG_BIT)

    @property
    def signing_key(self) -> int:
        """0 VCEK, 1 VLEK, 7 none (flags bits 4:2; zero in version 2 reports, meaning VCEK)."""
        return (self.flags >> 2) & 0x7

    @property
    def mask_chip_id(self) -> bool:
        """MASK_CHIP_ID: CHIP_ID is zeroed in the report."""
        return bool(self.flags & 0x2)

    @property
    def is_turin(self) -> bool:
        """Whether the CPUID family says Turin (TCB layout with an FMC byte); v3+ reports only."""
        return self.version >= 3 and self.cpuid_fam_id == CPUID_FAMILY_TURIN

    @property
    def reported(self) -> SnpTcb:
        """REPORTED_TCB decoded."""
        return SnpTcb.decode(self.reported_tcb, self.is_turin)
