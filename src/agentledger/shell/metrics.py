"""Prometheus metrics of one agentledger process: its registry, its scrape endpoint, its series.

Every service process (and the supervisor) serves one scrape endpoint, started by the shell
(``Shell.start``) so that no service writes its own: an HTTP server on ``metrics_host``
(loopback by default: a scrape shows traffic shapes and error codes, which are not for every
neighbour) and ``metrics_port`` (0: any free port; -1: none). The port a process bound is
written beside its ready file (``port_file``), where the supervisor reads it into
runtime.json and ``agentledger status`` shows it.

The series are declared here, once, so docs/operations.md can list them and a test can compare
the two; each is recorded with one line where the service decides what it counts. Labels hold
codes, reasons, rule and gate names, partitions and process names: bounded sets, never content.
A tenant id is a label only where a series declares ``tenant=True`` and only when
``metrics_tenants`` opts in, for at most that many distinct tenants (the rest are ``other``),
so a deployment with ten thousand tenants cannot grow a series per tenant by accident.

One registry of its own per process, not prometheus_client's global default, into which any
imported library may register: a scrape shows what agentledger declares, plus the process and
Python runtime collectors. The services of one process (tests run several) share it, and the one
endpoint, which the first of them opens and the last one to stop closes.
"""

from __future__ import annotations

import threading
import time
from collections.abc import Iterable, Iterator
from contextlib import contextmanager
from pathlib import Path
from typing import Any

import msgspec
from prometheus_client import (
    CollectorRegistry,
    Counter,
    Gauge,
    Histogram,
    disable_created_metrics,
    start_http_server,
)
from prometheus_client.gc_collector import GCCollector
from prometheus_client.platform_collector import PlatformCollector
from prometheus_client.process_collector import ProcessCollector

from agentledger.config import Settings
from agentledger.errors import AgentLedgerError

# A counter's `_created` twin doubles every scrape for a timestamp nothing here reads.
disable_created_metrics()  # type: ignore[no-untyped-call]
REGISTRY = CollectorRegistry()
ProcessCollector(registry=REGISTRY)
PlatformCollector(registry=REGISTRY)
GCCollector(registry=REGISTRY)

# What a tenant beyond ``metrics_tenants`` is counted as.
OTHER_TENANT = "other"
# Latencies from a fraction of a millisecond (an append that joins a batch) to a slow build.
_SECONDS = (0.0005, 0.001, 0.0025, 0.005, 0.01, 0.025, 0.05, 0.1, 0.25, 0.5, 1.0, 2.5, 5.0, 10.0, 30.0)
_COUNTS = (1, 2, 5, 10, 20, 50, 100, 200, 500, 1000)
_TOKENS = (100, 500, 1000, 2000, 4000, 8000, 16000, 32000, 64000, 128000, 256000)


class _Tenants:
    """The tenants named in labels: the first ``cap`` seen, in order; every later one is ``other``."""

    def __init__(self, cap: int) -> None:
        self._lock = threading.Lock()
        self._named: set[str] = set()
        self.cap = cap

    def reset(self, cap: int) -> None:
        with self._lock:
            self.cap, self._named = cap, set()

    def label(self, tenant: str) -> str:
        if tenant in self._named:
            return tenant
        with self._lock:
            if len(self._named) < self.cap:
                self._named.add(tenant)
                return tenant
        return OTHER_TENANT


_tenants = _Tenants(0)


