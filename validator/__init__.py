"""The validator node: intake, verify, recompute, score, settle, merge, serve the API.

The node is composed of services (``node.compose``), each given the same ``connections.Connections``.

Modules:

- ``api``: ``ValidatorApi``: routes beyond the common ones (signatures, updates, verdicts) and ``/status``
- ``audits``: the chain's audit draw put into the round's context; the report of an unanswered audit
- ``blockclock``: ``BlockClock``: seconds per block and when a block is due, from the node's readings
- ``checkpoints``: ``Checkpoints``: theta_r, the merge, signatures, the certificate; the round's log line
- ``config``: ``ValidatorConfig``: defaults < TOML ``[validator]`` < env < flags; the key
- ``connections``: ``Connections`` (what every service is given), ``Theta``, ``RoundCache``
- ``context``: what one verification works with: ``RoundContext``, ``Verdict``, ``Incoming``, ``StageFailure``
- ``devtee``: the development TEE's evidence checker (``--dangerous-dev-tee``, the attack suite)
- ``errors``: ``ValidatorError``, the package's exception root, and its typed failures
- ``intake``: ``Intake``: find, fetch and hold updates and evidence against their commitments
- ``keyuse``: ``KeyUse``: a second validator on this node's key, seen on the chain
- ``node``: ``ValidatorNode``: the phase machine (``act``), ``ValidatorServices``, ``compose``
- ``pipeline``: ``VerificationPipeline``: one update in, its verdict out, stages cheapest first; ``plan``
- ``policy``: ``VerifyPolicy``: the verification thresholds and budgets, defined once
- ``recompute``: the ``recompute`` stage: transcript, anchor, error feedback (F12), segment replays
- ``residuals``: error-feedback residuals fetched, kept by digest for the next round
- ``sampling``: which transcript segments a validator replays, and the catch probability behind it
- ``roundschedule``: ``RoundSchedule``: when and for how long each miner is verified (pure, on a clock)
- ``schedule``: verification scheduled against the score-commit deadline
- ``slashing``: ``Slashing``: propose provable failures, vote on peers' evidence after replaying it
- ``stages``: ``Stage``: the stages of a verification, in the pipeline's order
- ``state``: ``ValidatorState``: durable per-round records (``RoundRecord``), verdicts, checkpoints
- ``usefulness``: the ``usefulness`` stage and held-out evaluation: the score
- ``web``: the live page: one static document that polls ``/status`` and ``/rounds``
- ``witness``: the witness of an unanswered-audit report (the reverse attack)
"""
