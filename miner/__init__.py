"""The miner node: fetch the checkpoint, train the assignment, package, commit, serve.

The node is composed of services (``node.compose``), each given the same ``connections.MinerConnections``.

Modules:

- ``behaviour``: miner behaviours: the honest default and the hook adversarial modes plug into
- ``checkpoints``: where theta_r comes from: held on disk, the genesis, rebuilt, or fetched
- ``commit``: ``Committer``: train on theta_r, keep the update and its feedback, commit its digest
- ``config``: ``MinerConfig``: defaults < TOML ``[miner]`` < ``TESSERA_MINER_*`` env < flags; the key
- ``connections``: ``MinerConnections`` (what every service is given) and ``RoundMaterial`` (the round)
- ``errors``: ``MinerError``, the package's exception root, and its typed failures
- ``linkcheck``: the start-up check of the upload link against what an audit needs, before staking
- ``livepage``: the live page at ``GET /``: what the node is doing and its recent rounds
- ``node``: ``MinerNode``: the phase machine (``act``), ``MinerServices``, ``compose``, ``/status``
- ``publish``: ``Publisher``: serve and announce the update, transcript states, feedback and evidence
- ``rebuild``: theta_{r+1} rebuilt from what the miner already has instead of downloaded
- ``reports``: ``OwnReports``: close this miner's own contested unanswered-audit reports
- ``rewards``: ``Rewards``: each settled round's pay into the records, the account, the round's log line
- ``state``: ``MinerState``: durable per-round records (``MinerRoundRecord``): a resume never commits twice
- ``work``: one round's work with no I/O: assignment, batches, inner loop, pseudo-gradient, codec, update
"""
