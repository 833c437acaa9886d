"""Detectors for what must not enter the ledger or memory as it is: pure, no I/O.

* ``find_secrets`` / ``redact_secrets``: credentials (the writer redacts them in
  every event before the append; the memory policy denies them);
* ``find_personal``: personal data (the memory policy keeps it user-scoped and sealed);
* ``find_instructions``: imperatives aimed at the agent's own policy (the memory
  policy quarantines them from untrusted sources);
* ``language.unjudged``: why ``find_instructions`` cannot judge a text (a script or a language
  it has no word classes for; the memory policy holds such text from untrusted sources);
* ``redact_event``: secrets in every string of any event (identifiers refuse them);
* ``derive_marker_key``: the installation's key of the redaction markers;
* ``warm``: load what the detectors import lazily (detect-secrets, phonenumbers,
  python-stdnum, the instruction patterns), which a service does in a worker thread once its endpoints answer.
"""

from agentledger.core.detect import instructions, personal, secrets
from agentledger.core.detect.events import redact_event, redact_text, scanned_fields
from agentledger.core.detect.finding import Finding
from agentledger.core.detect.instructions import find_instructions
from agentledger.core.detect.personal import find_personal
from agentledger.core.detect.secrets import (
    could_contain_secret,
    derive_marker_key,
    find_secrets,
    marker,
    redact_secrets,
)


def warm() -> None:
    """Every detector's libraries, loaded now (the first scan would otherwise load them)."""
    secrets.warm()
    personal.warm()
    instructions.warm()


__all__ = ["Finding", "could_contain_secret", "derive_marker_key", "find_instructions", "find_personal",
           "find_secrets", "marker", "redact_event", "redact_secrets", "redact_text", "scanned_fields", "warm"]
