"""Personal data in free text: emails, phone numbers, payment cards, IBANs, national ids.

Numbers are everywhere in agent text (versions, ports, years, sizes, sequence
numbers, hashes), so every numeric kind needs more than a digit count: a
phone number is a valid number of a hinted region (phonenumbers) written the
way people write phone numbers (a leading ``+``, separators, or a phone word
nearby); a card passes Luhn with a known issuer prefix; an IBAN, an SSN or a
national id passes its python-stdnum check, and the ids that are bare digits
with a weak check need a word naming them nearby.

phonenumbers and python-stdnum are imported on the first scan that needs them (``_Checks``),
or by ``warm()``: ~0.1 s that a service's start must not wait for.
"""

from __future__ import annotations

import functools
import re
from collections.abc import Callable, Iterator, Sequence
from types import ModuleType

from agentledger.core.detect.finding import Finding, non_overlapping
from agentledger.core.detect.national_ids import find_named_ids

# Regions tried for numbers written without a country code.
DEFAULT_REGIONS = ("US", "GB", "DE", "FR", "ES", "CN", "JP", "BR", "RU", "IN")

_NOT_ALNUM_BEFORE = r"(?<![A-Za-z0-9_.@/#:-])"
_NOT_ALNUM_AFTER = r"(?![A-Za-z0-9_@/-]|\.\d)"

_EMAIL = re.compile(r"(?<![A-Za-z0-9._%+-])[A-Za-z0-9._%+-]{1,64}@(?:[A-Za-z0-9-]{1,63}\.)+[A-Za-z]{2,24}"
                    r"(?![A-Za-z0-9-])")
_PHONE = re.compile(_NOT_ALNUM_BEFORE + r"(\+?\(?\d[\d ().-]{5,18}\d)" + _NOT_ALNUM_AFTER)
_PHONE_WORDS = re.compile(
    r"(?i:phone|tel\b|tel\.|telephone|mobile|cell|call|sms|whatsapp|fax|contact|reach|ring|"
    r"tel[ée]fono|t[ée]l[ée]phone|portable|telefon|handy|rufnummer|телефон|номер|звоните|"
    r"telefone|celular|電話|携帯|电话|手机|联系|号码)")
_DATE = re.compile(r"^\d{4}[-./]\d{1,2}[-./]\d{1,2}$|^\d{1,2}[-./]\d{1,2}[-./]\d{2,4}$")
_LEADING_DATE = re.compile(r"^\d{4}-\d{1,2}-\d{1,2}")
_IPV4 = re.compile(r"^\d{1,3}(?:\.\d{1,3}){3}$")
_CARD = re.compile(_NOT_ALNUM_BEFORE + r"(\d(?:[ -]?\d){12,18})" + _NOT_ALNUM_AFTER)
_CARD_PREFIX = re.compile(r"^(?:4|5[1-5]|2[2-7]|3[47]|3[0689]|6(?:011|5|4[4-9]|2)|35)")
_IBAN = re.compile(r"(?<![A-Za-z0-9])([A-Z]{2}\d{2}(?: ?[A-Z0-9]){11,30})(?![A-Za-z0-9])")
_SSN = re.compile(_NOT_ALNUM_BEFORE + r"(\d{3}-\d{2}-\d{4})" + _NOT_ALNUM_AFTER)
_CN_RIC = re.compile(r"(?<![0-9A-Za-z])(\d{17}[\dXx])(?![0-9A-Za-z])")
_ES_ID = re.compile(r"(?<![0-9A-Za-z])(\d{8}-?[A-Z]|[XYZ]-?\d{7}-?[A-Z])(?![0-9A-Za-z])")
_BR_CPF = re.compile(_NOT_ALNUM_BEFORE + r"(\d{3}\.\d{3}\.\d{3}-\d{2})" + _NOT_ALNUM_AFTER)
_AADHAAR = re.compile(_NOT_ALNUM_BEFORE + r"([2-9]\d{3} \d{4} \d{4})" + _NOT_ALNUM_AFTER)
_FR_NIR = re.compile(_NOT_ALNUM_BEFORE + r"([12] ?\d{2} ?\d{2} ?\d{2} ?\d{3} ?\d{3} ?\d{2})" + _NOT_ALNUM_AFTER)
_DE_IDNR = re.compile(_NOT_ALNUM_BEFORE + r"(\d{2} ?\d{3} ?\d{3} ?\d{3})" + _NOT_ALNUM_AFTER)
_ID_WORDS = re.compile(r"(?i:steuer|idnr|identifikationsnummer|tax id|s[ée]curit[ée] sociale|\bnir\b|"
                       r"s[ée]cu\b|insee|social security|ssn)")
_NEAR = 40  # characters before a number where its naming word may be


def find_personal(text: str, regions: Sequence[str] = DEFAULT_REGIONS) -> list[Finding]:
    """Personal data in ``text``: kinds ``email``, ``phone``, ``card``, ``iban``, ``national_id``."""
    if not text:
        return []
    found = list(_emails(text))
    if any(c.isdigit() for c in text):
        found += _ids(text)
        found += find_named_ids(text, text.lower())
        found += _cards(text)
        found += _ibans(text)
        taken = [(f.start, f.end) for f in found]
        found += [f for f in _phones(text, regions)
                  if not any(s < f.end and f.start < e for s, e in taken)]
    return non_overlapping(found)


