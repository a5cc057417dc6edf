"""The question nova asks Placement: nova 34's ResourceRequest, as data.

One ``RequestGroup`` per suffix: ``""`` is the unnumbered group (its
resource classes may come from several providers of a tree and from
sharing providers), any other suffix a granular group (one provider serves
all of it). Request-level parameters (``group_policy``, ``root_required``,
``root_forbidden``, ``same_subtree``, ``limit``) sit on the
``ResourceRequest``. ``to_querystring`` prints it as nova sends it, which is
what tests compare with nova's own.
"""

from __future__ import annotations

import dataclasses
from urllib import parse as urlparse


@dataclasses.dataclass
class RequestGroup:
    """One group of a resource request (Placement's ``RequestGroup``).

    ``member_of`` is a list of clauses, each a set of aggregate uuids of
    which the provider (or, for the unnumbered group, its root) must be in
    at least one; every clause must hold. ``forbidden_aggs``: in none of
    them. ``requester_id`` names who asked for the group (a port's uuid, a
    PCI request's id), so that nova can find the group's provider in the
    candidate's ``mappings``.
    """

    suffix: str = ""
    resources: dict[str, int] = dataclasses.field(default_factory=dict)
    required_traits: set[str] = dataclasses.field(default_factory=set)
    forbidden_traits: set[str] = dataclasses.field(default_factory=set)
    member_of: list[frozenset[str]] = dataclasses.field(default_factory=list)
    forbidden_aggs: set[str] = dataclasses.field(default_factory=set)
    in_tree: str | None = None
    requester_id: str | None = None

    @property
    def is_unnumbered(self) -> bool:
        return self.suffix == ""

    def is_empty(self) -> bool:
        """No resources asked (Placement ignores a group of traits only
        unless it is the unnumbered one; nova strips such groups)."""
        return not self.resources


@dataclasses.dataclass
class ResourceRequest:
    """The whole question: groups by suffix and the request-level parameters.

    ``limit`` is ``[scheduler] max_placement_results`` unless nova drops it
    (None). ``group_policy`` is ``"none"``, ``"isolate"`` or None (nova sends
    none when there are fewer than two granular groups).
    """

    groups: dict[str, RequestGroup] = dataclasses.field(default_factory=dict)
    group_policy: str | None = None
    root_required: set[str] = dataclasses.field(default_factory=set)
    root_forbidden: set[str] = dataclasses.field(default_factory=set)
    same_subtree: list[frozenset[str]] = dataclasses.field(default_factory=list)
    limit: int | None = None

    def group(self, suffix: str = "") -> RequestGroup:
        """The group of ``suffix``, made empty if absent."""
        found = self.groups.get(suffix)
        if found is None:
            found = self.groups[suffix] = RequestGroup(suffix=suffix)
        return found

    @property
    def unnumbered(self) -> RequestGroup:
        return self.group("")

    def granular(self) -> list[RequestGroup]:
        """The numbered groups, in suffix order."""
        return [g for s, g in sorted(self.groups.items()) if s]

    def to_querystring(self) -> str:
        """``GET /allocation_candidates``'s query as nova 34 builds it
        (``ResourceRequest.to_querystring``): keys sorted, values sorted."""
        pairs: list[tuple[str, str]] = []
        for suffix, group in sorted(self.groups.items()):
            # Always sent, empty or not, as nova does (Placement refuses an
            # empty one).
            pairs.append((f"resources{suffix}", ",".join(
                sorted(f"{rc}:{n}" for rc, n in group.resources.items()))))
            traits = sorted(group.required_traits) + sorted(
                f"!{t}" for t in group.forbidden_traits)
            if traits:
                pairs.append((f"required{suffix}", ",".join(traits)))
            for clause in group.member_of:
                pairs.append((f"member_of{suffix}", "in:" + ",".join(sorted(clause))))
            if group.forbidden_aggs:
                pairs.append((f"member_of{suffix}",
                              "!in:" + ",".join(sorted(group.forbidden_aggs))))
            if group.in_tree:
                pairs.append((f"in_tree{suffix}", group.in_tree))
        if self.group_policy:
            pairs.append(("group_policy", self.group_policy))
        if self.limit is not None:
            pairs.append(("limit", str(self.limit)))
        root = sorted(self.root_required) + sorted(f"!{t}" for t in self.root_forbidden)
        if root:
            pairs.append(("root_required", ",".join(root)))
        for subtree in self.same_subtree:
            pairs.append(("same_subtree", ",".join(sorted(subtree))))
        return urlparse.urlencode(sorted(pairs))
