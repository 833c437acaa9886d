"""Replay: rebuild, verify, dropped tables, and the projector surviving SIGKILL.

The projection is disposable: whatever happened to the projector (crashes,
dropped tables, a corrupted row), folding the ledger again must give the same
states, and ``verify`` must say so - or name the task that differs.
"""

from __future__ import annotations

import asyncio
import os
import signal
import subprocess
import sys
from collections.abc import Iterator
from pathlib import Path

import asyncpg
import msgspec
import pytest

from agentledger.config import Settings
from agentledger.core.state import core_hash, decode_state, encode_core
from agentledger.errors import UnavailableError
from agentledger.runtime.state import settings_env
from agentledger.services.projector import rebuild as replay
from agentledger.services.projector.service import Projector
from agentledger.stores import db
from helpers import assert_eventually
from test_projector import TENANT, Ledger, caught_up, event, task_rows, task_script, watermark

pytest_plugins = ["projection_fixtures"]


async def publish_tasks(ledger: Ledger, tasks: int, prefix: str = "r") -> int:
    last = 0
    for i in range(tasks):
        last = await ledger.publish_all(task_script(f"{prefix}{i}"))
    return last


async def test_rebuild_into_a_scratch_schema_matches_the_live_projection(
        settings: Settings, ledger: Ledger, projector: Projector) -> None:
    """Protects the fast path: rebuild folds the whole stream into a fresh schema with the same
    rows (seq and state hash per task, variable, turn, applied-event and rejection rows) as the
    incrementally built projection, reports what it did, and reports progress up to the total."""
    last = await publish_tasks(ledger, 12)
    await caught_up(settings, ledger)
    seen: list[tuple[int, int]] = []
    report = await replay.rebuild(settings, "replay_test", progress=lambda d, t: seen.append((d, t)))
    assert (report.events, report.tasks, report.last_seq) == (last, 12, last)
    assert report.rejections == 12
    assert seen[-1] == (last, last)

    conn = await asyncpg.connect(settings.database_url)
    try:
        q = "SELECT tenant, task_id, seq, state_hash FROM {}.task_state ORDER BY 1, 2"
        scratch = [tuple(r) for r in await conn.fetch(q.format("replay_test"))]
        live = [tuple(r) for r in await conn.fetch(q.format("public"))]
        r = "SELECT tenant, task_id, seq, event_id, kind, code, reason FROM {}.rejections ORDER BY 1, 2, 3"
        assert [tuple(x) for x in await conn.fetch(r.format("replay_test"))] == \
            [tuple(x) for x in await conn.fetch(r.format("public"))]
        assert await conn.fetchval("SELECT seq FROM replay_test.projector_watermark") == last
        for table in ("task_variables", "task_turns", "applied_events"):
            q2 = f"SELECT * FROM {{}}.{table} ORDER BY 1, 2, 3"
            assert [tuple(x) for x in await conn.fetch(q2.format("replay_test"))] == \
                [tuple(x) for x in await conn.fetch(q2.format("public"))], table
        assert await conn.fetchval("SELECT count(*) FROM replay_test.applied_events") == last
    finally:
        await conn.close()
    assert scratch == live
    # Rebuilding again replaces, it does not add.
    again = await replay.rebuild(settings, "replay_test")
    assert (again.events, again.tasks) == (last, 12)


