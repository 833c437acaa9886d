"""The witness of ledger heads against a whole-store rollback, with the real `up`.

Every store (the data folder, and the NATS store and PostgreSQL data in the servers' homes,
where root's `up` keeps them) is copied while the stack is down, more is
appended, the stack stops, and the old copy is put back: every chain in it is valid, only
shorter. The witness beside the keys (outside the data folder, so the restore does not touch
it) remembers what was committed. `up` contains it rather than refusing everyone: it starts,
names the task that is behind and both indexes, points at restoring the newer copy (never at
`agentledger replay`, which would make the rollback permanent), and fences that task (its
appends, lease grants and reads answer `integrity_violation`) while another task is served and
the audit runs; the sequences the shorter stream would hand out again are taken.
`--accept-rollback` serves it and records the loss; the fence is gone.
"""

from __future__ import annotations

import asyncio
import subprocess
from pathlib import Path

import pytest

from agentledger.cli.main import main
from agentledger.client import connect
from agentledger.config import Settings
from agentledger.errors import IntegrityViolationError
from agentledger.runtime import commands
from agentledger.runtime.hosting import instance_id
from agentledger.runtime.service_users import with_witness
from agentledger.runtime.state import resolve_urls
from agentledger.stores import ledger_audit, witness
from ckpt_support import TENANT, created, variable
from ledger_blocks import rewrite

PREFIX = "rollback"


async def _append(settings: Settings, events: list[dict[str, object]]) -> None:
    async with await connect(settings) as client:
        await client.append_batch(events)


def _copy(src: Path, dst: Path) -> None:
    """A copy keeping owners and modes (the embedded servers run as users of their own)."""
    subprocess.run(["cp", "-a", str(src), str(dst)], check=True)


def _stores(settings: Settings, server_root: Path) -> list[Path]:
    """The data folder and the servers' homes (as root runs them); not the writer's home."""
    homes = server_root / instance_id(settings.data_dir)
    return [settings.data_dir, *(p for p in (homes / "nats", homes / "pg") if p.exists())]


def _snapshot(stores: list[Path], snapshot: Path) -> None:
    snapshot.mkdir()
    for i, path in enumerate(stores):
        _copy(path, snapshot / str(i))


def _restore(snapshot: Path, stores: list[Path]) -> None:
    for i, path in enumerate(stores):
        subprocess.run(["rm", "-rf", str(path)], check=True)
        _copy(snapshot / str(i), path)


async def _contained(settings: Settings) -> None:
    """t1 (behind) is fenced on every path; t2 (at its witness) is served; the audit runs."""
    async with await connect(settings) as client:
        for attempt in (lambda: client.append(variable("t1", "x", 99)),
                        lambda: client.working_memory(TENANT, "t1"),
                        lambda: client.acquire_lease(TENANT, "t1", "executor-1", ttl_s=30)):
            with pytest.raises(IntegrityViolationError) as info:
                await attempt()
            assert "fenced" in info.value.message and "newer copy" in info.value.message
        done = await client.append(variable("t2", "y", 1))
        wm = await client.working_memory(TENANT, "t2", min_seq=done.seq)
        assert wm.state["variables"]["y"]["value"] == 1
        # The audit runs beside the fenced task and names it.
        report = await ledger_audit.audit(client.nc, with_witness(settings))
    assert not report.ok and any("acme/t1" in line for line in report.summary().splitlines()), report.summary()


