//! Partitioners. `KeyHash` is the Java client's default for keyed records: murmur2 of the
//! key bytes, made positive, modulo the partition count — so keys land where Java
//! producers put them.

use std::cell::Cell;

/// How the producer picks a partition for a record that names none.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Default)]
pub enum Partitioner {
    /// A pseudo-random partition per record (xorshift, seeded per producer).
    Random,
    /// `toPositive(murmur2(key)) % partitions`; records without a key go round-robin.
    #[default]
    KeyHash,
    /// Partition after partition, in turn.
    RoundRobin,
}

/// Kafka's `org.apache.kafka.common.utils.Utils.murmur2`, bit for bit (a 32-bit MurmurHash2
/// with seed 0x9747b28c).
pub fn murmur2(data: &[u8]) -> i32 {
    const SEED: u32 = 0x9747_b28c;
    const M: u32 = 0x5bd1_e995;
    const R: u32 = 24;
    let length = data.len();
    let mut h: u32 = SEED ^ (length as u32);
    let mut chunks = data.chunks_exact(4);
    for c in &mut chunks {
        let mut k = u32::from_le_bytes([c[0], c[1], c[2], c[3]]);
        k = k.wrapping_mul(M);
        k ^= k >> R;
        k = k.wrapping_mul(M);
        h = h.wrapping_mul(M);
        h ^= k;
    }
    let tail = chunks.remainder();
    if tail.len() >= 3 {
        h ^= u32::from(tail[2]) << 16;
    }
    if tail.len() >= 2 {
        h ^= u32::from(tail[1]) << 8;
    }
    if !tail.is_empty() {
        h ^= u32::from(tail[0]);
        h = h.wrapping_mul(M);
    }
    h ^= h >> 13;
    h = h.wrapping_mul(M);
    h ^= h >> 15;
    h as i32
}

/// The partition the Java client's default partitioner gives a keyed record.
pub fn partition_for_key(key: &[u8], num_partitions: usize) -> i32 {
    assert!(num_partitions > 0, "a topic has at least one partition");
    let positive = (murmur2(key) & 0x7fff_ffff) as u32;
    (positive % num_partitions as u32) as i32
}

/// Per-producer partitioner state (round-robin counter, random generator).
pub(crate) struct PartitionerState {
    kind: Partitioner,
    counter: Cell<u64>,
    rng: Cell<u64>,
}

impl PartitionerState {
    pub(crate) fn new(kind: Partitioner, seed: u64) -> Self {
        PartitionerState {
            kind,
            counter: Cell::new(0),
            rng: Cell::new(seed | 1),
        }
    }

    pub(crate) fn choose(&self, key: Option<&[u8]>, num_partitions: usize) -> i32 {
        match (self.kind, key) {
            (Partitioner::KeyHash, Some(k)) => partition_for_key(k, num_partitions),
            (Partitioner::Random, _) => {
                let mut x = self.rng.get();
                x ^= x << 13;
                x ^= x >> 7;
                x ^= x << 17;
                self.rng.set(x);
                (x % num_partitions as u64) as i32
            }
            _ => {
                let n = self.counter.get();
                self.counter.set(n.wrapping_add(1));
                (n % num_partitions as u64) as i32
            }
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    /// Values from the Java client's `UtilsTest.testMurmur2`.
    #[test]
    fn murmur2_matches_java() {
        let cases: &[(&[u8], i32)] = &[
            (b"21", -973_932_308),
            (b"foobar", -790_332_482),
            (b"a-little-bit-long-string", -985_981_536),
            (b"a-little-bit-longer-string", -1_486_304_829),
            (
                b"lkjh234lh9fiuh90y23oiuhsafujhadof229phr9h19h89h8",
                -58_897_971,
            ),
            (b"abc", 479_470_107),
        ];
        for (input, want) in cases {
            assert_eq!(
                murmur2(input),
                *want,
                "murmur2({:?})",
                String::from_utf8_lossy(input)
            );
        }
    }

    #[test]
    fn key_hash_is_stable_and_in_range() {
        let st = PartitionerState::new(Partitioner::KeyHash, 7);
        for n in 1..20 {
            for key in [&b"a"[..], b"user-42", b"", b"\xff\xfe"] {
                let p = st.choose(Some(key), n);
                assert!((0..n as i32).contains(&p));
                assert_eq!(p, st.choose(Some(key), n));
                assert_eq!(p, partition_for_key(key, n));
            }
        }
        // toPositive(-973932308) = 1173551340; % 10 = 0.
        assert_eq!(partition_for_key(b"21", 10), 0);
    }

    #[test]
    fn round_robin_cycles_and_random_covers() {
        let rr = PartitionerState::new(Partitioner::RoundRobin, 1);
        let got: Vec<i32> = (0..6).map(|_| rr.choose(None, 3)).collect();
        assert_eq!(got, vec![0, 1, 2, 0, 1, 2]);
        let rnd = PartitionerState::new(Partitioner::Random, 99);
        let mut seen = [false; 4];
        for _ in 0..200 {
            seen[rnd.choose(Some(b"k"), 4) as usize] = true;
        }
        assert!(seen.iter().all(|s| *s));
    }
}
