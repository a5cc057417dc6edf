#!/usr/bin/env python3
"""Capture real nova RequestSpec primitives and scheduler RPC wire messages.

Run with the python of a venv that has nova installed (tools/nova_venv.sh):

    /tmp/nova-venvs/29/bin/python tools/capture_nova_primitives.py \\
        --out tests/unit/scheduler/fixtures/nova29

Everything is built with nova's own classes and helpers, the way
nova-api/nova-conductor build them for a boot (RequestSpec.from_components,
nova.scheduler.utils.build_filter_properties / populate_retry,
RequestSpec.from_primitives for the legacy reschedule path,
nova.virt.hardware.numa_get_constraints, RequestGroup.from_port_request...).
The wire messages are what nova's own nova.scheduler.rpcapi.SchedulerAPI
hands to oslo.messaging: the transport's _send() is replaced by a recorder,
so target, serialized context and message (method, args serialized through
NovaObjectSerializer, version) are exactly what a driver would put on the
bus (the rabbit driver then only adds _unique_id/_msg_id/_reply_q and
flattens the context into _context_* keys).

UUIDs and timestamps are fixed so that two nova versions give comparable
files. Nothing here talks to a database or a broker.

This file is run by nova's python, not the project's: it must not import
nova_sched.
"""

import argparse
import copy
import datetime
import json
import os
import platform
import sys
import uuid
from importlib import metadata

NS = uuid.UUID('6f1c2a9e-3d4b-4c5e-8f70-0a1b2c3d4e5f')
FIXED_TS = datetime.datetime(2024, 5, 1, 12, 0, 0,
                             tzinfo=datetime.timezone.utc)


def U(name):
    """A fixed UUID string for a name, the same on every run."""
    return str(uuid.uuid5(NS, name))


PROJECT = '8d9a7f1e2c3b4a5d6e7f8091a2b3c4d5'
USER = '1a2b3c4d5e6f47a8b9c0d1e2f3a4b5c6'

# ---------------------------------------------------------------------------
# nova set-up
# ---------------------------------------------------------------------------


def setup_nova():
    import nova.conf
    from nova import objects
    from nova import rpc

    conf = nova.conf.CONF
    conf([], project='nova', default_config_files=[],
         default_config_dirs=[])
    # oslo.messaging registers transport_url when it first builds a
    # transport; register it up front so it can be pointed at the fake
    # driver (nothing is ever sent: _send() is replaced below).
    from oslo_messaging import transport as om_transport
    conf.register_opts(om_transport._transport_opts)
    conf.set_override('transport_url', 'fake:/')
    objects.register_all()
    rpc.init(conf)
    return conf


RECORDS = []
REPLY = {'value': None}


def install_recorder():
    """Replace oslo.messaging's Transport._send with a recorder."""
    from oslo_messaging import transport as om_transport

    def _send(self, target, ctxt, message, wait_for_reply=None, timeout=None,
              call_monitor_timeout=None, retry=None, transport_options=None):
        RECORDS.append({
            'target': {
                'topic': target.topic,
                'exchange': target.exchange,
                'server': target.server,
                'fanout': target.fanout,
                'version': target.version,
                'namespace': target.namespace,
            },
            'call': bool(wait_for_reply),
            'timeout': timeout,
            'call_monitor_timeout': call_monitor_timeout,
            # Deep copies: the recorded structures must be what was sent.
            'ctxt': copy.deepcopy(ctxt),
            'message': copy.deepcopy(message),
        })
        if wait_for_reply:
            return copy.deepcopy(REPLY['value'])
        return None

    om_transport.Transport._send = _send


def make_context(is_admin=False):
    from nova import context as nova_context
    ctxt = nova_context.RequestContext(
        user_id=USER, project_id=PROJECT, user_name='demo',
        project_name='demo', roles=['member', 'reader'],
        is_admin=is_admin, timestamp=FIXED_TS.replace(tzinfo=None),
        request_id='req-' + U('request'),
        global_request_id='req-' + U('global-request'))
    return ctxt.elevated() if is_admin else ctxt


