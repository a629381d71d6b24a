#!/usr/bin/env bash
# What a persistent context adds to a lease (docs/sessions.md, Contexts):
# one context filled with MIB MiB of state (localStorage of four local
# origins), then LEASES rounds of a lease without it and a lease with it,
# each timed from POST /sessions until running; prints both p50s, the added
# p50 and the ratio. One run, release build; only 127.0.0.1.
#
#   bench/contexts.sh [LEASES] [MIB]     # default 10 5
set -euo pipefail
cd "$(dirname "${BASH_SOURCE[0]}")/.."
leases="${1:-10}"
mib="${2:-5}"
. bench/common.sh
build_release
exec "$target_dir/release/bench_contexts" --leases "$leases" --mib "$mib"