class Series:
    """One series family: a counter, gauge or histogram of ``REGISTRY``, recorded in one call.

    ``inc``, ``set`` and ``observe`` take the labels as keywords; ``tenant=`` is dropped unless
    the family declares ``tenant=True`` and ``metrics_tenants`` opts in, so a call site passes
    it whatever the setting says.
    """

    def __init__(self, kind: type[Counter | Gauge | Histogram], name: str, doc: str,
                 labels: tuple[str, ...] = (), *, tenant: bool = False,
                 buckets: tuple[float, ...] | None = None) -> None:
        self.kind, self.name, self.doc, self.labels, self.tenant = kind, name, doc, labels, tenant
        self._buckets = buckets
        self._metric: Any = None
        ALL.append(self)
        self._build()

    @property
    def exported(self) -> str:
        """The name a scrape shows (prometheus_client adds ``_total`` to a counter's)."""
        return f"{self.name}_total" if self.kind is Counter else self.name

    def label_names(self) -> tuple[str, ...]:
        return (*self.labels, "tenant") if self.tenant and _tenants.cap else self.labels

    def _build(self) -> None:
        if self._metric is not None:
            REGISTRY.unregister(self._metric)
        kw: dict[str, Any] = {"registry": REGISTRY}
        if self._buckets is not None:
            kw["buckets"] = self._buckets
        self._metric = self.kind(self.name, self.doc, self.label_names(), **kw)

    def _child(self, labels: dict[str, Any]) -> Any:
        tenant = labels.pop("tenant", None)
        if self.tenant and _tenants.cap:
            labels["tenant"] = _tenants.label(str(tenant))
        return self._metric.labels(**labels) if labels else self._metric

    def inc(self, amount: float = 1, **labels: Any) -> None:
        self._child(labels).inc(amount)

    def set(self, value: float, **labels: Any) -> None:
        self._child(labels).set(value)

    def observe(self, value: float, **labels: Any) -> None:
        self._child(labels).observe(value)


ALL: list[Series] = []

# ---- the ledger writer --------------------------------------------------------------------
APPEND_REQUESTS = Series(Counter, "agentledger_append_requests",
                         "Append requests answered, by outcome (ok, refused, retry) and error code",
                         ("outcome", "code"))
APPEND_EVENTS = Series(Counter, "agentledger_append_events",
                       "Events in the append requests answered, by outcome and error code",
                       ("outcome", "code"))
APPEND_SECONDS = Series(Histogram, "agentledger_append_duration_seconds",
                        "From an append's arrival to its reply, by outcome", ("outcome",), buckets=_SECONDS)
BATCH_EVENTS = Series(Histogram, "agentledger_group_commit_batch_events",
                      "Events in one group-commit batch", buckets=_COUNTS)
LEDGER_ACK_SECONDS = Series(Histogram, "agentledger_ledger_ack_duration_seconds",
                            "From a publish to the ledger to JetStream's acknowledgement", buckets=_SECONDS)
QUOTA_REFUSALS = Series(Counter, "agentledger_quota_refusals",
                        "Requests refused by a tenant quota (append_rate, artifact_rate, ledger_bytes, "
                        "artifacts_bytes, memory_records)", ("quota",), tenant=True)
# ---- the projector and the other projections ---------------------------------------------
PROJECTION_LAG_EVENTS = Series(Gauge, "agentledger_projection_lag_events",
                               "Ledger messages of a projector partition not folded yet, at its last batch",
                               ("partition",))
PROJECTION_LAG_SECONDS = Series(Gauge, "agentledger_projection_lag_seconds",
                                "Age of the newest message a projector partition folded while more "
                                "were pending (0: caught up)", ("partition",))
CONSUMER_PENDING = Series(Gauge, "agentledger_consumer_pending_messages",
                          "Messages a projection's durable consumer has not delivered yet, at its last batch",
                          ("consumer",))
REDUCER_REJECTIONS = Series(Counter, "agentledger_reducer_rejections",
                            "Ledger events the projector recorded as rejections, by reason code", ("reason",))
# ---- the checkpointer -----------------------------------------------------------------------
CHECKPOINT_SAVES = Series(Counter, "agentledger_checkpoint_saves", "Checkpoints saved")
RESUMES = Series(Counter, "agentledger_resumes", "Resume requests answered, by status", ("status",))
# ---- memory-policy ---------------------------------------------------------------------------
MEMORY_DECISIONS = Series(Counter, "agentledger_memory_decisions",
                          "Memory proposals decided, by action and the rule that decided", ("action", "rule"),
                          tenant=True)
MEMORY_READ_SECONDS = Series(Histogram, "agentledger_memory_read_duration_seconds",
                             "Gated memory reads, from the request to the receipt", buckets=_SECONDS)
MEMORY_GATE_CANDIDATES = Series(Counter, "agentledger_memory_gate_candidates",
                                "Candidates of gated reads, by gate and whether they passed it",
                                ("gate", "result"))
# ---- context-builder -------------------------------------------------------------------------
CONTEXT_BUILDS = Series(Counter, "agentledger_context_builds",
                        "Context builds answered, by outcome (ok or the error code)", ("outcome",), tenant=True)
CONTEXT_TOKENS = Series(Histogram, "agentledger_context_build_tokens",
                        "Tokens of the selected branch of a new generation", buckets=_TOKENS)
