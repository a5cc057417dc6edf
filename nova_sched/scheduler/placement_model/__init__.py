"""Placement's model, in memory: the room where nova's resource request is answered.

nova-scheduler asks Placement ``GET /allocation_candidates`` (microversion
1.36) for every request and keeps the hosts whose compute node provider
contributes to a candidate. nova-sched answers the same question from its
own copy of Placement's tables, never querying Placement on a request's
path. The room holds, as Placement keeps its search in one context and a
few functions:

- ``resource_request``: the question (``ResourceRequest`` and its
  ``RequestGroup`` s), as nova 34's ``nova.scheduler.utils.ResourceRequest``;
- ``request_builder``: the question built from a request, as nova's
  ``ResourceRequest.from_request_spec`` and ``resources_from_request_spec``;
- ``request_filters``: nova's ``request_filter.py``, each narrowing the
  question (aggregates, traits) before it is asked;
- ``providers``: the answerer's knowledge, Placement's providers with their
  trees, inventories, usages, traits and aggregates (``ProviderModel``),
  filled by a source (``cloud/sources/placement_db``);
- ``candidates``: Placement's candidate rules over that model, giving each
  root provider's ``AllocationCandidate`` s and, for a root with none, why.

The cycle uses the room through ``candidates.search`` only.
"""
