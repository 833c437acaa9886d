"""The reports of the scans: what was checked, what was found, and their printed form.

A report says what a scan read (each stream with its message count, each KV bucket and object
store, each table of each schema with its row count and indexes, the column statistics, each log
file, each folder with its file and byte totals) and what it found: the location and the needle's
*index*, never the needle itself (it is personal data; a subject, path or error that holds one is
kept with ``<needle N>`` in its place: ``Sink``). A finding by design (``Finding.expected``) is
listed apart and does not count against clean. ``render`` prints any of them.
"""

from __future__ import annotations

from collections.abc import Iterable, Sequence
from datetime import UTC, datetime

import msgspec

from agentledger.erasure.needles import Expected, Form, Matcher

# Findings kept per report; the rest are counted (one needle in a million messages is one fact).
MAX_FINDINGS = 1000
# Findings a printed report lists (the structured report keeps up to MAX_FINDINGS).
PRINTED_FINDINGS = 100


class Finding(msgspec.Struct, frozen=True, kw_only=True):
    """One place a needle was found: which needle (its index), in which form, where; ``expected``
    says why a finding is by design (the forget request's own records, a value sealed under its
    subject's key) and does not count against clean."""

    store: str  # "jetstream" | "postgres" | "statistics" | "log" | "file"
    location: str
    needle: int
    form: str
    expected: str = ""


class StreamChecked(msgspec.Struct, kw_only=True):
    name: str
    kind: str  # "stream" | "kv" | "object"
    messages: int
    bytes: int
    first_seq: int
    last_seq: int
    scanned: int = 0


class TableChecked(msgspec.Struct, kw_only=True):
    schema: str
    name: str
    kind: str  # "table" | "matview"
    columns: int
    bytea_columns: list[str] = []
    indexes: list[str] = []  # "name (method)"
    rows: int = 0


class FileChecked(msgspec.Struct, kw_only=True):
    path: str
    bytes: int


class RootChecked(msgspec.Struct, kw_only=True):
    path: str
    files: int = 0
    bytes: int = 0


class LogicalReport(msgspec.Struct, kw_only=True):
    """What the logical scan read, and every needle it found there."""

    started_at: datetime
    finished_at: datetime | None = None
    needles: int
    forms: int
    nats: str = ""
    database: str = ""
    analyzed: bool = False
    streams: list[StreamChecked] = []
    tables: list[TableChecked] = []
    statistics: int = 0  # rows of pg_stats / pg_stats_ext / pg_stats_ext_exprs read
    logs: list[FileChecked] = []
    findings: list[Finding] = []
    more_findings: int = 0  # found beyond MAX_FINDINGS, counted only
    expected: list[Finding] = []  # by design (``Finding.expected``): listed, not counted
    more_expected: int = 0
    errors: list[str] = []

    @property
    def clean(self) -> bool:
        return not self.findings and not self.more_findings and not self.errors


class RawReport(msgspec.Struct, kw_only=True):
    """What the raw scan read (folders, file and byte totals), and every needle it found."""

    started_at: datetime
    finished_at: datetime | None = None
    needles: int
    forms: int
    roots: list[RootChecked] = []
    findings: list[Finding] = []
    more_findings: int = 0
    expected: list[Finding] = []
    more_expected: int = 0
    errors: list[str] = []  # files or folders that could not be read: not verified

    @property
    def clean(self) -> bool:
        return not self.findings and not self.more_findings and not self.errors


class CompactionReport(msgspec.Struct, kw_only=True):
    """What ``compact_postgres`` did, and whether every old WAL segment is gone."""

    database: str
    started_at: datetime
    seconds: float = 0.0
    wal_recycle_was: str = ""
    tables: list[str] = []
    catalogs: list[str] = []
    wal_before: list[str] = []
    wal_after: list[str] = []
    current_segment: str = ""
    rounds: int = 0
    held_by: list[str] = []
    complete: bool = False
    errors: list[str] = []


class VerifyReport(msgspec.Struct, kw_only=True):
    """``verify-forgotten``: the logical scan, the compaction if asked, the raw scan if asked."""

    logical: LogicalReport
    compaction: CompactionReport | None = None
    raw: RawReport | None = None
    request_id: str = ""
    # What the needles are, by index: "content" (the operator's) or the receipt field of an id.
    needles: list[str] = []
    errors: list[str] = []

    @property
    def clean(self) -> bool:
        return (self.logical.clean and (self.compaction is None or self.compaction.complete)
                and (self.raw is None or self.raw.clean) and not self.errors)


# --- collecting findings ----------------------------------------------------------------------

class Sink:
    """Collects findings (needles masked out of their locations) up to MAX_FINDINGS, counts the rest;
    the expected ones apart."""

    def __init__(self, report: LogicalReport | RawReport, matcher: Matcher,
                 expected: Expected | None = None) -> None:
        self.report = report
        self.matcher = matcher
        self.expected = expected

    def add(self, store: str, location: str, hits: Iterable[Form | tuple[Form, str]]) -> None:
        for hit in hits:
            form, reason = (hit, "") if isinstance(hit, Form) else hit
            if not reason and self.expected is not None:
                reason = self.expected(store, location, form.needle) or ""
            finding = Finding(store=store, location=self.matcher.mask(location), needle=form.needle,
                              form=form.name, expected=reason)
            if not reason and len(self.report.findings) < MAX_FINDINGS:
                self.report.findings.append(finding)
            elif not reason:
                self.report.more_findings += 1
            elif len(self.report.expected) < MAX_FINDINGS:
                self.report.expected.append(finding)
            else:
                self.report.more_expected += 1

    def close(self) -> None:
        """Mask the errors too (a path or a name may hold a needle), and stamp the end."""
        self.report.errors = [self.matcher.mask(e) for e in self.report.errors]
        self.report.finished_at = now()


