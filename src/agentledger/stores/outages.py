"""Which exceptions mean a dependency is away, and what is away.

A PostgreSQL or NATS server that stops, restarts, loses its leader or refuses a
connection is an expected event of a running system, not a bug: the request it
broke answers a typed, retryable ``unavailable`` naming the dependency ("the
database", "JetStream", "NATS"), logged as one line with the error's class and no
traceback. Anything else that escapes a handler stays ``internal``: a bug.

``outage(exc)`` is the one classification every request path uses (the shell's
typed endpoints, the writer's own-wire endpoints, the projector's reads); the
background loops retry on the wider ``db.DATABASE_ERRORS``.
"""

from __future__ import annotations

from types import TracebackType

import asyncpg
import nats.errors
import nats.js.errors

from agentledger.errors import UnavailableError

DATABASE = "the database"
JETSTREAM = "JetStream"
NATS = "NATS"
SERVICE = "another agentledger service"
ANY = "a dependency"

# PostgreSQL away or refusing work for now: the connection was lost or refused (class 08), the
# server shuts down, restarts or cancelled the statement (57: AdminShutdownError,
# CannotConnectNowError, CrashShutdownError, QueryCanceledError), it is out of resources (53:
# too many connections, disk full); asyncpg's own connection or protocol state broken by it
# (InterfaceError: "connection is closed"; InternalClientError: "cannot switch to state 15").
DATABASE_OUTAGES: tuple[type[BaseException], ...] = (
    asyncpg.PostgresConnectionError, asyncpg.exceptions.OperatorInterventionError,
    asyncpg.exceptions.InsufficientResourcesError, asyncpg.InterfaceError, asyncpg.InternalClientError)

# The NATS connection lost, draining, reconnecting or full, or no one answered in time.
_CONNECTION = (nats.errors.ConnectionClosedError, nats.errors.ConnectionDrainingError,
               nats.errors.ConnectionReconnectingError, nats.errors.StaleConnectionError,
               nats.errors.OutboundBufferLimitError, nats.errors.NoServersError,
               nats.errors.FlushTimeoutError, nats.errors.TimeoutError)

# JetStream API errors of a cluster that cannot serve for now (a node lost, a leader being
# elected): 10004 incomplete results, 10005 no suitable peers, 10007 not assigned to this server,
# 10008 "JetStream system temporarily unavailable", 10009 "cluster can not handle request",
# 10118/10119 stream/consumer offline. Also any API error with status 503 or 500, and the
# ServiceUnavailableError nats-py raises (without a status) when no server answered the API.
_JETSTREAM_CODES = frozenset({10004, 10005, 10007, 10008, 10009, 10118, 10119})

# In order: a no-responders is a request to another service (JetStream's own come as
# ServiceUnavailableError, an APIError); NATS's timeouts are OSErrors too.
_KINDS: tuple[tuple[tuple[type[BaseException], ...], str], ...] = (
    (DATABASE_OUTAGES, DATABASE),
    ((nats.js.errors.NoStreamResponseError,), JETSTREAM),
    ((nats.errors.NoRespondersError,), SERVICE),
    (_CONNECTION, NATS),
)


def outage(exc: BaseException, also: tuple[type[BaseException], ...] = ()) -> UnavailableError | None:
    """The typed ``unavailable`` error that ``exc`` answers, naming the dependency; ``None`` when
    ``exc`` is no dependency's failure (a bug, answered ``internal``). ``also``: more errors a
    caller knows to be its dependency's trouble (the checkpointer's: any PostgreSQL error of a
    projection a replay is switching)."""
    what = dependency(exc, also)
    return None if what is None else UnavailableError(f"{what} is unavailable; retry")


def dependency(exc: BaseException, also: tuple[type[BaseException], ...] = ()) -> str | None:
    """What ``exc`` says is unavailable, or ``None`` when it is no dependency's failure."""
    if isinstance(exc, nats.js.errors.APIError):
        unavailable = (isinstance(exc, nats.js.errors.ServiceUnavailableError | nats.js.errors.ServerError)
                       or getattr(exc, "code", None) in (500, 503)
                       or getattr(exc, "err_code", None) in _JETSTREAM_CODES)
        return JETSTREAM if unavailable else None
    for kinds, what in _KINDS:
        if isinstance(exc, kinds):
            return what
    if isinstance(exc, (OSError, *also)):  # TimeoutError included: whose, the frames it came through say
        return _owner(exc) or ANY
    return None


def _owner(exc: BaseException) -> str | None:
    """The dependency whose client library defines or raised ``exc``."""
    return (_library(type(exc).__module__) or _raised_in(exc.__traceback__)
            or _raised_in(_context_traceback(exc)))


def _library(module: str) -> str | None:
    """The dependency a module of a client library talks to."""
    if module == "asyncpg" or module.startswith("asyncpg."):
        return DATABASE
    if module == "nats" or module.startswith("nats."):
        return NATS
    return None


def _raised_in(tb: TracebackType | None) -> str | None:
    """The dependency whose client library the innermost of these frames belongs to."""
    found = None
    while tb is not None:
        found = _library(tb.tb_frame.f_globals.get("__name__", "")) or found
        tb = tb.tb_next
    return found


def _context_traceback(exc: BaseException) -> TracebackType | None:
    """The traceback of what ``exc`` was raised over (a timeout raised over the cancelled call)."""
    inner = exc.__cause__ or exc.__context__
    return inner.__traceback__ if inner is not None else None
