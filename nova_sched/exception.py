"""Errors that cross module boundaries, several of them visible to RPC callers."""

from __future__ import annotations


class NovaSchedException(Exception):
    """Base class; ``message`` is safe to show to callers and operators."""

    msg_fmt = "An unknown error occurred."

    def __init__(self, message: str | None = None, **kwargs):
        if message is None:
            message = self.msg_fmt % kwargs if kwargs else self.msg_fmt
        self.message = message
        self.kwargs = kwargs
        super().__init__(message)


class NoValidHost(NovaSchedException):
    """No host fits the request; ``reason`` says which filter removed what."""

    msg_fmt = "No valid host was found. %(reason)s"

    def __init__(self, reason: str = ""):
        self.reason = reason
        super().__init__(reason=reason)


class ResourceRequestRefused(NoValidHost):
    """The resource request nova would build for this request is one nova
    or Placement refuses (two flavor groups without ``group_policy``, a group
    without resources, a trait both required and forbidden, a flavor and
    image that conflict): no host is asked, as nova-scheduler ends in
    NoValidHost. ``reason`` is nova's or Placement's own text."""


class InvalidRequestSpec(NovaSchedException):
    """A request_spec or filter_properties that cannot be scheduled."""

    msg_fmt = "Invalid request: %(reason)s"

    def __init__(self, reason: str, instance_uuids: list[str] | None = None):
        self.reason = reason
        self.instance_uuids = instance_uuids or []
        super().__init__(reason=reason)


class InvalidComputeReport(NovaSchedException):
    """A compute_node_update whose values make no sense."""

    msg_fmt = "Rejected compute node report: %(reason)s"

    def __init__(self, reason: str):
        self.reason = reason
        super().__init__(reason=reason)


class ClaimFailed(NovaSchedException):
    """The node no longer has room: another scheduler claimed it first."""

    msg_fmt = "Claim on %(host)s/%(node)s failed: not enough free resources"


class HostTableBehind(NovaSchedException):
    """A claim decided on a host table that had not read an operator's
    latest change (``db.operator_changes``): nothing was written; the
    instance is decided again once the table has caught up."""

    msg_fmt = ("Decided on a host table that read %(seen)s operator changes; "
               "the database has %(current)s")


class AlreadyRecorded(NovaSchedException):
    """A request taken as seen for the first time had been recorded before.

    Its one instance already has a row: the request was delivered again,
    published twice, or resumed after the database went away. Nothing of
    the claim that found out was written; the request takes the general way,
    which reads where the instance stands.
    """

    msg_fmt = "Instance %(uuid)s was recorded by an earlier handling of its request"


class AlreadyPlaced(NovaSchedException):
    """Another handler of the same request placed the instance meanwhile.

    A publisher retrying a cast whose confirm was lost (its broker node
    died) can put a request in the queue twice; two daemons, or two
    threads of one, may then handle the copies at once. The one that
    records its placement second backs off.
    """

    msg_fmt = "Instance %(uuid)s was placed meanwhile by another handler"


class ConfigurationError(NovaSchedException):
    """A setting the daemon cannot run with (reported with exit code 2)."""

    msg_fmt = "Bad configuration: %(reason)s"

    def __init__(self, reason: str):
        self.reason = reason
        super().__init__(reason=reason)


class DatabaseUnavailable(NovaSchedException):
    """The database could not be reached after the configured retries."""

    msg_fmt = "Database unavailable: %(reason)s"

    def __init__(self, reason: str):
        self.reason = reason
        super().__init__(reason=reason)


class PlacementUnavailable(NovaSchedException):
    """nova's Placement did not answer (or answered with a server error)
    for as long as a request may wait."""

    msg_fmt = "Placement unavailable: %(reason)s"

    def __init__(self, reason: str):
        self.reason = reason
        super().__init__(reason=reason)


class NotFound(NovaSchedException):
    """Something an operator named does not exist (nova-sched-manage: exit 1)."""

    msg_fmt = "Not found."


class AggregateNotFound(NotFound):
    msg_fmt = "Aggregate %(name)s not found."


class AggregateExists(NovaSchedException):
    msg_fmt = "Aggregate %(name)s already exists."


class AggregateHostExists(NovaSchedException):
    msg_fmt = "Host %(host)s is already in aggregate %(name)s."


class AggregateHostNotFound(NotFound):
    msg_fmt = "Host %(host)s is not in aggregate %(name)s."


class AvailabilityZoneConflict(NovaSchedException):
    """A host would be in two availability zones at once (nova forbids it)."""

    msg_fmt = (
        "Host %(host)s is already in availability zone %(other_zone)s "
        "(aggregate %(other)s); aggregate %(name)s would put it in %(zone)s."
    )


class InvalidInput(NovaSchedException):
    """An operator's argument the database cannot take (too long, empty)."""

    msg_fmt = "Invalid input: %(reason)s"


class ServiceNotFound(NotFound):
    msg_fmt = "Host %(host)s has no %(binary)s service."


class InstanceNotFound(NotFound):
    msg_fmt = "Instance %(uuid)s not found."


class NovaNoValidHost(Exception):
    """NoValidHost as today's nova receives it over RPC API 4.x.

    oslo.messaging names a remote exception by its class's module and name,
    and nova's client rebuilds only those of the modules it allows
    (``nova.exception`` among them). Named ``nova.exception.NoValidHost``
    with nova's ``reason`` keyword, the conductor gets its own NoValidHost
    with our reason, and reschedules or fails the build as it would with
    nova's scheduler.
    """

    def __init__(self, reason: str):
        super().__init__(f"No valid host was found. {reason}")
        self.kwargs = {"reason": reason}


NovaNoValidHost.__module__ = "nova.exception"
NovaNoValidHost.__name__ = NovaNoValidHost.__qualname__ = "NoValidHost"
