"""The raw-bytes scan: forgotten content searched in the files the servers keep on disk.

A store can forget a value (no read returns it) and still hold its bytes: the logical scan sees
what the stores answer, this scan sees what an attacker with the disk would. It reads every
regular file under the given folders (the JetStream store, PostgreSQL's data folder, the server
logs) in 1 MiB chunks that overlap by the longest needle form minus one byte, so a needle across
a chunk boundary is found and no file is read whole. A value PostgreSQL compressed (TOAST, above
~2 kB) may hold the needle only in compressed form and is not found by its bytes; the logical
scan reads it. PostgreSQL is clean here only after ``compaction.compact_postgres``.

What JetStream leaves on disk, measured on this machine (nats-server 2.15.1,
``sync_interval: always``, single server R1):

  * The message-delete API (``agentledger.erasure.erase``) overwrites the whole record — subject,
    headers and data — in the block file at once: the raw scan is clean right after it.
  * A purge (of a subject or up to a sequence), a KV delete or purge, an object store delete
    only drop the index entries: the bytes stay in the block file for as long as the block
    holds any live message (measured: 3,000 purged messages of a 3 MB block were all still
    there after 3 s, a clean stop and a restart). A block is deleted only once every message
    in it is gone (a full stream purge deletes every block: clean at once). JetStream has no
    compaction an operator can trigger, so purge is not a way to forget; erase is.
  * SIGKILL right after erasing, then a restart on the same store: no erased message came
    back, in six layouts (the last message, the first, one in the middle, every message, all
    messages of a whole 8 MB block, the tail of a two-block stream); the raw scan stayed
    clean. Replicated (R3) streams also keep payloads in their raft logs until those
    compact (minutes); the embedded server is not clustered.
"""

from __future__ import annotations

import os
import stat
from collections.abc import Iterable, Sequence
from pathlib import Path

from agentledger.erasure.needles import Expected, Form, Matcher
from agentledger.erasure.reports import RawReport, RootChecked, Sink, now

CHUNK_BYTES = 1 << 20


def scan_file(path: Path, matcher: Matcher, chunk: int) -> tuple[int, dict[Form, int]]:
    """(bytes read, first offset of each form found) of one file, read in overlapping chunks."""
    found: dict[Form, int] = {}
    overlap = matcher.longest - 1
    total = 0
    fd = os.open(path, os.O_RDONLY | os.O_NOFOLLOW | os.O_CLOEXEC)
    with os.fdopen(fd, "rb", buffering=0) as src:
        tail, base = b"", 0  # base: file offset of buf[0]
        while block := src.read(chunk):
            total += len(block)
            buf = tail + block
            for form in matcher.forms:
                if form not in found and (at := buf.find(form.data)) >= 0:
                    found[form] = base + at
            keep = min(overlap, len(buf))
            tail = buf[len(buf) - keep:] if keep else b""
            base += len(buf) - keep
    return total, found


def scan_into(sink: Sink, store: str, path: Path, chunk: int = CHUNK_BYTES) -> int | None:
    """Scan one file into ``sink`` as ``store``; the bytes read, or None when the file is gone or
    could not be read (then an error of the report: not verified, never silently skipped)."""
    try:
        read, found = scan_file(path, sink.matcher, chunk)
    except FileNotFoundError:
        return None
    except OSError as exc:
        sink.report.errors.append(f"{sink.matcher.mask(str(path))}: {exc.strerror or exc}")
        return None
    for form, offset in sorted(found.items(), key=lambda item: item[1]):
        sink.add(store, f"{path} at byte {offset}", [form])
    return read


def _walk(root: Path, errors: list[str]) -> Iterable[tuple[Path, int]]:
    """(path, size) of every regular file under ``root`` (or ``root`` itself), symlinks not followed."""
    try:
        st = os.lstat(root)
    except OSError as exc:
        errors.append(f"{root}: {exc.strerror or exc}")
        return
    if stat.S_ISREG(st.st_mode):
        yield root, st.st_size
        return
    if not stat.S_ISDIR(st.st_mode):
        return

    def onerror(exc: OSError) -> None:
        errors.append(f"{exc.filename}: {exc.strerror or exc}")

    for folder, _dirs, files in os.walk(root, onerror=onerror, followlinks=False):
        for name in sorted(files):
            path = Path(folder) / name
            try:
                st = os.lstat(path)
            except FileNotFoundError:
                continue  # removed while walking (a WAL segment, a temp file)
            except OSError as exc:
                errors.append(f"{path}: {exc.strerror or exc}")
                continue
            if stat.S_ISREG(st.st_mode):
                yield path, st.st_size


def raw_scan(paths: Sequence[Path], needles: Sequence[bytes], *, chunk: int = CHUNK_BYTES,
             expected: Expected | None = None) -> RawReport:
    """Search every regular file under each of ``paths`` (folders or files) for every needle form.

    Synchronous file I/O: from async code run it with ``asyncio.to_thread``. A file that
    cannot be read is an error of the report (not verified), never silently skipped.
    ``expected(store, path, needle)`` may name why a finding is by design.
    """
    matcher = Matcher(needles)
    report = RawReport(started_at=now(), needles=len(matcher.needles), forms=len(matcher.forms))
    sink = Sink(report, matcher, expected)
    for root in paths:
        checked = RootChecked(path=matcher.mask(str(root)))
        report.roots.append(checked)
        for path, _size in _walk(Path(root), report.errors):
            read = scan_into(sink, "file", path, chunk)
            if read is not None:
                checked.files += 1
                checked.bytes += read
    sink.close()
    return report
