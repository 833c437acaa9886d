"""``agentledger keys``: key-encryption-key epochs (``security.kek_epochs``).

``keys status`` prints the epochs; ``keys rotate`` makes a new epoch and re-wraps every data
key under it; ``keys retire`` (or ``rotate --retire``) then destroys every older epoch, so that
no copy of the keys bucket taken before (a backup) opens anything. Services run as their own
users (root ran ``up``) hold copies of the ring made at their start: ``retire`` refuses until
they were restarted with the new epoch (docs/deletion.md, "Backups and KEK
epochs"). Run it on the host whose key files the services use (they live beside
``AGENTLEDGER_KEK_FILE``), with the stack up.
"""

from __future__ import annotations

import argparse
import asyncio
import json
import os
from collections.abc import Callable
from pathlib import Path

import msgspec

from agentledger.config import Settings
from agentledger.runtime.hosting import DEFAULT_SERVER_ROOT, instance_id, isolating
from agentledger.security import auth
from agentledger.security.kek_epochs import KekRing, epoch_path
from agentledger.security.sealing import Keyring, RewrapReport, kek_of, marker_key_of

Connected = Callable[[argparse.Namespace], Settings]
# Seconds between making an epoch and the re-wrap pass: a key being made in another process at
# the instant of the rotation (wrapped under the old epoch) is stored by then. Services read the
# epoch folder before each wrapping, so every key made after the rotation uses the new epoch.
ROTATION_GRACE_S = 5.0


def stale_homes(settings: Settings, epoch: int) -> list[str]:
    """The service homes (services run as their own users, when root runs ``up``) whose copy of
    the ring lacks ``epoch``: those services wrap new keys under an older epoch until their next
    start stages the ring again, so retiring it now would lose those keys."""
    if not isolating():
        return []
    instance = Path(os.path.abspath(settings.server_root or DEFAULT_SERVER_ROOT)) / instance_id(settings.data_dir)
    if not instance.is_dir():
        return []
    return sorted(home.name for home in instance.iterdir()
                  if (home / "kek.marker").exists() and not epoch_path(home / "kek", epoch).exists())


async def _rewrap_twice(settings: Settings, ring: KekRing) -> tuple[RewrapReport, RewrapReport]:
    nc = await auth.connect(settings, auth.OPERATOR_ROLE)
    try:
        keyring = Keyring(nc, settings.keys_bucket, ring, replicas=settings.stream_replicas)
        return await keyring.rewrap(), await keyring.rewrap()
    finally:
        await nc.close()


async def retire(settings: Settings) -> dict[str, object]:
    """Destroy every epoch older than the current one, if nothing still needs them: no service
    home lacks the current epoch, and a re-wrap pass after another finds every live key under it."""
    ring = kek_of(settings, create=False)
    epoch = ring.current_epoch
    done: dict[str, object] = {"epoch": epoch, "retired": []}
    stale = stale_homes(settings, epoch)
    if stale:
        done["refused"] = (f"the services {', '.join(stale)} run on copies of the keys without epoch {epoch}: "
                           "restart them (`agentledger down`, `agentledger up`), then run "
                           "`agentledger keys retire`")
        return done
    first, second = await _rewrap_twice(settings, ring)
    done |= {"rewrap": msgspec.to_builtins(first), "check": msgspec.to_builtins(second)}
    if second.rewrapped or second.raced:
        done["refused"] = "keys were still being re-wrapped on the second pass: run `agentledger keys retire` again"
        return done
    older = [e for e in ring.live_epochs() if e < epoch]
    if 0 in older:
        # The marker key is derived from epoch 0 and kept in ``<kek>.marker`` from its first use;
        # on a folder whose services never ran, that first use is now, before epoch 0 is gone.
        marker_key_of(settings)
    for old in older:
        ring.retire(old)
    done["retired"] = older
    return done


async def rotate(settings: Settings, *, retire_after: bool, grace_s: float = ROTATION_GRACE_S) -> dict[str, object]:
    """Make a new epoch, wait ``grace_s``, re-wrap every key under it; with ``retire_after``,
    then ``retire`` (which may refuse, saying why)."""
    ring = kek_of(settings, create=False)
    epoch = ring.rotate()
    await asyncio.sleep(grace_s)
    first, _ = await _rewrap_twice(settings, ring)
    done: dict[str, object] = {"epoch": epoch, "rewrap": msgspec.to_builtins(first), "retired": []}
    if retire_after:
        done |= {k: v for k, v in (await retire(settings)).items() if k not in ("epoch", "rewrap")}
    return done


def cmd_keys(args: argparse.Namespace, connected: Connected) -> int:
    settings = connected(args)
    if args.keys_command == "status":
        ring = kek_of(settings, create=False)
        print(json.dumps({"current": ring.current_epoch, "live": ring.live_epochs(),
                          "kek_path": str(settings.kek_path)}))
        return 0
    if args.keys_command == "retire":
        done = asyncio.run(retire(settings))
    else:
        done = asyncio.run(rotate(settings, retire_after=args.retire, grace_s=args.grace))
    print(json.dumps(done))
    return 1 if "refused" in done else 0


def add_keys_commands(sub: argparse._SubParsersAction, connected: Connected) -> None:  # type: ignore[type-arg]
    keys = sub.add_parser("keys", help="key-encryption-key epochs: status, rotate, retire (operator)")
    ks = keys.add_subparsers(dest="keys_command", required=True)
    ks.add_parser("status", help="print the current and live epochs").set_defaults(
        fn=lambda a: cmd_keys(a, connected))
    p = ks.add_parser("rotate", help="make a new epoch and re-wrap every data key under it")
    p.add_argument("--retire", action="store_true",
                   help="then destroy every older epoch: backups taken before open nothing")
    p.add_argument("--grace", type=float, default=ROTATION_GRACE_S,
                   help=f"seconds between the new epoch and the re-wrap (default {ROTATION_GRACE_S})")
    p.set_defaults(fn=lambda a: cmd_keys(a, connected))
    ks.add_parser("retire", help="destroy every epoch older than the current one").set_defaults(
        fn=lambda a: cmd_keys(a, connected))
