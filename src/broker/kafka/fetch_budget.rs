//! A Fetch response's size limit (`max_bytes`, librdkafka's `fetch.max.bytes`) is for the
//! whole response, not per owner core.
//!
//! Each owner core reads its partitions with the request's `max_bytes` (it cannot know what
//! the other cores will find), so the replies together could reach cores x the limit — and
//! librdkafka refuses a response larger than its `receive.message.max.bytes`. [`enforce`]
//! trims the gathered replies in request order, the way Kafka fills a response: partitions
//! keep whole batches while they fit, and only the first batch of the first non-empty
//! partition may exceed the limit (KIP-74: so that a consumer can always make progress).
//! What is trimmed stays in the owner's read-ahead for the next fetch.

use bytes::Bytes;

use crate::broker::kafka::fetch_response::FetchReply;

/// Bytes before the batch length field ends: base offset (8) + batch length (4).
const LOG_OVERHEAD: usize = 12;

/// Trims `replies` so that their record bytes add up to at most `max_bytes` (see the module
/// comment for the one exception). Returns the bytes kept.
pub fn enforce(replies: &mut [FetchReply], max_bytes: i32) -> usize {
    let max = usize::try_from(max_bytes).unwrap_or(0);
    let mut used = 0usize;
    let mut first = true;
    for t in replies.iter_mut() {
        for (_, r) in t.partitions.iter_mut() {
            let len = r.bytes();
            if len == 0 {
                continue;
            }
            if used + len > max {
                let room = max.saturating_sub(used);
                let keep = match batch_prefix(&r.chunks, room) {
                    0 if first => first_batch(&r.chunks),
                    n => n,
                };
                truncate(&mut r.chunks, keep);
            }
            used += r.bytes();
            first = false;
        }
    }
    used
}

/// The largest prefix of whole batches of `chunks` (concatenated) that is at most `limit`.
fn batch_prefix(chunks: &[Bytes], limit: usize) -> usize {
    let total: usize = chunks.iter().map(Bytes::len).sum();
    let mut pos = 0usize;
    loop {
        match batch_len_at(chunks, pos) {
            Some(n) if pos + n <= limit && pos + n <= total => pos += n,
            _ => return pos,
        }
    }
}

/// The size of the first batch, or everything if it cannot be read.
fn first_batch(chunks: &[Bytes]) -> usize {
    let total: usize = chunks.iter().map(Bytes::len).sum();
    batch_len_at(chunks, 0).map_or(total, |n| n.min(total))
}

/// The total size of the batch starting at `pos` of the concatenated chunks.
fn batch_len_at(chunks: &[Bytes], pos: usize) -> Option<usize> {
    let mut head = [0u8; LOG_OVERHEAD];
    let mut got = 0;
    let mut start = 0usize;
    for c in chunks {
        let end = start + c.len();
        if end > pos + got && got < LOG_OVERHEAD {
            let from = pos + got - start;
            let n = (c.len() - from).min(LOG_OVERHEAD - got);
            head[got..got + n].copy_from_slice(&c[from..from + n]);
            got += n;
        }
        start = end;
    }
    if got < LOG_OVERHEAD {
        return None;
    }
    let len = i32::from_be_bytes([head[8], head[9], head[10], head[11]]);
    usize::try_from(len).ok().map(|l| l + LOG_OVERHEAD)
}

/// Keeps the first `n` bytes of the concatenated chunks.
fn truncate(chunks: &mut Vec<Bytes>, n: usize) {
    let mut left = n;
    let mut keep = 0;
    for c in chunks.iter_mut() {
        if left == 0 {
            break;
        }
        if c.len() > left {
            *c = c.slice(..left);
        }
        left -= c.len();
        keep += 1;
    }
    chunks.truncate(keep);
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::broker::shard::FetchResult;
    use weir_storage::batch::RecordBatchBuilder;

    fn batch(bytes: usize) -> Bytes {
        RecordBatchBuilder::new(1_000)
            .record(None, Some(&vec![1u8; bytes]), &[])
            .build()
    }

    fn part(batches: &[Bytes], split_at: Option<usize>) -> FetchResult {
        let mut all = Vec::new();
        for b in batches {
            all.extend_from_slice(b);
        }
        let all = Bytes::from(all);
        let chunks = match split_at {
            Some(at) => vec![all.slice(..at), all.slice(at..)],
            None => vec![all],
        };
        FetchResult {
            high_watermark: 10,
            last_stable_offset: 10,
            chunks,
            ..Default::default()
        }
    }

    fn reply(parts: Vec<FetchResult>) -> Vec<FetchReply> {
        vec![FetchReply {
            topic_id: uuid::Uuid::nil(),
            topic: "t".into(),
            partitions: parts
                .into_iter()
                .enumerate()
                .map(|(i, p)| (i as i32, p))
                .collect(),
        }]
    }

    fn sizes(r: &[FetchReply]) -> Vec<usize> {
        r[0].partitions.iter().map(|(_, p)| p.bytes()).collect()
    }

    #[test]
    fn the_response_total_stays_within_max_bytes_in_whole_batches() {
        let b = batch(1000);
        let n = b.len();
        // Two partitions (say, on two cores) each answered with 4 batches for max 5 batches.
        let mut r = reply(vec![
            part(&[b.clone(), b.clone(), b.clone(), b.clone()], Some(n + 7)),
            part(&[b.clone(), b.clone(), b.clone(), b.clone()], None),
        ]);
        let kept = enforce(&mut r, (5 * n + n / 2) as i32);
        assert_eq!(kept, 5 * n);
        assert_eq!(sizes(&r), vec![4 * n, n]);
    }

    #[test]
    fn the_first_batch_may_exceed_and_later_partitions_are_emptied() {
        let big = batch(5000);
        let small = batch(10);
        let mut r = reply(vec![
            part(&[big.clone(), small.clone()], Some(100)),
            part(std::slice::from_ref(&small), None),
        ]);
        enforce(&mut r, 1000);
        assert_eq!(
            sizes(&r),
            vec![big.len(), 0],
            "only the first batch, whole, goes out"
        );
        assert_eq!(&r[0].partitions[0].1.chunks.concat()[..], &big[..]);
    }

    #[test]
    fn within_the_limit_nothing_changes() {
        let b = batch(100);
        let mut r = reply(vec![
            part(std::slice::from_ref(&b), None),
            part(&[b.clone(), b.clone()], Some(3)),
        ]);
        assert_eq!(enforce(&mut r, 1 << 20), 3 * b.len());
        assert_eq!(sizes(&r), vec![b.len(), 2 * b.len()]);
    }
}