@pytest.mark.timeout(420)
def test_up_contains_a_restored_older_copy_of_the_data_folder(
        tmp_path: Path, server_root: Path, monkeypatch: pytest.MonkeyPatch,
        capsys: pytest.CaptureFixture[str]) -> None:
    data, snapshot = tmp_path / "data", tmp_path / "snapshot"
    settings = Settings(data_dir=data, prefix=PREFIX, server_root=server_root)
    try:
        commands.up(settings)
        asyncio.run(_append(resolve_urls(settings), [created("t1"), *(variable("t1", "x", i) for i in range(3))]))
        asyncio.run(_append(resolve_urls(settings), [created("t2")]))
        commands.down(settings)
        stores = _stores(settings, server_root)
        _snapshot(stores, snapshot)
        commands.up(settings)
        asyncio.run(_append(resolve_urls(settings), [variable("t1", "x", i) for i in range(3, 6)]))
        commands.down(settings)
        body = witness.read(with_witness(settings))
        assert body is not None and body.heads[f"{TENANT}/t1"][0] == 7
        witnessed_seq = body.last_seq

        _restore(snapshot, stores)
        capsys.readouterr()
        commands.up(settings)  # starts: one task's loss does not stop the others
        err = capsys.readouterr().err
        assert "1 task(s) fenced" in err
        assert f"task {TENANT}/t1: the ledger ends at index 4, the witness saw index 7 committed" in err
        assert "newer copy" in err and "agentledger replay" not in err
        urls = resolve_urls(settings)
        asyncio.run(_contained(urls))
        monkeypatch.setenv("AGENTLEDGER_DATA_DIR", str(data))
        monkeypatch.setenv("AGENTLEDGER_PREFIX", PREFIX)
        monkeypatch.setenv("AGENTLEDGER_SERVER_ROOT", str(server_root))
        capsys.readouterr()
        with pytest.raises(SystemExit) as exited:
            main(["status"])
        assert exited.value.code == 0
        assert f"fenced        {TENANT}/t1: task {TENANT}/t1: the ledger ends at index 4" in capsys.readouterr().out
        assert asyncio.run(_last_seq(urls)) >= witnessed_seq
        commands.down(settings)

        # The command line starts too, exit 0, and says the same.
        capsys.readouterr()
        with pytest.raises(SystemExit) as exited:
            main(["up"])
        assert exited.value.code == 0
        assert "fenced" in capsys.readouterr().err
        commands.down(settings)

        # Accepted explicitly: served, the witness records what was lost, no fence is left.
        commands.up(settings, accept_rollback=True)
        asyncio.run(_append(resolve_urls(settings), [variable("t1", "x", 100)]))
        commands.down(settings)
        after = witness.read(with_witness(settings))
        assert after is not None and after.heads[f"{TENANT}/t1"][0] == 5
        [accepted] = after.accepted
        assert any("task acme/t1: the ledger ends at index 4, the witness saw index 7" in line
                   for line in accepted.lost)
        capsys.readouterr()
        commands.up(settings)  # at its witness again: nothing fenced
        assert "fenced" not in capsys.readouterr().err
    finally:
        if settings.runtime_file.exists():
            commands.down(settings)


async def _last_seq(settings: Settings) -> int:
    async with await connect(settings) as client:
        return int((await client.nc.jetstream().stream_info(settings.stream)).state.last_seq)


@pytest.mark.timeout(420)
def test_one_tasks_last_message_cut_from_a_block_file_fences_that_task_alone(
        tmp_path: Path, server_root: Path, capsys: pytest.CaptureFixture[str]) -> None:
    """The outside evaluation's case: the last message of one task, the stream's last, cut from
    its block file while the stack is down. `up` starts; that task is fenced; another task and
    its Working Memory are served (the projection folded the cut message, and the sequence the
    shorter stream would hand out again is taken, so the projector carries on); the audit runs."""
    settings = Settings(data_dir=tmp_path / "data", prefix=PREFIX, server_root=server_root)
    try:
        commands.up(settings)
        urls = resolve_urls(settings)
        asyncio.run(_append(urls, [created("t2")]))
        asyncio.run(_append(urls, [created("t1"), variable("t1", "x", 1)]))
        asyncio.run(_append(urls, [variable("t1", "x", 2)]))
        asyncio.run(_wm_seq(urls, "t1"))  # folded before the stop
        commands.down(settings)
        [store] = [p for p in _stores(settings, server_root) if any(p.rglob("msgs"))]
        rewrite(store, urls.stream, lambda records: [r for r in records if r.message][:-1])

        capsys.readouterr()
        commands.up(settings)
        err = capsys.readouterr().err
        assert "1 task(s) fenced" in err and f"task {TENANT}/t1: the ledger ends at index 2" in err
        asyncio.run(_contained(resolve_urls(settings)))
    finally:
        if settings.runtime_file.exists():
            commands.down(settings)


async def _wm_seq(settings: Settings, task: str) -> int:
    async with await connect(settings) as client:
        last = int((await client.nc.jetstream().stream_info(settings.stream)).state.last_seq)
        return (await client.working_memory(TENANT, task, min_seq=last)).seq
