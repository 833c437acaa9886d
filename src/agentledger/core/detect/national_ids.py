"""National identity numbers found by the word that names them, checked by python-stdnum.

Why by the word: most national ids are a handful of digits with a weak check (a Dutch BSN is
nine digits passing an 11-test, one random number in eleven), so a number alone says nothing;
people write them after their name ("BSN 1112.22.333", "my NI number is QQ 12 34 56 C",
"rijksregisternummer 85.07.30-033.28"). A naming word (cheap: one regex over the text) selects
the checks to try, and only the few words after it are tried, in their spellings with spaces,
dots and dashes: the validators run on almost no text. The checks are python-stdnum's, except the
UK National Insurance number, which it does not have (``_nino``: HMRC's published format).

Generic names ("national id", "id number", "personal number") try every check of the table.
"""

from __future__ import annotations

import functools
import importlib
import re
from collections.abc import Callable, Iterator

from agentledger.core.detect.finding import Finding

# stdnum module: the words naming its number (lower case; ASCII ones match as whole words).
_NAMED: dict[str, tuple[str, ...]] = {
    "be.nn": ("rijksregisternummer", "rijksregister", "numéro national", "numero national", "registre national",
              "national number", "insz", "niss", "nn"),
    "nl.bsn": ("bsn", "burgerservicenummer", "sofinummer", "sofi-nummer", "sofi"),
    "pl.pesel": ("pesel",),
    "se.personnummer": ("personnummer", "personnr", "person number"),
    "dk.cpr": ("cpr", "cpr-nummer", "cpr nummer", "personnummer"),
    "fi.hetu": ("henkilötunnus", "henkilotunnus", "hetu", "personbeteckning"),
    "no.fodselsnummer": ("fødselsnummer", "fodselsnummer", "personnummer"),
    "it.codicefiscale": ("codice fiscale", "cod. fiscale", "c.f."),
    "pt.cc": ("cartão de cidadão", "cartao de cidadao", "cartão do cidadão", "cc"),
    "ie.pps": ("pps", "ppsn", "pps number", "personal public service"),
    "ch.ssn": ("ahv", "avs", "ahv-nummer", "numéro avs", "sozialversicherungsnummer"),
    "at.vnr": ("sozialversicherungsnummer", "versicherungsnummer", "svnr", "vsnr"),
    "ca.sin": ("sin", "social insurance", "numéro d'assurance sociale", "nas"),
    "mx.curp": ("curp",),
    "za.idnr": ("sa id", "identity number", "id number"),
    "kr.rrn": ("주민등록번호", "rrn", "resident registration"),
    "ro.cnp": ("cnp", "cod numeric personal"),
    "bg.egn": ("егн", "egn"),
    "cz.rc": ("rodné číslo", "rodne cislo", "rč"),
    "sk.rc": ("rodné číslo", "rodne cislo", "rč"),
    "gr.amka": ("αμκα", "amka"),
    "il.idnr": ("תעודת זהות", "מספר זהות", "teudat zehut", "mispar zehut", "ת.ז"),
    "tr.tckimlik": ("tc kimlik", "t.c. kimlik", "kimlik no", "kimlik numarası", "tckn"),
    "ee.ik": ("isikukood",),
    "lt.asmens": ("asmens kodas",),
    "si.emso": ("emšo", "emso", "enotna matična številka občana", "matična številka"),
    "in_.aadhaar": ("aadhaar", "aadhar", "uidai", "आधार"),
    "es.nie": ("nie", "número de identidad de extranjero", "numero de identidad de extranjero"),
    "es.dni": ("dni", "nif", "documento nacional de identidad"),
    "fr.nir": ("nir", "numéro de sécurité sociale", "numero de securite sociale", "sécurité sociale",
               "securite sociale", "insee"),
    "hr.oib": ("oib",),
    "ar.dni": ("dni", "documento nacional"),
    "cl.rut": ("rut", "run"),
    "us.itin": ("itin",),
    "in_.pan": ("pan", "pan card", "permanent account number"),
    "au.tfn": ("tfn", "tax file number"),
    "nz.ird": ("ird", "ird number"),
    "jp.in_": ("マイナンバー", "個人番号", "my number"),
    "is_.kennitala": ("kennitala",),
    "th.pin": ("เลขประจำตัวประชาชน", "บัตรประชาชน"),
    "my.nric": ("nric", "mykad", "ic no", "ic number"),
    "ua.rntrc": ("рнокпп", "іпн", "ipn"),
    "id.nik": ("nik",),
    "ec.ci": ("cédula", "cedula"),
    "do.cedula": ("cédula", "cedula"),
    "cu.ni": ("carné de identidad", "carne de identidad", "número de identidad"),
    "gb.nino": ("national insurance", "ni number", "ni no", "nino", "nin"),
}
# Names of no country: every check is tried on what follows them.
_GENERIC = ("national id", "national identity", "id number", "identity number", "identification number",
            "personal number", "personal id", "personal code", "citizen id", "id card", "id no", "tax id",
            "social security")
