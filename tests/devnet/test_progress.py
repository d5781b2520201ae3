"""``tessera devnet`` without a live view (``--no-live``, or output to a pipe or a file) prints one line per
certified round: held-out loss before and after, and the first sample of the certified checkpoint."""

from __future__ import annotations

from typing import Any

from tessera.devnet.progress import printer, round_line


class _Net:
    def get(self, name: str, path: str) -> Any:
        assert (name, path) == ("validator0", "/rounds")
        return [{"round": 2, "heldout_before": 6.9537, "heldout_after": 6.3998}]


def test_one_line_per_certified_round(capsys: Any) -> None:
    samples: dict[int, dict[str, Any]] = {}

    def sampler(r: int) -> None:
        samples[r] = {"round": r, "prompt": "The ", "samples": ["cat\nsat", "other"]}

    on_round = printer(_Net(), samples, t0=0.0, sampler=sampler)
    on_round(2)
    out = capsys.readouterr().out
    assert out.count("\n") == 1
    assert "round 2 certified theta_3: held-out 6.954 -> 6.400  sample: 'The cat / sat'" in out
    # no validator summary yet, no samples asked for (--samples 0), a sample that failed
    assert round_line(1, {}, None, 5.0).endswith("round 1 certified theta_2: held-out -")
    assert "sample: 'The (not certified)'" in round_line(
        3, {}, {"prompt": "The ", "error": "not certified"}, 1.0
    )
