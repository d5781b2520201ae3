"""The trained model back out of the network: a certified checkpoint, checked, exported, evaluated, sampled.

A checkpoint blob (what validators serve at ``/blobs/{digest}`` and keep under their data dir) holds
``param/*`` (theta) and ``momentum/*`` (the outer optimizer's buffers). What leaves the network is theta
alone, as a plain safetensors file with the run's model config beside it, after its digest was checked
against the certificate on chain: nobody has to trust the peer it came from. ``--format hf`` writes the
same theta as a directory Hugging Face transformers loads (``tessera.hfexport``); :func:`load_export`
reads either format.
"""

from __future__ import annotations

import json
import math
from collections.abc import Mapping, Sequence
from dataclasses import dataclass
from pathlib import Path
from typing import Any

import torch
from safetensors import SafetensorError
from safetensors.torch import load_file, save_file
from torch import Tensor

from protocol.errors import ProtocolError
from protocol.node.traffic import OPERATOR_QUERY
from protocol.p2p.blobs import TransferError
from protocol.p2p.transfer import get_capped
from protocol.wire.tensorblob import decode_tensors, split_checkpoint, tensors_digest
from tessera.errors import TesseraError
from tessera.hfexport import (
    MANIFEST_FILE,
    HFExportError,
    chosen_paths,
    is_hf_export,
    path_dir,
    read_hf,
    write_hf,
)
from training.config import ModelConfig, from_dict, to_dict
from training.data import is_heldout, prepare
from training.errors import TrainingError
from training.model import build_model, load_params
from training.tokenizer import DOC_SEP_ID, BPETokenizer, ByteTokenizer, TokenizerError
from validator.usefulness import heldout_loss

#: Names of the files ``export`` writes.
WEIGHTS_FILE = "model.safetensors"
CONFIG_FILE = "config.json"
TOKENIZER_FILE = "tokenizer.json"
#: Export formats: Tessera's own files, or a directory Hugging Face transformers loads.
FORMATS = ("tessera", "hf")


class ModelOutError(TesseraError):
    """A checkpoint could not be fetched, checked, exported or loaded."""


@dataclass(frozen=True)
class Certified:
    """Where a checkpoint's digest was checked: the chain, the contract, the round it is theta of."""

    chain_id: int
    contract: str
    round: int
    digest: str


def fetch_checkpoint(
    source: str, digest: str | None, *, max_bytes: int = 1 << 31, timeout: float = 60.0
) -> bytes:
    """A checkpoint blob from a file path or a node's URL (``http://host:port``: ``/blobs/{digest}``)."""
    if source.startswith(("http://", "https://")):
        if digest is None:
            raise ModelOutError(
                "fetching from a node needs the digest (give --deployment to read it from the chain)"
            )
        try:
            # marked as an operator's read: the node's traffic ledger counts it apart from the protocol's
            url = f"{source.rstrip('/')}/blobs/{digest}?{OPERATOR_QUERY}"
            return get_capped(url, max_bytes=max_bytes, timeout=timeout)
        except TransferError as exc:
            raise ModelOutError(f"{source} did not serve checkpoint {digest[:18]}: {exc}") from exc
    try:
        return Path(source).read_bytes()
    except OSError as exc:
        raise ModelOutError(f"cannot read checkpoint {source}: {exc}") from exc


def theta_of(blob: bytes, expect_digest: str | None) -> tuple[dict[str, Tensor], str]:
    """theta (``param/*`` without the prefix) of a checkpoint blob, and the blob's digest; refuses a blob
    whose content digest is not ``expect_digest`` (when given)."""
    try:
        tensors = decode_tensors(blob)
        params, _momentum = split_checkpoint(tensors)
    except ProtocolError as exc:
        raise ModelOutError(f"not a checkpoint: {exc}") from exc
    digest = tensors_digest(tensors)
    if expect_digest is not None and digest != expect_digest:
        raise ModelOutError(f"checkpoint digest {digest} is not the certified {expect_digest}")
    return params, digest


def theta_of_export(
    directory: Path, cfg: ModelConfig, expect_digest: str | None
) -> tuple[dict[str, Tensor], str, Certified | None]:
    """theta of an exported model (either format) to export again (``--from DIR``), with the checkpoint
    digest and the certificate its config records; refuses a model of another config, or one whose
    recorded checkpoint digest is not ``expect_digest`` (when given). The weights are checked against
    the theta digest the config records (:func:`load_export`)."""
    params, got, doc = load_export(directory)
    if got != cfg:
        raise ModelOutError(f"{directory} is not a model of the run (model configs differ)")
    digest = str(doc.get("checkpoint_digest"))
    if expect_digest is not None and digest != expect_digest:
        raise ModelOutError(f"{directory} holds checkpoint {digest}, not the certified {expect_digest}")
    cert = doc.get("certified")
    try:
        return params, digest, Certified(**cert) if isinstance(cert, dict) else None
    except TypeError as exc:
        raise ModelOutError(f"{directory}: its certificate record is not one: {exc}") from exc


