"""nova-sched: a standalone scheduler service for OpenStack-style clouds."""

import warnings

# futurist imports eventlet when it is installed (oslo.service drags it in);
# nothing here uses it, so its deprecation banner is noise for operators.
warnings.filterwarnings("ignore", message=r"\s*Eventlet is deprecated")

from oslo_service import backend as _service_backend  # noqa: E402

# oslo.service picks its concurrency backend once, on first use; without this
# it would choose eventlet and oslo.messaging would expect monkey-patching.
# Every entry point imports this package first, so the choice is made before
# anything imports oslo_messaging.
try:
    _service_backend.init_backend(_service_backend.BackendType.THREADING)
except Exception:  # already initialised by an embedding process
    pass
