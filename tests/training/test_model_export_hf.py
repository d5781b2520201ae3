"""``tessera model export --format hf`` (issue 37): the certified model as a directory Hugging Face
transformers loads, equal to Tessera's own outputs.

For a dense, an MoE and a DiPaCo checkpoint (each exported through the CLI from a checkpoint blob): the
logits of transformers and of Tessera agree within 1e-4 on held-out windows, the held-out loss through
transformers is ``tessera model eval``'s, and greedy ``generate`` gives ``tessera model sample
--temperature 0``'s tokens and text. The exported tokenizers (byte-level and BPE) encode the held-out text
to Tessera's ids. A directory with a file missing or altered is refused by ``eval`` and ``sample`` in one
line. No network: ``HF_HUB_OFFLINE`` is set before transformers is imported.
"""

from __future__ import annotations

import os

os.environ["HF_HUB_OFFLINE"] = "1"

import contextlib
import io
import json
import re
from pathlib import Path
from typing import Any

import pytest
import torch
import torch.nn.functional as F
from transformers import AutoModelForCausalLM, AutoTokenizer

from protocol.runspec import RunSpec, TokenizerSpec
from protocol.wire.tensorblob import encode_tensors, tensors_digest
from tessera.cli import main
from tessera.modelout import ModelOutError, export, export_tokenizer, load_export, model_with, sample_ids
from training.config import ModelConfig
from training.corpus import load_bundled_corpus
from training.data import eval_windows, is_heldout, prepare
from training.model import all_paths, build_model, param_state
from training.tokenizer import BPETokenizer, ByteTokenizer, train_bpe

WINDOWS = 8
LENGTH = 24
PROMPT = "The "


def _theta(cfg: ModelConfig) -> dict[str, torch.Tensor]:
    """A checkpoint of ``cfg`` moved off its initialisation (LayerNorm biases and gains included)."""
    params = param_state(build_model(cfg, seed=5))
    gen = torch.Generator().manual_seed(11)
    return {k: v + 0.05 * torch.randn(v.shape, generator=gen) for k, v in params.items()}


def _export(tmp_path: Path, cfg: ModelConfig, capsys: pytest.CaptureFixture[str]) -> tuple[Path, Path, Any]:
    spec = RunSpec(model=cfg, genesis_seed=5)
    run = tmp_path / "run.json"
    spec.save(run)
    tensors = {f"param/{k}": v for k, v in _theta(cfg).items()}
    blob = tmp_path / "theta.bin"
    blob.write_bytes(encode_tensors(tensors))
    out = tmp_path / "hf"
    argv = ["model", "export", "--from", str(blob), "--run-file", str(run), "--out", str(out)]
    assert main([*argv, "--digest", tensors_digest(tensors), "--format", "hf", "--json"]) == 0
    assert json.loads(capsys.readouterr().out)["format"] == "hf"
    return run, out, spec


def _cli_json(argv: list[str], capsys: pytest.CaptureFixture[str]) -> dict[str, Any]:
    assert main([*argv, "--json"]) == 0
    return dict(json.loads(capsys.readouterr().out))


