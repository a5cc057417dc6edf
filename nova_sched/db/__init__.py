"""Persistence: models, engine and sessions, migrations, and the queries."""
