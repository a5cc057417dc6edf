"""Placement's search context, in memory: indexes over the model and a
request's rules as masks over them.

Placement keeps one request's search in ``RequestWideSearchContext`` and
runs one SQL query per rule. Here the model is indexed once (``ProviderIndex``:
numpy columns per resource class, providers per trait and per aggregate,
each tree's members, each sharing provider's anchors), kept until
``model.version`` moves and then patched for the providers that changed;
a request's rules become boolean masks over providers
(``RequestContext``), built once per request and read by the candidate
search (``candidates``) and the reasons (``candidate_reasons``).

Capacity is judged twice, as Placement does: per group with its SQL filter
(``used + amount <= (total - reserved) * allocation_ratio``, ``min_unit <=
amount <= max_unit``, ``amount % step_size == 0``) and, after the groups are
merged, with its provider summary (``used + sum <= int((total - reserved) *
ratio)``, ``sum <= max_unit``). On MySQL the SQL filter sees the
single-precision ratio the column stores while the summary sees the
decimal MySQL prints (0.9, not 0.899999976): a source that read MySQL keeps
the single-precision value in ``Inventory.allocation_ratio`` and the
summary's ratio is recovered from it here (``_summary_ratio``).
"""

from __future__ import annotations

import dataclasses
import itertools
import threading
import weakref
from typing import Iterable, Sequence

import numpy as np

from nova_sched.scheduler.placement_model.providers import ProviderModel
from nova_sched.scheduler.placement_model.resource_request import (
    RequestGroup, ResourceRequest)


def _summary_ratio(ratio: float) -> float:
    """The ratio Placement's provider summary uses for ``ratio`` as stored.

    A value exactly representable in single precision whose shortest
    single-precision decimal differs from it came from MySQL's FLOAT
    column (see the module's docstring); MySQL hands Placement that
    decimal."""
    single = np.float32(ratio)
    if float(single) == ratio:
        printed = float(str(single))
        return printed
    return ratio


@dataclasses.dataclass
class ResourceColumn:
    """One resource class's inventories: row ``k`` is provider ``prov[k]``."""

    prov: np.ndarray        # int32 provider positions
    used: np.ndarray        # int64
    avail: np.ndarray       # int64, total - reserved
    ratio: np.ndarray       # float64, as stored (Placement's SQL filter)
    min_unit: np.ndarray
    max_unit: np.ndarray
    step: np.ndarray
    cap_merged: np.ndarray  # int64, int((total - reserved) * summary ratio)
    row_of: np.ndarray      # int32 per provider position, -1 without this class
    _lists: tuple | None = None

    def summary_lists(self) -> tuple[list, list, list, list]:
        """(row_of, used, cap_merged, max_unit) as Python lists, for the
        per-tree search's one-provider reads; rebuilt after a patch."""
        if self._lists is None:
            self._lists = (self.row_of.tolist(), self.used.tolist(),
                           self.cap_merged.tolist(), self.max_unit.tolist())
        return self._lists

    def fits(self, amount: int) -> np.ndarray:
        """Per row: Placement's per-group SQL filter for ``amount``."""
        return ((self.used + amount <= self.avail * self.ratio)
                & (self.min_unit <= amount) & (self.max_unit >= amount)
                & (amount % self.step == 0))


