"""Suite-wide test settings: how the quick suite shares two CPUs under pytest-xdist.

With ``pytest -n 2 --dist loadgroup`` every end-to-end module (:func:`is_end_to_end`: a real anvil, node
processes, wall-clock blocks) goes into one work unit, so those tests run one after another on one
worker, as they do without xdist, and never two networks at once: their phase windows and timeouts were
sized for one network on the machine (measured: two anvil attack suites at once under load 20 ran the
quick one past its 600 s timeout). The other worker runs the in-process tests meanwhile.

Every other module is a work unit of its own, so its tests run in file order on one worker: several
modules build one network in a module-scoped fixture and let later tests go on from where earlier ones
left it (``tests/network/test_inprocess_network.py``). Scheduled test by test, such a test landed alone on
the other worker with a fresh fixture and failed (fresh-clone CI of 28353e3).

xdist's own ``xdist_group`` mark cannot do this here: pytest-xdist 3.8 renames a grouped test's node id
through ``item._nodeid``, which pytest 9.2 no longer reads, so the mark is silently ignored and every test
is scheduled alone. The grouping is therefore made by the scheduler (:func:`pytest_xdist_make_scheduler`),
from the node ids the workers report. Without ``-n`` nothing here applies.

Device settings: ``CUBLAS_WORKSPACE_CONFIG`` is put into the environment here, before any test module is
imported (:func:`training.cudaenv.prepare_cuda_env`), so the test run is a process whose CUDA, wherever a
test starts it, starts with the deterministic setting.
"""

from __future__ import annotations

from typing import Any

import pytest

from training.cudaenv import prepare_cuda_env

# The CUDA environment before any test module is imported, so no test order can initialise CUDA first
# (tests/training/test_device.py's CUDA tests in any order; training.cudaenv says why).
prepare_cuda_env()

E2E_GROUP = "e2e"
"""The work unit of the end-to-end modules (scheduled first: ``--dist loadgroup`` orders units by size)."""


def is_end_to_end(nodeid: str) -> bool:
    """Whether the test ``nodeid`` belongs to an end-to-end module: ``tests/e2e/*`` or ``*_e2e.py``."""
    path = nodeid.split("::", 1)[0]
    return path.startswith("tests/e2e/") or path.endswith("_e2e.py")


def work_unit(nodeid: str) -> str:
    """The xdist work unit of the test ``nodeid``: :data:`E2E_GROUP` or the test's module path."""
    return E2E_GROUP if is_end_to_end(nodeid) else nodeid.split("::", 1)[0]


@pytest.hookimpl(optionalhook=True)
def pytest_xdist_make_scheduler(config: pytest.Config, log: Any) -> Any:
    """Under ``--dist loadgroup``: xdist's load-group scheduling with the end-to-end modules as one unit."""
    if config.getoption("dist", None) != "loadgroup":
        return None
    from xdist.scheduler import LoadScopeScheduling

    class EndToEndTogether(LoadScopeScheduling):
        """One unit for the end-to-end modules; every other module is a unit of its own."""

        def _split_scope(self, nodeid: str) -> str:
            return work_unit(nodeid)

    return EndToEndTogether(config, log)
