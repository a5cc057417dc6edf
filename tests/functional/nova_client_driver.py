"""Today's nova asking nova-sched: run with the python of a venv holding nova.

    <venv>/bin/python tests/functional/nova_client_driver.py \
        --transport-url URL --exchange EXCHANGE --case NAME [--uuids U1,U2]
        [--az ZONE] [--ignore-host HOST] [--memory-mb N] [--version-cap V]
        [--image-props JSON]

Builds a ``RequestSpec`` the way nova-conductor does and calls
``select_destinations`` through nova's own ``nova.scheduler.rpcapi.
SchedulerAPI`` (``return_objects=True, return_alternates=True``), over
the real broker. Prints one JSON object: the Selections as nova's
serializer rebuilt them (``{"selections": [[{...}, ...], ...]}``), or the
exception nova's client raised (``{"error": {"module", "class", "message"}}``).
This file is not a test module: the test in test_nova_client.py runs it.
"""

from __future__ import annotations

import argparse
import json
import sys
import uuid


def main() -> int:
    parser = argparse.ArgumentParser()
    parser.add_argument("--transport-url", required=True)
    parser.add_argument("--exchange", required=True)
    parser.add_argument("--uuids")
    parser.add_argument("--aggregate", help="NAME:HOST,HOST:ZONE: fanout-cast "
                        "update_aggregates with it, instead of asking")
    parser.add_argument("--delete-aggregate", help="NAME: fanout-cast delete_aggregate")
    parser.add_argument("--az")
    parser.add_argument("--ignore-host", action="append", default=[])
    parser.add_argument("--memory-mb", type=int, default=512)
    parser.add_argument("--version-cap")
    parser.add_argument("--image-props", default='{"hw_architecture": "x86_64"}',
                        help="the image's properties as Glance has them (JSON); "
                        "nova's ImageMeta.from_dict reads them")
    args = parser.parse_args()

    import nova.conf
    from nova import context as nova_context
    from nova import objects, rpc
    from nova.scheduler import rpcapi

    from oslo_messaging import transport as om_transport

    conf = nova.conf.CONF
    conf([], project="nova", default_config_files=[], default_config_dirs=[])
    # oslo.messaging registers its options when it first builds a
    # transport: register them now to point nova at the test's broker.
    conf.register_opts(om_transport._transport_opts)
    conf.set_override("transport_url", args.transport_url)
    conf.set_override("control_exchange", args.exchange)
    if args.version_cap:
        conf.set_override("scheduler", args.version_cap, group="upgrade_levels")
    objects.register_all()
    rpc.init(conf)

    ctxt = nova_context.get_admin_context()
    ctxt.project_id, ctxt.user_id = "demo-project", "demo-user"
    if args.aggregate or args.delete_aggregate:
        return _fanout(args, ctxt, objects, rpcapi.SchedulerAPI())
    flavor = objects.Flavor(name="m1.small", flavorid="2", memory_mb=args.memory_mb,
                            vcpus=1, root_gb=1, ephemeral_gb=0, swap=0,
                            extra_specs={})
    image = objects.ImageMeta.from_dict({
        "id": str(uuid.uuid4()), "name": "cirros", "container_format": "bare",
        "disk_format": "qcow2", "properties": json.loads(args.image_props)})
    uuids = args.uuids.split(",")
    spec = objects.RequestSpec(
        ctxt, flavor=flavor, image=image, num_instances=len(uuids),
        project_id="demo-project", user_id="demo-user",
        availability_zone=args.az, scheduler_hints={},
        ignore_hosts=args.ignore_host or None, force_hosts=None,
        force_nodes=None, instance_uuid=uuids[0], is_bfv=False,
        instance_group=None, retry=None, limits=objects.SchedulerLimits(),
        security_groups=objects.SecurityGroupList(objects=[]),
        pci_requests=objects.InstancePCIRequests(requests=[]),
        numa_topology=None, requested_destination=None)
    try:
        answer = rpcapi.SchedulerAPI().select_destinations(
            ctxt, spec, uuids, return_objects=True, return_alternates=True)
    except Exception as err:  # what nova's client raised is the result
        from nova import exception as nova_exception

        # oslo.messaging rebuilds a remote exception as a subclass of the
        # original (NoValidHost_Remote): nova's conductor catches it as
        # its own NoValidHost.
        print(json.dumps({"error": {
            "module": type(err).__module__, "class": type(err).__name__,
            "is_nova_no_valid_host": isinstance(err, nova_exception.NoValidHost),
            "message": str(err).splitlines()[0]}}))
        return 0
    print(json.dumps({"selections": [[{
        "object": type(s).__name__,
        "compute_node_uuid": str(s.compute_node_uuid),
        "service_host": s.service_host,
        "nodename": s.nodename,
        "cell_uuid": str(s.cell_uuid),
        "limits": None if s.limits is None else {
            "memory_mb": s.limits.memory_mb, "vcpu": s.limits.vcpu,
            "disk_gb": s.limits.disk_gb},
        "availability_zone": s.availability_zone,
        "allocation_request": s.allocation_request,
    } for s in per_instance] for per_instance in answer]}))
    return 0


def _fanout(args, ctxt, objects, api) -> int:
    """nova's fanout casts about aggregates, as nova-api sends them."""
    if args.aggregate:
        name, hosts, zone = args.aggregate.split(":")
        aggregate = objects.Aggregate(ctxt, id=1, uuid=str(uuid.uuid4()), name=name,
                                      hosts=hosts.split(","),
                                      metadata={"availability_zone": zone})
        api.update_aggregates(ctxt, [aggregate])
    else:
        aggregate = objects.Aggregate(ctxt, id=1, uuid=str(uuid.uuid4()),
                                      name=args.delete_aggregate, hosts=[],
                                      metadata={})
        api.delete_aggregate(ctxt, aggregate)
    print(json.dumps({"cast": True}))
    return 0


if __name__ == "__main__":
    sys.exit(main())
