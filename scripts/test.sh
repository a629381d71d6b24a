#!/usr/bin/env bash
# The test command: installs what the suite needs, builds every binary once,
# then runs every test of the workspace (unit tests and the black-box suite
# in tests/, which starts the real grid-server and grid binaries). A full run
# also checks formatting (cargo fmt --check) and lints (clippy, in the same
# build; warnings are errors); the run fails if either does, after the tests
# have run. The bench binaries are not built here (bench/common.sh builds
# them, with the feature grid-tests/bench).
#
#   scripts/test.sh                 # everything
#   scripts/test.sh -p grid-tests   # extra arguments go to the test runner (no lint)
set -euo pipefail

cd "$(dirname "${BASH_SOURCE[0]}")/.."

say() { printf '==> %s\n' "$*"; }

apt_updated=0
# need_pkg NAME: installs the Debian package NAME unless it is installed.
need_pkg() {
    local name="$1"
    if dpkg -s "$name" >/dev/null 2>&1; then
        return 0
    fi
    local sudo=""
    if [ "$(id -u)" -ne 0 ]; then
        sudo="sudo"
    fi
    if [ "$apt_updated" -eq 0 ]; then
        say "apt-get update"
        $sudo apt-get update -qq
        apt_updated=1
    fi
    say "installing Debian package $name"
    DEBIAN_FRONTEND=noninteractive $sudo apt-get install -y -qq --no-install-recommends "$name"
}

# Debian packages the suite needs. Later work adds here, e.g.
#   need_pkg docker.io; need_pkg docker-registry; need_pkg busybox-static; need_pkg chromium
need_pkg ca-certificates
# The HTTPS tests check HTTP/2 and the generated CA with curl.
need_pkg curl
# Browser scripts (capture, render-fetch, browser-fetch) drive Debian's Chromium;
# util-linux's setpriv ties each browser's life to the server's.
need_pkg chromium
# The capture profile native-headless-browser/v3 runs on Chromium's headless shell.
need_pkg chromium-headless-shell
need_pkg util-linux
# Every browser runs in a bubblewrap sandbox of its own (docs/security.md).
need_pkg bubblewrap
# Upstream proxies are tested against Debian's squid with its shipped
# configuration (tests/src/squid.rs).
need_pkg squid
bash scripts/compute-env.sh  # docker.io, docker-registry, busybox-static; dockerd, registry :5000, tools/busybox:1
# The suite runs a second time with every server on PostgreSQL (issue 10): a
# throwaway cluster started here, stopped when the script exits.
need_pkg postgresql
pg_env="$(bash scripts/postgres-env.sh)"
pg_dir="$(printf '%s\n' "$pg_env" | sed -n 's/^GRID_PG_DIR=//p')"
pg_url="$(printf '%s\n' "$pg_env" | sed -n 's/^GRID_TEST_DATABASE_URL=//p')"
trap 'bash scripts/postgres-env.sh stop "$pg_dir"' EXIT
# Multi-node tests (tests/tests/scale_out.rs) need the cluster in both passes.
export GRID_TEST_DATABASE_URL="$pg_url"
# The MCP tests drive the server with the official Python MCP SDK's client,
# in both protocol eras (the high-level Client with connect modes, mcp >= 2).
if ! python3 -c "from mcp import Client; import mcp.client.streamable_http" >/dev/null 2>&1; then
    say "installing the Python MCP SDK (PyPI package mcp)"
    python3 -m pip install --quiet --disable-pip-version-check --upgrade "mcp>=2.3"
fi
# The CLI test of `--output yaml` reads the YAML back with PyYAML.
if ! python3 -c "import yaml" >/dev/null 2>&1; then
    say "installing PyYAML (PyPI package pyyaml)"
    python3 -m pip install --quiet --disable-pip-version-check pyyaml
fi
# The Python example (examples/python/playwright_session.py, run by
# tests/tests/examples.rs) drives a session with Playwright: the PyPI package
# only, never `playwright install` (it connects to the grid's browser).
if ! python3 -c "import playwright.sync_api" >/dev/null 2>&1; then
    say "installing Playwright for Python (PyPI package playwright)"
    python3 -m pip install --quiet --disable-pip-version-check playwright
fi
# tests/tests/openapi.rs checks GET /openapi.json with openapi-spec-validator
# (is it valid OpenAPI 3.1) and runs Schemathesis 4 against the live server
# from it (does the server answer as it says).
if ! python3 -c "import openapi_spec_validator" >/dev/null 2>&1; then
    say "installing openapi-spec-validator (PyPI package openapi-spec-validator)"
    python3 -m pip install --quiet --disable-pip-version-check "openapi-spec-validator>=0.7"
fi
# (4.32 or later: its JSON report and config file options.)
if ! python3 -c "import schemathesis, sys; v = tuple(map(int, schemathesis.__version__.split('.')[:2])); sys.exit(not (4, 32) <= v < (5, 0))" >/dev/null 2>&1; then
    say "installing Schemathesis (PyPI package schemathesis)"
    python3 -m pip install --quiet --disable-pip-version-check --upgrade "schemathesis>=4.32,<5"
fi
# tests/tests/openapi_clients.rs generates a Python client from the live
# document with openapi-python-client and calls the grid through it.
if ! python3 -c "import openapi_python_client" >/dev/null 2>&1; then
    say "installing openapi-python-client (PyPI package openapi-python-client)"
    python3 -m pip install --quiet --disable-pip-version-check "openapi-python-client>=0.29,<0.30"
fi

