#!/usr/bin/env bash
# Session latency: time from POST /sessions to the first CDP answer through
# the cdpUrl (grid-server release build, --warm-sessions 2), next to
# Browserless's connect-to-first-answer on ws://127.0.0.1:3999/chromium?token=peer
# and a cold Chromium start, in the same run; prints p50, p95 and the ratios.
#
#   bench/session_latency.sh [LEASES]        # default 30
#
# The run is LEASES rounds of one Browserless connection, one cold start and
# one lease, so the three sides see the same machine load.
#
# Env: WARM (default 2), GAP_MS (unmeasured pause after each round so the
# warm pool refills, default 1500), BENCH_TIMEOUT_SECS (default 600; the run
# is abandoned after that). Only 127.0.0.1 is contacted.
set -euo pipefail
cd "$(dirname "${BASH_SOURCE[0]}")/.."

leases="${1:-30}"
warm="${WARM:-2}"
gap_ms="${GAP_MS:-1500}"
timeout="${BENCH_TIMEOUT_SECS:-600}"

command -v chromium >/dev/null || { apt-get update -qq && DEBIAN_FRONTEND=noninteractive apt-get install -y -qq chromium; }
echo "==> starting Browserless on 127.0.0.1:3999"
bash ../shared/peers/browserless.sh

. bench/common.sh
build_release

echo "==> bench: $leases leases / connections / starts each, warm pool $warm, timeout ${timeout}s"
exec timeout --signal=TERM "$((timeout + 60))" \
    "$target_dir/release/bench_sessions" --leases "$leases" --warm "$warm" --gap-ms "$gap_ms" \
    --timeout-secs "$timeout"
