#!/usr/bin/env bash
# What the analytical-jobs tests and bench/job_latency.sh need, made ready:
#
#   1. Debian packages docker.io, docker-registry, busybox-static, e2fsprogs and
#      mount (installed when missing);
#   2. a Docker Engine answering on its socket (dockerd started in the
#      background when none runs);
#   3. a registry on 127.0.0.1:5000 (docker-registry started in the background
#      when nothing answers there);
#   4. the test image 127.0.0.1:5000/tools/busybox:1 (FROM scratch + the static
#      busybox), built and pushed; both steps are no-ops when nothing changed.
#
#   scripts/compute-env.sh        # idempotent; prints each step
#
# Nothing is pulled from outside: the image is built from the local busybox.
# Env: GRID_COMPUTE_DIR (default /var/tmp/grid-compute-env) holds the registry's
# config, storage and log, and the image's build context. Exits non-zero with
# what is missing when a step cannot be done.
set -euo pipefail

REGISTRY_ADDR="127.0.0.1:5000"
IMAGE="$REGISTRY_ADDR/tools/busybox:1"
STATE_DIR="${GRID_COMPUTE_DIR:-/var/tmp/grid-compute-env}"
DOCKERD_LOG="${DOCKERD_LOG:-/tmp/dockerd.log}"
WAIT_SECS=60

say() { printf '==> compute-env: %s\n' "$*"; }
die() {
    printf 'compute-env: FAILED: %s\n' "$*" >&2
    exit 1
}

sudo=""
if [ "$(id -u)" -ne 0 ]; then
    if command -v sudo >/dev/null 2>&1; then
        sudo="sudo"
    else
        die "not root and no sudo: cannot install packages or start dockerd"
    fi
fi

apt_updated=0
# need_pkg NAME: installs the Debian package NAME unless it is installed.
need_pkg() {
    local name="$1"
    if dpkg -s "$name" >/dev/null 2>&1; then
        say "package $name: installed"
        return 0
    fi
    command -v apt-get >/dev/null 2>&1 || die "package $name is missing and there is no apt-get to install it"
    if [ "$apt_updated" -eq 0 ]; then
        say "apt-get update"
        $sudo apt-get update -qq || die "apt-get update failed"
        apt_updated=1
    fi
    say "installing Debian package $name"
    DEBIAN_FRONTEND=noninteractive $sudo apt-get install -y -qq --no-install-recommends "$name" \
        || die "apt-get install $name failed"
}

# port_open HOST PORT: whether something accepts TCP connections there.
port_open() {
    (exec 3<>"/dev/tcp/$1/$2") 2>/dev/null
}

# registry_answers: whether GET /v2/ on the registry answers 200 (distribution API).
registry_answers() {
    port_open 127.0.0.1 5000 || return 1
    local reply
    reply="$(
        exec 3<>/dev/tcp/127.0.0.1/5000 || exit 1
        printf 'GET /v2/ HTTP/1.0\r\nHost: %s\r\n\r\n' "$REGISTRY_ADDR" >&3
        timeout 5 head -n 1 <&3
    )" || return 1
    case "$reply" in
        "HTTP/1."?" 200"*) return 0 ;;
        *) return 1 ;;
    esac
}

# wait_for WHAT COMMAND...: polls COMMAND for up to WAIT_SECS seconds.
wait_for() {
    local what="$1"
    shift
    local i
    for ((i = 0; i < WAIT_SECS * 4; i++)); do
        if "$@"; then
            return 0
        fi
        sleep 0.25
    done
    return 1
}

docker_answers() {
    $sudo docker info >/dev/null 2>&1
}

# pid_file_alive FILE NAME: whether FILE names a running process called NAME
# (a pid file alone proves nothing: the pid may be dead, a zombie nobody
# reaped, or reused).
pid_file_alive() {
    local pid stat
    pid="$(cat "$1" 2>/dev/null)" || return 1
    [ -n "$pid" ] || return 1
    stat="$(cat "/proc/$pid/stat" 2>/dev/null)" || return 1
    # "PID (COMM) STATE ...": the command and a live state (not Z or X).
    case "$stat" in
        *"($2) "[ZX]*) return 1 ;;
        *"($2) "*) return 0 ;;
        *) return 1 ;;
    esac
}

