"""nova's Placement over its REST API, through keystoneauth1.

The session, auth plugin and endpoint come from the ``[placement]`` options
(``conf.placement``), loaded with keystoneauth's own helpers as nova loads
its report client's, so any auth section nova works with works here.

Two kinds of failure are kept apart, because callers treat them apart: a
Placement that does not answer (connection refused, timeout, a 5xx) is
waited for, up to ``outage_wait`` seconds, then ``PlacementUnavailable``;
an answer Placement gives (a 409, a 400) is returned to the caller, which
knows what it means. ``reachable()`` says how the last exchange went, for
``/healthz``.
"""

from __future__ import annotations

import logging
import threading
import time
from typing import Any

from keystoneauth1 import exceptions as ks_exc
from keystoneauth1 import loading as ks_loading

from nova_sched import exception
from nova_sched.conf import CONF

LOG = logging.getLogger(__name__)

# Microversions: claims with consumer generations (1.28, nova's
# CONSUMER_GENERATION_VERSION) and allocation candidates as nova 34 asks
# for them (1.36, its SAME_SUBTREE_VERSION: provider summaries list every
# resource class of a provider, allocation requests carry mappings).
CLAIM_VERSION = "1.28"
CANDIDATES_VERSION = "1.36"
# How long one request waits for an unreachable Placement before giving up:
# below nova-conductor's 60 s call monitor, so the caller hears why.
OUTAGE_WAIT = 45.0
_RETRY_PAUSE = 1.0
# Seconds one call may take when [placement] timeout is not set: a
# Placement that accepts connections and never answers (hung, paused) is
# then an outage like a refused connection, not a wait without end.
REQUEST_TIMEOUT = 10.0
# The summaries of every provider take Placement seconds at 10,000
# providers: their read may take this long.
SUMMARIES_TIMEOUT = 120.0


class Response:
    """What Placement answered: the status and the decoded body."""

    def __init__(self, status: int, body: Any, text: str):
        self.status = status
        self.body = body
        self.text = text

    def error_code(self) -> str | None:
        """The first error's ``code`` (e.g. ``placement.concurrent_update``)."""
        try:
            return self.body["errors"][0].get("code")
        except (TypeError, KeyError, IndexError, AttributeError):
            return None

    def error_detail(self) -> str:
        try:
            return str(self.body["errors"][0].get("detail", ""))
        except (TypeError, KeyError, IndexError, AttributeError):
            return self.text[:300]


