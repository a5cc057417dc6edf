"""``nova-sched-manage``: the operator's tool (CONTRACT section 1).

    nova-sched-manage --config-file FILE <category> <action> [args]

Exit codes: 0 on success; 1 when the operation fails (an unknown host,
aggregate or instance, a refused change, a database error), with one line on
stderr; 2 for bad usage or configuration.

Commands are argparse sub-parsers under oslo.config's SubCommandOpt. A
category is a function that adds its parser to ``subparsers`` and sets
``func`` (called with the parsed arguments, returning the exit code) on
each action; another module joins by exposing ``add_parser(subparsers)``
and being named in ``_COMMAND_MODULES``. Argument ``dest`` names must not
be option names of CONF (such as ``host``) nor ``name``: oslo.config reads
them through the same attribute namespace.
"""

from __future__ import annotations

import argparse
import contextlib
import datetime as dt
import importlib
import importlib.util
import json
import logging
import re
import sys
from typing import Any, Callable, Iterable, Iterator, Sequence

from oslo_config import cfg
from oslo_log import log as oslo_logging
from sqlalchemy import exc as sa_exc

from nova_sched import exception
from nova_sched.conf import CONF
from nova_sched.db import aggregates
from nova_sched.db import api as db_api
from nova_sched.db import migration
from nova_sched.db import reports
from nova_sched.db import services

# Modules that add more categories (``explain`` lives with the scheduler's
# RPC client); a module that is not installed is skipped.
_COMMAND_MODULES = ("nova_sched.cmd.explain",)

LOG = logging.getLogger(__name__)


# -- db ---------------------------------------------------------------------
def _db_sync(args) -> int:
    revision = migration.db_sync()
    print(f"Database schema is at revision {revision}.")
    return 0


def _db_version(args) -> int:
    print(migration.db_version() or "None")
    return 0


def _add_db(subparsers) -> None:
    actions = _category(subparsers, "db", "The database schema.")
    actions.add_parser("sync", help="Create or upgrade the schema.").set_defaults(
        func=_db_sync
    )
    actions.add_parser("version", help="Print the schema revision.").set_defaults(
        func=_db_version
    )


# -- host -------------------------------------------------------------------
def _host_list(args) -> int:
    if CONF.scheduler.host_source == "nova_cells":
        from nova_sched.scheduler.cloud.sources.nova_cells import NovaCellsSource

        # Placement's capacity and usage, nova's services and nodes.
        hosts = NovaCellsSource().host_list()
    else:
        hosts = reports.host_list()
    if args.as_json:
        _print_json(hosts)
        return 0
    _print_table(
        ("Host", "Node", "State", "Status", "RAM MB claimed/total", "RAM MB used",
         "vCPUs claimed/total", "vCPUs used", "Disk GB claimed/total",
         "Disk GB used", "Instances"),
        [
            (
                h["host"],
                h["node"],
                "up" if h["up"] else "down",
                "disabled" if h["disabled"] else "enabled",
                f"{h['claimed_memory_mb']}/{h['memory_mb']}",
                _or_dash(h["memory_mb_used"]),
                f"{h['claimed_vcpus']}/{h['vcpus']}",
                _or_dash(h["vcpus_used"]),
                f"{h['claimed_disk_mb'] / 1024:g}/{h['local_gb']}",
                _or_dash(h["local_gb_used"]),
                h["instances"],
            )
            for h in hosts
        ],
    )
    return 0


def _or_dash(value) -> Any:
    return "-" if value is None else value


def _add_host(subparsers) -> None:
    actions = _category(subparsers, "host", "Compute nodes.")
    parser = actions.add_parser(
        "list", help="Every compute node: state, capacity, claims, reported use."
    )
    _json_flag(parser)
    parser.set_defaults(func=_host_list)


# -- service ----------------------------------------------------------------
def _service_disable(args) -> int:
    services.disable(args.service_host, args.reason)
    reason = f" ({args.reason})" if args.reason else ""
    print(f"Host {args.service_host} disabled{reason}.")
    return 0


