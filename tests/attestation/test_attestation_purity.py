"""verify is pure: it reads neither the wall clock nor the network (now, roots, policy are arguments)."""

from __future__ import annotations

import datetime as dt
import socket
import time

import pytest

from attestation import Policy, verify
from tests.attestation.attest_support import (
    NVIDIA_TIME,
    SNP_TIME,
    IntelVector,
    intel_policy,
    nvidia_collateral,
    nvidia_report,
    snp_collateral,
    snp_report,
)


class _NoClock(dt.datetime):
    @classmethod
    def now(cls, tz=None):  # type: ignore[no-untyped-def, override]
        raise AssertionError("verify read the wall clock")

    @classmethod
    def utcnow(cls):  # type: ignore[no-untyped-def, override]
        raise AssertionError("verify read the wall clock")


def test_verify_reads_no_clock_and_no_network(monkeypatch: pytest.MonkeyPatch, tdx: IntelVector) -> None:
    def no(*_a: object, **_k: object) -> None:
        raise AssertionError("verify touched the clock or the network")

    coll = tdx.collateral  # parsed before the patches
    snp, nv = snp_collateral(), nvidia_collateral()
    monkeypatch.setattr(time, "time", no)
    monkeypatch.setattr(time, "time_ns", no)
    monkeypatch.setattr(socket, "socket", no)
    monkeypatch.setattr(socket, "create_connection", no)
    monkeypatch.setattr(dt, "datetime", _NoClock)
    verify(tdx.quote, coll, intel_policy(), tdx.inside)
    verify(snp_report(), snp, Policy(dangerous_allow_debug=True), SNP_TIME)
    verify(nvidia_report(), nv, Policy(), NVIDIA_TIME)
