"""Consolidation: later observations of one attribute supersede earlier ones (issue 22, item 5).

- Without a subject version the newest observation wins at the same or higher authority; a tie
  only at the same observed time, or between values claiming one explicit version; lower
  authority never supersedes higher.
- Without a key, statements are keyed on the attribute they set (``employer``, ``home_city``,
  ``email_address``), never on the value; a personal value's key never holds the value.
- One personal value said twice (sealed twice) is one value: a keyed digest, not a tie.
- The consolidation corpus holds >= 0.95 per shape through the pure core.
"""

from __future__ import annotations

import hashlib
import json
import os
import random
import re
import subprocess
import sys
from datetime import timedelta
from pathlib import Path

import pytest

from agentledger.bench import consolidation
from agentledger.contracts import events as ev
from agentledger.core import memory as m
from agentledger.core.memory.keys import attribute_key, canonical_key, lookup_keys, value_digest
from test_memory_core import NOW, Ledger, decide_alone, proposal, rid


def user_fact(pid: str, value: str, *, hours: float, source: str = "user_confirmed", key: str | None = None,
              version: int = 1, user: str = "u1") -> ev.MemoryProposed:
    return proposal(pid, value, level="user", ident=user, source=source, key=key, subject_version=version,
                    observed_at=NOW - timedelta(hours=hours))


def sealed_copy(lg: Ledger, p: ev.MemoryProposed, nonce: str) -> ev.MemoryDecided:
    """Decide ``p`` and append it sealed, as the service and the writer do (a fresh nonce each time)."""
    pre = m.prepare(p)
    decision = m.decide(p, tenant="acme", event_id=f"ev-{p.proposal_id}", group=lg.state.group_for(pre.group_key),
                        now=NOW, prepared=pre)
    sealed = m.with_sealed(decision, ev.Sealed(subject="u1", key_id="k1", nonce=nonce, ciphertext=nonce * 3))
    lg._append(ev.MemoryProposedEvent(event_id=f"ev-{p.proposal_id}", payload=p, **envelope()))
    lg._append(ev.MemoryDecidedEvent(event_id=f"dec-{p.proposal_id}", payload=sealed, **envelope()))
    return sealed


def envelope() -> dict[str, object]:
    return {"tenant": "acme", "task_id": ev.MEMORY_TASK, "producer": "memory-policy", "occurred_at": NOW,
            "schema_version": 1}


# ---- resolution -------------------------------------------------------------------------------

def test_a_newer_observation_supersedes_without_a_version() -> None:
    """(a): three observations of one key, no version: the newest is active, none quarantined."""
    lg = Ledger()
    lg.propose(proposal("a", "pg-1", observed_at=NOW - timedelta(hours=3)))
    lg.propose(proposal("c", "pg-3", observed_at=NOW - timedelta(hours=1)))
    late = lg.propose(proposal("b", "pg-2", observed_at=NOW - timedelta(hours=2)))
    assert (late.action, late.reason) == ("write", "outranked")
    assert lg.status(rid("c")) == ("active", "")
    assert lg.status(rid("a")) == lg.status(rid("b")) == ("superseded", "outranked")
    newest = lg.propose(proposal("d", "pg-4", observed_at=NOW))
    assert (newest.action, newest.reason) == ("supersede", "newer_observation")
    assert newest.record is not None and newest.record.supersedes == [rid("c")]


def test_a_tie_only_at_the_same_time_or_the_same_explicit_version() -> None:
    lg = Ledger()
    lg.propose(proposal("a", "pg-1", observed_at=NOW))
    assert lg.propose(proposal("b", "pg-2", observed_at=NOW)).reason == "needs_clarification"
    assert lg.status(rid("a")) == lg.status(rid("b")) == ("quarantined", "needs_clarification")
    versioned = Ledger()
    versioned.propose(proposal("a", "pg-1", subject_version=3, observed_at=NOW - timedelta(days=2)))
    clash = versioned.propose(proposal("b", "pg-2", subject_version=3, observed_at=NOW))
    assert (clash.action, clash.reason) == ("quarantine", "needs_clarification")
    settled = versioned.propose(proposal("c", "pg-3", subject_version=4, observed_at=NOW - timedelta(days=5)))
    assert (settled.action, settled.reason) == ("supersede", "newer_subject_version")
    assert versioned.status(rid("c")) == ("active", "")