def now() -> datetime:
    return datetime.now(UTC)


# --- printing ---------------------------------------------------------------------------------

def _verdict(clean: bool) -> str:
    return "CLEAN" if clean else "NOT CLEAN"


def _listed(findings: Sequence[Finding], more: int) -> list[str]:
    lines = [f"    needle {f.needle} ({f.form}) in {f.store}: {f.location}"
             + (f" [{f.expected}]" if f.expected else "") for f in findings[:PRINTED_FINDINGS]]
    if len(findings) + more > PRINTED_FINDINGS:
        lines.append(f"    ... and {len(findings) + more - PRINTED_FINDINGS} more "
                     f"({len(findings)} in the report)")
    return lines


def _findings(report: LogicalReport | RawReport) -> list[str]:
    findings, more, errors = report.findings, report.more_findings, report.errors
    lines = [f"  found: {len(findings) + more}" if findings or more else "  found: nothing"]
    lines += _listed(findings, more)
    if report.expected or report.more_expected:
        lines.append(f"  expected, by design (not counted): {len(report.expected) + report.more_expected}")
        lines += _listed(report.expected, report.more_expected)
    if errors:
        lines.append(f"  not verified ({len(errors)}):")
        lines += [f"    {e}" for e in errors]
    return lines


def _seconds(start: datetime, end: datetime | None) -> str:
    return f"{(end - start).total_seconds():.2f} s" if end else "unfinished"


def _scan(title: str, verdict: str, report: LogicalReport | RawReport, checked: list[str]) -> str:
    """A scan's printed form: its needles and time, what it checked, what it found, its verdict."""
    lines = [f"{title}: {report.needles} needles in {report.forms} forms, "
             f"{_seconds(report.started_at, report.finished_at)}", *checked, *_findings(report),
             f"  {verdict}: {_verdict(report.clean)}"]
    return "\n".join(lines)


def render_logical(report: LogicalReport) -> str:
    lines = [f"  JetStream {report.nats or '(not scanned)'}: {len(report.streams)} streams, "
             f"{sum(s.scanned for s in report.streams)} messages read"]
    lines += [f"    {s.kind:<6} {s.name}: {s.messages} messages, {s.bytes} bytes, "
              + (f"seq {s.first_seq}..{s.last_seq}" if s.messages else "empty") + f", read {s.scanned}"
              for s in report.streams]
    lines.append(f"  PostgreSQL {report.database or '(not scanned)'}: {len(report.tables)} tables, "
                 f"{sum(t.rows for t in report.tables)} rows read"
                 + (" (statistics refreshed by ANALYZE first)" if report.analyzed else ""))
    for t in report.tables:
        extra = f"; bytea read as bytes: {', '.join(t.bytea_columns)}" if t.bytea_columns else ""
        lines.append(f"    {t.kind:<7} {t.schema}.{t.name}: {t.rows} rows, {t.columns} columns{extra}")
        if t.indexes:
            lines.append(f"            indexes: {', '.join(t.indexes)}")
    lines.append(f"  column statistics: {report.statistics} rows of pg_stats / pg_stats_ext / pg_stats_ext_exprs")
    lines.append(f"  logs: {len(report.logs)} files, {sum(f.bytes for f in report.logs)} bytes")
    lines += [f"    {f.path}: {f.bytes} bytes" for f in report.logs]
    return _scan("Logical scan", "logical", report, lines)


def render_compaction(report: CompactionReport) -> str:
    lines = [f"PostgreSQL compaction of {report.database}: {report.seconds:.2f} s",
             f"  wal_recycle was {report.wal_recycle_was}, now off",
             f"  VACUUM (FULL, ANALYZE): {len(report.tables)} tables; VACUUM (FULL): {', '.join(report.catalogs)}",
             f"  WAL: {len(report.wal_before)} segments before, {report.rounds} switch+checkpoint rounds, "
             f"now {report.wal_after} (current {report.current_segment})"]
    lines += [f"  held by: {h}" for h in report.held_by]
    lines += [f"  error: {e}" for e in report.errors]
    lines.append(f"  compaction: {'COMPLETE' if report.complete else 'INCOMPLETE'}")
    return "\n".join(lines)


def render_raw(report: RawReport) -> str:
    return _scan("Raw scan", "raw", report, [f"  {r.path}: {r.files} files, {r.bytes} bytes" for r in report.roots])


def render(report: LogicalReport | CompactionReport | RawReport | VerifyReport) -> str:
    """The printable form of a report: what was checked, what was found, the verdict."""
    if isinstance(report, LogicalReport):
        return render_logical(report)
    if isinstance(report, CompactionReport):
        return render_compaction(report)
    if isinstance(report, RawReport):
        return render_raw(report)
    parts = []
    if report.request_id:
        parts.append(f"Forget request {report.request_id}: needles "
                     + ", ".join(f"{i} = {what}" for i, what in enumerate(report.needles)))
    parts.append(render_logical(report.logical))
    if report.compaction is not None:
        parts.append(render_compaction(report.compaction))
    if report.raw is not None:
        parts.append(render_raw(report.raw))
    parts += [f"error: {e}" for e in report.errors]
    parts.append(f"verify-forgotten: {_verdict(report.clean)}")
    return "\n\n".join(parts)
