"""What Placement knows, kept in memory: providers, their trees and holdings.

``ProviderModel`` is a copy of Placement's tables as a source last read them
(``cloud/sources/placement_db``): every resource provider with its parent
and root, its inventories of every resource class, its usages, its traits
and its aggregates. A source applies whole providers (``apply``): a
provider's ``generation`` moves on every change Placement makes to it, so
a provider read again is read whole. ``version`` moves on every change, so
that indexes built over the model (the candidate search's) know when to
build again, and ``changed_since`` says which providers to rebuild.

Figures are Placement's own: capacity is
``int((total - reserved) * allocation_ratio)``, with the ratio as the
database stores it (a single-precision FLOAT on MySQL).
"""

from __future__ import annotations

import bisect
import dataclasses
import threading
from typing import Iterable, Mapping

# Placement's sharing trait: a provider with it shares its inventory with
# the providers (roots) in its aggregates.
MISC_SHARES_VIA_AGGREGATE = "MISC_SHARES_VIA_AGGREGATE"


@dataclasses.dataclass(frozen=True)
class Inventory:
    """One resource class's inventory on one provider (Placement's row)."""

    total: int
    reserved: int = 0
    min_unit: int = 1
    max_unit: int = 2**31 - 1
    step_size: int = 1
    allocation_ratio: float = 1.0

    @property
    def capacity(self) -> int:
        """What Placement lets be allocated: ``(total - reserved) x ratio``."""
        return int((self.total - self.reserved) * self.allocation_ratio)


@dataclasses.dataclass
class Provider:
    """One resource provider, whole (what a read of it brings)."""

    uuid: str
    name: str = ""
    generation: int = 0
    parent_uuid: str | None = None
    root_uuid: str = ""
    inventories: dict[str, Inventory] = dataclasses.field(default_factory=dict)
    usages: dict[str, int] = dataclasses.field(default_factory=dict)
    traits: frozenset[str] = frozenset()
    aggregates: frozenset[str] = frozenset()

    def __post_init__(self):
        if not self.root_uuid:
            self.root_uuid = self.uuid

    @property
    def is_root(self) -> bool:
        return self.parent_uuid is None

    @property
    def shares(self) -> bool:
        """Whether it lends its inventory to the roots of its aggregates."""
        return MISC_SHARES_VIA_AGGREGATE in self.traits

    def free(self, rc: str) -> int:
        """Capacity left for ``rc`` (negative when over capacity)."""
        inv = self.inventories.get(rc)
        return 0 if inv is None else inv.capacity - self.usages.get(rc, 0)


class ProviderModel:
    """Placement's providers as last read, with the names Placement knows.

    ``known_traits`` and ``known_classes`` are Placement's ``traits`` and
    ``resource_classes`` tables: a request naming another is one Placement
    answers with a 400, and nova with NoValidHost.

    Readers take ``lock`` while they read several providers as one
    picture; ``apply`` and ``add_usage`` take it themselves.
    """

    def __init__(self):
        self.lock = threading.RLock()
        self.providers: dict[str, Provider] = {}
        self.children: dict[str, set[str]] = {}
        self.known_traits: set[str] = set()
        self.known_classes: set[str] = set()
        self.version = 0
        # Resource class -> its usage summed over every provider, kept as
        # providers change: a reader compares it with Placement's own sum
        # to find releases that move no generation.
        self._used: dict[str, int] = {}
        # provider uuid -> the version at which it last changed (removed
        # providers too, so that indexes drop them).
        self._changed_at: dict[str, int] = {}
        # The same changes in version order, so that changed_since reads
        # only what moved (an index at 100,000 providers asks after every
        # claim); compacted from _changed_at when it grows.
        self._log_versions: list[int] = []
        self._log_uuids: list[str] = []

    # -- what a source does -------------------------------------------------
    def apply(self, changed: Iterable[Provider] = (), removed: Iterable[str] = (),
              traits: Iterable[str] | None = None,
              classes: Iterable[str] | None = None) -> None:
        """Put whole providers in (replacing what was known of them), take
        ``removed`` out, and replace the known trait and class names when
        given."""
        with self.lock:
            self.version += 1
            for uuid in removed:
                old = self.providers.pop(uuid, None)
                if old is not None:
                    self._count(old.usages, -1)
                if old is not None and old.parent_uuid:
                    self.children.get(old.parent_uuid, set()).discard(uuid)
                if not self.children.get(uuid):
                    self.children.pop(uuid, None)
                self._changed_at[uuid] = self.version
                self._logged(uuid)
            for provider in changed:
                old = self.providers.get(provider.uuid)
                if old is not None:
                    self._count(old.usages, -1)
                self._count(provider.usages, 1)
                if old is not None and old.parent_uuid != provider.parent_uuid \
                        and old.parent_uuid:
                    self.children.get(old.parent_uuid, set()).discard(provider.uuid)
                self.providers[provider.uuid] = provider
                if provider.parent_uuid:
                    self.children.setdefault(provider.parent_uuid, set()).add(provider.uuid)
                self._changed_at[provider.uuid] = self.version
                self._logged(provider.uuid)
            if traits is not None:
                self.known_traits = set(traits)
            if classes is not None:
                self.known_classes = set(classes)

    def add_usage(self, allocations: Mapping[str, Mapping[str, int]],
                  sign: int = 1) -> None:
        """Count (or, with ``sign`` -1, take back) an allocation
        ``{rp_uuid: {rc: amount}}`` this scheduler made, before a read
        shows it."""
        with self.lock:
            self.version += 1
            for uuid, amounts in allocations.items():
                provider = self.providers.get(uuid)
                if provider is None:
                    continue
                usages = dict(provider.usages)
                for rc, amount in amounts.items():
                    usages[rc] = usages.get(rc, 0) + sign * int(amount)
                self._count(provider.usages, -1)
                self._count(usages, 1)
                self.providers[uuid] = dataclasses.replace(provider, usages=usages)
                self._changed_at[uuid] = self.version
                self._logged(uuid)

    def _count(self, usages: Mapping[str, int], sign: int) -> None:
        for rc, amount in usages.items():
            self._used[rc] = self._used.get(rc, 0) + sign * amount

    def _logged(self, uuid: str) -> None:
        self._log_versions.append(self.version)
        self._log_uuids.append(uuid)
        if len(self._log_uuids) > 4 * len(self._changed_at) + 1024:
            kept = sorted((at, u) for u, at in self._changed_at.items())
            self._log_versions = [at for at, _ in kept]
            self._log_uuids = [u for _, u in kept]

    # -- what readers ask ---------------------------------------------------
    def used_totals(self) -> dict[str, int]:
        """Resource class -> usage summed over every provider (a copy)."""
        with self.lock:
            return dict(self._used)

    def changed_since(self, version: int) -> set[str]:
        """Providers changed (or removed) after ``version``."""
        with self.lock:
            start = bisect.bisect_right(self._log_versions, version)
            return set(self._log_uuids[start:])

    def roots(self) -> list[Provider]:
        with self.lock:
            return [p for p in self.providers.values() if p.is_root]

    def tree_of(self, root_uuid: str) -> list[Provider]:
        """The root and every provider below it, root first."""
        with self.lock:
            found, todo = [], [root_uuid]
            while todo:
                uuid = todo.pop()
                provider = self.providers.get(uuid)
                if provider is None:
                    continue
                found.append(provider)
                todo.extend(sorted(self.children.get(uuid, ())))
            return found

    def sharing_providers(self) -> list[Provider]:
        with self.lock:
            return [p for p in self.providers.values() if p.shares]
