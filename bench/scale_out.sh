#!/usr/bin/env bash
# Scale-out (issues 10 and 30): fetch items/s of 1 node on SQLite, 1 node
# on PostgreSQL, 3 nodes on one PostgreSQL database and, as their control, 3
# grids of one node each on databases of their own (sharing nothing), same
# machine, same run, medians of ROUNDS rounds; with the CPU per item of the grid's
# processes and of PostgreSQL, items per CPU-second, and on PostgreSQL the
# write transactions per second, the share of transaction time spent
# waiting on locks and on everything else PostgreSQL reports a backend
# waiting for (docs/scale-out.md "Capacity").
#
#   bench/scale_out.sh [ITEMS]        # default 20000
#
# Env: WORKERS per node (default 16), ROUNDS (default 3), BENCH_TIMEOUT_SECS
# per run (default 600), DB_DELAY_MS (default 0: PostgreSQL on loopback; D:
# the nodes reach it through a proxy adding D ms to each round trip, as a
# database on another host), SUBMITTERS (default 1: every batch through the
# first node, one after the other; S: S batches at once, dealt to the nodes
# in turn). Starts a throwaway PostgreSQL cluster (scripts/postgres-env.sh) and
# stops it at the end. Only 127.0.0.1 is contacted.
set -euo pipefail
cd "$(dirname "${BASH_SOURCE[0]}")/.."

items="${1:-20000}"
workers="${WORKERS:-16}"
rounds="${ROUNDS:-3}"
timeout="${BENCH_TIMEOUT_SECS:-600}"
db_delay="${DB_DELAY_MS:-0}"
submitters="${SUBMITTERS:-1}"

. bench/common.sh
build_release

pg_env="$(bash scripts/postgres-env.sh)"
pg_dir="$(printf '%s\n' "$pg_env" | sed -n 's/^GRID_PG_DIR=//p')"
trap 'bash scripts/postgres-env.sh stop "$pg_dir"' EXIT
export GRID_TEST_DATABASE_URL="$(printf '%s\n' "$pg_env" | sed -n 's/^GRID_TEST_DATABASE_URL=//p')"

echo "==> bench: $items fetch items, $workers workers per node, $rounds rounds, timeout ${timeout}s per run"
timeout --signal=TERM "$((3 * rounds * timeout + 60))" \
    "$target_dir/release/bench_scale_out" --items "$items" --workers "$workers" --rounds "$rounds" \
    --db-delay-ms "$db_delay" --submitters "$submitters" --timeout-secs "$timeout"
