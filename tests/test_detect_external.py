"""The detectors on what others wrote: the validators' own examples, other languages' words
for a password, the command lines and headers a scanner's rule tests carry, and the
placeholders those tests say are not secrets (issue 44, item 9).

The figures on a scanner's whole rule-test set come from ``agentledger bench --only
detector_external --gitleaks PATH`` (docs/benchmarks.md); here the parts of it that need no
checkout: phonenumbers' and python-stdnum's examples are installed with the detectors."""

from __future__ import annotations

from pathlib import Path

import pytest

from agentledger.bench.detector_external import (
    TARGET_PERSONAL_RECALL,
    gitleaks_cases,
    phone_cases,
    stdnum_cases,
)
from agentledger.core.detect import find_personal, find_secrets


def _masked(text: str, secret: str) -> bool:
    """Whether every character of ``secret`` is inside a finding."""
    at = text.index(secret)
    return any(f.start <= at and at + len(secret) <= f.end for f in find_secrets(text))


def test_the_validators_own_examples_are_found_as_personal_data() -> None:
    """Every region's example numbers (phonenumbers) and every documented valid personal id
    (python-stdnum), in a sentence: at or above the target, and no family missed whole."""
    cases = list(phone_cases()) + list(stdnum_cases())
    assert len(cases) > 1000
    missed = [source for source, text in cases if not find_personal(text)]
    assert 1 - len(missed) / len(cases) >= TARGET_PERSONAL_RECALL, missed[:20]
    families = {source.split(".")[1] for source, _ in cases}
    assert families - {m.split(".")[1] for m in missed}, "a whole family missed"


@pytest.mark.parametrize(("text", "value"), [
    ("My IBAN is BE68 5390 0754 7034.", "BE68 5390 0754 7034"),   # a bank stdnum does not list
    ("my BSN is 111222333", "111222333"),
    ("NI number: AB 12 34 56 C", "AB 12 34 56 C"),
    ("You can reach me on +44 20 7946 0958", "+44 20 7946 0958"),
    ("PESEL: 44051401359", "44051401359"),
    ("rijksregisternummer 85.07.30-033.28", "85.07.30-033.28"),
])
def test_personal_values_others_write_are_covered(text: str, value: str) -> None:
    at = text.index(value)
    assert any(f.start <= at and at + len(value) <= f.end for f in find_personal(text)), find_personal(text)


@pytest.mark.parametrize("text", [
    "The BSN field is required", "I run 10 km on Sundays", "cc 12 people on the mail",
    "+44 7700 900123 was the build number", "SMS from +44 7700 900123: your parcel is at the depot",
    "release 2024.10.1 of the app",
])
def test_words_and_numbers_that_are_not_personal_data_are_left(text: str) -> None:
    assert not find_personal(text), find_personal(text)


@pytest.mark.parametrize(("text", "secret"), [
    ("wachtwoord: Zomer2024!x", "Zomer2024!x"),
    ("hasło to Kwiatek#77a", "Kwiatek#77a"),
    ("lösenord är Sommar-1984q", "Sommar-1984q"),
    ("curl --cacert ca.crt -u elastic:P@ssw0rd$1 https://localhost:9200", "P@ssw0rd$1"),
    ("curl -s --user 'api:d2LkV78zLx!t' \\\n    https://api.example.org/v2", "d2LkV78zLx!t"),
    ("curl --header 'Authorization:  5eb4223e-5008-46e5-be67-c7b8f2732305'", "5eb4223e-5008-46e5-be67-c7b8f2732305"),
    ('SNYK_TOKEN ?= "12345678-ABCD-ABCD-ABCD-1234567890AB"', "12345678-ABCD-ABCD-ABCD-1234567890AB"),
    ('SONAR.LOGIN ::= "9f3kq2XbT7mLw0Pz4RvY8cN1sHd6JgEa5uQiKo2B"', "9f3kq2XbT7mLw0Pz4RvY8cN1sHd6JgEa5uQiKo2B"),
    ('os.getenv("api_token", "dafa7817-e246-48f3-91a7-e87653d587b8")', "dafa7817-e246-48f3-91a7-e87653d587b8"),
    ("export BUNDLE_GEMS__CONTRIBSYS__COM=1f2e3d4c:5b6a7988", "1f2e3d4c:5b6a7988"),
    ("gsk_" + "aB3dE5fG7hJ9kL1mN3pQ5rS7tU9vW1xY3zA5bC7dE9fG1hJ3kL5m", None),
])
def test_credentials_as_others_write_them_are_masked(text: str, secret: str | None) -> None:
    assert _masked(text, secret if secret is not None else text), find_secrets(text)


@pytest.mark.parametrize("text", [
    "curl -u username:password https://example.com", "curl --user \"xxx:yyy\"",
    "curl -u <user:password> https://test.com/endpoint", 'curl -u "${username}":"${password}"',
    "curl -u \"myusername\" http://localhost:15130/api/check_user/",
    "key = AKCpXXXXXXXXXXXXXXXXXXXXXXXXXXXXXXXXXXXXXXXXXXXXXXXXXXXXXXXXXXXXXXXXXXXX",
    'api_key = "fo1_xxxxxxxxxxxxxxxxxxxxxxxxxxxxxxxxxxxxxxxxxxx"',
    "GITHUB_API_KEY=\nDYNATRACE_API_KEY=",
    "the password for the wifi is on the fridge", "send the password to the admin",
])
def test_placeholders_and_prose_are_not_secrets(text: str) -> None:
    assert not find_secrets(text), [(f.kind, text[f.start:f.end]) for f in find_secrets(text)]


def test_a_rule_files_test_lists_are_read_as_the_scanner_means_them(tmp_path: Path) -> None:
    """Only the literal elements of ``tps`` / ``fps`` are cases: a keyword list, an argument
    of a generator call and a comment are not."""
    rules = tmp_path / "cmd" / "generate" / "config" / "rules"
    rules.mkdir(parents=True)
    (rules / "acme.go").write_text('''package rules
func Acme() *config.Rule {
	r := config.Rule{Keywords: []string{"acme", "acme-corp"}}
	tps := utils.GenerateSampleSecrets("acme", "zz")
	tps = append(tps,
		// from the docs
		`acme_key = "q8Zr2LmX"`,
		"ACME_TOKEN=\\"abc\\"",
	)
	fps := []string{
		`acme_key = "changeme"`, utils.GenerateSampleSecret("acme", "x"),
	}
	return utils.Validate(r, tps, fps)
}
''')
    assert list(gitleaks_cases(tmp_path)) == [
        ("acme", 'acme_key = "q8Zr2LmX"', True), ("acme", 'ACME_TOKEN="abc"', True),
        ("acme", 'acme_key = "changeme"', False)]
