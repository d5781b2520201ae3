"""Intel TCB info (v2, v3) and QE identity (v2): parsing and TCB status evaluation.

Intel PCS API, "TCB Info V3" / "Enclave Identity V2" models, and the TCB level matching rules of the
Intel SGX/TDX DCAP Quote Verification Library: the first TCB level (highest first) whose SGX components
and PCESVN are all <= the PCK certificate's, and for TDX whose TDX components are <= TEE_TCB_SVN
(from index 2 when TEE_TCB_SVN[1] > 0, the TDX module version being then checked against
``tdxModuleIdentities``), gives the platform status.
"""

from __future__ import annotations

import datetime as dt
import json
import reprlib
from dataclasses import dataclass
from typing import Any

from attestation.errors import MalformedCollateralError
from attestation.policy import TcbStatus


def _fail(what: str, msg: str) -> MalformedCollateralError:
    return MalformedCollateralError(f"{what}: {msg}; fetch fresh collateral from Intel PCS or your PCCS")


def parse_time(text: Any, what: str) -> dt.datetime:
    """Parse an ISO 8601 UTC time as Intel writes them (``2025-06-19T10:16:03Z``)."""
    if not isinstance(text, str):
        raise _fail(what, "time is not a string")
    try:
        t = dt.datetime.fromisoformat(text.replace("Z", "+00:00"))
    except ValueError:
        raise _fail(what, f"bad time {reprlib.repr(text)}") from None
    if t.tzinfo is None:
        raise _fail(what, f"time {reprlib.repr(text)} has no time zone")
    return t.astimezone(dt.UTC)


def _hex(value: Any, n: int | None, what: str, name: str) -> bytes:
    if not isinstance(value, str):
        raise _fail(what, f"{name} is not a hex string")
    try:
        out = bytes.fromhex(value)
    except ValueError:
        raise _fail(what, f"{name} is not hex") from None
    if n is not None and len(out) != n:
        raise _fail(what, f"{name} must be {n} bytes")
    return out


def _int(value: Any, what: str, name: str) -> int:
    if not isinstance(value, int) or isinstance(value, bool) or value < 0:
        raise _fail(what, f"{name} is not a non-negative integer")
    return value


def _list(value: Any, what: str, name: str) -> list[Any]:
    if not isinstance(value, list):
        raise _fail(what, f"{name} is not a list")
    return value


def _obj(value: Any, what: str, name: str) -> dict[str, Any]:
    if not isinstance(value, dict):
        raise _fail(what, f"{name} is not an object")
    return value


def _load(text: str, what: str) -> dict[str, Any]:
    try:
        data = json.loads(text)
    except (ValueError, RecursionError) as exc:
        raise _fail(what, f"not JSON ({exc})") from None
    return _obj(data, what, "document")


@dataclass(frozen=True)
class TcbLevel:
    """One platform TCB level."""

    sgx_components: tuple[int, ...]
    pce_svn: int
    tdx_components: tuple[int, ...] | None
    status: TcbStatus
    advisory_ids: tuple[str, ...]
    tcb_date: str


@dataclass(frozen=True)
class ModuleIdentity:
    """One entry of ``tdxModuleIdentities``."""

    id: str
    mrsigner: bytes
    attributes: bytes
    attributes_mask: bytes
    levels: tuple[tuple[int, TcbStatus, tuple[str, ...]], ...]


@dataclass(frozen=True)
class TcbInfo:
    """A parsed TCB info document."""

    id: str
    version: int
    issue_date: dt.datetime
    next_update: dt.datetime
    fmspc: bytes
    pce_id: bytes
    tcb_evaluation_data_number: int
    levels: tuple[TcbLevel, ...]
    tdx_module: ModuleIdentity | None
    tdx_module_identities: tuple[ModuleIdentity, ...]

    @classmethod
    def parse(cls, text: str) -> TcbInfo:
        """Parse the exact signed JSON text of a tcbInfo object."""
        w = "TCB info"
        d = _load(text, w)
        try:
            version = _int(d["version"], w, "version")
            tcb_id = d.get("id", "SGX")
            if version not in (2, 3) or not isinstance(tcb_id, str) or tcb_id not in ("SGX", "TDX"):
                raise _fail(w, f"unsupported TCB info version {version} / id {reprlib.repr(tcb_id)}")
            levels = []
            for lv in _list(d["tcbLevels"], w, "tcbLevels"):
                lv = _obj(lv, w, "tcb level")
                tcb = _obj(lv["tcb"], w, "tcb")
                if version == 2:
                    sgx = tuple(_int(tcb[f"sgxtcbcomp{i:02d}svn"], w, "svn") for i in range(1, 17))
                    tdx = None
                else:
                    sgx = tuple(
                        _int(_obj(c, w, "component")["svn"], w, "svn") for c in tcb["sgxtcbcomponents"]
                    )
                    tdx_raw = tcb.get("tdxtcbcomponents")
                    tdx = (
                        None
                        if tdx_raw is None
                        else tuple(_int(_obj(c, w, "component")["svn"], w, "svn") for c in tdx_raw)
                    )
                if len(sgx) != 16 or (tdx is not None and len(tdx) != 16):
                    raise _fail(w, "a TCB level must have 16 components")
                levels.append(
                    TcbLevel(
                        sgx,
                        _int(tcb["pcesvn"], w, "pcesvn"),
                        tdx,
                        TcbStatus.parse(lv["tcbStatus"]),
                        tuple(str(a) for a in _list(lv.get("advisoryIDs", []), w, "advisoryIDs")),
                        str(lv.get("tcbDate", "")),
                    )
                )
            module = _module(d["tdxModule"], "TDX", w) if "tdxModule" in d else None
            identities = tuple(_module(m, None, w) for m in _list(d.get("tdxModuleIdentities", []), w, "ids"))
            return cls(
                tcb_id,
                version,
                parse_time(d["issueDate"], w),
                parse_time(d["nextUpdate"], w),
                _hex(d["fmspc"], 6, w, "fmspc"),
                _hex(d["pceId"], 2, w, "pceId"),
                _int(d.get("tcbEvaluationDataNumber", 0), w, "tcbEvaluationDataNumber"),
                tuple(levels),
                module,
                identities,
            )
        except KeyError as exc:
            raise _fail(w, f"missing field {exc}") from None


