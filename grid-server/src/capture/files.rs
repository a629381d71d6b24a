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
        return Err(std::io::Error::new(
            std::io::ErrorKind::InvalidData,
            format!("{storage_name} failed its checksum"),
        ));
    }
    Ok(data)
}

/// Files up to this size are kept in the database, published in the same
/// transaction as the item's state: creating a file (an inode) per item
/// costs more than the item's whole fetch on a busy file system.
pub const INLINE_MAX_BYTES: usize = 512 * 1024;

/// Checks and stores a family of files for one item: small ones stay in
/// memory for the database, larger ones are written under a shard directory
/// (`<last two characters of the item id>/`), so no directory is made per
/// item. Blocking.
pub fn write_family(root: &Path, item_id: &str, files: Vec<FileContent>) -> std::io::Result<Vec<PublishedFile>> {
    let shard = &item_id[item_id.len().saturating_sub(2)..];
    files
        .into_iter()
        .map(|f| {
            let byte_length = f.bytes.len() as i64;
            let (storage_name, sha256, inline) = if f.bytes.len() <= INLINE_MAX_BYTES {
                (format!("db:{item_id}/{}", f.kind.as_str()), sha256_hex(&f.bytes), Some(f.bytes))
            } else {
                let (name, sha) = write_checked(root, shard, &format!("{item_id}-{}", f.kind.as_str()), &f.bytes)?;
                (name, sha, None)
            };
            Ok(PublishedFile { kind: f.kind, storage_name, sha256, inline, byte_length, content_type: f.content_type })
        })
        .collect()
}

/// The bytes of a published file, checked against its SHA-256. Blocking.
pub fn read_published(root: &Path, file: &PublishedFile) -> std::io::Result<Vec<u8>> {
    match &file.inline {
        Some(bytes) if sha256_hex(bytes) == file.sha256 => Ok(bytes.clone()),
        Some(_) => Err(std::io::Error::new(
            std::io::ErrorKind::InvalidData,
            format!("{} failed its checksum", file.storage_name),
        )),
        None => read_checked(root, &file.storage_name, &file.sha256),
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn small_files_stay_inline_and_large_ones_are_written_checked() {
        let root = tempfile::tempdir().unwrap();
        let big = vec![7u8; INLINE_MAX_BYTES + 1];
        let files = vec![
            FileContent { kind: ArtifactKind::Body, content_type: "text/plain".into(), bytes: big.clone() },
            FileContent::meta(&serde_json::json!({"outcome": "success"})),
        ];
        let out = write_family(root.path(), "it_01AB", files).unwrap();
        assert_eq!(out.len(), 2);
        assert_eq!(out[0].sha256, sha256_hex(&big));
        assert_eq!(out[0].storage_name, format!("AB/it_01AB-body-{}", &sha256_hex(&big)[..16]));
        assert!(out[0].inline.is_none());
        assert_eq!(read_published(root.path(), &out[0]).unwrap(), big);
        assert_eq!(out[1].storage_name, "db:it_01AB/meta");
        assert!(out[1].inline.is_some());
        let leftovers: Vec<_> = std::fs::read_dir(root.path().join("AB"))
            .unwrap()
            .filter(|e| e.as_ref().unwrap().file_name().to_string_lossy().ends_with(".tmp"))
            .collect();
        assert!(leftovers.is_empty());
    }

    #[test]
    fn a_changed_inline_file_fails_its_check() {
        let root = tempfile::tempdir().unwrap();
        let mut out = write_family(root.path(), "it_1", vec![FileContent::meta(&serde_json::json!({"a": 1}))]).unwrap();
        out[0].inline.as_mut().unwrap().push(b' ');
        assert!(read_published(root.path(), &out[0]).is_err());
    }
}
