"""The services as users of their own: when root runs ``up``, no service runs as root.

Each service (the six of ``commands.SERVICES``; the instances ``projector-2``,
... share their service's) gets a system user of its own, ``agl-<id>-<service>``,
and a home ``<server root>/<id>/<service>`` (0700, owned by it), next to the
embedded servers' (``hosting``), whose naming, instance record and clean-up it
shares. Before every start of a service the supervisor, still root, puts into
that home exactly what the service reads, each file 0400 and its user's:

* ``nats.creds``: its NATS credentials (every service);
* ``pgpass``: the password file the database URL names (all but the ledger writer);
* ``kek``: the key-encryption key (all but the checkpointer), with its epochs (``kek.e<n>``, the
  stones of retired ones) and the marker key (``kek.marker``); a copy of a retired epoch is
  shredded at the next start;
* ``context-signing.key``: the compaction receipts' signing key (the context builder);
* ``embeddings.key`` / ``compactor.key``: the endpoints' API keys, when configured (the memory
  policy and the context builder / the context builder);
* ``nats-ca.pem``: the NATS servers' CA bundle, when configured (every service);
* ``integrity``: the integrity keys (every service: each writes or checks MACs), and for the
  ledger writer the witness of ledger heads it keeps in its home (``ledger.witness``, its own
  file, outside the data folder; ``up`` reads it there, ``with_witness``), and for the
  tombstone-fanout the forget journal it appends to there (``forgets.journal``; ``restore``
  reads it there, ``with_journal``);
* for the checkpointer, the witness's read-only view (``witness_view``): it cannot read the
  writer's home, yet resume compares each task's head with the witness;

and starts the service on those copies (``AGENTLEDGER_NATS_CREDS``, the URL's
``passfile``, ``AGENTLEDGER_KEK_FILE``, ...) with its home as data folder and
working directory. The data folder, the operator's identity, the other
services' files and the servers' homes are out of its reach, so the data folder
may stay in a directory nobody else can enter. A service writes only its ready
file (``<home>/<name>.ready``, its heartbeat); its log is the descriptor the
supervisor opened on ``<data folder>/logs/<name>.log``.

The interpreter needs the same care as the servers' binaries: Python and the
virtualenv often live in a home directory these users cannot enter. The
supervisor copies what the services run into ``<server root>/<id>/python/<key>``
(root's, readable by everyone): the interpreter, its shared library, the
standard library, the environment's site-packages and agentledger itself (the
folders an editable install points at), laid out as one installation, as hard
links when possible (``hosting.install_copy``).
"""

from __future__ import annotations

import compileall
import contextlib
import importlib
import os
import pwd
import shutil
import stat
import sys
import sysconfig
from collections.abc import Iterable, Mapping
from pathlib import Path
from urllib.parse import parse_qsl, urlencode, urlsplit

import msgspec
import structlog

from agentledger.config import Settings
from agentledger.errors import RuntimeStateError
from agentledger.runtime.hosting import (
    DEFAULT_SERVER_ROOT,
    RunAs,
    UserHome,
    install_copy,
    instance_id,
    isolating,
    user_name,
)
from agentledger.security import auth

log = structlog.get_logger(__name__)

# What each service reads besides its NATS credentials (and the NATS CA bundle, when one is set).
DATABASE, KEK, SIGNING_KEY, EMBEDDINGS_KEY, COMPACTOR_KEY = (
    "database", "kek", "signing key", "embeddings key", "compactor key")
NEEDS: dict[str, frozenset[str]] = {
    "ledger-writer": frozenset({KEK}),
    "projector": frozenset({DATABASE, KEK}),
    "checkpointer": frozenset({DATABASE, KEK}),
    "memory-policy": frozenset({DATABASE, KEK, EMBEDDINGS_KEY}),
    "context-builder": frozenset({DATABASE, KEK, SIGNING_KEY, EMBEDDINGS_KEY, COMPACTOR_KEY}),
    "tombstone-fanout": frozenset({DATABASE, KEK}),
}
# Mode of every copy: its user reads it, nobody else does, and nobody writes it.
COPY_MODE = 0o400
PYTHON_DIR = "python"
# Top folders of the standard library the services never import (``site-packages`` is the
# base interpreter's, replaced by the environment's).
_STDLIB_SKIPPED = frozenset({"site-packages", "dist-packages", "test"})
# agentledger's packages, each its own folder in an editable install (pyproject's package-dir).
_PACKAGES = ("agentledger", "agentledger.contracts", "agentledger.services")