@pytest.mark.parametrize("mode", ["dense", "moe", "dipaco"])
def test_transformers_gives_tesseras_logits_loss_and_greedy_tokens(
    tmp_path: Path, capsys: pytest.CaptureFixture[str], mode: str
) -> None:
    cfg = ModelConfig(mode=mode, seq_len=32, d_model=32, n_heads=4, d_ff=64, n_layers=2)  # type: ignore[arg-type]
    run, out, spec = _export(tmp_path, cfg, capsys)
    params, _cfg, _doc = load_export(out)
    model = model_with(params, cfg)
    ds = prepare(spec.load_corpus(), cfg)
    remote = mode == "moe"  # the custom model in the directory (tessera.hfmoe)
    losses, worst = [], 0.0
    for n, path in enumerate(all_paths(cfg)):
        where = out / f"path-{n}" if mode == "dipaco" else out
        hf = AutoModelForCausalLM.from_pretrained(where, trust_remote_code=remote).eval()
        tok = AutoTokenizer.from_pretrained(where, trust_remote_code=remote)
        assert type(hf).__name__ == ("TesseraMoeForCausalLM" if remote else "GPT2LMHeadModel")
        route = path if mode == "dipaco" else None
        stream = ds.path_heldout[n] if mode == "dipaco" else ds.heldout
        w = eval_windows(stream, cfg.seq_len, WINDOWS)
        with torch.no_grad():
            ours = model(w[:, :-1], route)[0]
            theirs = hf(input_ids=w[:, :-1]).logits
        worst = max(worst, float((ours - theirs).abs().max()))
        losses.append(float(F.cross_entropy(theirs.reshape(-1, theirs.shape[-1]), w[:, 1:].reshape(-1))))

        # greedy: transformers' generate (not stopping at the document end, as Tessera's sample does not)
        prompt = tok(PROMPT, return_tensors="pt")
        assert prompt["input_ids"][0].tolist() == list(PROMPT.encode())
        with torch.no_grad():
            got = hf.generate(**prompt, max_new_tokens=LENGTH, do_sample=False, eos_token_id=None)
        new = got[0, prompt["input_ids"].shape[1] :].tolist()
        assert new == sample_ids(model, list(PROMPT.encode()), max_new=LENGTH, temperature=0, path=route)
        argv = [
            "model",
            "sample",
            str(out),
            "--prompt",
            PROMPT,
            "--length",
            str(LENGTH),
            "--temperature",
            "0",
        ]
        text = _cli_json([*argv, "--path", str(n)], capsys)["text"]
        assert tok.decode(new) == text == ByteTokenizer().decode(new)
        if mode != "dipaco" or n == 1:
            break  # DiPaCo: paths 0 and 1 for logits and generation; the loss below needs every path
    for n in range(2, len(all_paths(cfg))):  # the remaining DiPaCo paths' held-out loss
        hf = AutoModelForCausalLM.from_pretrained(out / f"path-{n}").eval()
        w = eval_windows(ds.path_heldout[n], cfg.seq_len, WINDOWS)
        with torch.no_grad():
            logits = hf(input_ids=w[:, :-1]).logits
        losses.append(float(F.cross_entropy(logits.reshape(-1, logits.shape[-1]), w[:, 1:].reshape(-1))))
    assert worst < 1e-4, worst
    ev = _cli_json(["model", "eval", str(out), "--run-file", str(run), "--windows", str(WINDOWS)], capsys)
    assert ev["heldout_loss"] == pytest.approx(sum(losses) / len(losses), abs=2e-6)
    print(f"{mode}: max |logit diff| {worst:.2e}; loss {ev['heldout_loss']} vs {sum(losses) / len(losses)}")


def _bpe_spec(tmp_path: Path, mode: str) -> RunSpec:
    texts = [d.data.decode() for d in load_bundled_corpus().documents if not is_heldout(d.id)][:400]
    path = tmp_path / "tokenizer.json"
    path.write_bytes(train_bpe(texts, 320))
    tok = BPETokenizer(path.read_bytes())
    ts = TokenizerSpec(file=str(path), digest=tok.digest, vocab_size=tok.vocab_size)
    model = ModelConfig(mode=mode, vocab_size=tok.vocab_size, seq_len=16, d_model=16, d_ff=32)  # type: ignore[arg-type]
    return RunSpec(model=model, tokenizer=ts)


def test_exported_tokenizers_encode_the_heldout_text_to_tesseras_ids(tmp_path: Path) -> None:
    held = [d.data.decode() for d in load_bundled_corpus().documents if is_heldout(d.id)][:60]
    held.append("ünïcödé, tabs\tand\nnewlines, \u0100 and emoji \U0001f600")
    bpe_spec = _bpe_spec(tmp_path, "dipaco")
    cases = [
        (RunSpec(model=ModelConfig(mode="dense", seq_len=16, d_model=16, d_ff=32)), ByteTokenizer(), ""),
        (bpe_spec, bpe_spec.load_tokenizer(), "path-3"),
    ]
    for i, (spec, ours, sub) in enumerate(cases):
        out = export(
            param_state(build_model(spec.model)), spec, tmp_path / f"out{i}", None, "0x" + "ab" * 32, "hf"
        )
        theirs = AutoTokenizer.from_pretrained(out / sub)
        for text in held:
            ids = theirs(text)["input_ids"]
            assert ids == ours.encode(text), text[:40]
            assert theirs.decode(ids) == ours.decode(ids)
        _params, _cfg, doc = load_export(out)
        assert type(export_tokenizer(out, doc)) is type(ours)
    assert AutoTokenizer.from_pretrained(tmp_path / "out1" / "path-0").eos_token_id == 0  # BPE's <|doc|>


@pytest.mark.parametrize(
    ("name", "change", "says"),
    [
        ("tokenizer_config.json", None, "is missing"),
        ("config.json", b'{"activation_function": "gelu_new"}', "was altered"),
        ("model.safetensors", b"", "was altered"),
        ("tessera.json", None, "not an exported Tessera model"),
    ],
)
def test_a_missing_or_altered_file_is_refused_in_one_line(
    tmp_path: Path, capsys: pytest.CaptureFixture[str], name: str, change: bytes | None, says: str
) -> None:
    cfg = ModelConfig(mode="dense", seq_len=16, d_model=16, d_ff=32)
    run, out, _spec = _export(tmp_path, cfg, capsys)
    target = out / name
    if change is None:
        target.unlink()
    elif name == "config.json":
        target.write_text(json.dumps(json.loads(target.read_text()) | json.loads(change)))
    else:
        target.write_bytes(target.read_bytes()[:-8] + b"\0" * 8)
    for argv in (["model", "eval", str(out), "--run-file", str(run)], ["model", "sample", str(out)]):
        assert main(argv) == 2
        err = capsys.readouterr().err.strip()
        assert says in err and "\n" not in err, err


