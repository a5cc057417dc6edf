"""The scheduler, in rooms.

Top level, nova's modules under nova's names: the RPC endpoints
(``manager``: Havana's 2.x API; ``manager_v4``: today's nova's 4.x),
the client (``rpcapi``), the drivers (``driver``, ``filter_scheduler``,
``chance``), the host-state cache (``host_manager``) and the Prometheus
instruments (``metrics``). The rooms:

- ``wire/``: what arrives and leaves: the topic's consumer, requests
  checked into one typed request, nova's objects, notifications;
- ``cloud/``: what the scheduler knows of the cloud: the host table, the
  resource model, aggregates, compute reports, and the host sources
  (``cloud/sources/``: compute reports, or today's nova's cells);
- ``decision/``: one scheduling cycle and what it prepares, with the
  plugins in ``filters/`` and ``weights/`` (where operators' configurations
  name them);
- ``claim_stores/``: where a decision's claim is made (the scheduler's
  database, or Placement).

The way of a request through them is drawn in doc/architecture.md.
"""
