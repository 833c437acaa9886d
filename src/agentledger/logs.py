"""Structured JSON logs (structlog) with per-message context in contextvars.

Services bind tenant, task, event id, subject and sequence with
``structlog.contextvars.bound_contextvars`` around each message, so every line
logged while handling it carries them. Values are identifiers only: event
content, tokens and personal values are never passed to a logger.
"""

from __future__ import annotations

import logging
import sys

import structlog


def configure(level: str = "info", service: str | None = None) -> None:
    """Configure structlog to write one JSON object per line to stderr."""
    structlog.configure(
        processors=[
            structlog.contextvars.merge_contextvars,
            structlog.processors.add_log_level,
            structlog.processors.TimeStamper(fmt="iso", utc=True),
            structlog.processors.format_exc_info,
            structlog.processors.JSONRenderer(),
        ],
        wrapper_class=structlog.make_filtering_bound_logger(
            logging.getLevelNamesMapping()[level.upper()]),
        logger_factory=structlog.PrintLoggerFactory(file=sys.stderr),
        cache_logger_on_first_use=True,
    )
    if service:
        structlog.contextvars.bind_contextvars(service=service)
