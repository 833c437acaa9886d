"""The services as users of their own (issue 26 §10): `up` run by root starts no service as root.

Real stacks (`agentledger up`: embedded nats-server and PostgreSQL, the six services) in a data
folder inside a directory only root may enter, as `make run` and the test suite leave it. Each
service must run as its own system user, reach its own copies of what it reads, and be unable
to read what belongs to another service or to the operator; the stack must still answer.
"""

from __future__ import annotations

import asyncio
import contextlib
import os
import pwd
import subprocess
import time
import uuid
from collections.abc import Iterator
from datetime import UTC, datetime
from pathlib import Path
from typing import Any

import msgspec
import pytest

from agentledger.cli.keys import retire, rotate
from agentledger.client import connect
from agentledger.config import Settings
from agentledger.core.validate import goal_hash
from agentledger.errors import IntegrityViolationError
from agentledger.runtime import commands, hosting
from agentledger.runtime.hosting import user_name
from agentledger.runtime.service_users import NEEDS, service_of
from agentledger.runtime.state import read_runtime, resolve_urls
from agentledger.security import auth
from agentledger.stores import witness

needs_root = pytest.mark.skipif(os.geteuid() != 0, reason="only root can give the services users "
                                "of their own; run by anyone else, they run as that user")
SERVICES = [name for name, _ in commands.SERVICES]
TENANT = "svcusers"
# What each service's home holds besides its ready files: copies of what it reads, nothing more.
HOME_FILES = {
    "ledger-writer": {"nats.creds", "kek", "kek.marker", "integrity"},
    "projector": {"nats.creds", "pgpass", "kek", "kek.marker", "integrity"},
    "checkpointer": {"nats.creds", "pgpass", "kek", "kek.marker", "integrity"},  # it opens sealed tasks
    "memory-policy": {"nats.creds", "pgpass", "kek", "kek.marker", "integrity"},
    "context-builder": {"nats.creds", "pgpass", "kek", "kek.marker", "context-signing.key", "integrity"},
    "tombstone-fanout": {"nats.creds", "pgpass", "kek", "kek.marker", "integrity"},
}
# The one file a service writes besides its ready file: the writer's witness of ledger heads
# (and its lock), its own and 0600.
WITNESS_FILES = {"ledger.witness", "ledger.witness-lock"}
# Files a service writes in its home (0600, its own): the writer's witness, the fan-out's journal.
WRITTEN_FILES = {"ledger-writer": WITNESS_FILES, "tombstone-fanout": {"forgets.journal"}}


class Identity:
    """Who a live process is, from /proc: its uid, gid, groups and environment."""

    def __init__(self, pid: int) -> None:
        fields = dict(line.split(":", 1) for line in Path(f"/proc/{pid}/status").read_text().splitlines()
                      if ":" in line)
        self.uid = int(fields["Uid"].split()[0])
        self.gid = int(fields["Gid"].split()[0])
        self.groups = [int(g) for g in fields["Groups"].split()]
        environ = Path(f"/proc/{pid}/environ").read_bytes().split(b"\0")
        self.env = dict(item.decode().split("=", 1) for item in environ if b"=" in item)

    def reads(self, path: str | Path) -> bool:
        """Whether a process with this identity can read ``path``."""
        done = subprocess.run(["cat", str(path)], user=self.uid, group=self.gid,
                              extra_groups=self.groups, capture_output=True, check=False)
        if done.returncode != 0:
            assert b"Permission denied" in done.stderr, done.stderr
        return done.returncode == 0


def identities(settings: Settings) -> dict[str, Identity]:
    """The identity of every service `up` runs, read from its live process.

    A service that is being restarted (absent from runtime.json, or gone before its /proc was
    read) is looked up again, in its next process.
    """
    names = {name if i == 1 else f"{name}-{i}" for name in SERVICES
             for i in range(1, settings.instances + 1)}
    for _ in range(300):
        services = read_runtime(settings.runtime_file).services
        with contextlib.suppress(FileNotFoundError, ProcessLookupError):
            if names <= services.keys():
                return {name: Identity(services[name]) for name in names}
        time.sleep(0.1)
    raise AssertionError(f"not every service of {sorted(names)} was running")