# ----- 1. packages -----
need_pkg docker.io
need_pkg docker-registry
need_pkg busybox-static
# A job's /tmp is an ext4 filesystem of its ephemeral storage, loop-mounted (docs/jobs.md).
need_pkg e2fsprogs
need_pkg mount
command -v dockerd >/dev/null 2>&1 || die "dockerd not on PATH after installing docker.io"
command -v docker-registry >/dev/null 2>&1 || die "docker-registry not on PATH after installing docker-registry"
BUSYBOX=""
for candidate in /bin/busybox /usr/bin/busybox; do
    if [ -x "$candidate" ]; then
        BUSYBOX="$candidate"
        break
    fi
done
[ -n "$BUSYBOX" ] || die "no busybox binary after installing busybox-static"

# ----- 2. the Docker Engine -----
if docker_answers; then
    say "docker engine: running"
else
    if pid_file_alive /var/run/docker.pid dockerd; then
        say "docker engine: dockerd runs but does not answer yet; waiting"
    else
        # A daemon that died without cleaning up (machine snapshot, killed
        # session) leaves its socket and pid files behind; dockerd would wait
        # on them (it takes a pid file naming a zombie for a live containerd).
        containerd_pid=/var/run/docker/containerd/containerd.pid
        for stale in /var/run/docker.sock /var/run/docker.pid $containerd_pid; do
            if [ -e "$stale" ] && ! { [ "$stale" = $containerd_pid ] && pid_file_alive "$stale" containerd; }; then
                say "docker engine: removing $stale, left by a daemon that no longer runs"
                $sudo rm -f "$stale"
            fi
        done
        say "docker engine: starting dockerd in the background (log: $DOCKERD_LOG)"
        # setsid: the daemon outlives this script and its terminal.
        $sudo setsid dockerd >"$DOCKERD_LOG" 2>&1 </dev/null &
    fi
    if ! wait_for "docker engine" docker_answers; then
        tail -n 30 "$DOCKERD_LOG" >&2 2>/dev/null || true
        die "the Docker Engine did not answer 'docker info' within ${WAIT_SECS}s (log: $DOCKERD_LOG)"
    fi
    say "docker engine: running"
fi

# ----- 3. the registry on 127.0.0.1:5000 -----
if registry_answers; then
    say "registry $REGISTRY_ADDR: running"
elif port_open 127.0.0.1 5000; then
    die "something listens on $REGISTRY_ADDR but does not answer GET /v2/ with 200: not a registry?"
else
    mkdir -p "$STATE_DIR/registry"
    cat >"$STATE_DIR/registry.yml" <<EOF
version: 0.1
log:
  level: warn
storage:
  filesystem:
    rootdirectory: $STATE_DIR/registry
  delete:
    enabled: true
http:
  addr: $REGISTRY_ADDR
EOF
    say "registry $REGISTRY_ADDR: starting docker-registry (config: $STATE_DIR/registry.yml, log: $STATE_DIR/registry.log)"
    setsid docker-registry serve "$STATE_DIR/registry.yml" >"$STATE_DIR/registry.log" 2>&1 </dev/null &
    if ! wait_for "registry" registry_answers; then
        tail -n 30 "$STATE_DIR/registry.log" >&2 || true
        die "the registry did not answer on $REGISTRY_ADDR within ${WAIT_SECS}s"
    fi
    say "registry $REGISTRY_ADDR: running"
fi

# ----- 4. the test image -----
build_dir="$STATE_DIR/image"
mkdir -p "$build_dir"
if ! cmp -s "$BUSYBOX" "$build_dir/busybox"; then
    cp "$BUSYBOX" "$build_dir/busybox"
fi
cat >"$build_dir/Dockerfile.new" <<'EOF'
FROM scratch
COPY busybox /bin/busybox
RUN ["/bin/busybox","--install","-s","/bin"]
EOF
if ! cmp -s "$build_dir/Dockerfile.new" "$build_dir/Dockerfile"; then
    mv "$build_dir/Dockerfile.new" "$build_dir/Dockerfile"
else
    rm -f "$build_dir/Dockerfile.new"
fi
say "image $IMAGE: building (cached when unchanged)"
build_log="$STATE_DIR/build.log"
if ! $sudo docker build --quiet -t "$IMAGE" "$build_dir" >"$build_log" 2>&1; then
    cat "$build_log" >&2
    die "docker build of $IMAGE failed"
fi
say "image $IMAGE: pushing (layers the registry has are skipped)"
push_log="$STATE_DIR/push.log"
if ! $sudo docker push "$IMAGE" >"$push_log" 2>&1; then
    cat "$push_log" >&2
    die "docker push $IMAGE failed"
fi
say "image $IMAGE: $(grep -o 'digest: sha256:[0-9a-f]*' "$push_log" | head -n 1)"
say "ready: docker engine, registry $REGISTRY_ADDR, image $IMAGE"
