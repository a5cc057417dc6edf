"""Placement 16's own answer to GET /allocation_candidates, for the
differential test (runs in the nova venv, where placement is installed).

    placement_oracle.py <database url>  < cases.json  > answers.json
    placement_oracle.py <database url> --interactive   (a case a line, see main)

Input: ``{"traits": [custom trait names], "classes": [custom class names],
"cases": [{"providers": [...], "queries": ["resources=...", ...]}]}``; each
provider ``{"uuid", "parent", "root", "inventories": {rc: {total, reserved,
min_unit, max_unit, step_size, allocation_ratio}}, "usages": {rc: n},
"traits": [...], "aggregates": [...]}``. Each case's rows are written
straight into Placement's tables (the schema made by Placement's own
migrations), then every query is asked of Placement's WSGI application
in-process at microversion 1.36 with noauth2. Output: ``{"traits": [every
trait name], "classes": [every class name], "answers": [[{"status",
"body"}, ...], ...]}``.
"""

from __future__ import annotations

import copy
import json
import sys
import uuid as uuidlib

import jsonschema
from oslo_config import cfg
import sqlalchemy as sa
import webob

from placement import conf as placement_conf
from placement import db_api
from placement import deploy
from placement import util as placement_util
from placement.objects import research_context

MICROVERSION = "placement 1.36"
HEADERS = {"x-auth-token": "admin", "accept": "application/json"}


class _CheckedSchemas:
    """``jsonschema`` for placement's query validation, each schema checked
    once: ``jsonschema.validate`` checks the schema itself on every call
    (20 ms of a 60 ms query here) and placement's schemas are constants.
    Instances are validated exactly as before."""

    def __init__(self):
        self._validators: dict[int, tuple] = {}

    def validate(self, instance, schema, format_checker=None):
        found = self._validators.get(id(schema))
        if found is None:
            cls = jsonschema.validators.validator_for(schema)
            cls.check_schema(schema)
            found = self._validators[id(schema)] = (
                cls(schema, format_checker=format_checker), schema)
        error = jsonschema.exceptions.best_match(found[0].iter_errors(instance))
        if error is not None:
            raise error

    def __getattr__(self, name):
        return getattr(jsonschema, name)


def _copy_arr_when_shared(self, arr):
    """Placement 16's ``copy_arr_if_needed`` with its bug fixed: it copies an
    AllocationRequestResource only under ``group_policy=none``, so with
    ``isolate`` or no policy, merging the unnumbered group and a granular
    group on one provider adds the second amount INTO the first group's
    shared object, and later candidates carry the inflated amount (seen
    here: ``resources=SRIOV_NET_VF:2&resources2=SRIOV_NET_VF:1`` returned
    a candidate taking 3 from the provider mapped to group 2 alone). The
    differential compares with the answer Placement means to give."""
    if arr.resource_class in self.multi_group_rcs:
        return copy.copy(arr)
    return arr


def _app(url: str):
    conf = cfg.ConfigOpts()
    placement_conf.register_opts(conf)
    conf.set_override("connection", url, group="placement_database")
    conf([], default_config_files=[])
    conf.set_override("sync_on_startup", True, group="placement_database")
    conf.set_override("auth_strategy", "noauth2", group="api")
    db_api.configure(conf)
    return deploy.loadapp(conf)


def _call(app, method: str, path: str, version: str = MICROVERSION, body=None):
    req = webob.Request.blank(path, method=method, headers=dict(
        HEADERS, **{"OpenStack-API-Version": version}))
    if body is not None:
        req.body = json.dumps(body).encode()
        req.content_type = "application/json"
    resp = req.get_response(app)
    return resp.status_int, resp.body