def settings_for(tmp_path_factory: pytest.TempPathFactory, server_root: Path, prefix: str,
                 instances: int) -> Settings:
    """A data folder (and key-encryption key) inside a directory only root can enter."""
    locked = tmp_path_factory.mktemp("locked")
    locked.chmod(0o700)
    return Settings(data_dir=locked / "data", prefix=prefix, server_root=server_root,
                    kek_dir=locked / "keks", instances=instances)


@pytest.fixture(scope="module")
def stack(tmp_path_factory: pytest.TempPathFactory, server_root: Path) -> Iterator[Settings]:
    """One stack with two instances of every service (`up --instances 2`)."""
    settings = settings_for(tmp_path_factory, server_root, "svcusers", instances=2)
    try:
        commands.up(settings)
        yield settings
    finally:
        if settings.runtime_file.exists():
            commands.down(settings)


def assert_services_run_as_their_users(settings: Settings) -> dict[str, Identity]:
    who = identities(settings)
    # The servers' users, by name: their pids change when the supervisor restarts one.
    servers = {pwd.getpwnam(user_name(settings.data_dir, kind)).pw_uid for kind in ("nats", "pg")}
    for name, identity in who.items():
        service = service_of(name)
        assert service is not None, name
        assert identity.uid != 0 and identity.uid not in servers, (name, identity.uid)
        assert pwd.getpwuid(identity.uid).pw_name == user_name(settings.data_dir, service)
        assert (identity.gid, identity.groups) == (pwd.getpwuid(identity.uid).pw_gid, [])
    # One user per service, shared by its instances.
    assert len({who[name].uid for name in SERVICES}) == len(SERVICES)
    return who


def event(kind: str, task: str, payload: dict[str, Any], **extra: Any) -> dict[str, Any]:
    return {"kind": kind, "event_id": uuid.uuid4().hex, "tenant": TENANT, "task_id": task,
            "producer": "agent-u", "occurred_at": datetime.now(UTC).isoformat(),
            "schema_version": 1, "payload": payload, **extra}


async def append_and_read(settings: Settings, task: str) -> str:
    """An append with a personal value (sealed by the writer) and a wm.get that reveals it (the
    projector opens it): both services need their key-encryption key copies. Returns the value."""
    goal, secret = f"ship {task}", f"call me at {uuid.uuid4().hex}"
    async with await connect(resolve_urls(settings), timeout=30) as client:
        results = await client.append_batch([
            event("task_created", task, {"goal": {"text": goal, "acceptance_criteria": [],
                                                  "goal_hash": goal_hash(goal, [])}}),
            event("turn_appended", task, {"role": "user", "ordinal": 1, "content": secret},
                  data_subject="u1"),
        ])
        wm = await client.working_memory(TENANT, task, reveal_personal=True, min_seq=results[-1].seq,
                                         wait_ms=20_000)
    assert wm.seq >= results[-1].seq
    assert secret in str(wm.state)
    return secret


async def revealed(settings: Settings, task: str) -> str:
    async with await connect(resolve_urls(settings), timeout=30) as client:
        return str((await client.working_memory(TENANT, task, reveal_personal=True)).state)


def test_every_service_declares_what_it_reads() -> None:
    """Protects the table the supervisor stages each service's files from: a service added to
    `up` without saying what it reads would start as its user without them."""
    assert set(NEEDS) == set(SERVICES) == set(auth.SERVICE_ROLES)
    assert service_of("projector-2") == "projector" and service_of("sleeper") is None


@needs_root
def test_every_service_process_runs_as_a_user_of_its_own(stack: Settings) -> None:
    """Protects host hygiene: as root, `up` used to run the six services as root; each now runs
    as a non-root system user of its own (its instances share it), none of them the servers'."""
    settings = stack
    who = assert_services_run_as_their_users(settings)
    assert set(who) == {*SERVICES, *(f"{name}-2" for name in SERVICES)}


