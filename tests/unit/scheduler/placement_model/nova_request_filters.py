"""Run in the nova 34 venv: nova's request filters, then its resource
request, for generated cases (see test_request_filters.case).

nova's reads of the cloud are answered from the case: the API database's
aggregates, the minimum nova-compute version, neutron's remote-managed
ports and routed networks' aggregates. Writes, per case, the RequestSpec
primitive (before the filters change it), then nova's query strings or
the error, as nova_resource_request does. Test code: nova does the work.
"""

import json
import sys
from unittest import mock

from nova import context as nova_context
from nova import objects
from nova.network import neutron
from nova.scheduler import request_filter
from nova.scheduler import utils
from oslo_serialization import jsonutils

import nova_resource_request as base

CONF = base.CONF


def _aggregates(case):
    return [objects.Aggregate(id=i, uuid=a["uuid"], name=f"agg{i}",
                              metadata=dict(a["metadata"]), hosts=[])
            for i, a in enumerate(case["aggregates"])]


def _spec(case):
    spec = base.spec_of(case)
    spec.project_id = case["project_id"]
    spec.availability_zone = case["availability_zone"]
    spec.requested_networks = objects.NetworkRequestList(objects=[
        objects.NetworkRequest(**{k: v for k, v in n.items() if v})
        for n in case["requested_networks"]])
    spec.pci_requests = objects.InstancePCIRequests(requests=[
        objects.InstancePCIRequest(
            count=1, spec=[{}], request_id=p["request_id"],
            alias_name=None if p["source"] == "neutron_port" else "a1")
        for p in case["pci_requests"]])
    return spec


def run(case):
    for name, value in case["filter_conf"].items():
        CONF.set_override(name, value, "scheduler")
    CONF.set_override("max_placement_results", 1000, "scheduler")
    CONF.set_override("disable_fallback_pcpu_query",
                      case["conf"]["disable_fallback_pcpu_query"], "workarounds")
    spec = _spec(case)
    primitive = jsonutils.to_primitive(spec.obj_to_primitive())
    aggs = _aggregates(case)

    def by_metadata(ctxt, key=None, value=None):
        return [a for a in aggs if any(
            (key is None or k == key) and (value is None or v == value)
            for k, v in a.metadata.items())]

    def non_matching(ctxt, keys, prefix, value):
        return [a for a in aggs if any(
            k.startswith(prefix) and v == value and k not in keys
            for k, v in a.metadata.items())]

    def routed(ctxt, network_api, report_api, network_id):
        return case["network_aggregates"].get(network_id, [])

    ctxt = nova_context.RequestContext()
    with mock.patch.object(objects.AggregateList, "get_by_metadata",
                           side_effect=by_metadata), \
            mock.patch.object(objects.AggregateList,
                              "get_non_matching_by_metadata_keys",
                              side_effect=non_matching), \
            mock.patch.object(objects.service,
                              "get_minimum_version_all_cells",
                              return_value=case["min_compute_version"]), \
            mock.patch.object(neutron.API, "is_remote_managed_port",
                              side_effect=lambda c, p: p in case["remote_ports"]), \
            mock.patch.object(utils, "get_aggregates_for_routed_network",
                              side_effect=routed), \
            mock.patch("nova.scheduler.client.report.report_client_singleton"):
        try:
            request_filter.process_reqspec(ctxt, spec)
            queries = base.queries_of(ctxt, spec, case)
        except Exception as err:
            return base.refusal(primitive, err)
    return base.answer(primitive, queries)


def main():
    print(json.dumps([run(case) for case in json.load(sys.stdin)]))


if __name__ == "__main__":
    main()
