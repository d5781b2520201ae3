"""The tokenizer files of a Hugging Face export (``tessera.hfexport``): ``tokenizer.json`` and
``tokenizer_config.json`` for ``PreTrainedTokenizerFast``.

A BPE run's ``tokenizer.json`` goes into the export as is (byte-level BPE, ``<|doc|>`` id 0: the same
file, the same ids). A byte-level run gets :func:`byte_tokenizer_json`: a ``tokenizers`` BPE whose 256
tokens are the bytes (id = byte value) under the ByteLevel pre-tokenizer and decoder, without merges, so
it encodes text to its UTF-8 bytes as ``training.tokenizer.ByteTokenizer`` does.
"""

from __future__ import annotations

import json
from typing import Any

from training.config import ModelConfig


def byte_tokenizer_json() -> bytes:
    """A ``tokenizers`` JSON encoding text to its UTF-8 bytes (id = byte value), as ``ByteTokenizer``."""
    alphabet = _bytes_to_unicode()
    doc: dict[str, Any] = {
        "version": "1.0",
        "truncation": None,
        "padding": None,
        "added_tokens": [],
        "normalizer": None,
        "pre_tokenizer": {
            "type": "ByteLevel",
            "add_prefix_space": False,
            "trim_offsets": True,
            "use_regex": False,
        },
        "post_processor": None,
        "decoder": {"type": "ByteLevel", "add_prefix_space": False, "trim_offsets": True, "use_regex": False},
        "model": {
            "type": "BPE",
            "dropout": None,
            "unk_token": None,
            "continuing_subword_prefix": None,
            "end_of_word_suffix": None,
            "fuse_unk": False,
            "byte_fallback": False,
            "ignore_merges": False,
            "vocab": {alphabet[b]: b for b in range(256)},
            "merges": [],
        },
    }
    return (json.dumps(doc, ensure_ascii=False) + "\n").encode()


def _bytes_to_unicode() -> dict[int, str]:
    """GPT-2's byte -> printable character table (the ByteLevel pre-tokenizer's alphabet)."""
    keep = [*range(ord("!"), ord("~") + 1), *range(ord("¡"), ord("¬") + 1), *range(ord("®"), ord("ÿ") + 1)]
    table, extra = {b: chr(b) for b in keep}, 0
    for b in range(256):
        if b not in table:
            table[b] = chr(256 + extra)
            extra += 1
    return table


def tokenizer_config(cfg: ModelConfig, bpe: bool) -> dict[str, Any]:
    """``tokenizer_config.json``: a fast tokenizer that adds nothing to the text it encodes."""
    doc: dict[str, Any] = {
        "tokenizer_class": "PreTrainedTokenizerFast",
        "model_max_length": cfg.seq_len,
        "clean_up_tokenization_spaces": False,
        "add_bos_token": False,
        "add_eos_token": False,
    }
    if bpe:  # byte 0 of the byte-level tokenizer is a byte, not a special token (text could hold U+0100)
        doc |= {"eos_token": "<|doc|>", "bos_token": "<|doc|>", "pad_token": "<|doc|>"}
    return doc
