"""``nova-sched-manage explain``: why a request would land where it would.

    nova-sched-manage --config-file FILE explain --flavor RAM_MB,VCPUS,DISK_GB
        [--extra-spec K=V]... [--hint K=V]... [--az AZ]
        [--project ID] [--timeout S] [--json]

Builds nova Havana's ``request_spec`` and ``filter_properties`` for one
instance of the given size and asks a running scheduler daemon, over the
``explain`` RPC call (CONTRACT section 3), what a decision would do. The
daemon claims nothing. Printed: the summary line a NoValidHost fault would
carry, per filter in the order they ran how many hosts it removed and
which, then the surviving hosts in weighed order with each weigher's
contribution to the total. ``--json`` prints the daemon's reply as it is.

Exit codes: 0 when the daemon answered (even when no host fits: that is an
answer); 1 when no daemon answered within the timeout or the daemon
refused the request; 2 for bad input (a malformed ``--flavor``,
``--extra-spec`` or ``--hint``), with one line on stderr.
"""

from __future__ import annotations

import json
import socket
import sys
import uuid
from typing import Any, Sequence

# Names of removed hosts printed per filter; --json lists them all.
MAX_NAMES_PER_FILTER = 50
DEFAULT_TIMEOUT = 30.0
# Reconnection attempts to the broker before giving up (oslo.messaging's
# ``retry``; its default, None, retries forever).
BROKER_RETRIES = 2


class BadInput(ValueError):
    """A command-line value that cannot make a request (exit code 2)."""


# -- the command line -------------------------------------------------------
def add_parser(subparsers) -> None:
    """Add ``explain`` to nova-sched-manage's categories."""
    parser = subparsers.add_parser(
        "explain",
        help="Dry run of a decision: what each filter removes and how the "
        "surviving hosts weigh. Claims nothing.",
        description="Ask a running scheduler which hosts each filter would "
        "remove for one instance of the given size, and how the survivors "
        "would be weighed. Nothing is claimed.",
    )
    # dest names avoid CONF's option names (see nova_sched.cmd.manage).
    parser.add_argument(
        "--flavor", dest="flavor_sizes", metavar="RAM_MB,VCPUS,DISK_GB",
        required=True,
        help="The instance's size: RAM in MB, vCPUs, root disk in GB.",
    )
    parser.add_argument(
        "--extra-spec", dest="extra_specs", metavar="K=V", action="append",
        default=[], help="A flavor extra spec (repeatable), for example "
        "'capabilities:hypervisor_type=kvm' or 'hw:numa_nodes=2'.",
    )
    parser.add_argument(
        "--hint", dest="hints", metavar="K=V", action="append", default=[],
        help="A scheduler hint (repeatable; a key given twice becomes a "
        "list), for example 'different_host=UUID' or "
        "'query=[\">=\",\"$free_ram_mb\",1024]'.",
    )
    parser.add_argument(
        "--az", dest="explain_zone", metavar="AZ", default=None,
        help="The requested availability zone.",
    )
    parser.add_argument(
        "--project", dest="explain_project", metavar="ID", default=None,
        help="The project (tenant) the instance would belong to, for the "
        "tenant-isolation filters.",
    )
    parser.add_argument(
        "--timeout", dest="explain_timeout", metavar="S", type=float,
        default=DEFAULT_TIMEOUT,
        help=f"Seconds to wait for a scheduler's answer (default "
        f"{DEFAULT_TIMEOUT:g}).",
    )
    parser.add_argument(
        "--json", dest="as_json", action="store_true",
        help="Print the scheduler's reply as JSON.",
    )
    parser.set_defaults(func=run)


def run(args) -> int:
    """The ``explain`` action: returns the exit code."""
    try:
        request_spec, filter_properties = build_request(
            args.flavor_sizes, args.extra_specs, args.hints,
            zone=args.explain_zone, project_id=args.explain_project,
        )
        timeout = args.explain_timeout
        if not timeout or timeout <= 0:
            raise BadInput(f"--timeout must be a positive number of seconds, "
                           f"got {timeout:g}")
    except BadInput as err:
        _error(str(err))
        return 2
    try:
        reply = ask_scheduler(request_spec, filter_properties, timeout)
    except SchedulerUnavailable as err:
        _error(str(err))
        return 1
    if args.as_json:
        print(json.dumps(reply, indent=2))
    else:
        print(format_reply(reply, describe_request(request_spec, filter_properties)))
    return 0


# -- the request ------------------------------------------------------------
def parse_flavor(text: str) -> tuple[int, int, int]:
    """``RAM_MB,VCPUS,DISK_GB`` as three whole numbers; BadInput otherwise."""
    parts = [p.strip() for p in (text or "").split(",")]
    if len(parts) != 3:
        raise BadInput(
            f"--flavor must be RAM_MB,VCPUS,DISK_GB (three whole numbers), "
            f"got {text!r}")
    sizes = []
    for label, part in zip(("RAM_MB", "VCPUS", "DISK_GB"), parts):
        if not part.isdigit():
            raise BadInput(
                f"--flavor {label} must be a whole non-negative number, got "
                f"{part!r} in {text!r}")
        sizes.append(int(part))
    ram, vcpus, disk = sizes
    if ram == 0 or vcpus == 0:
        raise BadInput(f"--flavor needs at least 1 MB of RAM and 1 vCPU, got {text!r}")
    return ram, vcpus, disk


