//! Decompression of fetched record batches (gzip, snappy — xerial-framed or raw —, lz4
//! frame, zstd), with the engine's bounded codecs (`compression::decompressed_batch`): a
//! compressed batch becomes the equivalent uncompressed batch, whose records
//! `weir_storage::batch::decode_records` then reads. A batch that would inflate past the
//! largest batch the engine stores is refused, as a broker is no more trusted than a producer.

use bytes::Bytes;
use weir_storage::batch::compression::decompressed_batch;
use weir_storage::batch::{HEADER_BYTES, MAX_BATCH_BYTES};

/// Returns `batch` rewritten as an uncompressed batch (same header, codec bits cleared,
/// length fixed; the CRC is not recomputed). An error names the codec and what failed.
pub fn decompress_batch(batch: &[u8]) -> Result<Bytes, String> {
    decompressed_batch(batch, (MAX_BATCH_BYTES - HEADER_BYTES) as u64)
}