def test_lower_authority_never_supersedes_however_new() -> None:
    lg = Ledger()
    lg.propose(proposal("a", "pg-1", source="runtime_evidence", observed_at=NOW - timedelta(days=30)))
    low = lg.propose(proposal("b", "pg-2", source="tool_output", subject_version=9, observed_at=NOW))
    assert (low.action, low.reason) == ("write", "outranked")
    assert lg.status(rid("a")) == ("active", "")


def test_a_value_said_again_merges_with_its_current_run_only() -> None:
    """A, B, A, A: the last two are one run (merged), the first A was replaced by B in between."""
    lg = Ledger()
    for pid, value, hours in (("a1", "pg-1", 4), ("b", "pg-2", 3), ("a2", "pg-1", 2), ("a3", "PG-1.", 1)):
        lg.propose(proposal(pid, value, observed_at=NOW - timedelta(hours=hours)))
    assert lg.status(rid("a2")) == ("active", "")
    assert lg.row(rid("a2")).merged_from == [rid("a3")]
    assert lg.status(rid("a3")) == ("superseded", f"merged_into:{rid('a2')}")
    assert lg.status(rid("a1")) == lg.status(rid("b")) == ("superseded", "outranked")


# ---- keys ---------------------------------------------------------------------------------------

@pytest.mark.parametrize(("text", "key"), [
    ("my employer is Acme", "employer"),
    ("I now work at Globex", "employer"),
    ("employer: Globex", "employer"),
    ("employer is Initech", "employer"),
    ("The user works for Hooli", "employer"),
    ("My new employer is Soylent", "employer"),
    ("ich arbeite bei Siemens", "employer"),
    ("je travaille chez Renault", "employer"),
    ("I live in Berlin", "home_city"),
    ("I'm now based in Porto", "home_city"),
    ("I have been working at Globex since March", "employer"),
    ("I got a job at Globex", "employer"),
    ("Employer - Acme", "employer"),
    ("Ich arbeite jetzt bei Siemens", "employer"),
    ("Trabajo en Telefónica", "employer"),
    ("Ich wohne jetzt in Hamburg", "home_city"),
    ("Vivo en Madrid", "home_city"),
    ("I'm working at Globex now", "employer"),
    ("Name: Ana Ruiz", "name"),
    ("our staging database is pg-2", "staging_database"),
    ("Deploy target: prod-eu", "deploy_target"),
    ("j'habite à Lyon", "home_city"),
    ("我住在北京", "home_city"),
    ("I live at 12 Baker Street", "home_address"),
    ("call me Ishmael", "name"),
    ("My favourite colour is teal", "favourite_colour"),
    ("favourite colour: ochre", "favourite_colour"),
])
def test_statements_are_keyed_on_their_attribute(text: str, key: str) -> None:
    assert canonical_key("fact", None, text) == key