class ProviderIndex:
    """The model as arrays, positions ``0..n-1`` in ``uuids``' order.

    Built whole from a model and patched in place when only usages or
    inventories' figures of known providers moved (``refresh``); anything
    else (a provider added, removed, moved, its traits, aggregates or set
    of resource classes changed) makes a new index (``index_of``), so that
    a search holding this one keeps consistent shapes.
    """

    def __init__(self, model: ProviderModel):
        self.model = model
        self.version = -1
        self.build()

    # -- building ----------------------------------------------------------
    def build(self) -> None:
        model = self.model
        with model.lock:
            self.version = model.version
            providers = list(model.providers.values())
        self.uuids = [p.uuid for p in providers]
        self.pos = {u: i for i, u in enumerate(self.uuids)}
        self.uuid_array = np.array(self.uuids, dtype=object)
        n = len(providers)
        self.n = n
        self.parent = np.full(n, -1, dtype=np.int32)
        self.root = np.arange(n, dtype=np.int32)
        for i, p in enumerate(providers):
            if p.parent_uuid is not None:
                self.parent[i] = self.pos.get(p.parent_uuid, -1)
                self.root[i] = self.pos.get(p.root_uuid, i)
        self.is_root = self.parent < 0
        self.sharing = np.fromiter((p.shares for p in providers), dtype=bool, count=n)
        self.prov_traits = [p.traits for p in providers]
        self.prov_aggs = [p.aggregates for p in providers]
        # Trees of more than one provider: their members, root first.
        self.nested_root = np.zeros(n, dtype=bool)
        self.nested_root[self.root[~self.is_root]] = True
        self.members: dict[int, list[int]] = {}
        for i in np.flatnonzero(~self.is_root).tolist():
            self.members.setdefault(int(self.root[i]), []).append(i)
        for r, found in self.members.items():
            found.insert(0, r)
        self.traits = self._postings(self.prov_traits)
        self.aggs = self._postings(self.prov_aggs)
        self.columns: dict[str, ResourceColumn] = {}
        rows: dict[str, list] = {}
        for i, p in enumerate(providers):
            for rc, inv in p.inventories.items():
                rows.setdefault(rc, []).append((
                    i, p.usages.get(rc, 0), inv.total - inv.reserved,
                    inv.allocation_ratio, inv.min_unit, inv.max_unit, inv.step_size))
        for rc, found in rows.items():
            cols = list(zip(*found))
            ratio = np.array(cols[3], dtype=np.float64)
            avail = np.array(cols[2], dtype=np.int64)
            row_of = np.full(n, -1, dtype=np.int32)
            prov = np.array(cols[0], dtype=np.int32)
            row_of[prov] = np.arange(len(prov), dtype=np.int32)
            self.columns[rc] = ResourceColumn(
                prov=prov, used=np.array(cols[1], dtype=np.int64), avail=avail,
                ratio=ratio, min_unit=np.array(cols[4], dtype=np.int64),
                max_unit=np.array(cols[5], dtype=np.int64),
                step=np.array(cols[6], dtype=np.int64),
                cap_merged=self._cap_merged(avail, ratio), row_of=row_of)
        # Each sharing provider's anchors: the roots of every provider in
        # one of its aggregates, its own root among them (Placement's
        # anchors_for_sharing_providers).
        self.anchors: dict[int, frozenset[int]] = {}
        for s in np.flatnonzero(self.sharing).tolist():
            found = {int(self.root[s])}
            for agg in self.prov_aggs[s]:
                found.update(self.root[self.aggs[agg]].tolist())
            self.anchors[s] = frozenset(found)
        self._masks: dict[tuple, np.ndarray] = {}
        self._last_roots: tuple[list[str], np.ndarray] | None = None

    @staticmethod
    def _cap_merged(avail: np.ndarray, ratio: np.ndarray) -> np.ndarray:
        # A cloud has a few distinct ratios: recover each summary ratio once.
        distinct, at = np.unique(ratio, return_inverse=True)
        summary = np.array([_summary_ratio(float(r)) for r in distinct], dtype=np.float64)
        return np.trunc(avail * summary[at]).astype(np.int64)

    def _postings(self, sets: Sequence[frozenset[str]]) -> dict[str, np.ndarray]:
        """Name -> sorted positions of the providers holding it. Built with
        C-level passes (a million trait rows at 10,000 roots)."""
        counts = np.fromiter(map(len, sets), dtype=np.int64, count=len(sets))
        flat = list(itertools.chain.from_iterable(sets))
        if not flat:
            return {}
        names = sorted(set(flat))
        ids = np.fromiter(map({name: i for i, name in enumerate(names)}.__getitem__, flat),
                          dtype=np.int32, count=len(flat))
        owners = np.repeat(np.arange(len(sets), dtype=np.int32), counts)
        # A stable sort of small integers is numpy's radix sort.
        order = np.argsort(ids.astype(np.int16) if len(names) < 2**15 else ids,
                           kind="stable")
        bounds = np.cumsum(np.bincount(ids, minlength=len(names)))
        owners = owners[order]
        return {name: owners[start:end] for name, start, end in zip(
            names, np.concatenate(([0], bounds[:-1])).tolist(), bounds.tolist())}

    def refresh(self) -> bool:
        """Catch up with the model by patching rows in place; False when
        only a new index can (the caller builds one, so that a search
        still reading this one never sees its arrays change size)."""
        model = self.model
        with model.lock:
            if model.version == self.version:
                return True
            changed = model.changed_since(self.version)
            providers = [model.providers.get(u) for u in changed]
            version = model.version
        if len(changed) > max(64, self.n // 8) or not all(
                self._patchable(p) for p in providers if p is not None) or \
                any(p is None for p in providers):
            return False
        for p in providers:
            i = self.pos[p.uuid]
            for rc, inv in p.inventories.items():
                col = self.columns[rc]
                k = col.row_of[i]
                col.used[k] = p.usages.get(rc, 0)
                col.avail[k] = inv.total - inv.reserved
                col.ratio[k] = inv.allocation_ratio
                col.min_unit[k], col.max_unit[k], col.step[k] = (
                    inv.min_unit, inv.max_unit, inv.step_size)
                col.cap_merged[k] = int((inv.total - inv.reserved)
                                        * _summary_ratio(inv.allocation_ratio))
                if col._lists is not None:
                    _, used, cap, max_unit = col._lists
                    used[k], cap[k], max_unit[k] = (
                        int(col.used[k]), int(col.cap_merged[k]), int(col.max_unit[k]))
        self.version = version
        return True

    def _patchable(self, p) -> bool:
        i = self.pos.get(p.uuid)
        if i is None or self.prov_traits[i] != p.traits or self.prov_aggs[i] != p.aggregates:
            return False
        parent = -1 if p.parent_uuid is None else self.pos.get(p.parent_uuid, -2)
        if parent != self.parent[i]:
            return False
        return all(rc in self.columns and self.columns[rc].row_of[i] >= 0
                   for rc in p.inventories) and sum(
            1 for col in self.columns.values() if col.row_of[i] >= 0) == len(p.inventories)

    # -- masks -------------------------------------------------------------
    def having(self, names: Iterable[str], postings: dict[str, np.ndarray]) -> np.ndarray:
        """Providers in at least one of ``names`` (traits or aggregates).
        Read-only: one name's mask is kept while the index stands."""
        names = tuple(names)
        if len(names) == 1:
            key = (id(postings), names[0])
            mask = self._masks.get(key)
            if mask is None:
                mask = np.zeros(self.n, dtype=bool)
                found = postings.get(names[0])
                if found is not None:
                    mask[found] = True
                mask.flags.writeable = False
                if len(self._masks) < 4096:
                    self._masks[key] = mask
            return mask
        mask = np.zeros(self.n, dtype=bool)
        for name in names:
            found = postings.get(name)
            if found is not None:
                mask[found] = True
        return mask

    def roots_mask(self, roots: Sequence[str]) -> np.ndarray:
        """Positions of ``roots`` (unknown uuids ignored), read-only. The
        last list asked is kept: a scheduler asks with the same live nodes
        request after request, and comparing two lists is quicker than
        looking 10,000 uuids up."""
        roots = list(roots)
        last = self._last_roots
        if last is not None and last[0] == roots:
            return last[1]
        at = np.fromiter(map(self.pos.get, roots, itertools.repeat(-1)),
                         dtype=np.int64, count=len(roots))
        mask = np.zeros(self.n, dtype=bool)
        mask[at[at >= 0]] = True
        mask.flags.writeable = False
        self._last_roots = (roots, mask)
        return mask

    def with_trait(self, trait: str) -> np.ndarray:
        return self.having((trait,), self.traits)

    def fits(self, rc: str, amount: int) -> np.ndarray:
        """Providers passing Placement's per-group capacity filter."""
        mask = np.zeros(self.n, dtype=bool)
        col = self.columns.get(rc)
        if col is not None:
            mask[col.prov[col.fits(amount)]] = True
        return mask

    def holding(self, rc: str) -> np.ndarray:
        """Providers with an inventory of ``rc``, whatever its use."""
        mask = np.zeros(self.n, dtype=bool)
        col = self.columns.get(rc)
        if col is not None:
            mask[col.prov] = True
        return mask

    def trees_with(self, mask: np.ndarray) -> np.ndarray:
        """Per provider: whether its tree has a provider in ``mask`` (set on roots)."""
        out = np.zeros(self.n, dtype=bool)
        out[self.root[mask]] = True
        return out