# Real clients users have, from tests/clients/package.json: CDP clients
# (Playwright, Puppeteer; core packages only: they connect to a session and
# never download a browser) and MCP clients (the official TypeScript SDK, v1
# and v2, and the MCP Inspector, whose CLI mode the MCP tests run headless),
# and openapi-typescript with the TypeScript compiler (types generated from
# the grid's OpenAPI document, type-checked: tests/tests/openapi_clients.rs),
# and Playwright MCP, the peer of the grid's browser tools (run through a
# session's cdpUrl: tests/tests/browser_tools.rs, bench/browser_tools.sh),
# and axe-core, the accessibility checks of the web console
# (tests/tests/console.rs).
command -v node >/dev/null 2>&1 || need_pkg nodejs
command -v npm >/dev/null 2>&1 || need_pkg npm
node_clients_missing=0
for package in playwright-core puppeteer-core @modelcontextprotocol/sdk @modelcontextprotocol/client @modelcontextprotocol/inspector openapi-typescript typescript @playwright/mcp axe-core; do
    [ -d "tests/clients/node_modules/$package" ] || node_clients_missing=1
done
if [ "$node_clients_missing" -eq 1 ]; then
    say "installing the CDP, MCP and OpenAPI clients (npm, tests/clients/package.json)"
    # No client downloads a browser: they connect to sessions' cdpUrls.
    (cd tests/clients && PLAYWRIGHT_SKIP_BROWSER_DOWNLOAD=1 PUPPETEER_SKIP_DOWNLOAD=1 npm install --no-package-lock --no-audit --no-fund --silent)
fi

say "cargo $(cargo --version | cut -d' ' -f2), rustc $(rustc --version | cut -d' ' -f2)"

# Checks that fail the run, but only once the tests have run too.
failed_checks=()
if [ "$#" -eq 0 ]; then
    say "checking formatting: cargo fmt --all --check"
    cargo fmt --all --check || failed_checks+=("cargo fmt --all --check")
fi

if [ "$#" -eq 0 ]; then
    # The lints ride on the build: clippy-driver compiles the workspace's own
    # crates, linting them in the same pass, so the dependencies are compiled
    # once (a separate `cargo clippy` compiled every one of them again, in
    # check mode). Every cargo command below sees the same wrapper, so none
    # rebuilds. Any warning (rustc's or clippy's) fails the run, as
    # `cargo clippy -- -D warnings` did, once the tests have run.
    clippy_driver="$(command -v clippy-driver || true)"
    if [ -z "$clippy_driver" ]; then
        say "clippy-driver is missing: rustup component add clippy"
        exit 1
    fi
    export RUSTC_WORKSPACE_WRAPPER="$clippy_driver"
fi
# A clean checkout (CI) gains nothing from incremental compilation's caches:
# without them the one build is quicker and writes gigabytes less.
if [ "${CI:-}" = "true" ]; then
    export CARGO_INCREMENTAL=0
fi
build_log="$(mktemp)"
say "building the workspace (linted): cargo build --workspace --bins --tests"
cargo build --workspace --bins --tests 2>&1 | tee "$build_log"
warned="$(grep -E '^warning: .* generated [0-9]+ warnings?' "$build_log" || true)"
if [ "$#" -eq 0 ] && [ -n "$warned" ]; then
    failed_checks+=("warnings in the build (clippy lints included): $(printf '%s' "$warned" | tr '\n' ' ')")
fi
rm -f "$build_log"

# The black-box tests run these binaries; point at exactly what was just built.
target_dir="${CARGO_TARGET_DIR:-target}"
case "$target_dir" in
    /*) ;;
    *) target_dir="$PWD/$target_dir" ;;
esac
export GRID_SERVER_BIN="$target_dir/debug/grid-server"
export GRID_CLI_BIN="$target_dir/debug/grid"
say "binaries under test: $GRID_SERVER_BIN, $GRID_CLI_BIN"

tests_status=0
if cargo nextest --version >/dev/null 2>&1; then
    if [ "$#" -eq 0 ]; then
        # nextest does not run doctests; run them first so the suite's
        # summary is the last thing printed.
        say "running doctests: cargo test --workspace --doc"
        cargo test --workspace --doc
    fi
    say "running tests on SQLite: cargo nextest run --workspace --no-fail-fast $*"
    cargo nextest run --workspace --no-fail-fast "$@" || tests_status=$?
    # The black-box tests whose subject is the store run again with every
    # server on a database of its own in the cluster: the files whose
    # header says "Runs on: both stores" (tidy checks that every file says
    # which, and that each one reading, locking or sharing the store
    # directly runs on both). The others' subject is the browser, the
    # network, a protocol or a page; scale_out, scale_out_race and
    # fair_share's node tests are on PostgreSQL in either pass. Left out
    # too: the one test of SQLite's own file format.
    pg_binaries="$(grep -l '^//! Runs on: both stores' tests/tests/*.rs | sed 's|.*/||; s|\.rs$||')"
    pg_filter="package(grid-tests) and kind(test) and ($(printf 'binary(%s) | ' $pg_binaries | sed 's/ | $//')) and not test(store_is_grid_db_in_wal_mode)"
    say "running the black-box tests on PostgreSQL ($pg_url): cargo nextest run --workspace --no-fail-fast -E '$pg_filter' $*"
    GRID_TEST_STORE=postgres GRID_TEST_DATABASE_URL="$pg_url" \
        cargo nextest run --workspace --no-fail-fast -E "$pg_filter" "$@" || tests_status=$?
else
    say "cargo-nextest not found; running tests: cargo test --workspace --no-fail-fast $*"
    cargo test --workspace --no-fail-fast "$@" || tests_status=$?
fi

for check in "${failed_checks[@]}"; do
    say "FAILED: $check"
done
if [ "$tests_status" -ne 0 ]; then
    exit "$tests_status"
fi
if [ "${#failed_checks[@]}" -ne 0 ]; then
    exit 1
fi
