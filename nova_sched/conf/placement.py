"""Options of the [placement] group: keystoneauth1's, registered as nova does.

nova registers its own ``[placement]`` group with keystoneauth1's loading
helpers (session, auth and adapter options, the adapter's version options
left to the code); registering the same options the same way is what lets
an operator copy nova's ``[placement]`` section into nova-sched.conf as it
is, whatever auth plugin the deployment uses (``password``,
``admin_token``, ``v3applicationcredential``, ...). The chosen plugin's own
options (``auth_url``, ``username``, ``token``, ``endpoint``...) are
registered by keystoneauth when the plugin is loaded.
"""

from __future__ import annotations

from keystoneauth1 import loading as ks_loading
from oslo_config import cfg

SERVICE_TYPE = "placement"

placement_group = cfg.OptGroup(
    "placement", title="Placement",
    help="With [scheduler] claims = placement: how to reach nova's "
    "Placement service (keystoneauth1 options, as in nova's [placement]).")

# Which microversions are spoken is the code's business, not the operator's
# (nova drops these adapter options for the same reason).
_ADAPTER_VERSION_OPTS = ("version", "min_version", "max_version")


def _never(_value):
    return None


# keystoneauth's adapter loader reads them: present, never settable. One
# object each, so that registering twice is no conflict.
_UNSETTABLE_VERSION_OPTS = [cfg.Opt(name, type=_never) for name in _ADAPTER_VERSION_OPTS]


def _adapter_opts() -> list[cfg.Opt]:
    opts = [opt for opt in ks_loading.get_adapter_conf_options(include_deprecated=False)
            if opt.dest not in _ADAPTER_VERSION_OPTS]
    cfg.set_defaults(opts, valid_interfaces=["internal", "public"],
                     service_type=SERVICE_TYPE)
    return opts


def register_opts(conf: cfg.ConfigOpts) -> None:
    conf.register_group(placement_group)
    ks_loading.register_session_conf_options(conf, placement_group.name)
    ks_loading.register_auth_conf_options(conf, placement_group.name)
    conf.register_opts(_adapter_opts(), group=placement_group)
    conf.register_opts(_UNSETTABLE_VERSION_OPTS, group=placement_group)


def list_opts():
    return {
        placement_group: (
            ks_loading.get_session_conf_options()
            + ks_loading.get_auth_common_conf_options()
            + ks_loading.get_auth_plugin_conf_options("password")
            + ks_loading.get_auth_plugin_conf_options("v3password")
            + _adapter_opts()),
    }
