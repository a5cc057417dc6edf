#!/usr/bin/env bash
# Every benchmark at the sizes the README's figures come from, one after
# the other, in about 8 minutes on the project's 2-core machines. Needs
# RabbitMQ on 127.0.0.1:5672 (./run_tests.sh starts it). Figures only:
# a benchmark fails the run only when it finds a wrong answer or a lost
# request. ./bench/run_all.sh --smoke runs each in its short form.
set -euo pipefail
cd "$(dirname "$0")/.."

if [ "${1:-}" = "--smoke" ]; then
    python3 bench/decision_bench.py --smoke
    python3 bench/startup_bench.py --smoke
    python3 bench/e2e_bench.py --smoke
    python3 bench/request_cost.py --smoke
    nova-sched-sim --hosts 300 --instances 300 --seed 7
    exit 0
fi

echo "== decisions: filter + weigh, default filters and weighers, and the catalogue"
python3 bench/decision_bench.py --sizes 10000,100000
python3 bench/decision_bench.py --sizes 10000 --catalogue
echo "== a daemon restarted against 100,000 nodes"
python3 bench/startup_bench.py --hosts 100000 --repeats 1
echo "== end to end over RabbitMQ: 10,000 hosts re-reporting every 10 s"
python3 bench/e2e_bench.py --hosts 10000 --requests 1000
echo "== one run_instance on the request thread, in process"
python3 bench/request_cost.py --hosts 10000
echo "== the embedded demo"
nova-sched-sim --hosts 10000 --instances 2000 --json
nova-sched-sim --hosts 100000 --instances 2000 --seed 7
