#!/usr/bin/env bash
# Fetch throughput: the grid (release build, --max-workers 16) against a plain
# reqwest loop of the same concurrency over the same local URLs.
#
#   bench/fetch_throughput.sh [ITEMS]        # default 20000 (20 batches of 1,000)
#
# Env: WORKERS (default 16), ROUNDS (default 3: grid and loop alternated,
# the medians printed), BENCH_TIMEOUT_SECS (default 600; the run is
# abandoned after that). Only 127.0.0.1 is contacted.
set -euo pipefail
cd "$(dirname "${BASH_SOURCE[0]}")/.."

items="${1:-20000}"
workers="${WORKERS:-16}"
timeout="${BENCH_TIMEOUT_SECS:-600}"
rounds="${ROUNDS:-3}"

. bench/common.sh
build_release

echo "==> bench: $items fetch items, $workers workers / concurrency, timeout ${timeout}s"
exec timeout --signal=TERM "$((timeout + 60))" \
    "$target_dir/release/bench_fetch" --items "$items" --workers "$workers" --rounds "$rounds" --timeout-secs "$timeout"
