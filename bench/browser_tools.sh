#!/usr/bin/env bash
# What an MCP browser tool adds over the same CDP command sent directly
# (browser_evaluate against Runtime.evaluate on one leased session, p50 and
# p95 over CALLS calls each), and a browser_snapshot of a page of ELEMENTS
# buttons (time and size). One run, release build; only 127.0.0.1.
#
#   bench/browser_tools.sh [CALLS] [ELEMENTS]     # default 200 1000
set -euo pipefail
cd "$(dirname "${BASH_SOURCE[0]}")/.."
calls="${1:-200}"
elements="${2:-1000}"
. bench/common.sh
build_release
exec "$target_dir/release/bench_browser_tools" --calls "$calls" --elements "$elements"