def certified_digest(chain: Any, round: int | None) -> Certified:
    """The digest certified on chain for theta_``round`` (None: the newest certified checkpoint)."""
    r = chain.round_state().round if round is None else round
    while r >= 1:
        d = bytes(chain.checkpoint(r))
        if any(d):
            return Certified(chain.chain_id, chain.network_address, r, "0x" + d.hex())
        if round is not None:
            raise ModelOutError(f"theta_{r} is not certified on chain {chain.chain_id}")
        r -= 1
    raise ModelOutError(f"no certified checkpoint on chain {chain.chain_id}")


def export(
    params: Mapping[str, Tensor],
    spec: Any,
    out: Path,
    certified: Certified | None,
    digest: str,
    fmt: str = "tessera",
    paths: Sequence[int] | None = None,
) -> Path:
    """Write theta and what it is into ``out``; returns ``out``. ``fmt`` ``tessera``: ``model.safetensors``
    (theta, fp32), ``config.json`` (the model config, the run's digest and where the checkpoint was
    certified) and the run's BPE tokenizer as ``tokenizer.json`` (checked against the run file's digest
    first). ``fmt`` ``hf``: a directory Hugging Face transformers loads, the same document in
    ``tessera.json`` (``tessera.hfexport``; ``paths``: which DiPaCo paths, None: every one)."""
    if fmt not in FORMATS:
        raise ModelOutError(f"unknown export format {fmt!r} (one of {', '.join(FORMATS)})")
    tokenizer: Any = "bytes (UTF-8, vocab 256)"
    tok_bytes = None
    if spec.tokenizer is not None:
        spec.load_tokenizer()  # refuses a file whose digest is not the pinned one
        tok_bytes = spec.resolve(spec.tokenizer.file).read_bytes()
        tokenizer = spec.tokenizer.to_json() | {"file": TOKENIZER_FILE}
    doc = {
        "format": "tessera-model-v1",
        "model": to_dict(spec.model),
        "run_digest": spec.digest(),
        "checkpoint_digest": digest,
        "theta_digest": theta_digest(params),
        "certified": None if certified is None else certified.__dict__,
        "tokenizer": tokenizer,
    }
    if paths is not None and (fmt != "hf" or spec.model.mode != "dipaco"):
        raise ModelOutError("--path chooses the DiPaCo paths of a --format hf export")
    if fmt == "hf":
        try:
            if isinstance(tokenizer, dict) and spec.model.mode == "dipaco":
                tokenizer["file"] = f"{path_dir(chosen_paths(spec.model, paths)[0])}/{TOKENIZER_FILE}"
            return write_hf(params, spec.model, out, doc, tok_bytes, paths)
        except HFExportError as exc:
            raise ModelOutError(str(exc)) from exc
    out.mkdir(parents=True, exist_ok=True)
    (out / MANIFEST_FILE).unlink(missing_ok=True)  # an earlier hf export's: this directory is native now
    save_file({k: params[k].detach().contiguous().cpu() for k in sorted(params)}, str(out / WEIGHTS_FILE))
    if tok_bytes is not None:
        (out / TOKENIZER_FILE).write_bytes(tok_bytes)
    (out / CONFIG_FILE).write_text(json.dumps(doc, indent=1, sort_keys=True) + "\n")
    return out


def theta_digest(params: Mapping[str, Tensor]) -> str:
    """The digest of theta alone (a checkpoint's digest also covers the outer momentum)."""
    return tensors_digest({f"param/{k}": v for k, v in params.items()})


def load_export(directory: Path) -> tuple[dict[str, Tensor], Any, dict[str, Any]]:
    """(theta, model config, config document) of an exported model, either format; checks the weights'
    digest (and, ``hf``, every file against the SHA-256 ``tessera.json`` names)."""
    hf = is_hf_export(directory)
    doc_file = MANIFEST_FILE if hf else CONFIG_FILE
    try:
        doc = json.loads((directory / doc_file).read_text())
        cfg = from_dict(ModelConfig, doc["model"])
        params = read_hf(directory, cfg, doc) if hf else load_file(str(directory / WEIGHTS_FILE))
    except HFExportError as exc:
        raise ModelOutError(str(exc)) from exc
    except (OSError, ValueError, KeyError, TypeError, TrainingError, SafetensorError) as exc:
        raise ModelOutError(f"{directory} is not an exported Tessera model: {exc}") from exc
    if theta_digest(params) != doc.get("theta_digest"):
        weights = "its weights" if hf else f"{directory}/{WEIGHTS_FILE}"
        raise ModelOutError(f"{weights} is not the model its {doc_file} names (digest differs)")
    return params, cfg, doc