def _service_enable(args) -> int:
    services.enable(args.service_host)
    print(f"Host {args.service_host} enabled.")
    return 0


def _add_service(subparsers) -> None:
    actions = _category(subparsers, "service", "Compute services.")
    parser = actions.add_parser("disable", help="Take a host out of scheduling.")
    parser.add_argument("service_host", metavar="HOST")
    parser.add_argument("--reason", dest="reason", metavar="R", default=None)
    parser.set_defaults(func=_service_disable)
    parser = actions.add_parser("enable", help="Put a host back into scheduling.")
    parser.add_argument("service_host", metavar="HOST")
    parser.set_defaults(func=_service_enable)


# -- aggregate --------------------------------------------------------------
def _aggregate_create(args) -> int:
    agg = aggregates.create(args.aggregate, args.zone)
    zone = f" in availability zone {agg['availability_zone']}" if args.zone else ""
    print(f"Aggregate {agg['name']} created{zone}.")
    return 0


def _aggregate_add_host(args) -> int:
    aggregates.add_host(args.aggregate, args.member)
    print(f"Host {args.member} added to aggregate {args.aggregate}.")
    return 0


def _aggregate_remove_host(args) -> int:
    aggregates.remove_host(args.aggregate, args.member)
    print(f"Host {args.member} removed from aggregate {args.aggregate}.")
    return 0


def _aggregate_set_metadata(args) -> int:
    agg = aggregates.set_metadata(args.aggregate, dict(args.pairs))
    print(f"Aggregate {agg['name']} metadata: {_format_metadata(agg['metadata'])}")
    return 0


def _aggregate_list(args) -> int:
    aggs = aggregates.list_all()
    if args.as_json:
        _print_json(aggs)
        return 0
    _print_table(
        ("Id", "Name", "Availability zone", "Hosts", "Metadata"),
        [
            (
                a["id"],
                a["name"],
                a["availability_zone"] or "",
                ", ".join(a["hosts"]),
                _format_metadata(a["metadata"]),
            )
            for a in aggs
        ],
    )
    return 0


def _key_value(text: str) -> tuple[str, str]:
    key, sep, value = text.partition("=")
    if not sep or not key:
        raise argparse.ArgumentTypeError(f"expected KEY=VALUE, got {text!r}")
    return key, value


def _add_aggregate(subparsers) -> None:
    actions = _category(subparsers, "aggregate", "Host aggregates and zones.")
    parser = actions.add_parser("create", help="Create an aggregate.")
    parser.add_argument("aggregate", metavar="NAME")
    parser.add_argument(
        "--zone", dest="zone", metavar="AZ", default=None,
        help="Make the aggregate an availability zone.",
    )
    parser.set_defaults(func=_aggregate_create)
    for action, func, help_text in (
        ("add-host", _aggregate_add_host, "Put a host into an aggregate."),
        ("remove-host", _aggregate_remove_host, "Take a host out of an aggregate."),
    ):
        parser = actions.add_parser(action, help=help_text)
        parser.add_argument("aggregate", metavar="NAME")
        parser.add_argument("member", metavar="HOST")
        parser.set_defaults(func=func)
    parser = actions.add_parser(
        "set-metadata", help="Set metadata keys; KEY= deletes KEY."
    )
    parser.add_argument("aggregate", metavar="NAME")
    parser.add_argument("pairs", metavar="KEY=VALUE", nargs="+", type=_key_value)
    parser.set_defaults(func=_aggregate_set_metadata)
    parser = actions.add_parser("list", help="Every aggregate.")
    _json_flag(parser)
    parser.set_defaults(func=_aggregate_list)


