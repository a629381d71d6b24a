//! The artifact store: files of capture items under `DATA_DIR/artifacts`.
//!
//! A file is written under a temporary name, synced, renamed to a name that
//! carries its checksum, then read back and checked. Only a whole, checked
//! family is handed to the store for publishing.

use std::io::Write;
use std::path::Path;

use grid_core::catalog::ArtifactKind;

use crate::ids::sha256_hex;
use crate::store::items::PublishedFile;

/// A file an attempt produced, still in memory.
#[derive(Debug, Clone)]
pub struct FileContent {
    pub kind: ArtifactKind,
    pub content_type: String,
    pub bytes: Vec<u8>,
}

impl FileContent {
    pub fn meta(meta: &serde_json::Value) -> FileContent {
        FileContent {
            kind: ArtifactKind::Meta,
            content_type: ArtifactKind::Meta.default_content_type().to_string(),
            bytes: serde_json::to_vec_pretty(meta).unwrap_or_default(),
        }
    }
}

/// Writes one file under `root/dir/` named `{stem}-{sha256 prefix}`: under a
/// temporary name first, synced, renamed, then read back and checked.
/// Returns the storage name (relative to `root`) and the SHA-256. Blocking.
pub fn write_checked(root: &Path, dir: &str, stem: &str, bytes: &[u8]) -> std::io::Result<(String, String)> {
    let folder = root.join(dir);
    std::fs::create_dir_all(&folder)?;
    let sha = sha256_hex(bytes);
    let name = format!("{stem}-{}", &sha[..16]);
    let tmp = folder.join(format!(".{name}.tmp"));
    {
        let mut out = std::fs::File::create(&tmp)?;
        out.write_all(bytes)?;
        out.sync_all()?;
    }
    std::fs::rename(&tmp, folder.join(&name))?;
    std::fs::File::open(&folder)?.sync_all()?;
    let storage_name = format!("{dir}/{name}");
    if sha256_hex(&std::fs::read(root.join(&storage_name))?) != sha {
        return Err(std::io::Error::other(format!("{storage_name} failed its checksum after writing")));
    }
    Ok((storage_name, sha))
}

/// Reads a stored file back, checking it against its SHA-256. Blocking.
pub fn read_checked(root: &Path, storage_name: &str, sha256: &str) -> std::io::Result<Vec<u8>> {
    let data = std::fs::read(root.join(storage_name))?;
    if sha256_hex(&data) != sha256 {
        return Err(std::io::Error::new(std::io::ErrorKind::InvalidData, format!("{storage_name} failed its checksum")));
    }
    Ok(data)
}

/// Writes and checks a family of files for one item. Blocking.
pub fn write_family(root: &Path, item_id: &str, files: Vec<FileContent>) -> std::io::Result<Vec<PublishedFile>> {
    files
        .into_iter()
        .map(|f| {
            let (storage_name, sha256) = write_checked(root, item_id, f.kind.as_str(), &f.bytes)?;
            Ok(PublishedFile {
                kind: f.kind,
                storage_name,
                sha256,
                byte_length: f.bytes.len() as i64,
                content_type: f.content_type,
            })
        })
        .collect()
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn family_is_written_named_by_checksum_and_checked() {
        let root = tempfile::tempdir().unwrap();
        let files = vec![
            FileContent { kind: ArtifactKind::Body, content_type: "text/plain".into(), bytes: b"hello".to_vec() },
            FileContent::meta(&serde_json::json!({"outcome": "success"})),
        ];
        let out = write_family(root.path(), "it_1", files).unwrap();
        assert_eq!(out.len(), 2);
        assert_eq!(out[0].sha256, sha256_hex(b"hello"));
        assert_eq!(out[0].storage_name, format!("it_1/body-{}", &sha256_hex(b"hello")[..16]));
        assert_eq!(std::fs::read(root.path().join(&out[0].storage_name)).unwrap(), b"hello");
        let leftovers: Vec<_> = std::fs::read_dir(root.path().join("it_1"))
            .unwrap()
            .filter(|e| e.as_ref().unwrap().file_name().to_string_lossy().ends_with(".tmp"))
            .collect();
        assert!(leftovers.is_empty());
    }
}
