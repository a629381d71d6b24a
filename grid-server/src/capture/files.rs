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

/// Writes and checks a family of files for one item. Blocking.
pub fn write_family(root: &Path, item_id: &str, files: Vec<FileContent>) -> std::io::Result<Vec<PublishedFile>> {
    let dir = root.join(item_id);
    std::fs::create_dir_all(&dir)?;
    let mut published = Vec::with_capacity(files.len());
    for f in files {
        let sha = sha256_hex(&f.bytes);
        let name = format!("{}-{}", f.kind.as_str(), &sha[..16]);
        let tmp = dir.join(format!(".{name}.tmp"));
        {
            let mut out = std::fs::File::create(&tmp)?;
            out.write_all(&f.bytes)?;
            out.sync_all()?;
        }
        std::fs::rename(&tmp, dir.join(&name))?;
        published.push(PublishedFile {
            kind: f.kind,
            storage_name: format!("{item_id}/{name}"),
            sha256: sha,
            byte_length: f.bytes.len() as i64,
            content_type: f.content_type,
        });
    }
    std::fs::File::open(&dir)?.sync_all()?;
    for p in &published {
        let back = std::fs::read(root.join(&p.storage_name))?;
        if sha256_hex(&back) != p.sha256 {
            return Err(std::io::Error::other(format!("{} failed its checksum after writing", p.storage_name)));
        }
    }
    Ok(published)
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
