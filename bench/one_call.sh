#!/usr/bin/env bash
# One-call captures (POST /screenshot, /pdf) against Browserless's
# /chromium/screenshot and /chromium/pdf, and against the machine's limit: a
# bare CDP loop on the same headless shell (no grid, no queue, no metering),
# same 800x600 PNG pages, same concurrency, one run; also a capture batch of
# the same pages. Prints pages per minute and p50/p95 latency per side, then
# the ratios docs/performance.md states its goals in.
#
#   bench/one_call.sh [ITEMS]        # default 200
#
# Env: BROWSERS (default 2), PAGES (pages per browser, default 2): BROWSERS x
# PAGES calls in flight on every side. BENCH_TIMEOUT_SECS (default 900).
# Only 127.0.0.1 is contacted.
set -euo pipefail
cd "$(dirname "${BASH_SOURCE[0]}")/.."

items="${1:-200}"
browsers="${BROWSERS:-2}"
pages="${PAGES:-2}"
timeout="${BENCH_TIMEOUT_SECS:-900}"
conc=$((browsers * pages))

command -v chromium-headless-shell >/dev/null || { apt-get update -qq && DEBIAN_FRONTEND=noninteractive apt-get install -y -qq chromium-headless-shell; }
echo "==> starting Browserless (concurrency $conc) on 127.0.0.1:3999"
CONC="$conc" bash ../shared/peers/browserless.sh

. bench/common.sh
build_release

echo "==> bench: $items pages, $browsers browsers x $pages pages, timeout ${timeout}s"
exec timeout --signal=TERM "$((timeout + 60))" \
    "$target_dir/release/bench_one_call" --items "$items" --browsers "$browsers" --pages "$pages" --timeout-secs "$timeout"
