#!/usr/bin/env bash
# Build .gpucarry/ here (ignored by git through .git/info/exclude): what a GPU machine lacks for
# benchmarks/gpu/run_issue29.sh's devnet step. That machine has Python 3.12 with torch, numpy, matplotlib,
# rich, tqdm, httpx, aiohttp, msgpack, grpcio, protobuf, pytest and hypothesis, but none of our chain,
# web or DHT libraries and no anvil (/work/.library/device/README.md; KINDS.md lists its packages).
#   .gpucarry/whl/    cp312 manylinux wheels, no dependencies resolved: each is named below
#   .gpucarry/anvil.xz  contracts/node_modules' anvil, xz-compressed (44 MB -> about 12 MB)
# Then: the device tool's run with carry [".gpucarry"] and command `bash benchmarks/gpu/run_issue29.sh`.
set -euo pipefail
cd "$(dirname "$0")/../.."
grep -qx '/.gpucarry/' .git/info/exclude 2>/dev/null || echo '/.gpucarry/' >> .git/info/exclude
mkdir -p .gpucarry/whl
# versions as this repository's .venv has them (pip list), less what the GPU image already holds
PKGS=(
  annotated-types==0.8.0 base58==2.1.1 bitarray==3.12.3 cffi==2.1.1 ckzg==2.1.8 ConfigArgParse==1.9.0
  cryptography==50.0.2 cytoolz==1.2.0 eth_abi==6.0.0 eth-account==0.14.0 eth-hash==0.8.0
  eth-keyfile==0.10.0 eth-keys==0.8.0 eth-rlp==3.0.0 eth-typing==6.0.0 eth-utils==6.0.0 fastapi==0.165.0
  hexbytes==2.0.0 hivemind==1.1.12 morphys==1.0 netaddr==1.3.0 parsimonious==0.10.0
  prefetch_generator==1.0.3 py-cid==0.5.0 py-ecc==8.0.0 py-multibase==2.0.0 py-multicodec==1.0.0
  py-multihash==3.0.0 pycparser==3.12 pycryptodome==3.24.1 pydantic==2.14.4 pydantic_core==2.50.5
  python-baseconv==1.2.2 pyunormalize==18.0.0 rlp==5.0.0 starlette==1.10.0 swagger_ui_bundle==1.1.0
  tomli_w==1.2.0 typing-inspection==0.4.5 uvicorn==0.54.0 varint==1.0.2 web3==8.0.0 websockets==17.4
  mmh3==5.3.1 blake3==1.0.11
)
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