# ---------------------------------------------------------------------------
# Objects, built like nova-api / nova-conductor build them
# ---------------------------------------------------------------------------


def make_flavor(extra_specs=None, name='m1.small', flavor_id=2):
    from nova import objects
    flavor = objects.Flavor(
        id=flavor_id, flavorid=str(flavor_id), name=name,
        memory_mb=2048, vcpus=2, root_gb=20, ephemeral_gb=0, swap=0,
        rxtx_factor=1.0, vcpu_weight=0, disabled=False, is_public=True,
        extra_specs=dict(extra_specs or {}), description=None,
        created_at=FIXED_TS, updated_at=None)
    # Loaded from the API database: nothing is "changed" yet.
    flavor.obj_reset_changes(recursive=True)
    return flavor


def glance_image(properties=None):
    """The image dict nova-api gets from glance (boot_meta)."""
    return {
        'id': U('image'),
        'name': 'cirros-0.6.2-x86_64-disk',
        'status': 'active',
        'visibility': 'public',
        'container_format': 'bare',
        'disk_format': 'qcow2',
        'size': 21430272,
        'virtual_size': 117440512,
        'min_ram': 0,
        'min_disk': 0,
        'checksum': 'c8fc807773e5354afe61636071771906',
        'owner': PROJECT,
        'protected': False,
        'created_at': FIXED_TS,
        'updated_at': FIXED_TS,
        'properties': dict(properties or {}),
    }


FULL_IMAGE_PROPS = {
    'hw_architecture': 'x86_64',
    'img_hv_type': 'kvm',
    'hw_vm_mode': 'hvm',
    'hw_disk_bus': 'virtio',
    'os_distro': 'ubuntu',
    'os_type': 'linux',
}

FULL_EXTRA_SPECS = {
    'hw:numa_nodes': '1',
    'hw:cpu_policy': 'shared',
    'aggregate_instance_extra_specs:ssd': 'true',
    'capabilities:hypervisor_type': 'QEMU',
    'trait:HW_CPU_X86_AVX2': 'required',
    'resources:CUSTOM_BAREMETAL_GOLD': '0',
    'quota:disk_read_bytes_sec': '10240000',
}


def make_security_groups(names=('default',)):
    from nova.network import security_group_api
    return security_group_api.populate_security_groups(list(names))


def make_requested_networks(network_names=('private',), port=None):
    from nova import objects
    reqs = [objects.NetworkRequest(network_id=U('net-' + n))
            for n in network_names]
    if port:
        reqs.append(objects.NetworkRequest(port_id=port))
    return objects.NetworkRequestList(objects=reqs)


def make_instance_group(policy='anti-affinity', members=(), hosts=None,
                        rules=None):
    """An InstanceGroup as InstanceGroup.get_by_hint() loads it from the API
    database (policy and the deprecated read-only policies both set, hosts
    lazy), then with hosts filled in by
    nova.scheduler.utils.setup_instance_group() in the conductor."""
    from nova import objects
    group = objects.InstanceGroup(
        id=7, uuid=U('group'), name='web-servers', user_id=USER,
        project_id=PROJECT, members=list(members), policy=policy,
        created_at=FIXED_TS, updated_at=None, deleted_at=None,
        deleted=False)
    group.policies = [policy]
    group._rules = dict(rules or {})
    group.obj_reset_changes()
    if hosts is not None:
        group.hosts = list(hosts)
    return group


def base_options(ctxt, flavor, image_meta, az=None):
    from nova.pci import request as pci_request
    from nova.virt import hardware
    return {
        'numa_topology': hardware.numa_get_constraints(flavor, image_meta),
        'pci_requests': pci_request.get_pci_requests_from_flavor(flavor),
        'availability_zone': az,
    }


