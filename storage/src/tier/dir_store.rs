//! [`DirStore`]: an [`ObjectStore`] whose objects are files under a directory (key
//! `a/b/c` is the file `<root>/a/b/c`). For a program embedding the engine that wants a
//! second disk or a network mount as its remote tier, and for the engine's tests. Every
//! call runs on the executor's blocking pool (`io::off_reactor`), never on the reactor.

use std::io::{Read, Seek, SeekFrom, Write};
use std::ops::Range;
use std::path::{Path, PathBuf};
use std::sync::atomic::{AtomicU64, Ordering};

use bytes::Bytes;

use super::{ObjectInfo, ObjectStore, StoreFuture, Upload};
use crate::error::{Error, Result};
use crate::io::off_reactor;

/// Objects as files under a root directory.
#[derive(Debug, Clone)]
pub struct DirStore {
    root: PathBuf,
}

impl DirStore {
    /// A store rooted at `root` (created on the first put).
    pub fn new(root: impl Into<PathBuf>) -> DirStore {
        DirStore { root: root.into() }
    }

    fn path(&self, key: &str) -> Result<PathBuf> {
        if key.is_empty()
            || key
                .split('/')
                .any(|p| p.is_empty() || p == "." || p == "..")
        {
            return Err(Error::Remote(format!("invalid object key {key:?}")));
        }
        Ok(self.root.join(key))
    }
}

fn remote(what: &str, path: &Path, e: std::io::Error) -> Error {
    Error::Remote(format!("{what} {}: {e}", path.display()))
}

/// A name for a partial object next to `path`, unique in this process.
fn temp_path(path: &Path) -> PathBuf {
    static NEXT: AtomicU64 = AtomicU64::new(0);
    let n = NEXT.fetch_add(1, Ordering::Relaxed);
    let mut name = path.file_name().unwrap_or_default().to_os_string();
    name.push(format!(".part-{}-{n}", std::process::id()));
    path.with_file_name(name)
}

fn create(path: &Path) -> Result<std::fs::File> {
    if let Some(dir) = path.parent() {
        std::fs::create_dir_all(dir).map_err(|e| remote("create", dir, e))?;
    }
    std::fs::File::create(path).map_err(|e| remote("create", path, e))
}

fn publish(file: std::fs::File, tmp: &Path, path: &Path) -> Result<()> {
    file.sync_data().map_err(|e| remote("sync", tmp, e))?;
    std::fs::rename(tmp, path).map_err(|e| remote("rename", tmp, e))
}

impl ObjectStore for DirStore {
    fn put(&self, key: &str, body: Bytes) -> StoreFuture<'_, ()> {
        let path = self.path(key);
        Box::pin(async move {
            let path = path?;
            off_reactor(move || {
                let tmp = temp_path(&path);
                let mut f = create(&tmp)?;
                f.write_all(&body).map_err(|e| remote("write", &tmp, e))?;
                publish(f, &tmp, &path)
            })
            .await
        })
    }

    fn upload(&self, key: &str) -> StoreFuture<'_, Box<dyn Upload>> {
        let path = self.path(key);
        Box::pin(async move {
            let path = path?;
            let tmp = temp_path(&path);
            let t = tmp.clone();
            let file = off_reactor(move || create(&t)).await?;
            Ok(Box::new(DirUpload {
                file: Some(file),
                tmp,
                path,
            }) as Box<dyn Upload>)
        })
    }

    fn get_range(&self, key: &str, range: Range<u64>) -> StoreFuture<'_, Bytes> {
        let path = self.path(key);
        Box::pin(async move {
            let path = path?;
            off_reactor(move || {
                let mut f = std::fs::File::open(&path).map_err(|e| remote("open", &path, e))?;
                f.seek(SeekFrom::Start(range.start))
                    .map_err(|e| remote("seek", &path, e))?;
                let mut out = Vec::new();
                f.take(range.end.saturating_sub(range.start))
                    .read_to_end(&mut out)
                    .map_err(|e| remote("read", &path, e))?;
                Ok(Bytes::from(out))
            })
            .await
        })
    }

    fn delete(&self, key: &str) -> StoreFuture<'_, ()> {
        let path = self.path(key);
        Box::pin(async move {
            let path = path?;
            off_reactor(move || match std::fs::remove_file(&path) {
                Ok(()) => Ok(()),
                Err(e) if e.kind() == std::io::ErrorKind::NotFound => Ok(()),
                Err(e) => Err(remote("delete", &path, e)),
            })
            .await
        })
    }

    fn list(&self, prefix: &str) -> StoreFuture<'_, Vec<ObjectInfo>> {
        let root = self.root.clone();
        let prefix = prefix.to_string();
        Box::pin(async move {
            off_reactor(move || {
                let mut out = Vec::new();
                let mut dirs = vec![root.clone()];
                while let Some(dir) = dirs.pop() {
                    let entries = match std::fs::read_dir(&dir) {
                        Ok(e) => e,
                        Err(e) if e.kind() == std::io::ErrorKind::NotFound => continue,
                        Err(e) => return Err(remote("list", &dir, e)),
                    };
                    for entry in entries {
                        let entry = entry.map_err(|e| remote("list", &dir, e))?;
                        let meta = entry.metadata().map_err(|e| remote("stat", &dir, e))?;
                        let path = entry.path();
                        if meta.is_dir() {
                            dirs.push(path);
                            continue;
                        }
                        let Ok(rel) = path.strip_prefix(&root) else {
                            continue;
                        };
                        let key = rel.to_string_lossy().replace('\\', "/");
                        // Partial objects (an upload in progress or abandoned) are not objects.
                        if key.starts_with(&prefix) && !key.contains(".part-") {
                            out.push(ObjectInfo {
                                key,
                                size: meta.len(),
                            });
                        }
                    }
                }
                out.sort_by(|a, b| a.key.cmp(&b.key));
                Ok(out)
            })
            .await
        })
    }
}

struct DirUpload {
    file: Option<std::fs::File>,
    tmp: PathBuf,
    path: PathBuf,
}

impl Upload for DirUpload {
    fn write(&mut self, part: Bytes) -> StoreFuture<'_, ()> {
        let file = self.file.take();
        let tmp = self.tmp.clone();
        Box::pin(async move {
            let mut f = file.ok_or_else(|| Error::Remote("upload already failed".into()))?;
            let (f, r) = off_reactor(move || {
                let r = f.write_all(&part).map_err(|e| remote("write", &tmp, e));
                (f, r)
            })
            .await;
            self.file = Some(f);
            r
        })
    }

    fn finish(self: Box<Self>) -> StoreFuture<'static, ()> {
        Box::pin(async move {
            let DirUpload { file, tmp, path } = *self;
            let f = file.ok_or_else(|| Error::Remote("upload already failed".into()))?;
            off_reactor(move || publish(f, &tmp, &path)).await
        })
    }

    fn abort(self: Box<Self>) -> StoreFuture<'static, ()> {
        Box::pin(async move {
            let tmp = self.tmp.clone();
            drop(self);
            off_reactor(move || {
                let _ = std::fs::remove_file(&tmp);
                Ok(())
            })
            .await
        })
    }
}