def _write_case(engine, providers: list[dict]) -> None:
    with engine.begin() as conn:
        if engine.dialect.name == "mysql":
            # resource_providers refers to itself (root, parent): the old
            # rows go whole, the new ones in one go.
            conn.execute(sa.text("SET FOREIGN_KEY_CHECKS=0"))
        for table in ("allocations", "inventories", "resource_provider_traits",
                      "resource_provider_aggregates", "placement_aggregates",
                      "resource_providers"):
            conn.execute(sa.text(f"DELETE FROM {table}"))
        traits = dict(conn.execute(sa.text("SELECT name, id FROM traits")).fetchall())
        classes = dict(conn.execute(sa.text(
            "SELECT name, id FROM resource_classes")).fetchall())
        ids = {p["uuid"]: n + 1 for n, p in enumerate(providers)}
        aggs: dict[str, int] = {}
        for p in providers:
            conn.execute(sa.text(
                "INSERT INTO resource_providers (id, uuid, name, generation, "
                "root_provider_id, parent_provider_id) VALUES "
                "(:id, :uuid, :name, 1, :root, :parent)"),
                {"id": ids[p["uuid"]], "uuid": p["uuid"], "name": p["uuid"],
                 "root": ids[p["root"]],
                 "parent": ids[p["parent"]] if p.get("parent") else None})
        for p in providers:
            rp = ids[p["uuid"]]
            for rc, inv in p["inventories"].items():
                conn.execute(sa.text(
                    "INSERT INTO inventories (resource_provider_id, resource_class_id, "
                    "total, reserved, min_unit, max_unit, step_size, allocation_ratio) "
                    "VALUES (:rp, :rc, :total, :reserved, :min_unit, :max_unit, "
                    ":step_size, :allocation_ratio)"),
                    dict(inv, rp=rp, rc=classes[rc]))
            for rc, used in p.get("usages", {}).items():
                if used:
                    conn.execute(sa.text(
                        "INSERT INTO allocations (resource_provider_id, consumer_id, "
                        "resource_class_id, used) VALUES (:rp, :consumer, :rc, :used)"),
                        {"rp": rp, "consumer": str(uuidlib.uuid4()),
                         "rc": classes[rc], "used": used})
            for trait in p.get("traits", ()):
                conn.execute(sa.text(
                    "INSERT INTO resource_provider_traits (resource_provider_id, "
                    "trait_id) VALUES (:rp, :trait)"), {"rp": rp, "trait": traits[trait]})
            for agg in p.get("aggregates", ()):
                if agg not in aggs:
                    aggs[agg] = len(aggs) + 1
                    conn.execute(sa.text(
                        "INSERT INTO placement_aggregates (id, uuid) VALUES (:id, :uuid)"),
                        {"id": aggs[agg], "uuid": agg})
                conn.execute(sa.text(
                    "INSERT INTO resource_provider_aggregates (resource_provider_id, "
                    "aggregate_id) VALUES (:rp, :agg)"), {"rp": rp, "agg": aggs[agg]})


def main() -> int:
    url = sys.argv[1]
    # Batch: the whole input is one JSON document. Interactive: its first
    # line is the setup ({"interactive": true, "traits", "classes"}).
    data = json.loads(sys.stdin.readline()) if "--interactive" in sys.argv[2:] \
        else json.load(sys.stdin)
    placement_util.jsonschema = _CheckedSchemas()
    if data.get("fix_shared_amounts", True):
        research_context.RequestWideSearchContext.copy_arr_if_needed = \
            _copy_arr_when_shared
    app = _app(url)
    for trait in data.get("traits", ()):
        status, body = _call(app, "PUT", f"/traits/{trait}", "placement 1.6")
        assert status in (201, 204), (trait, status, body)
    for rc in data.get("classes", ()):
        status, body = _call(app, "PUT", f"/resource_classes/{rc}", "placement 1.7")
        assert status in (201, 204), (rc, status, body)
    engine = db_api.get_placement_engine()
    if data.get("interactive"):
        # One case a line, answered with one line; the case's rows stay in
        # the database until the next line, for the caller to read them.
        print(json.dumps({"ready": True}), flush=True)
        for line in sys.stdin:
            print(json.dumps({"answers": _answer(app, engine, json.loads(line))}),
                  flush=True)
        return 0
    answers = [_answer(app, engine, case) for case in data["cases"]]
    with engine.connect() as conn:
        traits = [r[0] for r in conn.execute(sa.text("SELECT name FROM traits"))]
        classes = [r[0] for r in conn.execute(sa.text("SELECT name FROM resource_classes"))]
    json.dump({"traits": traits, "classes": classes, "answers": answers}, sys.stdout)
    return 0


def _answer(app, engine, case: dict) -> list[dict]:
    _write_case(engine, case["providers"])
    found = []
    for query in case["queries"]:
        status, body = _call(app, "GET", "/allocation_candidates?" + query)
        found.append({"status": status, "body": json.loads(body) if status == 200
                      else body.decode(errors="replace")[:500]})
    return found


if __name__ == "__main__":
    sys.exit(main())
