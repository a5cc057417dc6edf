# nova-sched: the scheduler daemon in a container.
#
#   docker build -t nova-sched .
#   docker run -v /path/to/nova-sched.conf:/etc/nova-sched/nova-sched.conf:ro \
#       -v nova-sched-state:/var/lib/nova-sched nova-sched
#
# The same image runs the other commands, for example:
#   docker run ... nova-sched nova-sched-manage \
#       --config-file /etc/nova-sched/nova-sched.conf db sync
#
# The configuration shipped in the image is the generated sample (every line
# commented, so all defaults): mount your own, which at least sets
# [DEFAULT] transport_url and, for more than one daemon, [database] connection.

FROM python:3.11-slim

ENV PYTHONUNBUFFERED=1 \
    PIP_NO_CACHE_DIR=1 \
    PIP_DISABLE_PIP_VERSION_CHECK=1

WORKDIR /src
COPY pyproject.toml README.md ./
COPY nova_sched ./nova_sched
RUN pip install ".[postgresql,mysql]" \
    && rm -rf /src

COPY etc/nova-sched.conf.sample /etc/nova-sched/nova-sched.conf.sample
COPY etc/nova-sched.conf.sample /etc/nova-sched/nova-sched.conf

RUN useradd --system --user-group --uid 42424 \
        --home-dir /var/lib/nova-sched --shell /usr/sbin/nologin nova-sched \
    && install -d -o nova-sched -g nova-sched -m 750 /var/lib/nova-sched

# state_path (the default SQLite database lives here).
VOLUME ["/var/lib/nova-sched"]

USER nova-sched
WORKDIR /var/lib/nova-sched

# Exec form: the daemon is PID 1 and receives SIGTERM from `docker stop`
# directly (it stops taking messages, finishes the requests in hand, exits 0).
CMD ["nova-sched", "--config-file", "/etc/nova-sched/nova-sched.conf"]
