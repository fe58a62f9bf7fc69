//! Durable cluster metadata: topics, their partition counts, config overrides, which core
//! owns each partition, the SASL users' SCRAM credentials, and the ACLs.
//!
//! One JSON file, `DATA_DIR/weir-metadata.json`, replaced atomically (write a temp file,
//! fsync it, rename over the old one, fsync the directory), so a crash leaves either the old
//! or the new version. Core 0 is the only writer at run time (`crate::shard::Shard::admin_*`);
//! every core holds an `Arc<Metadata>` snapshot, replaced when core 0 sends a new one.

use std::collections::BTreeMap;
use std::io::Write;
use std::path::{Path, PathBuf};

use serde::{Deserialize, Serialize};

use crate::acl::{check_binding, AclBinding};
use crate::sasl::{valid_user_name, Mechanism, ScramCredential};

pub const METADATA_FILE: &str = "weir-metadata.json";
const FORMAT_VERSION: u32 = 1;
/// Space held back so that metadata can still be saved on a full disk (see `Metadata::save`).
pub const RESERVE_FILE: &str = ".weir-metadata-reserve";

/// Where a broker's clients connect, per listener (in `listeners` order): its bootstrap
/// (host, port), and with `listeners.per.core` each core's own (host, port).
#[derive(Debug, Clone, Serialize, Deserialize, PartialEq, Eq)]
pub struct ListenerEndpoints {
    pub host: String,
    pub port: i32,
    #[serde(default)]
    pub cores: Vec<(String, i32)>,
}

/// A registered broker: its core count, its client endpoints and its rack.
#[derive(Debug, Clone, Serialize, Deserialize, PartialEq, Eq)]
pub struct BrokerInfo {
    pub cores: usize,
    pub listeners: Vec<ListenerEndpoints>,
    /// `broker.rack` (absent in records of brokers without one, and of older weirs).
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub rack: Option<String>,
}

#[derive(Debug, Clone, Serialize, Deserialize, PartialEq, Eq)]
pub struct TopicMeta {
    /// Kafka topic id (UUID), as 16 bytes in hex.
    pub id: String,
    /// Owning core of each partition, indexed by partition number.
    pub owners: Vec<usize>,
    /// Topic-level config overrides (Kafka names, e.g. `retention.ms`).
    pub configs: BTreeMap<String, String>,
    /// In a cluster (`controller.quorum.voters`): the broker of each partition, indexed like
    /// `owners` (which then names a core of that broker). Empty on a standalone broker.
    #[serde(default, skip_serializing_if = "Vec::is_empty")]
    pub brokers: Vec<u64>,
    /// In a cluster, for a topic of replication factor above 1: every replica of each
    /// partition as (broker, core), indexed like `owners`; the first is the preferred leader
    /// and equals (`brokers[p]`, `owners[p]`). Empty at replication factor 1 (and in files
    /// written before replication), so those topics are stored exactly as before.
    #[serde(default, skip_serializing_if = "Vec::is_empty")]
    pub replicas: Vec<Vec<(u64, usize)>>,
    /// With `replicas`: the leader epoch (the Raft term of the partition's group) of the
    /// leader `brokers[p]` / `owners[p]` names, from the last `PartitionLeader` record
    /// applied; 0 before any. Empty when no leader was ever announced.
    #[serde(default, skip_serializing_if = "Vec::is_empty")]
    pub leader_epochs: Vec<u64>,
    /// With `replicas`: the brokers of each partition's in-sync replicas as its leader last
    /// reported them (`PartitionLeader` records); an empty list: not reported yet.
    #[serde(default, skip_serializing_if = "Vec::is_empty")]
    pub isr: Vec<Vec<u64>>,
}

#[derive(Debug, Clone, Serialize, Deserialize, PartialEq, Eq)]
pub struct Metadata {
    pub format_version: u32,
    /// Bumped on every change.
    pub epoch: u64,
    /// The number of cores the owners were spread over.
    pub cores: usize,
    pub topics: BTreeMap<String, TopicMeta>,
    /// SASL users: user name → SCRAM mechanism name (`SCRAM-SHA-256`, `SCRAM-SHA-512`) → the
    /// salted, hashed credential (never the password). Absent in files written before SASL.
    #[serde(default, skip_serializing_if = "BTreeMap::is_empty")]
    pub users: BTreeMap<String, BTreeMap<String, ScramCredential>>,
    /// ACLs (CreateAcls / DeleteAcls), in a stable order without duplicates.
    #[serde(default, skip_serializing_if = "Vec::is_empty")]
    pub acls: Vec<AclBinding>,
    /// In a cluster: every registered broker (`RegisterBroker` records, `crate::cluster`).
    #[serde(default, skip_serializing_if = "BTreeMap::is_empty")]
    pub brokers: BTreeMap<u64, BrokerInfo>,
    /// In a cluster: the index of the last metadata Raft entry applied to this snapshot
    /// (the file is the metadata group's applied state).
    #[serde(default, skip_serializing_if = "is_zero")]
    pub applied_index: u64,
    /// In a cluster: this broker's id (`node.id`), set at start-up, never stored. Partitions
    /// placed on other brokers have no owner core here (`owner` is `None`).
    #[serde(skip)]
    pub local_broker: Option<u64>,
}

