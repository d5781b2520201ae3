#!/usr/bin/env bash
# Issue 39's GPU checks in one call of the device tool, <= 9 minutes (what ran where: docs/benchmarks-log.md, "GPU").
#
#   bash benchmarks/gpu/carry.sh                               # here, once: .gpucarry/ (wheels, anvil)
#   bash benchmarks/gpu/run_issue39.sh                         # GPU machine: carry [".gpucarry"], timeout_s 600
#   bash benchmarks/gpu/run_issue39.sh --device cpu --tiny     # here: every step's code path, CPU-sized
#
# Steps (STEPS="..." picks some; each under its own limit, LIMIT_<step>=S overrides one, all inside BUDGET,
# 540 s on a GPU). The devnet runs in the background from the start (it waits on its chain's phases more
# than it computes); the timed steps that compare loops (precision, presets) run when it is done or alone.
#   imports    every carried wheel's top-level module imports (fastapi needs opentelemetry-api, issue 39)
#   devnet     pytest tests/devnet/test_gpu_miner.py::...[cuda]: miner0 on CUDA, the rest on the CPU, q = 1 with
#              a committee of one: a CPU validator replays miner0 every round; "gpu-devnet figures:" (the
#              largest replay differences against the tolerances) -> devnet.json     [--tiny: the [cpu] test]
#   device     tests/training/test_device.py in one process, in file order and then in a shuffled order
#              (DEVICE_ORDER_SEED, default random, printed): its CUDA tests in any order (issue 39)
#   precision  fp32 "highest" vs TF32 vs bf16 autocast at 50m -> precision.json            [--tiny: tiny]
#   loopcost   where the miner's round goes beyond a plain loop at 50m MoE (benchmarks.gpu.loopcost: the
#              intermediate transcript states, SHA-256 digests, host copies into pinned memory, the codec)
#              -> loopcost.json                                                              [--tiny: 1m]
#   sizes      the size series' 38M point, 3 arms, seeds 0 and 1 as two processes at once on the one GPU
#              (tessera bench training --full --only sizes --big-size --size-rounds 0 0 0 0 30); each
#              seed's training.json is rewritten after each arm -> sizes-seed0.json, sizes-seed1.json
#   presets50m, presets125m  tessera bench presets --presets 50m|125m --modes moe,dipaco (peak GPU memory in
#              it) -> presets.json (the rows of both steps)                                 [--tiny: tiny, 1m]
# $OUT (the device tool's; default ./gpu-out) gets at most 8 files, each written as soon as its step ends:
# run.log, steps.jsonl, devnet.json, precision.json, loopcost.json, sizes-seed0.json, sizes-seed1.json,
# presets.json. Work files go to $WORK (default /tmp/issue39).
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
WORK="${WORK:-/tmp/issue39}"
STEPS="${STEPS:-imports devnet device precision loopcost sizes presets50m presets125m}"
mkdir -p "$OUT" "$WORK"
LOG="$OUT/run.log"
PY="${PYTHON:-python3}"
export PYTHONPATH="$PWD${PYTHONPATH:+:$PYTHONPATH}" PYTHONUNBUFFERED=1
export CUBLAS_WORKSPACE_CONFIG="${CUBLAS_WORKSPACE_CONFIG:-:4096:8}"  # the entry points set it too
START=$SECONDS
BUDGET="${BUDGET:-$([ "$TINY" = 1 ] && echo 3600 || echo 540)}"
SEED_ORDER="${DEVICE_ORDER_SEED:-$RANDOM}"

