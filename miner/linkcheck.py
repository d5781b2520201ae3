"""The miner's start-up check of its own upload link, before it stakes.

An audited miner uploads an audit's largest part (a transcript state's AdamW moments) within a validator's
fetch timeout, or the audit is reported unanswered and slashed like a caught fake. What that needs is
``protocol.rounds.auditspec.audit_serving`` of the run's trained parameters per miner (the figure
``tessera runspec estimate`` prints). At start the miner measures its upload rate to up to
:data:`MAX_TARGETS` validators (``POST /link/probe``, ``protocol.p2p.linkprobe``), found in the current
round's records and its configured ``checkpoint_urls``, and keeps the best; an operator may declare the
rate instead (``upload_mbit``). Too slow: :class:`miner.errors.LinkTooSlowError` before ``ensure_registered``
(nothing staked), a warning only with ``skip_link_check`` or when the key is already registered (its stake
is placed; the check still tells the operator). No validator answering and no declared rate: one warning
line, and the miner goes on (at a network's start the miners may come up before any validator serves).
"""

from __future__ import annotations

import logging
import random
from dataclasses import dataclass
from typing import Any

from miner.config import MinerConfig
from miner.errors import LinkTooSlowError
from protocol.errors import ProtocolError
from protocol.p2p.discovery import Discovery
from protocol.p2p.linkprobe import PROBE_MAX_BYTES, LinkProbeError, ProbeResult, probe_upload
from protocol.rounds.auditspec import audit_serving
from protocol.rounds.coordinator import Coordinator
from protocol.runspec import RunSpec
from training.presets import trained_params_per_miner

log = logging.getLogger(__name__)

MAX_TARGETS = 3
"""Validators probed at most (the first whose measurement meets the need ends the check)."""

PROBE_TARGET_S = 1.0
"""A probe's body is what the needed rate uploads in this many seconds (within the bounds below)."""

PROBE_MIN_BYTES = 128 << 10
"""The smallest probe body."""

PROBE_SLACK_S = 2.0
"""Seconds a probe is given beyond four times its body's time at the needed rate (connection, answer)."""


def required_link(spec: RunSpec) -> dict[str, Any]:
    """What the run's audits need of a miner's upload: ``audit_serving`` of its trained parameters."""
    trained, _modules = trained_params_per_miner(spec.model, spec.experts_per_miner)
    return audit_serving(trained)


def probe_bytes(needed_mbit: float) -> int:
    """The probe body for a need of ``needed_mbit``: :data:`PROBE_TARGET_S` of it, bounded."""
    return int(min(PROBE_MAX_BYTES, max(PROBE_MIN_BYTES, needed_mbit * 1e6 / 8 * PROBE_TARGET_S)))


def probe_wall_s(nbytes: int, needed_mbit: float) -> float:
    """Seconds a probe of ``nbytes`` is given: four times its time at the need, plus :data:`PROBE_SLACK_S`
    (a probe cut off there measured at most a quarter of the need)."""
    return PROBE_SLACK_S + 4 * 8 * nbytes / max(needed_mbit * 1e6, 1.0)


def validator_urls(coord: Coordinator, discovery: Discovery) -> list[str]:
    """Where validators serve: the current round's validator records (in random order, so miners spread
    over them), then the configured fallback URLs."""
    urls: list[str] = []
    try:
        records = discovery.find(coord.current().round)
        urls = [r.url for r in records if r.role == "validator" and r.url]
    except ProtocolError as exc:
        log.info("link check: no validator records read (%s)", exc)
    random.shuffle(urls)
    return list(dict.fromkeys([*urls, *discovery.fallback_urls]))


