"""Where an embedded server lives, as whom it runs, and on which port.

Run by root, every embedded server of a data folder gets its own unprivileged
system user, ``agl-<id>-<kind>`` (``<id>``: 8 hex digits of a hash of the data
folder's absolute path), and a home outside the data folder,
``<server root>/<id>/<kind>`` (default root ``/var/lib/agentledger``), mode 0700
and owned by that user. The home holds everything the server reads or writes,
including a copy of its binaries (hard links when on the same filesystem), so
the server never needs to reach the data folder or the virtualenv, and nothing
has to loosen the permissions of the user's directories to let it in. Run by
anyone else, a server runs as that user and its home is ``<data folder>/<kind>``.
The services get users and homes of the same kind (``service_users``).

``<data folder>/<kind>/home.json`` records the home, the user and the port, so
``down``, ``clean`` and later starts find the same home and listen on the same
port. ``<server root>/<id>/instance.json`` names the data folder and the users
of an instance, so cleanup removes exactly what was created for it.

Root writes into a home only through ``UserHome.write_file`` / ``replace_file`` /
``open_append``:
the home belongs to a less trusted user, so paths are opened relative to the
home's directory descriptor without following symlinks, and files with extra
hard links are refused.
"""

from __future__ import annotations

import argparse
import contextlib
import hashlib
import os
import pwd
import secrets
import shutil
import socket
import stat
import subprocess
import tempfile
from collections.abc import Iterator, Mapping, Sequence
from pathlib import Path
from typing import TypedDict

import msgspec
import structlog

from agentledger.errors import RuntimeStateError

log = structlog.get_logger(__name__)

DEFAULT_SERVER_ROOT = Path("/var/lib/agentledger")
RECORD_NAME = "home.json"
INSTANCE_FILE = "instance.json"
DIST_DIR = "dist"
_COMPLETE = ".complete"
# Exit statuses of shadow-utils: useradd when the name is taken, userdel when it is unknown.
_USERADD_EXISTS = 9
_USERDEL_UNKNOWN = 6
_DIR_FLAGS = os.O_RDONLY | os.O_DIRECTORY | os.O_NOFOLLOW | os.O_CLOEXEC


class RunAs(TypedDict, total=False):
    """``subprocess`` keyword arguments naming the user a program runs as."""

    user: int
    group: int
    extra_groups: list[int]


class HomeRecord(msgspec.Struct, frozen=True, kw_only=True):
    """``<data folder>/<kind>/home.json``: where a server's home is, its user and its port."""

    kind: str
    home: str
    # None: the server runs as whoever starts it, and its home is inside the data folder.
    user: str | None = None
    port: int | None = None


class InstanceRecord(msgspec.Struct, frozen=True, kw_only=True):
    """``<server root>/<id>/instance.json``: the data folder an instance serves, and its users."""

    data_dir: str
    users: list[str] = []


def isolating() -> bool:
    """Whether servers get users and homes of their own: only root can create users."""
    return os.geteuid() == 0


def instance_id(data_dir: Path) -> str:
    """Short stable id of a data folder: 8 hex digits of its absolute path's sha256."""
    return hashlib.sha256(os.fsencode(os.path.abspath(data_dir))).hexdigest()[:8]


def user_name(data_dir: Path, kind: str) -> str:
    """The system user a server or service of ``kind`` runs as for ``data_dir`` (when started by root)."""
    return f"agl-{instance_id(data_dir)}-{kind}"


def free_port() -> int:
    """Return a TCP port on 127.0.0.1 that was free a moment ago."""
    with socket.socket(socket.AF_INET, socket.SOCK_STREAM) as sock:
        sock.bind(("127.0.0.1", 0))
        return int(sock.getsockname()[1])


