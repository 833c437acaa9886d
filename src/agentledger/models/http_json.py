"""JSON POSTs to an OpenAI-compatible endpoint, with the standard library in a worker thread.

The hosted embedder (``embedding.OpenAIEmbedder``) and the compactor
(``compactors.OpenAICompactor``) both call such an endpoint, and must get the
same things right: an ``http(s)`` base URL checked when configured, the API key
read from a file, sent as a bearer token and shown in no message, repr or log
(an error reply is quoted with it scrubbed), and every failure a typed error:
unreachable, timed out, 429 or 5xx is retryable, any other status is not. The timeout bounds the
whole exchange, not each read: a server that trickles its reply a byte at a time still fails when
the time is up, instead of holding the caller (a memory decision waiting on its judge) for ever.
"""

from __future__ import annotations

import asyncio
import http.client
import json
import ssl
import time
from collections.abc import Callable
from pathlib import Path
from typing import Any
from urllib.parse import urlsplit

from agentledger.errors import AgentLedgerError, ContractError


class JsonEndpoint:
    """``POST {base_url}{route}`` with a JSON body; ``post`` returns the body of a 200 reply.

    ``what`` names the endpoint in messages ("embeddings" → "embeddings endpoint
    <url> answered 503: ..."), ``url_setting`` the setting a bad URL came from.
    ``unavailable`` makes the retryable error, ``rejected`` the one for any other
    status that is not 200.
    """

    # Bytes of an error reply quoted in the exception.
    quote = 200

    def __init__(self, base_url: str, route: str, api_key: str | None, *, timeout_s: float, what: str,
                 url_setting: str, unavailable: Callable[[str], AgentLedgerError],
                 rejected: Callable[[str], AgentLedgerError]) -> None:
        parts = urlsplit(base_url)
        if parts.scheme not in ("http", "https") or not parts.hostname:
            raise ContractError(f"{what} url {base_url!r} must be http(s)://host[:port]/path",
                                code="invalid_config", path=url_setting)
        self._https = parts.scheme == "https"
        self._host = parts.hostname
        self._port = parts.port
        self._path = parts.path.rstrip("/") + route
        self._key = api_key or None
        self._timeout_s = timeout_s
        self._what = what
        self._unavailable = unavailable
        self._rejected = rejected
        self.url = f"{parts.scheme}://{parts.netloc}{self._path}"

    async def post(self, body: dict[str, Any]) -> bytes:
        status, payload = await asyncio.to_thread(self._post, json.dumps(body).encode())
        if status == 429 or status >= 500:
            raise self._unavailable(f"{self._what} endpoint {self.url} answered {status}: {self.scrub(payload)}")
        if status != 200:
            raise self._rejected(f"{self._what} endpoint {self.url} answered {status}: {self.scrub(payload)}")
        return payload

    def scrub(self, payload: bytes) -> str:
        """The start of a reply, fit to quote in an error: the key, if the server echoed it, replaced."""
        text = payload[:self.quote].decode("utf-8", "replace")
        return text.replace(self._key, "[key]") if self._key else text

    def _post(self, body: bytes) -> tuple[int, bytes]:
        headers = {"Content-Type": "application/json", "Accept": "application/json"}
        if self._key:
            headers["Authorization"] = f"Bearer {self._key}"
        conn: http.client.HTTPConnection
        if self._https:
            conn = http.client.HTTPSConnection(self._host, self._port, timeout=self._timeout_s,
                                               context=ssl.create_default_context())
        else:
            conn = http.client.HTTPConnection(self._host, self._port, timeout=self._timeout_s)
        deadline = time.monotonic() + self._timeout_s
        try:
            conn.request("POST", self._path, body=body, headers=headers)
            # The response keeps reading from this socket after the connection lets go of it.
            sock = conn.sock
            sock.settimeout(_left(deadline))
            reply = conn.getresponse()
            chunks: list[bytes] = []
            while True:
                sock.settimeout(_left(deadline))
                if not (chunk := reply.read1(65536)):
                    return reply.status, b"".join(chunks)
                chunks.append(chunk)
        except (OSError, http.client.HTTPException) as exc:
            # TimeoutError and ConnectionError are OSErrors; the key is in no part of these.
            raise self._unavailable(f"{self._what} endpoint {self.url} failed: "
                                    f"{type(exc).__name__}: {exc}") from None
        finally:
            conn.close()


def _left(deadline: float) -> float:
    """Seconds until ``deadline``; a ``TimeoutError`` once it has passed."""
    left = deadline - time.monotonic()
    if left <= 0:
        raise TimeoutError("timed out")
    return left


def read_key(path: Path, what: str, setting: str) -> str:
    """The API key in ``path`` (one line); a ``ContractError`` naming ``setting`` that never quotes it."""
    try:
        key = path.read_text().strip()
    except OSError as exc:
        raise ContractError(f"cannot read the {what} key file {path}: {exc.strerror}", code="invalid_config",
                            path=setting) from None
    if not key or any(c.isspace() for c in key):
        raise ContractError(f"the {what} key file {path} must hold one key on one line", code="invalid_config",
                            path=setting)
    return key
