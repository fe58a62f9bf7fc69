//! The compression codecs of record batches (`attributes` bits 0-2: 1 gzip, 2 snappy, 3 lz4,
//! 4 zstd), every one of them bounded: what a producer sends is hostile until checked, and a
//! few kilobytes of zstd can inflate to gigabytes.
//!
//! [`Inflater`] reads a compressed records section as a stream, a block at a time, and fails
//! once it has produced more than its limit: memory stays at one decoder's window (zstd at most
//! 2^[`ZSTD_WINDOW_LOG_MAX`] bytes, lz4 one 4 MiB block, gzip 32 KiB, xerial snappy one block)
//! whatever the batch inflates to. Raw snappy has no blocks — librdkafka sends a whole batch as
//! one raw snappy buffer — so its output is held whole, and refused before it is allocated when
//! its header announces more than the limit. [`inflate`] collects a stream into a `Vec` (the
//! cleaner, the native client), under the same limit; [`compress`] is the other direction (the
//! cleaner rewrites compacted batches in their original codec).
//!
//! Snappy comes in two framings: xerial's (`\x82SNAPPY\0`, then `[u32 length][raw block]`...),
//! written by the Java client, and raw, written by librdkafka; both are read, xerial is written.

use std::io::{self, BufRead, Read, Write};

/// Kafka's codec numbers (`attributes & 7`).
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum Codec {
    /// Uncompressed.
    None = 0,
    /// gzip (RFC 1952), possibly several members.
    Gzip = 1,
    /// snappy, xerial-framed or raw.
    Snappy = 2,
    /// The LZ4 frame format.
    Lz4 = 3,
    /// zstd frames.
    Zstd = 4,
}

impl Codec {
    /// The codec numbered `id` (a batch's `attributes & 7`); `None` for 5-7, which no codec has.
    pub fn from_id(id: u8) -> Option<Codec> {
        Some(match id {
            0 => Codec::None,
            1 => Codec::Gzip,
            2 => Codec::Snappy,
            3 => Codec::Lz4,
            4 => Codec::Zstd,
            _ => return None,
        })
    }

    /// Kafka's name for it (`compression.type`).
    pub fn name(self) -> &'static str {
        match self {
            Codec::None => "none",
            Codec::Gzip => "gzip",
            Codec::Snappy => "snappy",
            Codec::Lz4 => "lz4",
            Codec::Zstd => "zstd",
        }
    }
}

/// The largest zstd window (log2 of bytes) a frame may ask for: 16 MiB. zstd sizes a frame's
/// window to its content when it knows it, so a batch up to 16 MiB never needs more; a frame
/// asking for more is refused (Java's zstd-jni would allow 128 MiB).
pub const ZSTD_WINDOW_LOG_MAX: u32 = 24;

/// The largest xerial snappy block accepted (uncompressed). Java and weir write 32 KiB blocks.
pub const SNAPPY_BLOCK_MAX_BYTES: usize = 8 << 20;

const XERIAL_MAGIC: &[u8; 8] = b"\x82SNAPPY\x00";
const XERIAL_HEADER_BYTES: usize = 16;
const XERIAL_BLOCK_BYTES: usize = 32 << 10;

/// Why a compressed section could not be read.
#[derive(Debug, Clone, PartialEq, Eq)]
pub enum InflateError {
    /// The codec number is not one of Kafka's.
    UnknownCodec(u8),
    /// The section inflates to more than the limit.
    TooLarge {
        /// The limit, in bytes.
        limit: u64,
    },
    /// The bytes are not valid for the codec.
    Corrupt {
        /// The codec.
        codec: Codec,
        /// What its decoder said.
        reason: String,
    },
}

impl std::fmt::Display for InflateError {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        match self {
            InflateError::UnknownCodec(c) => write!(f, "unknown compression codec {c}"),
            InflateError::TooLarge { limit } => {
                write!(f, "records decompress to more than {limit} bytes")
            }
            InflateError::Corrupt { codec, reason } => {
                write!(f, "corrupt {} data: {reason}", codec.name())
            }
        }
    }
}

impl std::error::Error for InflateError {}

/// A bounded streaming decoder of one compressed records section (see the module docs).
pub struct Inflater<'a> {
    decoder: Decoder<'a>,
    codec: Codec,
    produced: u64,
    limit: u64,
    /// Set once the decoder failed or the limit was passed: every later read repeats it.
    failed: Option<InflateError>,
}