fn is_zero(v: &u64) -> bool {
    *v == 0
}

impl Metadata {
    pub fn empty(cores: usize) -> Metadata {
        Metadata {
            format_version: FORMAT_VERSION,
            epoch: 0,
            cores,
            topics: BTreeMap::new(),
            users: BTreeMap::new(),
            acls: Vec::new(),
            brokers: BTreeMap::new(),
            applied_index: 0,
            local_broker: None,
        }
    }

    pub fn path(data_dir: &Path) -> PathBuf {
        data_dir.join(METADATA_FILE)
    }

    /// Loads the metadata of `data_dir`, or `None` if there is none yet.
    pub fn load(data_dir: &Path) -> Result<Option<Metadata>, String> {
        let path = Self::path(data_dir);
        let text = match std::fs::read(&path) {
            Ok(t) => t,
            Err(e) if e.kind() == std::io::ErrorKind::NotFound => return Ok(None),
            Err(e) => return Err(format!("reading {}: {e}", path.display())),
        };
        Self::parse(&text)
            .map(Some)
            .map_err(|e| format!("{}: {e}", path.display()))
    }

    /// Most partitions one topic may have (CreateTopics refuses more).
    pub const MAX_PARTITIONS: usize = 100_000;
    /// Most cores a metadata file may spread partitions over.
    pub const MAX_CORES: usize = 4096;

    /// Decodes and checks a metadata file's bytes: the JSON must parse, be of a known format
    /// version, and describe something the broker can open — valid topic names and ids, at
    /// least one and at most `MAX_PARTITIONS` partitions per topic, every owner a core below
    /// `cores`. Anything else is an error naming what is wrong, never a panic later.
    pub fn parse(bytes: &[u8]) -> Result<Metadata, String> {
        let m: Metadata =
            serde_json::from_slice(bytes).map_err(|e| format!("corrupt metadata file: {e}"))?;
        if m.format_version != FORMAT_VERSION {
            return Err(format!(
                "unsupported metadata format version {}",
                m.format_version
            ));
        }
        if m.cores == 0 || m.cores > Self::MAX_CORES {
            return Err(format!("invalid core count {}", m.cores));
        }
        for (name, t) in &m.topics {
            if !valid_topic_name(name) {
                return Err(format!("invalid topic name {name:?}"));
            }
            if t.id.len() != 32 || !t.id.bytes().all(|b| b.is_ascii_hexdigit()) {
                return Err(format!("topic {name}: invalid topic id {:?}", t.id));
            }
            if t.owners.is_empty() || t.owners.len() > Self::MAX_PARTITIONS {
                return Err(format!(
                    "topic {name}: invalid partition count {}",
                    t.owners.len()
                ));
            }
            // In a cluster a partition's core is one of its broker's, whose count may differ.
            let cores = if t.brokers.is_empty() {
                m.cores
            } else {
                if t.brokers.len() != t.owners.len() {
                    return Err(format!("topic {name}: brokers and owners differ in length"));
                }
                Self::MAX_CORES
            };
            if let Some(bad) = t.owners.iter().find(|&&o| o >= cores) {
                return Err(format!(
                    "topic {name}: owner core {bad} is not below the core count {cores}"
                ));
            }
            if !t.replicas.is_empty() {
                check_replicas(t).map_err(|e| format!("topic {name}: {e}"))?;
            }
        }
        for (name, creds) in &m.users {
            if !valid_user_name(name) {
                return Err(format!("invalid user name {name:?}"));
            }
            for (mech, c) in creds {
                if Mechanism::parse(mech).and_then(Mechanism::scram).is_none() {
                    return Err(format!("user {name}: {mech:?} is not a SCRAM mechanism"));
                }
                if !c.valid() {
                    return Err(format!("user {name}: corrupt {mech} credential"));
                }
            }
        }
        for b in &m.acls {
            check_binding(b).map_err(|e| format!("invalid ACL {b:?}: {e}"))?;
        }
        Ok(m)
    }

