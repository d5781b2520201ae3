#!/usr/bin/env bash
# Issue 29's GPU checks in one call of the device tool (what ran where: docs/benchmarks-log.md, "GPU").
#
#   bash benchmarks/gpu/run_issue29.sh                  # on the GPU machine (carry [".gpucarry"])
#   bash benchmarks/gpu/run_issue29.sh --device cpu --tiny   # here: every step's code path, in minutes
#
# Steps, in this order (STEPS="..." picks some; each bounded by its own timeout, the whole by 590 s):
#   device     pytest tests/training/test_device.py (its CUDA tests run where a GPU is)
#   sizes      the size series' 38M point, 3 arms, seed $SEED (default 0; seed 1 in a second run):
#              tessera bench training --full --only sizes --big-size --size-rounds 0 0 0 0 30;
#              training.json is rewritten after each arm (sizes.partial) and each size
#   precision  fp32 "highest" vs TF32 vs bf16 autocast at 50m: tokens/s, CPU-replay differences
#   presets    tessera bench presets --device cuda --presets 50m,125m --modes moe (peak GPU memory in it)
#   devnet     tests/devnet/test_gpu_miner.py: miner0 on CUDA, the rest on the CPU, 3 rounds (needs the
#              chain/web/DHT wheels and anvil that benchmarks/gpu/carry.sh puts in .gpucarry/)
# Everything lands in $OUT (the device tool's; default ./gpu-out): run.log, steps.jsonl, sizes/,
# precision.json, presets/ -- at most 8 files, none deeper than two folders.
set -uo pipefail
DEVICE=cuda
TINY=0
while [ $# -gt 0 ]; do
  case "$1" in
    --device) DEVICE="$2"; shift 2 ;;
    --tiny) TINY=1; shift ;;
    *) echo "unknown argument $1" >&2; exit 2 ;;
  esac
done
cd "$(dirname "$0")/../.."
OUT="${OUT:-$PWD/gpu-out}"
SEED="${SEED:-0}"
STEPS="${STEPS:-device sizes precision presets devnet}"
mkdir -p "$OUT"
LOG="$OUT/run.log"
PY="${PYTHON:-python3}"
export PYTHONPATH="$PWD${PYTHONPATH:+:$PYTHONPATH}" PYTHONUNBUFFERED=1
START=$SECONDS
BUDGET="${BUDGET:-$([ "$TINY" = 1 ] && echo 3600 || echo 590)}"  # a GPU call: 10 min at most

# the libraries and the anvil the GPU image lacks (benchmarks/gpu/carry.sh), where they are missing
if [ -d .gpucarry/whl ] && ! "$PY" -c 'import web3, hivemind, fastapi, eth_account, py_ecc' 2>/dev/null; then
  "$PY" -m pip install -q --no-index --no-deps --no-compile --no-cache-dir --upgrade --target /tmp/site \
    .gpucarry/whl/*.whl >> "$LOG" 2>&1 && export PYTHONPATH="$PYTHONPATH:/tmp/site"
fi
if [ -f .gpucarry/anvil.xz ] && [ ! -x contracts/node_modules/@foundry-rs/anvil-linux-amd64/bin/anvil ]; then
  xz -dc .gpucarry/anvil.xz > /tmp/anvil && chmod +x /tmp/anvil && export TESSERA_ANVIL=/tmp/anvil
fi
{ echo "issue 29 run: device $DEVICE tiny $TINY seed $SEED steps: $STEPS"; date -u; git rev-parse HEAD 2>/dev/null
  "$PY" -c 'import torch; print("torch", torch.__version__, "cuda", torch.cuda.is_available(),
torch.cuda.get_device_name(0) if torch.cuda.is_available() else "")'; nproc; } >> "$LOG" 2>&1

step() {  # step NAME LIMIT_S COMMAND...: run it under a timeout (never past the budget), log, record rc
  local name="$1" limit="$2"; shift 2
  case " $STEPS " in *" $name "*) ;; *) return 0 ;; esac
  local left=$((BUDGET - (SECONDS - START)))
  [ "$limit" -gt "$left" ] && limit=$left
  if [ "$limit" -lt 10 ]; then
    echo "{\"step\": \"$name\", \"rc\": null, \"skipped\": \"budget spent\"}" >> "$OUT/steps.jsonl"; return 0
  fi
  echo "=== $name (limit ${limit}s) $(date -u +%T): $*" | tee -a "$LOG"
  local t0=$SECONDS
  timeout "$limit" "$@" >> "$LOG" 2>&1
  local rc=$?
  echo "=== $name rc=$rc in $((SECONDS - t0))s" | tee -a "$LOG"
  echo "{\"step\": \"$name\", \"rc\": $rc, \"seconds\": $((SECONDS - t0))}" >> "$OUT/steps.jsonl"
}

PYTEST=("$PY" -m pytest -q -p no:cacheprovider -o addopts="-ra --strict-markers")
if [ "$TINY" = 1 ]; then
  step device 600 "${PYTEST[@]}" tests/training/test_device.py
  step sizes 900 "$PY" -m tessera bench training --only sizes --device "$DEVICE" --seeds "$SEED" \
    --size-rounds 1 0 --windows 4 --out "$OUT/sizes" --cache /tmp/issue29-cache-tiny
  step precision 900 "$PY" -m benchmarks.gpu.precision --device "$DEVICE" --preset tiny --steps 4 \
    --interval 2 --rounds 1 --out "$OUT"
  step presets 900 "$PY" -m tessera bench presets --device "$DEVICE" --presets tiny --modes moe --steps 4 \
    --repeats 1 --min-seconds 0 --out "$OUT/presets"
  step devnet 600 "${PYTEST[@]}" tests/devnet/test_gpu_miner.py
else
  step device 90 "${PYTEST[@]}" tests/training/test_device.py
  step sizes 360 "$PY" -m tessera bench training --full --only sizes --big-size --device "$DEVICE" \
    --seeds "$SEED" --size-rounds 0 0 0 0 30 --threads 8 --out "$OUT/sizes" --cache /tmp/issue29-cache
  step precision 60 "$PY" -m benchmarks.gpu.precision --device "$DEVICE" --preset 50m --out "$OUT"
  step presets 120 "$PY" -m tessera bench presets --device "$DEVICE" --presets 50m,125m --modes moe \
    --steps 20 --repeats 3 --min-seconds 3 --out "$OUT/presets"
  step devnet 300 "${PYTEST[@]}" -s tests/devnet/test_gpu_miner.py -k cuda
fi
rm -f "$OUT/sizes/"*.tmp 2>/dev/null
echo "done in $((SECONDS - START))s; steps:" | tee -a "$LOG"
cat "$OUT/steps.jsonl" | tee -a "$LOG"
