"""The detectors on fixtures nobody here wrote: a scanner's test cases and the validators' examples.

A detector tuned on our own corpora passes them and says little about text others write
(issue 44 measured .87 where ours said .99). Three sources, each loaded from where it lives,
never copied into the repository:

* **gitleaks' rule tests** (``--gitleaks PATH``, a checkout of the scanner): every literal
  string in the ``tps`` (must be found) and ``fps`` (must not) lists of its
  ``cmd/generate/config/rules/*.go``; the strings gitleaks generates from its own regexes
  are left out, since only its Go code can make them. Scored per string: found means any
  finding in it. detect-secrets with its default plugins is scored on the same strings.
* **phonenumbers' example numbers**: the library's example fixed-line and mobile number of
  every region it has metadata for, written in the international format, in a sentence
  naming it a phone (or not), and in the national format for the regions we try by default.
* **python-stdnum's examples**: every number its personal-id modules' documentation shows
  passing ``validate`` (the ``>>> validate('…')`` lines whose answer is not an error),
  after the module's own short name ("BSN: 111222333"), and python-stdnum's IBAN examples.

The figures are ``detector_external_secret_recall`` / ``_fp`` and
``detector_external_personal_recall``, each with the misses' first few (kinds and sources,
never the values) so a reader sees what to fix.
"""

from __future__ import annotations

import importlib
import re
from collections.abc import Callable, Iterator
from pathlib import Path

from agentledger.bench.common import emit
from agentledger.core.detect import find_personal, find_secrets

# Where a list of test strings opens: ``tps := []string{``, ``fps = append(fps,``.
_LIST = re.compile(r"\b(tps|fps)\s*(?::=|=)\s*(?:\[\]string\{|append\(\1\s*,)")
_GO_TOKEN = re.compile(r'`[^`]*`|"(?:[^"\\\n]|\\.)*"|//[^\n]*|[{}()\[\],]|[^\s`"{}()\[\],/]+|/')
_EXAMPLE = re.compile(r">>> validate\('([^']+)'\)\n(?!Traceback)")
# python-stdnum modules of numbers that name a person (and the IBAN, an account of one).
PERSONAL_MODULES = (
    "us.ssn", "gb.nhs", "nl.bsn", "be.nn", "pl.pesel", "se.personnummer", "dk.cpr", "fi.hetu",
    "no.fodselsnummer", "it.codicefiscale", "pt.cc", "ie.pps", "ch.ssn", "at.vnr", "ca.sin", "mx.curp",
    "za.idnr", "kr.rrn", "ro.cnp", "bg.egn", "cz.rc", "gr.amka", "il.idnr", "tr.tckimlik", "ee.ik",
    "lt.asmens", "si.emso", "hr.oib", "cl.rut", "in_.aadhaar", "in_.pan", "au.tfn", "br.cpf",
    "cn.ric", "es.dni", "es.nie", "fr.nir", "de.idnr", "is_.kennitala", "my.nric", "iban",
)
TARGET_SECRET_RECALL, TARGET_PERSONAL_RECALL, TARGET_SECRET_FP = 0.98, 0.95, 0.05


def gitleaks_cases(root: Path) -> Iterator[tuple[str, str, bool]]:
    """(rule file, text, is a secret) for each string literal that is an element of its own
    in a rule file's tps / fps list (not an argument of a call inside it)."""
    for path in sorted((root / "cmd" / "generate" / "config" / "rules").glob("*.go")):
        source = path.read_text(encoding="utf-8")
        for m in _LIST.finditer(source):
            for text in _elements(source, m.end()):
                if text.strip():
                    yield path.stem, text, m.group(1) == "tps"


def _elements(source: str, at: int) -> Iterator[str]:
    """The string literals at the top level of the list that opens right before ``at``."""
    depth, element = 1, []
    for tok in _GO_TOKEN.finditer(source, at):
        t = tok.group()
        if t.startswith("//"):
            continue
        if t in "{([":
            depth += 1
        elif t in "})]":
            depth -= 1
        if depth == 0 or (depth == 1 and t == ","):
            if len(element) == 1 and element[0][0] in "`\"":
                raw = element[0]
                yield raw[1:-1] if raw[0] == "`" else raw[1:-1].encode().decode("unicode_escape")
            element = []
            if depth == 0:
                return
        elif not (depth == 1 and t in "{(["):
            element.append(t)


