"""Wire contracts: schema drift, golden examples, typed decode errors, writer-side checks."""

from __future__ import annotations

import copy
import json
import unicodedata
from pathlib import Path
from typing import Any

import blake3
import pytest

from agentledger.contracts import events as ev
from agentledger.contracts.codec import decode_append_request, decode_event, encode
from agentledger.contracts.export import SCHEMA_DIR, render_schemas
from agentledger.core.detect.events import redact_event
from agentledger.core.validate import check_batch, goal_hash
from agentledger.errors import ContractError

EXAMPLES = Path(ev.__file__).resolve().parent / "examples"


def load_example(name: str) -> dict[str, Any]:
    return json.loads((EXAMPLES / f"{name}.json").read_text(encoding="utf-8"))


def event_examples() -> list[Path]:
    return sorted(p for p in EXAMPLES.glob("*.json") if p.stem in ev.EVENT_TYPES)


# ---- (a) schema drift ----------------------------------------------------------

def test_schema_files_match_contracts() -> None:
    """The checked-in JSON Schema files are exactly what the current Structs export."""
    rendered = render_schemas()
    on_disk = {p.name: p.read_text(encoding="utf-8") for p in SCHEMA_DIR.glob("*.json")}
    stale = sorted(n for n in rendered.keys() | on_disk.keys() if rendered.get(n) != on_disk.get(n))
    assert not stale, (
        f"contracts/schema is out of date ({', '.join(stale)}); the wire contracts changed. "
        "Run `python -m agentledger.contracts.export` and commit the result with the contract change."
    )


def test_render_schemas_is_deterministic() -> None:
    """Two exports give identical text, so the drift check cannot flap."""
    assert render_schemas() == render_schemas()


def test_event_schema_is_a_discriminated_union_of_every_kind() -> None:
    """The event schema lets other languages dispatch on `kind` for every kind."""
    schema = json.loads(render_schemas()["event.schema.json"])
    assert schema["discriminator"]["propertyName"] == "kind"
    assert set(schema["discriminator"]["mapping"]) == set(ev.EVENT_TYPES)


# ---- (b) golden examples ----------------------------------------------------------

def test_every_kind_has_an_example() -> None:
    """Each event kind in EVENT_TYPES has a golden example file named after it."""
    assert {p.stem for p in event_examples()} == set(ev.EVENT_TYPES)


@pytest.mark.parametrize("path", event_examples(), ids=lambda p: p.stem)
def test_example_round_trips(path: Path) -> None:
    """A golden example decodes to its kind and re-encodes to the same JSON document."""
    raw = path.read_bytes()
    event = decode_event(raw)
    assert ev.kind_of(event) == path.stem
    assert json.loads(encode(event)) == json.loads(raw)


@pytest.mark.parametrize("path", event_examples(), ids=lambda p: p.stem)
def test_example_passes_writer_checks(path: Path) -> None:
    """A golden example is storable as sent by a client (hashes, plan, data subject); an example
    of a kind only the writer appends is refused from clients with ``reserved_kind``."""
    event = decode_event(path.read_bytes())
    if ev.kind_of(event) in ev.WRITER_ONLY_KINDS:
        with pytest.raises(ContractError) as info:
            check_batch([event])
        assert (info.value.code, info.value.path) == ("reserved_kind", "$.events[0].kind")
        return
    check_batch([event])


def test_task_created_example_goal_hash_is_real() -> None:
    """The task_created example pins its goal with the real goal_hash."""
    goal = load_example("task_created")["payload"]["goal"]
    assert goal["goal_hash"] == goal_hash(goal["text"], goal["acceptance_criteria"])


def test_personal_examples_are_plaintext_with_a_subject() -> None:
    """Client-side personal content is plaintext, never sealed, and names its data subject."""
    turn = load_example("turn_appended")
    assert turn["payload"]["content"] and "sealed" not in turn["payload"]
    assert turn["data_subject"]
    done = load_example("step_succeeded")
    personal = [o for o in done["payload"]["outputs"] if o.get("personal")]
    assert personal and all("sealed" not in o and "value" in o for o in personal)
    assert done["data_subject"]


def test_append_request_example_decodes_and_passes_checks() -> None:
    """The batch example decodes, holds two events of one task and passes check_batch."""
    raw = (EXAMPLES / "append_request.json").read_bytes()
    request = decode_append_request(raw)
    events = [decode_event(r, f"$.events[{i}]") for i, r in enumerate(request.events)]
    assert len(events) == 2
    check_batch(events)
    doc = json.loads(raw)
    assert [json.loads(encode(e)) for e in events] == doc["events"]
    assert request.expected_last_seq == doc["expected_last_seq"]


