"""The decision: one scheduling cycle and what it uses.

``cycle``: one instance's placement (decide, consume, claim, cast,
record); ``cycle_state``: what one decision prepared; retries, server
groups, the decision's timings, and loading plugins by name. The drivers
(``scheduler.driver``, ``filter_scheduler``, ``chance``) and the plugins
(``scheduler.filters``, ``scheduler.weights``) keep nova's places and
names, which operators' configurations spell.
"""
