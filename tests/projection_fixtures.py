"""Fixtures of the projection tests; a test module names this module in ``pytest_plugins``."""

from __future__ import annotations

from collections.abc import AsyncIterator

import pytest

from agentledger.config import Settings
from agentledger.services.projector.service import Projector
from raw_ledger import Ledger


@pytest.fixture
async def projector(settings: Settings, ledger: Ledger) -> AsyncIterator[Projector]:
    """A projector running in process on the test's stream and database."""
    p = Projector(settings)
    await p.start()
    yield p
    await p.stop()