CONTEXT_COMPACTIONS = Series(Counter, "agentledger_context_compactions",
                             "New generations by compaction outcome (compacted, fallback, not_needed)",
                             ("outcome",))
# ---- tombstone-fanout ------------------------------------------------------------------------
FORGET_SAGAS = Series(Gauge, "agentledger_forget_sagas",
                      "Forget requests by saga state: pending (at the worker's last look), failing", ("state",))
FORGET_COMPLETED = Series(Counter, "agentledger_forget_sagas_completed", "Forget requests taken to their receipt")
FORGET_STEP_SECONDS = Series(Histogram, "agentledger_forget_step_duration_seconds",
                             "Applying one forget request to one index, by index", ("index",), buckets=_SECONDS)
# ---- every process ---------------------------------------------------------------------------
SUPERVISOR_RESTARTS = Series(Counter, "agentledger_supervisor_restarts",
                             "Service processes the supervisor restarted, by process", ("process",))
INTEGRITY_REFUSALS = Series(Counter, "agentledger_integrity_refusals",
                            "Requests refused because a stored copy failed its integrity check, by store",
                            ("store",))


def configure(settings: Settings) -> None:
    """Apply ``metrics_tenants``; the families with a tenant label are made again (empty) only
    when the cap changes, so services of one process that share the settings share the counts."""
    if settings.metrics_tenants == _tenants.cap:
        return
    _tenants.reset(settings.metrics_tenants)
    for series in ALL:
        if series.tenant:
            series._build()


# ---- one-line recorders for the sites that need more than one call -------------------------

class _Reply(msgspec.Struct):
    ok: bool = False
    results: list[msgspec.Raw] = []
    error: _Error | None = None


class _Error(msgspec.Struct):
    code: str = ""
    retryable: bool = False


class _Events(msgspec.Struct):
    events: list[msgspec.Raw] = []


_reply_decoder = msgspec.json.Decoder(_Reply)
_events_decoder = msgspec.json.Decoder(_Events)


class _Watched:
    """A NATS request whose first reply is counted as an append's outcome and latency."""

    def __init__(self, req: Any) -> None:
        self._req, self._started, self._counted = req, time.perf_counter(), False

    def __getattr__(self, name: str) -> Any:
        return getattr(self._req, name)

    async def respond(self, data: bytes = b"", headers: dict[str, str] | None = None) -> None:
        if not self._counted:
            self._counted = True
            _count_append(self._req.data, data, time.perf_counter() - self._started)
        await self._req.respond(data, headers=headers)


def _count_append(request: bytes, reply: bytes, seconds: float) -> None:
    try:
        answer = _reply_decoder.decode(reply)
    except msgspec.DecodeError:
        answer = _Reply(error=_Error(code="internal", retryable=True))
    if answer.ok:
        outcome, code, events = "ok", "none", len(answer.results)
    else:
        error = answer.error or _Error(code="internal")
        outcome, code = ("retry" if error.retryable else "refused"), error.code or "none"
        try:
            events = len(_events_decoder.decode(request).events)
        except (msgspec.DecodeError, RecursionError):  # refused because it was not readable
            events = 0
    APPEND_REQUESTS.inc(outcome=outcome, code=code)
    APPEND_EVENTS.inc(events, outcome=outcome, code=code)
    APPEND_SECONDS.observe(seconds, outcome=outcome)


def appends(handle: Any) -> Any:
    """``handle`` (the writer's raw append handler) with each request's reply counted: outcome,
    code, events and latency from arrival to reply, whichever of its paths answers."""
    async def counted(req: Any) -> None:
        await handle(_Watched(req))
    return counted


def projected(partition: int, consumer: str, last: Any) -> None:
    """A projector partition's lag once a batch ending with message ``last`` is committed."""
    md = last.metadata
    pending = int(md.num_pending)
    PROJECTION_LAG_EVENTS.set(pending, partition=str(partition))
    lag = max(0.0, time.time() - md.timestamp.timestamp()) if pending else 0.0
    PROJECTION_LAG_SECONDS.set(lag, partition=str(partition))
    CONSUMER_PENDING.set(pending, consumer=consumer)


def consumed(consumer: str, last: Any) -> None:
    """A projection consumer's pending count once a batch ending with ``last`` is committed."""
    CONSUMER_PENDING.set(int(last.metadata.num_pending), consumer=consumer)