WITNESS_NAME = "ledger.witness"


def writer_home(settings: Settings) -> ServiceHome:
    """The home of the ledger writer of ``settings``'s data folder when it runs as its own user."""
    return ServiceHome(settings.data_dir, "ledger-writer", settings.server_root or DEFAULT_SERVER_ROOT)


def with_witness(settings: Settings) -> Settings:
    """``settings`` naming the witness the writer keeps: in its home when the services of this
    data folder run as users of their own (root ran ``up``), else as configured."""
    if settings.witness_file is not None or not isolating():
        return settings
    home = writer_home(settings)
    if not home.dir.is_dir():
        return settings
    return msgspec.structs.replace(settings, witness_file=home.dir / WITNESS_NAME)


JOURNAL_NAME = "forgets.journal"


def with_journal(settings: Settings) -> Settings:
    """``settings`` naming the forget journal the fan-out keeps (``stores.forget_journal``): in
    its home when the services run as users of their own (root ran ``up``), else as configured."""
    if settings.forget_journal_file is not None or not isolating():
        return settings
    home = ServiceHome(settings.data_dir, "tombstone-fanout", settings.server_root or DEFAULT_SERVER_ROOT)
    if not home.dir.is_dir():
        return settings
    return msgspec.structs.replace(settings, forget_journal_file=home.dir / JOURNAL_NAME)


def hand_witness_to_writer(settings: Settings) -> None:
    """Make the witness ``up`` wrote in the writer's home the writer's own (it reads and
    replaces it from then on)."""
    home = writer_home(settings)
    entry = pwd.getpwnam(home.user)
    for path in (home.dir / WITNESS_NAME, home.dir / f"{WITNESS_NAME}-lock"):
        with contextlib.suppress(FileNotFoundError):
            os.chown(path, entry.pw_uid, entry.pw_gid, follow_symlinks=False)


WITNESS_VIEW_DIR = "witness"


def witness_view(writer: ServiceHome, checkpointer: ServiceHome) -> Path:
    """Prepare (root) the folder of the witness's read-only view; return the view's path.

    The witness is the writer's own file in its home, which no other service may enter, but
    resume must compare with it. Of the ways to let the checkpointer read it (the writer's file
    or home opened to a group, the signed witness served on a NATS subject, a copy the writer
    publishes), the copy is the one that opens nothing else: ``<server root>/<id>/witness``
    (0750 and set-group-ID: the writer owns it, the checkpointer's group reads it) holds only
    ``ledger.witness``, replaced by the writer with every witness it writes
    (``Settings.witness_copy_file``, ``stores.witness.write_view``, 0640). The checkpointer
    reads it as its ``witness_file`` and checks the writer's signature on it, so it can trust
    the view as much as the original; it cannot write it, and the other services cannot read
    it. The view starts as a copy of the writer's witness, so a restarted writer with nothing
    new to publish still leaves resume something to compare with.
    """
    folder = writer.dir.parent / WITNESS_VIEW_DIR
    uid = pwd.getpwnam(writer.user).pw_uid
    gid = pwd.getpwnam(checkpointer.user).pw_gid
    with contextlib.suppress(FileNotFoundError):
        st = os.lstat(folder)
        if not stat.S_ISDIR(st.st_mode):
            os.unlink(folder)
        elif st.st_uid != uid:  # the writer's user was made again: nothing of the old one stays
            shutil.rmtree(folder)
    with contextlib.suppress(FileExistsError):
        os.mkdir(folder, 0o700)
    os.chown(folder, uid, gid, follow_symlinks=False)
    os.chmod(folder, 0o2750, follow_symlinks=False)  # noqa: S103 - read by one group, on purpose
    view = folder / WITNESS_NAME
    data = _regular_file(writer.dir / WITNESS_NAME)
    if data is not None:
        # As the writer would write it; under a random name no one else can have planted.
        temporary = folder / f".{WITNESS_NAME}.{os.urandom(8).hex()}"
        fd = os.open(temporary, os.O_WRONLY | os.O_CREAT | os.O_EXCL | os.O_NOFOLLOW | os.O_CLOEXEC, 0o600)
        try:
            with os.fdopen(fd, "wb") as out:
                os.fchown(out.fileno(), uid, gid)
                os.fchmod(out.fileno(), 0o640)
                out.write(data)
            os.replace(temporary, view)
        except BaseException:
            temporary.unlink(missing_ok=True)
            raise
    return view


