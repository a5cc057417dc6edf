"""Options of the [placement_database] group: reading Placement's own tables.

The group and its ``connection`` option carry the names Placement's own
configuration uses, so that the line of placement.conf can be copied as it
is.
"""

from __future__ import annotations

from oslo_config import cfg

placement_database_group = cfg.OptGroup(
    "placement_database", title="Placement's database",
    help="Where Placement's database is, read (never written) to keep "
    "nova-sched's copy of Placement's resource providers, and how often "
    "it is read.")

placement_database_opts = [
    cfg.StrOpt(
        "connection",
        secret=True,
        default=None,
        help="SQLAlchemy URL of Placement's database (Placement's "
        "[placement_database] connection; a read-only account is enough). "
        "nova-sched reads resource_providers, inventories, allocations "
        "(summed per provider and resource class), resource_classes, "
        "traits, resource_provider_traits, placement_aggregates and "
        "resource_provider_aggregates, in a poller thread: never on a "
        "request's path and never a write. Claims are still written through "
        "Placement's API, which judges each of them. The URL's password is "
        "never logged.",
    ),
    cfg.FloatOpt(
        "refresh_interval",
        default=2.0,
        min=0.1,
        help="Seconds between reads of what changed in Placement's database: "
        "the id, uuid and generation of every provider (one small query), "
        "then, whole, only the providers whose generation moved, the new "
        "ones and the removed ones. Placement moves a provider's generation "
        "on every change of its inventories, traits and allocations made "
        "through it, so a provider changed by another scheduler or by a "
        "compute's report is seen by every decision after the next read. "
        "Decisions never wait for these reads.",
    ),
    cfg.FloatOpt(
        "resync_interval",
        default=60.0,
        min=1.0,
        help="Seconds between reconciliations with Placement's database: "
        "every table read whole and compared with what nova-sched knows; "
        "only the differences are applied. It catches what a provider's "
        "generation does not show: allocations deleted with their consumer "
        "or moved off a provider (releases, so until then a provider looks "
        "fuller than it is, never emptier), aggregates set below "
        "microversion 1.19 and a provider given a new parent.",
    ),
]


def register_opts(conf: cfg.ConfigOpts) -> None:
    conf.register_group(placement_database_group)
    conf.register_opts(placement_database_opts, group=placement_database_group)


def list_opts():
    return {placement_database_group: placement_database_opts}
