"""``agentledger keys``: key-encryption-key epochs (``security.kek_epochs``).

``keys status`` prints the epochs; ``keys rotate`` makes a new epoch and re-wraps every data
key under it; ``keys rotate --retire`` then destroys every older epoch, so that no copy of the
keys bucket taken before (a backup) opens anything (docs/deletion.md, "Backups and KEK
epochs"). Run it on the host whose key files the services use (they live beside
``AGENTLEDGER_KEK_FILE``), with the stack up.
"""

from __future__ import annotations

import argparse
import asyncio
import json
from collections.abc import Callable

import msgspec

from agentledger.config import Settings
from agentledger.security import auth
from agentledger.security.sealing import Keyring, kek_of

Connected = Callable[[argparse.Namespace], Settings]
# Seconds between making an epoch and the re-wrap pass: a key being made in another process at
# the instant of the rotation (wrapped under the old epoch) is stored by then. Services read the
# epoch folder before each wrapping, so every key made after the rotation uses the new epoch.
ROTATION_GRACE_S = 5.0


async def rotate(settings: Settings, *, retire: bool, grace_s: float = ROTATION_GRACE_S) -> dict[str, object]:
    """Rotate (and with ``retire``, destroy older epochs); what was done, for printing.

    Retirement happens only when a second re-wrap pass, after the first, finds every live key
    under the new epoch: a key still under an old epoch would be lost with it.
    """
    ring = kek_of(settings, create=False)
    epoch = ring.rotate()
    await asyncio.sleep(grace_s)
    nc = await auth.connect(settings, auth.OPERATOR_ROLE)
    try:
        keyring = Keyring(nc, settings.keys_bucket, ring, replicas=settings.stream_replicas)
        first = await keyring.rewrap()
        second = await keyring.rewrap()
    finally:
        await nc.close()
    done: dict[str, object] = {"epoch": epoch, "rewrap": msgspec.to_builtins(first),
                               "check": msgspec.to_builtins(second), "retired": []}
    if retire:
        if second.rewrapped or second.raced:
            done["refused"] = ("keys were still being re-wrapped on the second pass: run "
                               "`agentledger keys rotate --retire` again")
            return done
        older = [e for e in ring.live_epochs() if e < epoch]
        for old in older:
            ring.retire(old)
        done["retired"] = older
    return done


def cmd_keys(args: argparse.Namespace, connected: Connected) -> int:
    settings = connected(args)
    if args.keys_command == "status":
        ring = kek_of(settings, create=False)
        print(json.dumps({"current": ring.current_epoch, "live": ring.live_epochs(),
                          "kek_path": str(settings.kek_path)}))
        return 0
    done = asyncio.run(rotate(settings, retire=args.retire, grace_s=args.grace))
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
