"""Prometheus metrics (issue 50, item 1): every process serves one scrape endpoint, and a scrape
after real work carries the series docs/operations.md lists.

* The Metrics table of docs/operations.md names exactly the series the processes register, with
  their types; the settings are in the Configuration table.
* On an ``agentledger up`` stack (every service a process under the supervisor): the port of
  each process's endpoint is in runtime.json and in ``agentledger status``; after an append, a
  memory proposal and read, a context build, a checkpoint, a forget and a killed service, each
  endpoint scraped over HTTP has every documented series, non-zero where that work went; no
  series has a tenant label; nats-server's monitoring port answers on loopback.
* With ``metrics_tenants`` set, the tenant label names at most that many tenants, the rest are
  ``other`` (in process: the memory-policy's decisions for three tenants).
"""

from __future__ import annotations

import asyncio
import json
import os
import re
import signal
import urllib.request
from collections.abc import Iterator
from pathlib import Path

import msgspec
import pytest
from prometheus_client import Counter, Gauge, Histogram
from prometheus_client.parser import text_string_to_metric_families

from agentledger.cli import main as cli
from agentledger.client import Client, connect
from agentledger.config import Settings
from agentledger.errors import AgentLedgerError
from agentledger.runtime import commands
from agentledger.runtime.state import RuntimeInfo, read_runtime, resolve_urls
from agentledger.shell import metrics
from ckpt_support import created, event, running
from helpers import assert_eventually
from test_memory_service import proposal

ROOT = Path(__file__).resolve().parents[1]
OPERATIONS = ROOT / "docs" / "operations.md"
TENANT = "acme"
TYPES = {Counter: "counter", Gauge: "gauge", Histogram: "histogram"}
Samples = dict[str, list[tuple[dict[str, str], float]]]


def documented() -> dict[str, str]:
    """The Metrics table of docs/operations.md: series name -> type."""
    section = OPERATIONS.read_text().split("\n## Metrics\n", 1)[1].split("\n## ", 1)[0]
    return dict(re.findall(r"^\| `(agentledger_[a-z_]+)` \| (counter|gauge|histogram) \|", section, flags=re.M))


def test_the_docs_list_exactly_the_series_the_processes_register() -> None:
    """Every series the shell's registry holds is in the table, with its type, and nothing else."""
    registered = {s.exported: TYPES[s.kind] for s in metrics.ALL}
    families = {m.name for m in metrics.REGISTRY.collect() if m.name.startswith("agentledger_")}
    assert families == {s.name for s in metrics.ALL}
    assert documented() == registered


def test_the_metrics_settings_are_documented() -> None:
    """The three settings are in the Configuration table, as every setting is."""
    table = OPERATIONS.read_text().split("## Configuration", 1)[1].split("\n## ", 1)[0]
    for name in ("metrics_host", "metrics_port", "metrics_tenants"):
        assert name in Settings.__struct_fields__
        assert f"| `AGENTLEDGER_{name.upper()}` |" in table


def scrape_text(port: int, path: str = "/metrics") -> str:
    with urllib.request.urlopen(f"http://127.0.0.1:{port}{path}", timeout=10) as reply:
        assert reply.status == 200
        return reply.read().decode()


def scrape(port: int) -> tuple[set[str], Samples]:
    """The family names and the samples (name -> [(labels, value)]) of one endpoint."""
    families: set[str] = set()
    samples: Samples = {}
    for family in text_string_to_metric_families(scrape_text(port)):
        families.add(family.name)
        for s in family.samples:
            samples.setdefault(s.name, []).append((dict(s.labels), s.value))
    return families, samples


def total(samples: Samples, name: str, **labels: str) -> float:
    return sum(v for have, v in samples.get(name, []) if labels.items() <= have.items())


# ---- the whole stack, as `agentledger up` runs it -----------------------------------------------