def port_free(port: int) -> bool:
    """Whether a server could listen on 127.0.0.1:``port`` now.

    SO_REUSEADDR, as the servers set it: connections of a previous run still
    in TIME_WAIT do not make the port busy, a listening process does.
    """
    with socket.socket(socket.AF_INET, socket.SOCK_STREAM) as sock:
        sock.setsockopt(socket.SOL_SOCKET, socket.SO_REUSEADDR, 1)
        try:
            sock.bind(("127.0.0.1", port))
        except OSError:
            return False
        return True


class UserHome:
    """A home of one of a data folder's system users (``agl-<id>-<kind>``), and root's writes into it.

    ``dir`` and ``user`` are set by the subclass; ``user`` None means the
    program runs as whoever starts it and nothing here changes owners.
    """

    data_dir: Path
    kind: str
    id: str
    dir: Path
    user: str | None
    # What the user is for, in its passwd entry (``kind`` is filled in).
    purpose = "agentledger {kind}"

    @property
    def isolated(self) -> bool:
        """Whether this program has a user and a home of its own outside the data folder."""
        return self.user is not None

    @property
    def ids(self) -> tuple[int, int] | None:
        """(uid, gid) the program runs as, or None for the current user."""
        if self.user is None:
            return None
        try:
            entry = pwd.getpwnam(self.user)
        except KeyError:
            raise RuntimeStateError(f"system user {self.user} of {self.dir} is missing; run "
                                    "`agentledger up` again to recreate it") from None
        return entry.pw_uid, entry.pw_gid

    def process_kwargs(self) -> RunAs:
        """``subprocess`` arguments that run a program as the home's user, without extra groups."""
        ids = self.ids
        if ids is None:
            return {}
        return {"user": ids[0], "group": ids[1], "extra_groups": []}

    def _ensure_user(self) -> tuple[int, int]:
        assert self.user is not None
        with contextlib.suppress(KeyError):
            entry = pwd.getpwnam(self.user)
            return entry.pw_uid, entry.pw_gid
        shell = next((s for s in ("/usr/sbin/nologin", "/sbin/nologin") if Path(s).exists()),
                     "/bin/false")
        try:
            done = subprocess.run(
                ["useradd", "--system", "--no-create-home", "--home-dir", str(self.dir),
                 "--shell", shell, "--user-group", "--comment",
                 self.purpose.format(kind=self.kind), self.user],
                check=False, capture_output=True, text=True)
        except FileNotFoundError:
            raise RuntimeStateError("useradd is missing: as root, agentledger runs each embedded "
                                    "server and service as a system user it creates") from None
        # Another process may have created it a moment ago.
        if done.returncode not in (0, _USERADD_EXISTS):
            raise RuntimeStateError(f"useradd {self.user} failed: {done.stderr.strip()}")
        entry = pwd.getpwnam(self.user)
        log.debug("system_user_created", user=self.user, uid=entry.pw_uid)
        return entry.pw_uid, entry.pw_gid

    def _ensure_instance_dir(self) -> None:
        """``<root>/<id>``: root-owned, 0711 so the instance's users can pass to their homes."""
        instance, root = self.dir.parent, self.dir.parent.parent
        _make_dirs(root, 0o711)
        for path in (root, *root.parents):
            if not os.stat(path).st_mode & stat.S_IXOTH:
                raise RuntimeStateError(
                    f"agentledger's system users cannot reach {root}: {path} has mode "
                    f"{stat.S_IMODE(os.stat(path).st_mode):04o}; choose a server root every "
                    "user may pass through (AGENTLEDGER_SERVER_ROOT, default /var/lib/agentledger)")
        _make_dirs(instance, 0o711)
        info = _read_instance(instance)
        if info is not None and info.data_dir != str(self.data_dir):
            raise RuntimeStateError(f"{instance} already serves {info.data_dir} (instance ids of "
                                    f"{self.data_dir} and that folder collide); use another "
                                    "server root")
        users = sorted({*(info.users if info else []), self.user or ""} - {""})
        if info is None or info.users != users:
            _write_atomic(instance / INSTANCE_FILE, msgspec.json.encode(
                InstanceRecord(data_dir=str(self.data_dir), users=users)))

    # --- files in the home -------------------------------------------------------------

    def write_file(self, path: Path, data: str | bytes, mode: int = 0o600) -> None:
        """Write ``path`` (inside the home), owned by the home's user, mode ``mode``."""
        fd = self._open_in_home(path, os.O_WRONLY, mode)
        try:
            os.ftruncate(fd, 0)
            _write_all(fd, data)
        finally:
            os.close(fd)

    def replace_file(self, path: Path, data: str | bytes, mode: int = 0o600) -> None:
        """Replace ``path`` (directly in the home) whole, owned by the home's user, mode ``mode``.

        A new file under a random name, renamed over the old one: a program of
        the user reading ``path`` meanwhile sees the old content or the new,
        never a truncated file.
        """
        name = path.relative_to(self.dir).as_posix()
        temporary = f".{name}.{secrets.token_hex(8)}"
        with self._dir_fd() as home_fd:
            fd = os.open(temporary, os.O_WRONLY | os.O_CREAT | os.O_EXCL | os.O_NOFOLLOW | os.O_CLOEXEC,
                         mode, dir_fd=home_fd)
            try:
                try:
                    ids = self.ids
                    if ids is not None:
                        os.fchown(fd, *ids)
                    os.fchmod(fd, mode)
                    _write_all(fd, data)
                finally:
                    os.close(fd)
                os.rename(temporary, name, src_dir_fd=home_fd, dst_dir_fd=home_fd)
            except BaseException:
                with contextlib.suppress(FileNotFoundError):
                    os.unlink(temporary, dir_fd=home_fd)
                raise

    def open_append(self, path: Path, mode: int = 0o600) -> int:
        """A descriptor appending to ``path`` (inside the home), e.g. a server's log; caller closes."""
        return self._open_in_home(path, os.O_WRONLY | os.O_APPEND, mode)

    def remove_file(self, path: Path) -> None:
        """Remove ``path`` (inside the home) if it exists."""
        *parents, name = path.relative_to(self.dir).parts
        with self._dir_fd(parents) as fd, contextlib.suppress(FileNotFoundError):
            os.unlink(name, dir_fd=fd)

    def _open_in_home(self, path: Path, flags: int, mode: int) -> int:
        *parents, name = path.relative_to(self.dir).parts
        with self._dir_fd(parents) as dir_fd:
            fd = os.open(name, flags | os.O_CREAT | os.O_NOFOLLOW | os.O_CLOEXEC, mode,
                         dir_fd=dir_fd)
        try:
            st = os.fstat(fd)
            if not stat.S_ISREG(st.st_mode) or st.st_nlink != 1:
                raise RuntimeStateError(f"refusing to write {path}: not a plain file with one link")
            ids = self.ids
            if ids is not None:
                os.fchown(fd, *ids)
            os.fchmod(fd, mode)
        except BaseException:
            os.close(fd)
            raise
        return fd

    @contextlib.contextmanager
    def _dir_fd(self, parts: Sequence[str] = ()) -> Iterator[int]:
        """A descriptor of ``<home>/<parts>``, each step opened without following symlinks."""
        fd = os.open(self.dir, _DIR_FLAGS)
        try:
            ids = self.ids
            if ids is not None and os.fstat(fd).st_uid != ids[0]:
                raise RuntimeStateError(f"{self.dir} is not owned by {self.user}")
            for part in parts:
                inner = os.open(part, _DIR_FLAGS, dir_fd=fd)
                os.close(fd)
                fd = inner
            yield fd
        finally:
            os.close(fd)


