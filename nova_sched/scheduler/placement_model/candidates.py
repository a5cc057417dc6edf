"""Placement's allocation candidates, answered in memory (GET
/allocation_candidates at microversion 1.36).

``search(model, requests, roots)`` answers one resource request (or several,
nova's PCPU fallback, merged) over the whole model; ``Search.hosts()`` names
the roots nova-scheduler would see as hosts (a candidate allocates from the
root provider itself), ``Search.candidates_of(root)`` builds that root's
candidates when asked, and ``Search.removed()`` says why the others have
none (``candidate_reasons``).

The rules are Placement 16's (``placement/objects/allocation_candidate.py``
and ``research_context.py``), per anchor root:

- the unnumbered group takes each resource class whole from one provider:
  one of the anchor's tree, or a sharing provider (``MISC_SHARES_VIA_AGGREGATE``)
  whose aggregates reach a provider of that tree, not under ``in_tree``;
  that provider or the anchor is in every ``member_of`` clause, neither is
  in a forbidden aggregate; the providers that contribute hold every
  required trait between them and none holds a forbidden one;
- a granular group takes everything from one provider of the tree (or a
  sharing provider reaching it), itself holding the traits and aggregates;
- ``root_required``/``root_forbidden`` judge the anchor; ``in_tree`` keeps
  the tree of the provider named;
- groups are combined per anchor: ``group_policy=isolate`` wants distinct
  providers for the granular groups, each ``same_subtree`` one provider
  that is an ancestor (or self) of the others, and the merged amounts must
  fit each provider's summary (``used + sum <= capacity``, ``sum <=
  max_unit``). The same allocation with different mappings is two
  candidates.

``limit`` is not applied: Placement applies it after building every
candidate, to an order that varies per process, so its answer is an
arbitrary subset of this one; nova-sched keeps them all (every host nova
could have been given), which only widens the choice.

Two slips of Placement 16 are not reproduced (the differential test
documents both): under ``group_policy=isolate`` or no policy, a resource
class asked by the unnumbered group and a granular group on one provider
can come back with an inflated amount (``copy_arr_if_needed`` shares the
object it adds into); and an unnumbered group served wholly by sharing
providers keeps only one, arbitrary, anchor, losing the other anchors'
candidates once combined with granular groups. nova-sched answers what
Placement's rules say. Nor is ``[workarounds]
optimize_for_wide_provider_trees`` (off by default), under which Placement
returns candidates over capacity.

Placement answers 400 for a request it cannot read (``refused``); where
it would find a group empty before reaching an unknown name in a later
one it answers 200 with nothing instead: nova ends in NoValidHost either
way, nova-sched with Placement's reason for the 400.
"""

from __future__ import annotations

import dataclasses
import itertools
from collections.abc import Set as AbcSet
from typing import Iterable, Iterator, Mapping, Sequence

import numpy as np

from nova_sched.scheduler.placement_model import candidate_reasons
from nova_sched.scheduler.placement_model.providers import ProviderModel
from nova_sched.scheduler.placement_model.resource_request import ResourceRequest
from nova_sched.scheduler.placement_model.search_context import (
    RefusedRequest, RequestContext, index_of)


@dataclasses.dataclass(frozen=True)
class AllocationCandidate:
    """One allocation request Placement would return, anchored at ``root``."""

    root: str
    allocations: Mapping[str, Mapping[str, int]]
    mappings: Mapping[str, tuple[str, ...]]

    def allocation_request(self) -> dict:
        """The candidate as Placement 1.36 returns it in ``allocation_requests``."""
        return {
            "allocations": {rp: {"resources": dict(amounts)}
                            for rp, amounts in self.allocations.items()},
            "mappings": {suffix: list(rps) for suffix, rps in self.mappings.items()},
        }

    def key(self) -> tuple:
        """What makes two candidates Placement's same allocation request
        (its allocations and mappings; not the anchor)."""
        return (frozenset((rp, rc, n) for rp, amounts in self.allocations.items()
                          for rc, n in amounts.items()),
                frozenset((s, frozenset(rps)) for s, rps in self.mappings.items()))

    def __hash__(self):
        return hash(self.key())

    def __eq__(self, other):
        return isinstance(other, AllocationCandidate) and self.key() == other.key()


