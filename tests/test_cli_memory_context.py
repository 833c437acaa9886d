"""The `memory`, `context` and `forget` commands against real services, as an operator runs them."""

from __future__ import annotations

import asyncio
import json
import sys
from pathlib import Path

from agentledger.config import Settings
from ckpt_support import created, running, service_env
from test_context_service import turn

AGENTLEDGER = str(Path(sys.executable).with_name("agentledger"))


async def cli(settings: Settings, *argv: str) -> str:
    proc = await asyncio.create_subprocess_exec(
        AGENTLEDGER, *argv, env=service_env(settings),
        stdout=asyncio.subprocess.PIPE, stderr=asyncio.subprocess.PIPE)
    out, err = await proc.communicate()
    assert proc.returncode == 0, (argv, err.decode()[-2000:])
    return out.decode()


async def test_memory_commands_propose_read_show_history_confirm_and_receipts(settings: Settings) -> None:
    async with running(settings, checkpointer=False, memory=True):
        out = await cli(settings, "memory", "propose", "acme", "--kind", "preference", "--scope", "user:u1",
                        "--source", "user_confirmed", "--key", "answer language", "--value", "answer in Chinese")
        assert "write (new_key)" in out
        record = out.split("-> ")[1].split()[0]
        read = json.loads(await cli(settings, "memory", "read", "acme", "answer language", "--user", "u1",
                                    "--json"))
        assert [i["record_id"] for i in read["items"]] == [record]
        assert read["receipt"]["selected"] == [record]
        assert record in await cli(settings, "memory", "show", "acme", "answer language", "--scope", "user:u1")
        history = await cli(settings, "memory", "history", "acme", "answer language", "--scope", "user:u1")
        assert "memory_decided" in history and record in history
        assert f"confirm {record}" in await cli(settings, "memory", "confirm", "acme", record)
        receipts = await cli(settings, "memory", "receipts", "acme", "--record", record)
        assert read["receipt"]["receipt_id"] in receipts


async def test_context_commands_build_show_trace_and_clear(settings: Settings) -> None:
    async with running(settings, checkpointer=False, memory=True, context=True) as stack:
        await stack.append([created("t-cli")] + [turn(i, f"message {i} about the release", task="t-cli")
                                                 for i in range(1, 4)])
        built = json.loads(await cli(settings, "context", "build", "acme", "t-cli", "--input", "3",
                                     "--window", "4000", "--json"))
        generation = built["generation_id"]
        shown = await cli(settings, "context", "show", "acme", generation)
        assert f"generation {generation}" in shown and "message 3 about the release" in shown
        trace = await cli(settings, "context", "trace", "acme", generation)
        assert "input:3" in trace and "mandatory" in trace
        assert "epoch 1" in await cli(settings, "context", "clear", "acme", "t-cli")


async def test_forget_commands_request_receipt_and_verify_forgotten(settings: Settings, tmp_path: Path) -> None:
    """`forget request --save` files a request and writes the sealed receipt; `forget receipt`
    shows it by subject; `verify-forgotten` says CLEAN (exit 0) for the forgotten content and
    NOT CLEAN (exit 1) for content still stored."""
    async with running(settings, checkpointer=False, memory=True, context=True, tombstone=True) as stack:
        kept = "the kept delivery note D-77301"
        await stack.c.put_artifact(kept.encode(), schema="text/plain", producer="test", tenant="acme")
        await stack.append([created("t-f"), turn(1, "Zoe Castellane, 3 rue des Ursulines", task="t-f")
                            | {"data_subject": "s-zoe"}])
        await stack.projected()
        saved = tmp_path / "receipt.json"
        out = await cli(settings, "forget", "request", "acme", "--subject", "s-zoe", "--reason", "erasure",
                        "--save", str(saved))
        assert "completed (subject)" in out and "keys            done" in out and "(verified)" in out
        shown = await cli(settings, "forget", "receipt", "acme", "--subject", "s-zoe")
        assert json.loads(saved.read_bytes())["request_id"] in shown
        report = await cli(settings, "verify-forgotten", str(saved), "--needle", "Zoe Castellane")
        assert "CLEAN" in report and "NOT CLEAN" not in report and "Zoe" not in report
        proc = await asyncio.create_subprocess_exec(
            AGENTLEDGER, "verify-forgotten", str(saved), "--needle", kept, env=service_env(settings),
            stdout=asyncio.subprocess.PIPE, stderr=asyncio.subprocess.PIPE)
        out_bytes, _ = await proc.communicate()
        assert proc.returncode == 1 and "NOT CLEAN" in out_bytes.decode() and kept not in out_bytes.decode()
