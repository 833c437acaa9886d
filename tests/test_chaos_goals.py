"""The chaos report's recovery goals: 2 s on an idle host, 3 s beside busy loops, 5 s for
appends after a cluster node's kill (the ledger stream may elect a new leader first)."""

from __future__ import annotations

from agentledger.chaos.probes import Recovery
from agentledger.chaos.report import FaultRow


def _row(targets: tuple[str, ...], append: float | None, wm: float | None) -> FaultRow:
    return FaultRow(index=1, label="kill " + "+".join(targets), kind="kill", targets=targets,
                    start=1.0, end=1.0, pause_s=0.0,
                    lanes={"append": Recovery(1.0, None if append is None else 1.0 + append, append),
                           "wm": Recovery(1.0, None if wm is None else 1.0 + wm, wm)},
                    back_s={t: 0.5 for t in targets})


def test_a_recovery_is_over_its_goal_by_host_load_and_target() -> None:
    writer = _row(("ledger-writer",), append=2.5, wm=0.0)
    assert writer.missed(loaded=False) == ["append"]
    assert writer.missed(loaded=True) == []
    assert _row(("ledger-writer",), append=3.2, wm=0.0).missed(loaded=True) == ["append"]
    # A lane that never came back misses whatever the goal.
    assert _row(("projector",), append=0.0, wm=None).missed(loaded=True) == ["wm"]
    # A cluster node: appends may wait for an election, WM may not.
    node = _row(("nats-2",), append=4.8, wm=2.4)
    assert node.missed(loaded=False) == ["wm"]
    assert node.missed(loaded=True) == []
    assert _row(("nats-2",), append=5.3, wm=0.1).missed(loaded=True) == ["append"]
    # One node of the single-node stack is `nats`, held to the common goal.
    assert _row(("nats",), append=2.2, wm=0.1).missed(loaded=False) == ["append"]
