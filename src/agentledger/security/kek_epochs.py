"""Key-encryption-key epochs: rotation, and retirement that makes old backups unreadable.

Crypto-shredding destroys a data subject's key in the keys bucket; a copy of that bucket taken
before the forget (a backup, a snapshot of the JetStream store) still holds the key, wrapped.
It stays unreadable only if the key-encryption key that wrapped it is gone too. So the KEK
lives in epochs: ``rotate`` makes a new one, every wrapped key is re-wrapped under it
(``sealing.rewrap``), and ``retire`` destroys the older epochs' files (overwritten, then
removed; a ``<n>.retired`` stone records that the epoch existed). From then on every copy of
the bucket made before the rotation opens nothing: a restore takes its keys from a backup made
after the rotation (``agentledger restore --keys-from``; docs/deletion.md, "Backups and KEK
epochs", "Backup and restore").

Layout, all outside the data folder, in ``Settings.kek_path``'s folder: epoch 0 is ``kek_path``
itself (the file every installation already has); epoch ``n`` ≥ 1 is ``<kek_path>.e<n>``, and
a retired epoch leaves ``<kek_path>.e<n>.retired``. Flat, so that a copy of the ring (a service
run as its own user gets one in its home) is a set of files beside each other. The current
epoch is the newest that is not retired. The files
are read again when an epoch is asked for that this process does not know, and before each new
wrapping (``current``, a directory listing: keys are made once per new data subject), so
running services follow a rotation without a restart.
"""

from __future__ import annotations

import base64
import contextlib
import os
import threading
from pathlib import Path

from blake3 import blake3
from cryptography.hazmat.primitives.ciphers.aead import AESGCM

from agentledger.errors import AgentLedgerError

# The wrap "epoch" of task keys (``task_seal``): a key derived from the marker key, which no
# rotation retires (see ``KekRing.task_wrap``).
TASK_EPOCH = -1
_TASK_WRAP_CONTEXT = "agentledger task-key wrap v1"


def marker_path(kek_path: Path) -> Path:
    """The marker key's file beside the ring (``sealing.marker_key_of`` writes it)."""
    return kek_path.with_name(kek_path.name + ".marker")


def epoch_path(kek_path: Path, epoch: int) -> Path:
    """The key file of ``epoch``."""
    return kek_path if epoch == 0 else kek_path.with_name(f"{kek_path.name}.e{epoch}")


def stone_path(kek_path: Path, epoch: int) -> Path:
    """The file that records ``epoch`` as retired."""
    return kek_path.with_name(f"{kek_path.name}.e{epoch}.retired")


def ring_files(kek_path: Path) -> dict[str, tuple[int, bool]]:
    """The ring's files in ``kek_path``'s folder, by name: (epoch, is a retirement stone)."""
    found: dict[str, tuple[int, bool]] = {}
    if kek_path.exists():
        found[kek_path.name] = (0, False)
    prefix = f"{kek_path.name}.e"
    if kek_path.parent.is_dir():
        for entry in kek_path.parent.iterdir():
            if not entry.name.startswith(prefix):
                continue
            number, _, rest = entry.name[len(prefix):].partition(".")
            if number.isdigit() and rest in ("", "retired"):
                found[entry.name] = (int(number), rest == "retired")
    return found


def _write_new(path: Path, data: bytes) -> None:
    path.parent.mkdir(mode=0o700, parents=True, exist_ok=True)
    fd = os.open(path, os.O_WRONLY | os.O_CREAT | os.O_EXCL, 0o600)
    with os.fdopen(fd, "wb") as f:
        f.write(data)
        f.flush()
        os.fsync(f.fileno())


def _read_key(path: Path) -> bytes:
    key = base64.b64decode(path.read_bytes().strip())
    if len(key) != 32:
        raise AgentLedgerError(f"{path} does not hold a 256-bit key", code="invalid_config")
    return key


def shred(path: Path) -> None:
    """Overwrite ``path`` in place, flush it to disk, then remove it."""
    size = path.stat().st_size
    with path.open("r+b") as f:
        f.write(os.urandom(size))
        f.flush()
        os.fsync(f.fileno())
    path.unlink()