# the libraries and the anvil the GPU image lacks (benchmarks/gpu/carry.sh), where they are missing
if [ -d .gpucarry/whl ] && ! "$PY" -c 'import web3, hivemind, fastapi, eth_account, py_ecc' 2>/dev/null; then
  "$PY" -m pip install -q --no-index --no-deps --no-compile --no-cache-dir --upgrade --target /tmp/site \
    .gpucarry/whl/*.whl >> "$LOG" 2>&1 && export PYTHONPATH="$PYTHONPATH:/tmp/site"
fi
if [ -f .gpucarry/anvil.xz ] && [ ! -x contracts/node_modules/@foundry-rs/anvil-linux-amd64/bin/anvil ]; then
  xz -dc .gpucarry/anvil.xz > /tmp/anvil && chmod +x /tmp/anvil && export TESSERA_ANVIL=/tmp/anvil
fi
{ echo "issue 39 run: device $DEVICE tiny $TINY steps: $STEPS budget ${BUDGET}s"; date -u; git rev-parse HEAD 2>/dev/null
  "$PY" -c 'import torch; print("torch", torch.__version__, "cuda", torch.cuda.is_available(),
torch.cuda.get_device_name(0) if torch.cuda.is_available() else "")'; nproc; } >> "$LOG" 2>&1

wanted() { case " $STEPS " in *" $1 "*) return 0 ;; *) return 1 ;; esac; }
limit_of() {  # limit_of NAME DEFAULT: LIMIT_<NAME> or DEFAULT, never past the budget
  local var="LIMIT_$1" limit left
  limit="${!var:-$2}"; left=$((BUDGET - (SECONDS - START)))
  [ "$limit" -gt "$left" ] && limit=$left
  echo "$limit"
}
record() {  # record NAME RC SECONDS [NOTE]: one line of steps.jsonl
  echo "{\"step\": \"$1\", \"rc\": $2, \"seconds\": $3${4:+, \"note\": \"$4\"}}" >> "$OUT/steps.jsonl"
}
step() {  # step NAME DEFAULT_LIMIT COMMAND...: run it under its limit, its output into run.log, record rc
  local name="$1" limit; limit=$(limit_of "$1" "$2"); shift 2
  wanted "$name" || return 0
  if [ "$limit" -lt 10 ]; then record "$name" null 0 "budget spent"; return 0; fi
  echo "=== $name (limit ${limit}s) $(date -u +%T): $*" | tee -a "$LOG"
  local t0=$SECONDS
  timeout -k 5 "$limit" "$@" > "$WORK/$name.log" 2>&1
  local rc=$?
  cat "$WORK/$name.log" >> "$LOG"
  echo "=== $name rc=$rc in $((SECONDS - t0))s" | tee -a "$LOG"
  record "$name" "$rc" $((SECONDS - t0))
}
keep() {  # keep SRC NAME: copy a step's result into $OUT (partial results survive a later timeout)
  [ -f "$1" ] && cp "$1" "$OUT/$2"
}
keep_rows() {  # keep_rows SRC NAME: add the rows of a presets.json to $OUT/NAME (one file for both steps)
  [ -f "$1" ] && "$PY" -c 'import json, os, sys
src, dst = sys.argv[1], sys.argv[2]
new = json.load(open(src))
old = json.load(open(dst)) if os.path.exists(dst) else None
if old is not None:
    new["rows"] = old["rows"] + new["rows"]
json.dump(new, open(dst, "w"), indent=1, sort_keys=True)' "$1" "$OUT/$2"
}

PYTEST=("$PY" -m pytest -q -p no:cacheprovider -o addopts="-ra --strict-markers")
DEVNET_TEST="tests/devnet/test_gpu_miner.py::test_miner0_is_audited_replayed_on_the_cpu_and_paid"
if [ "$TINY" = 1 ]; then
  PRECISION=(--preset tiny --steps 2 --interval 1 --rounds 1)
  LOOPCOST=(--preset 1m --steps 6 --interval 2 --repeats 1 --threads 1)
  SIZES=(--only sizes --size-rounds 1 0 --windows 4)
  PRESETS=(--steps 2 --repeats 1 --min-seconds 0) P50=tiny P125=1m
  DEVNET_ID="$DEVNET_TEST[cpu]"
else
  PRECISION=(--preset 50m)
  LOOPCOST=(--preset 50m --steps 20 --interval 10 --repeats 3)
  SIZES=(--full --only sizes --big-size --size-rounds 0 0 0 0 30 --threads 4)
  PRESETS=(--steps 10 --repeats 2 --min-seconds 2) P50=50m P125=125m
  DEVNET_ID="$DEVNET_TEST[cuda]"
fi

# imports: every carried package's top-level module, on the machine itself
step imports 30 "$PY" -c 'import importlib, sys
mods = ["web3", "hivemind", "fastapi", "uvicorn", "starlette", "pydantic", "eth_account", "eth_abi", "py_ecc",
        "cryptography", "opentelemetry.trace", "swagger_ui_bundle", "tomli_w", "blake3", "mmh3", "multihash"]
bad = []
for m in mods:
    try:
        importlib.import_module(m)
    except Exception as exc:
        bad.append(f"{m}: {type(exc).__name__}: {exc}")
print("imported", len(mods) - len(bad), "of", len(mods)); print("\n".join(bad)); sys.exit(1 if bad else 0)'

# devnet, in the background: it finishes while the next steps run
DEVNET_PID=""
if wanted devnet; then
  DEVNET_LIMIT=$(limit_of devnet 330)
  echo "=== devnet (background, limit ${DEVNET_LIMIT}s) $(date -u +%T): $DEVNET_ID" | tee -a "$LOG"
  ( t0=$SECONDS
    timeout -k 5 "$DEVNET_LIMIT" "${PYTEST[@]}" -s --basetemp "$WORK/devnet-tmp" "$DEVNET_ID" > "$WORK/devnet.log" 2>&1
    rc=$?
    grep -o 'gpu-devnet figures: .*' "$WORK/devnet.log" | tail -1 | sed 's/^gpu-devnet figures: //' > "$WORK/devnet.json"
    [ -s "$WORK/devnet.json" ] && cp "$WORK/devnet.json" "$OUT/devnet.json"
    record devnet "$rc" $((SECONDS - t0)) "background"
  ) &
  DEVNET_PID=$!
fi
wait_devnet() {  # the devnet's output into run.log once it is done
  [ -n "$DEVNET_PID" ] || return 0
  wait "$DEVNET_PID"; DEVNET_PID=""
  { echo "=== devnet output"; cat "$WORK/devnet.log"; } >> "$LOG"
  tail -2 "$WORK/devnet.log"
}

# device: file order, then a shuffled order, one process each
if wanted device; then
  mapfile -t IDS < <("${PYTEST[@]}" --collect-only tests/training/test_device.py 2>/dev/null | grep '::')
  printf '%s\n' "${IDS[@]}" | "$PY" -c 'import random, sys
ids = sys.stdin.read().split(); random.Random(int(sys.argv[1])).shuffle(ids); print("\n".join(ids))' \
    "$SEED_ORDER" > "$WORK/device-order.txt"
  echo "device: shuffled order (DEVICE_ORDER_SEED=$SEED_ORDER): $(tr '\n' ' ' < "$WORK/device-order.txt")" >> "$LOG"
  step device 90 bash -c 'order="$1"; shift; "$@" tests/training/test_device.py &&
    mapfile -t ids < "$order" && "$@" "${ids[@]}"' _ "$WORK/device-order.txt" "${PYTEST[@]}"
fi

step precision 60 "$PY" -m benchmarks.gpu.precision --device "$DEVICE" "${PRECISION[@]}" --out "$WORK/precision"
keep "$WORK/precision/precision.json" precision.json
step loopcost 45 "$PY" -m benchmarks.gpu.loopcost --device "$DEVICE" "${LOOPCOST[@]}" --out "$WORK/loopcost"
keep "$WORK/loopcost/loopcost.json" loopcost.json

# sizes: seeds 0 and 1 at once, one process each (a 38M model leaves the GPU mostly idle in one)
if wanted sizes; then
  SIZES_LIMIT=$(limit_of sizes 190)
  echo "=== sizes (seeds 0 and 1 at once, limit ${SIZES_LIMIT}s) $(date -u +%T)" | tee -a "$LOG"
  t0=$SECONDS
  for seed in 0 1; do
    timeout -k 5 "$SIZES_LIMIT" "$PY" -m tessera bench training "${SIZES[@]}" --device "$DEVICE" --seeds "$seed" \
      --out "$WORK/sizes$seed" --cache "$WORK/cache$seed" > "$WORK/sizes$seed.log" 2>&1 &
    eval "SIZES_PID$seed=$!"
  done
  for seed in 0 1; do
    pid_var="SIZES_PID$seed"; wait "${!pid_var}"; rc=$?
    keep "$WORK/sizes$seed/training.json" "sizes-seed$seed.json"
    { echo "=== sizes seed $seed rc=$rc"; cat "$WORK/sizes$seed.log"; } >> "$LOG"
    record "sizes-seed$seed" "$rc" $((SECONDS - t0)) "seeds 0 and 1 at once"
  done
  echo "=== sizes done in $((SECONDS - t0))s" | tee -a "$LOG"
fi
wait_devnet  # the loop comparisons below run alone

step presets50m 75 "$PY" -m tessera bench presets --device "$DEVICE" --presets "$P50" --modes moe,dipaco \
  "${PRESETS[@]}" --out "$WORK/presets50m"
keep_rows "$WORK/presets50m/presets.json" presets.json
step presets125m 90 "$PY" -m tessera bench presets --device "$DEVICE" --presets "$P125" --modes moe,dipaco \
  "${PRESETS[@]}" --out "$WORK/presets125m"
keep_rows "$WORK/presets125m/presets.json" presets.json

echo "done in $((SECONDS - START))s; steps:" | tee -a "$LOG"
tee -a "$LOG" < "$OUT/steps.jsonl"
