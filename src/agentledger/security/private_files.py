"""Files only their owner may read: keys, credentials, passwords."""

from __future__ import annotations

import os
import tempfile
from pathlib import Path


def write_private(path: Path, text: str) -> None:
    """Write ``text`` to ``path`` atomically, mode 0600 from the first byte.

    The temporary file is created 0600 by ``mkstemp`` in the same folder and
    renamed over ``path``, so a reader sees the old content or the new, never
    a half-written secret, and no other user ever can open it.
    """
    path.parent.mkdir(parents=True, exist_ok=True, mode=0o700)
    fd, tmp = tempfile.mkstemp(dir=path.parent, prefix=f".{path.name}.", suffix=".tmp")
    try:
        with os.fdopen(fd, "w") as out:
            out.write(text)
        os.replace(tmp, path)
    except BaseException:
        Path(tmp).unlink(missing_ok=True)
        raise