enum Decoder<'a> {
    Gzip(flate2::bufread::MultiGzDecoder<&'a [u8]>),
    Snappy(SnappyReader<'a>),
    /// `None` once the stream ended (`finish` checked that the frame was whole).
    Lz4(Option<Box<lz4::Decoder<&'a [u8]>>>),
    Zstd(Box<zstd::stream::read::Decoder<'a, &'a [u8]>>),
}

impl<'a> Inflater<'a> {
    /// A decoder of `data` compressed with `codec` (1-4) that fails past `limit` bytes of
    /// output.
    pub fn new(codec: u8, data: &'a [u8], limit: u64) -> Result<Inflater<'a>, InflateError> {
        let c = Codec::from_id(codec).ok_or(InflateError::UnknownCodec(codec))?;
        let corrupt = |e: io::Error| InflateError::Corrupt {
            codec: c,
            reason: e.to_string(),
        };
        let decoder = match c {
            Codec::None => return Err(InflateError::UnknownCodec(0)),
            Codec::Gzip => Decoder::Gzip(flate2::bufread::MultiGzDecoder::new(data)),
            Codec::Snappy => Decoder::Snappy(SnappyReader::new(data, limit)?),
            Codec::Lz4 => Decoder::Lz4(Some(Box::new(lz4::Decoder::new(data).map_err(corrupt)?))),
            Codec::Zstd => {
                let mut d = zstd::stream::read::Decoder::with_buffer(data).map_err(corrupt)?;
                d.window_log_max(ZSTD_WINDOW_LOG_MAX).map_err(corrupt)?;
                Decoder::Zstd(Box::new(d))
            }
        };
        Ok(Inflater {
            decoder,
            codec: c,
            produced: 0,
            limit,
            failed: None,
        })
    }

    /// Bytes produced so far.
    pub fn produced(&self) -> u64 {
        self.produced
    }

    /// Reads up to `buf.len()` bytes of output; `Ok(0)` at the end of the stream.
    pub fn read_some(&mut self, buf: &mut [u8]) -> Result<usize, InflateError> {
        if let Some(e) = &self.failed {
            return Err(e.clone());
        }
        // One byte past the limit is enough to know it was passed.
        let room = (self.limit - self.produced.min(self.limit)).saturating_add(1);
        let want = buf.len().min(usize::try_from(room).unwrap_or(usize::MAX));
        let r = match &mut self.decoder {
            Decoder::Gzip(d) => d.read(&mut buf[..want]),
            Decoder::Snappy(d) => d.read(&mut buf[..want]),
            Decoder::Lz4(slot) => match slot {
                None => Ok(0),
                Some(d) => match d.read(&mut buf[..want]) {
                    // lz4's decoder reads a cut frame's end as the end of the stream:
                    // `finish` tells them apart.
                    Ok(0) => slot.take().map_or(Ok(0), |d| d.finish().1.map(|()| 0)),
                    r => r,
                },
            },
            Decoder::Zstd(d) => d.read(&mut buf[..want]),
        };
        let result = match r {
            Ok(n) => {
                self.produced += n as u64;
                if self.produced > self.limit {
                    Err(InflateError::TooLarge { limit: self.limit })
                } else {
                    Ok(n)
                }
            }
            Err(e) => Err(
                match e.get_ref().and_then(|i| i.downcast_ref::<InflateError>()) {
                    Some(inner) => inner.clone(),
                    None => InflateError::Corrupt {
                        codec: self.codec,
                        reason: e.to_string(),
                    },
                },
            ),
        };
        if let Err(e) = &result {
            self.failed = Some(e.clone());
        }
        result
    }
}

/// The records section `data` compressed with `codec`, decompressed whole; an error past
/// `limit` bytes. Memory grows with the output, never to a size the input announces.
pub fn inflate(codec: u8, data: &[u8], limit: u64) -> Result<Vec<u8>, InflateError> {
    let mut inflater = Inflater::new(codec, data, limit)?;
    let mut out = Vec::with_capacity(data.len().saturating_mul(4).min(limit as usize));
    let mut chunk = vec![0u8; 64 << 10];
    loop {
        let n = inflater.read_some(&mut chunk)?;
        if n == 0 {
            return Ok(out);
        }
        out.extend_from_slice(&chunk[..n]);
    }
}

/// `batch` (a whole v2 batch) as the equivalent uncompressed batch: the same header with the
/// codec bits cleared and the length fixed (the CRC is not recomputed: the result is for
/// reading records, never for storing), its records section inflated up to `limit` bytes. An
/// uncompressed batch is returned as it is.
pub fn decompressed_batch(batch: &[u8], limit: u64) -> Result<bytes::Bytes, String> {
    let header =
        super::check_framing_stored(batch).map_err(|e| format!("bad batch framing: {e}"))?;
    let total = header.total_bytes();
    let codec = header.compression();
    if codec == 0 {
        return Ok(bytes::Bytes::copy_from_slice(&batch[..total]));
    }
    let body = inflate(codec, &batch[super::HEADER_BYTES..total], limit)
        .map_err(|e| format!("codec {codec}: {e}"))?;
    let mut whole = Vec::with_capacity(super::HEADER_BYTES + body.len());
    whole.extend_from_slice(&batch[..super::HEADER_BYTES]);
    whole[22] &= !(super::COMPRESSION_MASK as u8); // attributes' low byte
    let length = (super::HEADER_BYTES - super::LOG_OVERHEAD + body.len()) as u32;
    whole[8..12].copy_from_slice(&length.to_be_bytes()); // batch_length
    whole.extend_from_slice(&body);
    Ok(whole.into())
}

/// `data` (a records section) compressed with `codec` (1-4) as Kafka's clients write it:
/// gzip, xerial-framed snappy, an LZ4 frame, a zstd frame.
pub fn compress(codec: u8, data: &[u8]) -> Result<Vec<u8>, String> {
    let c = Codec::from_id(codec).ok_or_else(|| format!("unknown compression codec {codec}"))?;
    let fail = |e: io::Error| format!("{}: {e}", c.name());
    match c {
        Codec::None => Ok(data.to_vec()),
        Codec::Gzip => {
            let mut e = flate2::write::GzEncoder::new(Vec::new(), flate2::Compression::default());
            e.write_all(data).map_err(fail)?;
            e.finish().map_err(fail)
        }
        Codec::Snappy => {
            let mut out = Vec::with_capacity(XERIAL_HEADER_BYTES + data.len() / 2);
            out.extend_from_slice(XERIAL_MAGIC);
            out.extend_from_slice(&1u32.to_be_bytes()); // version
            out.extend_from_slice(&1u32.to_be_bytes()); // compatible version
            let mut encoder = snap::raw::Encoder::new();
            for block in data.chunks(XERIAL_BLOCK_BYTES) {
                let z = encoder
                    .compress_vec(block)
                    .map_err(|e| format!("snappy: {e}"))?;
                out.extend_from_slice(&(z.len() as u32).to_be_bytes());
                out.extend_from_slice(&z);
            }
            Ok(out)
        }
        Codec::Lz4 => {
            let mut e = lz4::EncoderBuilder::new()
                .block_mode(lz4::BlockMode::Independent)
                .build(Vec::new())
                .map_err(fail)?;
            e.write_all(data).map_err(fail)?;
            let (out, r) = e.finish();
            r.map_err(fail)?;
            Ok(out)
        }
        Codec::Zstd => zstd::stream::encode_all(data, 3).map_err(fail),
    }
}

/// Snappy, xerial-framed (a block decoded at a time) or raw (decoded whole, its announced
/// length checked against the limit first).
struct SnappyReader<'a> {
    /// The xerial blocks not yet decoded (empty for raw snappy).
    blocks: &'a [u8],
    out: Vec<u8>,
    pos: usize,
    decoder: snap::raw::Decoder,
}

impl<'a> SnappyReader<'a> {
    fn new(data: &'a [u8], limit: u64) -> Result<SnappyReader<'a>, InflateError> {
        let mut r = SnappyReader {
            blocks: &[],
            out: Vec::new(),
            pos: 0,
            decoder: snap::raw::Decoder::new(),
        };
        if data.len() >= XERIAL_HEADER_BYTES && data.starts_with(XERIAL_MAGIC) {
            r.blocks = &data[XERIAL_HEADER_BYTES..];
        } else {
            let n = r.block_len(data, limit)?;
            r.out.resize(n, 0);
            r.decode(data)?;
        }
        Ok(r)
    }

    fn block_len(&self, block: &[u8], max: u64) -> Result<usize, InflateError> {
        let n = snap::raw::decompress_len(block).map_err(corrupt_snappy)?;
        if n as u64 > max {
            return Err(InflateError::TooLarge { limit: max });
        }
        Ok(n)
    }

    fn decode(&mut self, block: &[u8]) -> Result<(), InflateError> {
        let n = self
            .decoder
            .decompress(block, &mut self.out)
            .map_err(corrupt_snappy)?;
        self.out.truncate(n);
        self.pos = 0;
        Ok(())
    }

    /// Decodes the next xerial block into `out`; false at the end.
    fn next_block(&mut self) -> Result<bool, InflateError> {
        if self.blocks.is_empty() {
            return Ok(false);
        }
        let Some((len, rest)) = self.blocks.split_first_chunk::<4>() else {
            return Err(corrupt_snappy("truncated block length"));
        };
        let len = u32::from_be_bytes(*len) as usize;
        if len > rest.len() {
            return Err(corrupt_snappy("block longer than the data"));
        }
        let (block, rest) = rest.split_at(len);
        self.blocks = rest;
        let n = self.block_len(block, SNAPPY_BLOCK_MAX_BYTES as u64)?;
        self.out.resize(n, 0);
        self.decode(block)?;
        Ok(true)
    }
}

fn corrupt_snappy(e: impl std::fmt::Display) -> InflateError {
    InflateError::Corrupt {
        codec: Codec::Snappy,
        reason: e.to_string(),
    }
}

impl Read for SnappyReader<'_> {
    fn read(&mut self, buf: &mut [u8]) -> io::Result<usize> {
        while self.pos == self.out.len() {
            if !self
                .next_block()
                .map_err(|e| io::Error::new(io::ErrorKind::InvalidData, e))?
            {
                return Ok(0);
            }
        }
        let n = buf.len().min(self.out.len() - self.pos);
        buf[..n].copy_from_slice(&self.out[self.pos..self.pos + n]);
        self.pos += n;
        Ok(n)
    }
}

// `BufRead` is what flate2's and zstd's buffered decoders read from: a plain slice is one.
const _: fn() = || {
    fn is_bufread<T: BufRead>() {}
    is_bufread::<&[u8]>();
};

#[cfg(test)]
mod tests {
    use super::*;

    fn sample(len: usize) -> Vec<u8> {
        (0..len)
            .map(|i| (i % 251) as u8 ^ (i / 997) as u8)
            .collect()
    }

    #[test]
    fn every_codec_round_trips() {
        for codec in 1..=4 {
            for len in [0, 1, 100, 40_000, 300_000] {
                let data = sample(len);
                let z = compress(codec, &data).expect("compress");
                assert_eq!(
                    inflate(codec, &z, 1 << 20).expect("inflate"),
                    data,
                    "codec {codec}, {len} bytes"
                );
            }
        }
    }

    #[test]
    fn raw_snappy_as_librdkafka_writes_it() {
        let data = sample(70_000);
        let z = snap::raw::Encoder::new()
            .compress_vec(&data)
            .expect("snappy");
        assert_eq!(inflate(2, &z, 1 << 20).expect("inflate"), data);
        // Announces 70,000 bytes: refused under a smaller limit before anything is decoded.
        assert_eq!(
            inflate(2, &z, 69_999),
            Err(InflateError::TooLarge { limit: 69_999 })
        );
    }

    #[test]
    fn output_past_the_limit_is_an_error() {
        let zeros = vec![0u8; 5 << 20];
        for codec in 1..=4 {
            let z = compress(codec, &zeros).expect("compress");
            assert_eq!(
                inflate(codec, &z, 1 << 20),
                Err(InflateError::TooLarge { limit: 1 << 20 }),
                "codec {codec}"
            );
            assert_eq!(
                inflate(codec, &z, 5 << 20).expect("at the limit").len(),
                5 << 20
            );
        }
    }

    #[test]
    fn garbage_and_unknown_codecs_are_errors() {
        for codec in 1..=4 {
            assert!(inflate(codec, b"not compressed at all", 1 << 20).is_err());
            let mut z = compress(codec, &sample(10_000)).expect("compress");
            z.truncate(z.len() / 2);
            assert!(
                inflate(codec, &z, 1 << 20).is_err(),
                "codec {codec}: a truncated stream must not read as whole"
            );
        }
        for codec in [0, 5, 6, 7] {
            assert!(matches!(
                Inflater::new(codec, b"x", 10),
                Err(InflateError::UnknownCodec(_))
            ));
        }
    }
}
