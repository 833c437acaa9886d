"""agentledger.contracts: the wire contracts, the one definition every party shares.

Versioned msgspec Structs for every message: step events (``events``), append,
Working Memory and lease requests and replies (``api``), checkpoints and resume
(``resume``), artifacts (``artifacts``); typed decoders whose errors name a code
and the offending path (``codec``); and the JSON Schema export (``export``) that
writes ``contracts/schema/`` for agents written in other languages. Golden
examples of every event kind live in ``contracts/examples/``.
"""
