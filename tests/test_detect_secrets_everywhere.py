"""Secrets that got through the writer's redaction (issue 26 item 8), on their corpora.

* encoded: percent-encoded credential URLs (once, twice, every byte) and base64 / base64url
  of tokens, assignments and URLs (``tests/corpora/secrets_encoded.txt``);
* split: a token cut into two or three strings of one event (``secrets_split.txt``);
* in names: a token in ``trace_id``, a step's ``tool``, ``error_code``, a variable or output
  name, ``producer``, a JSON member name;
* benign: percent-encoded URLs, base64 of ordinary text and binary data, the ids of common
  systems and public keys (``benign_encoded_ids.txt``), random ids as ids and names;
* the marker: keyed, so a dictionary of guesses confirms nothing without the key.

The measured figures are printed (run with ``-s``).
"""

from __future__ import annotations

import random
import string
import uuid
from pathlib import Path
from typing import Any

import blake3
import msgspec
import pytest

from agentledger.contracts import events as ev
from agentledger.contracts.codec import decode_event
from agentledger.core.detect import derive_marker_key, find_secrets, marker, redact_event, redact_secrets

CORPORA = Path(__file__).parent / "corpora"


def _lines(name: str) -> list[str]:
    return [line.replace("\\n", "\n") for line in (CORPORA / name).read_text(encoding="utf-8").splitlines()
            if line.strip() and not line.startswith("#")]


ENCODED = [tuple(line.split("\t", 1)) for line in _lines("secrets_encoded.txt")]
SPLIT = [(parts[0], parts[1:]) for parts in (line.split("\t") for line in _lines("secrets_split.txt"))]
TOKENS = [(kind, text) for kind, text in (line.split("\t", 1) for line in _lines("secrets.txt"))
          if kind not in {"credential", "high_entropy", "private_key"} and len(text) <= 100 and "\n" not in text]
BENIGN = _lines("benign_encoded_ids.txt")


def _event(kind: str, payload: dict[str, Any], **extra: Any) -> ev.EventBase:
    body = {"kind": kind, "event_id": "e1", "tenant": "acme", "task_id": "t1", "producer": "agent-1",
            "occurred_at": "2026-11-29T10:00:00Z", "schema_version": 1, "payload": payload, **extra}
    return decode_event(msgspec.json.encode(body), "$")


def _stored(e: ev.EventBase) -> str:
    return msgspec.json.encode(e).decode()


def test_encoded_secrets_are_found_and_the_whole_encoded_run_is_redacted() -> None:
    """Protects issue 26 item 8: URL- and base64-encoded forms are decoded before the scan."""
    assert len(ENCODED) >= 50 and len({k for k, _ in ENCODED}) >= 8  # corpora big enough to say something
    assert len(SPLIT) >= 20 and len(TOKENS) >= 25 and len(BENIGN) >= 150
    missed = [(k, t) for k, t in ENCODED if k not in {f.kind for f in find_secrets(t)}]
    print(f"\nencoded secrets found with their kind: {len(ENCODED) - len(missed)}/{len(ENCODED)}")
    assert missed == []
    for _, text in ENCODED:
        redacted, found = redact_secrets(text)
        for f in found:
            assert text[f.start:f.end] not in redacted


def test_benign_encodings_ids_and_public_keys_are_not_secrets() -> None:
    """Protects the false-positive rate: decoding must not turn an encoded URL or ordinary
    base64 into a finding, and public keys, data URIs, integrity digests and API ids
    (``call_…``, ``chatcmpl-…``, ``cus_…``) are not high-entropy secrets."""
    flagged = [(line, [line[f.start:f.end] for f in fs]) for line in BENIGN if (fs := find_secrets(line))]
    print(f"\nbenign encoded / id / public-key lines flagged: {len(flagged)}/{len(BENIGN)}")
    assert flagged == []


def _pieces_left(parts: list[str], stored: str) -> list[str]:
    """The pieces of the split secret still in ``stored``: each part's last word (but the last
    part's) and first word (but the first part's)."""
    words = [w for i, p in enumerate(parts)
             for w in ([p.split()[0]] if i else []) + ([p.split()[-1]] if i < len(parts) - 1 else [])]
    return [w for w in words if w in stored]