def export_tokenizer(directory: Path, doc: dict[str, Any]) -> Any:
    """The tokenizer of an exported model: byte-level, or its ``tokenizer.json`` checked against the
    digest its config names."""
    spec = doc.get("tokenizer")
    if not isinstance(spec, dict):
        return ByteTokenizer()
    name = str(spec.get("file", TOKENIZER_FILE))
    try:
        data = (directory / name).read_bytes()
        tok = BPETokenizer(data)
    except (OSError, TokenizerError) as exc:
        raise ModelOutError(f"{directory}: cannot load its tokenizer: {exc}") from exc
    if tok.digest != spec.get("digest"):
        raise ModelOutError(f"{directory}/{name} is not the tokenizer its config names")
    return tok


def model_with(params: Mapping[str, Tensor], cfg: Any) -> Any:
    """A model of config ``cfg`` holding ``params`` (every parameter must be given, with its shape)."""
    model = build_model(cfg)
    want = {k: tuple(v.shape) for k, v in model.state_dict().items()}
    got = {k: tuple(v.shape) for k, v in params.items()}
    if want != got:
        missing, extra = sorted(set(want) - set(got)), sorted(set(got) - set(want))
        raise ModelOutError(
            f"parameters do not fit the model config (missing {missing[:3]}, extra {extra[:3]})"
        )
    load_params(model, params)
    model.eval()
    return model


def evaluate(params: Mapping[str, Tensor], spec: Any, windows: int = 64) -> dict[str, float]:
    """Held-out loss (nats per token) and perplexity of theta on the run's corpus (its held-out documents),
    and bits per byte (per token over the held-out stream's bytes per token: 1 for byte-level tokens)."""
    corpus = spec.load_corpus()
    ds = prepare(corpus, spec.model)
    loss = heldout_loss(spec, ds, params, windows=windows)
    held_bytes = sum(len(d.data) + 1 for d in corpus.documents if is_heldout(d.id))
    bytes_per_token = held_bytes / max(1, ds.heldout.numel())
    return {
        "heldout_loss": loss,
        "perplexity": math.exp(loss),
        "bits_per_byte": loss / math.log(2) / bytes_per_token,
        "bytes_per_token": bytes_per_token,
    }


def sample(
    model: Any,
    prompt: str,
    *,
    max_new: int = 200,
    temperature: float = 0.8,
    top_k: int = 40,
    seed: int = 0,
    path: Sequence[int] | None = None,
    tokenizer: Any = None,
) -> str:
    """Text the model continues ``prompt`` with (``max_new`` tokens of ``tokenizer``, byte-level when None;
    ``temperature`` 0: greedy). Deterministic for a seed on one machine."""
    tok = tokenizer if tokenizer is not None else ByteTokenizer()
    tokens = tok.encode(prompt) or tok.encode("\n") or [DOC_SEP_ID]
    ids = sample_ids(
        model, tokens, max_new=max_new, temperature=temperature, top_k=top_k, seed=seed, path=path
    )
    return str(tok.decode(ids))


def sample_ids(
    model: Any,
    tokens: Sequence[int],
    *,
    max_new: int = 200,
    temperature: float = 0.8,
    top_k: int = 40,
    seed: int = 0,
    path: Sequence[int] | None = None,
) -> list[int]:
    """The ``max_new`` token ids the model continues ``tokens`` with (what :func:`sample` decodes); the
    context is the last ``seq_len`` tokens."""
    if temperature < 0 or top_k < 1 or max_new < 0:
        raise ModelOutError("temperature must be >= 0, top_k >= 1 and the length >= 0")
    cfg = model.cfg
    tokens = list(tokens)
    gen = torch.Generator().manual_seed(seed)
    out: list[int] = []
    with torch.no_grad():
        for _ in range(max_new):
            ctx = torch.tensor([(tokens + out)[-cfg.seq_len :]], dtype=torch.long)
            logits, _ = model(ctx, path)
            last = logits[0, -1].float()
            if temperature == 0:
                nxt = int(last.argmax())
            else:
                vals, idx = torch.topk(last / temperature, min(top_k, last.numel()))
                nxt = int(idx[torch.multinomial(torch.softmax(vals, -1), 1, generator=gen)])
            out.append(nxt)
    return out