_INDEXES: "weakref.WeakKeyDictionary[ProviderModel, ProviderIndex]" = weakref.WeakKeyDictionary()
_INDEXES_LOCK = threading.Lock()


def index_of(model: ProviderModel) -> ProviderIndex:
    """The model's index, caught up with its version (one per model: the
    index is the model's, kept beside it, not a request's).

    A new index (a provider added or removed, its traits, aggregates or
    classes changed) is built outside the model's lock, which only its
    snapshot of the providers takes: at 100,000 providers a build takes
    seconds, during which the reader applies reads and decisions count
    claims. The reader builds it right after applying such a change
    (``warm``), so that decisions seldom do."""
    with _INDEXES_LOCK:
        index = _INDEXES.get(model)
    if index is not None and index.refresh():
        return index
    index = ProviderIndex(model)
    with _INDEXES_LOCK:
        _INDEXES[model] = index
    return index


def warm(model: ProviderModel) -> None:
    """Bring the model's index up to date now (the reader's thread, after a
    read), so that the next decision finds it built."""
    index_of(model)


@dataclasses.dataclass
class GroupRules:
    """One request group's rules as masks over providers.

    ``fits[rc]``: providers passing the capacity filter (and ``in_tree``);
    ``member``: providers in every ``member_of`` clause (None: no clause);
    ``barred``: providers in a forbidden aggregate; ``traited``: providers
    with every required and no forbidden trait (granular groups judge
    them on the one provider); ``single``: for a granular group, the
    providers that can serve it whole.
    """

    group: RequestGroup
    fits: dict[str, np.ndarray]
    member: np.ndarray | None
    barred: np.ndarray | None
    in_tree_root: int | None
    single: np.ndarray | None = None
    sharing: np.ndarray | None = None  # sharing providers that may serve (unnumbered: any class)
    sharing_fits: dict[str, np.ndarray] = dataclasses.field(default_factory=dict)


