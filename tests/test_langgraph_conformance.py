"""LangGraph's own conformance suite (langgraph-checkpoint-conformance) against AgentledgerSaver.

Every capability the installed suite knows, base and extended, must be detected and pass:
a skipped capability fails this test as surely as a failed one. The report is printed.
"""

from __future__ import annotations

from collections.abc import AsyncIterator

from langgraph.checkpoint.conformance import checkpointer_test, validate
from langgraph.checkpoint.conformance.capabilities import ALL_CAPABILITIES, BASE_CAPABILITIES
from langgraph.checkpoint.conformance.report import ProgressCallbacks

from agentledger.adapters.langgraph import AgentledgerSaver
from agentledger.config import Settings
from langgraph_support import langgraph_stack, saver


async def test_the_saver_passes_every_capability_of_the_conformance_suite(settings: Settings) -> None:
    """validate() over every capability: none skipped, none failed, the report printed."""
    async with langgraph_stack(settings):

        @checkpointer_test(name="AgentledgerSaver")
        async def factory() -> AsyncIterator[AgentledgerSaver]:
            async with saver(settings) as s:
                yield s

        report = await validate(factory, capabilities={c.value for c in ALL_CAPABILITIES},
                                progress=ProgressCallbacks.verbose())
    report.print_report()
    assert set(report.results) == {c.value for c in ALL_CAPABILITIES}
    problems = {name: (r.passed, r.tests_skipped, r.failures) for name, r in report.results.items()
                if r.passed is not True or r.tests_skipped or not r.detected}
    assert problems == {}
    assert report.passed_all_base()
    assert {c.value for c in BASE_CAPABILITIES} <= set(report.results)
