"""The engine a source reads another service's database through (nova's,
Placement's): never written, so no own settings beyond the connection's."""

from __future__ import annotations

from typing import Any

import sqlalchemy as sa


def engine(url: str, read_timeout: int) -> sa.Engine:
    """An engine for ``url`` whose connections fail fast when the server is
    gone. ``read_timeout`` (MySQL, seconds): how long one query's answer
    may take, which is the reader's to say (a whole read of a large
    Placement takes a few seconds, a cell's refresh far less)."""
    connect_args: dict[str, Any] = {}
    if url.startswith("mysql"):
        # A dead Galera node or server answers within seconds, not minutes.
        connect_args = {"connect_timeout": 3, "read_timeout": read_timeout,
                        "write_timeout": 15}
    elif url.startswith("postgresql"):
        connect_args = {"connect_timeout": 3}
    return sa.create_engine(url, pool_pre_ping=True, pool_recycle=3600,
                            connect_args=connect_args)
