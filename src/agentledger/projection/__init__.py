"""The one projection base: every projection of the ledger writes only its fold.

A projection is a deterministic fold of ledger subjects into PostgreSQL rows, with
its watermark in the same transaction as the rows. What all of them share lives here:

* ``loop``: the live loop (``ProjectionLoop``): batch connection, committed watermark
  and projection, outages waited out, a replaced projection followed, poisoned batches
  bisected;
* ``poison``: what no fold can store (``unfoldable``), the errors a message's content
  causes (``POISON_ERRORS``), ``bisect``, ``projection_rejections``;
* ``stream``: the ledger side: durable consumers positioned from PostgreSQL, the
  contiguity check, ordered reads for rebuilds (``read_ordered``); ``puller``: the
  pull-request reader;
* ``rebuild``: rebuild beside and swap (``replace_live``) and ``verify``, for any
  projection that says how to build itself (``Rebuildable``), with forget requests
  never undone by a switch;
* ``spec``, ``live``, ``subject``: the projections of reserved subjects (memory,
  documents, the forget log): a ``SubjectFold`` (decode, fold a tenant's events, describe
  the rows) is run live by ``SubjectProjection`` and rebuilt and verified by
  ``rebuild_subject`` / ``verify_subject``.

Working Memory's lanes (``services/projector``) run the same loop and rebuild with a
fold of their own (partitions, a state cache, a bounded spilling fold).
"""
