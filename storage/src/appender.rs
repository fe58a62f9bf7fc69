//! The direct-I/O appender of the active segment.
//!
//! Appended bytes are copied once into a block-aligned in-memory chunk (`write_chunk_bytes`,
//! 1 MiB by default). A full chunk is written whole; several full chunks can be in flight.
//! A small append does not wait for the chunk to fill: when no write is in flight, the
//! dirty blocks of the chunk are copied into a small buffer and written at once (the partial
//! last block padded with zeros), and rewritten later when more data lands in that block.
//! Under load, appends queue up behind the writes in flight and go out together in the next
//! one: a write-combining "group append".
//!
//! The chunk is allocated by the first append, and an idle log releases it
//! ([`Appender::release_buffer`], keeping only the partial last block's bytes).
//!
//! Two writes that touch the same block are never in flight together (the device may
//! reorder them): a partial write is only issued when nothing is in flight, and a full chunk
//! waits for partial writes of its range to finish. [`crate::log`] enforces both.

use std::collections::VecDeque;

use crate::io::{align_down, align_up, IoBuf, IoFile};

/// One direct write to launch.
pub(crate) struct WriteOp {
    pub buf: IoBuf,
    pub pos: u64,
    /// Once this write and all before it are done, offsets below `covered_offset` (whose
    /// batches end at file position `covered_pos`) are on disk.
    pub covered_offset: u64,
    pub covered_pos: u64,
    pub partial: bool,
}

pub(crate) struct Appender {
    pub file: IoFile,
    pub segment_base: u64,
    chunk_bytes: usize,
    chunk: Option<IoBuf>,
    /// While `chunk` is `None` (not allocated yet, or released by an idle log): the bytes of
    /// the chunk's first `chunk_len` bytes, i.e. the partial last block (less than a block).
    saved_tail: Vec<u8>,
    /// File position of `chunk[0]` (block-aligned).
    chunk_pos: u64,
    /// Valid bytes in the chunk.
    chunk_len: usize,
    /// File position up to which bytes have been handed to a write.
    submitted_to: u64,
    /// (file position after a batch, offset after it), for appends not yet covered by a write.
    marks: VecDeque<(u64, u64)>,
    covered_offset: u64,
    covered_pos: u64,
    /// The file is preallocated up to here.
    pub preallocated_to: u64,
}

impl Appender {
    /// An appender continuing a segment whose valid data ends at `size`, with `tail` being
    /// the bytes of its last partial block (`size % BLOCK` bytes) and `next_offset` the
    /// offset after its last batch.
    pub(crate) fn new(
        file: IoFile,
        segment_base: u64,
        chunk_bytes: usize,
        size: u64,
        tail: &[u8],
        next_offset: u64,
        preallocated_to: u64,
    ) -> Appender {
        let chunk_bytes = align_up(chunk_bytes as u64) as usize;
        crate::io::reuse_size(chunk_bytes);
        let chunk_pos = align_down(size);
        assert_eq!(
            tail.len() as u64,
            size - chunk_pos,
            "tail must be the partial last block"
        );
        // The chunk itself is allocated by the first append: a log that is only opened (or
        // stays idle) holds no write buffer.
        Appender {
            file,
            segment_base,
            chunk_bytes,
            chunk: None,
            saved_tail: tail.to_vec(),
            chunk_pos,
            chunk_len: tail.len(),
            submitted_to: size,
            marks: VecDeque::new(),
            covered_offset: next_offset,
            covered_pos: size,
            preallocated_to,
        }
    }

    /// Bytes of write buffer this appender holds now.
    pub(crate) fn buffer_bytes(&self) -> usize {
        self.chunk.as_ref().map_or(0, |_| self.chunk_bytes) + self.saved_tail.capacity()
    }