# ---- (c) decode errors ---------------------------------------------------------------

def _base() -> dict[str, Any]:
    return load_example("plan_versioned")


def _mutated(change: Any) -> bytes:
    doc = _base()
    change(doc)
    return json.dumps(doc).encode()


def _set(path: list[Any], value: Any) -> Any:
    def change(doc: dict[str, Any]) -> None:
        target: Any = doc
        for key in path[:-1]:
            target = target[key]
        target[path[-1]] = value
    return change


def _delete(path: list[Any]) -> Any:
    def change(doc: dict[str, Any]) -> None:
        target: Any = doc
        for key in path[:-1]:
            target = target[key]
        del target[path[-1]]
    return change


BAD_EVENTS = [
    pytest.param(b'{"event_id": "e1", "kind": ', "malformed_json", "$", id="truncated-json"),
    pytest.param(b"not json at all", "malformed_json", "$", id="not-json"),
    pytest.param(_mutated(_set(["kind"], "step_exploded")), "unknown_kind", "$.kind", id="unknown-kind"),
    pytest.param(_mutated(_delete(["kind"])), "missing_field", "$.kind", id="missing-kind"),
    pytest.param(_mutated(_set(["schema_version"], 2)), "unknown_schema_version",
                 "$.schema_version", id="schema-version-2"),
    pytest.param(_mutated(_delete(["producer"])), "missing_field", "$.producer",
                 id="missing-envelope-field"),
    pytest.param(_mutated(_delete(["payload", "plan_id"])), "missing_field", "$.payload.plan_id",
                 id="missing-payload-field"),
    pytest.param(_mutated(_delete(["payload", "steps", 1, "id"])), "missing_field",
                 "$.payload.steps[1].id", id="missing-step-id"),
    pytest.param(_mutated(_set(["priority"], "high")), "unknown_field", "$.priority",
                 id="extra-top-field"),
    pytest.param(_mutated(_set(["payload", "steps", 3, "retries"], 3)), "unknown_field",
                 "$.payload.steps[3].retries", id="extra-nested-field"),
    pytest.param(_mutated(_set(["payload", "steps", 2, "id"], 3)), "invalid_type",
                 "$.payload.steps[2].id", id="wrong-type-deep-in-plan"),
    pytest.param(_mutated(_set(["payload", "version"], "2")), "invalid_type", "$.payload.version",
                 id="wrong-type-version"),
    pytest.param(_mutated(_set(["tenant"], "a.b")), "invalid_token", "$.tenant", id="tenant-with-dot"),
    pytest.param(_mutated(_set(["task_id"], "x y")), "invalid_token", "$.task_id",
                 id="task-id-with-space"),
    pytest.param(_mutated(_set(["event_id"], "evt/1")), "invalid_token", "$.event_id",
                 id="event-id-with-slash"),
    pytest.param(_mutated(_set(["occurred_at"], "yesterday")), "invalid_value", "$.occurred_at",
                 id="bad-timestamp"),
    pytest.param(_mutated(_set(["occurred_at"], "2026-11-29T10:00:00")), "invalid_value",
                 "$.occurred_at", id="timestamp-without-offset"),
    pytest.param(_mutated(_set(["occurred_at"], "2026-11-29T10:00:00.250")), "invalid_value",
                 "$.occurred_at", id="fractional-timestamp-without-offset"),
]


@pytest.mark.parametrize("stamp", ["2026-11-29T10:00:00Z", "2026-11-29T10:00:00+00:00",
                                   "2026-11-29T11:30:00.5+01:30", "2026-11-29T05:00:00-05:00"])
def test_timestamps_with_an_offset_are_accepted(stamp: str) -> None:
    """RFC 3339 timestamps (Z or a numeric offset) decode, as aware datetimes."""
    event = decode_event(_mutated(_set(["occurred_at"], stamp)))
    assert event.occurred_at.utcoffset() is not None


def _budget_event(budget: dict[str, Any]) -> bytes:
    doc = load_example("task_created")
    doc["payload"]["budget"] = budget
    return json.dumps(doc).encode()