@dataclass(frozen=True)
class LinkVerdict:
    """The check's outcome."""

    need: dict[str, Any]
    """``audit_serving``'s figures for this run."""
    mbit_s: float | None
    """The rate judged (measured best, or declared); None: neither."""
    source: str
    """``measured at URL`` / ``declared`` / ``none``."""
    probes: tuple[ProbeResult, ...] = ()

    @property
    def needed(self) -> float:
        return float(self.need["upload_mbit_s_needed"])

    @property
    def ok(self) -> bool:
        return self.mbit_s is not None and self.mbit_s >= self.needed

    def describe(self) -> str:
        """What was judged, against what."""
        n = self.need
        got = "no rate" if self.mbit_s is None else f"{self.mbit_s:.2f} Mbit/s upload ({self.source})"
        return (
            f"{got} vs {self.needed:g} Mbit/s needed to serve an audit's largest part "
            f"({n['largest_part_bytes'] / 1e6:.2f} MB; one audit moves {n['audit_bytes'] / 1e6:.2f} MB) within "
            f"a validator's {n['serve_window_s']:g} s fetch timeout"
        )


def measure(cfg: MinerConfig, spec: RunSpec, coord: Coordinator, discovery: Discovery) -> LinkVerdict:
    """The rate to judge: the declared ``upload_mbit``, else the best probe of up to :data:`MAX_TARGETS`
    validators (stopping at the first that meets the need)."""
    need = required_link(spec)
    if cfg.upload_mbit > 0:
        return LinkVerdict(need, cfg.upload_mbit, "declared with --upload-mbit")
    needed = float(need["upload_mbit_s_needed"])
    nbytes = probe_bytes(needed)
    wall = probe_wall_s(nbytes, needed)
    results: list[ProbeResult] = []
    tried: list[str] = []
    for url in validator_urls(coord, discovery):
        if len(tried) >= MAX_TARGETS:
            break
        tried.append(url)
        try:
            r = probe_upload(url, nbytes, wall)
        except LinkProbeError as exc:
            log.debug("link check: %s", exc)
            continue
        results.append(r)
        if r.mbit_s >= needed:
            break
    if not results:
        return LinkVerdict(need, None, f"no validator answered a probe (tried {len(tried)})")
    best = max(results, key=lambda r: r.mbit_s)
    bound = "at most " if best.timed_out else ""
    where = f"{bound}measured to {best.url}, best of {len(results)} validator(s), {best.sent} bytes"
    return LinkVerdict(need, best.mbit_s, where, tuple(results))


def check_link(
    cfg: MinerConfig, spec: RunSpec, coord: Coordinator, discovery: Discovery, address: str
) -> LinkVerdict:
    """Measure (or take the declared rate) and judge it before staking: :class:`LinkTooSlowError` when it
    falls short for a key not registered yet; otherwise one log line (``skip_link_check``: a warning, nothing
    measured)."""
    if cfg.skip_link_check:
        log.warning(
            "link check skipped (--skip-link-check): this miner stakes without knowing its upload can serve "
            "an audit within the validators' fetch timeout (%.2f Mbit/s needed); an audit left unanswered "
            "is slashed like a caught fake",
            required_link(spec)["upload_mbit_s_needed"],
        )
        return LinkVerdict(required_link(spec), None, "skipped")
    registered = address.lower() in {m.lower() for m in coord.miners()}
    v = measure(cfg, spec, coord, discovery)
    if v.mbit_s is None:
        log.warning(
            "link check: %s; going on without it: declare your upload rate with --upload-mbit N (%g Mbit/s "
            "needed) to have it checked",
            v.source,
            v.needed,
        )
        return v
    if v.ok:
        log.info("link check passed: %s", v.describe())
        return v
    if registered:
        log.warning(
            "link check FAILED (already registered, the stake is placed: going on): %s; audits this miner "
            "cannot serve in time are reported unanswered and slashed like fakes",
            v.describe(),
        )
        return v
    raise LinkTooSlowError(
        f"upload link too slow to serve audits: {v.describe()}. An audit not served in time is reported "
        "unanswered and slashed like a caught fake, so this miner does not stake. Use a faster uplink; if "
        "the measurement is wrong, declare your rate with --upload-mbit N, or override the check with "
        "--skip-link-check true"
    )
