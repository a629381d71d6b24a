#!/usr/bin/env bash
# API read throughput: GET /jobs/{id} on the grid (release build) against a
# bare hyper handler answering a fixed JSON body of the same size, same run.
#
#   bench/api_reads.sh [--connections C] [--secs S] [--rate R]
#
# Defaults: 200 connections, 10 s per run, then 1,000 requests/s paced.
# Needs the Docker Engine and the registry (scripts/compute-env.sh): the
# record read is a real analytical job's. Only 127.0.0.1 is contacted.
set -euo pipefail
cd "$(dirname "${BASH_SOURCE[0]}")/.."
. bench/common.sh
bash scripts/compute-env.sh >/dev/null
build_release
exec "$target_dir/release/bench_api_reads" "$@"