async def workload(c: Client) -> None:
    """A refused append and one stored, a memory proposal and read, a context build, a checkpoint
    and a forget."""
    turns = [event("turn_appended", {"role": "user" if i % 2 else "assistant", "ordinal": i,
                                     "content": f"turn {i}: the build uses Python 3.11"}, "m-1", tenant=TENANT)
             for i in range(1, 5)]
    # A turn is personal content: without its data subject the append is refused (counted so).
    with pytest.raises(AgentLedgerError) as refused:
        await c.append_batch([created("m-1", tenant=TENANT), *turns])
    assert refused.value.code == "missing_data_subject"
    await c.append_batch([created("m-1", tenant=TENANT), *(t | {"data_subject": "s-metrics"} for t in turns)])
    # Stored, and then rejected by the reducer: the task exists already.
    await c.append_batch([created("m-1", tenant=TENANT)])
    decided = await c.memory_propose(TENANT, [proposal("p-metrics", "The build uses Python 3.11 and uv",
                                                       key="build toolchain")])
    record = decided.decisions[0].record_id
    assert record is not None and decided.decisions[0].action == "write", decided.decisions[0]
    read = await c.memory_read(TENANT, "which python does the build use", project_id="p1")
    assert [i.record_id for i in read.items] == [record]
    await c.build_context(TENANT, "m-1", 4, window_tokens=8000, reserve_tokens=64)
    await c.save_checkpoint(TENANT, "m-1")
    reply = await c.forget(TENANT, {"kind": "record", "record_id": record}, reason="metrics test")
    assert (await c.forget_wait(TENANT, reply.request_id, timeout_s=120)).receipt is not None


def ports_recorded(settings: Settings, names: list[str]) -> RuntimeInfo | None:
    info = read_runtime(settings.runtime_file)
    return info if set(names) <= set(info.metrics_ports) else None


async def kill_and_wait_for_restart(settings: Settings, name: str) -> RuntimeInfo:
    """SIGKILL service ``name``; the runtime once the supervisor has it back, its port recorded."""
    before = read_runtime(settings.runtime_file)
    os.kill(before.services[name], signal.SIGKILL)

    def back() -> RuntimeInfo | None:
        info = read_runtime(settings.runtime_file)
        pid = info.services.get(name)
        return info if pid not in (None, before.services[name]) and name in info.metrics_ports else None

    return await assert_eventually(back, timeout=120, interval=0.1,
                                   message=f"the supervisor did not bring {name} back")


# What the workload (and one killed service) makes non-zero in each process's scrape.
EXERCISED: dict[str, list[tuple[str, dict[str, str]]]] = {
    "ledger-writer": [("agentledger_append_requests_total", {"outcome": "ok", "code": "none"}),
                      ("agentledger_append_requests_total", {"outcome": "refused", "code": "missing_data_subject"}),
                      ("agentledger_append_events_total", {"outcome": "refused"}),
                      ("agentledger_append_events_total", {"outcome": "ok"}),
                      ("agentledger_append_duration_seconds_count", {"outcome": "ok"}),
                      ("agentledger_group_commit_batch_events_count", {}),
                      ("agentledger_ledger_ack_duration_seconds_count", {})],
    "projector": [("agentledger_reducer_rejections_total", {"reason": "already_created"})],
    "memory-policy": [("agentledger_memory_decisions_total", {"action": "write"}),
                      ("agentledger_memory_read_duration_seconds_count", {}),
                      ("agentledger_memory_gate_candidates_total", {"result": "passed"})],
    "context-builder": [("agentledger_context_builds_total", {"outcome": "ok"}),
                        ("agentledger_context_build_tokens_count", {}),
                        ("agentledger_context_build_tokens_sum", {}),
                        ("agentledger_context_compactions_total", {})],
    "tombstone-fanout": [("agentledger_forget_sagas_completed_total", {}),
                         ("agentledger_forget_step_duration_seconds_count", {})],
    "supervisor": [("agentledger_supervisor_restarts_total", {"process": "checkpointer"})],
}
# Recorded at a value the workload may leave at 0 (the lag once caught up), so only present. The
# checkpointer's save is not looked for: it was killed after it, and its successor counts afresh.
PRESENT = {"projector": ["agentledger_projection_lag_events", "agentledger_projection_lag_seconds",
                         "agentledger_consumer_pending_messages"],
           "memory-policy": ["agentledger_consumer_pending_messages"],
           "tombstone-fanout": ["agentledger_consumer_pending_messages", "agentledger_forget_sagas"]}


