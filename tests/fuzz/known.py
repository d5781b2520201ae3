"""Findings of the fuzz campaigns that are reported to the owning engineer but not fixed yet.

Each entry is ``"ExceptionType@file"`` (the engine keys failures by ``type@file:line``; the line is
dropped here because the owners keep editing those files). The quick tests tolerate these
(and only these) so that CI still catches every *new* crash; remove an entry once it is fixed (the test
then also fails if the fix regresses). The exact fixes are in docs/security.md ("Findings").
"""

from __future__ import annotations

KNOWN_UNFIXED: dict[str, set[str]] = {
    # protocol/update.py _safetensors_header_len: v["data_offsets"][1] on an unchecked safetensors header
    "update": {
        "TypeError@protocol/update.py",
        "IndexError@protocol/update.py",
        "KeyError@protocol/update.py",
        "ValueError@protocol/update.py",
        "AttributeError@protocol/update.py",
    },
    # load_settings / RunSpec.load / Deployment.load: UnicodeDecodeError and RecursionError escape; RunSpec.from_json on a list
    "config": {
        "UnicodeDecodeError@protocol/runspec.py",
        "UnicodeDecodeError@protocol/settings.py",
        "RecursionError@protocol/runspec.py",
        "AttributeError@protocol/runspec.py",
        "UnicodeDecodeError@protocol/deployment.py",
        "RecursionError@protocol/deployment.py",
        # ModelConfig.__post_init__: d_model % n_heads with n_heads == 0 (run.json "model": {"n_heads": 0})
        "ZeroDivisionError@training/config.py",
    },
    # protocol/chain.py: web3/eth-abi decoding and response-format errors of malformed RPC results escape
    # untyped from Chain._call / events / block_number (see docs/security.md for the fix)
    "chain": {"*@protocol/chain.py"},
}
