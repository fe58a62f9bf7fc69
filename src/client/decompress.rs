//! Decompression of fetched record batches (gzip, snappy — xerial-framed or raw —, lz4
//! frame, zstd), with kafka-protocol's codecs: a compressed batch becomes the equivalent
//! uncompressed batch, whose records `weir_storage::batch::decode_records` then reads.

use bytes::{Bytes, BytesMut};
use kafka_protocol::compression::{Decompressor, Gzip, Lz4, Snappy, Zstd};
use weir_storage::batch::{check_framing_stored, HEADER_BYTES, LOG_OVERHEAD, MAX_BATCH_BYTES};

/// Byte offset of the big-endian `attributes` field in a v2 batch header; its low 3 bits
/// are the codec.
const ATTRIBUTES_LOW_BYTE: usize = 22;
/// Byte offset of the big-endian `batch_length` field.
const BATCH_LENGTH_AT: usize = 8;

/// Returns `batch` rewritten as an uncompressed batch (same header, codec bits cleared,
/// length fixed; the CRC is not recomputed). An error names the codec and what failed.
pub fn decompress_batch(batch: &[u8]) -> Result<Bytes, String> {
    let header = check_framing_stored(batch).map_err(|e| format!("bad batch framing: {e:?}"))?;
    let codec = header.compression();
    let mut body = Bytes::copy_from_slice(&batch[HEADER_BYTES..header.total_bytes()]);
    let plain = |b: &mut Bytes| Ok(b.clone());
    let out = match codec {
        0 => Ok(body),
        1 => Gzip::decompress(&mut body, plain),
        2 => Snappy::decompress(&mut body, plain),
        3 => Lz4::decompress(&mut body, plain),
        4 => Zstd::decompress(&mut body, plain),
        other => return Err(format!("unknown compression codec {other}")),
    }
    .map_err(|e| format!("codec {codec}: corrupt compressed records: {e:#}"))?;
    let total = HEADER_BYTES + out.len();
    if total > MAX_BATCH_BYTES {
        return Err(format!(
            "codec {codec}: batch decompresses to {total} bytes, over {MAX_BATCH_BYTES}"
        ));
    }
    let mut whole = BytesMut::with_capacity(total);
    whole.extend_from_slice(&batch[..HEADER_BYTES]);
    whole[ATTRIBUTES_LOW_BYTE] &= !0x07;
    let length = (total - LOG_OVERHEAD) as u32;
    whole[BATCH_LENGTH_AT..BATCH_LENGTH_AT + 4].copy_from_slice(&length.to_be_bytes());
    whole.extend_from_slice(&out);
    Ok(whole.freeze())
}
