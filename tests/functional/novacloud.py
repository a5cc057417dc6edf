"""A test cloud of today's nova (34) and Placement (16) on one machine.

Every nova process runs from the nova venv that ``tools/nova_venv.sh``
makes (``$NOVA_SCHED_NOVA_VENV``, default
``~/.cache/nova-sched/nova-venv-34.x``); this project's daemon runs from
this tree with ``sys.executable``. Everything is private to one cloud: a
RabbitMQ vhost on the machine's broker (127.0.0.1:5672), four databases
with a unique prefix on the machine's MariaDB (127.0.0.1:3306, root without
a password), free ports for Placement, nova-api and the glance/neutron
stub, and a work directory with the configs, state and one log per
process. The machine's own services are never stopped or reconfigured;
``close()`` kills the processes, drops the databases and deletes the vhost.

Usage (the pieces can also be called one by one, in this order)::

    cloud = NovaCloud(workdir)
    cloud.start(computes={"small": "fake.SmallFakeDriver", ...},
                scheduler="nova-sched")     # or "nova-scheduler"
    flavor = cloud.api.create_flavor("f1", vcpus=1, ram=512, disk=1)
    server = cloud.api.boot(flavor["id"])
    server = cloud.api.wait_final(server["id"])
    cloud.placement.allocations(server["id"])
    cloud.close()

The pieces: ``open()`` (vhost, databases, ports, configs), ``deploy()``
(schemas and cell mappings), ``start_services()`` (stubs, Placement,
conductor, nova-api), ``start_nova_scheduler()`` / ``start_nova_sched()``,
``start_compute(host, driver, **options)``, ``discover_hosts(hosts)``.
For outages and more daemons: ``stop_placement()`` / ``start_placement()``
(same port), ``api_db_proxy`` (nova-sched's way to nova's API database, a
``cloudlib.TcpProxy`` with ``stop()`` / ``start()``), ``start_nova_sched(name=...)``
for another daemon beside the cloud's own and ``stop_nova_sched(name)``,
``healthz(name)``; ``restart_compute(host)`` after ``stop(f"nova-compute-{host}")``,
``remove_compute(host)`` to retire one.

Two cells (``NovaCloud(workdir, cells=2)``): cell2 beside cell1, mapped
with ``nova-manage cell_v2 create_cell``, with its own database, its own
vhost and its own conductor (``nova-conductor-cell2``), as a split
deployment has them; the cloud's nova-conductor is the superconductor (the
top-level transport and the API database) and cell1's conductor; nova-api
and the scheduler are on the top level. A compute joins cell2 with
``start_compute(host, driver, cell="cell2")`` (or ``"cell": "cell2"`` in
``start``'s computes); ``cell_uuids`` and ``compute_cells`` say what is
where. ``cell_db_proxy=True`` puts cell2's mapping behind
``cell_db_proxies["cell2"]`` (a TcpProxy) to cut cell2's database from
the mapping's readers.
No keystone: nova-api's ``authtoken`` filter is novacloud_stubs'
``auth_filter_factory`` (an admin of one project), Placement runs with
``noauth2`` and the token ``admin``.
"""

from __future__ import annotations

import os
import re
import shutil
import signal
import socket
import subprocess
import sys
import threading
import time
import uuid
from pathlib import Path
from typing import Any, Callable, Iterable

import requests

import cloudlib

HERE = Path(__file__).resolve().parent
# Fake virt drivers of this project, loadable by nova-compute (start_compute).
PLUGINS = HERE / "plugins"
REPO = cloudlib.REPO
NOVA_VERSION = os.environ.get("NOVA_SCHED_NOVA_VERSION", "34.*")
PLACEMENT_VERSION = os.environ.get("NOVA_SCHED_PLACEMENT_VERSION", "16.*")
# What tools/nova_venv.sh installs beside nova for this cloud.
VENV_EXTRAS = (f"openstack-placement=={PLACEMENT_VERSION}", "PyMySQL")
MYSQL_HOST = "127.0.0.1"
MYSQL_PORT = 3306
MYSQL_USER = "root"
COMPUTE_MICROVERSION = "2.90"
PLACEMENT_MICROVERSION = "placement 1.39"
IMAGE_ID = "155d900f-4e14-4e4c-a73d-069cbf4541e6"
SCHEDULERS = ("nova-sched", "nova-scheduler")


def default_venv() -> Path:
    default = Path.home() / ".cache" / "nova-sched" / (
        "nova-venv-" + NOVA_VERSION.replace("*", "x"))
    return Path(os.environ.get("NOVA_SCHED_NOVA_VENV", default))


def ensure_venv(venv: Path | None = None, timeout: float = 1800) -> Path:
    """Make (or check) the nova venv with tools/nova_venv.sh; returns its path."""
    venv = Path(venv) if venv else default_venv()
    made = subprocess.run(["bash", str(REPO / "tools" / "nova_venv.sh"), NOVA_VERSION,
                           str(venv), *VENV_EXTRAS],
                          capture_output=True, text=True, timeout=timeout,
                          stdin=subprocess.DEVNULL)
    if made.returncode != 0:
        raise CloudError(f"could not install nova {NOVA_VERSION} with "
                         f"{' '.join(VENV_EXTRAS)} in {venv}:\n"
                         f"{made.stdout[-3000:]}\n{made.stderr[-3000:]}")
    return venv


free_port = cloudlib.free_port


def port_open(port: int, host: str = "127.0.0.1") -> bool:
    try:
        with socket.create_connection((host, port), timeout=1):
            return True
    except OSError:
        return False


def wait_until(predicate: Callable[[], Any], timeout: float, interval: float = 0.5,
               what: str = "condition") -> Any:
    return cloudlib.wait_until(predicate, timeout, interval, what)


def mysql_reachable() -> bool:
    return port_open(MYSQL_PORT, MYSQL_HOST)


class CloudError(RuntimeError):
    """A step of the cloud's start failed; the message has the log tails."""


