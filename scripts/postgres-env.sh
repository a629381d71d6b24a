#!/usr/bin/env bash
# A throwaway PostgreSQL cluster for the test suite and bench/ (issue 10):
#
#   1. Debian package postgresql (15) installed when missing;
#   2. a fresh cluster (initdb in a temp dir) run as the `postgres` system
#      user, since PostgreSQL refuses to run as root, on a free loopback port,
#      with trust authentication on loopback only;
#   3. prints `GRID_TEST_DATABASE_URL=postgres://postgres@127.0.0.1:PORT/postgres`
#      on its last line; the harness creates one database per test server in it.
#
#   eval "$(scripts/postgres-env.sh | tail -1)"   # then: export GRID_TEST_DATABASE_URL
#   scripts/postgres-env.sh stop DIR               # stops a cluster started here
#
# Env: GRID_PG_DIR (default: a new dir under /var/tmp) holds the cluster and
# its log. Exits non-zero saying what is missing when a step cannot be done.
set -euo pipefail

say() { printf '==> postgres-env: %s\n' "$*" >&2; }
die() {
    printf 'postgres-env: FAILED: %s\n' "$*" >&2
    exit 1
}

sudo=""
if [ "$(id -u)" -ne 0 ] && command -v sudo >/dev/null 2>&1; then sudo="sudo"; fi

if [ "${1:-}" = "stop" ]; then
    dir="${2:?postgres-env.sh stop DIR}"
    bin="$(ls -d /usr/lib/postgresql/*/bin | sort -V | tail -1)"
    runuser -u postgres -- "$bin/pg_ctl" -D "$dir/data" -m immediate stop >/dev/null 2>&1 || true
    rm -rf "$dir"
    exit 0
fi

if ! ls -d /usr/lib/postgresql/*/bin >/dev/null 2>&1; then
    command -v apt-get >/dev/null 2>&1 || die "PostgreSQL is missing and there is no apt-get to install it"
    say "installing Debian package postgresql"
    $sudo apt-get update -qq || die "apt-get update failed"
    DEBIAN_FRONTEND=noninteractive $sudo apt-get install -y -qq --no-install-recommends postgresql \
        || die "apt-get install postgresql failed"
fi
bin="$(ls -d /usr/lib/postgresql/*/bin | sort -V | tail -1)"
[ -x "$bin/initdb" ] || die "no initdb under $bin"
id postgres >/dev/null 2>&1 || die "no postgres system user (the postgresql package creates it)"

dir="${GRID_PG_DIR:-$(mktemp -d /var/tmp/grid-pg.XXXXXX)}"
mkdir -p "$dir"
chown postgres: "$dir"
chmod 700 "$dir"

# A free loopback port: bind port 0 and read what the kernel chose.
port="$(python3 -c 'import socket; s=socket.socket(); s.bind(("127.0.0.1", 0)); print(s.getsockname()[1])')"

say "initdb in $dir/data"
runuser -u postgres -- "$bin/initdb" -D "$dir/data" -A trust -U postgres --no-sync -E UTF8 >"$dir/initdb.log" 2>&1 \
    || die "initdb failed: $(tail -5 "$dir/initdb.log")"
# Loopback only, no Unix socket outside the cluster dir; sized for several
# grid nodes per test times parallel tests. fsync stays on except for
# throwaway speed: a test cluster is deleted after the run.
cat >>"$dir/data/postgresql.conf" <<CONF
listen_addresses = '127.0.0.1'
port = $port
unix_socket_directories = '$dir'
max_connections = 400
shared_buffers = 128MB
fsync = off
synchronous_commit = off
full_page_writes = off
CONF
say "starting PostgreSQL on 127.0.0.1:$port"
runuser -u postgres -- "$bin/pg_ctl" -D "$dir/data" -l "$dir/postgres.log" -w -t 60 start >/dev/null \
    || die "PostgreSQL did not start: $(tail -5 "$dir/postgres.log")"
say "cluster dir: $dir (stop with: scripts/postgres-env.sh stop $dir)"
echo "GRID_PG_DIR=$dir"
echo "GRID_TEST_DATABASE_URL=postgres://postgres@127.0.0.1:$port/postgres"