# -- instance ---------------------------------------------------------------
def _instance_show(args) -> int:
    inst = reports.instance_show(args.instance_uuid)
    if args.as_json:
        _print_json(inst)
        return 0
    _print_table(
        ("Field", "Value"),
        [
            (key, _text(value))
            for key, value in inst.items()
            if key not in ("faults", "actions")
        ],
    )
    print()
    print("Faults:")
    _print_table(
        ("Created", "Code", "Host", "Message"),
        [
            (_text(f["created_at"]), f["code"], _text(f["host"]), _text(f["message"]))
            for f in inst["faults"]
        ],
    )
    print()
    print("Actions:")
    for action in inst["actions"]:
        print(
            f"  {action['action']} request {action['request_id']} "
            f"started {_text(action['start_time'])} "
            f"finished {_text(action['finish_time'])}"
        )
        _print_table(
            ("Event", "Host", "Start", "Finish", "Result"),
            [
                (e["event"], _text(e["host"]), _text(e["start_time"]),
                 _text(e["finish_time"]), _text(e["result"]))
                for e in action["events"]
            ],
            indent="    ",
        )
        for event in action["events"]:
            if event["traceback"]:
                print(f"    {event['event']} traceback:")
                for line in event["traceback"].rstrip().splitlines():
                    print(f"      {line}")
    return 0


def _add_instance(subparsers) -> None:
    actions = _category(subparsers, "instance", "Instances.")
    parser = actions.add_parser(
        "show", help="Placement, state, faults, actions and their events."
    )
    parser.add_argument("instance_uuid", metavar="UUID")
    _json_flag(parser)
    parser.set_defaults(func=_instance_show)


# -- parsing ----------------------------------------------------------------
def _category(subparsers, name: str, help_text: str):
    parser = subparsers.add_parser(name, help=help_text)
    actions = parser.add_subparsers(
        title="actions", dest=f"{name}_action", metavar="ACTION"
    )
    actions.required = True
    return actions


def _json_flag(parser) -> None:
    parser.add_argument(
        "--json", dest="as_json", action="store_true", help="Print JSON."
    )


def _add_commands(subparsers) -> None:
    for add in (_add_db, _add_host, _add_service, _add_aggregate, _add_instance):
        add(subparsers)
    for module_name in _COMMAND_MODULES:
        if importlib.util.find_spec(module_name) is not None:
            importlib.import_module(module_name).add_parser(subparsers)


_CATEGORY_OPT = cfg.SubCommandOpt(
    "category", title="Commands", handler=_add_commands,
    help="Run 'nova-sched-manage CATEGORY --help' for a category's actions.",
)


def _parse(argv: Sequence[str]) -> None:
    # main() owns the global CONF for the run: discard an earlier parse so
    # the command line options can be registered again.
    CONF.clear()
    oslo_logging.register_options(CONF)
    CONF.register_cli_opt(_CATEGORY_OPT)
    CONF(list(argv), project="nova-sched", prog="nova-sched-manage")


def _release_conf() -> None:
    # Leave no required sub-command behind on the global CONF for the next
    # parse in this process (tests, the embedded demo).
    CONF.clear()
    CONF.unregister_opt(_CATEGORY_OPT)


@contextlib.contextmanager
def _logging_to_stderr() -> Iterator[None]:
    # stderr, so that logging never mixes into --json output on stdout.
    handler = logging.StreamHandler(sys.stderr)
    handler.setFormatter(logging.Formatter("%(levelname)s %(name)s: %(message)s"))
    root = logging.getLogger()
    level = root.level
    root.addHandler(handler)
    root.setLevel(logging.DEBUG if CONF.debug else logging.WARNING)
    try:
        yield
    finally:
        root.removeHandler(handler)
        root.setLevel(level)


def main(argv: Sequence[str] | None = None) -> int:
    """Run one command; returns the exit code."""
    argv = sys.argv[1:] if argv is None else list(argv)
    try:
        try:
            _parse(argv)
        except SystemExit as exc:
            # argparse: --help (0) or bad usage (2, message already printed).
            return exc.code if isinstance(exc.code, int) else 2
        except cfg.Error as exc:
            _error(f"bad configuration: {exc}")
            return 2
        with _logging_to_stderr():
            return _run(CONF.category)
    finally:
        _release_conf()


