"""Who may do what: NATS accounts and credentials, the caller of a request, agent bindings,
appends made on an agent's behalf, sealed personal content, and files only their owner reads."""