class ServerHome(UserHome):
    """The home, OS identity and port of one embedded server (``kind``) of a data folder."""

    purpose = "agentledger embedded {kind} server"

    def __init__(self, data_dir: Path, kind: str, server_root: Path | None = None) -> None:
        self.data_dir = Path(os.path.abspath(data_dir))
        self.kind = kind
        self.id = instance_id(self.data_dir)
        self.record_file = self.data_dir / kind / RECORD_NAME
        root = Path(os.path.abspath(server_root or DEFAULT_SERVER_ROOT))
        record = self._read_record()
        self._recorded = record is not None
        self.port: int | None = None
        if record is not None:
            self.dir, self.user, self.port = Path(record.home), record.user, record.port
        elif isolating():
            self.dir, self.user = root / self.id / kind, user_name(self.data_dir, kind)
        else:
            self.dir, self.user = self.data_dir / kind, None

    # --- setting up -------------------------------------------------------------

    def prepare(self, port: int | None = None, *, adopt: Sequence[str] = ()) -> int:
        """Create the user and the home if needed, choose the port, record both; return the port.

        The port is ``port`` if given, else the recorded one, else a free one;
        a given or recorded port that another process holds is an error, not a
        reason to move. ``adopt`` names entries of the pre-isolation layout
        (``<data folder>/<kind>/<name>``) moved into a new home, so data kept
        before the servers had users of their own is not left behind.
        """
        if self.user is not None:
            if not isolating():
                raise RuntimeStateError(
                    f"the {self.kind} server of {self.data_dir} runs as system user {self.user} "
                    f"({self.record_file}); start it as root")
            self._prepare_isolated(adopt)
        else:
            self.dir.mkdir(parents=True, exist_ok=True)
        self.port = self._choose_port(port)
        self._write_record()
        return self.port

    def _prepare_isolated(self, adopt: Sequence[str]) -> None:
        uid, gid = self._ensure_user()
        self._ensure_instance_dir()
        if not self._recorded and os.path.lexists(self.dir):
            # A home without a record belongs to an earlier data folder at this path that was
            # deleted: its data went with that folder (and its passwords with the secrets).
            log.warning("stale_server_home_removed", home=str(self.dir))
            shutil.rmtree(self.dir)
        if not os.path.lexists(self.dir):
            os.mkdir(self.dir, 0o700)
            os.chown(self.dir, uid, gid)
            self._adopt_legacy(adopt, uid, gid)
        st = os.lstat(self.dir)
        if not stat.S_ISDIR(st.st_mode) or st.st_uid != uid:
            raise RuntimeStateError(f"{self.dir} is not a directory owned by {self.user}; "
                                    f"remove it (`python -m agentledger.runtime.hosting clean`)")
        os.chmod(self.dir, 0o700)
        # The record's folder is the invoking user's alone (an earlier layout gave it to the server).
        record_dir = self.record_file.parent
        record_dir.mkdir(mode=0o700, parents=True, exist_ok=True)
        if os.lstat(record_dir).st_uid != os.geteuid():
            os.chown(record_dir, os.geteuid(), os.getegid())
        os.chmod(record_dir, 0o700)

    def _adopt_legacy(self, names: Sequence[str], uid: int, gid: int) -> None:
        for name in names:
            old = self.data_dir / self.kind / name
            if old.is_symlink() or not old.exists():
                continue
            new = self.dir / name
            shutil.move(old, new)
            _chown_tree(new, uid, gid)
            log.info("server_data_moved", source=str(old), home=str(self.dir))

    def _choose_port(self, wanted: int | None) -> int:
        port = wanted or self.port
        if port is None:
            return free_port()
        if not port_free(port):
            raise RuntimeStateError(
                f"port {port} of the embedded {self.kind} server of {self.data_dir} is taken by "
                f"another process; stop that process, or delete {self.record_file} to choose a "
                "new port (clients configured with the old one will need the new URL)")
        return port

    def _write_record(self) -> None:
        record = HomeRecord(kind=self.kind, home=str(self.dir), user=self.user, port=self.port)
        self.record_file.parent.mkdir(parents=True, exist_ok=True)
        _write_atomic(self.record_file, msgspec.json.encode(record))
        self._recorded = True

    def _read_record(self) -> HomeRecord | None:
        """The recorded home, unless it could not have been written by ``prepare`` for this folder."""
        try:
            raw = self.record_file.read_bytes()
            owner = os.stat(self.record_file).st_uid
        except FileNotFoundError:
            return None
        except PermissionError:
            raise RuntimeStateError(f"cannot read {self.record_file}: the embedded servers of "
                                    f"{self.data_dir} were set up by another user (root?)") from None
        try:
            record = msgspec.json.decode(raw, type=HomeRecord)
        except msgspec.DecodeError:
            log.warning("server_home_record_ignored", record=str(self.record_file), why="unreadable")
            return None
        home = Path(record.home)
        if record.user is None:
            expected = record.kind == self.kind and home == self.data_dir / self.kind
            if not expected or isolating():
                # As root a server never runs in the data folder: start an isolated home
                # (prepare moves the old data into it).
                return None
            return record
        # Root acts on this record (chown, rmtree): it must be root's own and name this instance.
        if (record.user != user_name(self.data_dir, self.kind) or not home.is_absolute()
                or home.name != self.kind or home.parent.name != self.id
                or (isolating() and owner != os.geteuid())):
            log.warning("server_home_record_ignored", record=str(self.record_file),
                        why="does not name this data folder's home")
            return None
        return record

    # --- binaries ------------------------------------------------------------------

    def install(self, label: str, sources: Mapping[str, Path]) -> Path:
        """Copy ``sources`` (relative path -> file) into ``<home>/dist/<key>``; return that folder.

        Hard links when the source is on the same filesystem and readable by
        everyone (copies otherwise), so the server's user reads its binaries
        without reaching the virtualenv. ``<key>`` is ``label`` (a version) plus
        a digest of the sources' paths, sizes and mtimes: a new wheel gets a new
        copy, an unchanged one is reused, older copies are removed. Only for an
        isolated home; call it while the server is stopped.
        """
        if self.user is None:
            raise RuntimeStateError("only an isolated server home holds copies of binaries")
        with self._dir_fd() as home_fd:
            with contextlib.suppress(FileExistsError):
                os.mkdir(DIST_DIR, 0o755, dir_fd=home_fd)
            dist_fd = os.open(DIST_DIR, _DIR_FLAGS, dir_fd=home_fd)
            try:
                # Staged in the root-owned instance folder, then renamed into place whole.
                key = install_copy(dist_fd, label, sources, staging_in=self.dir.parent)
            finally:
                os.close(dist_fd)
        log.debug("server_binaries_installed", home=str(self.dir), key=key)
        return self.dir / DIST_DIR / key


