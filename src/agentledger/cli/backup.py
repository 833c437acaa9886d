"""``agentledger backup`` and ``agentledger restore`` (``agentledger.backup``; docs/deletion.md,
"Backup and restore"). Run them on the host that ran ``up``: the forget journal and the keys
they depend on live beside the key-encryption key there."""

from __future__ import annotations

import argparse
import asyncio
import json
from collections.abc import Callable
from pathlib import Path

import msgspec

from agentledger.backup import restore as restoring
from agentledger.backup import take
from agentledger.config import Settings

Resolve = Callable[[argparse.Namespace], Settings]


def cmd_backup(args: argparse.Namespace, connected: Resolve) -> int:
    done = asyncio.run(take.take(connected(args), Path(args.folder)))
    print(json.dumps({"folder": args.folder, "started_at": done.started_at.isoformat(),
                      "streams": {p.name: p.state.get("last_seq", 0) for p in done.streams},
                      "kek_epochs": done.kek_epochs, "left_out": done.left_out}))
    return 0


def cmd_restore(args: argparse.Namespace, plain: Resolve) -> int:
    keys_from = Path(args.keys_from) if args.keys_from else None
    report = restoring.restore(plain(args), Path(args.folder), keys_from=keys_from)
    print(msgspec.json.encode(report).decode())
    return 0


def add_backup_commands(sub: argparse._SubParsersAction, connected: Resolve, plain: Resolve) -> None:  # type: ignore[type-arg]
    p = sub.add_parser("backup", help="snapshot the streams and dump the database into one folder (stack up)")
    p.add_argument("folder", help="a new or empty folder")
    p.set_defaults(fn=lambda a: cmd_backup(a, connected))
    p = sub.add_parser("restore", help="bring a backup into a fresh or stopped stack, forget again what "
                                       "was forgotten since, then serve")
    p.add_argument("folder", help="a folder `agentledger backup` wrote")
    p.add_argument("--keys-from", help="take the data-key bucket from this (later) backup instead")
    p.set_defaults(fn=lambda a: cmd_restore(a, plain))