@needs_root
def test_a_service_reads_its_own_credentials_and_no_one_elses(stack: Settings) -> None:
    """Protects least privilege: a service (a compromised one) reads its own NATS credentials
    copy, but not another service's, not the operator's or any file of the operator's auth folder,
    not the data folder's database password, and not another service's key copies; its home holds
    only what it reads, each file its own and 0400."""
    settings = stack
    who = identities(settings)
    for name, expected in HOME_FILES.items():
        home = Path(who[name].env["HOME"])
        written = set().union(*WRITTEN_FILES.values())
        # The ready file and, beside it, the scrape endpoint's port are the service's own words.
        files = {p.name: p.stat() for p in home.iterdir()
                 if not p.name.endswith((".ready", ".ready.metrics")) and p.name not in written}
        assert set(files) == expected, name
        for own in written & {p.name for p in home.iterdir()}:
            st = (home / own).stat()
            assert own in WRITTEN_FILES.get(name, set()), (name, own)
            assert (st.st_uid, st.st_mode & 0o777) == (who[name].uid, 0o600)
        assert {(st.st_uid, st.st_mode & 0o777) for st in files.values()} == {(who[name].uid, 0o400)}
        assert (home.stat().st_uid, home.stat().st_mode & 0o777) == (who[name].uid, 0o700)
    store = auth.AuthStore(settings.auth_root)
    operator_files = [store.creds(role) for role in (*auth.SERVICE_ROLES, auth.OPERATOR_ROLE,
                                                     auth.SYS_ROLE)]
    operator_files += [store.root / "operator.nk", settings.data_dir / "secrets" / "agentledger.pgpass"]
    assert all(path.exists() for path in operator_files)
    for name in SERVICES:
        mine = who[name].env["AGENTLEDGER_NATS_CREDS"]
        assert who[name].reads(mine), name
        assert Path(mine).read_text().startswith("-----BEGIN NATS USER JWT-----")
        assert who[f"{name}-2"].env["AGENTLEDGER_NATS_CREDS"] == mine
        others = [Path(who[other].env[variable]) for other in SERVICES if other != name
                  for variable in ("AGENTLEDGER_NATS_CREDS", "AGENTLEDGER_KEK_FILE",
                                   "AGENTLEDGER_INTEGRITY_KEY_FILE")
                  if variable in who[other].env]
        assert {p.name for p in others} == {"nats.creds", "kek", "integrity"}
        for path in (*others, *operator_files):
            assert not who[name].reads(path), (name, path)


@needs_root
def test_the_stack_answers_with_services_on_their_own_key_copies(stack: Settings) -> None:
    """Protects the stack's function under the new users: an append sealed by the writer and a
    wm.get revealed by the projector are served, each reading the key-encryption key from a copy
    in its own home rather than the operator's file."""
    settings = stack
    who = identities(settings)
    for name in ("ledger-writer", "projector"):
        kek = Path(who[name].env["AGENTLEDGER_KEK_FILE"])
        assert kek.read_bytes() == settings.kek_path.read_bytes()
        assert (kek.stat().st_uid, kek.stat().st_mode & 0o777) == (who[name].uid, 0o400)
    asyncio.run(append_and_read(settings, "t-answers"))


async def _cut_tail_refused(settings: Settings, view: Path) -> None:
    """Four events on a task, its last two deleted from the stream once the witness's view holds
    its head: resume refuses the older state, and resumes a task whose ledger is whole."""
    viewed = msgspec.structs.replace(settings, witness_file=view)
    async with await connect(resolve_urls(settings), timeout=30) as client:
        tasks = {}
        for task in ("t-cut", "t-whole"):
            goal = f"ship {task}"
            tasks[task] = await client.append_batch([
                event("task_created", task, {"goal": {"text": goal, "acceptance_criteria": [],
                                                      "goal_hash": goal_hash(goal, [])}}),
                *(event("variable_set", task, {"name": f"v{i}", "value": i}) for i in range(3))])

        def witnessed() -> bool:
            body = witness.read(viewed)
            return body is not None and all(body.heads.get(f"{TENANT}/{t}", (0,))[0] >= 4 for t in tasks)

        # The writer publishes every WITNESS_INTERVAL_S; a busy host may take a few rounds.
        deadline = time.monotonic() + 12 * witness.WITNESS_INTERVAL_S
        while not witnessed():
            assert time.monotonic() < deadline, "the witness's view never held the tasks' heads"
            await asyncio.sleep(0.5)
        nc = await auth.connect(resolve_urls(settings), auth.OPERATOR_ROLE)
        try:
            for result in tasks["t-cut"][-2:]:
                assert await nc.jetstream().delete_msg(settings.stream, result.seq)
        finally:
            await nc.close()
        with pytest.raises(IntegrityViolationError) as info:
            await client.resume(TENANT, "t-cut", "exec-cut")
        assert "ends at index 2" in info.value.message and "witness saw index 4" in info.value.message
        reply = await client.resume(TENANT, "t-whole", "exec-cut")
        assert reply.status == "resumable", reply.reasons