    /// The stored SCRAM credential of `user` for `mechanism`, if any.
    pub fn scram_credential(&self, user: &str, mechanism: Mechanism) -> Option<&ScramCredential> {
        self.users.get(user)?.get(mechanism.name())
    }

    /// Writes atomically: temp file, fsync, rename, fsync of the directory.
    ///
    /// On a full disk the write would fail, and with it the DeleteTopics that is meant to free
    /// space: so a reserve file (`RESERVE_FILE`, twice the metadata's size, at least 1 MiB) is
    /// kept beside it, given up when the temp file hits ENOSPC, and made again after a save.
    pub fn save(&self, data_dir: &Path) -> Result<(), String> {
        let path = Self::path(data_dir);
        let tmp = data_dir.join(format!("{METADATA_FILE}.tmp"));
        let reserve = data_dir.join(RESERVE_FILE);
        let bytes = serde_json::to_vec_pretty(self).map_err(|e| e.to_string())?;
        let write = || -> std::io::Result<()> {
            let mut f = std::fs::File::create(&tmp)?;
            f.write_all(&bytes)?;
            f.sync_all()?;
            drop(f);
            std::fs::rename(&tmp, &path)?;
            std::fs::File::open(data_dir)?.sync_all()
        };
        let mut res = write();
        if matches!(&res, Err(e) if e.raw_os_error() == Some(28)) && reserve.exists() {
            tracing::warn!(path = %path.display(), "disk full: using the metadata reserve");
            let _ = std::fs::remove_file(&reserve);
            res = write();
        }
        if res.is_ok() {
            let want = (2 * bytes.len() as u64).max(1 << 20);
            if std::fs::metadata(&reserve).map_or(true, |m| m.len() < want) {
                // Best effort: on a still-full disk this fails, and is tried again next save.
                let made = (|| -> std::io::Result<()> {
                    let mut f = std::fs::File::create(&reserve)?;
                    f.write_all(&vec![0u8; want as usize])?;
                    f.sync_all()
                })();
                if made.is_err() {
                    let _ = std::fs::remove_file(&reserve);
                }
            }
        }
        if res.is_err() {
            let _ = std::fs::remove_file(&tmp);
        }
        res.map_err(|e| format!("writing {}: {e}", path.display()))
    }

    /// Number of partitions each core owns.
    fn load_per_core(&self, cores: usize) -> Vec<usize> {
        let mut load = vec![0; cores];
        for t in self.topics.values() {
            for &c in &t.owners {
                if c < cores {
                    load[c] += 1;
                }
            }
        }
        load
    }

    /// Owners for `count` new partitions: each goes to the least loaded core.
    pub fn place_new(&self, count: usize) -> Vec<usize> {
        let mut load = self.load_per_core(self.cores);
        (0..count)
            .map(|_| {
                let (core, _) = load
                    .iter()
                    .enumerate()
                    .min_by_key(|(i, l)| (**l, *i))
                    .expect("at least one core");
                load[core] += 1;
                core
            })
            .collect()
    }

    /// Re-spreads every partition evenly over `cores` (called at start when the core count
    /// changed). Returns whether anything moved.
    pub fn respread(&mut self, cores: usize) -> bool {
        if self.cores == cores {
            return false;
        }
        self.cores = cores;
        let mut i = 0usize;
        for t in self.topics.values_mut() {
            for owner in t.owners.iter_mut() {
                *owner = i % cores;
                i += 1;
            }
        }
        self.epoch += 1;
        true
    }

    /// Owner core of a partition, if the partition exists on this broker (in a cluster, a
    /// partition placed on another broker has no owner here: see `placed_elsewhere`).
    pub fn owner(&self, topic: &str, partition: i32) -> Option<usize> {
        let t = self.topics.get(topic)?;
        let p = usize::try_from(partition).ok()?;
        if let (Some(here), Some(&b)) = (self.local_broker, t.brokers.get(p)) {
            if b != here {
                return None;
            }
        }
        t.owners.get(p).copied()
    }

