"""Shared pieces of the benchmarks: the JSON line, event generators, the bench stack."""

from __future__ import annotations

import asyncio
import json
import os
import subprocess
import sys
import tempfile
import time
import uuid
from collections.abc import AsyncIterator
from contextlib import asynccontextmanager
from datetime import UTC, datetime
from pathlib import Path
from typing import Any

import msgspec

from agentledger import auth
from agentledger.config import Settings
from agentledger.core.validate import goal_hash
from agentledger.ledger import ensure_stream
from agentledger.runtime.embedded import EmbeddedNats
from agentledger.runtime.hosting import remove_instance
from agentledger.runtime.postgres import EmbeddedPostgres


async def agent_settings(s: Settings, tenant: str, agent: str = "bench") -> Settings:
    """Settings of an agent of ``tenant`` (created on the way); ``s`` itself without accounts."""
    if not auth.auth_store(s).initialized:
        return s
    await auth.tenant_add(s, tenant)
    return msgspec.structs.replace(s, nats_creds=await auth.agent_add(s, tenant, agent))


def emit(bench: str, value: float, unit: str, baseline: float, ratio: float, **extra: Any) -> None:
    line = {"bench": bench, "value": round(value, 3), "unit": unit,
            "baseline": round(baseline, 3), "ratio": round(ratio, 3), **extra}
    print(json.dumps(line), flush=True)


def _now() -> str:
    return datetime.now(UTC).isoformat()


def variable_event(tenant: str, task: str, i: int) -> dict[str, Any]:
    return {"kind": "variable_set", "event_id": f"v{i}", "tenant": tenant, "task_id": task,
            "producer": "bench", "occurred_at": _now(), "schema_version": 1,
            "payload": {"name": f"x{i % 16}", "value": i}}


def task_stream(tenant: str, task: str, n: int) -> list[dict[str, Any]]:
    """A plausible task history of ``n`` events: plan, steps, budget, variables."""
    steps = [{"id": f"S{i}", "depends_on": [f"S{i - 1}"] if i else []} for i in range(8)]
    out: list[dict[str, Any]] = [
        {"kind": "task_created", "payload": {"goal": {"text": "bench", "acceptance_criteria": [],
                                                     "goal_hash": goal_hash("bench", [])},
                                             "budget": {"tokens": 10**12}}},
        {"kind": "plan_versioned", "payload": {"plan_id": "p", "version": 1, "steps": steps}},
    ]
    for i in range(8):
        out.append({"kind": "step_started", "payload": {"plan_version": 1, "step_id": f"S{i}"}})
        out.append({"kind": "step_succeeded", "payload": {"plan_version": 1, "step_id": f"S{i}"}})
    i = 0
    while len(out) < n:
        r = f"r{i}"
        out += [
            {"kind": "budget_reserved", "payload": {"reservation_id": r, "resource": "tokens", "amount": 100}},
            {"kind": "budget_consumed", "payload": {"reservation_id": r, "resource": "tokens", "amount": 60}},
            {"kind": "budget_released", "payload": {"reservation_id": r, "resource": "tokens"}},
            {"kind": "variable_set", "payload": {"name": f"x{i % 16}", "value": i}},
        ]
        i += 1
    return [{**e, "event_id": f"e{j}", "tenant": tenant, "task_id": task, "producer": "bench",
             "occurred_at": _now(), "schema_version": 1} for j, e in enumerate(out[:n])]


async def raw_atomic_batches(nc: Any, subjects_bodies: list[tuple[str, bytes, str]],
                             size: int = 100) -> float:
    """Publish as JetStream atomic batches of ``size``; return events/s."""
    start = time.perf_counter()
    for b in range(0, len(subjects_bodies), size):
        chunk = subjects_bodies[b:b + size]
        bid = uuid.uuid4().hex
        for i, (subject, body, mid) in enumerate(chunk, 1):
            headers = {"Nats-Batch-Id": bid, "Nats-Batch-Sequence": str(i), "Nats-Msg-Id": mid}
            if i == len(chunk):
                headers["Nats-Batch-Commit"] = "1"
                reply = await nc.request(subject, body, headers=headers, timeout=10)
                if b"error" in reply.data:
                    raise RuntimeError(reply.data.decode())
            else:
                await nc.publish(subject, body, headers=headers)
    return len(subjects_bodies) / (time.perf_counter() - start)


@asynccontextmanager
async def bench_stack(settings: Settings) -> AsyncIterator[Settings]:
    """Embedded servers (unless configured) and a ledger-writer process."""
    with tempfile.TemporaryDirectory(prefix="agentledger-bench-") as tmp:
        root = Path(tmp)
        started: list[Any] = []
        nats_url, db_url = settings.nats_url, settings.database_url
        auth_dir = settings.auth_dir
        if not nats_url:
            # Operator mode, as `up` runs it: appends come from a tenant's agent.
            auth_dir = root / "auth"
            srv = EmbeddedNats(root / "nats", auth=auth.AuthStore(auth_dir).init())
            srv.start()
            started.append(srv)
            nats_url = srv.url
        if not db_url:
            pg = EmbeddedPostgres(root / "pg")
            pg.start()
            started.append(pg)
            db_url = pg.url
        s = msgspec.structs.replace(settings, nats_url=nats_url, database_url=db_url,
                                    prefix=f"bench{uuid.uuid4().hex[:8]}", data_dir=root,
                                    auth_dir=auth_dir)
        await ensure_stream(s)
        env = {**os.environ, "AGENTLEDGER_NATS_URL": nats_url, "AGENTLEDGER_PREFIX": s.prefix,
               "AGENTLEDGER_DATA_DIR": str(root), "AGENTLEDGER_LOG_LEVEL": "warning",
               "AGENTLEDGER_AUTH_DIR": str(s.auth_root)}
        writer = subprocess.Popen([sys.executable, "-m", "agentledger.services.ledger_writer"],
                                  env=env)
        try:
            nc = await auth.connect(s, auth.OPERATOR_ROLE)
            for _ in range(300):
                try:
                    await nc.request("$SRV.PING.agentledger-ledger-writer", b"", timeout=0.2)
                    break
                except Exception:  # noqa: BLE001 - not up yet
                    await asyncio.sleep(0.1)
            await nc.close()
            yield s
        finally:
            writer.terminate()
            writer.wait(timeout=20)
            for srv in reversed(started):
                srv.stop()
            # As root the servers had homes and users of their own outside `root`.
            remove_instance(root / "nats")
            remove_instance(root / "pg")