def boot_spec(ctxt, *, flavor, image, instance_uuid, num_instances=1,
              hints=None, forced_host=None, forced_node=None, az=None,
              instance_group=None, security_groups=None,
              requested_networks=None, port_resource_requests=None,
              request_level_params=None, is_bfv=False, destination=None,
              network_metadata=None):
    """Mirror nova.compute.api.API._provision_instances() + create()."""
    from nova import objects
    from nova.scheduler import utils as scheduler_utils

    image_meta = objects.ImageMeta.from_dict(image)
    opts = base_options(ctxt, flavor, image_meta, az)
    filter_properties = scheduler_utils.build_filter_properties(
        hints or {}, forced_host, forced_node, flavor)
    spec = objects.RequestSpec.from_components(
        ctxt, instance_uuid, image, flavor,
        opts['numa_topology'], opts['pci_requests'], filter_properties,
        instance_group, opts['availability_zone'],
        security_groups=(security_groups if security_groups is not None
                         else make_security_groups([])),
        port_resource_requests=port_resource_requests,
        request_level_params=request_level_params)
    spec.is_bfv = is_bfv
    spec.num_instances = num_instances
    if network_metadata:
        spec.network_metadata = network_metadata
    if destination:
        spec.requested_destination = destination
    if requested_networks is not None:
        spec.requested_networks = requested_networks
    return spec


