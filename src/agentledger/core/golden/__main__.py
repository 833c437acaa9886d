"""``python -m agentledger.core.golden [--write] [FILE ...]``: check or re-record golden replays.

Without ``--write`` it replays every golden file and exits 1 if a projection
differs from the recorded one. With ``--write`` it records the current
projections: do that only for a reducer change that is meant to change them,
and commit the files with it.
"""

from __future__ import annotations

import argparse
from pathlib import Path

from agentledger.core.golden import RECORD_COMMAND, golden_files, record, recorded, replay_golden


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(prog="python -m agentledger.core.golden",
                                     description="Check or re-record the golden replay files.")
    parser.add_argument("--write", action="store_true",
                        help="rewrite each file's expected view and state hash from a replay")
    parser.add_argument("files", nargs="*", type=Path,
                        help="golden files (default: every file in the package)")
    args = parser.parse_args(argv)
    paths = args.files or golden_files()
    stale = []
    for path in paths:
        if args.write:
            print(f"{'re-recorded' if record(path) else 'unchanged  '} {path}")
            continue
        view, digest = replay_golden(path)
        ok = recorded(path) == (view, digest)
        print(f"{'ok   ' if ok else 'DIFFERS'} {path}")
        if not ok:
            stale.append(path)
    if stale:
        print(f"{len(stale)} golden projection(s) differ; if the reducer change is intended, "
              f"re-record with `{RECORD_COMMAND}` and commit the files with the change.")
        return 1
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