# -- a TCP forwarder that can be cut ----------------------------------------------
class Databases:
    """The cloud's databases on the machine's MariaDB: the API's, cell0's,
    one per cell (cell1, cell2...) and Placement's."""

    NAMES = ("api", "cell0", "cell1", "placement")

    def __init__(self, tag: str, cells: int = 1):
        self.prefix = f"novacloud_p{os.getpid()}_{tag}"
        names = self.NAMES + tuple(f"cell{n}" for n in range(2, cells + 1))
        self.names = {name: f"{self.prefix}_{name}" for name in names}
        self.created: list[str] = []

    @staticmethod
    def _connect():
        import pymysql

        return pymysql.connect(host=MYSQL_HOST, port=MYSQL_PORT, user=MYSQL_USER,
                               password="", autocommit=True, connect_timeout=5)

    def url(self, name: str, port: int | None = None) -> str:
        """The database's URL; through another ``port`` (a TcpProxy) when given."""
        return (f"mysql+pymysql://{MYSQL_USER}@{MYSQL_HOST}:{port or MYSQL_PORT}/"
                f"{self.names[name]}?charset=utf8")

    def create(self) -> None:
        conn = self._connect()
        try:
            with conn.cursor() as cur:
                self._sweep(cur)
                for name in self.names.values():
                    cur.execute(f"CREATE DATABASE `{name}` CHARACTER SET utf8")
                    self.created.append(name)
        finally:
            conn.close()

    @staticmethod
    def _sweep(cur) -> None:
        """Drop databases of earlier clouds whose process is gone."""
        cur.execute("SHOW DATABASES LIKE 'novacloud\\_p%'")
        for (name,) in cur.fetchall():
            match = re.match(r"novacloud_p(\d+)_", name)
            if match and not cloudlib.pid_alive(int(match.group(1))):
                cur.execute(f"DROP DATABASE IF EXISTS `{name}`")

    def query(self, name: str, sql: str, *params) -> list[dict]:
        import pymysql

        conn = self._connect()
        try:
            conn.select_db(self.names[name])
            with conn.cursor(pymysql.cursors.DictCursor) as cur:
                cur.execute(sql, params or None)
                return list(cur.fetchall())
        finally:
            conn.close()

    def drop(self) -> None:
        if not self.created:
            return
        conn = self._connect()
        try:
            with conn.cursor() as cur:
                for name in self.created:
                    cur.execute(f"DROP DATABASE IF EXISTS `{name}`")
        finally:
            conn.close()
        self.created = []


# -- configuration files ----------------------------------------------------
def ini(sections: dict[str, dict[str, Any]]) -> str:
    lines = []
    for group, values in sections.items():
        lines.append(f"[{group}]")
        for key, value in values.items():
            if isinstance(value, bool):
                value = "true" if value else "false"
            lines.append(f"{key} = {value}")
        lines.append("")
    return "\n".join(lines)


def merge(base: dict, overrides: dict | None) -> dict:
    out = {group: dict(values) for group, values in base.items()}
    for group, values in (overrides or {}).items():
        out.setdefault(group, {}).update(values)
    return out


# -- REST clients -----------------------------------------------------------
class ApiError(RuntimeError):
    def __init__(self, method: str, url: str, status: int, body: str):
        super().__init__(f"{method} {url}: {status} {body[:2000]}")
        self.status = status
        self.body = body


class _Rest:
    def __init__(self, base: str, headers: dict[str, str]):
        self.base = base.rstrip("/")
        self.session = requests.Session()
        self.session.headers.update(headers)

    def request(self, method: str, path: str, body: Any = None,
                ok: Iterable[int] = (200, 201, 202, 204), timeout: float = 60,
                **kwargs) -> Any:
        url = self.base + path
        resp = self.session.request(method, url, json=body, timeout=timeout, **kwargs)
        if resp.status_code not in ok:
            raise ApiError(method, url, resp.status_code, resp.text)
        if not resp.content:
            return None
        try:
            return resp.json()
        except ValueError:
            return resp.text

    def get(self, path: str, **kw) -> Any:
        return self.request("GET", path, **kw)

    def post(self, path: str, body: Any = None, **kw) -> Any:
        return self.request("POST", path, body, **kw)

    def put(self, path: str, body: Any = None, **kw) -> Any:
        return self.request("PUT", path, body, **kw)

    def delete(self, path: str, **kw) -> Any:
        return self.request("DELETE", path, **kw)


class PlacementClient(_Rest):
    """Placement's REST API as an admin (token ``admin``, microversion 1.39)."""

    def __init__(self, endpoint: str):
        super().__init__(endpoint, {"X-Auth-Token": "admin",
                                    "OpenStack-API-Version": PLACEMENT_MICROVERSION,
                                    "Accept": "application/json"})

    def providers(self) -> dict[str, str]:
        """Every resource provider: name -> uuid."""
        rps = self.get("/resource_providers")["resource_providers"]
        return {rp["name"]: rp["uuid"] for rp in rps}

    def provider_uuid(self, name: str) -> str:
        return self.providers()[name]

    def allocations(self, consumer: str) -> dict[str, dict[str, int]]:
        """A consumer's allocations: provider uuid -> {resource class: amount}."""
        body = self.get(f"/allocations/{consumer}")
        return {rp: alloc["resources"] for rp, alloc in body["allocations"].items()}

    def usages(self, rp_uuid: str) -> dict[str, int]:
        return self.get(f"/resource_providers/{rp_uuid}/usages")["usages"]

    def inventories(self, rp_uuid: str) -> dict[str, dict]:
        return self.get(f"/resource_providers/{rp_uuid}/inventories")["inventories"]

    def capacity(self, rp_uuid: str) -> dict[str, int]:
        """What a provider can hold: (total - reserved) * allocation_ratio."""
        return {rc: int((inv["total"] - inv["reserved"]) * inv["allocation_ratio"])
                for rc, inv in self.inventories(rp_uuid).items()}

    def all_usages(self) -> dict[str, dict[str, int]]:
        """Provider name -> its usages (only the non-zero amounts)."""
        return {name: {rc: n for rc, n in self.usages(rp).items() if n}
                for name, rp in self.providers().items()}

    def traits(self, rp_uuid: str) -> list[str]:
        return self.get(f"/resource_providers/{rp_uuid}/traits")["traits"]


