"""Options of the [pci] group: aliases flavors use to request PCI devices."""

from __future__ import annotations

from oslo_config import cfg

pci_group = cfg.OptGroup(
    "pci", title="PCI passthrough", help="PCI device requests of flavors."
)

pci_opts = [
    cfg.MultiStrOpt(
        "alias",
        default=[],
        help="A PCI alias as a JSON object: "
        '{"name": "a1", "vendor_id": "8086", "product_id": "154d"}. A flavor '
        "asks for devices with the extra spec "
        "'pci_passthrough:alias' = 'a1:2' (two devices of alias a1); "
        "PciPassthroughFilter keeps hosts whose reported pci_stats pools "
        "have that many matching devices. Repeat the option for more "
        "aliases.",
    ),
]


def register_opts(conf: cfg.ConfigOpts) -> None:
    conf.register_group(pci_group)
    conf.register_opts(pci_opts, group=pci_group)


def list_opts():
    return {pci_group: pci_opts}
