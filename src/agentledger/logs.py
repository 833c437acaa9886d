"""Structured JSON logs (structlog) with per-message context in contextvars.

Services bind tenant, task, event id, subject and sequence with
``structlog.contextvars.bound_contextvars`` around each message, so every line
logged while handling it carries them. Values are identifiers only: event
content, tokens and personal values are never passed to a logger.
"""

from __future__ import annotations

import logging
import sys
from collections.abc import MutableMapping
from typing import Any

import structlog

from agentledger.stores.outages import ANY, dependency


class _Stderr:
    """``sys.stderr`` as it is at each write, not as it was when logging was configured: a host
    that swaps it (a test runner capturing output, then closing what it captured into) must
    not leave every later log call writing to a closed file."""

    def write(self, text: str) -> int:
        return sys.stderr.write(text)

    def flush(self) -> None:
        sys.stderr.flush()


def _outage_without_traceback(_logger: Any, _method: str, event: MutableMapping[str, Any]) -> MutableMapping[str, Any]:
    """A dependency's outage logged with its exception (asyncpg's pool restoring its floor, a
    loop that retries) keeps its class, the dependency and its message, not its traceback: an
    outage is expected, and a traceback per retry would bury the lines that matter. Other
    exceptions (bugs, and an OSError no client library raised) keep theirs."""
    info = event.get("exc_info")
    exc = (sys.exc_info()[1] if info is True else info[1] if isinstance(info, tuple)
           else info if isinstance(info, BaseException) else None)
    if exc is not None and (what := dependency(exc)) not in (None, ANY):
        del event["exc_info"]
        event.setdefault("error", type(exc).__name__)
        event.setdefault("dependency", what)
        event.setdefault("detail", str(exc)[:300])
    return event


# The one processor chain every configuration uses, changed in place: a logger cached on its first
# use keeps the chain it was bound with, so a later ``configure`` (a command run in-process, a
# test's log capture) reaches loggers cached before it only through the same list.
_PROCESSORS: list[structlog.typing.Processor] = []


def configure(level: str = "info", service: str | None = None) -> None:
    """Configure structlog to write one JSON object per line to stderr, and route the standard
    library's logging there too: what asyncpg, nats-py and asyncio log themselves (a lost
    connection, "Task exception was never retrieved") becomes a JSON line with the logger's
    name and its traceback as a field, never a raw multi-line traceback in a JSON log; a
    dependency's outage without its traceback (``_outage_without_traceback``)."""
    threshold = logging.getLevelNamesMapping()[level.upper()]
    shared: list[structlog.typing.Processor] = [
        structlog.contextvars.merge_contextvars,
        structlog.processors.add_log_level,
        structlog.processors.TimeStamper(fmt="iso", utc=True),
    ]
    _PROCESSORS[:] = [*shared, _outage_without_traceback, structlog.processors.format_exc_info,
                      structlog.processors.JSONRenderer()]
    structlog.configure(
        processors=_PROCESSORS,
        wrapper_class=structlog.make_filtering_bound_logger(threshold),
        logger_factory=structlog.PrintLoggerFactory(file=_Stderr()),  # type: ignore[arg-type]
        cache_logger_on_first_use=True,
    )
    handler = logging.StreamHandler(_Stderr())  # type: ignore[arg-type]
    handler.setFormatter(structlog.stdlib.ProcessorFormatter(
        foreign_pre_chain=[*shared, structlog.stdlib.add_logger_name],
        processors=[structlog.stdlib.ProcessorFormatter.remove_processors_meta,
                    _outage_without_traceback, structlog.processors.format_exc_info,
                    structlog.processors.JSONRenderer()]))
    root = logging.getLogger()
    root.handlers = [handler]
    root.setLevel(max(threshold, logging.WARNING))
    if service:
        structlog.contextvars.bind_contextvars(service=service)
