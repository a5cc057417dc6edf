"""Options of the [database] group."""

from __future__ import annotations

from oslo_config import cfg

database_group = cfg.OptGroup(
    "database", title="Database", help="Where the scheduler keeps its records."
)

database_opts = [
    cfg.StrOpt(
        "connection",
        default="sqlite:///$state_path/nova_sched.sqlite",
        secret=True,
        help="SQLAlchemy URL of the scheduler database. SQLite, PostgreSQL "
        "(postgresql+psycopg2://...) and MySQL/MariaDB "
        "(mysql+pymysql://...) are supported. Secret: it may hold a password.",
    ),
    cfg.IntOpt(
        "max_retries",
        default=10,
        min=0,
        help="Attempts to reach the database at start-up before the daemon "
        "gives up with exit code 2.",
    ),
    cfg.FloatOpt(
        "retry_interval",
        default=1.0,
        min=0,
        help="Seconds between attempts to reach the database.",
    ),
    cfg.IntOpt(
        "operation_retries",
        default=5,
        min=0,
        help="Times a database operation is retried after a lost connection "
        "before the request it belongs to fails.",
    ),
]


def register_opts(conf: cfg.ConfigOpts) -> None:
    conf.register_group(database_group)
    conf.register_opts(database_opts, group=database_group)


def list_opts():
    return {database_group: database_opts}
