"""Why a root has no allocation candidate, in Placement's terms.

Neither nova nor Placement says it (nova logs "Got no allocation candidates
from the placement API"); an operator walks inventories, traits and
aggregates by hand. Here each root asked about that is not a host counts
under the first constraint, in this fixed order, that its tree fails:

1. ``root_forbidden`` then ``root_required`` traits, on the root itself:
   "have trait COMPUTE_STATUS_DISABLED", "lack trait OWNER_NOVA";
2. ``in_tree``: "not in tree <uuid>";
3. per group (unnumbered first, then by suffix): ``member_of`` clauses
   ("not in aggregate <uuid>" or "not in any of aggregates <a>, <b>"),
   forbidden aggregates ("in aggregate <uuid>"), on some provider of the
   tree or the root;
4. per group, per resource class in name order: "have no PCPU inventory"
   when no provider of the tree (or sharing provider reaching it) holds
   the class, else "have no PCPU capacity for 8" when none has room;
5. per group, required then forbidden traits: "lack trait CUSTOM_SSD" when
   no provider of the tree that can serve the group has it, "have trait X"
   when every one that can serve it has X;
6. otherwise "have no combination of providers for the request"
   (group_policy, same_subtree, or the merged amounts not fitting).

Constraints are judged on the tree as a whole (a provider of it that
passes), which is exact for a root alone in its tree and a fair first
answer for others. Reasons are given in that order, with their counts.
"""

from __future__ import annotations

import numpy as np

from nova_sched.scheduler.placement_model.search_context import RequestContext

NO_COMBINATION = "have no combination of providers for the request"


def removed(ctx: RequestContext, hosts: np.ndarray) -> list[tuple[str, list[str]]]:
    """``[(reason, root uuids removed)]`` over the roots ``ctx`` was asked
    about that are not in ``hosts``, each root under one reason, in the
    order above."""
    ix = ctx.index
    left = ctx.asked & ~hosts
    out: list[tuple[str, list[str]]] = []

    def take(reason: str, passes: np.ndarray) -> None:
        nonlocal left
        gone = np.flatnonzero(left & ~passes)
        if len(gone):
            out.append((reason, ix.uuid_array[gone].tolist()))
            left = left & passes

    request = ctx.request
    for trait in sorted(request.root_forbidden):
        take(f"have trait {trait}", ~ix.with_trait(trait))
    for trait in sorted(request.root_required):
        take(f"lack trait {trait}", ix.with_trait(trait))
    for suffix in sorted(ctx.rules):
        rules = ctx.rules[suffix]
        if rules.in_tree_root is not None:
            passes = np.zeros(ix.n, dtype=bool)
            if rules.in_tree_root >= 0:
                passes[rules.in_tree_root] = True
            take(f"not in tree {rules.group.in_tree}", passes)
    for suffix in sorted(ctx.rules):
        group = ctx.rules[suffix].group
        for clause in group.member_of:
            aggs = sorted(clause)
            reason = (f"not in aggregate {aggs[0]}" if len(aggs) == 1
                      else f"not in any of aggregates {', '.join(aggs)}")
            take(reason, ix.trees_with(ix.having(clause, ix.aggs)))
        for agg in sorted(group.forbidden_aggs):
            # The root in it bars the whole tree.
            take(f"in aggregate {agg}", ~ix.having((agg,), ix.aggs))
    for suffix in sorted(ctx.rules):
        rules = ctx.rules[suffix]
        for rc in sorted(rules.group.resources):
            held = ix.trees_with(ix.holding(rc)) | _shared_reach(ctx, ix.holding(rc) & ix.sharing)
            take(f"have no {rc} inventory", held)
            room = ix.trees_with(rules.fits[rc]) | _shared_reach(ctx, rules.fits[rc] & ix.sharing)
            take(f"have no {rc} capacity for {rules.group.resources[rc]}", room)
    for suffix in sorted(ctx.rules):
        rules = ctx.rules[suffix]
        group = rules.group
        serving = np.zeros(ix.n, dtype=bool)
        for mask in rules.fits.values():
            serving |= mask
        if not rules.fits:
            serving[:] = True
        for trait in sorted(group.required_traits):
            take(f"lack trait {trait}", ix.trees_with(serving & ix.with_trait(trait)))
        for trait in sorted(group.forbidden_traits):
            take(f"have trait {trait}", ix.trees_with(serving & ~ix.with_trait(trait)))
    take(NO_COMBINATION, np.zeros(ix.n, dtype=bool))
    return out


def _shared_reach(ctx: RequestContext, sharing: np.ndarray) -> np.ndarray:
    ix = ctx.index
    reach = np.zeros(ix.n, dtype=bool)
    for s in np.flatnonzero(sharing).tolist():
        reach[list(ix.anchors[s])] = True
    return reach
