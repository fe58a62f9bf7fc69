//! The metadata file (`weir-metadata.json`) on arbitrary bytes: `Metadata::parse` must never
//! panic; whatever it accepts must be something the broker can open — every owner a core below
//! the core count (in a cluster's file, a core of the partition's broker), at least one
//! partition per topic — must stay so after the start-up
//! re-spread to another core count and after placing new partitions, and must survive its own
//! save format (serialize, parse again, same metadata).
#![no_main]

use libfuzzer_sys::fuzz_target;
use weir::metadata::Metadata;

fuzz_target!(|data: &[u8]| {
    let Ok(m) = Metadata::parse(data) else {
        return;
    };
    for t in m.topics.values() {
        assert!(!t.owners.is_empty());
        if t.brokers.is_empty() {
            assert!(t.owners.iter().all(|&o| o < m.cores));
        } else {
            // A cluster's topic: each partition on a core of its own broker.
            assert_eq!(t.brokers.len(), t.owners.len());
            assert!(t.owners.iter().all(|&o| o < Metadata::MAX_CORES));
        }
    }
    let again = Metadata::parse(&serde_json::to_vec_pretty(&m).expect("serialize"))
        .expect("a parsed file re-parses");
    assert_eq!(again, m);
    for p in 0..=m.topics.values().map(|t| t.owners.len()).max().unwrap_or(0) as i32 {
        for (name, t) in &m.topics {
            if let (Some(o), true) = (m.owner(name, p), t.brokers.is_empty()) {
                assert!(o < m.cores);
            }
        }
    }
    let cores = 1 + (data.len() % 7);
    let mut spread = m.clone();
    spread.respread(cores);
    assert!(spread.topics.values().all(|t| t.owners.iter().all(|&o| o < cores)));
    let placed = spread.place_new(3);
    assert!(placed.iter().all(|&o| o < cores));
});
