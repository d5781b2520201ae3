"""How ``make test-python`` splits the suite between its two xdist workers (tests/conftest.py)."""

from __future__ import annotations

from tests.conftest import E2E_GROUP, work_unit


def test_end_to_end_modules_share_one_unit() -> None:
    assert work_unit("tests/e2e/test_guides.py::test_guides_stand_up_a_network_and_pay") == E2E_GROUP
    assert work_unit("tests/attack/test_attack_e2e.py::test_quick_attack_suite_on_anvil") == E2E_GROUP


def test_a_module_keeps_its_tests_together_in_one_unit() -> None:
    """The in-process network's later tests go on from the network its first test left (module fixture)."""
    first = work_unit("tests/network/test_inprocess_network.py::test_two_rounds_with_junk_and_bad_records")
    later = work_unit(
        "tests/network/test_inprocess_network.py::test_miner_restarted_after_serving_announces_its_new_url"
    )
    assert first == later == "tests/network/test_inprocess_network.py"
    assert work_unit("tests/fuzz/test_measure.py::test_x[record-400]") != first
