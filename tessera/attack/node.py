"""``python -m tessera.attack.node ...``: a node process with the attack suite's behaviours plugged in.

The product commands (``tessera miner run``, ``tessera validator run``) know only honest nodes; this entry
point (testing only) registers the adversarial miner behaviours (``--behaviour NAME``) and takes
``--mode NAME`` for a validator's adversarial class, then runs the same commands. ``tessera devnet
--adversary NODE=MODE`` starts those nodes through it.
"""

from __future__ import annotations

import sys
from collections.abc import Sequence

from tessera import cli
from tessera.attack import validators
from tessera.attack.miners import register_all
from tessera.errors import TesseraError
from validator.node import ValidatorNode

#: ``--mode`` names -> class names in ``tessera.attack.validators`` (``honest``: the plain node).
MODES = {
    "honest": "",
    "copier": "CopierValidator",
    "random": "RandomValidator",
    "colluding": "ColludingValidator",
    "silent": "SilentValidator",
    "bad-signer": "BadSignerValidator",
}


def node_class(mode: str) -> type:
    """The validator node class for ``--mode``; :class:`TesseraError` for an unknown one."""
    if mode not in MODES:
        raise TesseraError(f"unknown validator mode {mode!r}; choose from {sorted(MODES)}")
    if not MODES[mode]:
        return ValidatorNode
    cls: type = getattr(validators, MODES[mode])
    return cls


def split_mode(argv: Sequence[str]) -> tuple[str, list[str]]:
    """(``--mode``'s value or ``honest``, the other arguments)."""
    rest: list[str] = []
    mode = "honest"
    it = iter(argv)
    for a in it:
        if a == "--mode":
            mode = next(it, "")
        elif a.startswith("--mode="):
            mode = a.split("=", 1)[1]
        else:
            rest.append(a)
    return mode, rest


def main(argv: Sequence[str] | None = None) -> int:
    """Register the behaviours, pick the validator class, run ``tessera ARGV``."""
    register_all()
    mode, rest = split_mode(list(sys.argv[1:] if argv is None else argv))
    try:
        cls = node_class(mode)
    except TesseraError as exc:
        print(f"tessera: error: {exc}", file=sys.stderr)
        return 2
    return cli.main(rest, extra={"node_class": cls})


if __name__ == "__main__":  # pragma: no cover
    sys.exit(main())