@pytest.mark.parametrize(("kind", "text", "words"), [
    ("fact", "the build is green", "build_green"),            # not a known attribute: content words
    ("fact", "Note: the API moved to v2", "note_api_moved_v2"),  # a label, not an attribute
    ("rule", "Rule: never push to main", "rule_push_main"),   # rules keep their content keys
    ("fact", "my employer is Acme\nmy city is Lyon", "employer_acme_city_lyon"),  # no single attribute
    ("fact", "call me on Monday", "call_monday"),
    ("fact", "We moved to Kubernetes", "moved_kubernetes"),   # a project has no home city
    ("fact", "I work at night", "work_night"),
    ("fact", "Title: fix the bug", "title_fix_bug"),          # bare words that mean other things
    ("fact", "name is required for signup", "name_required_signup"),
    ("fact", "Step 1: run tests", "step_1_run_tests"),
    ("fact", "Q: why is it slow", "q_why_slow"),                # one letter is no attribute
    ("fact", "Caroline: I went to the support group yesterday", "caroline_went_support_group_yesterday"),
    ("fact", "Melanie: Thanks, Caroline", "melanie_thanks_caroline"),   # a speaker's label, not an attribute
    ("fact", "Release Notes: v2 ships today", "release_notes_v2_ships_today"),  # a heading
    ("fact", "The weather is nice", "weather_nice"),          # one word before "is": no attribute
    ("fact", "My sister is coming to visit because she misses me", "sister_coming_visit_because_misses"),
])
def test_falls_back_when_no_single_attribute_is_set(kind: str, text: str, words: str) -> None:
    """A line that sets no attribute keeps its own identity: its first content words and a
    digest of its text, so no other line is its tie or its supersession."""
    key = canonical_key(kind, None, text)
    assert re.fullmatch(rf"{words}_[0-9a-f]{{10}}", key), key
    assert canonical_key(kind, None, f"  {text.upper()} ") == key  # case and spacing aside, the same value
    assert canonical_key(kind, None, text + " too") != key


def test_the_lexicon_comes_first_for_a_preference() -> None:
    assert canonical_key("preference", None, "my preferred language is French") == "response_language"


def test_a_lookup_finds_the_attribute_a_synonym_names() -> None:
    assert "email_address" in lookup_keys("e-mail")
    assert lookup_keys("company")[:2] == ("company", "employer")
    assert "phone_number" in lookup_keys("mobile")


def test_updates_of_one_attribute_meet_without_a_key() -> None:
    """(b): "employer is X" then "employer is Y", no key: one group, Y active."""
    lg = Ledger()
    first = lg.propose(proposal("x", "employer is Acme", key=None, observed_at=NOW - timedelta(days=9)))
    second = lg.propose(proposal("y", "I now work at Globex", key=None, observed_at=NOW))
    assert first.record is not None and second.record is not None
    assert first.record.key == second.record.key == "employer"
    assert (second.action, second.reason) == ("supersede", "newer_observation")
    assert lg.status(rid("y")) == ("active", "") and lg.status(rid("x")) == ("superseded", "outranked")


# ---- personal values ----------------------------------------------------------------------------

def test_two_email_addresses_are_both_kept() -> None:
    """(issue 44, item 2): a private and a work address, no key: two values of one attribute,
    each kept, neither superseded; the same address said again merges into its record."""
    lg = Ledger()
    old = sealed_copy(lg, user_fact("e1", "My email is ana@old.test", hours=48), "n1")
    new = sealed_copy(lg, user_fact("e2", "My work email is ana@new.test", hours=1), "n2")
    again = sealed_copy(lg, user_fact("e3", "email: ana@old.test", hours=0.5), "n3")
    assert old.record is not None and new.record is not None and again.record is not None
    assert old.record.key.startswith("email_address_") and new.record.key.startswith("email_address_")
    assert old.record.key != new.record.key and again.record.key == old.record.key
    assert not any(word in old.record.key + new.record.key for word in ("ana", "old", "new", "test", "work"))
    assert (new.action, new.reason) == ("write", "new_key")
    assert (again.action, again.reason) == ("supersede", "newer_observation") or again.action == "merge"
    assert lg.status(rid("e2")) == ("active", "")
    assert [lg.status(rid(p))[0] for p in ("e1", "e3")].count("active") == 1