def build_cases(ctxt):
    from nova import objects
    from nova.scheduler import utils as scheduler_utils

    cases = {}

    # -- boot_minimal: `openstack server create --flavor m1.small --image
    # cirros --network private` with nothing else.
    cases['boot_minimal'] = boot_spec(
        ctxt, flavor=make_flavor(), image=glance_image(),
        instance_uuid=U('instance-minimal'),
        security_groups=make_security_groups(['default']),
        requested_networks=make_requested_networks())

    # -- boot_full: every field the brief lists.
    flavor = make_flavor(FULL_EXTRA_SPECS, name='m1.numa', flavor_id=42)
    port = U('port-qos')
    port_rg = objects.RequestGroup.from_port_request(
        ctxt, port, {
            'resources': {'NET_BW_EGR_KILOBIT_PER_SEC': 1000,
                          'NET_BW_IGR_KILOBIT_PER_SEC': 1000},
            'required': ['CUSTOM_PHYSNET_PHYSNET1',
                         'CUSTOM_VNIC_TYPE_NORMAL']})
    cell = objects.CellMapping(
        id=1, uuid=U('cell1'), name='cell1',
        transport_url='fake://cell1', database_connection='sqlite://',
        disabled=False, created_at=FIXED_TS, updated_at=None)
    cell.obj_reset_changes()
    destination = objects.Destination(
        host='compute1', node='compute1.example.org', cell=cell,
        aggregates=[U('agg-ssd')], allow_cross_cell_move=False)
    group = make_instance_group(
        'anti-affinity', members=[U('instance-full'), U('other-member')],
        hosts=['compute3'], rules={'max_server_per_host': '1'})
    full = boot_spec(
        ctxt, flavor=flavor, image=glance_image(FULL_IMAGE_PROPS),
        instance_uuid=U('instance-full'),
        hints={'group': U('group'),
               'same_host': [U('neighbour-1'), U('neighbour-2')],
               'different_host': U('far-away'),
               'query': '["=", "$free_ram_mb", 1024]',
               'target_cell': 'cell1'},
        forced_host='compute1', forced_node='compute1.example.org',
        az='az1', instance_group=group,
        security_groups=make_security_groups(['default', 'web']),
        requested_networks=make_requested_networks(['private'], port=port),
        port_resource_requests=[port_rg],
        request_level_params=objects.RequestLevelParams(
            root_required={'COMPUTE_IMAGE_TYPE_QCOW2'},
            root_forbidden={'COMPUTE_STATUS_DISABLED'}),
        network_metadata=objects.NetworkMetadata(
            physnets={'physnet1'}, tunneled=False),
        destination=destination, is_bfv=True)
    full.ignore_hosts = ['compute9']
    full.retry = objects.SchedulerRetries.from_dict(
        ctxt, {'num_attempts': 2,
               'hosts': [['compute2', 'compute2.example.org']]})
    full.limits = objects.SchedulerLimits(
        vcpu=32, memory_mb=65536, disk_gb=1000, numa_topology=None)
    cases['boot_full'] = full

    # -- boot_anti_affinity_group: `--hint group=<uuid>` of an
    # anti-affinity group with two members already on compute1/compute2.
    group = make_instance_group(
        'anti-affinity',
        members=[U('member-1'), U('member-2'), U('instance-aa')],
        hosts=['compute1', 'compute2'])
    cases['boot_anti_affinity_group'] = boot_spec(
        ctxt, flavor=make_flavor(), image=glance_image(FULL_IMAGE_PROPS),
        instance_uuid=U('instance-aa'), hints={'group': U('group')},
        instance_group=group,
        security_groups=make_security_groups(['default']),
        requested_networks=make_requested_networks())

    # -- reschedule_with_retry: the conductor's build_instances() path
    # (compute asked for a reschedule, no alternates left): legacy dicts,
    # populate_retry() bumps num_attempts, RequestSpec.from_primitives().
    first = boot_spec(
        ctxt, flavor=make_flavor(), image=glance_image(FULL_IMAGE_PROPS),
        instance_uuid=U('instance-resched'),
        hints={'group': U('group')},
        instance_group=make_instance_group(
            'anti-affinity', members=[U('instance-resched')], hosts=[]),
        security_groups=make_security_groups(['default']),
        requested_networks=make_requested_networks())
    legacy_request_spec = first.to_legacy_request_spec_dict()
    filter_properties = first.to_legacy_filter_properties_dict()
    filter_properties['retry'] = {
        'num_attempts': 1,
        'hosts': [['compute1', 'compute1.example.org']],
        'exc_reason': 'RescheduledException: Build of instance failed'}
    scheduler_utils.populate_retry(filter_properties, U('instance-resched'))
    # scheduler_utils.populate_filter_properties() put the limits of the
    # first selection in there.
    filter_properties['limits'] = {'memory_mb': 3072, 'disk_gb': 40}
    resched = objects.RequestSpec.from_primitives(
        ctxt, legacy_request_spec, filter_properties)
    cases['reschedule_with_retry'] = resched

    # -- requested_destination: microversion 2.74 `--host compute2
    # --hypervisor-hostname compute2.example.org`.
    cases['requested_destination'] = boot_spec(
        ctxt, flavor=make_flavor(), image=glance_image(),
        instance_uuid=U('instance-dest'),
        destination=objects.Destination(host='compute2',
                                        node='compute2.example.org'),
        security_groups=make_security_groups(['default']),
        requested_networks=make_requested_networks())

    # -- multi_create_3: `--min 3 --max 3`. The API makes one RequestSpec
    # per instance, all with num_instances=3; the conductor sends the first
    # one with the three instance_uuids.
    cases['multi_create_3'] = boot_spec(
        ctxt, flavor=make_flavor(), image=glance_image(),
        instance_uuid=U('instance-multi-0'), num_instances=3,
        az='az1', security_groups=make_security_groups(['default']),
        requested_networks=make_requested_networks())

    return cases


MULTI_UUIDS = [U('instance-multi-%d' % i) for i in range(3)]


def make_selection(ctxt, host='compute1', with_limits=False, idx=0):
    from oslo_serialization import jsonutils
    from nova import objects
    rp = U('rp-' + host)
    alloc = {
        'allocations': {rp: {'resources': {
            'VCPU': 2, 'MEMORY_MB': 2048, 'DISK_GB': 20}}},
        'mappings': {'': [rp]},
    }
    if with_limits:
        limits = objects.SchedulerLimits.from_dict({
            'vcpu': 32, 'memory_mb': 65536, 'disk_gb': 1000,
            'numa_topology': objects.NUMATopologyLimits(
                cpu_allocation_ratio=16.0, ram_allocation_ratio=1.5,
                network_metadata=objects.NetworkMetadata(
                    physnets=set(), tunneled=False))})
    else:
        # What Selection.from_host_state() gives with today's default
        # filters: SchedulerLimits.from_dict({}) -> every field None.
        limits = objects.SchedulerLimits.from_dict({})
    return objects.Selection(
        compute_node_uuid=rp, service_host=host,
        nodename=host + '.example.org', cell_uuid=U('cell1'),
        limits=limits,
        allocation_request=jsonutils.dumps(alloc),
        allocation_request_version='1.36',
        availability_zone='az1')