class RefusedRequest(Exception):
    """Placement would answer 400; the message is nova's NoValidHost reason."""


class RequestContext:
    """One resource request's search over an index (Placement's
    ``RequestWideSearchContext`` with its ``RequestGroupSearchContext`` s).

    ``empty`` is set when Placement answers 200 with nothing before looking
    at trees (an unknown aggregate or ``in_tree`` provider, no root with the
    ``root_required`` traits).
    """

    def __init__(self, index: ProviderIndex, request: ResourceRequest,
                 roots: Iterable[str] | None = None):
        self.index = index
        self.request = request
        self.empty = False
        # The per-tree search's lists of the groups' masks (candidates._listed).
        self.listed: dict = {}
        model = index.model
        _validate(request, model)
        self.groups = {s: g for s, g in request.groups.items()}
        self.granular = [s for s in sorted(self.groups) if s]
        ix = index
        anchors = ix.is_root.copy()
        if roots is not None:
            asked = ix.roots_mask(roots)
            anchors &= asked
            self.asked = asked & ix.is_root
        else:
            # A sharing provider is nobody's host (nova's hosts are compute
            # nodes), unless the caller names it.
            self.asked = ix.is_root & ~ix.sharing
        root_traits_ok = self._root_traits_ok()
        anchors &= root_traits_ok
        self.anchor_ok = anchors
        if (request.root_required or request.root_forbidden) and not (
                ix.is_root & root_traits_ok).any():
            self.empty = True
        self.rules: dict[str, GroupRules] = {}
        for suffix, group in self.groups.items():
            self.rules[suffix] = self._group_rules(group)
        # Roots whose answer needs the per-tree search: trees of several
        # providers, and anchors a sharing provider may serve.
        complex_roots = ix.nested_root.copy()
        for rules in self.rules.values():
            if rules.sharing is not None and rules.sharing.any():
                for s in np.flatnonzero(rules.sharing).tolist():
                    complex_roots[list(ix.anchors[s])] = True
        self.complex_roots = complex_roots
        # For every rc, the total amount the request asks across groups.
        self.amounts: dict[str, int] = {}
        for group in self.groups.values():
            for rc, n in group.resources.items():
                self.amounts[rc] = self.amounts.get(rc, 0) + n

    def _root_traits_ok(self) -> np.ndarray:
        ix = self.index
        ok = np.ones(ix.n, dtype=bool)
        for trait in self.request.root_required:
            ok &= ix.with_trait(trait)
        for trait in self.request.root_forbidden:
            ok &= ~ix.with_trait(trait)
        return ok

    def _group_rules(self, group: RequestGroup) -> GroupRules:
        ix = self.index
        in_tree_root = None
        tree_mask = None
        if group.in_tree:
            at = ix.pos.get(group.in_tree)
            if at is None:
                self.empty = True
                in_tree_root = -1
                tree_mask = np.zeros(ix.n, dtype=bool)
            else:
                in_tree_root = int(ix.root[at])
                tree_mask = ix.root == in_tree_root
        member = None
        if group.member_of:
            member = np.ones(ix.n, dtype=bool)
            for clause in group.member_of:
                member &= ix.having(clause, ix.aggs)
            if not member.any():
                self.empty = True
        barred = ix.having(group.forbidden_aggs, ix.aggs) if group.forbidden_aggs else None
        fits = {}
        for rc, n in sorted(group.resources.items()):
            mask = ix.fits(rc, n)
            if tree_mask is not None:
                mask &= tree_mask
            fits[rc] = mask
        rules = GroupRules(group=group, fits=fits, member=member, barred=barred,
                           in_tree_root=in_tree_root)
        if group.is_unnumbered:
            if group.in_tree is None and ix.sharing.any():
                sharing = ix.sharing.copy()
                if member is not None:
                    sharing &= member
                any_fit = np.zeros(ix.n, dtype=bool)
                for rc, mask in fits.items():
                    rules.sharing_fits[rc] = sharing & mask
                    any_fit |= rules.sharing_fits[rc]
                rules.sharing = any_fit
            return rules
        if group.resources:
            single = np.ones(ix.n, dtype=bool)
            for mask in fits.values():
                single &= mask
        else:
            # A resourceless group (allowed inside same_subtree): the
            # providers the traits and aggregates name; none without them.
            if group.required_traits or group.member_of:
                single = np.ones(ix.n, dtype=bool)
            else:
                single = np.zeros(ix.n, dtype=bool)
        for trait in group.required_traits:
            single &= ix.with_trait(trait)
        for trait in group.forbidden_traits:
            single &= ~ix.with_trait(trait)
        if member is not None:
            single &= member
        if barred is not None:
            single &= ~barred
        rules.single = single
        rules.sharing = single & ix.sharing
        return rules

    # -- the flat fast path ------------------------------------------------
    def flat_hosts(self) -> np.ndarray:
        """Per provider: a root alone in its tree, no sharing provider able to
        serve it, whose one candidate passes every rule (the common case,
        answered without building candidates)."""
        ix = self.index
        ok = self.anchor_ok & ~self.complex_roots
        if self.empty:
            return np.zeros(ix.n, dtype=bool)
        unnumbered = self.rules.get("")
        if unnumbered is not None:
            group = unnumbered.group
            for mask in unnumbered.fits.values():
                ok &= mask
            if unnumbered.member is not None:
                ok &= unnumbered.member
            if unnumbered.barred is not None:
                ok &= ~unnumbered.barred
            for trait in group.required_traits:
                ok &= ix.with_trait(trait)
            for trait in group.forbidden_traits:
                ok &= ~ix.with_trait(trait)
        for suffix in self.granular:
            ok &= self.rules[suffix].single
        if self.request.group_policy == "isolate" and len(self.granular) > 1:
            return np.zeros(ix.n, dtype=bool)
        ok &= self._merged_fits()
        return ok

    def tree_hosts(self) -> np.ndarray | None:
        """The hosts among roots of trees (and anchors sharing providers
        reach), by masks, when the groups cannot interfere with each
        other: no required traits in the unnumbered group (judged on the
        union of contributors), no resource class in two groups (whose
        amounts would add up on one provider), no ``same_subtree``, no
        ``isolate`` across granular groups. Then each group is served
        independently: every class of the unnumbered group by some provider
        passing its per-provider rules (capacity, the summary's, aggregates
        on it or its root, forbidden traits), every granular group by one
        provider of the tree or a sharing provider reaching it; a root is a
        host when, besides, some group can take from the root itself. None
        for any other request (the per-tree search answers it).

        Required traits of the unnumbered group are judged on the union of
        the providers that contribute: a root holding them all that can
        serve one of the group's classes itself is surely a host (a
        candidate taking that class from it exists); the other roots that
        pass without the traits are left to the per-tree search
        (``tree_undecided``)."""
        unnumbered = self.rules.get("")
        required = unnumbered.group.required_traits if unnumbered is not None else ()
        self.tree_undecided = None
        if self.request.same_subtree or (
                self.request.group_policy == "isolate" and len(self.granular) > 1):
            return None
        classes = [rc for g in self.groups.values() for rc in g.resources]
        if len(classes) != len(set(classes)):
            return None
        ix = self.index
        ok = self.anchor_ok & self.asked & self.complex_roots
        if self.empty:
            return np.zeros(ix.n, dtype=bool)
        from_root = np.zeros(ix.n, dtype=bool)
        unnumbered_from_root = np.zeros(ix.n, dtype=bool)
        if unnumbered is not None:
            group = unnumbered.group
            rule = np.ones(ix.n, dtype=bool)
            if unnumbered.member is not None:
                rule &= unnumbered.member | unnumbered.member[ix.root]
            if unnumbered.barred is not None:
                rule &= ~unnumbered.barred & ~unnumbered.barred[ix.root]
                ok &= ~unnumbered.barred
            for trait in group.forbidden_traits:
                rule &= ~ix.with_trait(trait)
            for rc, mask in unnumbered.fits.items():
                summary = self._summary_fits(rc, group.resources[rc])
                serving = mask & rule & summary
                reach = ix.trees_with(serving)
                shared = unnumbered.sharing_fits.get(rc)
                if shared is not None:
                    self._reach_through(reach, shared & rule & summary)
                ok &= reach
                from_root |= serving
                unnumbered_from_root |= serving
        for suffix in self.granular:
            rules = self.rules[suffix]
            serving = rules.single.copy()
            for rc, n in rules.group.resources.items():
                serving &= self._summary_fits(rc, n)
            reach = ix.trees_with(serving)
            self._reach_through(reach, serving & ix.sharing)
            ok &= reach
            from_root |= serving
        hosts = ok & from_root
        if required:
            traited = np.ones(ix.n, dtype=bool)
            for trait in required:
                traited &= ix.with_trait(trait)
            sure = hosts & traited & unnumbered_from_root
            self.tree_undecided = hosts & ~sure
            return sure
        return hosts

    def _reach_through(self, reach: np.ndarray, sharing: np.ndarray) -> None:
        """Mark in ``reach`` the anchors of the sharing providers of ``sharing``."""
        ix = self.index
        for s in np.flatnonzero(sharing).tolist():
            reach[list(ix.anchors[s])] = True

    def _summary_fits(self, rc: str, amount: int) -> np.ndarray:
        ix = self.index
        ok = np.zeros(ix.n, dtype=bool)
        col = ix.columns.get(rc)
        if col is not None:
            good = (col.used + amount <= col.cap_merged) & (amount <= col.max_unit)
            ok[col.prov[good]] = True
        return ok

    def _merged_fits(self) -> np.ndarray:
        """Providers whose summary allows the request's whole amount of each
        class asked by several groups (one group's amount passed its own,
        stricter or equal, filter)."""
        ix = self.index
        ok = np.ones(ix.n, dtype=bool)
        counts: dict[str, int] = {}
        for group in self.groups.values():
            for rc in group.resources:
                counts[rc] = counts.get(rc, 0) + 1
        for rc, total in self.amounts.items():
            col = ix.columns.get(rc)
            if col is None:
                continue
            bad = (col.used + total > col.cap_merged) | (total > col.max_unit)
            ok[col.prov[bad]] = False
        return ok