class HostSet(AbcSet):
    """``Search.hosts()``: a read-only set of root uuids over the search's
    mask, so that a decision over 100,000 providers asks ``uuid in hosts``
    without a set of every host's uuid being built."""

    def __init__(self, mask: np.ndarray | None, index):
        self._mask = mask
        self._index = index
        self._count = 0 if mask is None else int(mask.sum())

    def __contains__(self, uuid) -> bool:
        if self._mask is None:
            return False
        at = self._index.pos.get(uuid)
        return at is not None and bool(self._mask[at])

    def __iter__(self):
        if self._mask is None:
            return iter(())
        return iter(self._index.uuid_array[self._mask].tolist())

    def __len__(self) -> int:
        return self._count

    @classmethod
    def _from_iterable(cls, iterable):
        return set(iterable)

    def __repr__(self) -> str:
        return f"HostSet({sorted(self)!r})"


class Search:
    """One request's answer over the whole model (Placement's
    ``RequestWideSearchContext`` and its result).

    ``refused`` is set when Placement would answer 400 (an unknown resource
    class or trait, a malformed request): nova's NoValidHost reason.
    """

    def __init__(self, contexts: Sequence[RequestContext], refused: str | None = None):
        self.contexts = list(contexts)
        self.refused = refused
        self._host_mask: np.ndarray | None = None
        self._hosts: HostSet | None = None

    def hosts(self) -> HostSet:
        """Root uuids with at least one candidate that allocates from the root
        provider itself (what nova-scheduler sees as a host). A sharing
        provider is a host only when ``roots`` names it, and then only
        through candidates anchored at itself."""
        if self._hosts is None:
            self._hosts = HostSet(self.host_mask(),
                                  self.contexts[0].index if self.contexts else None)
        return self._hosts

    def host_mask(self) -> np.ndarray | None:
        """``hosts()`` as a mask over the index's positions (None when
        refused)."""
        if self._host_mask is None and self.contexts:
            mask = np.zeros(self.contexts[0].index.n, dtype=bool)
            for ctx in self.contexts:
                mask |= _host_mask(ctx)
            self._host_mask = mask
        return self._host_mask

    def candidates_of(self, root: str) -> list[AllocationCandidate]:
        """The candidates anchored at ``root`` that allocate from it (those
        nova would consider for that host), each once, in a stable order."""
        seen: set = set()
        out: list[AllocationCandidate] = []
        for ctx in self.contexts:
            at = ctx.index.pos.get(root)
            if at is None or ctx.empty or not ctx.anchor_ok[at]:
                continue
            for cand in _anchor_candidates(ctx, at):
                if at not in cand[0]:
                    continue
                made = _candidate(ctx, at, cand)
                if made not in seen:
                    seen.add(made)
                    out.append(made)
        return out

    def all_candidates(self) -> list[AllocationCandidate]:
        """Every candidate of every anchor, each allocation request once (what
        Placement's whole answer holds, without ``limit``): for tests and
        ``explain``, not the request path."""
        seen: set = set()
        out: list[AllocationCandidate] = []
        for ctx in self.contexts:
            if ctx.empty:
                continue
            for at in np.flatnonzero(ctx.anchor_ok & _possible(ctx)).tolist():
                for cand in _anchor_candidates(ctx, at):
                    made = _candidate(ctx, at, cand)
                    if made not in seen:
                        seen.add(made)
                        out.append(made)
        return out

    def removed(self) -> list[tuple[str, int]]:
        """Why the asked roots without a candidate have none: per constraint
        in Placement's words, how many roots it removed (each root under the
        first constraint that removes it, ``candidate_reasons``' order).
        With several requests (nova's PCPU fallback) the roots no request
        serves are judged by the first one."""
        return [(why, len(roots)) for why, roots in self.removed_roots()]

    def removed_roots(self) -> list[tuple[str, list[str]]]:
        """``removed()`` with the root uuids each constraint removed."""
        if not self.contexts:
            return []
        return candidate_reasons.removed(self.contexts[0], self.host_mask())