def _run(args) -> int:
    try:
        db_api.configure(CONF.database.connection)
    except (sa_exc.ArgumentError, ImportError, ValueError) as exc:
        _error(f"bad [database] connection: {type(exc).__name__}: {exc}")
        return 2
    func: Callable[[Any], int] = args.func
    try:
        return func(args)
    except exception.NovaSchedException as exc:
        _error(exc.message)
    except sa_exc.SQLAlchemyError as exc:
        _error(_database_error(exc))
    except Exception as exc:  # noqa: BLE001  (one line, not a traceback)
        LOG.debug("%s failed", CONF.category.name, exc_info=True)
        _error(f"unexpected {type(exc).__name__}: {exc}")
    return 1


def _database_error(exc: sa_exc.SQLAlchemyError) -> str:
    if not isinstance(exc, (sa_exc.OperationalError, sa_exc.ProgrammingError)):
        return f"database error: {_first_line(exc)}"
    try:
        current = migration.schema_is_current()
    except sa_exc.SQLAlchemyError:
        current = True  # The database is unreachable: report that instead.
    if not current:
        return (
            "the database schema is missing or not current: run "
            "'nova-sched-manage db sync'"
        )
    return f"database error: {_first_line(exc)}"


def _first_line(exc: BaseException) -> str:
    orig = getattr(exc, "orig", None)
    text = str(orig if orig is not None else exc).strip()
    return f"{type(orig or exc).__name__}: {text.splitlines()[0] if text else ''}"


def _error(message: str) -> None:
    print(f"ERROR: {_redact(message)}".splitlines()[0], file=sys.stderr)


_URL_PASSWORD = re.compile(r"(://[^:/@\s]*:)[^@\s]*@")


def _redact(text: str) -> str:
    """Remove the database password from a message bound for the terminal."""
    try:
        url = CONF.database.connection or ""
    except cfg.Error:
        url = ""
    password = _password_of(url)
    if password:
        text = text.replace(password, "***")
    return _URL_PASSWORD.sub(r"\1***@", text)


def _password_of(url: str) -> str | None:
    match = re.match(r"[^:]+://[^:/@]*:([^@]*)@", url)
    return match.group(1) if match else None


# -- output -----------------------------------------------------------------
def _print_json(data: Any) -> None:
    print(json.dumps(data, indent=2, sort_keys=True, default=_json_default))


def _json_default(value: Any) -> Any:
    if isinstance(value, (dt.datetime, dt.date)):
        return value.isoformat()
    raise TypeError(f"{type(value).__name__} is not JSON serialisable")


def _print_table(
    headers: Sequence[str], rows: Iterable[Sequence[Any]], indent: str = ""
) -> None:
    """Aligned columns: numbers to the right, text to the left."""
    rows = [tuple(_text(cell) if not isinstance(cell, int) else cell for cell in row)
            for row in rows]
    widths = [len(h) for h in headers]
    for row in rows:
        for i, cell in enumerate(row):
            widths[i] = max(widths[i], len(str(cell)))
    print(indent + "  ".join(h.ljust(w) for h, w in zip(headers, widths)).rstrip())
    print(indent + "  ".join("-" * w for w in widths))
    for row in rows:
        cells = [
            str(cell).rjust(w) if isinstance(cell, int) else str(cell).ljust(w)
            for cell, w in zip(row, widths)
        ]
        print(indent + "  ".join(cells).rstrip())


def _text(value: Any) -> str:
    if value is None:
        return "-"
    if isinstance(value, dt.datetime):
        return value.isoformat(sep=" ", timespec="seconds")
    return str(value)


def _format_metadata(metadata: dict[str, str]) -> str:
    return ", ".join(f"{k}={v}" for k, v in sorted(metadata.items()))


if __name__ == "__main__":
    sys.exit(main())
