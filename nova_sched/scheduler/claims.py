"""Claims: what an instance holds on a node, and where claims are kept.

The types live in ``claim_stores.base`` and the stores in rooms of their
own (``claim_stores.local``, ``claim_stores.placement``); this module keeps
the names earlier code and operators' plugins import from here.
"""

from __future__ import annotations

from nova_sched.scheduler.claim_stores.base import Claim, ClaimStore, Placement
from nova_sched.scheduler.claim_stores.local import DatabaseClaims

__all__ = ["Claim", "ClaimStore", "DatabaseClaims", "Placement"]