class KekRing:
    """The installation's key-encryption keys by epoch (see the module docstring)."""

    def __init__(self, kek_path: Path) -> None:
        self._path = kek_path
        self._lock = threading.Lock()
        self._keys: dict[int, AESGCM] = {}
        self._task: AESGCM | None = None
        self._retired: set[int] = set()
        self._current = 0
        self.reload()

    @classmethod
    def load(cls, kek_path: Path, *, create: bool = True) -> KekRing:
        """The ring of ``kek_path``; epoch 0 made (mode 0600) on first use if ``create``.

        A retired epoch 0 is never made again: its stone says the ring moved on.
        """
        if not kek_path.exists() and not stone_path(kek_path, 0).exists():
            if not create:
                raise AgentLedgerError(f"no key-encryption key at {kek_path}; personal values cannot be "
                                       "opened here", code="invalid_config")
            _write_new(kek_path, base64.b64encode(AESGCM.generate_key(bit_length=256)))
        return cls(kek_path)

    def reload(self) -> None:
        """Read the epochs' files again (after a rotation or retirement elsewhere)."""
        keys: dict[int, AESGCM] = {}
        retired: set[int] = set()
        for name, (epoch, stone) in ring_files(self._path).items():
            if stone:
                retired.add(epoch)
            else:
                with contextlib.suppress(FileNotFoundError):  # retired meanwhile
                    keys[epoch] = AESGCM(_read_key(self._path.with_name(name)))
        for epoch in retired:
            keys.pop(epoch, None)
        if not keys:
            raise AgentLedgerError(f"every key-encryption-key epoch of {self._path} is retired or missing",
                                   code="invalid_config")
        with self._lock:
            self._keys, self._retired, self._current = keys, retired, max(keys)

    @property
    def current_epoch(self) -> int:
        return self._current

    def current(self) -> tuple[int, AESGCM]:
        """The epoch new keys are wrapped under, and its key (the folder read again first)."""
        self.reload()
        with self._lock:
            return self._current, self._keys[self._current]

    def key_of(self, epoch: int) -> AESGCM | None:
        """The key of ``epoch``; None when it is retired (or never existed here)."""
        if epoch == TASK_EPOCH:
            return self.task_wrap()[1]
        with self._lock:
            key = self._keys.get(epoch)
        if key is None and epoch not in self._retired:
            self.reload()
            with self._lock:
                key = self._keys.get(epoch)
        return key

    def task_wrap(self) -> tuple[int, AESGCM]:
        """What task keys are wrapped under: ``TASK_EPOCH`` and a key derived from the marker key.

        Not an epoch of the ring, on purpose. A task's content is forgotten by destroying its
        key in the live bucket; a backup's copy is forgotten when the backup is restored (the
        forget journal applies the request again). Retiring an epoch makes every key wrapped
        under it unreadable in every older backup, and task keys under an epoch would take all
        of a backup's task content with them, so a backup made just before a retirement could
        no longer be replayed. The marker key lives beside the ring (outside the data folder,
        staged into the services' homes with it) and survives every rotation.
        """
        if self._task is None:
            path = marker_path(self._path)
            if not path.exists():
                raise AgentLedgerError(f"no marker key at {path}; task keys cannot be opened here",
                                       code="invalid_config")
            self._task = AESGCM(blake3(_read_key(path), derive_key_context=_TASK_WRAP_CONTEXT).digest())
        return TASK_EPOCH, self._task

    def is_retired(self, epoch: int) -> bool:
        with self._lock:
            return epoch in self._retired

    def live_epochs(self) -> list[int]:
        with self._lock:
            return sorted(self._keys)

    def rotate(self) -> int:
        """Make a new epoch and return it; it is the current one from now on."""
        taken = {epoch for epoch, _ in ring_files(self._path).values()}
        epoch = max({self._current, *taken}) + 1
        _write_new(epoch_path(self._path, epoch), base64.b64encode(AESGCM.generate_key(bit_length=256)))
        self.reload()
        return epoch

    def retire(self, epoch: int) -> None:
        """Destroy ``epoch``'s key file (never the current epoch's) and leave its stone."""
        if epoch == self._current:
            raise AgentLedgerError(f"epoch {epoch} is the current key-encryption key: rotate first",
                                   code="conflict")
        stone = stone_path(self._path, epoch)
        if not stone.exists():
            _write_new(stone, b"")
        path = epoch_path(self._path, epoch)
        if path.exists():
            shred(path)
        self.reload()
