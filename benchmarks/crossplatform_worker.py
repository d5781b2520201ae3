"""The workers of ``tessera bench crossplatform``, one process per setting: an honest miner training two
rounds of every case with the miner's own code, or a validator replaying the other settings' round-2
updates with the validator's own pipeline (``validator.pipeline``). The parent starts them as
``python -m benchmarks.crossplatform --worker JOB`` and reads what the kernel probe printed with
:func:`kernels`."""

from __future__ import annotations

import hashlib
import json
import math
import sys
import time
from pathlib import Path
from typing import Any

from benchmarks.crossplatform_settings import CHAIN_ID, CONTRACT, METRICS, MINERS, VALIDATOR, case_seed
from validator.errors import SourceMismatchError
from validator.sampling import segments_to_check
from validator.stages import Stage


def kernel_probe(spec: Any, ds: Any, theta: Any) -> None:
    """One forward/backward with MKL's and oneDNN's verbose output on: the parent reads from the worker's
    stdout which kernels ran (oneDNN's ISA, MKL's calls)."""
    import torch

    from training.assignment import assign
    from training.data import miner_batches
    from training.model import build_model, lm_loss, load_params

    model = build_model(spec.model)
    load_params(model, theta)
    a = assign(b"\0" * 32, MINERS, spec.model)[MINERS[0]]
    batch = miner_batches(ds, b"\0" * 32, a, 1, 2, spec.model.seq_len)[0]
    sys.stdout.flush()
    with torch.backends.mkl.verbose(torch.backends.mkl.VERBOSE_ON):
        with torch.backends.mkldnn.verbose(torch.backends.mkldnn.VERBOSE_ON):
            lm_loss(model, batch, a.path)[1].backward()
    sys.stdout.flush()


def kernels(stdout: str) -> dict[str, Any]:
    """What MKL's and oneDNN's verbose output says ran in the probe step."""
    onednn_isa = sorted(
        {ln.split("isa:", 1)[1].strip() for ln in stdout.splitlines() if ",info,cpu,isa:" in ln}
    )
    impls = sorted(  # primitive:implementation, e.g. eltwise:jit:avx2 (GELU)
        {
            ":".join(ln.split(",")[5:7])
            for ln in stdout.splitlines()
            if ln.startswith("onednn_verbose") and ",primitive,exec," in ln and len(ln.split(",")) > 6
        }
    )
    mkl_calls = sorted(
        {
            ln.split()[1].split("(")[0]
            for ln in stdout.splitlines()
            if ln.startswith("MKL_VERBOSE") and len(ln.split()) > 1 and "(" in ln.split()[1]
        }
    )
    mkl = [
        ln.removeprefix("MKL_VERBOSE ").strip() for ln in stdout.splitlines() if "MKL_VERBOSE oneMKL" in ln
    ]
    return {"onednn_isa": onednn_isa, "onednn_impls": impls, "mkl": mkl[:1], "mkl_calls": mkl_calls}


# -- the miner ------------------------------------------------------------------------------------------


def train(job: dict[str, Any]) -> dict[str, Any]:
    """A train job: every case's two rounds under this process's setting, their files written under
    ``job["dir"]/CASE``; per case what a validator needs to replay it."""
    import torch

    from protocol.runspec import RunSpec
    from protocol.wire.tensorblob import decode_tensors
    from training.data import prepare
    from training.digest import state_digest

    out: dict[str, Any] = {"cases": {}, "genesis_here": {}}
    for case, mj in job["cases"].items():
        spec = RunSpec.from_json(mj["spec"])
        ds = prepare(spec.load_corpus(), spec.model)
        theta1 = decode_tensors(Path(mj["genesis"]).read_bytes())
        if not out["cases"]:
            kernel_probe(spec, ds, theta1)
        out["genesis_here"][spec.model.mode] = state_digest(spec.genesis_params()).hex()
        out["cases"][case] = _train_case(job, case, spec, ds, theta1)
    out["capability"] = torch.backends.cpu.get_cpu_capability()
    return out


