"""No secret survives anywhere: the raw bytes of every stream, table, index, WAL and log.

A real stack (`agentledger up` with embedded NATS and PostgreSQL in a private
data folder) takes real-format fake secrets in every free-text field of the
step events, in memory proposals, in a read's query and in a checkpoint; after
`down`, every file under the data folder is searched for each secret's bytes.
A canary (an ordinary unique word placed beside each secret) must be found, so
the scan is known to look where the secrets would have been. Besides plain secrets
(issue 8 §4), the forms that once got through (issue 26 item 8): a percent-encoded
credential URL, a base64 token, a token in a trace id and in a step's tool, and one
split across two strings of an event.
"""

from __future__ import annotations

import asyncio
import base64
import json
import secrets
import string
import urllib.parse
import uuid
from datetime import UTC, datetime
from pathlib import Path
from typing import Any

import pytest

from agentledger.client import Client, connect
from agentledger.config import Settings
from agentledger.core.validate import goal_hash
from agentledger.runtime import commands
from agentledger.runtime.embedded import EmbeddedNats
from agentledger.runtime.postgres import EmbeddedPostgres
from agentledger.runtime.state import resolve_urls

TENANT = "sec"
ALNUM = string.ascii_letters + string.digits


def _rand(n: int, alphabet: str = ALNUM) -> str:
    return "".join(secrets.choice(alphabet) for _ in range(n))


def fresh_secrets() -> dict[str, str]:
    """Unique secrets of real formats, so nothing another test stored can match."""
    head = base64.urlsafe_b64encode(b'{"alg":"HS256","typ":"JWT"}').rstrip(b"=").decode()
    body = base64.urlsafe_b64encode(json.dumps({"sub": _rand(12)}).encode()).rstrip(b"=").decode()
    return {
        "aws": "AKIA" + _rand(16, string.ascii_uppercase + string.digits),
        "github": "ghp_" + _rand(36),
        "slack": f"xoxb-{_rand(11, string.digits)}-{_rand(12, string.digits)}-{_rand(24)}",
        "stripe": "sk_live_" + _rand(24),
        "jwt": f"{head}.{body}.{_rand(43, ALNUM + '-_')}",
        "password": _rand(18),
        "url_encoded": urllib.parse.quote(f"postgresql://app:{_rand(16)}@db.example.com/prod", safe=""),
        "base64": base64.b64encode(("ghp_" + _rand(36)).encode()).decode(),
        "in_trace_id": "ghp_" + _rand(36),
        "in_tool": "sk_live_" + _rand(24),
        "split_second_half": _rand(18),
    }


def event(kind: str, task: str, payload: dict[str, Any], **extra: Any) -> dict[str, Any]:
    return {"kind": kind, "event_id": uuid.uuid4().hex, "tenant": TENANT, "task_id": task,
            "producer": "agent-s", "occurred_at": datetime.now(UTC).isoformat(),
            "schema_version": 1, "payload": payload, **extra}


async def workload(client: Client, s: dict[str, str], canary: str) -> None:
    task = "t-secrets"
    goal = f"deploy with key {s['aws']} ({canary})"
    await client.append_batch([
        event("task_created", task, {"goal": {"text": goal, "acceptance_criteria": [canary],
                                              "goal_hash": goal_hash(goal, [canary])}}),
        event("plan_versioned", task, {"plan_id": "p", "version": 1, "steps": [
            {"id": "S1", "title": f"push ({canary})"}, {"id": "S2", "depends_on": ["S1"]}]}),
        event("step_started", task, {"plan_version": 1, "step_id": "S1"}),
        event("step_failed", task, {"plan_version": 1, "step_id": "S1", "error_code": "auth",
                                    "message": f"git push refused for {s['github']} ({canary})"}),
        event("question_opened", task, {"question_id": "q1",
                                        "text": f"is password={s['password']} still valid? {canary}"}),
        event("variable_set", task, {"name": "deploy", "value": {"api_key": s["stripe"], "note": canary}}),
        event("turn_appended", task, {"role": "user", "ordinal": 1,
                                      "content": f"my token is {s['jwt']} {canary}"},
              data_subject="u1"),
        event("step_failed", task, {"plan_version": 1, "step_id": "S2", "error_code": "db",
                                    "message": f"connect to {s['url_encoded']} failed, blob {s['base64']} "
                                               f"({canary})"},
              trace_id=s["in_trace_id"]),
        event("plan_versioned", task, {"plan_id": "p", "version": 2, "steps": [
            {"id": "S1", "title": canary, "tool": s["in_tool"]}, {"id": "S2", "depends_on": ["S1"]}]}),
        event("variable_set", task, {"name": "cut", "value": [
            f"{canary} the key is ghp_{_rand(18)}", f"{s['split_second_half']} ({canary})"]}),
    ])
    await client.save_checkpoint(TENANT, task)
    await client.memory_propose(TENANT, [
        {"proposal_id": "m1", "kind": "fact", "scope": {"level": "project", "id": "p1"},
         "source": {"kind": "model_inference"}, "value": f"the slack bot uses {s['slack']} {canary}"},
        {"proposal_id": "m2", "kind": "fact", "scope": {"level": "tenant"},
         "source": {"kind": "tool_output", "ref": f"deploy log {s['github']}"},
         "value": f"deploys go through the staging cluster first ({canary})"},
        {"proposal_id": "m3", "kind": "procedure", "scope": {"level": "project", "id": "p1"},
         "source": {"kind": "user_confirmed"}, "key": "aws access",
         "value": {"steps": ["log in", f"use {s['aws']}"], "note": canary}},
    ])
    await client.memory_read(TENANT, f"staging cluster {s['github']}", project_id="p1",
                             purpose=f"checking password={s['password']}")


def scan(root: Path, needles: dict[str, bytes]) -> dict[str, list[str]]:
    """Every file under ``root`` holding each needle."""
    found: dict[str, list[str]] = {name: [] for name in needles}
    for path in root.rglob("*"):
        if not path.is_file() or path.is_symlink():
            continue
        try:
            data = path.read_bytes()
        except OSError:
            continue
        for name, needle in needles.items():
            if needle in data:
                found[name].append(str(path))
    return found


@pytest.mark.timeout(240)
def test_no_secret_reaches_a_stream_table_index_wal_checkpoint_or_log(
        tmp_path: Path, server_root: Path) -> None:
    """Protects issue 8 §4: every secret is redacted or denied before anything stores it."""
    s = fresh_secrets()
    canary = "canary" + uuid.uuid4().hex
    settings = Settings(data_dir=tmp_path, prefix="secrettest", server_root=server_root)
    try:
        commands.up(settings)

        async def run() -> None:
            async with await connect(resolve_urls(settings), timeout=30) as client:
                await workload(client, s, canary)

        asyncio.run(run())
    finally:
        if settings.runtime_file.exists():
            commands.down(settings)
    # The data folder, and the servers' homes (outside it when the tests run as root).
    needles = {**{k: v.encode() for k, v in s.items()}, "canary": canary.encode()}
    found = scan(tmp_path, needles)
    for home in (EmbeddedNats(tmp_path, server_root=server_root).dir,
                 EmbeddedPostgres(tmp_path, server_root=server_root).dir):
        if not home.is_relative_to(tmp_path):
            for name, files in scan(home, needles).items():
                found[name] += files
    canary_files = found.pop("canary")
    # The scan looked where the secrets would be: the ledger's file store and PostgreSQL's WAL.
    assert any("jetstream" in f for f in canary_files), canary_files
    assert any("pg_wal" in f for f in canary_files), canary_files
    assert found == {name: [] for name in s}
