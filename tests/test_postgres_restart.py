"""A killed PostgreSQL starts again at the first attempt, whatever its leftovers are doing.

After a SIGKILL the postmaster stays a zombie until whoever inherited it reaps it (in a
container, PID 1 may take seconds), and PostgreSQL refused to start while the pid in
``postmaster.pid`` answered ``kill(pid, 0)``: the supervisor's restarts failed for one to two
seconds ("lock file already exists"). Here the zombie is made to stay for as long as the
restart runs: ``REAPER`` is a child subreaper (``PR_SET_CHILD_SUBREAPER``) that reaps only
``RESTART``, the process that starts, kills and starts the server again, so the orphaned
postmaster becomes the reaper's child and stays a zombie no one else can collect.
"""

from __future__ import annotations

import json
import subprocess
import sys
from pathlib import Path

REAPER = r"""
import ctypes, os, subprocess, sys
PR_SET_CHILD_SUBREAPER = 36
assert ctypes.CDLL(None, use_errno=True).prctl(PR_SET_CHILD_SUBREAPER, 1, 0, 0, 0) == 0
code = subprocess.run([sys.executable, "-c", sys.argv[1], *sys.argv[2:]]).returncode
while True:  # now collect the orphans (the old postmaster among them)
    try:
        os.waitpid(-1, 0)
    except ChildProcessError:
        break
sys.exit(code)
"""

RESTART = r"""
import json, os, signal, sys, time
from pathlib import Path
from agentledger.errors import AgentLedgerError
from agentledger.runtime.postgres import EmbeddedPostgres, psql

data, root = Path(sys.argv[1]), Path(sys.argv[2])
server = EmbeddedPostgres(data, server_root=root).start()
psql(server.url, "CREATE TABLE kept (x int); INSERT INTO kept VALUES (42);")
old = server.pid
os.killpg(os.getpgid(old), signal.SIGKILL)
state = ""
for _ in range(1000):
    try:
        state = Path(f"/proc/{old}/stat").read_text().rsplit(")", 1)[1].split()[0]
    except OSError:
        state = "gone"
    if state in ("Z", "gone"):
        break
    time.sleep(0.01)
try:
    again = EmbeddedPostgres(data, server_root=root).start()
    result = {"zombie": state, "started": True, "kept": psql(again.url, "SELECT x FROM kept").strip(),
              "recovery": psql(again.url, "SELECT string_agg(setting, ' ' ORDER BY name) FROM pg_settings "
                               "WHERE name IN ('checkpoint_timeout', 'max_wal_size', "
                               "'recovery_init_sync_method')").strip()}
    again.stop()
except AgentLedgerError as exc:
    result = {"zombie": state, "started": False, "error": str(exc)[:300]}
print(json.dumps(result))
"""


def test_a_killed_postgres_starts_again_while_its_postmaster_is_still_a_zombie(
        tmp_path: Path, server_root: Path) -> None:
    done = subprocess.run([sys.executable, "-c", REAPER, RESTART, str(tmp_path / "data"),
                           str(server_root)], capture_output=True, text=True, timeout=300,
                          check=False)
    assert done.returncode == 0, done.stderr[-2000:]
    result = json.loads(done.stdout.strip().splitlines()[-1])
    assert result["zombie"] == "Z"  # the condition the restart must get through
    assert result["started"], result.get("error")
    assert result["kept"] == "42"  # the same cluster, its data recovered
    # What bounds the crash recovery it went through: a checkpoint at least every 30 s or 128 MB
    # of WAL (the WAL replayed after a kill), and one syncfs of the data folder.
    assert result["recovery"] == "30 128 syncfs", result["recovery"]