@needs_root
@pytest.mark.timeout(300)
def test_resume_compares_with_the_witness_through_its_read_only_view(stack: Settings) -> None:
    """Protects resume's witness check when services run as their own users: the witness is the
    writer's own file in its home, so the checkpointer reads the view the writer keeps of it
    (its owner the writer, 0640, the checkpointer's group; no other service reads it), and a
    tail cut off the ledger is refused by resume, not only by `up` and `verify`."""
    settings = stack
    who = identities(settings)
    view = Path(who["checkpointer"].env["AGENTLEDGER_WITNESS_FILE"])
    assert who["ledger-writer"].env["AGENTLEDGER_WITNESS_COPY_FILE"] == str(view)
    assert who["checkpointer-2"].env["AGENTLEDGER_WITNESS_FILE"] == str(view)
    asyncio.run(_cut_tail_refused(settings, view))
    st = view.stat()
    assert (st.st_uid, st.st_gid, st.st_mode & 0o777) == (who["ledger-writer"].uid, who["checkpointer"].gid,
                                                          0o640)
    assert who["checkpointer"].reads(view)
    for name in SERVICES:
        if name not in ("ledger-writer", "checkpointer"):
            assert not who[name].reads(view), name


@needs_root
@pytest.mark.timeout(300)
def test_restarts_keep_the_users_and_clean_removes_them(
        tmp_path_factory: pytest.TempPathFactory, server_root: Path,
        monkeypatch: pytest.MonkeyPatch) -> None:
    """Protects the life cycle: `down` and `up` again start the services as the same users and
    they answer; `make clean` (`python -m agentledger.runtime.hosting clean`) deletes the
    services' users and homes with the servers'."""
    settings = settings_for(tmp_path_factory, server_root, "svcrestart", instances=1)
    try:
        commands.up(settings)
        first = assert_services_run_as_their_users(settings)
        before = asyncio.run(append_and_read(settings, "t-before"))
        # A rotation with retirement: the next start gives the homes the new epoch and shreds
        # their copies of the retired one, and what was sealed before still opens.
        # Retiring while the services still hold copies without the new epoch would lose the
        # keys they make meanwhile: refused until they were restarted.
        done = asyncio.run(rotate(resolve_urls(settings), retire_after=True, grace_s=0))
        assert done["retired"] == [] and "restart them" in str(done["refused"]), done
        commands.down(settings)
        commands.up(settings)
        done = asyncio.run(retire(resolve_urls(settings)))
        assert done["retired"] == [0], done
        commands.down(settings)
        commands.up(settings)
        again = assert_services_run_as_their_users(settings)
        assert {name: i.uid for name, i in again.items()} == {name: i.uid for name, i in first.items()}
        asyncio.run(append_and_read(settings, "t-restarted"))
        assert before in asyncio.run(revealed(settings, "t-before"))
        writer_home = Path(again["ledger-writer"].env["HOME"])
        assert {"kek.e1", "kek.e0.retired", "kek.marker"} <= {p.name for p in writer_home.iterdir()}
        assert not (writer_home / "kek").exists()
        homes = {Path(i.env["HOME"]) for i in again.values()}
    finally:
        if settings.runtime_file.exists():
            commands.down(settings)
    users = [user_name(settings.data_dir, name) for name in SERVICES]
    assert all(pwd.getpwnam(user) for user in users)
    monkeypatch.setenv("AGENTLEDGER_SERVER_ROOT", str(server_root))
    assert hosting.main(["clean", "--data-dir", str(settings.data_dir)]) == 0
    for user in users:
        with pytest.raises(KeyError):
            pwd.getpwnam(user)
    assert not any(home.exists() for home in homes)
