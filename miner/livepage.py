"""The miner's live page at ``GET /``: what the node is doing now and its recent rounds.

The validator's page (:mod:`validator.web`) polls its JSON routes from a script; the miner's is rendered on
the server from its own ``/status`` document and round records, as one self-contained document (no script,
no CDN) that reloads itself every few seconds. :func:`render_live_page` is pure (a data dict in, an HTML
string out): every value is HTML-escaped, since records hold values that came from peers and the chain,
and the output is bounded (the last :data:`MAX_ROUNDS` rounds, each value cut at :data:`MAX_VALUE_CHARS`).
"""

from __future__ import annotations

import html
import math
from collections.abc import Callable, Mapping
from decimal import Decimal, InvalidOperation
from typing import Any

from fastapi.responses import HTMLResponse

MAX_ROUNDS = 20
"""Rounds shown, newest first."""

MAX_VALUE_CHARS = 300
"""Longer values (an error message, a reason) are cut to this many characters before escaping."""

REFRESH_SECONDS = 5

LINKS = ("/status", "/rounds", "/traffic", "/metrics", "/docs")

#: (record field, column heading) of the rounds table.
COLUMNS = (
    ("status", "status"),
    ("update_digest", "update"),
    ("update_bytes", "update bytes"),
    ("train_seconds", "train s"),
    ("inner_steps", "inner steps"),
    ("tokens", "tokens"),
    ("loss_first", "loss first"),
    ("loss_last", "loss last"),
    ("consensus_score", "consensus"),
    ("reward", "reward (TSR)"),
    ("reason", "note"),
)

_STYLE = """body{font:14px system-ui,sans-serif;margin:2em;color:#222}
table{border-collapse:collapse;margin-top:1em}td,th{border:1px solid #ccc;padding:4px 8px;text-align:right}
th{background:#f4f4f4}td.l{text-align:left}.bad{color:#b00}.ok{color:#070}code{font-size:12px}
dl{display:grid;grid-template-columns:max-content auto;gap:2px 1em}dt{color:#666}dd{margin:0}"""


def _cut(text: str, limit: int = MAX_VALUE_CHARS) -> str:
    return text if len(text) <= limit else text[: limit - 1] + "\u2026"


def _fmt(value: Any) -> str:
    """A value as display text (not yet escaped)."""
    if value is None:
        return ""
    if isinstance(value, bool):
        return "yes" if value else "no"
    if isinstance(value, float):
        return f"{value:.4f}" if math.isfinite(value) else str(value)
    if isinstance(value, int):
        return str(value)
    if isinstance(value, str):
        return _cut(value)
    return _cut(repr(value))


def _esc(value: Any) -> str:
    return html.escape(_fmt(value), quote=True)


def _tokens(wei: Any) -> str:
    """A reward in wei (a decimal string in the records) as TSR with 4 decimals; anything else as is."""
    try:
        amount = Decimal(str(wei)) / Decimal(10**18)
    except (InvalidOperation, ValueError):
        return _fmt(wei)
    return f"{amount:.4f}" if amount.is_finite() else _fmt(wei)


def _cell(key: str, rec: Mapping[str, Any]) -> str:
    value = rec.get(key)
    if key == "update_digest" and isinstance(value, str):
        return f'<td class="l"><code title="{_esc(value)}">{html.escape(_cut(value, 16))}</code></td>'
    if key == "reward" and value is not None:
        return f"<td>{html.escape(_tokens(value))}</td>"
    if key == "status":
        cls = {"served": "ok", "abandoned": "bad"}.get(str(value), "")
        return f'<td class="l {cls}">{_esc(value)}</td>'
    if key == "reason":
        return f'<td class="l">{_esc(value)}</td>'
    return f"<td>{_esc(value)}</td>"


def _round_key(item: tuple[Any, Any]) -> tuple[int, str]:
    r = item[0]
    try:
        return (int(r), "")
    except (TypeError, ValueError):
        return (-1, str(r))


def render_live_page(data: Mapping[str, Any]) -> str:
    """The page for ``data``: the miner's ``/status`` document plus ``rounds`` (round -> record)."""
    rounds = data.get("rounds") or {}
    recent = sorted(
        ((r, rec) for r, rec in dict(rounds).items() if isinstance(rec, Mapping)),
        key=_round_key,
        reverse=True,
    )
    shown = recent[:MAX_ROUNDS]
    address = data.get("address")
    url = data.get("url")
    error = data.get("last_error")
    facts = [
        ("address", f"<code>{_esc(address)}</code>"),
        ("URL", f"<code>{_esc(url)}</code>"),
        ("behaviour", _esc(data.get("behaviour"))),
        ("round", f"<b>{_esc(data.get('round'))}</b>"),
        ("phase", f"<b>{_esc(data.get('phase'))}</b>"),
        ("rounds done", _esc(data.get("rounds_done"))),
        ("last error", f'<span class="bad">{_esc(error)}</span>' if error else "none"),
    ]
    head = "".join(f"<th>{html.escape(title)}</th>" for _, title in COLUMNS)
    rows = "".join(
        f"<tr><td>{_esc(r)}</td>{''.join(_cell(key, rec) for key, _ in COLUMNS)}</tr>" for r, rec in shown
    )
    if not rows:
        rows = f'<tr><td class="l" colspan="{len(COLUMNS) + 1}">no rounds yet</td></tr>'
    more = (
        f'<p>{len(shown)} most recent of {len(recent)} rounds; all of them at <a href="/rounds">/rounds</a>.</p>'
        if len(recent) > len(shown)
        else ""
    )
    links = " &middot; ".join(f'<a href="{link}">{link}</a>' for link in LINKS)
    return (
        "<!doctype html>\n"
        '<html><head><meta charset="utf-8">'
        f'<meta http-equiv="refresh" content="{REFRESH_SECONDS}">'
        f"<title>Tessera miner {_esc(_cut(str(address or ''), 42))}</title>"
        f"<style>{_STYLE}</style></head><body>\n"
        f"<h1>Tessera miner <small><code>{_esc(address)}</code></small></h1>\n"
        "<dl>" + "".join(f"<dt>{k}</dt><dd>{v}</dd>" for k, v in facts) + "</dl>\n"
        f'<table id="rounds"><thead><tr><th>round</th>{head}</tr></thead><tbody>{rows}</tbody></table>\n'
        f"{more}<p>{links}</p>\n"
        f"<p><small>reloads every {REFRESH_SECONDS} s</small></p>\n"
        "</body></html>\n"
    )


def live_data(
    status: Callable[[], dict[str, Any]], rounds: Callable[[], Mapping[int, Any]]
) -> dict[str, Any]:
    """The page's data from the node: its ``/status`` document and its round records (read again if the
    node's loop changed them while they were being copied)."""
    for attempt in range(3):
        try:
            return {**status(), "rounds": dict(rounds())}
        except RuntimeError:  # "dictionary changed size during iteration": the loop wrote a record
            if attempt == 2:
                raise
    raise AssertionError("unreachable")


def mount_live_page(
    app: Any, status: Callable[[], dict[str, Any]], rounds: Callable[[], Mapping[int, Any]]
) -> None:
    """Serve the live page at ``GET /``."""

    @app.get("/", response_class=HTMLResponse, summary="Live page of this miner")
    def live() -> str:
        return render_live_page(live_data(status, rounds))