def _pairs(items: Sequence[str], option: str) -> list[tuple[str, str]]:
    pairs = []
    for item in items:
        key, sep, value = item.partition("=")
        if not sep or not key.strip():
            raise BadInput(f"{option} expects KEY=VALUE, got {item!r}")
        pairs.append((key.strip(), value))
    return pairs


def parse_extra_specs(items: Sequence[str]) -> dict[str, str]:
    """``K=V`` strings into a flavor's extra_specs (the last value wins)."""
    return dict(_pairs(items, "--extra-spec"))


def parse_hints(items: Sequence[str]) -> dict[str, Any]:
    """``K=V`` strings into scheduler_hints; a key given twice becomes a list."""
    hints: dict[str, Any] = {}
    for key, value in _pairs(items, "--hint"):
        if key not in hints:
            hints[key] = value
        elif isinstance(hints[key], list):
            hints[key].append(value)
        else:
            hints[key] = [hints[key], value]
    return hints


def build_request(flavor: str, extra_specs: Sequence[str] = (),
                  hints: Sequence[str] = (), zone: str | None = None,
                  project_id: str | None = None) -> tuple[dict, dict]:
    """(request_spec, filter_properties) for one instance, as Havana built them."""
    ram, vcpus, disk = parse_flavor(flavor)
    specs = parse_extra_specs(extra_specs)
    scheduler_hints = parse_hints(hints)
    instance_uuid = str(uuid.uuid4())
    name = f"explain-{ram}-{vcpus}-{disk}"
    instance_type = {
        "name": name, "flavorid": name,
        "memory_mb": ram, "vcpus": vcpus, "root_gb": disk,
        "ephemeral_gb": 0, "swap": 0, "extra_specs": specs,
    }
    instance_properties = {
        "uuid": instance_uuid,
        "memory_mb": ram, "vcpus": vcpus, "root_gb": disk,
        "ephemeral_gb": 0, "swap": 0,
        "availability_zone": zone,
        "project_id": project_id, "user_id": None,
        "os_type": None, "image_ref": None,
        "vm_state": "building", "task_state": "scheduling",
    }
    request_spec = {
        "instance_properties": instance_properties,
        "instance_type": dict(instance_type, extra_specs=dict(specs)),
        "image": {"properties": {}},
        "instance_uuids": [instance_uuid],
        "num_instances": 1,
        "block_device_mapping": [],
        "security_group": ["default"],
    }
    filter_properties = {
        "scheduler_hints": scheduler_hints,
        "instance_type": dict(instance_type, extra_specs=dict(specs)),
    }
    return request_spec, filter_properties


def describe_request(request_spec: dict, filter_properties: dict) -> str:
    """One line saying what was asked, for the head of the text output."""
    itype = request_spec["instance_type"]
    parts = [f"{itype['memory_mb']} MB RAM, {itype['vcpus']} vCPUs, "
             f"{itype['root_gb']} GB disk"]
    zone = request_spec["instance_properties"].get("availability_zone")
    if zone:
        parts.append(f"zone {zone}")
    project = request_spec["instance_properties"].get("project_id")
    if project:
        parts.append(f"project {project}")
    if itype["extra_specs"]:
        parts.append("extra specs " + ", ".join(
            f"{k}={v}" for k, v in itype["extra_specs"].items()))
    if filter_properties["scheduler_hints"]:
        parts.append("hints " + ", ".join(
            f"{k}={v}" for k, v in filter_properties["scheduler_hints"].items()))
    return "; ".join(parts)


# -- the call ---------------------------------------------------------------
class SchedulerUnavailable(Exception):
    """No daemon answered, or the one that did refused the request."""


def ask_scheduler(request_spec: dict, filter_properties: dict,
                  timeout: float) -> dict:
    """The daemon's ``explain`` reply; SchedulerUnavailable on no answer."""
    import oslo_messaging as messaging

    from nova_sched import rpc
    from nova_sched.conf import CONF
    from nova_sched.scheduler import rpcapi

    _check_broker_reachable(messaging.TransportURL.parse(CONF, CONF.transport_url))
    transport = rpc.get_transport()
    try:
        api = rpcapi.SchedulerAPI(transport)
        # Give up on an unreachable broker instead of reconnecting forever
        # (SchedulerAPI.explain prepares from this context, keeping retry).
        api.client = api.client.prepare(retry=BROKER_RETRIES)
        try:
            return api.explain(rpc.admin_context(), request_spec,
                               filter_properties, timeout=timeout)
        except messaging.MessagingTimeout:
            raise SchedulerUnavailable(
                f"no scheduler answered on topic '{CONF.scheduler_topic}' "
                f"(exchange '{CONF.control_exchange}') within {timeout:g} s: "
                "is nova-sched running with this configuration?") from None
        except messaging.RemoteError as err:
            raise SchedulerUnavailable(
                f"the scheduler refused the request: {err.exc_type}: "
                f"{_first_line(err.value)}") from None
        except messaging.MessagingException as err:
            raise SchedulerUnavailable(
                f"cannot reach the scheduler: {type(err).__name__}: "
                f"{_first_line(str(err))}") from None
        except Exception as err:  # noqa: BLE001  (the broker's own errors)
            if type(err).__name__.endswith("_Remote"):
                # A remote exception re-raised under its own class.
                raise SchedulerUnavailable(
                    f"the scheduler refused the request: "
                    f"{_first_line(str(err))}") from None
            raise SchedulerUnavailable(
                f"cannot reach the scheduler: {type(err).__name__}: "
                f"{_first_line(str(err))}") from None
    finally:
        transport.cleanup()


