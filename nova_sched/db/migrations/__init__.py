"""Alembic environment and revisions of the scheduler database.

Driven from code by ``nova_sched.db.migration``; no alembic.ini is needed.
"""
