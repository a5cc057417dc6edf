"""Options of the [workarounds] group: nova's workarounds nova-sched honours.

The names and defaults are nova 34's, so that nova's ``[workarounds]``
section can be copied as it is; an option nova-sched does not read is not
registered.
"""

from __future__ import annotations

from oslo_config import cfg

workarounds_group = cfg.OptGroup(
    "workarounds", title="Workarounds",
    help="nova's workarounds that change what nova-sched asks Placement's "
    "model.")

workarounds_opts = [
    cfg.BoolOpt(
        "disable_fallback_pcpu_query",
        default=False,
        help="As nova's option of the same name. When false, a request for "
        "dedicated CPUs (hw:cpu_policy=dedicated) is asked twice, once for "
        "PCPU and once for VCPU, and the candidates of both are kept, so "
        "that compute nodes still reporting pinned CPUs as VCPU (configured "
        "with the old vcpu_pin_set) remain candidates; NUMATopologyFilter "
        "then removes those without room for the pinned CPUs. Set it to "
        "true once every compute node reports PCPU inventory.",
    ),
]


def register_opts(conf: cfg.ConfigOpts) -> None:
    conf.register_group(workarounds_group)
    conf.register_opts(workarounds_opts, group=workarounds_group)


def list_opts():
    return {workarounds_group: workarounds_opts}
