"""Claim stores: where the resources of a chosen node are claimed.

``local`` (the default, the scheduler's own database) and ``placement``
(nova's Placement), chosen by ``[scheduler] claims``; ``base`` holds the
Claim and the interface.
"""

from __future__ import annotations

from nova_sched import exception
from nova_sched.conf import CONF
from nova_sched.scheduler.claim_stores.base import Claim, ClaimStore, Placement

__all__ = ["Claim", "ClaimStore", "Placement", "check_pairing", "load_claim_store"]

# Which host source each store can claim on: Placement's providers are
# nova's compute nodes, and the local store's guarded updates need the
# scheduler's own compute_nodes rows.
_SOURCE_OF = {"placement": "nova_cells", "local": "compute_reports"}


def check_pairing() -> None:
    """ConfigurationError unless ``claims`` and ``host_source`` go together."""
    claims, source = CONF.scheduler.claims, CONF.scheduler.host_source
    if _SOURCE_OF.get(claims) != source:
        raise exception.ConfigurationError(
            f"[scheduler] claims = {claims} needs host_source = "
            f"{_SOURCE_OF.get(claims)}, not {source}")


def load_claim_store(host_manager, placement=None) -> ClaimStore:
    """The store ``[scheduler] claims`` names, for ``host_manager``'s table."""
    check_pairing()
    if CONF.scheduler.claims == "placement":
        from nova_sched.placement import PlacementClient
        from nova_sched.scheduler.claim_stores.placement import PlacementClaims

        return PlacementClaims(placement or PlacementClient(), host_manager.provider_host)
    from nova_sched.scheduler.claim_stores.local import DatabaseClaims

    return DatabaseClaims()
