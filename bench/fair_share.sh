#!/usr/bin/env bash
# Fair share between accounts (docs/limits.md): account B's single /content
# alone, behind account A's burst of one-call captures and behind A's batch,
# in one run; prints B's p50/p95 in each and the ratios to B alone.
#
#   bench/fair_share.sh [CALLS]        # B's calls per phase, default 10
#
# Env: BURST (A's calls in flight, default 48), BATCH (A's batch, default 150),
# PAGE_MS (each page's time, default 1500), SPARES (the server's
# --spare-browsers, default 1), BENCH_TIMEOUT_SECS (default 1200).
# Only 127.0.0.1 is contacted.
set -euo pipefail
cd "$(dirname "${BASH_SOURCE[0]}")/.."

calls="${1:-10}"
timeout="${BENCH_TIMEOUT_SECS:-1200}"

. bench/common.sh
build_release

exec timeout --signal=TERM "$timeout" \
    "$target_dir/release/bench_fair_share" --calls "$calls" --burst "${BURST:-48}" --batch "${BATCH:-150}" --page-ms "${PAGE_MS:-1500}" --spare-browsers "${SPARES:-1}"