def rejected(reasons: Iterable[str]) -> None:
    for reason in reasons:
        REDUCER_REJECTIONS.inc(reason=reason)


def memory_decided(tenant: str, decisions: Iterable[Any]) -> None:
    """Decisions of one proposal request, by action and the rule that fired last (the one that
    decided; ``none`` when no rule fired)."""
    for d in decisions:
        MEMORY_DECISIONS.inc(action=d.action, rule=d.trace[-1].rule if d.trace else "none", tenant=tenant)


def memory_read(receipt: Any) -> None:
    """A gated read's latency and each gate's candidates, from its receipt."""
    MEMORY_READ_SECONDS.observe(receipt.latency_ms / 1000)
    for c in receipt.candidates:
        for g in c.gates:
            MEMORY_GATE_CANDIDATES.inc(gate=g.gate, result="passed" if g.passed else "stopped")


def context_built(gen: Any) -> None:
    """A new generation's tokens (of the branch it selected) and its compaction outcome."""
    tokens = next((b.tokens for b in gen.branches if b.name == gen.selected), 0)
    CONTEXT_TOKENS.observe(tokens)
    CONTEXT_COMPACTIONS.inc(outcome=gen.compaction.outcome if gen.compaction else "not_needed")


@contextmanager
def outcome(series: Series, **labels: Any) -> Iterator[None]:
    """Count what the block ends with in ``series``: ``outcome="ok"``, the code of the
    ``AgentLedgerError`` it raised, or ``internal``."""
    try:
        yield
    except AgentLedgerError as exc:
        series.inc(outcome=exc.code, **labels)
        raise
    except Exception:
        series.inc(outcome="internal", **labels)
        raise
    series.inc(outcome="ok", **labels)


def refused(exc: BaseException) -> None:
    """Count an integrity refusal answered to a caller, by the store it names."""
    if getattr(exc, "code", None) == "integrity_violation":
        INTEGRITY_REFUSALS.inc(store=getattr(exc, "where", None) or "unknown")


# ---- the scrape endpoint ---------------------------------------------------------------------

class _Server:
    """The process's HTTP server, shared by the services of one process (tests run several):
    started by the first ``open_endpoint``, shut down when the last one closes."""

    def __init__(self) -> None:
        self.lock = threading.Lock()
        self.users = 0
        self.httpd: Any = None


_server = _Server()


class Endpoint:
    """A hold on the process's scrape endpoint (``port`` None: none, ``metrics_port`` -1);
    ``close()`` (idempotent) lets it go."""

    def __init__(self, port: int | None, port_file: Path | None) -> None:
        self.port, self._port_file, self._closed = port, port_file, port is None

    async def close(self) -> None:
        self.close_now()

    def close_now(self) -> None:
        if self._closed:
            return
        self._closed = True
        if self._port_file is not None:
            self._port_file.unlink(missing_ok=True)
        with _server.lock:
            _server.users -= 1
            if _server.users == 0 and _server.httpd is not None:
                _server.httpd.shutdown()
                _server.httpd.server_close()
                _server.httpd = None


def open_endpoint(settings: Settings, write_to: Path | None = None) -> Endpoint:
    """Serve ``REGISTRY`` on ``metrics_host:metrics_port`` (unless it is -1) and write the bound
    port to ``write_to`` (default: beside the ready file, ``port_file``)."""
    configure(settings)
    if settings.metrics_port < 0:
        return Endpoint(None, None)
    with _server.lock:
        if _server.httpd is None:
            _server.httpd, _ = start_http_server(settings.metrics_port, settings.metrics_host, REGISTRY)
        _server.users += 1
        port = int(_server.httpd.server_port)
    target = write_to or (port_file(settings.ready_file) if settings.ready_file else None)
    if target is not None:
        target.parent.mkdir(parents=True, exist_ok=True)
        target.write_text(f"{port}\n")
    return Endpoint(port, target)


def port_file(ready_file: Path) -> Path:
    """Where a process with ``ready_file`` says which port its scrape endpoint bound."""
    return ready_file.with_name(ready_file.name + ".metrics")


def read_port(ready_file: Path) -> int | None:
    """The port a process with ``ready_file`` bound (None: none written, or unreadable)."""
    try:
        return int(port_file(ready_file).read_text().strip())
    except (OSError, ValueError):
        return None