def phone_cases() -> Iterator[tuple[str, str]]:
    """(source, sentence) for phonenumbers' example numbers of every region."""
    import phonenumbers  # noqa: PLC0415 - an optional part of the bench
    from phonenumbers import PhoneNumberFormat, PhoneNumberType  # noqa: PLC0415

    from agentledger.core.detect.personal import DEFAULT_REGIONS  # noqa: PLC0415
    for region in sorted(phonenumbers.SUPPORTED_REGIONS):
        for kind in (PhoneNumberType.FIXED_LINE, PhoneNumberType.MOBILE):
            number = phonenumbers.example_number_for_type(region, kind)
            if number is None:
                continue
            intl = phonenumbers.format_number(number, PhoneNumberFormat.INTERNATIONAL)
            yield f"phonenumbers.{region}.intl", f"You can reach me on {intl} after six."
            yield f"phonenumbers.{region}.intl.bare", f"Contact: {intl}"
            if region in DEFAULT_REGIONS:
                national = phonenumbers.format_number(number, PhoneNumberFormat.NATIONAL)
                yield f"phonenumbers.{region}.national", f"my phone number is {national}"


def stdnum_cases() -> Iterator[tuple[str, str]]:
    """(source, sentence) for the documented valid examples of each personal-id module."""
    for name in PERSONAL_MODULES:
        module = importlib.import_module(f"stdnum.{name}")
        doc = module.__doc__ or ""
        short = doc.split("\n", 1)[0].split(" (", 1)[0].rstrip(".").strip()
        for example in dict.fromkeys(_EXAMPLE.findall(doc)):
            if module.is_valid(example):
                yield f"stdnum.{name}", f"{short}: {example}"
                yield f"stdnum.{name}.prose", f"For the form, my {short} is {example}."


def _scored(cases: list[tuple[str, str]], found: Callable[[str], bool]) -> tuple[float, list[str]]:
    misses = [source for source, text in cases if not found(text)]
    return 1 - len(misses) / max(1, len(cases)), misses


def _detect_secrets() -> Callable[[str], bool]:
    from detect_secrets.core.scan import scan_line  # noqa: PLC0415 - only the baseline needs it
    from detect_secrets.settings import default_settings  # noqa: PLC0415

    def found(text: str) -> bool:
        with default_settings():
            return any(any(True for _ in scan_line(line)) for line in text.splitlines())
    return found


def bench_detector_external(gitleaks: str | Path | None) -> None:
    """Emit the three figures (the secret ones only when a gitleaks checkout is given)."""
    if gitleaks is not None:
        cases = list(gitleaks_cases(Path(gitleaks)))
        if not cases:
            raise SystemExit(f"--gitleaks {gitleaks}: no rule files under cmd/generate/config/rules")
        secrets = [(rule, text) for rule, text, secret in cases if secret]
        benign = [(rule, text) for rule, text, secret in cases if not secret]
        ours, misses = _scored(secrets, lambda t: bool(find_secrets(t)))
        scan = _detect_secrets()
        theirs, _ = _scored(secrets, scan)
        fp = 1 - _scored(benign, lambda t: not find_secrets(t))[0]
        fp_theirs = 1 - _scored(benign, lambda t: not scan(t))[0]
        emit("detector_external_secret_recall", round(ours, 3), "share", round(theirs, 3),
             round(ours / theirs, 2) if theirs else None, target=TARGET_SECRET_RECALL, n=len(secrets),
             baseline_name="detect-secrets default plugins", misses=sorted(set(misses))[:12])
        emit("detector_external_secret_fp", round(fp, 3), "share", round(fp_theirs, 3), None,
             target=TARGET_SECRET_FP, n=len(benign), baseline_name="detect-secrets default plugins")
    people = list(phone_cases()) + list(stdnum_cases())
    recall, misses = _scored(people, lambda t: bool(find_personal(t)))
    emit("detector_external_personal_recall", round(recall, 3), "share", None, None,
         target=TARGET_PERSONAL_RECALL, n=len(people), misses=sorted(set(misses))[:20])
