"""Tessera's attack suite: adversarial miners and validators, scenarios, the detection/profit model.

Modules:

- :mod:`tessera.attack.economics` -- pure math: catch probabilities (built on ``validator.sampling``),
  the probability that a cheater's consensus reward is zeroed, and the expected profit of each cheating
  strategy given stake, slash fraction, reward and compute cost;
- :mod:`tessera.attack.miners` -- adversarial miner modes as ``miner.behaviour.Behaviour`` subclasses;
- :mod:`tessera.attack.validators` -- adversarial validator scoring modes;
- :mod:`tessera.attack.casting` -- the :class:`~tessera.attack.casting.Scenario` record and the casts
  scenarios are built from (honest nodes, adversarial miners, validators by class);
- :mod:`tessera.attack.scenarios` and :mod:`tessera.attack.runner` -- scenarios run round by round beside
  honest nodes, and the report.
"""
