"""Tessera's attack suite: adversarial miners and validators, scenarios, the detection/profit model.

Modules:

- ``auditchecks``: the audit checks of a finished scenario, read from the chain's events and views
- ``auditscenarios``: the audit scenarios: a fake proven by one of three, the reverse attack, the ways around
- ``board``: discovery over a shared in-memory board of signed records
- ``campaign``: every way around an audit over many rounds at the default stake, realized and expected
- ``campaignreport``: the campaign's report: its Markdown table and its plot (PNG)
- ``casting``: ``Scenario``: who takes part, and the casts scenarios are built from
- ``chainnet``: a scenario's chain: a fresh anvil with the contracts, as the harness's ledger
- ``detection``: measured detection of lazy miners with the real verification code
- ``dodgers``: miners that dodge an audit: withhold, hang or drip when audited; the last-delta riders
- ``economics``: the detection and profit model of cheating, as pure math
- ``errors``: errors of the attack suite (under ``TesseraError``)
- ``harness``: a whole network in one process, driven in lockstep
- ``miners``: adversarial miner modes, as ``miner.behaviour.Behaviour`` subclasses
- ``node``: ``python -m tessera.attack.node``: a node process with the suite's behaviours
- ``partial``: partial fakers over many rounds: realized profit beside the model's
- ``report``: the suite's report: the table, Markdown for docs/security.md, the profit model
- ``results``: what each participant of a finished scenario got, and the scenario's checks
- ``runner``: run scenarios and the suite, each beside its all-honest reference
- ``scenarios``: ``registry``: the scenarios, who cheats, in which rounds
- ``validators``: adversarial validator modes, as ``ValidatorNode`` subclasses
"""