@pytest.fixture
def up_stack(tmp_path: Path, server_root: Path) -> Iterator[Settings]:
    settings = Settings(data_dir=tmp_path, prefix="metricstest", server_root=server_root)
    try:
        commands.up(settings)
        yield settings
    finally:
        if settings.runtime_file.exists():
            commands.down(settings)


@pytest.mark.timeout(480)
def test_a_scrape_of_every_process_after_the_workload(up_stack: Settings,
                                                       capsys: pytest.CaptureFixture[str]) -> None:
    """Issue 50's Must-show: each process's scrape carries the series, non-zero where the work went."""
    settings = up_stack
    names = [*(name for name, _ in commands.services_of(settings)), "supervisor"]

    async def work() -> RuntimeInfo:
        await assert_eventually(lambda: ports_recorded(settings, names), timeout=120, interval=0.1,
                                message="not every process recorded its metrics port")
        async with await connect(resolve_urls(settings), timeout=60) as c:
            await workload(c)
        return await kill_and_wait_for_restart(settings, "checkpointer")

    info = asyncio.run(work())

    with pytest.raises(SystemExit) as done:
        cli.main(["status", "--data-dir", str(settings.data_dir)])
    assert done.value.code in (0, None)
    shown = capsys.readouterr().out
    for name in names:
        assert f"metrics http://127.0.0.1:{info.metrics_ports[name]}/metrics" in shown, (name, shown)

    series = {s.name for s in metrics.ALL}
    for name in names:
        families, samples = scrape(info.metrics_ports[name])
        assert series <= families, (name, series - families)
        for sample, labels in EXERCISED.get(name, []):
            assert total(samples, sample, **labels) > 0, (name, sample, labels, samples.get(sample))
        for sample in PRESENT.get(name, []):
            assert sample in samples, (name, sample)
        tenant_labelled = [(s, labels) for s, found in samples.items() for labels, _ in found if "tenant" in labels]
        assert tenant_labelled == [], (name, tenant_labelled)
    assert info.nats_monitor_port is not None
    varz = json.loads(scrape_text(info.nats_monitor_port, "/varz"))
    assert varz["http_host"] == "127.0.0.1" and varz["http_port"] == info.nats_monitor_port
    assert json.loads(scrape_text(info.nats_monitor_port, "/healthz"))["status"] == "ok"
    jsz = json.loads(scrape_text(info.nats_monitor_port, "/jsz?streams=true"))
    assert jsz["streams"] >= 1


# ---- the tenant label, opted in ---------------------------------------------------------------

async def test_the_tenant_label_names_at_most_the_cap_and_the_rest_are_other(settings: Settings) -> None:
    """``metrics_tenants=2``: decisions for three tenants are labelled with the first two and ``other``."""
    opted = msgspec.structs.replace(settings, metrics_tenants=2)
    async with running(opted, checkpointer=False, memory=True) as stack:
        for tenant in ("acme", "beta", "gamma"):
            reply = await stack.c.memory_propose(tenant, [proposal(f"p-{tenant}", f"{tenant} builds with uv",
                                                                   key="build toolchain")])
            assert reply.decisions[0].action == "write", reply.decisions[0]
        assert stack.memory is not None and stack.memory.metrics is not None
        port = stack.memory.metrics.port
        assert port is not None
        _, samples = await asyncio.to_thread(scrape, port)
        labelled = {labels["tenant"]: value for labels, value in samples["agentledger_memory_decisions_total"]}
        assert labelled == {"acme": 1.0, "beta": 1.0, "other": 1.0}
    # Stopped: the endpoint is closed with the last service of the process.
    with pytest.raises(OSError):
        await asyncio.to_thread(scrape_text, port)


async def test_without_the_setting_no_series_has_a_tenant_label(settings: Settings) -> None:
    """The default: decisions are counted, with no tenant label."""
    async with running(settings, checkpointer=False, memory=True) as stack:
        await stack.c.memory_propose(TENANT, [proposal("p-1", "acme builds with uv", key="build toolchain")])
        assert stack.memory is not None and stack.memory.metrics is not None
        assert stack.memory.metrics.port is not None
        _, samples = await asyncio.to_thread(scrape, stack.memory.metrics.port)
    found = samples["agentledger_memory_decisions_total"]
    assert found and all("tenant" not in labels for labels, _ in found)
    assert total(samples, "agentledger_memory_decisions_total", action="write") >= 1