# ---------------------------------------------------------------------------
# Writing
# ---------------------------------------------------------------------------


def dump(path, obj):
    from oslo_serialization import jsonutils
    # jsonutils.dumps is what the oslo.messaging drivers use on the wire
    # (sets/tuples become lists, datetimes strings).
    text = jsonutils.dumps(obj, indent=2, sort_keys=True)
    with open(path, 'w') as f:
        f.write(text + '\n')
    return json.loads(text)


def describe_obj(obj):
    """Short structural description of a deserialized result."""
    from nova.objects import base as obj_base
    if isinstance(obj, (list, tuple)):
        return [describe_obj(o) for o in obj]
    if isinstance(obj, obj_base.NovaObject):
        out = {'class': type(obj).__name__, 'VERSION': obj.VERSION}
        for name in sorted(obj.fields):
            if obj.obj_attr_is_set(name):
                out[name] = describe_obj(getattr(obj, name))
            else:
                out[name] = '<unset>'
        return out
    if isinstance(obj, dict):
        return {k: describe_obj(v) for k, v in obj.items()}
    if isinstance(obj, (set, frozenset)):
        return sorted(obj)
    return obj


def capture_select_destinations(conf, ctxt, spec, instance_uuids, cap,
                                return_objects, reply):
    from nova.scheduler import rpcapi as scheduler_rpcapi
    if cap is None:
        conf.clear_override('scheduler', group='upgrade_levels')
    else:
        conf.set_override('scheduler', cap, group='upgrade_levels')
    try:
        api = scheduler_rpcapi.SchedulerAPI()
        REPLY['value'] = reply
        del RECORDS[:]
        result = api.select_destinations(
            ctxt, spec, instance_uuids, return_objects=return_objects,
            return_alternates=return_objects)
    finally:
        conf.clear_override('scheduler', group='upgrade_levels')
    assert len(RECORDS) == 1, RECORDS
    rec = dict(RECORDS[0])
    rec['upgrade_levels_scheduler'] = cap
    rec['called_with'] = {'instance_uuids': instance_uuids,
                          'return_objects': return_objects,
                          'return_alternates': return_objects}
    rec['reply_on_wire'] = reply
    rec['reply_as_returned_by_rpcapi'] = describe_obj(result)
    return rec


def capture_cast(method, *args):
    from nova.scheduler import rpcapi as scheduler_rpcapi
    api = scheduler_rpcapi.SchedulerAPI()
    del RECORDS[:]
    getattr(api, method)(*args)
    assert len(RECORDS) == 1, RECORDS
    return dict(RECORDS[0])


def make_aggregate():
    from nova import objects
    agg = objects.Aggregate(
        id=3, uuid=U('agg-ssd'), name='ssd-hosts',
        hosts=['compute1', 'compute2'],
        metadata={'availability_zone': 'az1', 'ssd': 'true'},
        created_at=FIXED_TS, updated_at=None, deleted_at=None,
        deleted=False)
    agg.obj_reset_changes()
    return agg