def test_an_export_is_exported_again_in_the_other_format(
    tmp_path: Path, capsys: pytest.CaptureFixture[str]
) -> None:
    cfg = ModelConfig(mode="moe", seq_len=16, d_model=16, d_ff=32)
    spec = RunSpec(model=cfg, genesis_seed=5)
    run = tmp_path / "run.json"
    spec.save(run)
    params = _theta(cfg)
    native = export(params, spec, tmp_path / "native", None, "0x" + "cd" * 32)
    base = ["model", "export", "--from", str(native), "--run-file", str(run), "--format", "hf"]
    got = _cli_json([*base, "--digest", "0x" + "cd" * 32, "--out", str(tmp_path / "hf")], capsys)
    assert got["checkpoint_digest"] == "0x" + "cd" * 32 and got["checked_against"] == "--digest"
    again, _cfg, doc = load_export(tmp_path / "hf")
    assert doc["format"] == "tessera-hf-v1" and all(again[k].equal(v) for k, v in params.items())
    assert main([*base, "--digest", "0x" + "11" * 32, "--out", str(tmp_path / "bad")]) == 2
    assert "not the certified" in capsys.readouterr().err and not (tmp_path / "bad").exists()

    # a left-padded batch (the MoE code's own attention mask and positions): each row's logits as alone
    hf = AutoModelForCausalLM.from_pretrained(tmp_path / "hf", trust_remote_code=True).eval()
    short, long = torch.tensor([[5, 6, 7]]), torch.tensor([[1, 2, 3, 4, 5, 6]])
    batch = torch.cat([torch.cat([torch.zeros(1, 3, dtype=torch.long), short], 1), long])
    mask = torch.cat(
        [torch.cat([torch.zeros(1, 3, dtype=torch.long), torch.ones_like(short)], 1), long * 0 + 1]
    )
    with torch.no_grad():
        both = hf(input_ids=batch, attention_mask=mask).logits
        assert (both[0, 3:] - hf(input_ids=short).logits[0]).abs().max() < 1e-5
        assert (both[1] - hf(input_ids=long).logits[0]).abs().max() < 1e-5

    # README.md's three lines, as written, on this (MoE) export: no prompt, text out
    readme = (Path(__file__).resolve().parents[2] / "README.md").read_text()
    lines = re.findall(r"```python\n(from transformers.*?)```", readme, flags=re.S)[0]
    assert len(lines.strip().splitlines()) == 3
    printed = io.StringIO()
    with contextlib.redirect_stdout(printed):
        exec(lines.replace('"my-model-hf"', repr(str(tmp_path / "hf"))), {})
    assert printed.getvalue().startswith("The ")


def test_dipaco_paths_to_write_are_chosen_and_a_partial_export_is_for_transformers_only(
    tmp_path: Path, capsys: pytest.CaptureFixture[str]
) -> None:
    cfg = ModelConfig(mode="dipaco", seq_len=16, d_model=16, d_ff=32, n_layers=2)
    spec = RunSpec(model=cfg)
    params = _theta(cfg)
    out = export(params, spec, tmp_path / "two", None, "0x" + "ab" * 32, "hf", paths=[3, 1])
    assert sorted(p.name for p in out.iterdir() if p.is_dir()) == ["path-1", "path-3"]
    hf = AutoModelForCausalLM.from_pretrained(out / "path-3").eval()
    x = torch.arange(16).unsqueeze(0)
    with torch.no_grad():
        assert torch.equal(hf(input_ids=x).logits, model_with(params, cfg)(x, all_paths(cfg)[3])[0])
    run = tmp_path / "run.json"
    spec.save(run)
    assert main(["model", "eval", str(out), "--run-file", str(run)]) == 2
    assert "holds 2 of the model's 4 DiPaCo paths" in capsys.readouterr().err
    with pytest.raises(ModelOutError, match="numbered 0..3"):
        export(params, spec, tmp_path / "bad", None, "0x" + "ab" * 32, "hf", paths=[4])
    with pytest.raises(ModelOutError, match="--path chooses"):
        export(params, spec, tmp_path / "bad", None, "0x" + "ab" * 32, "tessera", paths=[0])
    deep = ModelConfig(mode="dipaco", seq_len=4, d_model=4, n_heads=1, d_ff=4, n_layers=5)  # 32 paths
    with pytest.raises(ModelOutError, match="32 DiPaCo paths.*--path"):
        export(_theta(deep), RunSpec(model=deep), tmp_path / "bad", None, "0x" + "ab" * 32, "hf")
    assert not (tmp_path / "bad").exists()
