"""A team's agents in one place: each machine pushes its sessions to the team's PostgreSQL
(`push.py`, from a local outbox, `outbox.py`, by a pusher process beside the recorder,
`pusher.py`), the team's schema is versioned (`schema.py`), team budgets are leased in slices
(`leases.py`), and `cluster.py` starts a throw-away server for tests and trials. psycopg is
imported only where PostgreSQL is reached, never by the proxy's or recorder's start.
"""