def search(model: ProviderModel, requests: Sequence[ResourceRequest],
           roots: Iterable[str] | None = None) -> Search:
    """Answer ``requests`` over ``model``: several requests are nova's PCPU
    fallback, their answers merged (union of candidates). ``roots``: only
    these roots are anchors (the host table's live nodes); None, every root.

    When the first request is one Placement refuses, the search is refused
    with its reason; a later refused request adds nothing."""
    index = index_of(model)
    roots = None if roots is None else list(roots)
    contexts = []
    for n, request in enumerate(requests):
        try:
            contexts.append(RequestContext(index, request, roots))
        except RefusedRequest as err:
            if n == 0:
                return Search([], refused=str(err))
    return Search(contexts)


def _host_mask(ctx: RequestContext) -> np.ndarray:
    """Positions of ``ctx``'s hosts: the flat roots the masks settle, and
    the other roots whose tree search finds a candidate taking from them."""
    found = ctx.flat_hosts() & ctx.asked
    trees = ctx.tree_hosts()
    if trees is not None:
        found |= trees
        if ctx.tree_undecided is None:
            return found
        searched = ctx.tree_undecided
    else:
        searched = ctx.complex_roots & ctx.anchor_ok & ctx.asked
    if not ctx.empty:
        for root in np.flatnonzero(searched & _possible(ctx)).tolist():
            for cand in _anchor_candidates(ctx, root):
                if root in cand[0]:
                    found[root] = True
                    break
    return found


# -- the per-anchor search ------------------------------------------------------
# A group's option is (((provider, rc, amount), ...), providers): what it
# takes and the providers mapped to its suffix.

def _possible(ctx: RequestContext) -> np.ndarray:
    """Roots that may have a candidate: for every class of the unnumbered
    group and every granular group, some provider of the tree (or a sharing
    provider) can serve it. A necessary condition, cheap to compute."""
    ix = ctx.index
    ok = np.ones(ix.n, dtype=bool)
    for suffix, rules in ctx.rules.items():
        if suffix:
            tree_has = ix.trees_with(rules.single)
            if rules.sharing is not None and rules.sharing.any():
                for s in np.flatnonzero(rules.sharing).tolist():
                    tree_has[list(ix.anchors[s])] = True
            ok &= tree_has
        else:
            for rc, mask in rules.fits.items():
                tree_has = ix.trees_with(mask)
                shared = rules.sharing_fits.get(rc)
                if shared is not None and shared.any():
                    for s in np.flatnonzero(shared).tolist():
                        tree_has[list(ix.anchors[s])] = True
                ok &= tree_has
    return ok


def _tree(ctx: RequestContext, root: int) -> list[int]:
    return ctx.index.members.get(root, [root])


@dataclasses.dataclass
class _Listed:
    """A group's masks as Python lists and its sharing providers as
    positions: the per-tree search reads them one provider at a time,
    where a list is several times quicker than a numpy scalar."""

    fits: dict[str, list]
    member: list | None
    barred: list | None
    single: list | None
    sharing: list[int]
    sharing_fits: dict[str, list[int]]


def _listed(ctx: RequestContext, suffix: str) -> _Listed:
    found = ctx.listed.get(suffix)
    if found is None:
        rules = ctx.rules[suffix]
        as_list = (lambda m: None if m is None else m.tolist())
        found = ctx.listed[suffix] = _Listed(
            fits={rc: m.tolist() for rc, m in rules.fits.items()},
            member=as_list(rules.member), barred=as_list(rules.barred),
            single=as_list(rules.single),
            sharing=[] if rules.sharing is None else np.flatnonzero(rules.sharing).tolist(),
            sharing_fits={rc: np.flatnonzero(m).tolist()
                          for rc, m in rules.sharing_fits.items()})
    return found


