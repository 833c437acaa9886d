"""The witness of ledger heads against a whole-store rollback, with the real `up`.

Every store (the data folder, and the NATS store and PostgreSQL data in the servers' homes,
where root's `up` keeps them) is copied while the stack is down, more is
appended, the stack stops, and the old copy is put back: every chain in it is valid, only
shorter. The witness beside the keys (outside the data folder, so the restore does not touch
it) remembers what was committed: `up` refuses with the reason and a nonzero exit, names the
task and both indexes, and points at restoring the newer copy, never at `agentledger replay`
(which would make the rollback permanent). `--accept-rollback` serves it and records the loss.
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
from agentledger.stores import witness
from ckpt_support import TENANT, created, variable

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


@pytest.mark.timeout(420)
def test_up_refuses_a_restored_older_copy_of_the_data_folder(
        tmp_path: Path, server_root: Path, monkeypatch: pytest.MonkeyPatch,
        capsys: pytest.CaptureFixture[str]) -> None:
    data, snapshot = tmp_path / "data", tmp_path / "snapshot"
    settings = Settings(data_dir=data, prefix=PREFIX, server_root=server_root)
    try:
        commands.up(settings)
        asyncio.run(_append(resolve_urls(settings), [created("t1"), *(variable("t1", "x", i) for i in range(3))]))
        commands.down(settings)
        stores = _stores(settings, server_root)
        _snapshot(stores, snapshot)
        commands.up(settings)
        asyncio.run(_append(resolve_urls(settings), [variable("t1", "x", i) for i in range(3, 6)]))
        commands.down(settings)
        body = witness.read(with_witness(settings))
        assert body is not None and body.heads[f"{TENANT}/t1"][0] == 7

        _restore(snapshot, stores)
        with pytest.raises(IntegrityViolationError) as info:
            commands.up(settings)
        message = info.value.message
        assert "behind its witness" in message
        assert f"task {TENANT}/t1: the ledger ends at index 4, the witness saw index 7 committed" in message
        assert "rolled back" in message and "newer copy" in message
        assert "agentledger replay" not in message
        assert not settings.runtime_file.exists(), "nothing may be left running"

        # The command line says so too, and exits nonzero.
        monkeypatch.setenv("AGENTLEDGER_DATA_DIR", str(data))
        monkeypatch.setenv("AGENTLEDGER_PREFIX", PREFIX)
        monkeypatch.setenv("AGENTLEDGER_SERVER_ROOT", str(server_root))
        capsys.readouterr()
        with pytest.raises(SystemExit) as exited:
            main(["up"])
        assert exited.value.code != 0
        assert "behind its witness" in capsys.readouterr().err

        # Accepted explicitly: served, and the witness records what was lost.
        commands.up(settings, accept_rollback=True)
        commands.down(settings)
        after = witness.read(with_witness(settings))
        assert after is not None and after.heads[f"{TENANT}/t1"][0] == 4
        [accepted] = after.accepted
        assert any("task acme/t1: the ledger ends at index 4, the witness saw index 7" in line
                   for line in accepted.lost)
        commands.up(settings)  # at its witness again
    finally:
        if settings.runtime_file.exists():
            commands.down(settings)
