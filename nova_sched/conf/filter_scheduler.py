"""Options of the [filter_scheduler] group: filters, weighers, ratios."""

from __future__ import annotations

from oslo_config import cfg

filter_scheduler_group = cfg.OptGroup(
    "filter_scheduler",
    title="Filter scheduler",
    help="Which filters and weighers decide, and the numbers they use.",
)

DEFAULT_ENABLED_FILTERS = [
    "RetryFilter",
    "AvailabilityZoneFilter",
    "RamFilter",
    "CoreFilter",
    "DiskFilter",
    "ComputeFilter",
    "ComputeCapabilitiesFilter",
    "ImagePropertiesFilter",
    "ServerGroupAntiAffinityFilter",
    "ServerGroupAffinityFilter",
]

filter_scheduler_opts = [
    cfg.MultiStrOpt(
        "available_filters",
        default=["nova_sched.scheduler.filters.all_filters"],
        help="Filter classes the scheduler may use, as dotted paths; a path "
        "naming a function is called and must return a list of classes. The "
        "default makes every built-in filter available. Add your own by "
        "repeating the option.",
    ),
    cfg.ListOpt(
        "enabled_filters",
        default=DEFAULT_ENABLED_FILTERS,
        deprecated_name="scheduler_default_filters",
        deprecated_group="DEFAULT",
        help="Filters applied to every request, in this order, by class "
        "name. Each must be among available_filters; an unknown name stops "
        "the daemon at start-up.",
    ),
    cfg.ListOpt(
        "weight_classes",
        default=["nova_sched.scheduler.weights.all_weighers"],
        help="Weighers applied to the hosts that passed the filters: names "
        "of built-in weighers such as RAMWeigher, or dotted class paths; "
        "the default is every built-in weigher.",
    ),
    cfg.IntOpt(
        "host_subset_size",
        default=1,
        min=1,
        help="The instance goes to a host chosen at random among this many "
        "best-weighed hosts. 1 is deterministic; larger values reduce "
        "collisions between schedulers placing similar requests.",
    ),
    cfg.IntOpt(
        "max_hosts_to_score",
        default=0,
        min=0,
        help="Candidate sampling (kube-scheduler's percentageOfNodesToScore): "
        "weigh at most this many of the hosts that pass the filters. 0 weighs "
        "them all. The sample is a window that moves on by its own size at "
        "every decision over the passing hosts (in table order, wrapping "
        "around), so every host is weighed in turn. A decision then costs "
        "about the same whatever the size of the cloud, but the best host "
        "of the cloud is only chosen when it is in the window; explain "
        "reports which hosts were left out. Never fewer than "
        "host_subset_size hosts.",
    ),
    cfg.IntOpt(
        "percentage_of_hosts_to_score",
        default=100,
        min=1,
        max=100,
        help="Candidate sampling: weigh at most this percentage of the hosts "
        "that pass the filters, but never fewer than 100 of them (or all "
        "when fewer pass). 100 weighs them all. With max_hosts_to_score "
        "also set, the smaller sample wins. See max_hosts_to_score for how "
        "the sample is chosen and what it trades.",
    ),
    cfg.FloatOpt(
        "ram_allocation_ratio",
        default=1.5,
        min=0.0,
        help="Virtual RAM per physical RAM: a node takes claims up to "
        "memory_mb * ratio - reserved_host_memory_mb.",
    ),
    cfg.FloatOpt(
        "cpu_allocation_ratio",
        default=16.0,
        min=0.0,
        help="Virtual CPUs per physical CPU: a node takes claims up to "
        "vcpus * ratio - reserved_host_cpus.",
    ),
    cfg.FloatOpt(
        "disk_allocation_ratio",
        default=1.0,
        min=0.0,
        help="Virtual disk per physical disk: a node takes claims up to "
        "local_gb * 1024 * ratio - reserved_host_disk_mb (in MB).",
    ),
    cfg.IntOpt(
        "max_io_ops_per_host",
        default=8,
        min=0,
        help="IoOpsFilter: hosts with more concurrent I/O-heavy operations "
        "(builds, resizes, snapshots) than this are removed.",
    ),
    cfg.IntOpt(
        "max_instances_per_host",
        default=50,
        min=1,
        help="NumInstancesFilter: hosts with this many instances or more are "
        "removed.",
    ),
    cfg.ListOpt(
        "isolated_images",
        default=[],
        help="IsolatedHostsFilter: image UUIDs that may only run on "
        "isolated_hosts.",
    ),
    cfg.ListOpt(
        "isolated_hosts",
        default=[],
        help="IsolatedHostsFilter: hosts reserved for isolated_images.",
    ),
    cfg.BoolOpt(
        "restrict_isolated_hosts_to_isolated_images",
        default=True,
        help="IsolatedHostsFilter: keep other images off isolated_hosts.",
    ),
    cfg.StrOpt(
        "aggregate_image_properties_isolation_namespace",
        help="AggregateImagePropertiesIsolation: only aggregate metadata "
        "keys in this namespace (prefix) are compared with image "
        "properties.",
    ),
    cfg.StrOpt(
        "aggregate_image_properties_isolation_separator",
        default=".",
        help="AggregateImagePropertiesIsolation: separator between the "
        "namespace and the key.",
    ),
    cfg.StrOpt(
        "image_properties_default_architecture",
        choices=["alpha", "armv6", "armv7l", "armv7b", "aarch64", "cris",
                 "i686", "ia64", "lm32", "m68k", "microblaze", "microblazeel",
                 "mips", "mipsel", "mips64", "mips64el", "openrisc", "parisc",
                 "parisc64", "ppc", "ppcle", "ppc64", "ppc64le", "ppcemb",
                 "s390", "s390x", "sh4", "sh4eb", "sparc", "sparc64",
                 "unicore32", "x86_64", "xtensa", "xtensaeb"],
        help="ImagePropertiesFilter: architecture assumed for images that "
        "state none. Unset: such images pass on any architecture.",
    ),
    cfg.FloatOpt(
        "ram_weight_multiplier",
        default=1.0,
        help="RAMWeigher: positive spreads instances over hosts with the "
        "most free RAM, negative stacks them.",
    ),
    cfg.FloatOpt(
        "cpu_weight_multiplier",
        default=1.0,
        help="CPUWeigher: positive spreads by free vCPUs, negative stacks.",
    ),
    cfg.FloatOpt(
        "disk_weight_multiplier",
        default=1.0,
        help="DiskWeigher: positive spreads by free disk, negative stacks.",
    ),
    cfg.FloatOpt(
        "io_ops_weight_multiplier",
        default=-1.0,
        help="IoOpsWeigher: negative prefers hosts with fewer I/O operations.",
    ),
    cfg.FloatOpt(
        "soft_affinity_weight_multiplier",
        default=1.0,
        min=0.0,
        help="ServerGroupSoftAffinityWeigher multiplier.",
    ),
    cfg.FloatOpt(
        "soft_anti_affinity_weight_multiplier",
        default=1.0,
        min=0.0,
        help="ServerGroupSoftAntiAffinityWeigher multiplier.",
    ),
    cfg.FloatOpt(
        "build_failure_weight_multiplier",
        default=1000000.0,
        help="BuildFailureWeigher: large so that hosts failing builds sink "
        "below all others.",
    ),
    cfg.FloatOpt(
        "hypervisor_version_weight_multiplier",
        default=1.0,
        help="HypervisorVersionWeigher: positive prefers newer hypervisors, "
        "negative older ones.",
    ),
    cfg.FloatOpt(
        "num_instances_weight_multiplier",
        default=0.0,
        help="NumInstancesWeigher: negative prefers emptier hosts, positive "
        "packs.",
    ),
]


def register_opts(conf: cfg.ConfigOpts) -> None:
    conf.register_group(filter_scheduler_group)
    conf.register_opts(filter_scheduler_opts, group=filter_scheduler_group)


def list_opts():
    return {filter_scheduler_group: filter_scheduler_opts}
