"""The documentation's examples and tables must stay true to the code."""

from __future__ import annotations

import json
import re
from pathlib import Path

import pytest

from agentledger.cli.main import build_parser
from agentledger.contracts.codec import decode_append_request, decode_event
from agentledger.contracts.events import EVENT_TYPES
from agentledger.core.reducer import _HANDLERS

ROOT = Path(__file__).resolve().parents[1]
DOCS = [ROOT / "README.md", *sorted((ROOT / "docs").glob("*.md"))]


def json_blocks(path: Path) -> list[str]:
    return re.findall(r"```json\n(.*?)```", path.read_text(), flags=re.S)


@pytest.mark.parametrize("path", DOCS, ids=lambda p: p.name)
def test_json_examples_decode_with_the_contracts(path: Path) -> None:
    """Every JSON example in the docs is a valid AppendRequest (its events included) or event."""
    for block in json_blocks(path):
        doc = json.loads(block)
        if "events" in doc:
            request = decode_append_request(block.encode())
            for i, raw in enumerate(request.events):
                decode_event(raw, f"$.events[{i}]")
        else:
            decode_event(block.encode())


def test_contracts_doc_lists_every_event_kind() -> None:
    """docs/contracts.md names every kind the code accepts, and no other."""
    text = (ROOT / "docs" / "contracts.md").read_text()
    table = text.split("## Event kinds", 1)[1].split("\n\n", 2)[1]
    documented = set(re.findall(r"`([a-z_]+)`", "".join(line.split("|")[1] for line in table.splitlines()
                                                         if line.startswith("| `"))))
    assert documented == set(EVENT_TYPES)


def test_contracts_doc_lists_every_rejection_code() -> None:
    """Every rejection code the reducer can produce appears in the rejection table."""
    text = (ROOT / "docs" / "contracts.md").read_text()
    table = text.split("### Rejections", 1)[1]
    source = (ROOT / "src" / "agentledger" / "core" / "reducer.py").read_text()
    codes = set(re.findall(r'_Reject\("([a-z_]+)"', source))
    assert codes, "the reducer raises rejections with literal codes"
    missing = {c for c in codes if f"`{c}`" not in table}
    assert not missing
    assert set(_HANDLERS) == set(EVENT_TYPES)


def test_readme_cli_lists_every_command() -> None:
    """The README's CLI section names every top-level command the parser has."""
    parser = build_parser()
    sub = next(a for a in parser._actions if a.dest == "command")
    readme = (ROOT / "README.md").read_text()
    for name in sub.choices:
        assert f"agentledger {name}" in readme


@pytest.mark.parametrize("argv", [
    ["up", "--data-dir", "D"],
    ["--data-dir", "D", "up"],
    ["--data-dir", "elsewhere", "up", "--data-dir", "D"],
    ["task", "show", "acme", "task-42", "--data-dir", "D", "--creds", "agent.creds"],
    ["--creds", "agent.creds", "artifact", "stat", "artifact://x", "--data-dir", "D"],
    ["tenant", "add", "acme", "--creds", "agent.creds", "--data-dir", "D"],
])
def test_global_options_go_before_or_after_the_command(argv: list[str]) -> None:
    """`agentledger up --data-dir DIR` (as the README shows) parses like `--data-dir DIR up`."""
    args = build_parser().parse_args(argv)
    assert args.data_dir == Path("D")
    assert args.creds == (Path("agent.creds") if "--creds" in argv else None)


def test_readme_up_line_parses() -> None:
    """The README's `agentledger up [--data-dir DIR]` line parses as written."""
    readme = (ROOT / "README.md").read_text()
    block = readme.split("## CLI", 1)[1].split("```", 2)[1]
    line = next(ln for ln in block.splitlines() if ln.startswith("agentledger up "))
    usage = line.split("  ", 1)[0].split()[1:]
    argv = [w.strip("[]").replace("DIR", "D") for w in usage]
    assert argv == ["up", "--data-dir", "D"]
    assert build_parser().parse_args(argv).data_dir == Path("D")