def _regular_file(path: Path) -> bytes | None:
    """The bytes of ``path`` if it is a regular file (never through a link the writer's user
    may have put there for root to follow), else None."""
    try:
        fd = os.open(path, os.O_RDONLY | os.O_NOFOLLOW | os.O_CLOEXEC | os.O_NONBLOCK)
    except OSError:  # none, or a link
        return None
    with os.fdopen(fd, "rb") as f:
        return f.read() if stat.S_ISREG(os.fstat(f.fileno()).st_mode) else None


def service_of(name: str) -> str | None:
    """The service a supervised child runs (``projector-2``: ``projector``), None for another program."""
    base, _, number = name.rpartition("-")
    service = base if number.isdigit() and base else name
    return service if service in NEEDS else None


class ServiceProcess(RunAs, total=False):
    """``subprocess.Popen`` keyword arguments of a service started as its own user."""

    cwd: Path
    umask: int


class ServiceHome(UserHome):
    """The system user of one service of a data folder, and its home of copies."""

    purpose = "agentledger {kind} service"

    def __init__(self, data_dir: Path, service: str, server_root: Path) -> None:
        self.data_dir = Path(os.path.abspath(data_dir))
        self.kind = service
        self.id = instance_id(self.data_dir)
        self.dir = server_root / self.id / service
        self.user = user_name(self.data_dir, service)

    def prepare(self) -> None:
        """Create the user and the home (0700, the user's) if needed.

        The home holds only copies made before each start and ready files, so
        one that is not a folder of this user (the user was deleted and made
        again with another uid) is replaced, not kept.
        """
        uid, gid = self._ensure_user()
        self._ensure_instance_dir()
        with contextlib.suppress(FileNotFoundError):
            st = os.lstat(self.dir)
            if not stat.S_ISDIR(st.st_mode):
                os.unlink(self.dir)
            elif st.st_uid != uid:
                shutil.rmtree(self.dir)
        with contextlib.suppress(FileExistsError):
            os.mkdir(self.dir, 0o700)
        os.chown(self.dir, uid, gid, follow_symlinks=False)
        os.chmod(self.dir, 0o700, follow_symlinks=False)

    def ready_file(self, name: str) -> Path:
        return self.dir / f"{name}.ready"

    def stage(self, settings: Settings, env: Mapping[str, str]) -> dict[str, str]:
        """Copy into the home what the service reads; return ``env`` pointing the service at the copies."""
        needs = NEEDS[self.kind]
        out = {name: value for name, value in env.items() if name != "AGENTLEDGER_AUTH_DIR"}
        out |= {"AGENTLEDGER_DATA_DIR": str(self.dir), "HOME": str(self.dir)}
        out.pop("AGENTLEDGER_NATS_CREDS", None)
        creds = auth.creds_for(settings, self.kind)
        if creds is not None:
            out["AGENTLEDGER_NATS_CREDS"] = self._copy("nats.creds", creds.read_bytes())
        if settings.nats_ca_file is not None:
            out["AGENTLEDGER_NATS_CA_FILE"] = self._copy("nats-ca.pem", settings.nats_ca_file.read_bytes())
        if DATABASE in needs:
            out["AGENTLEDGER_DATABASE_URL"] = self._database_url(settings.database_url)
        if KEK in needs:
            # Imported here: the supervisor needs it only when it runs services as their users.
            out["AGENTLEDGER_KEK_FILE"] = self._copy_keks(settings)
        # Imported here, as above.
        from agentledger.security.integrity_keys import keys_of  # noqa: PLC0415

        keys_of(settings)  # made on first use, beside the key-encryption key
        out["AGENTLEDGER_INTEGRITY_KEY_FILE"] = self._copy("integrity", settings.integrity_key_path.read_bytes())
        if self.kind == "ledger-writer":
            out["AGENTLEDGER_WITNESS_FILE"] = str(self.dir / WITNESS_NAME)
        if self.kind == "tombstone-fanout":
            out["AGENTLEDGER_FORGET_JOURNAL_FILE"] = str(self.dir / JOURNAL_NAME)
        if SIGNING_KEY in needs:
            from agentledger.services.context_builder.keys import load_signing_key  # noqa: PLC0415

            load_signing_key(settings.context_key_path)  # made on first use, in the data folder
            out["AGENTLEDGER_CONTEXT_SIGNING_KEY_FILE"] = self._copy(
                "context-signing.key", settings.context_key_path.read_bytes())
        for need, name, path, variable in (
                (EMBEDDINGS_KEY, "embeddings.key", settings.embeddings_key_file,
                 "AGENTLEDGER_EMBEDDINGS_KEY_FILE"),
                (COMPACTOR_KEY, "compactor.key", settings.context_compactor_key_file,
                 "AGENTLEDGER_CONTEXT_COMPACTOR_KEY_FILE")):
            if need in needs and path is not None:
                out[variable] = self._copy(name, path.read_bytes())
        return out

    def _copy_keks(self, settings: Settings) -> str:
        """Copy the key-encryption-key ring (every live epoch, the stones of retired ones, the
        marker key) as ``kek``, ``kek.e<n>``, ...; a copy of an epoch retired since is shredded,
        so no home keeps a key ``agentledger keys rotate --retire`` destroyed."""
        # Imported here: the supervisor needs them only when it runs services as their users.
        from agentledger.security.kek_epochs import ring_files, shred  # noqa: PLC0415
        from agentledger.security.sealing import kek_of, marker_key_of  # noqa: PLC0415

        kek_of(settings)  # made on first use, as the writer would (and moved out of the data folder)
        marker_key_of(settings)
        source = settings.kek_path
        wanted = {name.replace(source.name, "kek", 1): source.with_name(name) for name in ring_files(source)}
        wanted["kek.marker"] = source.with_name(source.name + ".marker")
        for name, path in wanted.items():
            self._copy(name, path.read_bytes())
        for name in ring_files(self.dir / "kek"):
            if name not in wanted:
                shred(self.dir / name)
        return str(self.dir / "kek")

    def _copy(self, name: str, data: bytes) -> str:
        path = self.dir / name
        self.replace_file(path, data, COPY_MODE)
        return str(path)

    def _database_url(self, url: str) -> str:
        """``url`` with its ``passfile`` (the data folder's, root's) replaced by a copy in the home."""
        parts = urlsplit(url)
        query = parse_qsl(parts.query, keep_blank_values=True)
        passfiles = [value for name, value in query if name == "passfile"]
        if not passfiles:
            return url
        copy = self._copy("pgpass", Path(passfiles[-1]).read_bytes())
        query = [(name, copy if name == "passfile" else value) for name, value in query]
        return parts._replace(query=urlencode(query, safe="/")).geturl()


