"""The chaos harness's short profile end to end: faults against a private stack, then the checker.

Runs ``python -m agentledger.chaos --profile short`` with a fixed seed as its own
process (it starts and tears down its own embedded stack) and asserts the
correctness results only; recovery times are in the report, never asserted here.
"""

from __future__ import annotations

import json
import subprocess
import sys
import xml.etree.ElementTree as ET
from pathlib import Path

import pytest

from agentledger.chaos.faults import TARGETS

SEED = 7
# The short profile is bounded to about a minute; this bound only stops a hung run.
RUN_TIMEOUT_S = 240


@pytest.mark.timeout(RUN_TIMEOUT_S + 30)
def test_short_chaos_run_loses_nothing_duplicates_nothing_and_everything_comes_back(
        tmp_path: Path) -> None:
    """Protects the issue's goals under SIGKILL / SIGSTOP of every service and server."""
    out = tmp_path / "chaos"
    done = subprocess.run([sys.executable, "-m", "agentledger.chaos", "--profile", "short",
                           "--seed", str(SEED), "--out", str(out)],
                          capture_output=True, text=True, timeout=RUN_TIMEOUT_S, check=False)
    report = json.loads((out / "report.json").read_text())
    text = (out / "report.txt").read_text()
    assert done.returncode == 0, text + done.stderr[-3000:]
    verdict = report["verdict"]
    classification = verdict["classification"]
    assert verdict["violations"] == {
        "lost": 0, "misplaced": 0, "duplicated": 0, "unexpected": 0, "failed_but_stored": 0,
        "zombie_accepted": 0, "grants_missing": 0}
    assert classification["attempted"] > 500
    assert verdict["projection_equals_replay"] is True
    assert verdict["effects"]["violations"] == []
    assert verdict["effects"]["succeeded"] > 0
    assert verdict["checkpoints"]["mismatches"] == [] and verdict["checkpoints"]["checked"] > 0
    assert verdict["pointers"] == []
    assert verdict["resume_inconsistent"] == [] and verdict["resumes"] > 0
    assert classification["zombie_refused"] > 0
    assert report["end_health"] == dict.fromkeys(TARGETS, True)
    assert report["errors"] == []
    assert report["goals"]["every service and server back by itself"] is True
    assert report["goals"]["no manual step (only fault signals sent)"] is True
    # One entry per injected fault, in the report, its text and the picture.
    faults = report["faults"]
    assert len(faults) >= 5
    # Every service of the runtime and both servers: the targets follow `up`'s service list.
    assert {f["targets"][0] for f in faults if f["single"]} == set(TARGETS)
    assert {"ledger-writer", "projector", "checkpointer", "memory-policy", "nats", "postgres"} <= set(TARGETS)
    assert all(None not in f["back_s"].values() for f in faults)
    svg = (out / "timeline.svg").read_text()
    ET.fromstring(svg)
    for f in faults:
        assert f">{f['index']} {f['label']}</text>" in svg
        assert f" {f['label']} " in text
