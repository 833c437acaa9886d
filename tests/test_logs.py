"""Every line a service logs is one JSON object, whoever logs it.

asyncpg, nats-py and asyncio log through the standard library: a killed
PostgreSQL used to print their raw, multi-line tracebacks into the services'
JSON logs, which no log pipeline can parse.
"""

from __future__ import annotations

import io
import json
import logging
import subprocess
import sys


def test_the_libraries_own_log_lines_are_json_objects() -> None:
    """Protects the operators' log pipeline: a library's warning and an exception with its traceback,
    logged through the standard library, arrive as one JSON object per line with the logger's name
    and the service bound; a debug line below the level is not written."""
    code = (
        "import asyncio, logging\n"
        "from agentledger import logs\n"
        "logs.configure('info', service='memory-policy')\n"
        "try:\n"
        "    raise ConnectionResetError('the server closed the connection')\n"
        "except ConnectionResetError:\n"
        "    logging.getLogger('asyncpg.pool').exception('connection lost')\n"
        "logging.getLogger('nats.aio.client').warning('reconnecting to %s', 'nats://127.0.0.1:1')\n"
        "logging.getLogger('asyncpg').debug('not written')\n"
        "async def fail():\n"
        "    raise OSError('no route')\n"
        "async def main():\n"
        "    asyncio.get_running_loop().create_task(fail())\n"
        "    await asyncio.sleep(0.05)\n"
        "asyncio.run(main())\n"
        "import gc; gc.collect()\n"
    )
    done = subprocess.run([sys.executable, "-c", code], capture_output=True, text=True, timeout=60, check=True)
    lines = [line for line in done.stderr.splitlines() if line.strip()]
    records = [json.loads(line) for line in lines]  # every line parses
    by_event = {r["event"]: r for r in records}
    lost = by_event["connection lost"]
    assert (lost["logger"], lost["level"], lost["service"]) == ("asyncpg.pool", "error", "memory-policy")
    assert "ConnectionResetError: the server closed the connection" in lost["exception"]
    assert by_event["reconnecting to nats://127.0.0.1:1"]["logger"] == "nats.aio.client"
    assert "not written" not in by_event
    assert any(r.get("logger") == "asyncio" and "no route" in r.get("exception", "") for r in records), records


def test_logging_follows_stderr_when_the_host_swaps_it() -> None:
    """Protects every later log call of a process whose stderr was swapped after logging was
    configured (a test runner's capture, closed after its test): the logger wrote to the closed
    file and raised, and the service call that logged never answered."""
    import io  # noqa: PLC0415 - only here

    import structlog  # noqa: PLC0415

    from agentledger import logs  # noqa: PLC0415

    first, second = io.StringIO(), io.StringIO()
    original = sys.stderr
    try:
        sys.stderr = first
        logs.configure("info", service="writer")
        first.close()
        sys.stderr = second
        structlog.get_logger().info("artifact.refused", code="artifact_missing")
        logging.getLogger("asyncpg").warning("lost")
    finally:
        sys.stderr = original
        logs.configure("info")
    events = [json.loads(line)["event"] for line in second.getvalue().splitlines()]
    assert events == ["artifact.refused", "lost"]


def test_a_logger_cached_before_a_reconfiguration_still_reaches_the_current_chain() -> None:
    """Protects log capture and reconfiguration in one process: a module's logger, cached on its
    first use, kept the processor chain of the ``configure`` before it, so a command run in-process
    (the CLI configures logging) made later log captures miss that module's lines."""
    import structlog  # noqa: PLC0415 - only here
    from structlog.testing import capture_logs  # noqa: PLC0415

    from agentledger import logs  # noqa: PLC0415

    logs.configure("info")
    module_logger = structlog.get_logger()
    original = sys.stderr
    try:
        sys.stderr = io.StringIO()
        module_logger.info("cached now")
        logs.configure("info")
        with capture_logs() as captured:
            module_logger.warning("projector.waiting_for_servers", reason="ledger unusable")
    finally:
        sys.stderr = original
    assert [e["event"] for e in captured] == ["projector.waiting_for_servers"]