def install_copy(dest_fd: int, label: str, sources: Mapping[str, Path], *, staging_in: Path) -> str:
    """Make ``<dest>/<key>`` a copy of ``sources`` (relative path -> file) and return ``<key>``.

    ``<key>`` is ``label`` plus a digest of the sources' paths, sizes and mtimes:
    an unchanged set is reused, a changed one gets a new copy, and every other
    entry of ``dest`` (older copies) is removed. Files are hard links when the
    source is readable by everyone and on the same filesystem, copies
    otherwise; folders are 0755. The copy is built in ``staging_in`` (on the
    same filesystem as ``dest``, root's) and renamed into place whole.
    """
    key = f"{label}-{_digest(sources)}"
    os.fchmod(dest_fd, 0o755)
    with contextlib.suppress(FileNotFoundError):
        os.stat(f"{key}/{_COMPLETE}", dir_fd=dest_fd)
        return key
    staging = Path(tempfile.mkdtemp(prefix=".staging-", dir=staging_in))
    try:
        for rel, src in sorted(sources.items()):
            # A file removed since it was listed (a source edited meanwhile) is left out:
            # the digest of the next start differs, so that start makes a fresh copy.
            with contextlib.suppress(FileNotFoundError):
                _place(src, staging / rel)
        (staging / _COMPLETE).touch()
        for folder, _, _ in os.walk(staging):
            os.chmod(folder, 0o755)  # noqa: S103 - public programs and libraries, read by the users
        for name in os.listdir(dest_fd):
            _remove_at(dest_fd, name)
        os.rename(staging, key, dst_dir_fd=dest_fd)
    except BaseException:
        shutil.rmtree(staging, ignore_errors=True)
        raise
    return key