def make_instance(idx=0, host='compute1'):
    """An Instance as InstanceList.get_by_host(..., expected_attrs=[])
    returns it to nova-compute (no joined attributes)."""
    from nova import objects
    from nova.compute import power_state, vm_states
    inst = objects.Instance(
        id=100 + idx, uuid=U('host-instance-%d' % idx),
        user_id=USER, project_id=PROJECT, image_ref=U('image'),
        kernel_id='', ramdisk_id='', hostname='vm-%d' % idx,
        launch_index=0, key_name=None, key_data=None,
        power_state=power_state.RUNNING, vm_state=vm_states.ACTIVE,
        task_state=None, memory_mb=2048, vcpus=2, root_gb=20,
        ephemeral_gb=0, host=host, node=host + '.example.org',
        instance_type_id=2, display_name='vm-%d' % idx,
        display_description='vm-%d' % idx, launched_on=host,
        locked=False, os_type=None, architecture=None, vm_mode=None,
        root_device_name='/dev/vda', default_ephemeral_device=None,
        default_swap_device=None, config_drive='', availability_zone='az1',
        launched_at=FIXED_TS, terminated_at=None, scheduled_at=None,
        progress=0, cell_name=None, shutdown_terminate=False,
        disable_terminate=False, reservation_id='r-abcdefgh',
        ephemeral_key_uuid=None, hidden=False, compute_id=1,
        created_at=FIXED_TS, updated_at=FIXED_TS, deleted_at=None,
        deleted=False, cleaned=False)
    for name in ('locked_by', 'auto_disk_config', 'access_ip_v4',
                 'access_ip_v6', 'user_data'):
        if name in inst.fields:
            setattr(inst, name, None)
    inst.obj_reset_changes()
    return inst


def deserialize_findings(ctxt, selection_prim):
    """Try NovaObjectSerializer().deserialize_entity on variants of a
    Selection primitive and record what happens."""
    from nova.objects import base as obj_base

    class NoConductor(object):
        calls = []

        def object_backport_versions(self, context, objinst, manifest):
            self.calls.append({'objinst': objinst, 'manifest': manifest})
            raise RuntimeError(
                'NovaObjectSerializer asked nova-conductor to backport: '
                'object_backport_versions(ctxt, <primitive>, %r)' % manifest)

    def variant(desc, mutate, top=None):
        prim = copy.deepcopy(selection_prim)
        mutate(prim)
        entity = prim if top is None else top(prim)
        ser = obj_base.NovaObjectSerializer()
        ser._conductor = NoConductor()
        try:
            obj = ser.deserialize_entity(ctxt, entity)
            res = {'ok': True, 'result': describe_obj(obj)}
        except Exception as exc:  # record, whatever it is
            res = {'ok': False, 'exception': type(exc).__name__,
                   'message': str(exc)}
        res['case'] = desc
        return res

    def data(prim):
        return prim['nova_object.data']

    def pop(key):
        return lambda p: data(p).pop(key)

    def setv(key, value):
        return lambda p: data(p).__setitem__(key, value)

    def set_top(key, value):
        return lambda p: p.__setitem__(key, value)

    def pop_top(key):
        return lambda p: p.pop(key)

    out = [
        variant('as produced by nova (with nova_object.changes)',
                lambda p: None),
        variant('without nova_object.changes', pop_top('nova_object.changes')),
        variant('list of lists of primitives, as the 4.5 reply',
                lambda p: None, top=lambda p: [[p, copy.deepcopy(p)]]),
        variant('limits key absent', pop('limits')),
        variant('limits null', setv('limits', None)),
        variant('limits as a plain dict, not an object primitive',
                setv('limits', {'memory_mb': 2048})),
        variant('limits.nova_object.data empty (SchedulerLimits 1.0 all '
                'fields unset)',
                lambda p: p['nova_object.data']['limits'].__setitem__(
                    'nova_object.data', {})),
        variant('availability_zone absent', pop('availability_zone')),
        variant('cell_uuid absent', pop('cell_uuid')),
        variant('compute_node_uuid not a UUID ("compute1")',
                setv('compute_node_uuid', 'compute1')),
        variant('allocation_request as a dict instead of a JSON string',
                setv('allocation_request', {'allocations': {}})),
        variant('unknown extra field in nova_object.data',
                setv('something_new', 'x')),
        variant('nova_object.version "1.0" but availability_zone present',
                set_top('nova_object.version', '1.0')),
        variant('nova_object.version "1.1.7" (3-part)',
                set_top('nova_object.version', '1.1.7')),
        variant('nova_object.version "1.2" (newer than nova knows)',
                set_top('nova_object.version', '1.2')),
        variant('nova_object.version "2.0" (new major)',
                set_top('nova_object.version', '2.0')),
        variant('nova_object.namespace "nova_sched"',
                set_top('nova_object.namespace', 'nova_sched')),
        variant('nova_object.namespace absent',
                pop_top('nova_object.namespace')),
        variant('nova_object.name "NovaSchedSelection" (unregistered)',
                set_top('nova_object.name', 'NovaSchedSelection')),
        variant('service_host as an int', setv('service_host', 5)),
    ]
    return out


