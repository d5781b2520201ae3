"""Tessera's training core: the math miners and validators must compute identically.

Pure functions and torch modules only: no files, sockets, clocks or chain access here (``corpus`` reads the
bundled corpus; ``cudaenv`` sets environment variables).

Modules:

- ``assignment``: who trains what: (round seed, miner registry, model config) -> assignments
- ``bitpack``: fixed-width integers and Elias-Fano index lists, little-endian in bit order
- ``codecbounds``: each codec's error bound and the measured error in the same norm
- ``codeccost``: the fitted per-unit times of the codec's decoder (the decode cost)
- ``codeclayout``: how a codec cuts a tensor into chunks and tiles (``Layout``, ``ChunkGroup``)
- ``codecregistry``: ``Codec``: one declaration per codec, by wire name (``CODECS``, ``codec_named``)
- ``codecs``: encode and decode pseudo-gradients; ``resolve`` a configuration once
- ``codectransforms``: ``Transform``: one declaration per transform, by wire name (``TRANSFORMS``)
- ``config``: ``ModelConfig``, ``InnerConfig``, ``OuterConfig``, ``CodecConfig`` and their recipes
- ``corpus``: the bundled corpus and parsers for users' own text
- ``cudaenv``: the CUDA environment set before CUDA initialises, without importing torch
- ``data``: byte-level tokens, the held-out split, the DiPaCo router, each miner's batches
- ``device``: where the core computes (``cpu``, ``cuda:N``) and torch's deterministic settings
- ``digest``: ``state_digest``: the one digest of a tensor dict
- ``diloco``: per-module pseudo-gradients, their weighted merge, the outer Nesterov step
- ``errors``: ``TrainingError``, the package's exception root
- ``exact``: kernel-independent arithmetic: the same bits on every machine (IEEE-754 alone)
- ``feedback``: ``ErrorFeedback``: the miner's error-feedback memory
- ``indexcodings``: ``IndexCoding``: one declaration per index coding, by wire name (``INDEX_CODINGS``)
- ``inner``: the inner loop (H AdamW steps) and the transcript validators spot-check
- ``merge``: the robust merge: accepted pseudo-gradients -> per-module average -> theta_{r+1}
- ``model``: ``TesseraModel``: the modular byte-level transformer and its module ids
- ``modellayout``: the parameter layout, declared once: each module kind's (suffix, shape)
- ``presets``: ``Preset``, ``PRESETS``: model sizes and what one costs a miner and a validator
- ``simulation``: one-process rounds of N miners and the data-parallel baseline (simulate, bench)
- ``snapshots``: copies of the inner loop's state and their digests, off the step's thread
- ``tokenizer``: tokenizers: byte-level (the default) and byte-level BPE trained on the corpus
"""