def _unnumbered_options(ctx: RequestContext, root: int) -> list[tuple]:
    rules = ctx.rules.get("")
    if rules is None:
        return [((), frozenset())]
    ix = ctx.index
    group = rules.group
    listed = _listed(ctx, "")
    tree = _tree(ctx, root)
    if rules.in_tree_root is not None and rules.in_tree_root != root:
        return []
    member, barred = listed.member, listed.barred
    root_member = member is None or member[root]
    if barred is not None and barred[root]:
        return []
    per_rc = []
    for rc, mask in listed.fits.items():
        found = [p for p in tree if mask[p]
                 and (member is None or root_member or member[p])
                 and (barred is None or not barred[p])]
        for s in listed.sharing_fits.get(rc, ()):
            if s in found or root not in ix.anchors[s]:
                continue
            if barred is not None and barred[s]:
                continue
            found.append(s)
        if not found:
            return []
        amount = group.resources[rc]
        per_rc.append([(p, rc, amount) for p in found])
    required, forbidden = group.required_traits, group.forbidden_traits
    options = []
    for combo in itertools.product(*per_rc):
        providers = frozenset(p for p, _, _ in combo)
        if required or forbidden:
            traits: set[str] = set()
            clean = True
            for p in providers:
                held = ix.prov_traits[p]
                if forbidden and not forbidden.isdisjoint(held):
                    clean = False
                    break
                traits |= held
            if not (clean and required <= traits):
                continue
        options.append((combo, providers))
    return options


def _granular_options(ctx: RequestContext, suffix: str, root: int) -> list[tuple]:
    rules = ctx.rules[suffix]
    ix = ctx.index
    listed = _listed(ctx, suffix)
    single = listed.single
    found = [p for p in _tree(ctx, root) if single[p]]
    for s in listed.sharing:
        if s not in found and root in ix.anchors[s]:
            found.append(s)
    takes = sorted(rules.group.resources.items())
    return [(tuple((p, rc, n) for rc, n in takes), frozenset((p,))) for p in found]


def _ancestors(ix, p: int) -> set[int]:
    found = {p}
    while ix.parent[p] >= 0:
        p = int(ix.parent[p])
        found.add(p)
    return found


def _same_subtree(ctx: RequestContext, picked: dict[str, frozenset]) -> bool:
    ix = ctx.index
    for subtree in ctx.request.same_subtree:
        rps = set().union(*(picked[s] for s in subtree if s in picked))
        if len(rps) <= 1:
            continue
        common = set.intersection(*(_ancestors(ix, p) for p in rps))
        if not common & rps:
            return False
    return True


def _anchor_candidates(ctx: RequestContext, root: int) -> Iterator[tuple]:
    """Yield each distinct candidate anchored at ``root`` as (allocations
    {pos: {rc: n}}, mappings {suffix: frozenset(pos)})."""
    ix = ctx.index
    suffixes = [s for s in sorted(ctx.groups)]
    options = []
    for suffix in suffixes:
        found = _unnumbered_options(ctx, root) if suffix == "" else \
            _granular_options(ctx, suffix, root)
        if not found:
            return
        options.append(found)
    isolate = ctx.request.group_policy == "isolate" and len(ctx.granular) > 1
    seen = set()
    for combo in itertools.product(*options):
        picked = dict(zip(suffixes, (providers for _, providers in combo)))
        if isolate and len(set().union(*(picked[s] for s in ctx.granular))) \
                != len(ctx.granular):
            continue
        if ctx.request.same_subtree and not _same_subtree(ctx, picked):
            continue
        allocations: dict[int, dict[str, int]] = {}
        for takes, _ in combo:
            for p, rc, n in takes:
                amounts = allocations.setdefault(p, {})
                amounts[rc] = amounts.get(rc, 0) + n
        if not _fits_summary(ix, allocations):
            continue
        key = (frozenset((p, rc, n) for p, a in allocations.items() for rc, n in a.items()),
               frozenset(picked.items()))
        if key in seen:
            continue
        seen.add(key)
        yield allocations, picked


def _fits_summary(ix, allocations: dict[int, dict[str, int]]) -> bool:
    for p, amounts in allocations.items():
        for rc, n in amounts.items():
            row_of, used, cap, max_unit = ix.columns[rc].summary_lists()
            k = row_of[p]
            if used[k] + n > cap[k] or n > max_unit[k]:
                return False
    return True


def _candidate(ctx: RequestContext, root: int, found: tuple) -> AllocationCandidate:
    uuids = ctx.index.uuids
    allocations, picked = found
    return AllocationCandidate(
        root=uuids[root],
        allocations={uuids[p]: dict(sorted(a.items())) for p, a in sorted(
            allocations.items(), key=lambda item: uuids[item[0]])},
        mappings={s: tuple(sorted(uuids[p] for p in rps)) for s, rps in sorted(picked.items())})
