"""Export the wire contracts as JSON Schema, for agents written in other languages.

``python -m agentledger.contracts.export`` rewrites ``contracts/schema/``. The
output is deterministic (sorted keys, two-space indent, trailing newline), so the
checked-in files change only when a contract does, and a test fails when they
drift from the Structs.
"""

from __future__ import annotations

import argparse
import json
from pathlib import Path
from typing import Any

import msgspec

from agentledger.contracts import api, artifacts, context_api, forget_api, memory_api, resume
from agentledger.contracts.events import AnyEvent

SCHEMA_DIR = Path(__file__).resolve().parent / "schema"

# File name -> the type whose schema it holds.
CONTRACTS: dict[str, Any] = {
    "event.schema.json": AnyEvent,
    "append_request.schema.json": api.AppendRequest,
    "append_reply.schema.json": api.AppendReply,
    "task_ref.schema.json": api.TaskRef,
    "working_memory_reply.schema.json": api.WorkingMemoryReply,
    "task_changed.schema.json": api.TaskChanged,
    "event_rejected.schema.json": api.EventRejected,
    "checkpoint_save_request.schema.json": resume.CheckpointSaveRequest,
    "checkpoint_save_reply.schema.json": resume.CheckpointSaveReply,
    "resume_request.schema.json": resume.ResumeRequest,
    "resume_reply.schema.json": resume.ResumeReply,
    "lease_request.schema.json": api.LeaseRequest,
    "lease_reply.schema.json": api.LeaseReply,
    "artifact_put_headers.schema.json": artifacts.ArtifactPutHeaders,
    "artifact_request.schema.json": artifacts.ArtifactRequest,
    "artifact_reply.schema.json": artifacts.ArtifactReply,
    "memory_propose_request.schema.json": memory_api.ProposeRequest,
    "memory_propose_reply.schema.json": memory_api.ProposeReply,
    "memory_read_request.schema.json": memory_api.ReadRequest,
    "memory_read_reply.schema.json": memory_api.ReadReply,
    "memory_key_request.schema.json": memory_api.KeyRequest,
    "memory_key_reply.schema.json": memory_api.KeyReply,
    "memory_feedback_request.schema.json": memory_api.FeedbackRequest,
    "memory_feedback_reply.schema.json": memory_api.FeedbackReply,
    "memory_receipts_request.schema.json": memory_api.ReceiptsRequest,
    "memory_receipts_reply.schema.json": memory_api.ReceiptsReply,
    "context_build_request.schema.json": context_api.BuildRequest,
    "context_build_reply.schema.json": context_api.BuildReply,
    "context_generation_ref.schema.json": context_api.GenerationRef,
    "context_trace_reply.schema.json": context_api.TraceReply,
    "context_commit_request.schema.json": context_api.CommitRequest,
    "context_commit_reply.schema.json": context_api.CommitReply,
    "context_clear_request.schema.json": context_api.ClearRequest,
    "context_clear_reply.schema.json": context_api.ClearReply,
    "context_ingest_request.schema.json": context_api.IngestRequest,
    "context_ingest_reply.schema.json": context_api.IngestReply,
    "forget_request.schema.json": forget_api.ForgetRequest,
    "forget_reply.schema.json": forget_api.ForgetReply,
    "forget_receipt_request.schema.json": forget_api.ReceiptRequest,
    "forget_receipt_reply.schema.json": forget_api.ReceiptReply,
}


def render_schemas() -> dict[str, str]:
    """The text of every schema file, keyed by file name."""
    return {
        name: json.dumps(msgspec.json.schema(tp), indent=2, sort_keys=True, ensure_ascii=False) + "\n"
        for name, tp in CONTRACTS.items()
    }


def write_schemas(directory: Path = SCHEMA_DIR) -> list[Path]:
    """Write every schema file into ``directory``; return the paths written."""
    directory.mkdir(parents=True, exist_ok=True)
    written = []
    for name, text in render_schemas().items():
        path = directory / name
        path.write_text(text, encoding="utf-8")
        written.append(path)
    return written


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(prog="python -m agentledger.contracts.export",
                                     description=__doc__.splitlines()[0])
    parser.add_argument("--dir", type=Path, default=SCHEMA_DIR,
                        help=f"output directory (default: {SCHEMA_DIR})")
    args = parser.parse_args(argv)
    for path in write_schemas(args.dir):
        print(path)
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
