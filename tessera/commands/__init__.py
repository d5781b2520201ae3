"""One module per ``tessera`` subcommand; each exposes ``register(subparsers)``.

Handlers import their heavy dependencies lazily so that ``tessera --help`` stays fast.

Modules:

- ``account``: ``tessera account``: status, claim, unbond, withdraw
- ``attack``: ``tessera attack``: the attack suite and its report
- ``attest``: ``tessera attest``: verify TEE evidence; make development evidence
- ``bench``: ``tessera bench``: run a benchmark, print its figures, write JSON
- ``contracts``: ``tessera contracts build|deploy``: compile, and deploy a run (q from the run file)
- ``devnet``: ``tessera devnet``: anvil, contracts, validators and miners here, R rounds, a report
- ``faults``: ``tessera faults``: the fault suite
- ``miner``: ``tessera miner run``
- ``model``: ``tessera model``: export, eval, sample
- ``runspec``: ``tessera runspec``: write (``init``, from ``protocol.recipe``) and inspect the run file
- ``simulate``: ``tessera simulate``: R rounds of N miners in one process
- ``validator``: ``tessera validator run``
"""