@pytest.mark.parametrize(("budget", "code", "path"), [
    pytest.param({"llm_tokens": 10, "tool_calls": -1}, "invalid_value",
                 "$.events[3].payload.budget.tool_calls", id="negative-limit"),
    pytest.param({"llm_tokens": "many"}, "invalid_type", "$.events[3].payload.budget.llm_tokens",
                 id="limit-not-an-int"),
    pytest.param({"usd-cents": 1, "gpu-hours": 2**60}, "invalid_value",
                 "$.events[3].payload.budget.gpu-hours", id="limit-too-large"),
    pytest.param({"llm_tokens": 10, "llm.tokens": 5}, "invalid_value",
                 '$.events[3].payload.budget["llm.tokens"]', id="key-not-a-token"),
])
def test_budget_errors_name_the_key(budget: dict[str, Any], code: str, path: str) -> None:
    """A bad budget entry is reported at its resource name, never at an index or `[...]`."""
    with pytest.raises(ContractError) as info:
        decode_event(_budget_event(budget), "$.events[3]")
    assert (info.value.code, info.value.path) == (code, path)


def test_turn_content_is_required_by_the_schema() -> None:
    """The schema, like the writer, requires a turn's content (or, stored, its sealed form)."""
    schema = json.loads((SCHEMA_DIR / "event.schema.json").read_text(encoding="utf-8"))
    payload = schema["$defs"]["TurnAppendedEvent"]["properties"]["payload"]
    assert payload["$ref"] == "#/$defs/TurnAppended"
    sent, stored = payload["oneOf"]
    assert sent == {"required": ["content"], "not": {"required": ["sealed"]}}
    assert stored == {"required": ["sealed"], "not": {"required": ["content"]}}


@pytest.mark.parametrize(("data", "code", "path"), BAD_EVENTS)
def test_decode_event_errors(data: bytes, code: str, path: str) -> None:
    """Bad event input raises ContractError with a stable code and the exact JSON path."""
    with pytest.raises(ContractError) as info:
        decode_event(data)
    assert (info.value.code, info.value.path) == (code, path)


@pytest.mark.parametrize(("data", "code", "path"), BAD_EVENTS)
def test_decode_event_errors_with_prefix(data: bytes, code: str, path: str) -> None:
    """With a prefix, the same errors name the event's place in the request."""
    with pytest.raises(ContractError) as info:
        decode_event(data, "$.events[3]")
    assert (info.value.code, info.value.path) == (code, "$.events[3]" + path[1:])


BAD_REQUESTS = [
    pytest.param(b'{"events": [', "malformed_json", "$", id="truncated"),
    pytest.param(b"{}", "missing_field", "$.events", id="no-events"),
    pytest.param(b'{"events": [{}], "expected_last_seq": 3, "dry_run": true}', "unknown_field",
                 "$.dry_run", id="extra-field"),
    pytest.param(b'{"events": [{}], "expected_last_seq": "3"}', "invalid_type",
                 "$.expected_last_seq", id="seq-as-string"),
    pytest.param(b'{"events": {}}', "invalid_type", "$.events", id="events-not-a-list"),
]


@pytest.mark.parametrize(("data", "code", "path"), BAD_REQUESTS)
def test_decode_append_request_errors(data: bytes, code: str, path: str) -> None:
    """A bad request envelope raises ContractError with its code and path."""
    with pytest.raises(ContractError) as info:
        decode_append_request(data)
    assert (info.value.code, info.value.path) == (code, path)


def _decode_batch(data: bytes) -> list[ev.EventBase]:
    request = decode_append_request(data)
    return [decode_event(r, f"$.events[{i}]") for i, r in enumerate(request.events)]


def test_batch_error_names_the_event_index() -> None:
    """A bad fourth event in a batch is reported at `$.events[3]` with the inner path."""
    good = [load_example(k) for k in ("plan_versioned", "step_started", "budget_reserved")]
    bad = _base()
    bad["payload"]["steps"][2]["id"] = 7
    data = json.dumps({"events": [*good, bad]}).encode()
    with pytest.raises(ContractError) as info:
        _decode_batch(data)
    assert (info.value.code, info.value.path) == ("invalid_type", "$.events[3].payload.steps[2].id")


def test_batch_token_error_names_the_event_index() -> None:
    """An invalid tenant token in the fourth event is `invalid_token` at `$.events[3].tenant`."""
    events = [load_example(k) for k in ("plan_versioned", "step_started", "budget_reserved")]
    events.append({**load_example("budget_consumed"), "tenant": "a.b"})
    with pytest.raises(ContractError) as info:
        _decode_batch(json.dumps({"events": events}).encode())
    assert (info.value.code, info.value.path) == ("invalid_token", "$.events[3].tenant")


