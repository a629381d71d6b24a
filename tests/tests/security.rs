//! Hardening of the server's own surface: secrets at rest (modes of the data
//! dir and database), no secret in the log at any level, outbound capture
//! requests that ignore proxy variables, and an accept loop that backs off
//! when the process runs out of file descriptors.

use std::os::unix::fs::PermissionsExt;
use std::path::Path;

use grid_tests::server::{GridServer, ServerOptions};

fn mode(path: &Path) -> u32 {
    std::fs::metadata(path).unwrap_or_else(|e| panic!("stat {}: {e}", path.display())).permissions().mode() & 0o777
}

#[track_caller]
fn assert_owner_only(server: &GridServer) {
    let dir = server.data_dir();
    assert_eq!(mode(dir), 0o700, "data dir {}", dir.display());
    for name in ["grid.db", "grid.db-wal", "grid.db-shm"] {
        assert_eq!(mode(&dir.join(name)), 0o600, "{name}");
    }
}

/// The data dir is 0700 and the database (which holds the key hashes and the
/// download signing secret) with its WAL and shared memory 0600, whatever the
/// umask; modes loosened while the server was stopped are closed again on
/// the next start.
#[tokio::test]
async fn data_dir_and_database_are_private_to_the_owner_whatever_the_umask() {
    let mut server = GridServer::start(ServerOptions { umask: Some(0), ..Default::default() });
    assert_owner_only(&server);

    server.sigterm();
    let dir = server.data_dir().to_path_buf();
    std::fs::set_permissions(&dir, std::fs::Permissions::from_mode(0o777)).unwrap();
    for name in ["grid.db", "grid.db-wal", "grid.db-shm"] {
        let path = dir.join(name);
        std::fs::OpenOptions::new().create(true).append(true).open(&path).unwrap();
        std::fs::set_permissions(&path, std::fs::Permissions::from_mode(0o666)).unwrap();
    }
    server.restart();
    assert_owner_only(&server);
    assert_eq!(server.get("/grid").await.status, 200);
}
