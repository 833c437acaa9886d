"""The services' log files: readable by the operator who runs the stack, nobody else.

A log line carries tenant and task ids (pseudonymous, but a forget request's own subject may
be one of them) and, while an outage lasts, what a dependency said. So the folder is 0700 and
every file in it 0600, as the embedded servers' logs in their homes are; a file an older
version left group- or world-readable is tightened when it is next opened.
"""

from __future__ import annotations

import os
from pathlib import Path
from typing import BinaryIO


def log_folder(path: Path) -> Path:
    """``path`` made (if need be) and closed to everyone but its owner."""
    path.mkdir(parents=True, exist_ok=True)
    path.chmod(0o700)
    return path


def open_log(path: Path) -> BinaryIO:
    """``path`` opened for appending, mode 0600 (a child process writes it through the file)."""
    log_folder(path.parent)
    fd = os.open(path, os.O_WRONLY | os.O_APPEND | os.O_CREAT | os.O_NOFOLLOW | os.O_CLOEXEC, 0o600)
    os.fchmod(fd, 0o600)
    return os.fdopen(fd, "ab")
