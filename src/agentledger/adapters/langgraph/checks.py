"""Input checks for the adapter: bad input is a typed error naming its field, and stores nothing.

LangGraph hands savers plain dicts; a thread id that is not a string, a NUL (which
PostgreSQL text cannot hold and which would make two ids collide after truncation), or a
write without a task id are refused here, before any event or artifact is written.
"""

from __future__ import annotations

from collections.abc import Sequence
from typing import Any

from agentledger.errors import ContractError

MAX_KEY_CHARS = 1024


def _key(value: Any, path: str, *, empty_ok: bool, int_ok: bool = False) -> str:
    if int_ok and isinstance(value, int) and not isinstance(value, bool):
        value = str(value)  # LangGraph's own savers accept integer thread ids as their text
    if not isinstance(value, str):
        raise ContractError(f"expected a string, got {type(value).__name__}", code="invalid_type", path=path)
    if not value and not empty_ok:
        raise ContractError("must not be empty", code="invalid_value", path=path)
    if "\x00" in value:
        raise ContractError("must not contain NUL", code="invalid_value", path=path)
    if len(value) > MAX_KEY_CHARS:
        raise ContractError(f"is {len(value)} characters; at most {MAX_KEY_CHARS}", code="invalid_value",
                            path=path)
    return value


def thread_keys(config: Any, *, ns_default: str | None = "",
                ns_required: bool = False) -> tuple[str, Any, str | None]:
    """(thread_id, checkpoint_ns, checkpoint_id) of a RunnableConfig, each checked."""
    if not isinstance(config, dict):
        raise ContractError(f"expected a RunnableConfig dict, got {type(config).__name__}",
                            code="invalid_type", path="$.config")
    conf = config.get("configurable")
    if not isinstance(conf, dict):
        raise ContractError("missing the configurable mapping", code="missing_field",
                            path="$.config.configurable")
    if "thread_id" not in conf:
        raise ContractError("missing thread_id", code="missing_field", path="$.config.configurable.thread_id")
    thread_id = _key(conf["thread_id"], "$.config.configurable.thread_id", empty_ok=False, int_ok=True)
    ns: Any = conf.get("checkpoint_ns", ns_default)
    if ns is not None or ns_required:
        ns = _key("" if ns is None else ns, "$.config.configurable.checkpoint_ns", empty_ok=True)
    checkpoint_id = conf.get("checkpoint_id")
    if checkpoint_id is not None and checkpoint_id != "":
        checkpoint_id = _key(checkpoint_id, "$.config.configurable.checkpoint_id", empty_ok=False)
    else:
        checkpoint_id = None
    return thread_id, ns, checkpoint_id


def writes_checked(writes: Any, task_id: Any, task_path: Any,
                   checkpoint_id: str | None) -> list[tuple[str, Any]]:
    """The ``put_writes`` items as (channel, value) pairs, or a typed error for the first bad one."""
    if checkpoint_id is None:
        raise ContractError("put_writes needs the checkpoint the writes belong to", code="missing_field",
                            path="$.config.configurable.checkpoint_id")
    _key(task_id, "$.task_id", empty_ok=False)
    _key(task_path, "$.task_path", empty_ok=True)
    if isinstance(writes, (str, bytes)) or not isinstance(writes, Sequence):
        raise ContractError(f"expected a sequence of (channel, value) pairs, got {type(writes).__name__}",
                            code="invalid_type", path="$.writes")
    items = []
    for i, item in enumerate(writes):
        if not isinstance(item, (tuple, list)) or len(item) != 2:
            raise ContractError("expected a (channel, value) pair", code="invalid_type", path=f"$.writes[{i}]")
        items.append((_key(item[0], f"$.writes[{i}][0]", empty_ok=False), item[1]))
    return items