class ServiceUsers:
    """The users a supervisor runs a data folder's services as, and the Python they run."""

    def __init__(self, settings: Settings, services: Iterable[str]) -> None:
        root = Path(os.path.abspath(settings.server_root or DEFAULT_SERVER_ROOT))
        self._settings = settings
        self._homes = {service: ServiceHome(settings.data_dir, service, root) for service in services}
        for home in self._homes.values():
            home.prepare()
        writer, checkpointer = self._homes.get("ledger-writer"), self._homes.get("checkpointer")
        self._witness_view = (witness_view(writer, checkpointer)
                              if writer is not None and checkpointer is not None else None)
        self._python, self._library_dir = install_python(root / instance_id(settings.data_dir))

    @classmethod
    def of(cls, settings: Settings, names: Iterable[str]) -> ServiceUsers | None:
        """The users of the services among ``names``; None when not root or none is a service."""
        services = sorted({service for name in names if (service := service_of(name)) is not None})
        if not isolating() or not services:
            return None
        return cls(settings, services)

    def hosts(self, name: str) -> bool:
        """Whether the child ``name`` runs as a service user of its own."""
        return service_of(name) in self._homes

    def ready_file(self, name: str) -> Path:
        return self._home(name).ready_file(name)

    def launch(self, name: str, argv: list[str],
               env: Mapping[str, str]) -> tuple[list[str], dict[str, str], ServiceProcess]:
        """What starts the child ``name`` as its service's user: argv, environment, Popen options.

        Refreshes the copies in the home first, so a changed credential or
        password reaches the service at its next start. A command run by this
        process's interpreter runs by the copy of it.
        """
        home = self._home(name)
        env = home.stage(self._settings, env)
        if self._witness_view is not None and home.kind == "ledger-writer":
            env["AGENTLEDGER_WITNESS_COPY_FILE"] = str(self._witness_view)
        if self._witness_view is not None and home.kind == "checkpointer":
            env["AGENTLEDGER_WITNESS_FILE"] = str(self._witness_view)
        if self._library_dir is not None:
            env["LD_LIBRARY_PATH"] = os.pathsep.join(
                [str(self._library_dir), *filter(None, [env.get("LD_LIBRARY_PATH")])])
        if argv and argv[0] == sys.executable:
            argv = [str(self._python), *argv[1:]]
        return argv, env, {**home.process_kwargs(), "cwd": home.dir, "umask": 0o077}

    def _home(self, name: str) -> ServiceHome:
        service = service_of(name)
        if service is None or service not in self._homes:
            raise RuntimeStateError(f"{name} is not one of the services run as their own users")
        return self._homes[service]