def test_each_allergy_is_kept() -> None:
    """A labelled note of a multi-valued attribute: "Allergy: peanuts" then "Allergy: shellfish"
    leaves both active (the label was once the key, and the second replaced the first)."""
    lg = Ledger()
    first = lg.propose(user_fact("a1", "Allergy: peanuts", hours=5))
    second = lg.propose(user_fact("a2", "Allergy: shellfish", hours=1))
    third = lg.propose(user_fact("a3", "I'm allergic to shellfish", hours=0.5))
    assert first.record is not None and second.record is not None and third.record is not None
    assert (first.record.key, second.record.key) == ("allergy_peanuts", "allergy_shellfish")
    assert third.record.key == "allergy_shellfish"
    assert lg.status(rid("a1")) == ("active", "") and second.action == "write"


def test_an_unknown_attribute_in_x_is_v_form_supersedes() -> None:
    """(issue 44, item 3): "Preferred airline is KLM", a day later "… is Finnair": one attribute
    the lexicon does not know, the newer value active, the older superseded."""
    lg = Ledger()
    lg.propose(user_fact("k1", "Preferred airline is KLM", hours=30))
    later = lg.propose(user_fact("k2", "Preferred airline is Finnair", hours=2))
    assert later.record is not None and later.record.key == "preferred_airline"
    assert (later.action, later.reason) == ("supersede", "newer_observation")
    assert lg.status(rid("k2")) == ("active", "") and lg.status(rid("k1")) == ("superseded", "outranked")


def test_speaker_lines_of_one_session_never_tie() -> None:
    """(issue 44, item 1): every turn of a conversation said the obvious way ("Name: text", a
    user-confirmed fact, the session's date as its time) is written and stays active."""
    lg = Ledger()
    turns = ["Caroline: Hey Mel! Good to see you!", "Melanie: Hey Caroline, how are you?",
             "Caroline: I went to a LGBTQ support group yesterday and it was so powerful.",
             "Melanie: Wow, that's cool, Caroline!", "Caroline: Thanks, Mel!", "Melanie: Thanks, Caroline",
             "Caroline: Research: adoption agencies", "Melanie: Kids: two"]
    decisions = [lg.propose(user_fact(f"t{i}", text, hours=3)) for i, text in enumerate(turns)]
    assert [d.action for d in decisions] == ["write"] * len(turns)
    assert all(lg.status(rid(f"t{i}")) == ("active", "") for i in range(len(turns)))


def test_the_same_personal_sentence_twice_merges_through_its_digest() -> None:
    """Sealed twice (different ciphertexts), observed at the same time: one value, merged."""
    lg = Ledger()
    sealed_copy(lg, user_fact("s1", "my phone number is +44 20 7946 0123", hours=1), "n1")
    again = sealed_copy(lg, user_fact("s2", "my phone number is +44 20 7946 0123", hours=1), "n2")
    assert again.record is not None and again.record.key.startswith("phone_number_")
    assert (again.action, again.reason) == ("merge", "same_value")
    winner, other = sorted((rid("s1"), rid("s2")))  # one observed time: the lower record id wins
    assert lg.status(winner) == ("active", "") and lg.row(winner).merged_from == [other]
    assert lg.status(other) == ("superseded", f"merged_into:{winner}")


def test_personal_keys_come_from_the_closed_vocabulary_or_the_digest() -> None:
    """A personal value's key never holds words of the statement outside the vocabulary."""
    named = decide_alone(user_fact("n1", "my wife Anna's mobile is +44 20 7946 0123", hours=1))
    assert named.record is not None and re.fullmatch(r"phone_number_[0-9a-f]{16}", named.record.key)
    keys = set()
    for i, text in enumerate(("my work email is ana@new.test", "You can email me at ana@new.test")):
        found = decide_alone(user_fact(f"n1{i}", text, hours=1))
        assert found.record is not None and re.fullmatch(r"email_address_[0-9a-f]{16}", found.record.key)
        keys.add(found.record.key)
    assert len(keys) == 1  # one address, however it was said
    marked = decide_alone(user_fact("n2", "likes the window seat", hours=1), personal=True)
    assert marked.record is not None and marked.record.value_digest is not None
    assert marked.record.key == f"personal_value_{marked.record.value_digest}"
    lg = Ledger()
    lg.propose(user_fact("w1", "likes the window seat", hours=2), personal=True)
    twice = lg.propose(user_fact("w2", "Likes the window seat.", hours=1), personal=True)
    assert (twice.action, twice.reason) == ("merge", "same_value")


