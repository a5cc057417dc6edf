"""Run in the nova 34 venv: nova's own resource request for generated cases.

Reads a JSON list of cases on stdin (see test_request_builder.case) and
writes, for each, nova's RequestSpec primitive as conductor sends it, the
query strings nova-scheduler sends Placement (two with the PCPU fallback)
or the error nova raises building them, and Placement 16's verdict on each
query (its 400 message, or null). Test code: nova and Placement do the
work, this only feeds them.
"""

import json
import sys

import microversion_parse
import webob
import webob.exc

import nova.conf
from nova import context as nova_context
from nova import objects
from nova.scheduler import utils
from oslo_serialization import jsonutils
from placement import lib as placement_lib
from placement import microversion

objects.register_all()
CONF = nova.conf.CONF
CONF([], project="nova")


class Nodes:
    """nova's HostManager lookup over the case's compute nodes."""

    def __init__(self, nodes):
        self.nodes = nodes

    def get_compute_nodes_by_host_or_node(self, ctxt, host, node, cell=None):
        return [objects.ComputeNode(host=h, hypervisor_hostname=n, uuid=u)
                for h, n, u in self.nodes
                if (host is None or h == host) and (node is None or n == node)]


def placement_verdict(qs):
    req = webob.Request.blank("/allocation_candidates?" + qs)
    req.environ[microversion.MICROVERSION_ENVIRON] = \
        microversion_parse.extract_version(
            {"openstack-api-version": "placement 1.36"},
            microversion.SERVICE_TYPE, microversion.VERSIONS)
    try:
        wide = placement_lib.RequestWideParams.from_request(req)
        groups = placement_lib.RequestGroup.dict_from_request(req, wide)
        if not wide.group_policy and len(
                [g for g in groups.values() if g.use_same_provider]) > 1:
            return "group_policy required"
    except webob.exc.HTTPBadRequest as err:
        return str(err.detail or err)
    return None


def spec_of(case):
    flavor = objects.Flavor(id=1, flavorid="f1", **case["flavor"])
    fields = {
        "flavor": flavor, "num_instances": 1, "instance_uuid": case["uuid"],
        "project_id": "p1", "user_id": "u1", "availability_zone": None,
        "is_bfv": case["is_bfv"],
        "force_hosts": case["force_hosts"], "force_nodes": case["force_nodes"],
        "ignore_hosts": None, "scheduler_hints": case["scheduler_hints"],
        "instance_group": None, "retry": None,
    }
    if case["image"] is not None:
        fields["image"] = objects.ImageMeta.from_dict(case["image"])
    spec = objects.RequestSpec(**fields)
    if case["requested_resources"] is not None:
        spec.requested_resources = [
            objects.RequestGroup(
                use_same_provider=True,
                requester_id=g["requester_id"], resources=g["resources"],
                required_traits=set(g["required_traits"]),
                forbidden_traits=set(g["forbidden_traits"]),
                aggregates=g["aggregates"],
                forbidden_aggregates=set(g["forbidden_aggregates"]))
            for g in case["requested_resources"]]
    params = case["request_level_params"]
    if params is not None:
        spec.request_level_params = objects.RequestLevelParams(
            root_required=set(params["root_required"]),
            root_forbidden=set(params["root_forbidden"]),
            same_subtree=params["same_subtree"])
    dest = case["requested_destination"]
    if dest is not None:
        spec.requested_destination = objects.Destination(
            aggregates=dest["aggregates"],
            forbidden_aggregates=set(dest["forbidden_aggregates"]),
            **{k: dest[k] for k in ("host", "node") if dest[k] is not None})
    else:
        spec.requested_destination = None
    return spec


def queries_of(ctxt, spec, case):
    """The query strings nova-scheduler sends Placement for ``spec``: a
    second one without PCPU when pinning is asked and the fallback is on."""
    nodes = Nodes(case["nodes"])
    queries = []
    res = utils.resources_from_request_spec(ctxt, spec, nodes, True)
    queries.append(res.to_querystring())
    if res.cpu_pinning_requested and \
            not CONF.workarounds.disable_fallback_pcpu_query:
        res = utils.resources_from_request_spec(ctxt, spec, nodes, False)
        queries.append(res.to_querystring())
    return queries


def answer(primitive, queries):
    return {"primitive": primitive, "queries": queries,
            "placement": [placement_verdict(q) for q in queries]}


def refusal(primitive, err):
    return {"primitive": primitive, "error": [type(err).__name__, str(err)]}


def run(case):
    CONF.set_override("max_placement_results",
                      case["conf"]["max_placement_results"], "scheduler")
    CONF.set_override("disable_fallback_pcpu_query",
                      case["conf"]["disable_fallback_pcpu_query"], "workarounds")
    spec = spec_of(case)
    primitive = jsonutils.to_primitive(spec.obj_to_primitive())
    try:
        queries = queries_of(nova_context.RequestContext(), spec, case)
    except Exception as err:
        return refusal(primitive, err)
    return answer(primitive, queries)


def main():
    print(json.dumps([run(case) for case in json.load(sys.stdin)]))


if __name__ == "__main__":
    main()
