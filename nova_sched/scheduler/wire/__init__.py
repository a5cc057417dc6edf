"""The wire: what reaches the scheduler and what leaves it.

The topic's consumer and its guards (late acknowledgement, poison
requests), the requests held through a database outage and the instances
found stuck, the two request formats turned into one typed request
(Havana's dicts, checked in ``request``; today's nova's objects, read
without nova in ``nova_objects``/``spec_obj``), the image as nova's model
reads it, and the notifications sent.
"""