# ---- (d) writer-side checks ------------------------------------------------------------

def _event(name: str, **changes: Any) -> dict[str, Any]:
    doc = copy.deepcopy(load_example(name))
    for key, value in changes.items():
        doc[key] = value
    return doc


def _check(*docs: dict[str, Any]) -> ContractError:
    events = [decode_event(json.dumps(d), f"$.events[{i}]") for i, d in enumerate(docs)]
    with pytest.raises(ContractError) as info:
        check_batch(events)
    return info.value


def _plan(steps: list[dict[str, Any]]) -> dict[str, Any]:
    doc = _event("plan_versioned")
    doc["payload"]["steps"] = steps
    return doc


def test_goal_hash_mismatch() -> None:
    """A task_created whose goal_hash does not pin its goal is refused at the hash."""
    doc = _event("task_created")
    doc["payload"]["goal"]["acceptance_criteria"].append("also refactor the HTTP client")
    err = _check(doc)
    assert (err.code, err.path) == ("goal_hash_mismatch", "$.events[0].payload.goal.goal_hash")


def test_plan_duplicate_step() -> None:
    """A plan naming one step id twice is `invalid_plan` at the second occurrence's id."""
    err = _check(_event("step_started"), _plan([{"id": "A"}, {"id": "B"}, {"id": "A"}]))
    assert (err.code, err.path) == ("invalid_plan", "$.events[1].payload.steps[2].id")


def test_plan_unknown_dependency() -> None:
    """A dependency on a step the plan lacks is `invalid_plan` at that depends_on entry."""
    err = _check(_plan([{"id": "A"}, {"id": "B", "depends_on": ["A", "Z"]}]))
    assert (err.code, err.path) == ("invalid_plan", "$.events[0].payload.steps[1].depends_on[1]")


def test_plan_self_dependency() -> None:
    """A step depending on itself is `invalid_plan` at that depends_on entry."""
    err = _check(_plan([{"id": "A"}, {"id": "B", "depends_on": ["B"]}]))
    assert (err.code, err.path) == ("invalid_plan", "$.events[0].payload.steps[1].depends_on[0]")


def test_plan_cycle() -> None:
    """A dependency cycle is `invalid_plan` at the depends_on of the first step in the cycle."""
    steps = [{"id": "A"}, {"id": "B", "depends_on": ["A", "D"]}, {"id": "C", "depends_on": ["B"]},
             {"id": "D", "depends_on": ["C"]}]
    err = _check(_plan(steps))
    assert (err.code, err.path) == ("invalid_plan", "$.events[0].payload.steps[1].depends_on")
    assert "B -> D -> C -> B" in err.message


def test_mixed_task_batch() -> None:
    """Events of another task in the same append are refused at that event's task_id."""
    err = _check(_event("step_started"), _event("budget_reserved", task_id="other-task"))
    assert (err.code, err.path) == ("mixed_task_batch", "$.events[1].task_id")


def test_mixed_tenant_batch() -> None:
    """The same task id under another tenant is still a different task."""
    err = _check(_event("step_started"), _event("budget_reserved", tenant="globex"))
    assert (err.code, err.path) == ("mixed_task_batch", "$.events[1].task_id")


GOAL_HASH_DOC = (Path(ev.__file__).resolve().parents[1] / "docs" / "contracts.md")


def test_goal_hash_worked_example_in_the_docs() -> None:
    """The non-ASCII goal_hash example of docs/contracts.md: its bytes and its hash are real."""
    text = GOAL_HASH_DOC.read_text(encoding="utf-8")
    section = text.split("<!-- goal-hash-example -->", 1)[1]
    canonical = section.split("```text\n", 1)[1].split("\n```", 1)[0]
    documented = section.split("its `goal_hash` is\n`", 1)[1].split("`", 1)[0]
    doc = json.loads(canonical)
    goal, criteria = doc["text"], doc["acceptance_criteria"]
    assert any(ord(ch) > 127 for ch in goal + "".join(criteria))
    assert goal_hash(goal, criteria) == documented
    body = canonical.encode("utf-8")
    assert f"these {len(body)} bytes" in text
    assert blake3.blake3(body).hexdigest() == documented
    assert body == json.dumps({"acceptance_criteria": criteria, "text": goal}, ensure_ascii=False,
                              separators=(",", ":"), sort_keys=True).encode()