def test_a_secret_split_across_strings_of_one_event_is_redacted() -> None:
    """Protects issue 26 item 8: a token cut into adjacent strings (items of a value), or into
    two fields far apart (the message and the trace id), is found on the joined edges; the
    start of the token is always redacted, so it cannot be put back together."""
    whole_adjacent = whole_apart = apart_total = 0
    for kind, parts in SPLIT:
        out, n = redact_event(_event("variable_set", {"name": "x", "value": parts}))
        stored = _stored(out)
        assert n and parts[0].split()[-1] not in stored, (kind, parts)
        whole_adjacent += not _pieces_left(parts, stored)
        if len(parts) == 2:
            apart_total += 1
            e = _event("step_failed", {"plan_version": 1, "step_id": "S1", "error_code": "e",
                                       "message": parts[0]}, trace_id=parts[1][:128])
            out, n = redact_event(e)
            stored = _stored(out)
            assert n and parts[0].split()[-1] not in stored, (kind, parts)
            whole_apart += not _pieces_left(parts, stored)
    print(f"\nsplit secrets with every piece redacted: adjacent {whole_adjacent}/{len(SPLIT)}, "
          f"message + trace id {whole_apart}/{apart_total} (the rest: the first piece is a token "
          "of its own and is redacted, the others are left)")
    # A whole token followed by one-word strings and ids is that token, not a split one: the
    # event is redacted, not refused for a "secret" running on into its event id.
    token = "sk_live_" + "aB3dE5fG7hJ9kL1mN3pQ5rS7"
    out, n = redact_event(_event("variable_set", {"name": "deploy", "value": {"api_key": token, "note": "x"}},
                                 event_id=uuid.uuid4().hex))
    assert n == 1 and token not in _stored(out)


def _in(field: str, token: str) -> ev.EventBase:
    if field == "trace_id":
        return _event("step_started", {"plan_version": 1, "step_id": "S1"}, trace_id=token)
    if field == "tool":
        return _event("plan_versioned", {"plan_id": "p", "version": 1, "steps": [{"id": "S1", "tool": token}]})
    if field == "error_code":
        return _event("step_failed", {"plan_version": 1, "step_id": "S1", "error_code": token})
    if field == "variable name":
        return _event("variable_set", {"name": token, "value": 1})
    if field == "output name":
        return _event("step_succeeded", {"plan_version": 1, "step_id": "S1", "outputs": [{"name": token}]})
    if field == "JSON member name":
        return _event("variable_set", {"name": "v", "value": {token: 1}})
    return _event("variable_set", {"name": "v", "value": 1}, producer=token)


FIELDS = ["trace_id", "tool", "error_code", "variable name", "output name", "JSON member name", "producer"]


@pytest.mark.parametrize("field", FIELDS)
def test_a_token_in_a_name_is_redacted_and_a_random_id_is_not(field: str) -> None:
    """Protects issue 26 item 8: names are scanned with every rule but the shape-only one, so
    a token there is redacted while random ids (UUIDs, hex, nanoids, tool call ids), which
    names and ids are full of, are left alone."""
    missed = [t for _, t in TOKENS if t in _stored(redact_event(_in(field, t))[0])]
    r = random.Random(field)
    alphabet = string.ascii_letters + string.digits
    ids = [str(uuid.UUID(int=r.getrandbits(128), version=4)) for _ in range(100)]
    ids += [f"{r.getrandbits(256):064x}" for _ in range(100)]
    ids += ["".join(r.choice(alphabet + "_-") for _ in range(21)) for _ in range(100)]
    ids += ["call_" + "".join(r.choice(alphabet) for _ in range(24)) for _ in range(100)]
    redacted = [i for i in ids if redact_event(_in(field, i))[1]]
    print(f"\n{field}: tokens redacted {len(TOKENS) - len(missed)}/{len(TOKENS)}, "
          f"random ids redacted {len(redacted)}/{len(ids)}")
    assert missed == []
    assert redacted == []


def test_the_marker_is_keyed_so_a_guess_cannot_be_confirmed() -> None:
    """Protects issue 26 item 8: the 8 hex of a marker are a keyed hash; without the key, a
    dictionary of weak passwords finds no match (with the unkeyed hash it did at once), and
    with it the marker is reproducible (a retried append is a duplicate)."""
    dictionary = [f"{w}{n}" for w in ("password", "hunter", "letmein", "dragon", "monkey") for n in range(20)]
    weak = dictionary[37]
    key = derive_marker_key(b"k" * 32)
    redacted, _ = redact_secrets(f"password={weak}", key=key)
    mac = redacted.rsplit(":", 1)[1].rstrip("]")
    assert [w for w in dictionary if blake3.blake3(w.encode()).hexdigest()[:8] == mac] == []
    assert redacted == redact_secrets(f"password={weak}", key=key)[0]
    assert marker("credential", weak, key) in redacted
    assert marker("credential", weak, derive_marker_key(b"o" * 32)) not in redacted
    assert derive_marker_key(b"k" * 32) == key and key != b"k" * 32