async def test_verify_passes_then_names_a_corrupted_task(
        settings: Settings, ledger: Ledger, projector: Projector) -> None:
    """Protects the audit: verify is ok on a consistent projection, and after a live row of any
    part is corrupted (the core row, a variable row, a turn row, the applied-event index) it fails
    and names exactly that task and part; its scratch schema is dropped either way."""
    await publish_tasks(ledger, 8)
    await caught_up(settings, ledger)
    ok = await replay.verify(settings, wait_s=30)
    assert ok.ok, ok.summary()
    assert ok.tasks == 8 and not (ok.missing or ok.extra or ok.different)

    conn = await asyncpg.connect(settings.database_url)
    try:
        row = await conn.fetchrow("SELECT state FROM task_state WHERE tenant = $1 AND task_id = 'r3'",
                                  TENANT)
        state = decode_state(row["state"])
        state.title = "tampered"
        core = encode_core(state)
        await conn.execute("UPDATE task_state SET state = $1, state_hash = $2"
                           " WHERE tenant = $3 AND task_id = 'r3'", core, core_hash(core), TENANT)
        await conn.execute("UPDATE task_variables SET value = convert_to(replace(convert_from("
                           "value, 'UTF8'), '42', '43'), 'UTF8') WHERE task_id = 'r1' AND name = 'answer'")
        await conn.execute("INSERT INTO task_turns VALUES ($1, 'r2', 1, 1, '{}')", TENANT)
        await conn.execute("UPDATE applied_events SET seq = seq + 1000 WHERE task_id = 'r4'"
                           " AND event_id = 'v1'")
        bad = await replay.verify(settings, wait_s=30)
        assert not bad.ok
        assert [(d.task_id, d.problem, d.parts) for d in bad.different] == [
            ("r1", "different", ["variables"]), ("r2", "different", ["transcript"]),
            ("r3", "different", ["core"]), ("r4", "different", ["applied_events"])]
        assert not bad.missing and not bad.extra
        assert "r3 in core" in bad.summary()
        # A row the ledger knows nothing about is reported as extra.
        await conn.execute("INSERT INTO task_state(tenant, task_id, seq, state, state_hash)"
                           " VALUES ($1, 'ghost', 1, $2, 'x')", TENANT, b"{}")
        await conn.execute("DELETE FROM task_state WHERE task_id = 'r5'")
        worse = await replay.verify(settings, wait_s=30)
        assert [d.task_id for d in worse.extra] == ["ghost"]
        assert [d.task_id for d in worse.missing] == ["r5"]
        assert await conn.fetchval(
            "SELECT count(*) FROM pg_namespace WHERE nspname = 'replay_verify'") == 0
    finally:
        await conn.close()


async def test_verify_is_exact_while_events_keep_arriving(
        settings: Settings, ledger: Ledger, projector: Projector) -> None:
    """Protects verify against a moving target: tasks the projector advances past the replayed
    point are folded further to the live row's sequence, so concurrent writes are no mismatch."""
    await publish_tasks(ledger, 5)
    await caught_up(settings, ledger)
    stop = asyncio.Event()

    async def writer() -> int:
        n = 0
        while not stop.is_set():
            n += 1
            await ledger.publish(event("variable_set", f"w{n}", {"name": "tick", "value": n},
                                       task=f"r{n % 7}"))  # r5 and r6 are new tasks
            await asyncio.sleep(0.002)
        return n

    task = asyncio.create_task(writer())
    reports: list[replay.VerifyReport] = []
    try:
        # Until one run had to follow a task past its replay point (usually the first).
        while len(reports) < 10 and not any(r.refolded for r in reports):
            reports.append(await replay.verify(settings, wait_s=30))
    finally:
        stop.set()
        await task
    for report in reports:
        assert report.ok, report.summary()
    assert any(r.refolded for r in reports), "the moving-target path was never exercised"
    await caught_up(settings, ledger)
    final = await replay.verify(settings, wait_s=30)
    assert final.ok, final.summary()
    assert final.tasks == 7


async def test_verify_explains_a_projector_that_is_not_running(
        settings: Settings, ledger: Ledger) -> None:
    """Protects the operator: verify with no projector catching up fails with a clear, typed error
    instead of reporting every task as missing."""
    await publish_tasks(ledger, 2)
    with pytest.raises(UnavailableError) as info:
        await replay.verify(settings, wait_s=0.5)
    assert info.value.code == "projector_behind"
    assert "projector" in info.value.message


async def test_dropped_tables_under_a_running_projector_are_rebuilt_and_verify(
        settings: Settings, ledger: Ledger, projector: Projector) -> None:
    """Protects the projector against an operator's DROP: dropping the live tables under a running
    projector makes it notice, rebuild from the ledger (beside, then switched in) and carry on with
    new events; verify then passes."""
    await publish_tasks(ledger, 6)
    await caught_up(settings, ledger)
    before = {k: r["state_hash"] for k, r in (await task_rows(settings)).items()}
    conn = await asyncpg.connect(settings.database_url)
    try:
        await db.drop_tables_conn(conn)
    finally:
        await conn.close()
    assert await watermark(settings) in (None, 0)
    await caught_up(settings, ledger)
    assert {k: r["state_hash"] for k, r in (await task_rows(settings)).items()} == before

    await ledger.publish_all(task_script("after"))
    await caught_up(settings, ledger)
    assert (TENANT, "after") in await task_rows(settings)
    report = await replay.verify(settings, wait_s=30)
    assert report.ok, report.summary()
    assert report.tasks == 7


