#!/usr/bin/env bash
# Submit-to-RUNNING latency of analytical jobs (release grid-server) next to
# `docker run --rm` of the same image on the same engine, in the same run.
#
#   bench/job_latency.sh [JOBS]        # default 50
#
# Prepares the engine, registry and image first (scripts/compute-env.sh).
# Env: WARMUP (default 2 runs of each, not counted), BENCH_TIMEOUT_SECS
# (default 900; the run is abandoned after that). Only 127.0.0.1 is contacted.
set -euo pipefail
cd "$(dirname "${BASH_SOURCE[0]}")/.."

jobs="${1:-50}"
warmup="${WARMUP:-2}"
timeout="${BENCH_TIMEOUT_SECS:-900}"

bash scripts/compute-env.sh

. bench/common.sh
build_release

echo "==> bench: $jobs jobs each way (+$warmup warm-up), timeout ${timeout}s"
exec timeout --signal=TERM "$timeout" \
    "$target_dir/release/bench_job_latency" --jobs "$jobs" --warmup "$warmup"