def test_goal_hash_is_not_normalised() -> None:
    """As documented: NFC and NFD spellings of one text hash differently."""
    assert goal_hash(unicodedata.normalize("NFC", "Café"), []) != \
        goal_hash(unicodedata.normalize("NFD", "Café"), [])


def test_repeated_event_id() -> None:
    """An event id repeated inside one batch is refused at the repeat."""
    first = _event("step_started")
    err = _check(first, _event("budget_reserved"), _event("budget_consumed", event_id=first["event_id"]))
    assert (err.code, err.path) == ("duplicate_event_id", "$.events[2].event_id")


def test_turn_without_content() -> None:
    """A turn with no content is refused at payload.content."""
    doc = _event("turn_appended")
    del doc["payload"]["content"]
    err = _check(doc)
    assert (err.code, err.path) == ("missing_field", "$.events[0].payload.content")


SEALED = {"subject": "subj-7f3a9c2e", "key_id": "k1", "nonce": "bm9uY2U", "ciphertext": "Y2lwaGVy"}


@pytest.mark.parametrize(("name", "place", "path"), [
    ("turn_appended", ("payload",), "$.events[0].payload.sealed"),
    ("step_succeeded", ("payload", "outputs", 1), "$.events[0].payload.outputs[1].sealed"),
    ("variable_set", ("payload",), "$.events[0].payload.sealed"),
], ids=["turn", "step-output", "variable"])
def test_client_sent_sealed_value(name: str, place: tuple[str | int, ...], path: str) -> None:
    """A client may not send a sealed turn, step output or variable (sealing is the
    ledger-writer's job): it is refused at the sealed value."""
    doc = _event(name)
    value: Any = doc
    for key in place:
        value = value[key]
    value["sealed"] = SEALED
    err = _check(doc)
    assert (err.code, err.path) == ("sealed_not_allowed", path)


@pytest.mark.parametrize("name", ["turn_appended", "step_succeeded"])
def test_personal_content_without_data_subject(name: str) -> None:
    """Personal content with no data_subject cannot be keyed, so it is refused."""
    doc = _event(name)
    del doc["data_subject"]
    err = _check(_event("step_started"), doc)
    assert (err.code, err.path) == ("missing_data_subject", "$.events[1].data_subject")


def test_personal_variable_without_data_subject() -> None:
    """A variable marked personal needs a data_subject too."""
    doc = _event("variable_set")
    doc["payload"]["personal"] = True
    err = _check(doc)
    assert (err.code, err.path) == ("missing_data_subject", "$.events[0].data_subject")


def test_impersonal_output_needs_no_data_subject() -> None:
    """Outputs not marked personal are stored as they are, with no data subject."""
    doc = _event("step_succeeded")
    doc["payload"]["outputs"] = doc["payload"]["outputs"][:1]
    del doc["data_subject"]
    check_batch([decode_event(json.dumps(doc))])


def test_supersedes_uris_are_identifiers_kept_verbatim_by_secret_redaction() -> None:
    """A superseded artifact's URI ends in 64 hex, which the entropy rule would take for a secret
    in free text and rewrite (the reducer then found no such artifact): as an identifier it is
    kept as it is, a token in it refuses the event, and a URI is required."""
    uri = f"artifact://AGL_ARTIFACTS/acme/{blake3.blake3(b'patch v1').hexdigest()}"

    def succeeded(supersedes: list[str]) -> bytes:
        return json.dumps({"kind": "step_succeeded", "event_id": "e1", "tenant": "acme", "task_id": "t1",
                           "producer": "agent-1", "occurred_at": "2026-12-04T10:00:00Z", "schema_version": 1,
                           "payload": {"plan_version": 1, "step_id": "S5", "supersedes": supersedes}}).encode()

    e = decode_event(succeeded([uri]), "$")
    out, n = redact_event(e)
    assert n == 0 and out.payload.supersedes == [uri]  # type: ignore[attr-defined]
    with pytest.raises(ContractError) as info:
        redact_event(decode_event(succeeded([f"https://deploy:ghp_{'a1B2' * 9}@example.com/a"]), "$"))
    assert info.value.code == "secret_in_identifier"
    with pytest.raises(ContractError):
        decode_event(succeeded(["patch v1"]), "$")