_AFTER = 48  # characters after a naming word where its number may start
_MAX_PARTS = 6  # "85 07 30 033 28": the most space-separated parts one number is written in
_CANDIDATE = re.compile(r"[^\s,;()\[\]{}<>\"']+")
_TRAIL = ".:;,!?"
_NINO = re.compile(r"^(?!BG|GB|KN|NK|NT|TN|ZZ)[A-CEGHJ-PR-TW-Z][A-CEGHJ-NPR-TW-Z]\d{6}[A-D]$")


def _nino(value: str) -> bool:
    """A UK National Insurance number: two letters (not D, F, I, Q, U, V; not O second; not
    the prefixes HMRC never issues), six digits, a suffix A-D."""
    return _NINO.match(re.sub(r"[\s-]", "", value.upper())) is not None


def _words_pattern(words: list[str]) -> re.Pattern[str]:
    """One alternation of every naming word, longest first; an ASCII word only as a whole word."""
    parts = []
    for w in sorted(set(words), key=len, reverse=True):
        body = re.escape(w)
        parts.append(rf"(?<![a-z0-9]){body}(?![a-z0-9])" if w.isascii() else body)
    return re.compile("|".join(parts))


class _Table:
    """The checks by naming word, imported on first use (stdnum's modules cost ~1 ms each)."""

    def __init__(self) -> None:
        self.checks: dict[str, tuple[str, Callable[[str], bool]]] = {}
        for module in _NAMED:
            if module == "gb.nino":
                self.checks[module] = ("own.gb.nino", _nino)
            else:
                self.checks[module] = (f"stdnum.{module.rstrip('_')}",
                                       importlib.import_module(f"stdnum.{module}").is_valid)
        self.by_word: dict[str, list[str]] = {}
        for module, names in _NAMED.items():
            for w in names:
                self.by_word.setdefault(w, []).append(module)
        for w in _GENERIC:
            self.by_word[w] = list(_NAMED)
        self.words = _words_pattern(list(self.by_word))


@functools.cache
def _table() -> _Table:
    return _Table()


def warm() -> None:
    _table()


def find_named_ids(text: str, lowered: str) -> Iterator[Finding]:
    """National ids that a naming word introduces, as ``national_id`` findings."""
    table = _table()
    for m in table.words.finditer(lowered):
        modules = table.by_word[m.group()]
        found = _following(text, m.end(), modules, table)
        if found is not None:
            yield found


def _following(text: str, at: int, modules: list[str], table: _Table) -> Finding | None:
    """The longest run of up to ``_MAX_PARTS`` words after ``at`` that one of ``modules`` accepts."""
    parts = [(p.start(), p.end()) for p in _CANDIDATE.finditer(text, at, min(len(text), at + _AFTER + 40))]
    parts = [p for p in parts if p[0] <= at + _AFTER][:_MAX_PARTS + 2]
    best: Finding | None = None
    for i in range(len(parts)):
        first = text[parts[i][0]:parts[i][1]]
        if not any(c.isdigit() for c in first) and not _mixed(first):
            continue  # a word between the name and the number ("my NI number is …", "BSN: nr. …")
        for j in range(i, min(len(parts), i + _MAX_PARTS)):
            start, end = parts[i][0], parts[j][1]
            value = text[start:end].rstrip(_TRAIL)
            if not any(c.isdigit() for c in value) or len(value) < 6:
                continue
            for module in modules:
                detector, check = table.checks[module]
                if _valid(check, value) and (best is None or len(value) > best.end - best.start):
                    best = Finding("national_id", start, start + len(value), detector)
        if best is not None:
            return best
    return None


def _mixed(word: str) -> bool:
    """Whether a word without digits may still start a number (``QQ`` of ``QQ 12 34 56 C``)."""
    return word.isupper() and len(word) <= 3


def _valid(check: Callable[[str], bool], value: str) -> bool:
    try:
        return bool(check(value))
    except Exception:  # noqa: BLE001 - a stdnum check that trips on odd input is a no
        return False
