"""Discovery over a shared in-memory board of signed records, for the attack harness.

The one seam :class:`tessera.attack.harness.Network` replaces: records are signed and every read goes
through ``protocol.wire.records.decode_record``'s strict validation; only the DHT transport is skipped, so a
scenario is deterministic on 2 CPU cores.
"""

from __future__ import annotations

from dataclasses import dataclass, field
from typing import Any

from protocol.p2p.discovery import Discovery
from protocol.wire.records import RecordError, decode_record


def _discovery_base() -> Any:
    return Discovery


@dataclass
class BoardDiscovery(_discovery_base()):  # type: ignore[misc]
    """Discovery over a shared in-memory board of signed records (see the module doc)."""

    board: dict[tuple[int, str], bytes] = field(default_factory=dict)

    def announce(self, round: int, role: str, url: str, serves: Any, ttl: int = 3600, **_: Any) -> Any:
        """Sign and publish (replaces this node's record of the round)."""
        rec = self.sign_record(round, role, url, serves, ttl)
        self.board[(round, rec.address)] = rec.encode()
        return rec

    def find(self, round: int, fresh: bool = False, **kw: Any) -> list[Any]:
        """Valid records of a round (every one decoded strictly; the board is always fresh)."""
        out = []
        for (r, _), data in sorted(self.board.items()):
            if r != round:
                continue
            try:
                out.append(decode_record(data, chain_id=self.chain_id))
            except RecordError as exc:
                self.refused += 1
                self.errors.append(str(exc))
        return out

    def urls_for(
        self, round: int, kind: str, digest: str, *, address: str | None = None, **_: Any
    ) -> list[str]:
        """URLs announcing ``digest`` of ``kind``."""
        want = digest.removeprefix("0x")
        return [
            r.url
            for r in self.find(round)
            if (address is None or r.address.lower() == address.lower())
            and any(s.kind == kind and s.digest.removeprefix("0x") == want for s in r.serves)
        ]

    def url_of(self, round: int, address: str, **_: Any) -> str | None:
        """The URL ``address`` announced for a round."""
        for r in self.find(round):
            if r.address.lower() == address.lower():
                return str(r.url)
        return None
