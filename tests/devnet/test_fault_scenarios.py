"""The shape of ``tessera faults``' scenarios (issue 36 item 1): each is a class carrying its behaviour,
its name is written once (where the class declares it) and compared nowhere, and a run works on a copy."""

from __future__ import annotations

import ast
from pathlib import Path

from tessera.devnet.faults import SCENARIOS, Scenario

ROOT = Path(__file__).resolve().parents[2]
SOURCES = [*sorted((ROOT / "tessera/devnet/faults").glob("*.py")), ROOT / "tessera/devnet/proxy.py"]


def test_every_scenario_is_a_subclass_with_its_own_behaviour() -> None:
    for name, sc in SCENARIOS.items():
        assert sc.name == name and type(sc) is not Scenario, name
        own = {k for cls in type(sc).__mro__[:-2] for k in vars(cls) if not k.startswith("_")}
        if type(sc).injects:
            assert "inject" in own, f"{name} injects but declares no inject"
        else:
            assert "checks" in own, f"{name} injects nothing and has no checks of its own"


def test_no_scenario_name_is_compared_or_repeated() -> None:
    counts = dict.fromkeys(SCENARIOS, 0)
    for path in SOURCES:
        for node in ast.walk(ast.parse(path.read_text(encoding="utf-8"))):
            if isinstance(node, ast.Constant) and node.value in counts:
                counts[str(node.value)] += 1
    assert counts == dict.fromkeys(SCENARIOS, 1), counts  # each written once: its declaration


def test_a_run_gets_a_fresh_copy() -> None:
    sc = SCENARIOS["poison-dht"]
    run = sc.fresh()
    run.proxies["x"] = object()  # type: ignore[assignment]
    assert run is not sc and not sc.proxies and run.name == sc.name
