"""Options of the [fake_compute] group: the simulated compute node's process."""

from __future__ import annotations

from oslo_config import cfg

fake_compute_group = cfg.OptGroup(
    "fake_compute",
    title="Fake compute",
    help="nova-sched-fake-compute, the simulated compute node process.",
)

fake_compute_opts = [
    cfg.BoolOpt(
        "record_instance_state",
        default=True,
        help="Whether nova-sched-fake-compute records its builds' outcomes "
        "in the instances table of [database] connection, as nova's compute "
        "does in nova's database: vm_state 'active' (with its host and "
        "node) when a build succeeds, 'error' plus an instance_faults row "
        "when a build fails and is not sent back to the scheduler. It writes "
        "those instance rows only, never claims: it reaches the scheduler "
        "through RPC alone. Nothing is recorded when this is False or when "
        "the configured SQLite file does not exist.",
    ),
]


def register_opts(conf: cfg.ConfigOpts) -> None:
    conf.register_group(fake_compute_group)
    conf.register_opts(fake_compute_opts, group=fake_compute_group)


def list_opts():
    return {fake_compute_group: fake_compute_opts}
