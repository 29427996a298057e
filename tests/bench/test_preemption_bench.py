"""hack/bench/preemption.py at its smoke size: questions answered, victims as expected."""

from __future__ import annotations

from bench.smoke import smoke_run


def test_preemption_smoke_run_times_every_question_and_finds_the_victims() -> None:
    """Three questions on a full 4-node cluster: each timed; one, three and four victims."""
    result = smoke_run("preemption.py")
    assert result["benchmark"] == "preemption"
    (cell,) = result["cells"]
    assert cell["offline_pods"] == 4 * 8 * 4
    assert cell["seconds"]["count"] == 3
    assert cell["victims_per_question"] == [1, 3, 4]
    assert result["machine"]["yardstick_s"] > 0