# --- cleanup -----------------------------------------------------------------------------

def remove_instance(data_dir: Path, server_root: Path | None = None) -> None:
    """Remove the server homes and system users created for ``data_dir``'s embedded servers.

    For ``make clean`` and test fixtures; stop the servers first (``agentledger
    down``): a user that still runs processes is an error. Homes inside the
    data folder (not root) are left to whoever removes the folder.
    """
    if not isolating():
        return
    data_dir = Path(os.path.abspath(data_dir))
    instances = {Path(os.path.abspath(server_root or DEFAULT_SERVER_ROOT)) / instance_id(data_dir)}
    records = sorted(data_dir.glob(f"*/{RECORD_NAME}")) if data_dir.is_dir() else []
    for record in records:
        home = ServerHome(data_dir, record.parent.name)
        if home.isolated:
            instances.add(home.dir.parent)
    for instance in instances:
        _remove_instance_dir(instance, data_dir)


def remove_instances(server_root: Path, data_under: Path | None = None) -> None:
    """Remove every instance under ``server_root`` (only those serving folders under ``data_under``).

    Test sessions call this at the end; an instance whose users still run
    processes is reported and left in place.
    """
    if not isolating() or not server_root.is_dir():
        return
    under = Path(os.path.abspath(data_under)) if data_under else None
    for instance in sorted(server_root.iterdir()):
        info = _read_instance(instance)
        if info is None or (under is not None and not Path(info.data_dir).is_relative_to(under)):
            continue
        try:
            _remove_instance_dir(instance, Path(info.data_dir))
        except RuntimeStateError as exc:
            log.warning("server_instance_kept", instance=str(instance), reason=str(exc))


