"""agentledger.runtime: the local runtime behind ``agentledger up`` / ``down``.

Embedded NATS and PostgreSQL from PyPI wheels (``embedded``, ``postgres``), where
and as which OS user each server runs (``hosting``), the supervisor that runs
every service as its own process and restarts it (``supervisor``), the
``runtime.json`` record that lets every command find the running stack
(``state``) and the ``up`` / ``down`` commands themselves (``commands``).
"""
