//! Tiered storage: a partition's closed segments copied to an object store (S3 or any store
//! behind [`ObjectStore`]) and read back from there once local retention has deleted them
//! (Kafka's KIP-405, `remote.storage.enable`).
//!
//! - [`ObjectStore`] — what the engine needs of a store: whole-object and streamed puts,
//!   ranged gets, deletes and listing by prefix. The futures are local (`!Send`): a store
//!   talks to its own client off the reactor (the broker's S3 client is a thread of its own)
//!   and the log awaits the answer on its core. [`DirStore`] keeps objects as files in a
//!   directory (for embedding and for the engine's own tests).
//! - `manifest.rs` — the partition's list of remote segments, a small CRC'd file replaced
//!   atomically in the log's directory: a segment is remote once (and only once) it is listed
//!   there.
//! - `log/tiered.rs` — what [`crate::Log`] does with them: uploads, remote retention, reads.
//!
//! Crash safety comes from the order of the steps: a segment's objects are written under a
//! name no other upload uses, then the manifest lists it (durably), and only then may local
//! retention delete the local copy. Deleting remotely, the manifest forgets the segment
//! first, then its objects go. A crash between any two steps leaves objects the manifest
//! does not list; the first [`crate::Log::tier_tick`] after the log is opened again
//! deletes those (orphans). Nothing the manifest lists is ever missing, unless the store lost it: a
//! read then fails with [`crate::Error::Remote`], and every batch read from the store is
//! CRC-checked before it is served.

mod dir_store;
pub(crate) mod manifest;
pub(crate) mod txn_index;

use std::future::Future;
use std::ops::Range;
use std::pin::Pin;

use bytes::Bytes;

pub use dir_store::DirStore;
pub use manifest::{RemoteSegment, MANIFEST_FILE};

use crate::error::Result;

/// A future of a store operation, awaited on the log's own core.
pub type StoreFuture<'a, T> = Pin<Box<dyn Future<Output = Result<T>> + 'a>>;

/// An object in a listing: its key and size in bytes.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct ObjectInfo {
    /// The object's key.
    pub key: String,
    /// Its size in bytes.
    pub size: u64,
}

/// An object store: S3 and the like. Keys are `/`-separated paths. A put is atomic: a reader
/// sees the whole object or none (S3's rule, and what [`DirStore`] does with a rename).
pub trait ObjectStore {
    /// Stores `body` under `key`, replacing any object there.
    fn put(&self, key: &str, body: Bytes) -> StoreFuture<'_, ()>;

    /// Starts a streamed put of `key` (S3's multipart upload): the object appears when the
    /// upload is finished, never if it is aborted.
    fn upload(&self, key: &str) -> StoreFuture<'_, Box<dyn Upload>>;

    /// The bytes `range` of `key` (fewer if the object is shorter). A missing object is an
    /// error.
    fn get_range(&self, key: &str, range: Range<u64>) -> StoreFuture<'_, Bytes>;

    /// Deletes `key`; deleting a missing object is not an error.
    fn delete(&self, key: &str) -> StoreFuture<'_, ()>;

    /// Every object whose key starts with `prefix`.
    fn list(&self, prefix: &str) -> StoreFuture<'_, Vec<ObjectInfo>>;
}

/// A streamed put in progress ([`ObjectStore::upload`]).
pub trait Upload {
    /// Appends `part` to the object.
    fn write(&mut self, part: Bytes) -> StoreFuture<'_, ()>;

    /// Completes the object.
    fn finish(self: Box<Self>) -> StoreFuture<'static, ()>;

    /// Gives up: the object does not appear.
    fn abort(self: Box<Self>) -> StoreFuture<'static, ()>;
}

/// What [`crate::Log::restore_from_remote`] took from the remote segment its log continues.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct RestoredState {
    /// Producers whose state was restored (`None`: the segment's uploader did not know it).
    pub producers: Option<usize>,
    /// Leader epochs restored.
    pub leader_epochs: usize,
}

/// What the remote tier of a log holds and has done.
#[derive(Debug, Clone, Copy, Default, PartialEq, Eq)]
pub struct TierStats {
    /// Segments in the store.
    pub remote_segments: usize,
    /// Their bytes.
    pub remote_bytes: u64,
    /// The offset after the last uploaded segment (0: none yet).
    pub remote_end: u64,
    /// Bytes of closed local segments not uploaded yet (the upload lag).
    pub lag_bytes: u64,
    /// Segments uploaded since the store was attached.
    pub uploaded_segments: u64,
    /// Their bytes.
    pub uploaded_bytes: u64,
    /// Remote segments deleted (retention, DeleteRecords) since the store was attached.
    pub deleted_segments: u64,
    /// Objects no manifest listed, deleted by the first tick (a crash's leftovers).
    pub orphans_deleted: usize,
    /// Failed store operations since the store was attached.
    pub errors: u64,
    /// Bytes read from the store.
    pub read_bytes: u64,
}
