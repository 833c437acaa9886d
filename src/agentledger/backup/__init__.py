"""``agentledger backup`` and ``restore``: one folder with JetStream snapshots, a PostgreSQL
dump and a manifest, and a restore that forgets again what was forgotten since (docs/deletion.md,
"Backup and restore")."""
