"""Text embedders for the memory index: WordLlama offline by default, or a hosted model.

The service calls an embedder from asyncio, so the one method of the protocol is
``async def embed(texts)``. WordLlama is a table lookup and a mean (~20 µs per short text), so
it runs inline, yielding to the loop between chunks; the HTTP adapter does its blocking I/O in
a worker thread with the standard library only (``http_json``, shared with the compactor).

Every vector returned has unit length (dot product = cosine), so vectors from different
embedders can be compared with the same SQL. ``name`` identifies the model that made a vector:
stored vectors are tagged with it and re-embedded when the configured embedder changes.
"""

from __future__ import annotations

import asyncio
import functools
import json
import math
import threading
from collections.abc import Sequence
from pathlib import Path
from typing import TYPE_CHECKING, Any, Protocol, cast, runtime_checkable

from agentledger.config import Settings
from agentledger.errors import AgentLedgerError, ContractError, UnavailableError
from agentledger.models.http_json import JsonEndpoint, read_key

if TYPE_CHECKING:
    import numpy as np


class EmbedderError(AgentLedgerError):
    """An embedder answered, but not with what the protocol promises (status, shape, size)."""

    code = "embedder_failed"


class EmbedderUnavailableError(UnavailableError):
    """The embeddings endpoint could not be reached, timed out, or is overloaded (429, 5xx)."""

    code = "embedder_unavailable"


@runtime_checkable
class Embedder(Protocol):
    """What the memory service needs from an embedding model."""

    name: str
    dims: int

    async def embed(self, texts: list[str]) -> list[list[float]]:
        """One unit-length vector of ``dims`` floats per text, in the order of ``texts``."""
        ...


class WordLlamaEmbedder:
    """WordLlama ``l2_supercat`` at 256 dimensions: weights and tokenizer ship in its wheel.

    ``WordLlama.load()`` looks for the tokenizer in the wrong folder and then downloads it; with
    ``cache_dir`` set to the package folder and downloads disabled it finds the bundled files and
    never touches the network (a missing file is an error, not a download).
    """

    name = "wordllama/l2_supercat/256"
    dims = 256
    # Texts embedded between two yields to the event loop (~5 ms of CPU).
    chunk = 256

    def __init__(self) -> None:
        self._model: Any = None
        # The model keeps numpy buffers it reuses per call; one caller at a time. The same lock
        # keeps two threads from each loading it.
        self._lock = threading.Lock()
        self._loading: asyncio.Future[None] | None = None

    def load(self) -> None:
        """Load the model now (~0.2-1 s: the import, then the weights), if it is not loaded: a
        service does it in a worker thread once its endpoints answer (``Parts.warm``)."""
        with self._lock:
            if self._model is None:
                import wordllama  # noqa: PLC0415 - paid only by processes that embed

                self._model = wordllama.WordLlama.load(config="l2_supercat", dim=self.dims,
                                                       cache_dir=Path(wordllama.__file__).parent,
                                                       disable_download=True)

    def embed_sync(self, texts: Sequence[str]) -> list[list[float]]:
        """The vectors of ``texts``, computed in the calling thread (for replay and benchmarks)."""
        if not texts:
            return []
        self.load()
        with self._lock:
            raw = self._model.embed(list(texts), norm=False)
        return cast(list[list[float]], _unit_rows(raw).tolist())

    async def embed(self, texts: list[str]) -> list[list[float]]:
        if self._model is None:
            # Loaded in a worker thread (once, however many callers wait): the loop keeps serving.
            if self._loading is None:
                self._loading = asyncio.ensure_future(asyncio.to_thread(self.load))
            await asyncio.shield(self._loading)
        out: list[list[float]] = []
        for start in range(0, len(texts), self.chunk):
            if start:
                await asyncio.sleep(0)
            out.extend(self.embed_sync(texts[start:start + self.chunk]))
        return out


