#!/usr/bin/env bash
# Fetch throughput at internet latency: the grid (release build) against a
# plain reqwest loop of the same concurrency, both fetching local URLs that
# answer after DELAY_MS (default 200). Concurrency, not CPU, is the limit
# here: the grid's workers grow with the queue up to --max-workers.
#
#   bench/fetch_latency.sh [ITEMS]        # default 20000 (20 batches of 1,000)
#
# Env: WORKERS (default 1000: the grid's --max-workers and the loop's
# concurrency), DELAY_MS (default 200), GRID_WORKERS (the grid's ceiling
# when it should differ from WORKERS), ROUNDS (default 3: grid and loop
# alternated, the medians printed), BENCH_TIMEOUT_SECS (default 600).
# Only 127.0.0.1 is contacted.
set -euo pipefail
cd "$(dirname "${BASH_SOURCE[0]}")/.."

items="${1:-20000}"
workers="${WORKERS:-1000}"
delay="${DELAY_MS:-200}"
grid_workers="${GRID_WORKERS:-0}"
timeout="${BENCH_TIMEOUT_SECS:-600}"
rounds="${ROUNDS:-3}"

. bench/common.sh
build_release

echo "==> bench: $items fetch items answered after ${delay} ms, $workers concurrent, timeout ${timeout}s"
exec timeout --signal=TERM "$((timeout + 60))" \
    "$target_dir/release/bench_fetch" --items "$items" --workers "$workers" --delay-ms "$delay" \
    --grid-workers "$grid_workers" --rounds "$rounds" --timeout-secs "$timeout"
