"""Stand-ins for the outside parties the model adapters talk to (import as ``from fake_http import ...``).

``serve`` runs a fake OpenAI-compatible endpoint on 127.0.0.1 whose behaviour a test sets
through ``FakeServer.mode``: the hosted services are parties we cannot run, and the adapters'
promises (typed errors, timeouts, the key never quoted) are about how they answer. The parts
every fake shares live here — recording each request, a 404 for any other path,
``status:<code>`` replies whose body quotes the credential as a careless server might, a
``slow`` mode, and ``trickle:<mode>``, the reply of ``<mode>`` sent a few bytes at a time over
about four seconds, each pause far shorter than any read timeout — and each test module answers
the rest.

``REFUSE_NETWORK`` is the start of a script for a fresh interpreter in which every socket is
refused: what must load offline is loaded after it.
"""

from __future__ import annotations

import contextlib
import json
import threading
import time
from collections.abc import Callable, Iterator
from dataclasses import dataclass, field
from http.server import BaseHTTPRequestHandler, ThreadingHTTPServer
from typing import Any, TypeVar

REFUSE_NETWORK = r"""
import json, socket, sys

def refuse(*args, **kwargs):
    raise OSError("network access attempted: " + repr(args)[:200])

socket.socket.connect = refuse
socket.socket.connect_ex = refuse
socket.create_connection = refuse
socket.getaddrinfo = refuse
"""


# ``trickle:`` sends a reply in this many pieces, this far apart: about four seconds in all.
TRICKLE_PIECES = 20
TRICKLE_PAUSE_S = 0.2


@dataclass
class FakeServer:
    """A fake endpoint's address (``url``, ending in ``/v1``), behaviour and the requests it got."""

    url: str = ""
    mode: str = "ok"
    requests: list[dict[str, Any]] = field(default_factory=list)


F = TypeVar("F", bound=FakeServer)
# (fake, request body, mode) -> (status, reply body), for a request the shared part did not answer.
Answer = Callable[[F, dict[str, Any], str], tuple[int, bytes]]


@contextlib.contextmanager
def serve(fake: F, path: str, answer: Answer[F]) -> Iterator[F]:
    """Serve ``fake`` on a free port of 127.0.0.1: POSTs to ``path`` are answered by ``answer``."""

    class Handler(BaseHTTPRequestHandler):
        def log_message(self, format: str, *args: Any) -> None:
            pass

        def _reply(self, status: int, body: bytes, pieces: int = 1) -> None:
            # A client that timed out has gone: nothing to tell it.
            with contextlib.suppress(ConnectionError):
                self.send_response(status)
                self.send_header("Content-Type", "application/json")
                self.send_header("Content-Length", str(len(body)))
                self.end_headers()
                step = -(-len(body) // pieces)
                for i in range(0, len(body), step):
                    if i:
                        time.sleep(TRICKLE_PAUSE_S)
                    self.wfile.write(body[i:i + step])
                    self.wfile.flush()

        def do_POST(self) -> None:
            body = json.loads(self.rfile.read(int(self.headers["Content-Length"])))
            fake.requests.append({"path": self.path, "auth": self.headers.get("Authorization"), "body": body})
            mode = fake.mode
            if self.path != path:
                return self._reply(404, b'{"error": "no such path"}')
            if mode.startswith("status:"):
                # An error body that quotes the credential, as a careless server might.
                return self._reply(int(mode[7:]), json.dumps({"error": f"bad {self.headers.get('Authorization')}"})
                                   .encode())
            if mode == "slow":
                time.sleep(1.0)
            if mode.startswith("trickle:"):
                return self._reply(*answer(fake, body, mode[8:]), pieces=TRICKLE_PIECES)
            return self._reply(*answer(fake, body, mode))

    server = ThreadingHTTPServer(("127.0.0.1", 0), Handler)
    server.daemon_threads = True
    server.block_on_close = False
    fake.url = f"http://127.0.0.1:{server.server_address[1]}/v1"
    thread = threading.Thread(target=server.serve_forever, args=(0.05,), daemon=True)
    thread.start()
    try:
        yield fake
    finally:
        server.shutdown()
        server.server_close()
        thread.join(timeout=5)