def _emails(text: str) -> Iterator[Finding]:
    if "@" in text:
        for m in _EMAIL.finditer(text):
            yield Finding("email", *m.span(), "own.email")


def _digits(s: str) -> str:
    return re.sub(r"\D", "", s)


class _Checks:
    """The libraries' checks, imported once, on first use."""

    def __init__(self) -> None:
        import phonenumbers  # noqa: PLC0415 - see the module docstring
        from stdnum import iban, luhn  # noqa: PLC0415
        from stdnum.br import cpf  # noqa: PLC0415
        from stdnum.cn import ric  # noqa: PLC0415
        from stdnum.de import idnr  # noqa: PLC0415
        from stdnum.es import dni, nie  # noqa: PLC0415
        from stdnum.fr import nir  # noqa: PLC0415
        from stdnum.in_ import aadhaar  # noqa: PLC0415
        from stdnum.us import ssn  # noqa: PLC0415

        self.phonenumbers: ModuleType = phonenumbers
        self.luhn: Callable[[str], bool] = luhn.is_valid
        # The IBAN's own check (its country's length and layout, mod 97), not the country's
        # bank registry as well: stdnum refuses a Belgian IBAN whose bank code it does not
        # list, and the account is a person's whichever bank holds it.
        self.iban: Callable[[str], bool] = lambda v: iban.is_valid(v, check_country=False)
        self.ids: tuple[tuple[re.Pattern[str], Callable[[str], bool], str, re.Pattern[str] | None], ...] = (
            (_SSN, ssn.is_valid, "stdnum.us.ssn", None),
            (_CN_RIC, ric.is_valid, "stdnum.cn.ric", None),
            (_ES_ID, lambda v: dni.is_valid(v) or nie.is_valid(v), "stdnum.es.dni", None),
            (_BR_CPF, cpf.is_valid, "stdnum.br.cpf", None),
            (_AADHAAR, aadhaar.is_valid, "stdnum.in.aadhaar", None),
            (_FR_NIR, nir.is_valid, "stdnum.fr.nir", _ID_WORDS),
            (_DE_IDNR, idnr.is_valid, "stdnum.de.idnr", _ID_WORDS),
        )


@functools.cache
def _checks() -> _Checks:
    return _Checks()


def warm() -> None:
    """Import the libraries now (a service does it in a worker thread once it answers)."""
    _checks()


def _named_nearby(text: str, start: int, words: re.Pattern[str]) -> bool:
    return words.search(text, max(0, start - _NEAR), start) is not None


def _phones(text: str, regions: Sequence[str]) -> Iterator[Finding]:
    for m in _PHONE.finditer(text):
        raw = m.group(1)
        digits = _digits(raw)
        if not 7 <= len(digits) <= 15 or _DATE.match(raw) or _IPV4.match(raw):
            continue
        international = raw.startswith("+")
        named = _named_nearby(text, m.start(), _PHONE_WORDS)
        if not (international or named or _phone_shaped(raw)):
            continue
        phonenumbers = _checks().phonenumbers
        for region in ([None] if international else regions):
            try:
                number = phonenumbers.parse(raw, region)
            except phonenumbers.NumberParseException:
                continue
            if phonenumbers.is_valid_number(number):
                yield Finding("phone", *m.span(1), f"phonenumbers.{region or 'intl'}")
                break


def _phone_shaped(raw: str) -> bool:
    """How people write a national number without a country code: ``(415) 555-0132``,
    ``415-555-0132``, ``030 1234 5678``. A bare run of digits, or two space-separated
    numbers, is an id, a size or a count until a phone word names it."""
    if "  " in raw or _LEADING_DATE.match(raw):
        return False
    if raw.startswith("("):
        return True
    if raw.count("-") >= 2 and " " not in raw and "." not in raw:
        return True
    return raw.startswith("0") and raw.count(" ") >= 1 and "-" not in raw and len(_digits(raw)) >= 9


def _cards(text: str) -> Iterator[Finding]:
    for m in _CARD.finditer(text):
        digits = _digits(m.group(1))
        if 13 <= len(digits) <= 19 and _CARD_PREFIX.match(digits) and _checks().luhn(digits):
            sep = set(re.sub(r"\d", "", m.group(1)))
            if len(sep) <= 1:  # one kind of separator, or none
                yield Finding("card", *m.span(1), "stdnum.luhn")


def _ibans(text: str) -> Iterator[Finding]:
    for m in _IBAN.finditer(text):
        value = m.group(1).rstrip()
        if _checks().iban(value):
            yield Finding("iban", m.start(1), m.start(1) + len(value), "stdnum.iban")


def _ids(text: str) -> list[Finding]:
    out = []
    for pattern, valid, detector, words in _checks().ids:
        for m in pattern.finditer(text):
            if words is not None and not _named_nearby(text, m.start(1), words):
                continue
            try:
                ok = valid(m.group(1))
            except Exception:  # noqa: BLE001 - a stdnum check that trips on odd input is a no
                ok = False
            if ok:
                out.append(Finding("national_id", *m.span(1), detector))
    return out