    /// The core holding this broker's replica of a partition: `owner` for a partition of
    /// replication factor 1 (and on a standalone broker); for a replicated one, the core of
    /// this broker's replica whether or not it leads (`owner` names only the leader's).
    pub fn local_replica(&self, topic: &str, partition: i32) -> Option<usize> {
        let t = self.topics.get(topic)?;
        let p = usize::try_from(partition).ok()?;
        match (self.local_broker, t.replicas.get(p)) {
            (Some(here), Some(r)) if !r.is_empty() => {
                r.iter().find(|(b, _)| *b == here).map(|&(_, c)| c)
            }
            _ => self.owner(topic, partition),
        }
    }

    /// The leader epoch Metadata reports for a partition (0 until a leader was announced).
    pub fn leader_epoch(t: &TopicMeta, p: usize) -> u64 {
        t.leader_epochs.get(p).copied().unwrap_or(0)
    }

    /// The partition's leader epoch as clients see it (Metadata's `leader_epoch`), if the
    /// partition exists.
    pub fn partition_epoch(&self, topic: &str, partition: i32) -> Option<i32> {
        let t = self.topics.get(topic)?;
        let p = usize::try_from(partition)
            .ok()
            .filter(|&p| p < t.owners.len())?;
        Some(i32::try_from(Self::leader_epoch(t, p)).unwrap_or(i32::MAX))
    }

    /// Whether the partition exists (on this broker or, in a cluster, on any).
    pub fn has_partition(&self, topic: &str, partition: i32) -> bool {
        self.topics
            .get(topic)
            .is_some_and(|t| usize::try_from(partition).is_ok_and(|p| p < t.owners.len()))
    }

    /// In a cluster: the partition exists but lives on another broker (requests for it get
    /// NOT_LEADER_OR_FOLLOWER, and the client refreshes its metadata).
    pub fn placed_elsewhere(&self, topic: &str, partition: i32) -> bool {
        let (Some(here), Some(t)) = (self.local_broker, self.topics.get(topic)) else {
            return false;
        };
        usize::try_from(partition)
            .ok()
            .and_then(|p| t.brokers.get(p))
            .is_some_and(|&b| b != here)
    }

    /// Every replica of partition `p` of `t` as (broker, core), the preferred leader first
    /// (one replica at replication factor 1; broker `local` on a standalone broker).
    pub fn replicas_of(t: &TopicMeta, p: usize, local: u64) -> Vec<(u64, usize)> {
        match t.replicas.get(p) {
            Some(r) if !r.is_empty() => r.clone(),
            _ => vec![(
                t.brokers.get(p).copied().unwrap_or(local),
                t.owners.get(p).copied().unwrap_or(0),
            )],
        }
    }

    /// The topic's replication factor (1 unless it has replica lists).
    pub fn replication_factor(t: &TopicMeta) -> usize {
        t.replicas.first().map_or(1, |r| r.len().max(1))
    }

    /// The (broker, core) of every partition of `t`: the broker is `local` when the topic
    /// has no placement (a standalone broker).
    pub fn placement(t: &TopicMeta, local: u64) -> impl Iterator<Item = (u64, usize)> + '_ {
        t.owners
            .iter()
            .enumerate()
            .map(move |(p, &core)| (t.brokers.get(p).copied().unwrap_or(local), core))
    }
}

/// A replicated topic's replica lists against its `brokers` and `owners`: one list per
/// partition, of the same length for all, on distinct brokers, the first one the partition's
/// (`brokers[p]`, `owners[p]`) one of them (the leader), every core below
/// `Metadata::MAX_CORES`, one leader epoch per partition if any.
pub fn check_replicas(t: &TopicMeta) -> Result<(), String> {
    if t.replicas.len() != t.owners.len() || t.brokers.len() != t.owners.len() {
        return Err("replicas, brokers and owners differ in length".into());
    }
    if !t.leader_epochs.is_empty() && t.leader_epochs.len() != t.owners.len() {
        return Err("leader epochs and owners differ in length".into());
    }
    if !t.isr.is_empty() && t.isr.len() != t.owners.len() {
        return Err("in-sync replicas and owners differ in length".into());
    }
    let rf = t.replicas[0].len();
    for (p, r) in t.replicas.iter().enumerate() {
        if r.len() != rf || rf == 0 {
            return Err(format!("partition {p} has {} replicas, not {rf}", r.len()));
        }
        if !r.contains(&(t.brokers[p], t.owners[p])) {
            return Err(format!(
                "partition {p}: its leader is not one of its replicas"
            ));
        }
        if r.iter().any(|&(_, c)| c >= Metadata::MAX_CORES) {
            return Err(format!("partition {p}: a replica's core is out of range"));
        }
        let mut b: Vec<u64> = r.iter().map(|x| x.0).collect();
        b.sort_unstable();
        b.dedup();
        if b.len() != r.len() {
            return Err(format!("partition {p}: two replicas on one broker"));
        }
    }
    Ok(())
}

