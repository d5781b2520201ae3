"""The cross-language test vectors: the cases a Python reference computes, written as the JSON file a forge
test replays against the Solidity (``contracts/test/vectors/``, ``npm run vectors``), so the two
implementations cannot drift apart. Each reference module (``protocol.rounds.consensus``,
``protocol.rounds.audits``) makes its cases; this module is the one command line that writes them.
"""

from __future__ import annotations

import argparse
import json
import sys
from collections.abc import Callable, Mapping, Sequence
from pathlib import Path


def write_vectors(path: Path, vectors: Mapping[str, object]) -> None:
    """Write ``vectors`` to ``path`` (its folder made if missing) as the forge tests read them: JSON
    indented by one space, one trailing newline."""
    path.parent.mkdir(parents=True, exist_ok=True)
    path.write_text(json.dumps(vectors, indent=1) + "\n")


def vectors_main(
    make: Callable[[], Mapping[str, object]], description: str, argv: Sequence[str] | None = None
) -> int:
    """The command line of a reference module, ``python -m MODULE --write-vectors FILE``: write what
    ``make()`` returns to FILE (``description``: the help's first line); returns the exit status."""
    parser = argparse.ArgumentParser(description=description)
    parser.add_argument("--write-vectors", type=Path, required=True, help="JSON file to write")
    args = parser.parse_args(argv)
    write_vectors(args.write_vectors, make())
    print(f"wrote {args.write_vectors}", file=sys.stderr)
    return 0