def package_versions(names):
    out = {}
    for name in names:
        try:
            out[name] = metadata.version(name)
        except metadata.PackageNotFoundError:
            out[name] = None
    return out


def main(argv=None):
    # Sets (nova_object.changes, SetOfStringsField values) are dumped in
    # iteration order: fix the hash seed so that reruns give the same files.
    if os.environ.get('PYTHONHASHSEED') != '0':
        env = dict(os.environ, PYTHONHASHSEED='0')
        os.execve(sys.executable, [sys.executable] + sys.argv, env)
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument('--out', required=True,
                        help='fixture directory to write into')
    args = parser.parse_args(argv)
    os.makedirs(args.out, exist_ok=True)

    conf = setup_nova()
    install_recorder()
    from nova import objects
    from nova.objects import base as obj_base

    ctxt = make_context()
    written = {}

    def write(name, obj):
        path = os.path.join(args.out, name)
        written[name] = dump(path, obj)
        print('wrote', path)

    # -- RequestSpec primitives -------------------------------------------
    cases = build_cases(ctxt)
    spec_files = {}
    for name, spec in cases.items():
        write(name + '.json', spec.obj_to_primitive())
        spec_files[name + '.json'] = spec.VERSION

    # -- select_destinations wire messages --------------------------------
    sel_reply = [[make_selection(ctxt, 'compute1').obj_to_primitive(),
                  make_selection(ctxt, 'compute2').obj_to_primitive()]]
    ser = obj_base.NovaObjectSerializer()
    full = cases['boot_full']
    rec = capture_select_destinations(
        conf, ctxt, full, [full.instance_uuid], None, True,
        ser.serialize_entity(ctxt, sel_reply))
    write('wire_select_destinations_4_5.json', rec)
    # The spec_obj on the wire is exactly the boot_full.json primitive.
    assert (written['wire_select_destinations_4_5.json']['message']['args']
            ['spec_obj'] == written['boot_full.json'])

    multi = cases['multi_create_3']
    multi_reply = [[make_selection(ctxt, 'compute%d' % (i + 1))
                    .obj_to_primitive(),
                    make_selection(ctxt, 'compute%d' % (i + 4))
                    .obj_to_primitive()] for i in range(3)]
    write('wire_select_destinations_4_5_multi_create_3.json',
          capture_select_destinations(
              conf, ctxt, multi, MULTI_UUIDS, None, True, multi_reply))

    # An old-style (return_objects=False) reply is a list of
    # Selection.to_dict() dicts, one per instance (nova's scheduler
    # manager does exactly that for < 4.5 callers).
    from oslo_serialization import jsonutils
    legacy_reply = jsonutils.to_primitive(
        [make_selection(ctxt, 'compute1').to_dict()])
    for cap, fname in (('4.3', 'wire_select_destinations_4_3.json'),
                       ('4.0', 'wire_select_destinations_4_0.json')):
        # With the cap below 4.5, nova's client raises
        # SelectionObjectsWithOldRPCVersionNotSupported if asked for
        # objects/alternates, so an old conductor's return_objects=False
        # call is captured.
        try:
            capture_select_destinations(
                conf, ctxt, full, [full.instance_uuid], cap, True,
                legacy_reply)
            raised = None
        except Exception as exc:
            raised = '%s: %s' % (type(exc).__name__, exc)
        rec = capture_select_destinations(
            conf, ctxt, full, [full.instance_uuid], cap, False, legacy_reply)
        rec['with_return_objects_true_the_client_raises'] = raised
        write(fname, rec)

    # -- fanout casts -----------------------------------------------------
    admin = make_context(is_admin=True)
    agg = make_aggregate()
    write('wire_update_aggregates.json',
          capture_cast('update_aggregates', admin, [agg]))
    write('wire_delete_aggregate.json',
          capture_cast('delete_aggregate', admin, agg))
    insts = objects.InstanceList(
        objects=[make_instance(0), make_instance(1)])
    write('wire_update_instance_info.json',
          capture_cast('update_instance_info', admin, 'compute1', insts))
    write('wire_update_instance_info_single_instance.json',
          capture_cast('update_instance_info', admin, 'compute1',
                       make_instance(2)))
    write('wire_delete_instance_info.json',
          capture_cast('delete_instance_info', admin, 'compute1',
                       U('host-instance-0')))
    write('wire_sync_instance_info.json',
          capture_cast('sync_instance_info', admin, 'compute1',
                       [U('host-instance-0'), U('host-instance-1')]))

    # -- Selection ----------------------------------------------------------
    sel = make_selection(ctxt, 'compute1')
    write('selection.json', sel.obj_to_primitive())
    write('selection_with_limits.json',
          make_selection(ctxt, 'compute1', with_limits=True)
          .obj_to_primitive())
    # Selection has no obj_relationships, so a plain
    # obj_to_primitive(target_version='1.0') fails ("No rule for limits");
    # a version manifest (what an RPC server with a version cap uses) works.
    write('selection_1_0.json', sel.obj_to_primitive(
        target_version='1.0',
        version_manifest={'Selection': '1.0', 'SchedulerLimits': '1.0'}))
    write('selection_legacy_dict.json', jsonutils.to_primitive(sel.to_dict()))
    write('selection_deserialize_findings.json',
          deserialize_findings(ctxt, written['selection.json']))

    # -- manifest -----------------------------------------------------------
    registry = obj_base.NovaObjectRegistry.obj_classes()
    obj_versions = {
        name: registry[name][0].VERSION
        for name in sorted(registry)
        if name in ('RequestSpec', 'Flavor', 'ImageMeta', 'ImageMetaProps',
                    'InstanceGroup', 'SchedulerRetries', 'ComputeNode',
                    'ComputeNodeList', 'Destination', 'SchedulerLimits',
                    'Selection', 'Aggregate', 'Instance', 'InstanceList',
                    'SecurityGroup', 'SecurityGroupList', 'RequestGroup',
                    'RequestLevelParams', 'NetworkMetadata',
                    'NetworkRequest', 'NetworkRequestList',
                    'InstanceNUMATopology', 'InstanceNUMACell',
                    'InstancePCIRequests', 'CellMapping',
                    'NUMATopologyLimits')}
    from nova.scheduler import rpcapi as scheduler_rpcapi
    manifest = {
        'generated_by': 'tools/capture_nova_primitives.py',
        'python': platform.python_version(),
        'packages': package_versions([
            'nova', 'oslo.versionedobjects', 'oslo.messaging',
            'oslo.serialization', 'oslo.context', 'oslo.utils']),
        'scheduler_rpcapi_versions': {
            'target': '4.0', 'select_destinations': '4.5',
            'update_aggregates/delete_aggregate': '4.1',
            'update_instance_info/delete_instance_info/sync_instance_info':
                '4.2',
            'VERSION_ALIASES': scheduler_rpcapi.SchedulerAPI.VERSION_ALIASES,
        },
        'object_versions': obj_versions,
        'request_spec_fixtures': spec_files,
        'files': sorted(written) + ['manifest.json'],
    }
    write('manifest.json', manifest)
    return 0


if __name__ == '__main__':
    sys.exit(main())
