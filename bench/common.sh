# Sourced by the bench scripts: builds the release binaries once and points
# the benches at them (honouring CARGO_TARGET_DIR).
build_release() {
    # The whole workspace, as scripts/test.sh builds it: a narrower package
    # set unifies dependency features differently, so every bench run
    # rebuilt the server from scratch after a workspace build.
    echo "==> building release: every binary of the workspace (grid-server, the bench binaries)"
    cargo build --release --workspace --bins --features grid-tests/bench
    target_dir="${CARGO_TARGET_DIR:-target}"
    case "$target_dir" in
        /*) ;;
        *) target_dir="$PWD/$target_dir" ;;
    esac
    export GRID_SERVER_BIN="$target_dir/release/grid-server"
    export RUST_LOG="${RUST_LOG:-warn}"
}
