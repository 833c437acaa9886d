"""The tombstone-fanout service (``service.py``): forget requests fanned out to every index."""