def _check_broker_reachable(url, timeout: float = 3.0) -> None:
    """SchedulerUnavailable unless one of the broker's hosts takes a connection.

    oslo.messaging's rabbit driver opens the reply queue's connection
    without a retry limit, so a call to a broker that refuses connections
    would wait forever; a plain TCP connect answers in milliseconds.
    In-process transports (``kombu+memory://``, ``fake:``) have no hosts.
    """
    hosts = [h for h in url.hosts if h.hostname]
    if not hosts:
        return
    failures = []
    for h in hosts:
        port = h.port or _DEFAULT_PORTS.get(url.transport.split("+")[-1], 5672)
        try:
            socket.create_connection((h.hostname, port), timeout=timeout).close()
            return
        except OSError as err:
            failures.append(f"{h.hostname}:{port} ({err.strerror or err})")
    raise SchedulerUnavailable(
        "cannot connect to the message broker at " + ", ".join(failures)
        + ": check [DEFAULT] transport_url")


_DEFAULT_PORTS = {"rabbit": 5672, "amqp": 5672, "kafka": 9092}


def _first_line(text: Any) -> str:
    lines = str(text or "").strip().splitlines()
    return lines[0] if lines else ""


# -- the output -------------------------------------------------------------
def format_reply(reply: dict, asked: str | None = None,
                 max_names: int = MAX_NAMES_PER_FILTER) -> str:
    """The daemon's reply as aligned text."""
    hosts = list(reply.get("hosts") or [])
    removed = dict(reply.get("removed") or {})
    lines: list[str] = []
    if asked:
        lines.append(f"Request: {asked}")
    considered = len(hosts) + sum(len(v) for v in removed.values())
    lines.append(reply.get("reason") or f"{len(hosts)}/{considered} hosts available")
    lines.append("")

    lines.append("Filters, in the order they ran:")
    if removed:
        rows = []
        for name, pairs in removed.items():
            names = [_host_label(h, n) for h, n in pairs]
            shown = ", ".join(names[:max_names])
            if len(names) > max_names:
                shown += f", ... ({len(names) - max_names} more; --json lists all)"
            rows.append((name, len(pairs), shown))
        lines += _table(("Filter", "Removed", "Hosts"), rows)
    else:
        lines.append("  (no filter ran)")
    lines.append("")

    if not hosts:
        lines.append("No host passes the filters.")
        return "\n".join(lines)
    weighers = list((hosts[0].get("weights") or {}).keys())
    lines.append("Hosts in weighed order (best first); each weigher's "
                 "contribution to the weight:")
    rows = []
    for rank, h in enumerate(hosts, 1):
        weights = h.get("weights") or {}
        rows.append((rank, h["host"], h["nodename"], _number(h["weight"]),
                     *(_number(weights.get(w, 0.0)) for w in weighers)))
    lines += _table(("#", "Host", "Node", "Weight", *weighers), rows,
                    right=(0, 3, *range(4, 4 + len(weighers))))
    return "\n".join(lines)


def _host_label(host: str, node: str) -> str:
    return host if node in (None, host) else f"{host}/{node}"


def _number(value: Any) -> str:
    return f"{float(value):.4f}"


def _table(headers: Sequence[str], rows: Sequence[Sequence[Any]],
           right: Sequence[int] | None = None) -> list[str]:
    """Aligned columns; ``right`` columns (default: ints) are right-aligned."""
    cells = [[str(c) for c in row] for row in rows]
    widths = [len(h) for h in headers]
    for row in cells:
        for i, cell in enumerate(row):
            widths[i] = max(widths[i], len(cell))
    if right is None:
        right = [i for i, c in enumerate(rows[0]) if isinstance(c, int)] if rows else []
    right = set(right)

    def _line(row):
        out = [c.rjust(w) if i in right else c.ljust(w)
               for i, (c, w) in enumerate(zip(row, widths))]
        return ("  " + "  ".join(out)).rstrip()

    return [_line(list(headers)), "  " + "  ".join("-" * w for w in widths),
            *(_line(row) for row in cells)]


def _error(message: str) -> None:
    print(f"ERROR: {message}".splitlines()[0], file=sys.stderr)

