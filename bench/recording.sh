#!/usr/bin/env bash
# What recording a session costs: one server, a session without recording
# and then one with "recording": true, each showing a page that repaints on
# every animation frame for SECONDS; the CPU of the server and the browser
# (from /proc, every process under the server) of each, their ratio, and the
# recording's bytes per minute. One run, release build; only 127.0.0.1.
#
# Then the same with a page of one colour, which paints once (an idle page).
#
#   bench/recording.sh [SECONDS]     # default 60
set -euo pipefail
cd "$(dirname "${BASH_SOURCE[0]}")/.."
seconds="${1:-60}"
. bench/common.sh
build_release
"$target_dir/release/bench_recording" --seconds "$seconds"
exec "$target_dir/release/bench_recording" --seconds "$seconds" --static 1