    /// Drops the chunk when everything in it has been handed to a write (the caller makes
    /// sure no write is in flight), keeping only the partial last block's bytes; the next
    /// append allocates a new chunk. Returns whether a chunk was released.
    pub(crate) fn release_buffer(&mut self) -> bool {
        if self.has_unsubmitted() {
            return false;
        }
        let Some(chunk) = self.chunk.take() else {
            return false;
        };
        let end = self.end_pos();
        let tail_pos = align_down(end);
        let from = (tail_pos - self.chunk_pos) as usize;
        self.saved_tail = chunk.as_ref()[from..self.chunk_len].to_vec();
        self.chunk_pos = tail_pos;
        self.chunk_len = self.saved_tail.len();
        true
    }

    /// File position after the last appended byte.
    pub(crate) fn end_pos(&self) -> u64 {
        self.chunk_pos + self.chunk_len as u64
    }

    /// File position the current chunk reaches when full.
    pub(crate) fn chunk_end(&self) -> u64 {
        self.chunk_pos + self.chunk_bytes as u64
    }

    pub(crate) fn is_full(&self) -> bool {
        self.chunk_len == self.chunk_bytes
    }

    pub(crate) fn has_unsubmitted(&self) -> bool {
        self.submitted_to < self.end_pos()
    }

    /// Notes that once bytes up to `file_end` are written, offsets below `next_offset` are.
    pub(crate) fn mark(&mut self, file_end: u64, next_offset: u64) {
        self.marks.push_back((file_end, next_offset));
    }

    /// Copies as much of `data` as fits in the chunk; returns how much.
    pub(crate) fn copy(&mut self, data: &[u8]) -> usize {
        let n = data.len().min(self.chunk_bytes - self.chunk_len);
        if n == 0 {
            return 0;
        }
        let cap = self.chunk_bytes;
        let chunk = self.chunk.get_or_insert_with(|| {
            let mut c = self.file.alloc(cap);
            let tail = std::mem::take(&mut self.saved_tail);
            c.as_mut()[..tail.len()].copy_from_slice(&tail);
            c
        });
        chunk.as_mut()[self.chunk_len..self.chunk_len + n].copy_from_slice(&data[..n]);
        self.chunk_len += n;
        n
    }

    /// Pops the marks a write ending at `end` completes: returns (offset, position) after
    /// the last batch it completes.
    fn cover(&mut self, end: u64) -> (u64, u64) {
        while let Some(&(file_end, next_offset)) = self.marks.front() {
            if file_end > end {
                break;
            }
            self.covered_offset = next_offset;
            self.covered_pos = file_end;
            self.marks.pop_front();
        }
        (self.covered_offset, self.covered_pos)
    }

    /// The full chunk, to be written whole; a new empty chunk follows it.
    pub(crate) fn take_full(&mut self) -> WriteOp {
        assert!(
            self.is_full(),
            "take_full on a chunk of {} bytes",
            self.chunk_len
        );
        let buf = self.chunk.take().expect("a full chunk has a buffer");
        let pos = self.chunk_pos;
        let end = self.chunk_end();
        self.chunk_pos = end;
        self.chunk_len = 0;
        self.submitted_to = end;
        let (covered_offset, covered_pos) = self.cover(end);
        WriteOp {
            buf,
            pos,
            covered_offset,
            covered_pos,
            partial: false,
        }
    }

    /// The dirty blocks of the chunk (from the block holding the first unsubmitted byte to
    /// the end of the data), copied into a small buffer padded with zeros.
    pub(crate) fn take_partial(&mut self) -> Option<WriteOp> {
        if !self.has_unsubmitted() || self.is_full() {
            return None;
        }
        let start = align_down(self.submitted_to).max(self.chunk_pos);
        let end = self.end_pos();
        let len = (align_up(end) - start) as usize;
        let mut buf = self.file.alloc(len);
        let from = (start - self.chunk_pos) as usize;
        let valid = (end - start) as usize;
        let chunk = self
            .chunk
            .as_ref()
            .expect("unsubmitted bytes live in the chunk");
        buf.as_mut()[..valid].copy_from_slice(&chunk.as_ref()[from..from + valid]);
        buf.as_mut()[valid..].fill(0);
        self.submitted_to = end;
        let (covered_offset, covered_pos) = self.cover(end);
        Some(WriteOp {
            buf,
            pos: start,
            covered_offset,
            covered_pos,
            partial: true,
        })
    }
}
