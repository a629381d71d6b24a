# Sourced by the bench scripts: builds the release binaries once and points
# the benches at them (honouring CARGO_TARGET_DIR).
build_release() {
    echo "==> building release: grid-server and the bench binaries"
    cargo build --release -p grid-server -p grid-tests --bins
    target_dir="${CARGO_TARGET_DIR:-target}"
    case "$target_dir" in
        /*) ;;
        *) target_dir="$PWD/$target_dir" ;;
    esac
    export GRID_SERVER_BIN="$target_dir/release/grid-server"
    export RUST_LOG="${RUST_LOG:-warn}"
}