def _remove_instance_dir(instance: Path, data_dir: Path) -> None:
    info = _read_instance(instance)
    if info is None or info.data_dir != str(data_dir):
        return
    for user in info.users:
        with contextlib.suppress(KeyError):
            pids = _pids_of(pwd.getpwnam(user).pw_uid)
            if pids:
                raise RuntimeStateError(f"system user {user} still runs pids {pids}; stop the "
                                        "servers first (`agentledger down`)")
    shutil.rmtree(instance)
    for user in info.users:
        done = subprocess.run(["userdel", user], check=False, capture_output=True, text=True)
        if done.returncode not in (0, _USERDEL_UNKNOWN):
            raise RuntimeStateError(f"userdel {user} failed: {done.stderr.strip()}")
    for record in data_dir.glob(f"*/{RECORD_NAME}") if data_dir.is_dir() else []:
        with contextlib.suppress(OSError, msgspec.DecodeError):
            if Path(msgspec.json.decode(record.read_bytes(), type=HomeRecord).home).parent == instance:
                record.unlink()
    log.debug("server_instance_removed", instance=str(instance), users=info.users)


def _pids_of(uid: int) -> list[int]:
    """Live (not zombie) processes whose real uid is ``uid``."""
    pids = []
    for status in Path("/proc").glob("[0-9]*/status"):
        with contextlib.suppress(OSError, ValueError, IndexError):
            fields = dict(line.split(":", 1) for line in status.read_text().splitlines()
                          if ":" in line)
            if int(fields["Uid"].split()[0]) == uid and not fields["State"].strip().startswith("Z"):
                pids.append(int(status.parent.name))
    return sorted(pids)


