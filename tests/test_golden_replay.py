"""Golden replay: recorded ledger streams folded by the reducer give their recorded projections."""

from __future__ import annotations

import json
from pathlib import Path

import pytest

from agentledger.core.golden import (
    GOLDEN_DIR,
    RECORD_COMMAND,
    golden_files,
    load_events,
    recorded,
    replay_golden,
)
from agentledger.core.golden.__main__ import main as golden_main
from agentledger.core.reducer import fold
from agentledger.core.state import new_state

FILES = golden_files()


def _changed_keys(expected: object, actual: object) -> list[str]:
    if not (isinstance(expected, dict) and isinstance(actual, dict)):
        return []
    return sorted(k for k in expected.keys() | actual.keys() if expected.get(k) != actual.get(k))


def test_there_are_golden_streams() -> None:
    """The package ships at least the three recorded streams this suite relies on."""
    assert {p.stem for p in FILES} >= {"seed_replan", "budget_rejections", "conversation"}


@pytest.mark.parametrize("path", FILES, ids=lambda p: p.stem)
def test_golden_projection_unchanged(path: Path) -> None:
    """Replaying a recorded stream gives exactly the recorded view and state hash."""
    expected, expected_hash = recorded(path)
    view, digest = replay_golden(path)
    advice = (f"the reducer's projection of golden stream {path.name} changed "
              f"(view keys: {_changed_keys(expected, view) or 'none'}; hash {expected_hash} -> {digest}). "
              "A reducer change that changes a golden projection must re-record it in the same commit: "
              f"run `{RECORD_COMMAND}` and commit the updated files with the change.")
    assert view == expected, advice
    assert digest == expected_hash, advice


@pytest.mark.parametrize("path", FILES, ids=lambda p: p.stem)
def test_golden_stream_is_a_ledger_stream(path: Path) -> None:
    """A golden stream is a ledger extract: increasing seqs, personal content sealed, never plaintext."""
    events = load_events(path)
    seqs = [seq for _, seq in events]
    assert seqs == sorted(seqs) and len(set(seqs)) == len(seqs)
    for event, _ in events:
        payload = event.payload  # type: ignore[attr-defined]
        if hasattr(payload, "content"):
            assert payload.content is None and payload.sealed is not None, event.event_id
        for out in getattr(payload, "outputs", []):
            assert not out.personal or (out.value is None and out.sealed is not None), event.event_id
        if getattr(payload, "personal", False):
            assert payload.value is None and payload.sealed is not None, event.event_id


def test_seed_scenario_golden_says_what_the_seeds_say() -> None:
    """The recorded seeds' scenario keeps S1-S5 done, S6 next, and the late v1 success refused."""
    view, _ = replay_golden(GOLDEN_DIR / "seed_replan.json")
    assert view["done"] == ["S1", "S2", "S3", "S4", "S5"]
    assert view["next_ready"] == ["S6"]
    assert view["plan"]["version"] == 2
    assert [(r["kind"], r["code"]) for r in view["rejections"]] == [("step_succeeded", "stale_plan_version")]


def test_golden_streams_carry_duplicates_and_rejections() -> None:
    """The golden set exercises re-delivered event ids and refused events, not only the happy path."""
    outcomes = set()
    for path in FILES:
        _, traces = fold(new_state("t", "k"), load_events(path))
        outcomes |= {(t.outcome, t.code) for t in traces}
    assert ("duplicate", None) in outcomes
    assert {code for outcome, code in outcomes if outcome == "rejected"} >= {
        "stale_plan_version", "budget_exceeded", "over_reservation", "resource_mismatch",
        "unknown_reservation", "duplicate_reservation", "duplicate_question", "unknown_question",
        "ordinal_mismatch", "task_closed"}


def test_check_command_passes_on_recorded_files(capsys: pytest.CaptureFixture[str]) -> None:
    """`python -m agentledger.core.golden` (check mode) exits 0 when nothing drifted."""
    assert golden_main([]) == 0
    assert "DIFFERS" not in capsys.readouterr().out


def test_check_command_fails_and_write_rerecords(tmp_path: Path, capsys: pytest.CaptureFixture[str]) -> None:
    """A tampered recording fails the check with the re-record advice; --write restores it."""
    original = FILES[0]
    copy = tmp_path / original.name
    doc = json.loads(original.read_text())
    doc["state_hash"] = "0" * 64
    doc["expected"]["watermark"] = -1
    copy.write_text(json.dumps(doc))
    assert golden_main([str(copy)]) == 1
    assert RECORD_COMMAND in capsys.readouterr().out
    assert golden_main(["--write", str(copy)]) == 0
    assert golden_main([str(copy)]) == 0
    assert json.loads(copy.read_text()) == json.loads(original.read_text())
