#!/usr/bin/env bash
# Build .gpucarry/ here (ignored by git through .git/info/exclude): what a GPU machine lacks for the devnet
# step of benchmarks/gpu/run_issue39.sh (and run_issue29.sh). That machine has Python 3.12 with torch, numpy,
# matplotlib, rich, tqdm, httpx, aiohttp, msgpack, grpcio, protobuf, pytest and hypothesis, but none of our
# chain, web or DHT libraries and no anvil (/work/.library/device/README.md; KINDS.md lists its packages,
# copied to benchmarks/gpu/image-packages.txt).
#   .gpucarry/whl/    cp312 manylinux wheels, no dependencies resolved: benchmarks/gpu/carry.txt names each
#   .gpucarry/anvil.xz  contracts/node_modules' anvil, xz-compressed (44 MB -> about 12 MB)
# Then: the device tool's run with carry [".gpucarry"] and command `bash benchmarks/gpu/run_issue39.sh`.
set -euo pipefail
cd "$(dirname "$0")/../.."
grep -qx '/.gpucarry/' .git/info/exclude 2>/dev/null || echo '/.gpucarry/' >> .git/info/exclude
mkdir -p .gpucarry/whl
# benchmarks/gpu/carry.txt: versions as this repository's .venv has them, less what the GPU image already holds
# (benchmarks/gpu/image-packages.txt); `python -m benchmarks.gpu.carry` checks every requirement is covered
mapfile -t PKGS < <(grep -v '^#' benchmarks/gpu/carry.txt | grep .)
for p in "${PKGS[@]}"; do
  ls .gpucarry/whl | grep -qi "^$(echo "${p%%==*}" | tr '-' '_' )-${p##*==}" && continue
  python3 -m pip download -q --no-deps --only-binary=:all: --python-version 3.12 --implementation cp \
    --platform manylinux_2_28_x86_64 --platform manylinux_2_27_x86_64 --platform manylinux_2_17_x86_64 \
    --platform manylinux2014_x86_64 --platform manylinux1_x86_64 --platform manylinux_2_34_x86_64 \
    -d .gpucarry/whl "$p" || echo "carry: no cp312 wheel for $p" >&2
done
# pure-Python packages published as source only: built into wheels here
for p in prefetch_generator==1.0.3 python-baseconv==1.2.2 varint==1.0.2; do
  ls .gpucarry/whl | grep -qi "^$(echo "${p%%==*}" | tr '-' '_')-" || python3 -m pip wheel -q --no-deps -w .gpucarry/whl "$p"
done
# hivemind publishes no wheel: the one this .venv built (p2pd inside, pure Python otherwise) is rebuilt
if ! ls .gpucarry/whl | grep -qi '^hivemind-'; then
  site=$(.venv/bin/python -c 'import hivemind, os; print(os.path.dirname(os.path.dirname(hivemind.__file__)))')
  (cd "$site" && zip -qr "$OLDPWD/.gpucarry/whl/hivemind-1.1.12-py3-none-any.whl" hivemind hivemind-1.1.12.dist-info -x '*__pycache__*')
fi
[ -f .gpucarry/anvil.xz ] || xz -T2 -6 -c contracts/node_modules/@foundry-rs/anvil-linux-amd64/bin/anvil > .gpucarry/anvil.xz
du -sh .gpucarry