def test_the_value_digest_is_keyed_and_scoped() -> None:
    """Not a plain hash: another key gives another digest, and so does another user."""
    one = value_digest("user/acme/u1", "ana@new.test", b"k" * 32)
    assert one == value_digest("user/acme/u1", "Ana@New.test ", b"k" * 32)  # normalised value
    assert one != value_digest("user/acme/u1", "ana@new.test", b"j" * 32)
    assert one != value_digest("user/acme/u2", "ana@new.test", b"k" * 32)
    assert one not in {hashlib.sha256(b"ana@new.test").hexdigest()[:32], hashlib.md5(b"ana@new.test").hexdigest()}
    a = m.prepare(user_fact("d1", "ana@new.test", hours=1), identity_key=b"k" * 32)
    b = m.prepare(user_fact("d2", "ana@new.test", hours=1), identity_key=b"j" * 32)
    assert a.value_digest and b.value_digest and a.value_digest != b.value_digest


def test_attribute_key_closed_refuses_open_attributes() -> None:
    assert attribute_key("my favourite colour is teal") == "favourite_colour"
    assert attribute_key("my favourite colour is teal", closed=True) is None
    assert attribute_key("my e-mail is x@y.test", closed=True) == "email_address"


# ---- the corpus ---------------------------------------------------------------------------------

@pytest.mark.parametrize("seed", [22, 7, 1234])
def test_the_corpus_holds_per_shape(seed: int) -> None:
    """>= 0.95 of the chains of every shape end with their expected value, the only one active."""
    figures = consolidation.accuracy(seed=seed)
    assert set(figures) == set(consolidation.SHAPES)
    assert all(v >= consolidation.TARGET for v in figures.values()), figures


def test_the_corpus_has_what_it_claims() -> None:
    corpus = consolidation.chains(random.Random(5))
    for shape in consolidation.SHAPES:
        chains = [c for c in corpus if c.shape == shape]
        assert len(chains) >= 30
        assert len({s.source for c in chains for s in c.steps}) >= 3
        assert any(len({s.value for s in c.steps}) > 1 for c in chains)
    keyed = [p for c in corpus if c.shape == "unkeyed" for p in c.proposals()]
    assert all(p.key is None for p in keyed)
    versioned = [c for c in corpus if c.shape == "keyed_versioned"]
    assert all([s.subject_version for s in c.steps] == list(range(1, len(c.steps) + 1)) for c in versioned)


def test_a_wrong_winner_counts_as_wrong() -> None:
    """The check can fail: with only a chain's first step decided, its expected value is not active."""
    rng = random.Random(3)
    chain = next(c for c in consolidation.chains(rng, per_shape=10) if c.steps[0].value != c.expected())
    assert not consolidation.correct(chain, consolidation.decide_all(chain.proposals()[:1], rng))
    assert consolidation.correct(chain, consolidation.decide_all(chain.proposals(), rng))


def test_bench_only_consolidation_prints_the_three_figures() -> None:
    """Registered: ``agentledger bench --only consolidation`` runs in process, no servers."""
    env = {k: v for k, v in os.environ.items() if not k.startswith("AGENTLEDGER_")}
    argv = [str(Path(sys.executable).parent / "agentledger"), "bench", "--only", "consolidation"]
    done = subprocess.run(argv, env=env, capture_output=True, text=True, timeout=120, check=False)
    assert done.returncode == 0, done.stderr[-2000:]
    lines = [json.loads(line) for line in done.stdout.splitlines() if line.strip()]
    assert [line["bench"] for line in lines] == [f"consolidation_{s}" for s in consolidation.SHAPES]
    assert all(line["value"] >= consolidation.TARGET and line["unit"] == "ratio" for line in lines), lines
