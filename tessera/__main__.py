"""``python -m tessera``: the command line, with the CUDA environment set before anything can touch CUDA."""

import sys

from training.cudaenv import prepare_cuda_env

prepare_cuda_env()  # before tessera.cli imports any command module (training.cudaenv explains why)

from tessera.cli import main  # noqa: E402 - after the CUDA environment is set

sys.exit(main())
