"""AggregateImagePropertiesIsolation: aggregates reserved for images with some properties."""

from __future__ import annotations

from nova_sched.conf import CONF
from nova_sched.scheduler import aggregate_metadata, filters


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

    def prepare(self, cycle) -> tuple[dict, str | None]:
        """The image's properties and the metadata key prefix to compare."""
        fs = CONF.filter_scheduler
        namespace = fs.aggregate_image_properties_isolation_namespace
        prefix = (namespace + fs.aggregate_image_properties_isolation_separator
                  if namespace else None)
        return cycle.spec.image_props, prefix

    def filter_all(self, cycle, rows):
        image_props, prefix = cycle.prepared(self)

        def agrees(metadata) -> bool:
            for key, options in metadata.items():
                if prefix and not key.startswith(prefix):
                    continue
                prop = image_props.get(key)
                if prop and str(prop) not in options:
                    return False
            return True

        return filters.by_aggregates(cycle, rows, filters.MERGED_METADATA,
                                     aggregate_metadata.metadata, agrees)