def install_python(instance: Path) -> tuple[Path, Path | None]:
    """Copy the running Python into ``<instance>/python/<key>``; return its interpreter and the
    folder of its shared library (None when it is linked statically).

    One installation (``bin/``, ``lib/``, ``lib/pythonX.Y/site-packages``) so the
    interpreter finds its prefix from where it lies; ``<key>`` changes with any
    file (an edited source included), and older copies are removed, which is
    safe because the supervisor installs before it starts any service.
    """
    sources, executable, library = _python_sources()
    folder = instance / PYTHON_DIR
    with contextlib.suppress(FileExistsError):
        os.mkdir(folder, 0o755)
    fd = os.open(folder, os.O_RDONLY | os.O_DIRECTORY | os.O_NOFOLLOW | os.O_CLOEXEC)
    try:
        key = install_copy(fd, f"{sys.version_info.major}.{sys.version_info.minor}", sources,
                           staging_in=instance)
    finally:
        os.close(fd)
    log.debug("service_python_installed", folder=str(folder / key))
    return folder / key / executable, (folder / key / library) if library else None


def _python_sources() -> tuple[dict[str, Path], str, str | None]:
    """(relative path -> file) of the installation, the interpreter's and the library folder's paths in it."""
    paths = sysconfig.get_paths()
    stdlib = Path(paths["stdlib"])
    lib = f"{sys.platlibdir}/{stdlib.name}"
    binary = Path(os.path.realpath(sys.executable))
    sources = {f"bin/{binary.name}": binary}
    library: str | None = None
    if sysconfig.get_config_var("Py_ENABLE_SHARED"):
        name = sysconfig.get_config_var("INSTSONAME")
        sources[f"{sys.platlibdir}/{name}"] = Path(sysconfig.get_config_var("LIBDIR")) / name
        library = sys.platlibdir
    _add_tree(sources, stdlib, lib, skip=_STDLIB_SKIPPED)
    site_dirs = {Path(paths["purelib"]), Path(paths["platlib"])}
    for site in sorted(site_dirs):
        _add_tree(sources, site, f"{lib}/site-packages", skip=frozenset())
    for package in _PACKAGES:
        folder = Path(importlib.import_module(package).__path__[0])
        if not any(folder.is_relative_to(site) for site in site_dirs):
            # An editable install: its hooks are left out (they name folders these users cannot
            # reach) and the folders it points at are copied in as the packages they are, with
            # their bytecode compiled first. The service users cannot write the copy's
            # __pycache__, so a source without its .pyc was compiled again by every process at
            # every start: 233 modules, most of a restarted writer's first second, several
            # seconds on a busy host. Only stale files are compiled; pip compiled the rest.
            compileall.compile_dir(folder, quiet=2)
            _add_tree(sources, folder, f"{lib}/site-packages/{package.replace('.', '/')}",
                      skip=frozenset())
    return sources, f"bin/{binary.name}", library


def _add_tree(sources: dict[str, Path], top: Path, under: str, *, skip: frozenset[str]) -> None:
    for folder, dirs, files in os.walk(top):
        if folder == str(top):
            dirs[:] = [d for d in dirs if d not in skip]
        rel = os.path.relpath(folder, top)
        for name in files:
            if name.startswith("__editable__") and "agentledger" in name:
                continue
            sources[os.path.normpath(f"{under}/{rel}/{name}")] = Path(folder, name)
