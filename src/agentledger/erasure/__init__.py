"""Forgetting for real: secure erase of ledger messages, evicting cached copies from every
service instance, and the scans that prove forgotten content is gone."""