def _train_case(job: dict[str, Any], case: str, spec: Any, ds: Any, theta1: Any) -> dict[str, Any]:
    """Train one case's two rounds and publish them to ``job["dir"]/case``."""
    d = Path(job["dir"]) / case
    (d / "blobs").mkdir(parents=True, exist_ok=True)
    t0 = time.perf_counter()
    b1, b2, theta2 = _two_rounds(spec, ds, theta1, job["device"])
    seconds = time.perf_counter() - t0
    seed = case_seed(case, job["setting"])
    segs = segments_to_check(seed, MINERS[0], len(b2.transcript_steps) - 1, job["segments"], slot=0)
    _publish(d, b1, b2, theta2, segs)
    return {
        "seed": seed.hex(),
        "assign_seed": hashlib.sha256(b"assign-2").digest().hex(),
        "source": [1, b1.digest.hex()],
        "segments": segs,
        "transcript_digests": [x.hex() for x in b2.transcript_digests],
        "update_digest": b2.digest.hex(),
        "train_seconds": round(seconds, 2),
        "loss_first": b2.losses[0],
        "loss_last": b2.losses[-1],
    }


def _two_rounds(spec: Any, ds: Any, theta1: Any, device: str) -> tuple[Any, Any, Any]:
    """The miner's rounds 1 and 2 (``miner.work.build_update``), the second from theta_1 minus the first's
    pseudo-gradient and carrying its error-feedback residual; the two builds and theta_2."""
    from miner.behaviour import Behaviour
    from miner.work import RoundInputs, build_update
    from protocol.wire.update import decode_update
    from protocol.wire.updatecost import UpdateCaps
    from training.digest import state_digest

    b1 = build_update(
        spec,
        ds,
        RoundInputs(
            round=1,
            miner=MINERS[0],
            checkpoint=theta1,
            checkpoint_digest=state_digest(theta1),
            assign_seed=hashlib.sha256(b"assign-1").digest(),
            registry=MINERS,
        ),
        Behaviour(),
        device=device,
    )
    delta = decode_update(b1.update, UpdateCaps()).pseudo_gradient()
    theta2 = {k: (v - delta[k]) if k in delta else v for k, v in theta1.items()}
    b2 = build_update(
        spec,
        ds,
        RoundInputs(
            round=2,
            miner=MINERS[0],
            checkpoint=theta2,
            checkpoint_digest=state_digest(theta2),
            assign_seed=hashlib.sha256(b"assign-2").digest(),
            registry=MINERS,
            ef_state=b1.ef_state,
            ef_source=(1, b1.digest),
        ),
        Behaviour(),
        device=device,
    )
    return b1, b2, theta2


def _publish(d: Path, b1: Any, b2: Any, theta2: Any, segs: list[int]) -> None:
    """Write what a validator fetches: round 2's transcript states around the sampled segments (and its
    first and last), both rounds' residuals and transcripts, theta_2 and both updates."""
    from protocol.wire.tensorblob import encode_tensors
    from protocol.wire.updateheader import transcript_root

    blobs: dict[str, Any] = {}
    for b in (b1, b2):  # the residuals and the transcripts
        blobs["0x" + b.ef_after.hex()] = b.residual()
        blobs["0x" + transcript_root(b.transcript_parts)] = b.transcript()
    keep = {0, len(b2.transcript_steps) - 1} | set(segs) | {i + 1 for i in segs}
    for i in sorted(keep):  # both parts of each state a check may read
        blobs.update(b2.state_parts(i))
    for name, tensors in blobs.items():
        (d / "blobs" / f"{name}.safetensors").write_bytes(encode_tensors(tensors))
    (d / "checkpoint.safetensors").write_bytes(encode_tensors(theta2))
    (d / "update-1.bin").write_bytes(b1.update)
    (d / "update-2.bin").write_bytes(b2.update)


# -- the validator --------------------------------------------------------------------------------------


