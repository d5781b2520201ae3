"""Tessera's command line and the devnet composition root.

Subpackages and modules:

- ``attack/``: the attack suite: adversarial miners and validators, scenarios, the profit model
- ``commands/``: one module per ``tessera`` subcommand
- ``devnet/``: the devnet: the whole network on one machine, and the fault suite (``devnet/faults``)
- ``__main__``: ``python -m tessera``, with the CUDA environment set first
- ``cli``: ``main``, ``build_parser``: one entry point, one subcommand per ``tessera.commands`` module
- ``errors``: ``TesseraError``, the package's exception root
- ``hfexport``: the certified model as a Hugging Face ``transformers`` directory
- ``hfmoe``: Tessera's MoE transformer for ``transformers`` (``trust_remote_code``)
- ``hftokenizer``: the tokenizer files of a Hugging Face export
- ``modelout``: the trained model back out: a certified checkpoint, checked, exported, evaluated
- ``nodes``: the composition root of one node process (``tessera miner run`` / ``validator run``)
- ``simwire``: the simulation transport that sends each update through the real wire format
"""

__version__ = "0.1.0"