class ComputeClient(_Rest):
    """nova-api's REST API as an admin (microversion 2.90)."""

    def __init__(self, endpoint: str, image_id: str = IMAGE_ID):
        super().__init__(endpoint + "/v2.1", {
            "X-OpenStack-Nova-API-Version": COMPUTE_MICROVERSION,
            "OpenStack-API-Version": f"compute {COMPUTE_MICROVERSION}",
            "X-Auth-Token": "admin", "Accept": "application/json"})
        self.image_id = image_id

    # -- flavors ------------------------------------------------------------
    def create_flavor(self, name: str, vcpus: int, ram: int, disk: int,
                      ephemeral: int = 0, swap: int = 0,
                      extra_specs: dict | None = None) -> dict:
        """A new public flavor; returns nova's flavor dict (``id`` is its flavorRef)."""
        body = {"flavor": {"name": name, "vcpus": vcpus, "ram": ram, "disk": disk,
                           "OS-FLV-EXT-DATA:ephemeral": ephemeral, "swap": swap}}
        flavor = self.post("/flavors", body)["flavor"]
        if extra_specs:
            self.post(f"/flavors/{flavor['id']}/os-extra_specs",
                      {"extra_specs": extra_specs})
        return flavor

    def delete_flavor(self, flavor_id: str) -> None:
        self.delete(f"/flavors/{flavor_id}")

    # -- servers ------------------------------------------------------------
    def boot(self, flavor_id: str, name: str | None = None, count: int = 1,
             availability_zone: str | None = None, hints: dict | None = None,
             min_count: int | None = None, max_count: int | None = None,
             image_id: str | None = None) -> dict:
        """POST /servers without networks (``image_id``: the glance stub's
        default image unless given). Returns the created server's
        dict; with more than one instance, ``{"reservation_id": ...}``
        (use ``servers_of(reservation_id)``)."""
        server: dict[str, Any] = {
            "name": name or f"vm-{uuid.uuid4().hex[:6]}",
            "imageRef": image_id or self.image_id, "flavorRef": flavor_id,
            "networks": "none",
        }
        lo = min_count if min_count is not None else count
        hi = max_count if max_count is not None else count
        if hi > 1 or lo > 1:
            server["min_count"], server["max_count"] = lo, hi
            server["return_reservation_id"] = True
        if availability_zone:
            server["availability_zone"] = availability_zone
        body: dict[str, Any] = {"server": server}
        if hints:
            body["os:scheduler_hints"] = hints
        answer = self.post("/servers", body)
        return answer.get("server") or answer

    def server(self, server_id: str) -> dict | None:
        """GET /servers/{id}, or None once it is gone."""
        try:
            return self.get(f"/servers/{server_id}")["server"]
        except ApiError as err:
            if err.status == 404:
                return None
            raise

    def servers(self, **query) -> list[dict]:
        """GET /servers/detail (every project) with the given filters."""
        params = {"all_tenants": "1", **query}
        return self.get("/servers/detail", params=params)["servers"]

    def servers_of(self, reservation_id: str, count: int | None = None,
                   timeout: float = 30) -> list[dict]:
        """The servers of a multi-create request (all of them, when ``count``)."""
        def _listed():
            found = self.servers(reservation_id=reservation_id)
            if count is None or len(found) >= count:
                return found
            return None
        return wait_until(_listed, timeout, 0.5, f"servers of {reservation_id}")

    def wait_status(self, server_id: str, statuses: Iterable[str],
                    timeout: float = 120) -> dict:
        """Until the server's status is one of ``statuses``; returns the server.

        A server that goes to ERROR while something else was awaited is
        returned at once (with its fault)."""
        wanted = set(statuses)
        last: dict = {}

        def _done():
            nonlocal last
            server = self.server(server_id)
            if server is None:
                raise AssertionError(f"server {server_id} vanished")
            last = server
            if server["status"] in wanted or server["status"] == "ERROR":
                if not server.get("OS-EXT-STS:task_state"):
                    return server
            return None
        try:
            return wait_until(_done, timeout, 0.5,
                              f"server {server_id} to be {sorted(wanted)}")
        except TimeoutError as err:
            raise AssertionError(
                f"{err}: last {last.get('status')} "
                f"task {last.get('OS-EXT-STS:task_state')}") from None

    def wait_final(self, server_id: str, timeout: float = 120) -> dict:
        """Until ACTIVE or ERROR (a build is over); returns the server."""
        return self.wait_status(server_id, ("ACTIVE", "ERROR"), timeout)

    def delete_server(self, server_id: str) -> None:
        try:
            self.delete(f"/servers/{server_id}")
        except ApiError as err:
            if err.status != 404:
                raise

    def wait_gone(self, server_ids: Iterable[str], timeout: float = 120) -> None:
        left = set(server_ids)

        def _gone():
            for sid in list(left):
                if self.server(sid) is None:
                    left.discard(sid)
            return not left
        wait_until(_gone, timeout, 0.5, f"servers {sorted(left)} deleted")

    def delete_all_servers(self, timeout: float = 120) -> list[str]:
        """Delete every server of every project and wait until they are gone."""
        ids = [s["id"] for s in self.servers()]
        for sid in ids:
            self.delete_server(sid)
        self.wait_gone(ids, timeout)
        return ids

    def action(self, server_id: str, name: str, value: Any = None) -> Any:
        return self.post(f"/servers/{server_id}/action", {name: value})

    def migrate(self, server_id: str, host: str | None = None) -> None:
        self.action(server_id, "migrate", {"host": host} if host else None)

    def confirm_resize(self, server_id: str) -> None:
        self.action(server_id, "confirmResize")

    def instance_actions(self, server_id: str) -> list[dict]:
        """The server's actions, each with its ``events`` (host included)."""
        out = []
        listed = self.get(f"/servers/{server_id}/os-instance-actions")
        for action in listed["instanceActions"]:
            detail = self.get(f"/servers/{server_id}/os-instance-actions/"
                              f"{action['request_id']}")["instanceAction"]
            out.append(detail)
        return out

    def migrations(self, server_id: str) -> list[dict]:
        return self.get("/os-migrations", params={"instance_uuid": server_id})[
            "migrations"]

    # -- server groups -------------------------------------------------------
    def create_server_group(self, name: str, policy: str,
                            rules: dict | None = None) -> dict:
        body = {"server_group": {"name": name, "policy": policy}}
        if rules:
            body["server_group"]["rules"] = rules
        return self.post("/os-server-groups", body)["server_group"]

    def server_group(self, group_id: str) -> dict:
        return self.get(f"/os-server-groups/{group_id}")["server_group"]

    def delete_server_group(self, group_id: str) -> None:
        self.delete(f"/os-server-groups/{group_id}")

    # -- aggregates and availability zones -----------------------------------
    def create_aggregate(self, name: str, availability_zone: str | None = None,
                         hosts: Iterable[str] = ()) -> dict:
        body = {"aggregate": {"name": name}}
        if availability_zone:
            body["aggregate"]["availability_zone"] = availability_zone
        agg = self.post("/os-aggregates", body)["aggregate"]
        for host in hosts:
            agg = self.aggregate_add_host(agg["id"], host)
        return agg

    def aggregate_add_host(self, agg_id: int, host: str) -> dict:
        return self.post(f"/os-aggregates/{agg_id}/action",
                         {"add_host": {"host": host}})["aggregate"]

    def aggregate_remove_host(self, agg_id: int, host: str) -> dict:
        return self.post(f"/os-aggregates/{agg_id}/action",
                         {"remove_host": {"host": host}})["aggregate"]

    def delete_aggregate(self, agg_id: int) -> None:
        """Remove its hosts, then the aggregate."""
        agg = self.get(f"/os-aggregates/{agg_id}")["aggregate"]
        for host in agg.get("hosts") or []:
            self.aggregate_remove_host(agg_id, host)
        self.delete(f"/os-aggregates/{agg_id}")

    def availability_zones(self) -> dict[str, list[str]]:
        """Zone name -> its hosts (os-availability-zone/detail)."""
        zones = self.get("/os-availability-zone/detail")["availabilityZoneInfo"]
        return {z["zoneName"]: sorted(z.get("hosts") or {}) for z in zones}

    # -- compute services and hypervisors ------------------------------------
    def compute_services(self) -> dict[str, dict]:
        """host -> its nova-compute service (``id`` is the uuid, ``status``, ``state``)."""
        listed = self.get("/os-services", params={"binary": "nova-compute"})
        return {s["host"]: s for s in listed["services"]}

    def set_service_enabled(self, host: str, enabled: bool,
                            reason: str = "test") -> dict:
        service = self.compute_services()[host]
        body = {"status": "enabled" if enabled else "disabled"}
        if not enabled:
            body["disabled_reason"] = reason
        return self.put(f"/os-services/{service['id']}", body)["service"]

    def hypervisors(self) -> dict[str, dict]:
        """hypervisor_hostname -> hypervisor (``id`` is the node's uuid)."""
        listed = self.get("/os-hypervisors/detail")["hypervisors"]
        return {h["hypervisor_hostname"]: h for h in listed}