# --- small file helpers ----------------------------------------------------------------

def _read_instance(instance: Path) -> InstanceRecord | None:
    try:
        return msgspec.json.decode((instance / INSTANCE_FILE).read_bytes(), type=InstanceRecord)
    except (OSError, msgspec.DecodeError):
        return None


def _write_atomic(path: Path, data: bytes) -> None:
    fd, tmp = tempfile.mkstemp(dir=path.parent, prefix=f".{path.name}.", suffix=".tmp")
    try:
        with os.fdopen(fd, "wb") as out:
            out.write(data + b"\n")
        os.replace(tmp, path)
    except BaseException:
        Path(tmp).unlink(missing_ok=True)
        raise


def _write_all(fd: int, data: str | bytes) -> None:
    view = memoryview(data.encode() if isinstance(data, str) else data)
    while view:
        view = view[os.write(fd, view):]


def _make_dirs(path: Path, mode: int) -> None:
    """``mkdir -p`` that gives ``mode`` to the folders it creates and leaves existing ones alone."""
    missing = [p for p in (path, *path.parents) if not p.exists()]
    for folder in reversed(missing):
        with contextlib.suppress(FileExistsError):
            os.mkdir(folder, mode)
            os.chmod(folder, mode)


def _digest(sources: Mapping[str, Path]) -> str:
    h = hashlib.sha256()
    for rel, src in sorted(sources.items()):
        with contextlib.suppress(FileNotFoundError):  # removed since it was listed: left out
            st = src.stat()
            h.update(f"{rel}\0{st.st_size}\0{st.st_mtime_ns}\n".encode())
    return h.hexdigest()[:10]


def _place(src: Path, dest: Path) -> None:
    dest.parent.mkdir(parents=True, exist_ok=True)
    st = src.stat()
    executable = bool(st.st_mode & stat.S_IXUSR)
    needed = stat.S_IROTH | (stat.S_IXOTH if executable else 0)
    if st.st_mode & needed == needed:
        with contextlib.suppress(OSError):  # another filesystem: copy instead
            os.link(src, dest)
            return
    shutil.copy2(src, dest)
    os.chmod(dest, 0o755 if executable else 0o644)


def _remove_at(dir_fd: int, name: str) -> None:
    st = os.stat(name, dir_fd=dir_fd, follow_symlinks=False)
    if stat.S_ISDIR(st.st_mode):
        shutil.rmtree(name, dir_fd=dir_fd)
    else:
        os.unlink(name, dir_fd=dir_fd)


def _chown_tree(top: Path, uid: int, gid: int) -> None:
    """Give a moved data tree to the server's user; files with extra hard links are skipped."""
    for folder, dirs, files in os.walk(top):
        os.lchown(folder, uid, gid)
        for name in dirs + files:
            path = os.path.join(folder, name)
            st = os.lstat(path)
            if stat.S_ISREG(st.st_mode) and st.st_nlink > 1:
                log.warning("hard_linked_file_skipped", path=path)
                continue
            os.lchown(path, uid, gid)


def main(argv: Sequence[str] | None = None) -> int:
    """``python -m agentledger.runtime.hosting clean``: what ``make clean`` runs."""
    from agentledger.config import from_env  # noqa: PLC0415 - only the command line needs it

    parser = argparse.ArgumentParser(prog="python -m agentledger.runtime.hosting",
                                     description="Remove the embedded servers' homes and users "
                                                 "created for a data folder (as root).")
    parser.add_argument("command", choices=["clean"])
    parser.add_argument("--data-dir", type=Path, default=None)
    args = parser.parse_args(argv)
    settings = from_env(data_dir=args.data_dir)
    try:
        remove_instance(settings.data_dir, settings.server_root)
    except RuntimeStateError as exc:
        print(f"agentledger: {exc}")
        return 1
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