/// Directory of a partition's log: `DATA_DIR/topic-partition`, like Kafka.
pub fn partition_dir(data_dir: &Path, topic: &str, partition: i32) -> PathBuf {
    data_dir.join(format!("{topic}-{partition}"))
}

/// Kafka's topic name rule: 1..=249 characters of `[a-zA-Z0-9._-]`, not `.` or `..`.
pub fn valid_topic_name(name: &str) -> bool {
    !name.is_empty()
        && name.len() <= 249
        && name != "."
        && name != ".."
        && name
            .bytes()
            .all(|b| b.is_ascii_alphanumeric() || b == b'.' || b == b'_' || b == b'-')
}

/// A fresh topic id (random enough: time, counter and address entropy through a hash).
pub fn new_topic_id() -> String {
    use std::hash::{BuildHasher, Hasher};
    let mut out = String::with_capacity(32);
    for i in 0..2u64 {
        let mut h = std::collections::hash_map::RandomState::new().build_hasher();
        h.write_u64(i);
        h.write_u128(
            std::time::SystemTime::now()
                .duration_since(std::time::UNIX_EPOCH)
                .map(|d| d.as_nanos())
                .unwrap_or(0),
        );
        out.push_str(&format!("{:016x}", h.finish()));
    }
    out
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn save_load_roundtrip_and_respread() {
        let dir = std::env::temp_dir().join(format!("weir-meta-{}", std::process::id()));
        std::fs::create_dir_all(&dir).unwrap();
        let mut m = Metadata::empty(2);
        let owners = m.place_new(3);
        assert_eq!(owners, vec![0, 1, 0]);
        m.topics.insert(
            "t".into(),
            TopicMeta {
                id: new_topic_id(),
                owners,
                configs: BTreeMap::new(),
                brokers: Vec::new(),
                replicas: Vec::new(),
                leader_epochs: Vec::new(),
                isr: Vec::new(),
            },
        );
        m.save(&dir).unwrap();
        let back = Metadata::load(&dir).unwrap().unwrap();
        assert_eq!(back, m);
        let mut four = back.clone();
        assert!(four.respread(4));
        assert_eq!(four.topics["t"].owners, vec![0, 1, 2]);
        assert_eq!(four.owner("t", 2), Some(2));
        assert_eq!(four.owner("t", 3), None);
        assert_eq!(four.owner("t", -1), None);
        std::fs::remove_dir_all(&dir).unwrap();
    }

    #[test]
    fn parse_refuses_what_the_broker_cannot_open() {
        let mut m = Metadata::empty(2);
        m.topics.insert(
            "t".into(),
            TopicMeta {
                id: new_topic_id(),
                owners: vec![0, 1],
                configs: BTreeMap::new(),
                brokers: Vec::new(),
                replicas: Vec::new(),
                leader_epochs: Vec::new(),
                isr: Vec::new(),
            },
        );
        let good = serde_json::to_vec(&m).unwrap();
        assert_eq!(Metadata::parse(&good).unwrap(), m);
        let bad = |f: &dyn Fn(&mut Metadata)| {
            let mut b = m.clone();
            f(&mut b);
            Metadata::parse(&serde_json::to_vec(&b).unwrap()).unwrap_err()
        };
        assert!(bad(&|b| b.format_version = 9).contains("format version"));
        assert!(bad(&|b| b.cores = 0).contains("core count"));
        assert!(
            bad(&|b| b.topics.get_mut("t").unwrap().owners = vec![0, 2]).contains("owner core 2")
        );
        assert!(bad(&|b| b.topics.get_mut("t").unwrap().owners.clear()).contains("partition count"));
        assert!(bad(&|b| b.topics.get_mut("t").unwrap().id = "xyz".into()).contains("topic id"));
        assert!(bad(&|b| {
            let t = b.topics.remove("t").unwrap();
            b.topics.insert("a/b".into(), t);
        })
        .contains("topic name"));
        assert!(Metadata::parse(b"{\"format_version\": 1")
            .unwrap_err()
            .contains("corrupt"));
    }

    #[test]
    fn topic_names() {
        assert!(valid_topic_name("orders.v1_x-2"));
        assert!(!valid_topic_name(""));
        assert!(!valid_topic_name(".."));
        assert!(!valid_topic_name("a/b"));
        assert!(!valid_topic_name(&"x".repeat(250)));
    }
}