def _module(m: Any, default_id: str | None, w: str) -> ModuleIdentity:
    m = _obj(m, w, "TDX module")
    levels = tuple(
        (
            _int(_obj(_obj(lv, w, "level")["tcb"], w, "tcb")["isvsvn"], w, "isvsvn"),
            TcbStatus.parse(lv["tcbStatus"]),
            tuple(str(a) for a in _list(lv.get("advisoryIDs", []), w, "advisoryIDs")),
        )
        for lv in _list(m.get("tcbLevels", []), w, "tcbLevels")
    )
    ident = m.get("id", default_id)
    if not isinstance(ident, str):
        raise _fail(w, "TDX module identity without id")
    return ModuleIdentity(
        ident,
        _hex(m["mrsigner"], 48, w, "mrsigner"),
        _hex(m["attributes"], 8, w, "attributes"),
        _hex(m["attributesMask"], 8, w, "attributesMask"),
        levels,
    )


@dataclass(frozen=True)
class QeIdentity:
    """A parsed QE identity (enclaveIdentity) document."""

    id: str
    version: int
    issue_date: dt.datetime
    next_update: dt.datetime
    tcb_evaluation_data_number: int
    miscselect: int
    miscselect_mask: int
    attributes: bytes
    attributes_mask: bytes
    mrsigner: bytes
    isvprodid: int
    levels: tuple[tuple[int, TcbStatus, tuple[str, ...]], ...]

    @classmethod
    def parse(cls, text: str) -> QeIdentity:
        """Parse the exact signed JSON text of an enclaveIdentity object."""
        w = "QE identity"
        d = _load(text, w)
        try:
            version = _int(d["version"], w, "version")
            if version != 2:
                raise _fail(w, f"unsupported QE identity version {version}")
            ident = d["id"]
            if ident not in ("QE", "TD_QE", "QVE"):
                raise _fail(w, f"unknown enclave identity id {reprlib.repr(ident)}")
            levels = tuple(
                (
                    _int(_obj(_obj(lv, w, "level")["tcb"], w, "tcb")["isvsvn"], w, "isvsvn"),
                    TcbStatus.parse(lv["tcbStatus"]),
                    tuple(str(a) for a in _list(lv.get("advisoryIDs", []), w, "advisoryIDs")),
                )
                for lv in _list(d["tcbLevels"], w, "tcbLevels")
            )
            return cls(
                ident,
                version,
                parse_time(d["issueDate"], w),
                parse_time(d["nextUpdate"], w),
                _int(d.get("tcbEvaluationDataNumber", 0), w, "tcbEvaluationDataNumber"),
                int.from_bytes(_hex(d["miscselect"], 4, w, "miscselect"), "big"),
                int.from_bytes(_hex(d["miscselectMask"], 4, w, "miscselectMask"), "big"),
                _hex(d["attributes"], 16, w, "attributes"),
                _hex(d["attributesMask"], 16, w, "attributesMask"),
                _hex(d["mrsigner"], 32, w, "mrsigner"),
                _int(d["isvprodid"], w, "isvprodid"),
                levels,
            )
        except KeyError as exc:
            raise _fail(w, f"missing field {exc}") from None


def masked_equal(value: bytes, mask: bytes, expected: bytes) -> bool:
    """Whether ``value & mask == expected & mask`` byte by byte."""
    return len(value) == len(mask) == len(expected) and all(
        (v & m) == (e & m) for v, m, e in zip(value, mask, expected, strict=True)
    )


def converge(platform: TcbStatus, other: TcbStatus) -> TcbStatus:
    """Merge the platform status with the QE's (or the TDX module's), as Intel's QVL does."""
    if other is TcbStatus.REVOKED:
        return TcbStatus.REVOKED
    if other in (TcbStatus.OUT_OF_DATE, TcbStatus.OUT_OF_DATE_CONFIGURATION_NEEDED):
        if platform in (TcbStatus.UP_TO_DATE, TcbStatus.SW_HARDENING_NEEDED):
            return TcbStatus.OUT_OF_DATE
        if platform in (TcbStatus.CONFIGURATION_NEEDED, TcbStatus.CONFIGURATION_AND_SW_HARDENING_NEEDED):
            return TcbStatus.OUT_OF_DATE_CONFIGURATION_NEEDED
    return platform
