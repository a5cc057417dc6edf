"""AggregateImagePropertiesIsolation: aggregates reserved for images with some properties."""

from __future__ import annotations

from nova_sched.conf import CONF
from nova_sched.scheduler import filters
from nova_sched.scheduler.cloud import aggregate_metadata
from nova_sched.scheduler.wire import image_meta


class AggregateImagePropertiesIsolation(filters.BaseHostFilter):
    """Hosts whose aggregates' metadata agrees with the image's properties (nova's).

    For each metadata key of the host's aggregates (only keys starting with
    ``<namespace><separator>`` when
    ``aggregate_image_properties_isolation_namespace`` is set), an image
    that sets a property of that name must have one of the key's values
    (every aggregate's, each split at commas). An image without the
    property, or with one that is false, zero or empty, passes: hosts are
    not kept for images that ask for them.

    The image's properties are compared as nova's image model has them
    (``image_meta``), as ``str()`` of the typed value, as nova does:
    ``architecture: amd64`` is the property ``hw_architecture`` with the
    value ``x86_64``; ``hw_qemu_guest_agent: yes`` is ``True`` (and
    ``no``, False, passes everywhere); an aggregate key with a legacy name
    (``architecture``) isolates nothing.

    Beyond nova, which ignores properties its model does not know, a key
    naming such a property (``custom_tier: gold``) is compared with the
    property as the image sent it.
    """

    run_on_rebuild = True

    def prepare(self, cycle) -> tuple[image_meta.ImageProperties, str | None]:
        """The image's properties and the metadata key prefix to compare."""
        fs = CONF.filter_scheduler
        namespace = fs.aggregate_image_properties_isolation_namespace
        prefix = (namespace + fs.aggregate_image_properties_isolation_separator
                  if namespace else None)
        return cycle.spec.image_props, prefix

    def filter_all(self, cycle, rows):
        image, prefix = cycle.prepared(self)

        def agrees(metadata) -> bool:
            for key, options in metadata.items():
                if prefix and not key.startswith(prefix):
                    continue
                prop = image.as_named(key)
                if prop and str(prop) not in options:
                    return False
            return True

        return filters.by_aggregates(cycle, rows, filters.MERGED_METADATA,
                                     aggregate_metadata.metadata, agrees)
