"""The `memory` and `context` commands against real services, as an operator runs them."""

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
