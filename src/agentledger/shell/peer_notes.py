"""Notes one instance of a service publishes to every other instance of it (core NATS, no queue
group, so each instance, the sender too, receives each note), for what an instance remembers
to refuse rows put back outside the services: the generations a context-builder finished
(``context_builder/finished_notes``).

A note subject lives in the services' account and matches none of its exports: no tenant can
publish to it, and the tamper model's attacker (who writes PostgreSQL rows or the stores'
files) cannot either. Core NATS delivers at most once and in order per sender: a note lost in
a reconnect leaves the receiver knowing less (it refuses fewer rows put back), never more.
"""

from __future__ import annotations

from collections.abc import Callable
from typing import TypeVar

import msgspec
import structlog
from nats.aio.client import Client
from nats.aio.msg import Msg
from nats.aio.subscription import Subscription

log = structlog.get_logger()

NoteT = TypeVar("NoteT", bound=msgspec.Struct)

_encode = msgspec.msgpack.Encoder().encode


async def publish(nc: Client, subject: str, note: msgspec.Struct) -> None:
    await nc.publish(subject, _encode(note))


async def listen(nc: Client, subject: str, note_type: type[NoteT], on_note: Callable[[NoteT], None]) -> Subscription:
    """``on_note(note)`` for each note on ``subject`` that decodes as ``note_type``; one that
    does not is logged (its size only) and dropped."""
    decode = msgspec.msgpack.Decoder(note_type).decode

    async def on_msg(msg: Msg) -> None:
        try:
            note = decode(msg.data)
        except (msgspec.DecodeError, msgspec.ValidationError):
            log.warning("peer_note.undecodable", subject=subject, size=len(msg.data))
            return
        on_note(note)

    return await nc.subscribe(subject, cb=on_msg)
