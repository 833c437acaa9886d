"""Edit a stopped nats-server's JetStream block files as an attacker who can write them would.

nats-server's file store keeps a stream's messages in ``msgs/<n>.blk``, one record after the
other (server/filestore.go, ``writeMsgRecordLocked``), all little-endian:

    total_len u32 (high bit: has headers) | seq u64 (high bits: erased, tombstone) | ts i64 |
    subj_len u16 | subject | [hdr_len u32 | headers] | body | checksum (8 bytes)

``checksum`` is HighwayHash-64 over ``seq ts`` (the 16 bytes after ``total_len``), the subject,
the headers and the body, keyed with sha256 of ``"<stream name>-<block index>"``: no secret,
so whoever can write the files can recompute it (``highwayhash64``). The stream's summary
(``msgs/index.db``) is removed after an edit, so the server rebuilds its state from the blocks
on its next start, as it does after a crash.
"""

from __future__ import annotations

import hashlib
import struct
from collections.abc import Callable
from dataclasses import dataclass, replace
from pathlib import Path

from highwayhash64 import digest64

_HDR = struct.Struct("<IQqH")
_HBIT = 1 << 31
_EBIT = 1 << 63
_TBIT = 1 << 62


@dataclass(frozen=True)
class Record:
    seq: int  # as stored, flag bits included
    ts: int
    subject: bytes
    headers: bytes | None  # raw NATS header block, None when the record has none
    body: bytes

    @property
    def message(self) -> bool:
        """A live message (not an erased slot or a delete tombstone)."""
        return self.seq & (_EBIT | _TBIT) == 0

    def header(self, name: str) -> str | None:
        for line in (self.headers or b"").decode().split("\r\n")[1:]:
            key, sep, value = line.partition(":")
            if sep and key.strip() == name:
                return value.strip()
        return None

    def without_header(self, name: str) -> Record:
        lines = (self.headers or b"NATS/1.0\r\n\r\n").decode().split("\r\n")
        kept = [line for line in lines[1:] if line and line.partition(":")[0].strip() != name]
        return replace(self, headers="\r\n".join([lines[0], *kept, "", ""]).encode())

    def with_header(self, name: str, value: str) -> Record:
        lines = (self.headers or b"NATS/1.0\r\n\r\n").decode().split("\r\n")
        kept = [line for line in lines[1:] if line and line.partition(":")[0].strip() != name]
        block = "\r\n".join([lines[0], *kept, f"{name}: {value}", "", ""])
        return replace(self, headers=block.encode())


def stream_dir(store: Path, stream: str) -> Path:
    """The stream's folder under a server's JetStream store."""
    [found] = [p for p in store.rglob(stream) if p.parent.name == "streams" and (p / "msgs").is_dir()]
    return found


def blocks(stream: Path) -> list[Path]:
    return sorted((stream / "msgs").glob("*.blk"), key=lambda p: int(p.stem))


def read_block(path: Path) -> list[Record]:
    data = path.read_bytes()
    out: list[Record] = []
    at = 0
    while at + _HDR.size <= len(data):
        rl, seq, ts, slen = _HDR.unpack_from(data, at)
        has_headers = bool(rl & _HBIT)
        rl &= ~_HBIT
        if rl == 0:
            break
        rec = data[at + _HDR.size:at + rl - 8]
        subject, rest = rec[:slen], rec[slen:]
        headers = None
        if has_headers:
            (hlen,) = struct.unpack_from("<I", rest)
            headers, rest = rest[4:4 + hlen], rest[4 + hlen:]
        out.append(Record(seq, ts, subject, headers, rest))
        at += rl
    return out


def encode(record: Record, key: bytes) -> bytes:
    """One record with its checksum computed as the server does."""
    rl = _HDR.size + len(record.subject) + len(record.body) + 8
    if record.headers is not None:
        rl += 4 + len(record.headers)
    total = rl | _HBIT if record.headers is not None else rl
    head = _HDR.pack(total, record.seq, record.ts, len(record.subject))
    middle = record.subject
    if record.headers is not None:
        middle += struct.pack("<I", len(record.headers)) + record.headers
    checksum = digest64(key, head[4:20] + record.subject + (record.headers or b"") + record.body)
    return head + middle + record.body + checksum


def block_key(stream_name: str, index: int) -> bytes:
    return hashlib.sha256(f"{stream_name}-{index}".encode()).digest()


def rewrite(store: Path, stream_name: str, edit: Callable[[list[Record]], list[Record]]) -> None:
    """Apply ``edit`` to the records of the stream's last block (every record re-encoded with
    its checksum recomputed) and remove the stream's summary so the server rebuilds it."""
    folder = stream_dir(store, stream_name)
    last = blocks(folder)[-1]
    key = block_key(stream_name, int(last.stem))
    records = read_block(last)
    original = b"".join(encode(r, key) for r in records)
    assert original == last.read_bytes()[:len(original)], "the block layout is not the one this module reads"
    last.write_bytes(b"".join(encode(r, key) for r in edit(records)))
    for name in ("index.db",):
        (folder / "msgs" / name).unlink(missing_ok=True)