class OpenAIEmbedder:
    """Client of an OpenAI-compatible ``POST {base_url}/embeddings`` endpoint.

    ``base_url`` includes the API version, as in the OpenAI SDKs (``https://api.openai.com/v1``,
    ``http://127.0.0.1:8080/v1``). ``dims`` is the vector size every reply must have (``None``:
    whatever the first reply has, then fixed). With ``send_dimensions`` the request asks for
    ``dims`` (the ``dimensions`` parameter of text-embedding-3 models). The API key is sent as a
    bearer token and appears in no message, repr or log.
    """

    # Inputs per request; OpenAI accepts up to 2048, smaller servers less.
    max_batch = 256

    def __init__(self, base_url: str, model: str, api_key: str | None = None, dims: int | None = None,
                 *, timeout_s: float = 30.0, send_dimensions: bool = False) -> None:
        self._endpoint = JsonEndpoint(base_url, "/embeddings", api_key, timeout_s=timeout_s, what="embeddings",
                                      url_setting="AGENTLEDGER_EMBEDDINGS_URL", unavailable=EmbedderUnavailableError,
                                      rejected=functools.partial(EmbedderError, code="embedder_rejected"))
        if not model:
            raise ContractError("an embeddings model is required", code="invalid_config",
                                path="AGENTLEDGER_EMBEDDINGS_MODEL")
        if dims is not None and dims <= 0:
            raise ContractError(f"dims must be positive, not {dims}", code="invalid_config",
                                path="AGENTLEDGER_EMBEDDINGS_DIMS")
        if send_dimensions and dims is None:
            raise ContractError("send_dimensions needs dims", code="invalid_config",
                                path="AGENTLEDGER_EMBEDDINGS_SEND_DIMS")
        self._send_dimensions = send_dimensions
        self.model = model
        self.name = f"openai/{model}"
        # 0 until the first reply when not configured.
        self.dims = dims or 0
        self.url = self._endpoint.url

    def __repr__(self) -> str:
        return f"OpenAIEmbedder(url={self.url!r}, model={self.model!r}, dims={self.dims})"

    async def embed(self, texts: list[str]) -> list[list[float]]:
        out: list[list[float]] = []
        for start in range(0, len(texts), self.max_batch):
            out.extend(await self._embed_batch(texts[start:start + self.max_batch]))
        return out

    async def _embed_batch(self, texts: list[str]) -> list[list[float]]:
        body: dict[str, Any] = {"model": self.model, "input": texts, "encoding_format": "float"}
        if self._send_dimensions:
            body["dimensions"] = self.dims
        return self._vectors(await self._endpoint.post(body), len(texts))

    def _vectors(self, payload: bytes, expected: int) -> list[list[float]]:
        try:
            reply = json.loads(payload)
            data = reply["data"]
            rows = sorted(data, key=lambda row: row["index"])
            indexes = [row["index"] for row in rows]
            vectors = [row["embedding"] for row in rows]
        except (ValueError, KeyError, TypeError) as exc:
            raise EmbedderError(f"embeddings reply is not an OpenAI embeddings list: {exc!r}; "
                                f"{self._endpoint.scrub(payload)}", code="embedder_bad_reply") from None
        if len(vectors) != expected or indexes != list(range(expected)):
            raise EmbedderError(f"embeddings reply has {len(vectors)} vectors with indexes {indexes[:10]}, "
                                f"expected {expected} (0..{expected - 1})", code="embedder_wrong_count")
        dims = self.dims
        for i, vector in enumerate(vectors):
            if not isinstance(vector, list) or not all(_is_number(x) for x in vector):
                raise EmbedderError(f"embedding {i} is not a list of finite numbers "
                                    "(a base64 reply? the request asks for floats)", code="embedder_bad_reply")
            if dims == 0:
                dims = len(vector)
            if len(vector) != dims or dims == 0:
                raise EmbedderError(f"embedding {i} has {len(vector)} dimensions, expected {dims}",
                                    code="embedder_wrong_dims")
        self.dims = dims
        import numpy as np  # noqa: PLC0415 - see _unit_rows

        return cast(list[list[float]], _unit_rows(np.asarray(vectors, dtype=np.float64)).tolist())


def load_embedder(settings: Settings) -> Embedder:
    """The embedder ``settings`` name: ``embedder`` is ``wordllama`` or ``openai``."""
    if settings.embedder == "wordllama":
        return WordLlamaEmbedder()
    if settings.embedder == "openai":
        key_file = settings.embeddings_key_file
        key = read_key(key_file, "embeddings", "AGENTLEDGER_EMBEDDINGS_KEY_FILE") if key_file else None
        return OpenAIEmbedder(settings.embeddings_url, settings.embeddings_model, key,
                              settings.embeddings_dims or None, timeout_s=settings.embeddings_timeout_s,
                              send_dimensions=settings.embeddings_send_dims)
    raise ContractError(f"unknown embedder {settings.embedder!r}; known: wordllama, openai",
                        code="invalid_config", path="AGENTLEDGER_EMBEDDER")


def _is_number(x: object) -> bool:
    return isinstance(x, int | float) and not isinstance(x, bool) and math.isfinite(x)


def _unit_rows(matrix: np.ndarray) -> np.ndarray:
    """Rows scaled to unit length; a zero row (a text with no token) stays zero.

    numpy is imported here, not by the module: a process that never embeds (and one that has
    not yet) does not pay for it (~0.1 s)."""
    import numpy as np  # noqa: PLC0415

    norms = np.linalg.norm(matrix, axis=1, keepdims=True)
    unit: np.ndarray = np.divide(matrix, norms, out=np.zeros_like(matrix), where=norms > 0)
    return unit
