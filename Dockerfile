# nova-sched: the scheduler daemon in a container.
#
#   docker build -t nova-sched .
#   docker run -p 9480:9480 \
#       -v /path/to/nova-sched.conf:/etc/nova-sched/nova-sched.conf:ro \
#       -v nova-sched-state:/var/lib/nova-sched nova-sched
#
# The same image runs the other commands, for example:
#   docker run ... nova-sched nova-sched-manage \
#       --config-file /etc/nova-sched/nova-sched.conf db sync
#
# The configuration shipped in the image is the generated sample (every line
# commented, so all defaults): mount your own, which at least sets
# [DEFAULT] transport_url and, for more than one daemon, [database] connection.
#
# Health: /etc/nova-sched/nova-sched.conf.d/50-health.conf turns on the
# [prometheus] endpoint on 0.0.0.0:9480 (/healthz and /metrics, no
# authentication), and the HEALTHCHECK asks /healthz with
# nova-sched-healthcheck (the slim image has no curl). The daemon reads that
# directory after --config-file, so a mounted nova-sched.conf keeps the
# health check; to change the endpoint (port, address), mount your own
# directory over /etc/nova-sched/nova-sched.conf.d. Orchestrators that probe
# by command can run the same nova-sched-healthcheck line.

FROM python:3.11-slim

ENV PYTHONUNBUFFERED=1 \
    PIP_NO_CACHE_DIR=1 \
    PIP_DISABLE_PIP_VERSION_CHECK=1

WORKDIR /src
COPY pyproject.toml README.md ./
COPY nova_sched ./nova_sched
# DL3013 (pin versions): what is installed is this source tree; its
# dependencies' version ranges live in pyproject.toml, not here.
# hadolint ignore=DL3013
RUN pip install ".[postgresql,mysql]" \
    && rm -rf /src

COPY etc/nova-sched.conf.sample /etc/nova-sched/nova-sched.conf.sample
COPY etc/nova-sched.conf.sample /etc/nova-sched/nova-sched.conf
COPY etc/container/nova-sched.conf.d/50-health.conf \
    /etc/nova-sched/nova-sched.conf.d/50-health.conf

# A fixed UID/GID so that volumes can be chowned from the host.
RUN groupadd --system --gid 42424 nova-sched \
    && useradd --system --uid 42424 --gid nova-sched \
        --home-dir /var/lib/nova-sched --shell /usr/sbin/nologin nova-sched \
    && install -d -o nova-sched -g nova-sched -m 750 /var/lib/nova-sched

# state_path (the default SQLite database lives here).
VOLUME ["/var/lib/nova-sched"]

# Numeric, not the name: Kubernetes' runAsNonRoot can only verify a UID.
USER 42424:42424
WORKDIR /var/lib/nova-sched

# [prometheus] port: /healthz and /metrics.
EXPOSE 9480

# --timeout above the command's own 5 s, so a hung daemon is reported with
# a reason rather than killed; --start-period covers start-up (database and
# broker connection retries).
HEALTHCHECK --interval=30s --timeout=10s --start-period=30s --retries=3 \
    CMD ["nova-sched-healthcheck", "--config-file", "/etc/nova-sched/nova-sched.conf", "--config-dir", "/etc/nova-sched/nova-sched.conf.d"]

# Exec form: the daemon is PID 1 and receives SIGTERM from `docker stop`
# directly (it stops taking messages, finishes the requests in hand, exits 0).
CMD ["nova-sched", "--config-file", "/etc/nova-sched/nova-sched.conf", "--config-dir", "/etc/nova-sched/nova-sched.conf.d"]
