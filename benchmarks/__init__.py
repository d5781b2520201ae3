"""Benchmarks behind ``tessera bench``: each prints figures and writes a JSON record (and PNGs).

The current figures and their records: docs/benchmarks.md; the dated runs: docs/benchmarks-log.md.

Subpackages and modules:

- ``attack_outside``: what each miner of a finished devnet earned, lost and was audited for, read with cast
- ``gpu/``: the GPU runs: prepared scripts and what they measure
- ``attestation``: ``tessera bench attestation``: parse and verify time per quote and format
- ``build_corpus``: build the bundled training corpus from text that ships with Debian and CPython
- ``chain``: ``tessera bench chain``: gas of the settlement contracts on anvil
- ``codec_arms``: codec arms that are not wire codecs, for the quality simulation
- ``crossplatform``: ``tessera bench crossplatform``: honest replay differences across CPUs and CUDA
- ``crossplatform_report``: the figures and table of ``bench crossplatform``
- ``crossplatform_settings``: the settings and cases of ``bench crossplatform``
- ``crossplatform_worker``: the worker processes of ``bench crossplatform``: a miner or a validator
- ``dct_merge``: the merge averaged per DCT coefficient over its senders (a screening)
- ``detection``: Monte Carlo of catching a miner that fakes 10% of its steps
- ``dht_ops``: what one DHT store and one lookup move
- ``ef_norms``: why F12 needed the error-feedback chain: update norms against the transcript
- ``peer_codec``: the recipe's codec against Templar's SparseLoCo: speed on one CPU thread
- ``peer_codec_templar``: Templar's compressor, read from the user's own copy, for ``peer_codec``
- ``presets``: ``tessera bench presets``: a miner's inner loop per preset against plain PyTorch
- ``quality_pareto``: the quality table: Tessera's codec against SparseLoCo at equal wire bits
- ``sparseloco``: SparseLoCo as Templar runs it, reimplemented for the quality simulation
- ``tiles``: the ``shaped`` transform's tiles, as the codec arms cut them
- ``traffic_long_rounds``: fixed traffic per node and round with slow blocks and long rounds
- ``traffic_outside``: the traffic ledger against a byte count from outside the processes
- ``traffic_terms``: the traffic figures of a devnet run, from its report
- ``traffic_watch``: every TCP connection of a network namespace, watched from outside
- ``training``: ``tessera bench training``: compressed DiLoCo against DiLoCo and data-parallel
- ``training_grids``: the grids of ``bench training``: the trade-off study and the recipe screen
- ``training_runs``: the runs of ``bench training``: the recipe, its bars, a cached run
- ``training_sizes``: the size series of ``bench training --only sizes``
- ``training_speed``: the speed figures of ``bench training``: codec and inner-loop overhead
- ``verify_cost``: validator compute against training compute, per preset
"""