def host_of(server: dict) -> str | None:
    return server.get("OS-EXT-SRV-ATTR:host")


def fault_of(server: dict) -> str:
    fault = server.get("fault") or {}
    return fault.get("message", "")


# -- the cloud ----------------------------------------------------------------
class NovaCloud:
    """nova 34 + Placement 16 + a scheduler, on private resources."""

    def __init__(self, workdir: Path, name: str = "nova", venv: Path | None = None,
                 debug: bool | None = None, nova_overrides: dict | None = None,
                 api_db_proxy: bool = False, cells: int = 1,
                 cell_db_proxy: bool = False):
        """``nova_overrides``: {group: {option: value}} merged into nova.conf
        (every nova process reads it); ``debug``: nova's and Placement's
        debug logs (default: ``$NOVA_SCHED_CLOUD_DEBUG``); ``api_db_proxy``:
        nova-sched reaches nova's API database through ``self.api_db_proxy``
        (a cloudlib.TcpProxy of this process, to cut that database from nova-sched
        alone), every other process directly.

        ``cells``: 1 (cell1) or 2 (cell1 and cell2; cell0 always). cell2
        has its own database, its own RabbitMQ vhost and its own conductor
        (``nova-conductor-cell2``); the cloud's nova-conductor is the
        superconductor and cell1's conductor. ``cell_db_proxy`` (with
        ``cells=2``): cell2's cell mapping names its database through
        ``self.cell_db_proxies["cell2"]``, so that ``stop()`` cuts it from
        every reader of the mapping (the scheduler, nova-api, the
        superconductor, nova-manage) while cell2's conductor keeps its
        direct connection."""
        if cells not in (1, 2):
            raise ValueError(f"cells={cells}: a cloud has one or two cells")
        if cell_db_proxy and cells < 2:
            raise ValueError("cell_db_proxy needs cells=2 (it cuts cell2's database)")
        self.workdir = Path(workdir)
        self.workdir.mkdir(parents=True, exist_ok=True)
        self.venv = Path(venv) if venv else default_venv()
        self.bin = self.venv / "bin"
        self.tag = f"{name}_{uuid.uuid4().hex[:8]}"
        if debug is None:
            debug = os.environ.get("NOVA_SCHED_CLOUD_DEBUG", "") not in ("", "0", "false")
        self.debug = debug
        self.nova_overrides = nova_overrides or {}
        self.broker: cloudlib.Broker | None = None
        self.cells = [f"cell{n}" for n in range(1, cells + 1)]
        self.dbs = Databases(self.tag.replace("-", "_"), cells)
        # cell name -> its private vhost; cell1's is ``broker``, the
        # top level's (nova-api, the scheduler, the superconductor).
        self.cell_brokers: dict[str, cloudlib.Broker] = {}
        self.procs: dict[str, subprocess.Popen] = {}
        self.logs: dict[str, Path] = {}
        self.computes: dict[str, str] = {}      # host -> driver
        self.compute_cells: dict[str, str] = {}   # host -> cell name
        self._compute_args: dict[str, dict[str, Any]] = {}   # for restart_compute
        self._compute_env: dict[str, dict[str, str]] = {}    # restart_compute's
        self.scheduler: str | None = None      # "nova-sched" / "nova-scheduler"
        self.etc = self.workdir / "etc"
        self.nova_dir = self.etc / "nova"
        self.placement_dir = self.etc / "placement"
        self.nova_conf = self.nova_dir / "nova.conf"
        self.placement_conf = self.placement_dir / "placement.conf"
        self.sched_conf = self.workdir / "nova-sched.conf"
        self.ports: dict[str, int] = {}
        self.cell1_uuid: str | None = None
        self.cell_uuids: dict[str, str] = {}      # cell name -> uuid (cell0 not)
        self.timings: dict[str, float] = {}
        self._api: ComputeClient | None = None
        self._placement: PlacementClient | None = None
        self._want_api_db_proxy = api_db_proxy
        self.api_db_proxy: cloudlib.TcpProxy | None = None
        self._want_cell_db_proxy = cell_db_proxy
        self.cell_db_proxies: dict[str, cloudlib.TcpProxy] = {}
        self._opened = False

    # -- endpoints -------------------------------------------------------------
    @property
    def transport_url(self) -> str:
        return self.broker.url

    def cell_transport_url(self, cell: str) -> str:
        """The transport of a cell's conductor and computes (cell1's is the
        top-level one)."""
        if cell == "cell1":
            return self.transport_url
        return self.cell_brokers[cell].url

    def cell_db_url(self, cell: str) -> str:
        """A cell's database as its cell mapping names it (through its
        proxy, when it has one)."""
        proxy = self.cell_db_proxies.get(cell)
        return self.dbs.url(cell, proxy.port if proxy else None)

    @property
    def placement_url(self) -> str:
        return f"http://127.0.0.1:{self.ports['placement']}"

    @property
    def api_url(self) -> str:
        return f"http://127.0.0.1:{self.ports['api']}"

    @property
    def api(self) -> ComputeClient:
        if self._api is None:
            self._api = ComputeClient(self.api_url)
        return self._api

    @property
    def placement(self) -> PlacementClient:
        if self._placement is None:
            self._placement = PlacementClient(self.placement_url)
        return self._placement

    @property
    def metrics_url(self) -> str:
        return f"http://127.0.0.1:{self.ports['prometheus']}/metrics"

    # -- the whole cloud ---------------------------------------------------------
    def start(self, computes: dict[str, Any], scheduler: str = "nova-sched",
              nova_sched_overrides: dict | None = None) -> "NovaCloud":
        """open, deploy, services, the scheduler, the computes, discover_hosts.

        ``computes``: host -> driver name (``fake.SmallFakeDriver``...) or a
        dict of ``start_compute`` keyword arguments (``driver`` included).
        """
        t0 = time.monotonic()
        self.open()
        self.deploy()
        self.start_services()
        self.start_scheduler(scheduler, nova_sched_overrides)
        self.wait_for_port("placement")
        for host, spec in computes.items():
            kwargs = {"driver": spec} if isinstance(spec, str) else dict(spec)
            self.start_compute(host, **kwargs)
        self.wait_for_port("api")
        self.discover_hosts(list(computes))
        self.timings["start"] = time.monotonic() - t0
        return self

    def open(self) -> None:
        """The private vhost, databases, ports and config files."""
        if shutil.which("rabbitmqctl") is None:
            raise CloudError("needs rabbitmqctl for a private vhost")
        self.broker = cloudlib.Broker(self.tag).open()
        if not self.broker.vhost:
            raise CloudError("could not make a private RabbitMQ vhost "
                             "(nova's topic names are fixed)")
        self._opened = True
        for cell in self.cells[1:]:
            broker = cloudlib.Broker(f"{self.tag}_{cell}").open()
            self.cell_brokers[cell] = broker
            if not broker.vhost:
                raise CloudError(f"could not make {cell}'s private RabbitMQ vhost")
        self.dbs.create()
        for name in ("placement", "api", "services", "prometheus"):
            self.ports[name] = free_port()
        if self._want_api_db_proxy:
            self.api_db_proxy = cloudlib.TcpProxy((MYSQL_HOST, MYSQL_PORT)).start()
        if self._want_cell_db_proxy:
            self.cell_db_proxies["cell2"] = cloudlib.TcpProxy(
                (MYSQL_HOST, MYSQL_PORT)).start()
        self.write_configs()

    def write_configs(self) -> None:
        self.nova_dir.mkdir(parents=True, exist_ok=True)
        self.placement_dir.mkdir(parents=True, exist_ok=True)
        (self.workdir / "state").mkdir(exist_ok=True)
        self.placement_conf.write_text(ini({
            "DEFAULT": {"debug": self.debug},
            "api": {"auth_strategy": "noauth2"},
            "placement_database": {"connection": self.dbs.url("placement")},
            # Placement 16 overcommits a provider when two claims on it race:
            # PUT /allocations retries a generation conflict inside the
            # request's outer transaction, where the first attempt's own
            # allocation rows still count as "previous usage", so the retry
            # passes as "no worse than before" (measured here: six concurrent
            # 1-VCPU claims on a 2-VCPU provider all succeed; twelve
            # nova-scheduler boots put 12 VCPU on a 10-VCPU node). With one
            # try the loser gets 409 placement.concurrent_update and the
            # client retries in a new transaction (nova's report client
            # does).
            "placement": {"allocation_conflict_retry_count": 1},
        }))
        self.nova_conf.write_text(ini(merge(self.nova_sections(), self.nova_overrides)))
        paste = (self.venv / "etc" / "nova" / "api-paste.ini").read_text()
        paste, replaced = re.subn(
            r"(\[filter:authtoken\]\n)paste\.filter_factory\s*=.*\n",
            r"\1paste.filter_factory = novacloud_stubs:auth_filter_factory\n", paste)
        if replaced != 1:
            raise CloudError("nova's api-paste.ini has no [filter:authtoken] to replace")
        (self.nova_dir / "api-paste.ini").write_text(paste)
        for cell in self.cells[1:]:
            self.cell_conf(cell).write_text(ini(self.cell_sections(cell)))

    def cell_conf(self, cell: str) -> Path:
        """The nova.conf of cell2's conductor and computes (cell1's
        processes read ``nova_conf``)."""
        return self.nova_dir / f"nova-{cell}.conf"

    def cell_sections(self, cell: str) -> dict[str, dict[str, Any]]:
        """The whole config of a cell's own processes (cell2's conductor and
        computes; cell1's conductor is the superconductor): the cell's
        transport and database.

        No [api_database], as devstack's superconductor mode writes it: a
        cell conductor that could read the API database would hide the
        upcalls a real split deployment cannot make, and nova is written
        for its absence (the Selection carries the alternate's zone, so a
        reschedule needs no aggregate; targets_cell and
        raise_if_old_compute skip the API database when
        ``api_database.connection`` is None). A compute must not have it
        either: with it, nova-compute's start asks its conductor for every
        cell's minimum service version, which cell2's conductor cannot
        answer (CantStartEngineError). The database is direct, not through
        a cell_db_proxy: cutting the mapping's way to the cell must leave
        the cell itself working.
        """
        sections = merge(self.nova_sections(), self.nova_overrides)
        del sections["api_database"]
        sections["DEFAULT"]["transport_url"] = self.cell_transport_url(cell)
        sections["database"] = {"connection": self.dbs.url(cell)}
        return sections

    def nova_sections(self) -> dict[str, dict[str, Any]]:
        stubs = f"http://127.0.0.1:{self.ports['services']}"
        return {
            "DEFAULT": {
                "transport_url": self.transport_url,
                "state_path": self.workdir / "state",
                "debug": self.debug,
                "my_ip": "127.0.0.1",
                "compute_driver": "fake.FakeDriver",
                # Placement's ratios: exact counts for the tests.
                "initial_cpu_allocation_ratio": 1.0,
                "initial_ram_allocation_ratio": 1.0,
                "initial_disk_allocation_ratio": 1.0,
                "reserved_host_memory_mb": 0,
                "allow_resize_to_same_host": False,
                "heal_instance_info_cache_interval": -1,
                "graceful_shutdown_timeout": 5,
                "rpc_response_timeout": 60,
            },
            "api_database": {"connection": self.dbs.url("api")},
            "database": {"connection": self.dbs.url("cell1")},
            "wsgi": {"api_paste_config": self.nova_dir / "api-paste.ini"},
            "oslo_concurrency": {"lock_path": self.workdir / "state" / "lock"},
            "placement": {"auth_type": "admin_token", "endpoint": self.placement_url,
                          "token": "admin"},
            "glance": {"api_servers": stubs, "num_retries": 0},
            "neutron": {"auth_type": "admin_token", "endpoint_override": stubs,
                        "token": "admin"},
            "quota": {"instances": -1, "cores": -1, "ram": -1,
                      "server_groups": -1, "server_group_members": -1},
            "scheduler": {"workers": 1, "discover_hosts_in_cells_interval": -1},
            "conductor": {"workers": 1},
            "api": {"max_limit": 1000},
            "oslo_messaging_rabbit": {"rabbit_transient_queues_ttl": 600},
            "oslo_policy": {"enforce_scope": True, "enforce_new_defaults": True},
        }

    # -- processes ---------------------------------------------------------------
    def _env(self, extra_path: Iterable[Path] = ()) -> dict[str, str]:
        env = dict(os.environ)
        for key in ("PYTHONPATH", "VIRTUAL_ENV", "PYTHONHOME"):
            env.pop(key, None)
        paths = [str(p) for p in extra_path]
        if paths:
            env["PYTHONPATH"] = os.pathsep.join(paths)
        env["PYTHONUNBUFFERED"] = "1"
        env["OS_NOVA_CONFIG_DIR"] = str(self.nova_dir)
        env["OS_PLACEMENT_CONFIG_DIR"] = str(self.placement_dir)
        env["PATH"] = f"{self.bin}{os.pathsep}{env.get('PATH', '')}"
        return env

    def spawn(self, name: str, cmd: list[str], env: dict[str, str] | None = None
              ) -> subprocess.Popen:
        """A long-running process, its own process group, output in NAME.log."""
        log = self.workdir / f"{name}.log"
        with open(log, "ab") as fh:
            proc = subprocess.Popen(cmd, stdout=fh, stderr=subprocess.STDOUT,
                                    stdin=subprocess.DEVNULL,
                                    env=env or self._env(), cwd=str(self.workdir),
                                    start_new_session=True)
        self.procs[name] = proc
        self.logs[name] = log
        return proc

    def run(self, name: str, cmd: list[str], timeout: float = 300,
            env: dict[str, str] | None = None) -> str:
        """A one-shot command; its output goes to NAME.log; fails loudly."""
        t0 = time.monotonic()
        done = subprocess.run(cmd, capture_output=True, text=True, timeout=timeout,
                              env=env or self._env(), cwd=str(self.workdir),
                              stdin=subprocess.DEVNULL)
        with open(self.workdir / f"{name}.log", "a") as fh:
            fh.write(f"$ {' '.join(cmd)}\n{done.stdout}{done.stderr}"
                     f"exit {done.returncode} after {time.monotonic() - t0:.1f}s\n")
        if done.returncode != 0:
            raise CloudError(f"{' '.join(cmd)} failed ({done.returncode}):\n"
                             f"{done.stdout[-3000:]}\n{done.stderr[-3000:]}")
        return done.stdout

    def nova_manage(self, *args: str, timeout: float = 300) -> str:
        return self.run("nova-manage", [str(self.bin / "nova-manage"), "--config-file",
                                        str(self.nova_conf), *args], timeout)

    def deploy(self) -> None:
        """Schemas of the four databases and the cell mappings.

        Four chains in parallel (each nova-manage is seconds of imports):
        Placement's schema; the API schema then cell0's mapping then cell1's
        (then cell2's); cell1's schema; cell0's schema (``db sync
        --local_cell`` with cell0's URL in a second config file); cell2's
        schema likewise, a fifth chain, in a two-cell cloud.
        """
        t0 = time.monotonic()
        cell0_conf = self.nova_dir / "cell0.conf"
        cell0_conf.write_text(ini({"database": {"connection": self.dbs.url("cell0")}}))
        manage = [str(self.bin / "nova-manage"), "--config-file", str(self.nova_conf)]
        cells_after = []
        for cell in self.cells[1:]:
            cell_conf = self.nova_dir / f"{cell}.conf"
            cell_conf.write_text(ini({"database": {"connection": self.dbs.url(cell)}}))
            cells_after.append((cell, cell_conf))
        chains = {
            "placement-manage": [[str(self.bin / "placement-manage"), "--config-file",
                                  str(self.placement_conf), "db", "sync"]],
            "nova-manage": [
                manage + ["api_db", "sync"],
                manage + ["cell_v2", "map_cell0", "--database_connection",
                          self.dbs.url("cell0")],
                manage + ["cell_v2", "create_cell", "--name", "cell1"],
                *[manage + ["cell_v2", "create_cell", "--name", cell,
                            "--transport-url", self.cell_transport_url(cell),
                            "--database_connection", self.cell_db_url(cell)]
                  for cell, _ in cells_after]],
            "nova-manage-cell1": [manage + ["db", "sync", "--local_cell"]],
            "nova-manage-cell0": [manage + ["--config-file", str(cell0_conf),
                                            "db", "sync", "--local_cell"]],
            **{f"nova-manage-{cell}": [manage + ["--config-file", str(conf),
                                                 "db", "sync", "--local_cell"]]
               for cell, conf in cells_after},
        }
        errors: list[BaseException] = []

        def _chain(name, commands):
            try:
                for cmd in commands:
                    self.run(name, cmd)
            except BaseException as err:  # re-raised below
                errors.append(err)

        threads = [threading.Thread(target=_chain, args=item) for item in chains.items()]
        for thread in threads:
            thread.start()
        for thread in threads:
            thread.join()
        if errors:
            raise errors[0]
        rows = self.dbs.query("api", "SELECT name, uuid FROM cell_mappings")
        self.cell_uuids = {r["name"]: r["uuid"] for r in rows if r["name"] in self.cells}
        self.cell1_uuid = self.cell_uuids["cell1"]
        self.timings["deploy"] = time.monotonic() - t0

    def start_services(self) -> None:
        """The glance/neutron stub, Placement, nova-conductor and nova-api."""
        python = str(self.bin / "python")
        stubs = str(HERE / "novacloud_stubs.py")
        self.spawn("stubs", [python, stubs, "services", "--port",
                             str(self.ports["services"])])
        self.start_placement(wait=False)
        self.spawn("nova-conductor", [str(self.bin / "nova-conductor"),
                                      "--config-file", str(self.nova_conf)])
        for cell in self.cells[1:]:
            self.spawn(f"nova-conductor-{cell}", [
                str(self.bin / "nova-conductor"),
                "--config-file", str(self.cell_conf(cell))])
        # nova-api imports the auth filter from novacloud_stubs.
        self.spawn("nova-api", [python, stubs, "wsgi", "nova", "--port",
                                str(self.ports["api"])], env=self._env([HERE]))

    def start_placement(self, wait: bool = True, timeout: float = 60) -> None:
        """Placement's WSGI server on its port (again, after ``stop_placement``)."""
        self.spawn("placement", [str(self.bin / "python"), str(HERE / "novacloud_stubs.py"),
                                 "wsgi", "placement", "--port",
                                 str(self.ports["placement"])])
        if wait:
            self.wait_for_port("placement", timeout)

    def stop_placement(self) -> None:
        """Placement's WSGI server killed (its port refuses connections)."""
        proc = self.procs.get("placement")
        if proc is not None:
            self._signal(proc, signal.SIGKILL)
            proc.wait(10)
            del self.procs["placement"]
        wait_until(lambda: not port_open(self.ports["placement"]), 10, 0.2,
                   "Placement's port closed")

    def start_scheduler(self, kind: str, nova_sched_overrides: dict | None = None
                        ) -> subprocess.Popen:
        if kind == "nova-scheduler":
            return self.start_nova_scheduler()
        if kind == "nova-sched":
            return self.start_nova_sched(nova_sched_overrides)
        raise ValueError(f"unknown scheduler {kind!r}: one of {SCHEDULERS}")

    def start_nova_scheduler(self) -> subprocess.Popen:
        """nova's own nova-scheduler from the venv."""
        self.scheduler = "nova-scheduler"
        return self.spawn("nova-scheduler", [str(self.bin / "nova-scheduler"),
                                             "--config-file", str(self.nova_conf)])

    def nova_sched_sections(self, name: str = "nova-sched") -> dict[str, dict[str, Any]]:
        """The config of the nova-sched daemon ``name``: ``nova-sched`` (the
        cloud's scheduler, host ``nova-sched-1``) or another one (host
        ``name``, its own SQLite file and /metrics port) sharing the
        transport, nova's databases and Placement."""
        main = name == "nova-sched"
        api_db = self.dbs.url("api", self.api_db_proxy.port if self.api_db_proxy else None)
        return {
            "DEFAULT": {"host": "nova-sched-1" if main else name,
                        "transport_url": self.transport_url,
                        "control_exchange": "nova", "debug": True,
                        "state_path": self.workdir / "state"},
            "database": {"connection": "sqlite:///" + str(
                self.workdir / ("nova_sched.sqlite" if main else f"{name}.sqlite"))},
            "scheduler": {"host_source": "nova_cells", "claims": "placement"},
            "nova_cells": {"api_database_connection": api_db,
                           "refresh_interval": 1},
            # Placement's model is read from Placement's own tables (issue 39).
            "placement_database": {"connection": self.dbs.url("placement")},
            "placement": {"auth_type": "admin_token", "endpoint": self.placement_url,
                          "token": "admin"},
            "prometheus": {"enabled": True, "port": self.prometheus_port(name)},
        }

    def prometheus_port(self, name: str = "nova-sched") -> int:
        """The /metrics and /healthz port of the nova-sched daemon ``name``."""
        key = "prometheus" if name == "nova-sched" else f"prometheus:{name}"
        if key not in self.ports:
            self.ports[key] = free_port()
        return self.ports[key]

    def sched_conf_of(self, name: str = "nova-sched") -> Path:
        return self.sched_conf if name == "nova-sched" else self.workdir / f"{name}.conf"

    def start_nova_sched(self, overrides: dict | None = None, name: str = "nova-sched"
                         ) -> subprocess.Popen:
        """This project's daemon (``python3 -m nova_sched.cmd.scheduler``);
        its process and log are ``name``. ``nova-sched`` is the cloud's
        scheduler; any other name starts one more daemon beside it (stop it
        with ``stop(name)``)."""
        if name == "nova-sched":
            self.scheduler = "nova-sched"
        conf = self.sched_conf_of(name)
        conf.write_text(ini(merge(self.nova_sched_sections(name), overrides)))
        env = cloudlib.subprocess_env()
        self.run(f"{name}-manage", [sys.executable, "-m", "nova_sched.cmd.manage",
                                    "--config-file", str(conf), "db", "sync"], env=env)
        return self.spawn(name, [sys.executable, "-m", "nova_sched.cmd.scheduler",
                                 "--config-file", str(conf)], env=env)

    def stop_nova_sched(self, name: str, timeout: float = 30) -> int | None:
        """Stop (SIGTERM) a nova-sched daemon started beside the cloud's own
        and forget it; its exit code (None: it had to be killed)."""
        code = self.stop(name, timeout)
        self.procs.pop(name, None)
        return code

    def healthz(self, name: str = "nova-sched") -> tuple[int, str]:
        """``GET /healthz`` of the nova-sched daemon ``name``: (status, body);
        status 0 when nothing answers."""
        try:
            resp = requests.get(f"http://127.0.0.1:{self.prometheus_port(name)}/healthz",
                                timeout=10)
        except requests.RequestException as err:
            return 0, f"{type(err).__name__}: {err}"
        return resp.status_code, resp.text.strip()

    def start_compute(self, host: str, driver: str = "fake.FakeDriver",
                      cell: str = "cell1", **options: Any) -> subprocess.Popen:
        """nova-compute HOST of ``cell`` with a fake driver (nova's,
        ``fake.FakeDriver``, or this project's,
        ``provider_tree_drivers.PinnedCPUDriver`` from
        tests/functional/plugins/); ``options`` go to its ``[DEFAULT]``
        (e.g. ``reserved_host_memory_mb``), or a dict per group under
        ``groups={"group": {...}}``. The host is a candidate once
        ``discover_hosts`` maps it."""
        if cell not in self.cells:
            raise ValueError(f"no cell {cell!r} in this cloud: {self.cells}")
        self._compute_args[host] = {"driver": driver, "cell": cell,
                                    **options}
        state = self.workdir / "state" / host
        state.mkdir(parents=True, exist_ok=True)
        groups = options.pop("groups", {})
        conf = self.nova_dir / f"compute-{host}.conf"
        default = {"host": host, "compute_driver": driver, "state_path": state,
                   "instances_path": state / "instances", **options}
        if cell != "cell1":
            # Its cell's config has it already; said again here so that the
            # host's own file shows which vhost it is on.
            default["transport_url"] = self.cell_transport_url(cell)
        conf.write_text(ini(merge({
            "DEFAULT": default,
            "oslo_concurrency": {"lock_path": state / "lock"},
        }, groups)))
        self.computes[host] = driver
        self.compute_cells[host] = cell
        # A driver of this project's (tests/functional/plugins/<module>.py)
        # is loaded by a launcher: nova reads compute_driver under nova.virt only.
        plugin = PLUGINS / (driver.split(".", 1)[0] + ".py")
        command = ([str(self.bin / "python"), str(PLUGINS / "nova_compute_plugins.py")]
                   if plugin.exists() else [str(self.bin / "nova-compute")])
        base = self.nova_conf if cell == "cell1" else self.cell_conf(cell)
        return self.spawn(f"nova-compute-{host}", [
            *command, "--config-file", str(base), "--config-file", str(conf)],
            env=self._compute_env.get(host))

    def restart_compute(self, host: str) -> subprocess.Popen:
        """nova-compute HOST started again as ``start_compute`` first started
        it (after ``stop(f"nova-compute-{host}")``, e.g. once evacuated);
        its service and node are those it had."""
        name = f"nova-compute-{host}"
        proc = self.procs.get(name)
        if proc is not None and proc.poll() is None:
            raise CloudError(f"{name} is still running (pid {proc.pid})")
        # nova's fake drivers name their node's uuid from oslo.utils'
        # uuidsentinel, random in each process: started again, the compute
        # would make a second node of the same name (nova refuses it:
        # "Duplicate compute node record"). The node keeps its uuid (its
        # provider's) by a sitecustomize that sets the sentinel before
        # nova starts, and the node identity file nova-compute insists on
        # at a second start (fake drivers never write one) holds it too.
        state = self.workdir / "state" / host
        node_uuid = self.placement.provider_uuid(host)
        identity = state / "compute_id"
        if not identity.exists():
            identity.write_text(node_uuid)
        seed = state / "python"
        seed.mkdir(exist_ok=True)
        (seed / "sitecustomize.py").write_text(
            "# novacloud.restart_compute: the node's uuid as its first start made it.\n"
            "from oslo_utils.fixture import uuidsentinel\n"
            # An attribute of its own is found before the sentinel's
            # __getattr__ would make a random one.
            f"setattr(uuidsentinel, {'node_' + host!r}, {node_uuid!r})\n")
        self._compute_env[host] = self._env([seed])
        return self.start_compute(host, **dict(self._compute_args[host]))

    def remove_compute(self, host: str, timeout: float = 60) -> None:
        """nova-compute HOST stopped and its service deleted through nova's
        API, as an operator retires a host: nova deletes its node, its host
        mapping and its provider (the host must hold no server)."""
        name = f"nova-compute-{host}"
        self.stop(name)
        self.procs.pop(name, None)
        service = self.api.compute_services().get(host)
        if service is not None:   # None: it never registered
            self.api.delete(f"/os-services/{service['id']}")
        for table in (self.computes, self.compute_cells, self._compute_args,
                      self._compute_env):
            table.pop(host, None)
        self._wait(lambda: host not in self.placement.providers(), timeout,
                   f"{host}'s provider deleted")

    def wait_for_port(self, name: str, timeout: float = 90) -> None:
        proc_of = {"placement": "placement", "api": "nova-api", "services": "stubs"}

        def _up():
            self.assert_running()
            return port_open(self.ports[name])
        self._wait(_up, timeout, f"{proc_of.get(name, name)} on port {self.ports[name]}")

    def discover_hosts(self, hosts: list[str], timeout: float = 120) -> None:
        """Until every host's provider is in Placement, then map them into
        their cells (``nova-manage cell_v2 discover_hosts`` scans every
        cell) and wait until nova-api lists them as up compute services."""
        def _providers():
            self.assert_running()
            try:
                names = set(self.placement.providers())
            except (requests.RequestException, ApiError):
                return False
            return set(hosts) <= names
        self._wait(_providers, timeout, f"resource providers of {hosts}")
        self.nova_manage("cell_v2", "discover_hosts")

        def _services_up():
            self.assert_running()
            services = self.api.compute_services()
            return all(services.get(h, {}).get("state") == "up" for h in hosts)
        self._wait(_services_up, timeout, f"compute services {hosts} up")

    def _wait(self, predicate: Callable[[], Any], timeout: float, what: str) -> Any:
        try:
            return wait_until(predicate, timeout, 0.5, what)
        except TimeoutError as err:
            raise CloudError(f"{err}\n{self.log_tails()}") from None

    def assert_running(self) -> None:
        dead = {n: p.returncode for n, p in self.procs.items() if p.poll() is not None}
        if dead:
            raise CloudError(f"processes exited early: {dead}\n"
                             + self.log_tails(list(dead)))

    def log_text(self, name: str) -> str:
        path = self.logs.get(name) or self.workdir / f"{name}.log"
        return path.read_text(errors="replace") if path.exists() else ""

    def log_tails(self, names: list[str] | None = None, lines: int = 25) -> str:
        out = []
        for name in names or list(self.logs):
            text = self.log_text(name).splitlines()[-lines:]
            out.append(f"--- {name} ({self.workdir / (name + '.log')}) ---\n"
                       + "\n".join(text))
        return "\n".join(out)

    def scheduler_log(self) -> str:
        return self.log_text(self.scheduler) if self.scheduler else ""

    def nova_sched_manage(self, *args: str, timeout: float = 60) -> str:
        """``nova-sched-manage --config-file <the daemon's> ARGS``; its stdout."""
        done = subprocess.run([sys.executable, "-m", "nova_sched.cmd.manage",
                               "--config-file", str(self.sched_conf), *args],
                              capture_output=True, text=True, timeout=timeout,
                              env=cloudlib.subprocess_env(), cwd=str(self.workdir),
                              stdin=subprocess.DEVNULL)
        if done.returncode != 0:
            raise CloudError(f"nova-sched-manage {' '.join(args)} failed "
                             f"({done.returncode}): {done.stderr[-2000:]}")
        return done.stdout

    def stop(self, name: str, timeout: float = 10) -> int | None:
        """SIGTERM a process's group, SIGKILL after ``timeout``; its exit code."""
        proc = self.procs.get(name)
        if proc is None:
            return None
        self._signal(proc, signal.SIGTERM)
        try:
            return proc.wait(timeout)
        except subprocess.TimeoutExpired:
            self._signal(proc, signal.SIGKILL)
            proc.wait(10)
            return None

    @staticmethod
    def _signal(proc: subprocess.Popen, sig: int) -> None:
        try:
            os.killpg(proc.pid, sig)
        except (ProcessLookupError, PermissionError):
            pass

    def close(self) -> None:
        """Kill every process, drop the databases, delete the vhost."""
        for proc in self.procs.values():
            self._signal(proc, signal.SIGTERM)
        deadline = time.monotonic() + 10
        for proc in self.procs.values():
            try:
                proc.wait(max(0.1, deadline - time.monotonic()))
            except subprocess.TimeoutExpired:
                pass
            self._signal(proc, signal.SIGKILL)   # the group's stragglers too
            try:
                proc.wait(10)
            except subprocess.TimeoutExpired:
                pass
        for client in (self._api, self._placement):
            if client is not None:
                client.session.close()
        if self.api_db_proxy is not None:
            self.api_db_proxy.stop()
        for proxy in self.cell_db_proxies.values():
            proxy.stop()
        try:
            self.dbs.drop()
        finally:
            for broker in [self.broker, *self.cell_brokers.values()]:
                if broker is not None:
                    broker.close()

    def __enter__(self) -> "NovaCloud":
        return self

    def __exit__(self, *exc) -> None:
        self.close()

    # -- checks shared by tests and benchmarks -----------------------------------
    def settle(self) -> None:
        """Give the scheduler time to see a change of services or aggregates
        (nova-sched reads nova's databases every ``refresh_interval``)."""
        time.sleep(2.5)

    def usage_by_host(self) -> dict[str, dict[str, int]]:
        return self.placement.all_usages()

    def wait_usage_zero(self, timeout: float = 60) -> None:
        """Until no provider has any usage (an empty cloud)."""
        def _zero():
            usages = self.usage_by_host()
            return not any(usages.values())
        try:
            wait_until(_zero, timeout, 0.5, "Placement usage back to zero")
        except TimeoutError as err:
            raise AssertionError(f"{err}: {self.usage_by_host()}") from None

    def reset(self, timeout: float = 120) -> None:
        """Delete every server and wait until Placement shows no usage."""
        self.api.delete_all_servers(timeout)
        self.wait_usage_zero(timeout)
