"""AggregateImagePropertiesIsolation: aggregates reserved for images with some properties."""

from __future__ import annotations

import logging

from nova_sched.conf import CONF
from nova_sched.scheduler import aggregate_metadata, filters

LOG = logging.getLogger(__name__)


class AggregateImagePropertiesIsolation(filters.BaseHostFilter):
    """Hosts whose aggregates' metadata agrees with the image's properties (nova's).

    For each metadata key of the host's aggregates (only keys starting with
    ``<namespace><separator>`` when
    ``aggregate_image_properties_isolation_namespace`` is set), an image
    that sets a property of that name must have one of the key's values
    (every aggregate's, each split at commas). An image without the
    property, or with an empty one, passes: hosts are not kept for images
    that ask for them. The property is compared as ``str()`` of itself,
    as nova does: ``2`` matches ``"2"``, ``True`` matches ``"True"``, and a
    list-valued property is compared as the text of the whole list (so it
    matches no comma-separated list of values; an empty list passes).

    Unlike today's nova, which compares only the properties its image
    model knows, every property of the request's image is compared, as
    the filter did when it was introduced.
    """

    # The aggregates and the image do not change within a request.
    run_filter_once_per_request = True

    @staticmethod
    def _passes(host_state, image_props: dict, prefix: str | None) -> bool:
        for key, options in aggregate_metadata.metadata(host_state.aggregates).items():
            if prefix and not key.startswith(prefix):
                continue
            prop = image_props.get(key)
            if prop and str(prop) not in options:
                LOG.debug("%s fails image aggregate properties: property %s=%r "
                          "does not match %s", host_state, key, prop, sorted(options))
                return False
        return True

    @staticmethod
    def _prefix() -> str | None:
        fs = CONF.filter_scheduler
        namespace = fs.aggregate_image_properties_isolation_namespace
        if not namespace:
            return None
        return namespace + fs.aggregate_image_properties_isolation_separator

    def host_passes(self, host_state, spec) -> bool:
        return self._passes(host_state, spec.image_props, self._prefix())

    def filter_all(self, table, rows, spec):
        props, prefix = spec.image_props, self._prefix()
        return aggregate_metadata.mask(table, rows, lambda st: self._passes(st, props, prefix))
