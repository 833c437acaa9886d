"""Every error code the code can answer with is documented, so a client written from the docs
alone never meets a code it cannot look up.

The codes are found in the source the way they are written: a ``code="..."`` argument (an
error raised, an ``ErrorBody`` built) or a ``code = "..."`` class default of an error type,
in ``src/``, ``services/`` and ``contracts/``. A code counts as documented when it appears in
backticks in ``README.md`` or a page of ``docs/``.
"""

from __future__ import annotations

import re
from pathlib import Path

ROOT = Path(__file__).resolve().parents[1]
SOURCES = [ROOT / "src", ROOT / "services", ROOT / "contracts"]
DOCS = [ROOT / "README.md", *sorted((ROOT / "docs").glob("*.md"))]

_ARGUMENT = re.compile(r'\bcode="([a-z][a-z0-9_]*)"')
_CLASS_DEFAULT = re.compile(r'^\s+code(?:: str)? = "([a-z][a-z0-9_]*)"', re.MULTILINE)
_BACKTICKED = re.compile(r"`([a-z][a-z0-9_]*)`")


def raised_codes() -> dict[str, set[str]]:
    """Each code the source names, with the files that name it (relative to the repository)."""
    found: dict[str, set[str]] = {}
    for root in SOURCES:
        for path in sorted(root.rglob("*.py")):
            text = path.read_text()
            for code in _ARGUMENT.findall(text) + _CLASS_DEFAULT.findall(text):
                found.setdefault(code, set()).add(str(path.relative_to(ROOT)))
    return found


def documented_codes() -> set[str]:
    return {code for path in DOCS for code in _BACKTICKED.findall(path.read_text())}


def test_the_scan_finds_the_codes_it_should() -> None:
    """The scan sees both forms: arguments (``tenant_mismatch``, ``subject_not_bound``) and class
    defaults (``internal``, ``not_found``); if it found nothing the next test would pass vacuously."""
    codes = raised_codes()
    assert {"tenant_mismatch", "subject_not_bound", "internal", "not_found", "cleared_turn"} <= set(codes)
    assert len(codes) > 80


def test_every_code_the_code_raises_is_documented() -> None:
    """A code in the source and in no page of the docs is what a docs-only client tripped over
    (``cleared_turn``); the message lists each with where it is raised."""
    documented = documented_codes()
    missing = {code: sorted(where) for code, where in raised_codes().items() if code not in documented}
    assert not missing, "undocumented error codes (document each in docs/): " + "; ".join(
        f"{code} ({', '.join(where)})" for code, where in sorted(missing.items()))
