//! The artifact store: files of capture items under `DATA_DIR/artifacts`.
//!
//! A file is written under a temporary name, synced, renamed to a name that
//! carries its checksum, then read back and checked. Only a whole, checked
//! family is handed to the store for publishing.

use std::io::{Read, Seek, Write};
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
    /// A meta file of anything that serializes as a JSON object (a JSON
    /// tree, or a struct written straight from what it describes).
    pub fn meta<T: serde::Serialize>(meta: &T) -> FileContent {
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

/// Opens a stored file for streaming: checks its length against
/// `byte_length` and its SHA-256 reading `READ_CHUNK` bytes at a time (so a
/// large file is never held in memory), then rewinds it. The caller streams
/// from the same open file, so the bytes checked are the bytes served.
/// Blocking.
pub fn open_checked(root: &Path, storage_name: &str, sha256: &str, byte_length: u64) -> std::io::Result<std::fs::File> {
    let mut file = std::fs::File::open(root.join(storage_name))?;
    let corrupt = |what: &str| std::io::Error::new(std::io::ErrorKind::InvalidData, format!("{storage_name} {what}"));
    if file.metadata()?.len() != byte_length {
        return Err(corrupt("has another length than was published"));
    }
    use sha2::Digest;
    let mut hasher = sha2::Sha256::new();
    let mut buf = vec![0u8; READ_CHUNK];
    loop {
        let n = file.read(&mut buf)?;
        if n == 0 {
            break;
        }
        hasher.update(&buf[..n]);
    }
    if hex::encode(hasher.finalize()) != sha256 {
        return Err(corrupt("failed its checksum"));
    }
    file.rewind()?;
    Ok(file)
}

/// How much of a stored file is read at once when checking or serving it.
pub const READ_CHUNK: usize = 128 * 1024;

/// Files up to this size are kept in the database, published in the same
/// transaction as the item's state: creating a file (an inode) per item
/// costs more than the item's whole fetch on a busy file system.
pub const INLINE_MAX_BYTES: usize = 512 * 1024;

/// Checks and stores a family of files for one item: small ones stay in
/// memory for the database, larger ones are written under a shard directory
/// (`<last two characters of the item id>/`), so no directory is made per
/// item. Blocking.
///
/// `all_inline` keeps every file in the database, whatever its size
/// (`Store::files_inline`).
pub fn write_family(
    root: &Path,
    item_id: &str,
    files: Vec<FileContent>,
    all_inline: bool,
) -> std::io::Result<Vec<PublishedFile>> {
    let shard = &item_id[item_id.len().saturating_sub(2)..];
    files
        .into_iter()
        .map(|f| {
            if all_inline || f.bytes.len() <= INLINE_MAX_BYTES {
                return Ok(inline(item_id, f));
            }
            let (storage_name, sha256) =
                write_checked(root, shard, &format!("{item_id}-{}", f.kind.as_str()), &f.bytes)?;
            let byte_length = f.bytes.len() as i64;
            Ok(PublishedFile {
                kind: f.kind,
                storage_name,
                sha256,
                inline: None,
                byte_length,
                content_type: f.content_type,
            })
        })
        .collect()
}

/// Whether a storage name is of a file kept in the database.
pub fn in_database(storage_name: &str) -> bool {
    storage_name.starts_with("db:")
}

/// A file kept in the database, published in the same transaction as the
/// item's state (so it needs no writing or syncing of its own).
pub fn inline(item_id: &str, f: FileContent) -> PublishedFile {
    PublishedFile {
        kind: f.kind,
        storage_name: format!("db:{item_id}/{}", f.kind.as_str()),
        sha256: sha256_hex(&f.bytes),
        byte_length: f.bytes.len() as i64,
        content_type: f.content_type,
        inline: Some(f.bytes),
    }
}

/// A published file ready to serve: the bytes of one kept inline, or the
/// open file of one kept on disk; both checked against their SHA-256.
pub enum Checked {
    Inline(Vec<u8>),
    OnDisk(std::fs::File),
}

/// Checks a published file and makes it ready to serve. Blocking.
pub fn open_published(root: &Path, file: PublishedFile) -> std::io::Result<Checked> {
    match file.inline {
        Some(bytes) if sha256_hex(&bytes) == file.sha256 => Ok(Checked::Inline(bytes)),
        Some(_) => Err(std::io::Error::new(
            std::io::ErrorKind::InvalidData,
            format!("{} failed its checksum", file.storage_name),
        )),
        None => {
            let length = u64::try_from(file.byte_length).unwrap_or(u64::MAX);
            open_checked(root, &file.storage_name, &file.sha256, length).map(Checked::OnDisk)
        }
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
        let out = write_family(root.path(), "it_01AB", files, false).unwrap();
        assert_eq!(out.len(), 2);
        assert_eq!(out[0].sha256, sha256_hex(&big));
        assert_eq!(out[0].storage_name, format!("AB/it_01AB-body-{}", &sha256_hex(&big)[..16]));
        assert!(out[0].inline.is_none());
        let Checked::OnDisk(mut file) = open_published(root.path(), out[0].clone()).unwrap() else {
            panic!("a large file is served from disk")
        };
        let mut served = Vec::new();
        file.read_to_end(&mut served).unwrap();
        assert_eq!(served, big, "the checked file is rewound and whole");
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
        let mut out =
            write_family(root.path(), "it_1", vec![FileContent::meta(&serde_json::json!({"a": 1}))], false).unwrap();
        out[0].inline.as_mut().unwrap().push(b' ');
        assert!(open_published(root.path(), out[0].clone()).is_err());
    }

    #[test]
    fn a_changed_file_on_disk_fails_its_check_whether_or_not_its_length_changed() {
        let root = tempfile::tempdir().unwrap();
        let big = vec![1u8; INLINE_MAX_BYTES + READ_CHUNK + 3];
        let files =
            vec![FileContent { kind: ArtifactKind::Html, content_type: "text/html".into(), bytes: big.clone() }];
        let published = write_family(root.path(), "it_01CD", files, false).unwrap().remove(0);
        let path = root.path().join(&published.storage_name);
        let mut same_length = big.clone();
        *same_length.last_mut().unwrap() = 2;
        std::fs::write(&path, &same_length).unwrap();
        let err = open_published(root.path(), published.clone()).err().expect("same length, other bytes");
        assert!(err.to_string().contains("failed its checksum"), "{err}");
        std::fs::write(&path, b"short").unwrap();
        let err = open_published(root.path(), published).err().expect("other length");
        assert!(err.to_string().contains("another length"), "{err}");
    }
}
