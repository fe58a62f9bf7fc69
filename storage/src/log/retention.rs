//! Retention: deleting whole old segments by age (`retention.ms`) or size
//! (`retention.bytes`), rolling an aged active segment (`segment.ms`), moving the log start
//! (DeleteRecords), and releasing the buffers of an idle log. The broker calls
//! [`Log::enforce_retention`] on every retention tick.
//!
//! Segments are deleted oldest first, so a crash in the middle leaves a suffix: a valid log
//! with a later start. The active segment is never deleted.

use super::markers::{self, LOG_START_FILE};
use super::{Inner, Log};
use crate::error::{Error, Result};

impl Log {
    /// Applies `retention.ms` / `retention.bytes` and `segment.ms`: rolls an aged active
    /// segment and deletes whole old segments (moving the log start offset). Returns the
    /// number of segments deleted.
    pub async fn enforce_retention(&self, now_ms: i64) -> Result<usize> {
        self.enforce_retention_below(now_ms, u64::MAX).await
    }

    /// Where [`Log::enforce_retention`] would move the log start now: the end of the last
    /// whole segment it would delete (`None`: nothing to delete). Nothing changes. A
    /// replicated log moves its Raft snapshot point there before it lets retention delete
    /// ([`Log::enforce_retention_below`]).
    pub fn retention_point(&self, now_ms: i64) -> Option<u64> {
        let inner = &self.inner;
        let config = inner.config.borrow().clone();
        if !config.cleanup_delete {
            return None;
        }
        // With a remote tier, `local.retention.*` bound the local copy, and only what is
        // uploaded may go (`tiered.rs`); the remote tier applies `retention.*`.
        let uploaded = super::tiered::local_retention_limit(inner);
        let (retention_ms, retention_bytes) = match uploaded {
            Some(_) => (config.local_retention_ms, config.local_retention_bytes),
            None => (config.retention_ms, config.retention_bytes),
        };
        let segs = inner.segments.borrow();
        let mut total: u64 = segs.values().map(|s| s.state.borrow().size).sum();
        let mut point = None;
        // The active segment is never deleted; nor is one not yet committed
        // (`committed_reads`: a truncation may still cut it).
        for seg in segs.values().take(segs.len().saturating_sub(1)) {
            let st = seg.state.borrow();
            if st.next_offset > inner.visible.get() || uploaded.is_some_and(|u| st.next_offset > u)
            {
                break;
            }
            let by_time = retention_ms.is_some_and(|ms| st.max_timestamp < now_ms - ms as i64);
            let by_size = retention_bytes.is_some_and(|max| total - st.size >= max);
            if !(by_time || by_size) {
                break;
            }
            total -= st.size;
            point = Some(st.next_offset);
        }
        point
    }

    /// [`Log::enforce_retention`], deleting only segments that end at or below `limit`.
    pub async fn enforce_retention_below(&self, now_ms: i64, limit: u64) -> Result<usize> {
        let inner = &self.inner;
        inner.check_usable()?;
        inner.release_if_idle();
        let config = inner.config.borrow().clone();
        inner
            .producers
            .borrow_mut()
            .expire(now_ms, config.producer_id_expiration_ms);
        if let Some(age) = config.segment_age_limit() {
            let first = inner.active().state.borrow().first_append_ms;
            if first.is_some_and(|t| now_ms - t >= age.as_millis() as i64) {
                let permit = inner.append_lock.lock().await.ok_or(Error::Closed)?;
                if inner.active().state.borrow().size > 0 {
                    inner.roll().await?;
                }
                drop(permit);
            }
        }
        // Deletes what `retention_point` plans, up to `limit`: appends meanwhile only add
        // bytes, and nothing cuts below the committed offset, so the plan stays valid.
        let Some(stop) = self.retention_point(now_ms).map(|p| p.min(limit)) else {
            return Ok(0);
        };
        let mut deleted = 0;
        loop {
            let deletable = {
                let segs = inner.segments.borrow();
                segs.len() > 1
                    && segs
                        .values()
                        .next()
                        .is_some_and(|s| s.state.borrow().next_offset <= stop)
            };
            if !deletable {
                break;
            }
            inner.delete_oldest_segment().await?;
            deleted += 1;
        }
        Ok(deleted)
    }

    /// Deletes whole segments below `offset` and sets the log start offset to `offset`
    /// (Kafka's DeleteRecords). The new start is durable when this returns.
    pub async fn set_log_start_offset(&self, offset: u64) -> Result<()> {
        let inner = &self.inner;
        let hw = inner.visible.get();
        if offset > hw {
            return Err(Error::OffsetOutOfRange {
                offset,
                log_start_offset: inner.start_offset(),
                log_end_offset: hw,
            });
        }
        if let Some(remote) = inner.remote() {
            // The remote tier first: its manifest records the new start durably.
            super::tiered::delete_remote_below(inner, &remote, offset).await?;
        }
        if offset <= inner.log_start.get() {
            return Ok(());
        }
        let bytes = markers::encode_log_start(offset);
        inner
            .vfs
            .write_small(&inner.dir.join(LOG_START_FILE), &bytes)
            .await?;
        inner.vfs.sync_dir(&inner.dir).await?;
        inner.log_start.set(offset);
        loop {
            let deletable = {
                let segs = inner.segments.borrow();
                let mut it = segs.values();
                match (it.next(), it.next()) {
                    (Some(_), Some(second)) => second.base_offset <= offset,
                    _ => false,
                }
            };
            if !deletable {
                break;
            }
            inner.delete_oldest_segment().await?;
            inner.log_start.set(offset);
        }
        Ok(())
    }
}

impl Inner {
    /// Releases the appender's chunk if nothing was appended since the previous call and no
    /// write is in flight: an idle partition holds no write buffer (bounded memory with many
    /// partitions). The next append allocates a new chunk.
    fn release_if_idle(&self) {
        self.reader.expire_idle();
        crate::io::expire_spare_write_buffers(std::time::Instant::now());
        if self.idle_mark.get() == self.log_end.get() {
            super::tiered::release_remote_reads(self);
        }
        let end = self.log_end.get();
        if self.idle_mark.replace(end) != end || !self.writes.borrow().is_empty() {
            return;
        }
        self.appender.borrow_mut().release_buffer();
    }

    async fn delete_oldest_segment(&self) -> Result<()> {
        let _permit = self.layout_lock.lock().await.ok_or(Error::Closed)?;
        let seg = {
            let mut segs = self.segments.borrow_mut();
            if segs.len() <= 1 {
                return Ok(());
            }
            segs.pop_first().map(|(_, s)| s)
        };
        let Some(seg) = seg else { return Ok(()) };
        let next_base = self
            .segments
            .borrow()
            .keys()
            .next()
            .copied()
            .unwrap_or(seg.base_offset);
        self.log_start.set(self.log_start.get().max(next_base));
        self.reader.forget_segment(seg.uid);
        seg.remove_files(&self.vfs).await?;
        tracing::debug!(dir = %self.dir.display(), base = seg.base_offset, "retention deleted a segment");
        Ok(())
    }
}
