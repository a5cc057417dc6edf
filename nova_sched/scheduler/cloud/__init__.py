"""What the scheduler knows of the cloud, and where it learns it.

The host table (``host_state``: one row per compute node, columns the
filters read; ``host_kinds``/``alike_hosts``: report-derived values shared
by nodes alike), the resource model (``resources``: ratios, limits, free
amounts), aggregates' metadata, compute reports checked and applied
(``compute_report``, ``report_ingest``), metrics as nova reads them, and
the host sources (``sources/``: the compute reports, or today's nova's
cells). ``scheduler.host_manager`` keeps the table fresh from them.
"""
