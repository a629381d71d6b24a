#!/usr/bin/env bash
# Screenshots per minute: the grid's capture script (release build), once per
# profile (native-headless-browser/v3 on the headless shell, /v2 on the full
# Chromium), against
# Browserless's POST /chromium/screenshot, same 200 local pages running a
# little JavaScript, same concurrency, same run; prints both rates, the
# ratio and the peak summed RSS of the chromium processes of each side.
#
#   bench/screenshots.sh [ITEMS]        # default 200
#
# Env: BROWSERS (default 2), PAGES (pages per browser, default 2): the grid
# runs BROWSERS x PAGES items at once and Browserless gets the same
# concurrency. BENCH_TIMEOUT_SECS (default 900). Only 127.0.0.1 is contacted.
set -euo pipefail
cd "$(dirname "${BASH_SOURCE[0]}")/.."

items="${1:-200}"
browsers="${BROWSERS:-2}"
pages="${PAGES:-2}"
timeout="${BENCH_TIMEOUT_SECS:-900}"
conc=$((browsers * pages))

command -v chromium >/dev/null || { apt-get update -qq && DEBIAN_FRONTEND=noninteractive apt-get install -y -qq chromium; }
echo "==> starting Browserless (concurrency $conc) on 127.0.0.1:3999"
CONC="$conc" bash ../shared/peers/browserless.sh

. bench/common.sh
build_release

echo "==> bench: $items pages, $browsers browsers x $pages pages, timeout ${timeout}s"
exec timeout --signal=TERM "$((timeout + 60))" \
    "$target_dir/release/bench_screenshots" --items "$items" --browsers "$browsers" --pages "$pages" --timeout-secs "$timeout"