# ---- the crash test ---------------------------------------------------------------------

class ProjectorProcess:
    """The projector as a real OS process, killed the hard way."""

    def __init__(self, settings: Settings, log_dir: Path) -> None:
        self.env = {**os.environ, **settings_env(settings), "AGENTLEDGER_PROJECTOR_BATCH": "50",
                    "AGENTLEDGER_LOG_LEVEL": "info"}
        self.log_dir = log_dir
        self.procs: list[subprocess.Popen[bytes]] = []

    def start(self) -> subprocess.Popen[bytes]:
        log = (self.log_dir / f"projector-{len(self.procs)}.log").open("wb")
        proc = subprocess.Popen([sys.executable, "-m", "agentledger.services.projector"],
                                env=self.env, stdout=log, stderr=subprocess.STDOUT)
        log.close()
        self.procs.append(proc)
        return proc

    def kill(self) -> None:
        self.kill_one(self.procs[-1])

    def kill_one(self, proc: subprocess.Popen[bytes]) -> None:
        os.kill(proc.pid, signal.SIGKILL)
        proc.wait(timeout=10)

    def stop_all(self) -> None:
        for proc in self.procs:
            if proc.poll() is None:
                proc.send_signal(signal.SIGTERM)
                try:
                    proc.wait(timeout=20)
                except subprocess.TimeoutExpired:
                    proc.kill()
                    proc.wait(timeout=10)


@pytest.fixture
def projector_process(settings: Settings, tmp_path: Path) -> Iterator[ProjectorProcess]:
    pp = ProjectorProcess(settings, tmp_path)
    try:
        yield pp
    finally:
        pp.stop_all()


def crash_events(n: int, tasks: int) -> list[dict[str, object]]:
    """``n`` events across ``tasks`` tasks, interleaved, some of them refused by the reducer."""
    scripts = [task_script(f"k{i}") for i in range(tasks)]
    out: list[dict[str, object]] = []
    step = 0
    while len(out) < n:
        for i, script in enumerate(scripts):
            if step < len(script):
                out.append(script[step])
            else:
                out.append(event("variable_set", f"x{step}", {"name": f"v{step % 5}", "value": step},
                                 task=f"k{i}"))
            if len(out) == n:
                break
        step += 1
    return out


@pytest.mark.timeout(240)
async def test_projector_survives_sigkill_mid_stream(
        settings: Settings, ledger: Ledger, projector_process: ProjectorProcess) -> None:
    """THE crash test. Protects the projection's consistency across hard crashes: a projector
    process SIGKILLed twice while events stream in (mid-batch, mid-commit, maybe mid-rebuild) and
    restarted each time ends with its watermark at the stream's end and verify passing - nothing
    lost, nothing applied twice."""
    events = crash_events(3000, 60)
    chunks = [events[:600], events[600:1800], events[1800:]]
    await ledger.publish_all(chunks[0])
    proc = projector_process.start()

    async def progressed_past(seq: int) -> bool:
        assert proc.poll() is None, "the projector process died on its own"
        wm = await watermark(settings)
        return wm is not None and wm > seq

    for kill in range(2):
        publisher = asyncio.create_task(ledger.publish_all(chunks[kill + 1]))
        # Kill while the projector is busy: past where it started, with the publisher still going.
        start_wm = await watermark(settings) or 0
        await assert_eventually(lambda s=start_wm: progressed_past(s + 100), timeout=60)
        projector_process.kill()
        await publisher
        proc = projector_process.start()
    await caught_up(settings, ledger, wait_s=90)
    assert proc.poll() is None
    last = await ledger.last_seq()
    assert last == len(events)
    report = await replay.verify(settings, wait_s=60)
    assert report.ok, report.summary()
    assert report.tasks == 60
    assert report.events == len(events)
    rows = await task_rows(settings)
    applied = sum(decode_state(r["state"]).events_applied for r in rows.values())
    assert applied == len(events)
    assert len(projector_process.procs) == 3
    msgspec.json.encode(report)  # the report is serializable for the CLI