def _validate(request: ResourceRequest, model: ProviderModel) -> None:
    """Raise ``RefusedRequest`` where Placement answers 400."""
    groups = request.groups
    if not groups or all(not g.resources for g in groups.values()):
        raise RefusedRequest("There must be at least one resources or "
                             "resources[$S] parameter.")
    subtree = set().union(*request.same_subtree) if request.same_subtree else set()
    if "" in subtree:
        raise RefusedRequest("Empty string (unsuffixed group) can not be "
                             "specified in `same_subtree`")
    missing = sorted(s for s in subtree if s not in groups)
    if missing:
        raise RefusedRequest(f"Real suffixes should be specified in `same_subtree`: "
                             f"{missing} not found")
    for suffix, group in sorted(groups.items()):
        if not group.resources and suffix not in subtree:
            raise RefusedRequest("Resourceless suffixed group request should be "
                                 "specified in `same_subtree` query param: bad "
                                 f"group(s) - ['{suffix}'].")
        for rc, n in group.resources.items():
            if int(n) < 1:
                raise RefusedRequest(f"Requested resource {rc} requires amount >= 1. "
                                     f"Got: {n}.")
        both = group.required_traits & group.forbidden_traits
        if both:
            raise RefusedRequest("Conflicting required and forbidden traits found "
                                 f"in the following traits keys: required{suffix}: "
                                 f"({', '.join(sorted(both))})")
    if request.root_required & request.root_forbidden:
        raise RefusedRequest("Conflicting required and forbidden traits found in "
                             "root_required: " + ", ".join(
                                 sorted(request.root_required & request.root_forbidden)))
    if not request.group_policy and sum(1 for s in groups if s) > 1:
        raise RefusedRequest('The "group_policy" parameter is required when '
                             'specifying more than one "resources{N}" parameter.')
    classes = model.known_classes
    unknown = sorted(rc for g in groups.values() for rc in g.resources if rc not in classes)
    if unknown:
        raise RefusedRequest("Invalid resource class in resources parameter: "
                             f"No such resource class {unknown[0]}.")
    traits = model.known_traits
    named = set(request.root_required) | set(request.root_forbidden)
    for group in groups.values():
        named |= group.required_traits | group.forbidden_traits
    unknown = sorted(t for t in named if t not in traits)
    if unknown:
        raise RefusedRequest(f"No such trait(s): {', '.join(unknown)}.")