class PlacementClient:
    """A keystoneauth1 adapter on Placement, with outage handling."""

    def __init__(self, adapter=None, outage_wait: float = OUTAGE_WAIT):
        self._adapter = adapter
        self._adapter_lock = threading.Lock()
        self.outage_wait = outage_wait
        self._last_error: str | None = None

    @property
    def adapter(self):
        with self._adapter_lock:
            if self._adapter is None:
                auth = ks_loading.load_auth_from_conf_options(CONF, "placement")
                session = ks_loading.load_session_from_conf_options(
                    CONF, "placement", auth=auth)
                self._adapter = ks_loading.load_adapter_from_conf_options(
                    CONF, "placement", session=session, auth=auth)
            return self._adapter

    def reachable(self) -> str | None:
        """None while the last exchange got an answer, else why not."""
        return self._last_error

    def request(self, method: str, url: str, version: str, body: Any = None,
                wait: float | None = None, timeout: float | None = None) -> Response:
        """One call, retried while Placement does not answer (up to ``wait``
        seconds, default ``outage_wait``); PlacementUnavailable after. Each
        try may take ``timeout`` seconds (default ``[placement] timeout``,
        else REQUEST_TIMEOUT)."""
        deadline = time.monotonic() + (self.outage_wait if wait is None else wait)
        timeout = timeout or CONF.placement.timeout or REQUEST_TIMEOUT
        while True:
            try:
                raw = self.adapter.request(
                    url, method, json=body, raise_exc=False, timeout=timeout,
                    headers={"OpenStack-API-Version": f"placement {version}"})
            except (ks_exc.ConnectFailure, ks_exc.ConnectTimeout,
                    ks_exc.RequestTimeout, ks_exc.UnknownConnectionError,
                    ks_exc.DiscoveryFailure, ks_exc.EndpointNotFound) as err:
                problem = f"{type(err).__name__}: {err}"
            else:
                if raw.status_code < 500:
                    self._last_error = None
                    return _response(raw)
                problem = f"HTTP {raw.status_code} from {method} {url}"
            self._last_error = problem
            if time.monotonic() >= deadline:
                raise exception.PlacementUnavailable(problem)
            LOG.warning("Placement unreachable (%s); retrying", problem)
            time.sleep(_RETRY_PAUSE)

    # -- the calls the scheduler makes ----------------------------------------
    def allocations_of(self, consumer: str) -> tuple[dict, int | None]:
        """A consumer's allocations ``{rp_uuid: {"resources": {...}}}`` and
        its generation (None for a consumer Placement does not know)."""
        resp = self.request("GET", f"/allocations/{consumer}", CLAIM_VERSION)
        if resp.status != 200 or not isinstance(resp.body, dict):
            raise exception.PlacementUnavailable(
                f"GET /allocations/{consumer}: HTTP {resp.status} {resp.error_detail()}")
        allocations = resp.body.get("allocations") or {}
        return ({rp: {"resources": dict(a.get("resources") or {})}
                 for rp, a in allocations.items()},
                resp.body.get("consumer_generation"))

    def put_allocations(self, consumer: str, payload: dict) -> Response:
        return self.request("PUT", f"/allocations/{consumer}", CLAIM_VERSION,
                            body=payload)

    def delete_allocations(self, consumer: str) -> Response:
        return self.request("DELETE", f"/allocations/{consumer}", CLAIM_VERSION)

    def usages(self, rp_uuid: str) -> dict[str, int] | None:
        """A provider's usages by resource class (None: no such provider)."""
        return self._of_provider(rp_uuid, "usages")

    def inventories(self, rp_uuid: str) -> dict[str, dict] | None:
        """A provider's inventories by resource class (None: no such provider)."""
        return self._of_provider(rp_uuid, "inventories")

    def _of_provider(self, rp_uuid: str, what: str) -> dict | None:
        resp = self.request("GET", f"/resource_providers/{rp_uuid}/{what}", "1.9")
        if resp.status == 404:
            return None
        if resp.status != 200 or not isinstance(resp.body, dict):
            raise exception.PlacementUnavailable(
                f"GET {what} of {rp_uuid}: HTTP {resp.status} {resp.error_detail()}")
        return dict(resp.body.get(what) or {})

    def provider_summaries(self, resources: str, wait: float = 0.0) -> dict[str, dict]:
        """``rp_uuid -> {resource class: {"capacity", "used"}}`` of every
        provider that can hold ``resources`` (``VCPU:1,MEMORY_MB:1``), in one
        ``GET /allocation_candidates``. ``wait``: how long to wait for an
        unreachable Placement (a background reader does not wait)."""
        resp = self.request("GET", f"/allocation_candidates?resources={resources}",
                            CANDIDATES_VERSION, wait=wait,
                            timeout=max(SUMMARIES_TIMEOUT, CONF.placement.timeout or 0))
        if resp.status != 200 or not isinstance(resp.body, dict):
            raise exception.PlacementUnavailable(
                f"GET /allocation_candidates: HTTP {resp.status} {resp.error_detail()}")
        summaries = {}
        for rp_uuid, summary in (resp.body.get("provider_summaries") or {}).items():
            summaries[rp_uuid] = {
                rc: {"capacity": int(r.get("capacity", 0)), "used": int(r.get("used", 0))}
                for rc, r in (summary.get("resources") or {}).items()}
        return summaries


def _response(raw) -> Response:
    try:
        body = raw.json() if raw.content else None
    except ValueError:
        body = None
    return Response(raw.status_code, body, raw.text or "")