def _round_context(spec: Any, ds: Any, meta: dict[str, Any], theta: Any) -> Any:
    """The validator's view of round 2 of a trained case."""
    from training.digest import state_digest
    from validator.context import RoundContext

    return RoundContext(
        spec=spec,
        dataset=ds,
        round=2,
        chain_id=CHAIN_ID,
        contract=CONTRACT,
        validator=VALIDATOR,
        checkpoint=theta,
        checkpoint_digest=state_digest(theta),
        assign_seed=bytes.fromhex(meta["assign_seed"]),
        seed=bytes.fromhex(meta["seed"]),
        registry=MINERS,
        validators=[VALIDATOR],
    )


def verify(spec: Any, ds: Any, meta: dict[str, Any], d: Path, segments: int, device: str) -> dict[str, Any]:
    """Verify the round-2 update in ``d`` as a validator does; the verdict and the differences measured."""
    from protocol.wire.commitments import update_commitment
    from protocol.wire.tensorblob import decode_tensors
    from protocol.wire.update import update_digest
    from validator.context import Incoming
    from validator.pipeline import VerificationPipeline
    from validator.policy import VerifyPolicy

    theta = decode_tensors((d / "checkpoint.safetensors").read_bytes())
    data = (d / "update-2.bin").read_bytes()
    source = (d / "update-1.bin").read_bytes()
    src_round, src_digest = meta["source"]

    def fetch_state(digest: str) -> dict[str, Any]:
        return decode_tensors((d / "blobs" / f"{digest}.safetensors").read_bytes())

    def fetch_source(s: int, digest: str) -> bytes:
        if s != src_round or digest != src_digest:
            raise SourceMismatchError(f"no update {digest[:8]} in round {s}")
        return source

    ctx = _round_context(spec, ds, meta, theta)
    commitment = update_commitment(CHAIN_ID, CONTRACT, 2, MINERS[0], update_digest(data))
    t0 = time.perf_counter()

    def check(policy: Any) -> Any:
        incoming = Incoming(MINERS[0], commitment, lambda: data, fetch_state, fetch_source=fetch_source)
        return VerificationPipeline(policy).verify(incoming, ctx)

    v = check(VerifyPolicy(segments_per_miner=segments, device=device))
    row: dict[str, Any] = {"stage": v.stage, "reason": v.reason, "accepted": v.accepted}
    if v.stage == Stage.RECOMPUTE:  # refused: measure every difference again with the tolerances off
        inf = math.inf
        v = check(
            VerifyPolicy(
                segments_per_miner=segments,
                replay_rel_tol=inf,
                param_rel_tol=inf,
                ef_rel_tol=inf,
                device=device,
            )
        )
        row["measured_stage"] = v.stage
    row["segments"] = v.evidence.get("segments", [])
    row["seconds"] = round(time.perf_counter() - t0, 2)
    row.update({k: v.metrics.get(k) for k in METRICS})
    return row


def replay(job: dict[str, Any]) -> dict[str, Any]:
    """A replay job: verify every other setting's round-2 update of every case; rows by setting, case."""
    from protocol.runspec import RunSpec
    from training.data import prepare

    results: dict[str, Any] = {}
    for case, mj in job["cases"].items():
        spec = RunSpec.from_json(mj["spec"])
        ds = prepare(spec.load_corpus(), spec.model)
        for trained, meta in mj["trained"].items():
            row = verify(spec, ds, meta, Path(meta["dir"]) / case, job["segments"], job["device"])
            results.setdefault(trained, {})[case] = row
    return results


def worker(job_file: str) -> int:
    """A worker process: apply the setting's threads and device, run the job, write its result."""
    import torch

    from training.device import use_deterministic

    job = json.loads(Path(job_file).read_text())
    torch.set_num_threads(job["threads"])
    use_deterministic(job["device"])
    t0 = time.perf_counter()
    result = train(job) if job["kind"] == "train" else replay(job)
    result["capability"] = torch.backends.cpu.get_cpu_capability()
    result["seconds"] = round(time.perf_counter() - t0, 2)
    Path(job["result"]).write_text(json.dumps(result))
    return 0
