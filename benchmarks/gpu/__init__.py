"""The GPU runs: prepared scripts (``run_issue29.sh``, ``run_issue39.sh``) and the
measurements they call.

Modules:

- ``carry``: whether the wheels carried to the GPU machine complete its image
- ``loopcost``: where a miner's round spends its time beyond a plain PyTorch loop, on any device
- ``precision``: what the deterministic settings cost on a GPU, and cheaper ones' effect on replay
"""
