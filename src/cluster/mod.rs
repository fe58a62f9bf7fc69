//! Cluster metadata records (docs/replication.md §4): what the metadata Raft group's log
//! holds, how a record changes a `Metadata`, and how the metadata leader fills in what only
//! it decides (a new topic's id and where each partition lives).
//!
//! Every broker applies the same committed records in the same order to its own
//! `Metadata`; `apply` is deterministic (it reads nothing but the record and the metadata),
//! so every broker ends with the same topics, ids, placements and configs. An entry of the
//! log is one `Batch`: the records of one admin request, tagged with the request's id so
//! that the broker that asked can tell its own entry from one that replaced it after a
//! change of leader.

use std::collections::BTreeMap;

use serde::{Deserialize, Serialize};

use crate::acl::AclBinding;
use crate::metadata::{valid_topic_name, Metadata, TopicMeta};
pub use crate::metadata::{BrokerInfo, ListenerEndpoints};
use crate::sasl::ScramCredential;

mod placement;
pub use placement::place_assigned;
use placement::{load, place};

/// In a cluster with `listeners.per.core`, the Kafka node id of core `c` of broker `b` is
/// `b * NODE_ID_STRIDE + c` (docs/replication.md §4.3).
pub const NODE_ID_STRIDE: i32 = 1024;

/// Largest broker id (`node.id`): node ids of every core must fit an `i32`.
pub const MAX_BROKER_ID: u64 = (i32::MAX / NODE_ID_STRIDE) as u64 - 1;

/// One member of the metadata group: its broker id and its inter-broker address.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct Voter {
    pub id: u64,
    pub addr: String,
}

/// Parses `controller.quorum.voters` (Kafka's form): `ID@HOST:PORT,ID@HOST:PORT,...`.
pub fn parse_voters(s: &str) -> Result<Vec<Voter>, String> {
    let mut out: Vec<Voter> = Vec::new();
    for part in s.split(',').map(str::trim).filter(|p| !p.is_empty()) {
        let (id, addr) = part
            .split_once('@')
            .ok_or_else(|| format!("controller.quorum.voters: '{part}': expected ID@HOST:PORT"))?;
        let id: u64 = id
            .trim()
            .parse()
            .map_err(|_| format!("controller.quorum.voters: '{id}' is not a broker id"))?;
        if id == 0 || id > MAX_BROKER_ID {
            return Err(format!(
                "controller.quorum.voters: broker id {id} is not in 1..={MAX_BROKER_ID}"
            ));
        }
        if addr
            .rsplit_once(':')
            .is_none_or(|(_, p)| p.parse::<u16>().is_err())
        {
            return Err(format!(
                "controller.quorum.voters: '{addr}': expected HOST:PORT"
            ));
        }
        if out.iter().any(|v| v.id == id) {
            return Err(format!("controller.quorum.voters: broker {id} named twice"));
        }
        out.push(Voter {
            id,
            addr: addr.trim().to_string(),
        });
    }
    Ok(out)
}

/// The broker of every placement on a standalone broker (cluster broker ids start at 1): a
/// topic placed there keeps no broker list (`TopicMeta::brokers` is empty).
pub const STANDALONE: u64 = 0;

/// Where one partition lives (replication factor 1): a broker and one of its cores.
#[derive(Debug, Clone, Copy, Serialize, Deserialize, PartialEq, Eq)]
pub struct Placement {
    pub broker: u64,
    pub core: usize,
}

/// One change of the cluster metadata.
#[derive(Debug, Clone, Serialize, Deserialize, PartialEq, Eq)]
#[serde(tag = "type")]
pub enum Record {
    /// A broker announces (or changes) its endpoints.
    RegisterBroker {
        id: u64,
        info: BrokerInfo,
    },
    /// A new topic; `id`, `partitions` and (replication factor above 1) `replicas` are
    /// filled in by the metadata leader (`plan`). `partitions[p]` is the preferred leader,
    /// `replicas[p]` every replica of `p`, it first. Records of replication factor 1 carry
    /// neither of the new fields, and records written before them decode as factor 1.
    CreateTopic {
        name: String,
        count: usize,
        #[serde(default)]
        id: String,
        #[serde(default)]
        partitions: Vec<Placement>,
        configs: BTreeMap<String, String>,
        #[serde(default = "one", skip_serializing_if = "is_one")]
        replication_factor: usize,
        #[serde(default, skip_serializing_if = "Vec::is_empty")]
        replicas: Vec<Vec<Placement>>,
    },
    DeleteTopic {
        name: String,
    },
    /// Config overrides: with `replace_all` the set becomes exactly the `Some` ops (the
    /// legacy AlterConfigs); otherwise each op sets (`Some`) or deletes (`None`) one key.
    AlterConfigs {
        topic: String,
        replace_all: bool,
        ops: Vec<(String, Option<String>)>,
    },
    /// Grows a topic to `count` partitions; `added` (and, when the topic's replication
    /// factor is above 1, `added_replicas`) is filled in by the metadata leader.
    CreatePartitions {
        topic: String,
        count: usize,
        #[serde(default)]
        added: Vec<Placement>,
        #[serde(default, skip_serializing_if = "Vec::is_empty")]
        added_replicas: Vec<Vec<Placement>>,
    },
    /// A replicated partition's group elected a leader (its Raft term = the leader epoch):
    /// submitted by that leader so every broker's Metadata names it (KRaft's partition
    /// change record). Applied only if the epoch is newer than the one stored and the
    /// (broker, core) is one of the partition's replicas of that topic id; at the stored
    /// epoch, from the stored leader, it only updates the in-sync replicas (`isr`, broker
    /// ids; empty: not reported).
    PartitionLeader {
        topic: String,
        topic_id: String,
        partition: usize,
        broker: u64,
        core: usize,
        epoch: u64,
        #[serde(default, skip_serializing_if = "Vec::is_empty")]
        isr: Vec<u64>,
    },
    /// Stores (`Some`) or deletes (`None`) a SASL user's credential for one SCRAM mechanism.
    AlterUser {
        user: String,
        mechanism: String,
        credential: Option<ScramCredential>,
    },
    CreateAcls {
        acls: Vec<AclBinding>,
    },
    /// Deletes these ACLs (the filters were resolved by the broker that was asked).
    DeleteAcls {
        acls: Vec<AclBinding>,
    },
}

fn one() -> usize {
    1
}

fn is_one(v: &usize) -> bool {
    *v == 1
}

/// What applying a record did (the same on every broker).
#[derive(Debug, Clone, PartialEq, Eq, Serialize, Deserialize)]
pub enum Outcome {
    Done,
    /// Nothing changed (e.g. a broker registering the endpoints it already had).
    Unchanged,
    TopicExists,
    UnknownTopic,
    /// Deleting a user credential that does not exist.
    NotFound,
    InvalidPartitions(String),
    /// More replicas asked for than there are registered brokers.
    InvalidReplicationFactor(String),
    Invalid(String),
    /// Only on a standalone broker: a partition log of the change could not be opened (a
    /// file in the way, EIO, no file descriptors left), so the change was undone.
    StorageError(String),
    /// Only on a standalone broker: the change would hold more partitions than
    /// `max.partitions` (checked again under the admin lock: requests race).
    PolicyViolation(String),
}

/// One entry of the metadata log: the records of one admin request, tagged with its id.
#[derive(Debug, Clone, Serialize, Deserialize, PartialEq, Eq)]
pub struct Batch {
    pub req: u64,
    pub records: Vec<Record>,
}

impl Batch {
    pub fn encode(&self) -> Vec<u8> {
        serde_json::to_vec(self).expect("a batch of records serializes")
    }

    pub fn decode(bytes: &[u8]) -> Result<Batch, String> {
        serde_json::from_slice(bytes).map_err(|e| format!("corrupt metadata record: {e}"))
    }
}

impl Record {
    /// Fills in what the metadata leader decides, from its applied metadata: a new topic's
    /// id and the placement of new partitions. An error is transient (no broker registered
    /// yet): the caller retries.
    pub fn plan(&mut self, meta: &Metadata) -> Result<(), String> {
        match self {
            Record::CreateTopic {
                id,
                count,
                partitions,
                replication_factor,
                replicas,
                ..
            } => {
                if id.is_empty() {
                    *id = crate::metadata::new_topic_id();
                }
                // Too few brokers: left unplaced, and `apply` refuses the record.
                if partitions.is_empty()
                    && (*replication_factor <= meta.brokers.len() || meta.brokers.is_empty())
                {
                    let placed = place(meta, &mut load(meta), *count, *replication_factor)?;
                    *partitions = placed.iter().map(|r| r[0]).collect();
                    if *replication_factor > 1 {
                        *replicas = placed;
                    }
                }
            }
            Record::CreatePartitions {
                topic,
                count,
                added,
                added_replicas,
            } => {
                let Some(t) = meta.topics.get(topic) else {
                    return Ok(());
                };
                let current = t.owners.len();
                let rf = Metadata::replication_factor(t);
                if added.is_empty()
                    && *count > current
                    && (rf <= meta.brokers.len() || meta.brokers.is_empty())
                {
                    let placed = place(meta, &mut load(meta), *count - current, rf)?;
                    *added = placed.iter().map(|r| r[0]).collect();
                    if rf > 1 {
                        *added_replicas = placed;
                    }
                }
            }
            _ => {}
        }
        Ok(())
    }

    /// `plan` on a standalone broker: a new topic's id, and new partitions spread over this
    /// broker's cores (the least loaded first; broker [`STANDALONE`]). Records a request placed
    /// itself (an explicit assignment) keep their placement.
    pub fn plan_standalone(&mut self, meta: &Metadata) {
        let here = |cores: Vec<usize>| -> Vec<Placement> {
            cores
                .into_iter()
                .map(|core| Placement {
                    broker: STANDALONE,
                    core,
                })
                .collect()
        };
        match self {
            Record::CreateTopic {
                id,
                count,
                partitions,
                ..
            } => {
                if id.is_empty() {
                    *id = crate::metadata::new_topic_id();
                }
                if partitions.is_empty() && *count <= Metadata::MAX_PARTITIONS {
                    *partitions = here(meta.place_new(*count));
                }
            }
            Record::CreatePartitions {
                topic,
                count,
                added,
                ..
            } => {
                let current = meta.topics.get(topic).map_or(0, |t| t.owners.len());
                if added.is_empty() && *count > current && *count <= Metadata::MAX_PARTITIONS {
                    *added = here(meta.place_new(*count - current));
                }
            }
            _ => {}
        }
    }
}

/// Applies one committed record to `meta`. Deterministic: every broker gets the same
/// outcome and the same metadata. A record that cannot apply (a topic created twice by two
/// racing requests) changes nothing and says why.
pub fn apply(meta: &mut Metadata, record: &Record) -> Outcome {
    match record {
        Record::RegisterBroker { id, info } => {
            if meta.brokers.get(id) == Some(info) {
                return Outcome::Unchanged;
            }
            meta.brokers.insert(*id, info.clone());
            Outcome::Done
        }
        Record::CreateTopic {
            name,
            count,
            id,
            partitions,
            configs,
            replication_factor,
            replicas,
        } => {
            if !valid_topic_name(name) {
                return Outcome::Invalid(format!("invalid topic name '{name}'"));
            }
            if meta.topics.contains_key(name) {
                return Outcome::TopicExists;
            }
            if *replication_factor != 1 && partitions.is_empty() {
                return Outcome::InvalidReplicationFactor(format!(
                    "replication factor {replication_factor} is larger than the number of \
                     registered brokers"
                ));
            }
            if *count == 0 || *count > Metadata::MAX_PARTITIONS || partitions.len() != *count {
                return Outcome::InvalidPartitions(format!(
                    "invalid partition count {count} ({} placed)",
                    partitions.len()
                ));
            }
            if id.len() != 32 || !id.bytes().all(|b| b.is_ascii_hexdigit()) {
                return Outcome::Invalid(format!("invalid topic id {id:?}"));
            }
            let standalone = partitions.iter().all(|p| p.broker == STANDALONE);
            if !standalone && partitions.iter().any(|p| p.broker == STANDALONE) {
                return Outcome::Invalid(format!("topic '{name}' is placed on broker 0"));
            }
            let topic = TopicMeta {
                id: id.clone(),
                owners: partitions.iter().map(|p| p.core).collect(),
                configs: configs.clone(),
                brokers: if standalone {
                    Vec::new()
                } else {
                    partitions.iter().map(|p| p.broker).collect()
                },
                replicas: replica_lists(replicas),
                leader_epochs: Vec::new(),
                isr: Vec::new(),
            };
            if let Err(o) = check_factor(&topic, *replication_factor) {
                return o;
            }
            meta.topics.insert(name.clone(), topic);
            Outcome::Done
        }
        Record::DeleteTopic { name } => match meta.topics.remove(name) {
            Some(_) => Outcome::Done,
            None => Outcome::UnknownTopic,
        },
        Record::AlterConfigs {
            topic,
            replace_all,
            ops,
        } => {
            let Some(t) = meta.topics.get_mut(topic) else {
                return Outcome::UnknownTopic;
            };
            let mut configs = if *replace_all {
                BTreeMap::new()
            } else {
                t.configs.clone()
            };
            for (k, v) in ops {
                match v {
                    Some(v) => configs.insert(k.clone(), v.clone()),
                    None => configs.remove(k),
                };
            }
            if configs == t.configs {
                return Outcome::Unchanged;
            }
            t.configs = configs;
            Outcome::Done
        }
        Record::CreatePartitions {
            topic,
            count,
            added,
            added_replicas,
        } => {
            let Some(t) = meta.topics.get_mut(topic) else {
                return Outcome::UnknownTopic;
            };
            let current = t.owners.len();
            let rf = Metadata::replication_factor(t);
            if rf > 1 && added.is_empty() && *count > current {
                return Outcome::InvalidReplicationFactor(format!(
                    "topic '{topic}' has {rf} replicas per partition: more than the \
                     registered brokers"
                ));
            }
            if *count <= current
                || *count > Metadata::MAX_PARTITIONS
                || added.is_empty()
                || added.len() != count - current
            {
                return Outcome::InvalidPartitions(format!(
                    "topic '{topic}' has {current} partitions; cannot grow to {count} with {} placed",
                    added.len()
                ));
            }
            // A standalone broker's topic (no broker list) grows on broker 0 alone; a
            // cluster's on registered brokers alone.
            let standalone = t.brokers.is_empty();
            if added.iter().any(|p| (p.broker == STANDALONE) != standalone)
                || (!standalone && t.brokers.len() != current)
            {
                return Outcome::Invalid(format!("topic '{topic}' has no cluster placement"));
            }
            let mut grown = t.clone();
            grown.owners.extend(added.iter().map(|p| p.core));
            if !standalone {
                grown.brokers.extend(added.iter().map(|p| p.broker));
            }
            if rf > 1 {
                grown.replicas.extend(replica_lists(added_replicas));
                if !grown.leader_epochs.is_empty() {
                    grown.leader_epochs.resize(grown.owners.len(), 0);
                }
                // New partitions have no reported in-sync replicas yet (Metadata then names
                // the leader alone), like the unreported ones of a new topic.
                if !grown.isr.is_empty() {
                    grown.isr.resize(grown.owners.len(), Vec::new());
                }
            }
            if let Err(o) = check_factor(&grown, rf) {
                return o;
            }
            *t = grown;
            Outcome::Done
        }
        Record::PartitionLeader {
            topic,
            topic_id,
            partition,
            broker,
            core,
            epoch,
            isr,
        } => {
            let Some(t) = meta.topics.get_mut(topic).filter(|t| t.id == *topic_id) else {
                return Outcome::UnknownTopic;
            };
            let p = *partition;
            let Some(replicas) = t.replicas.get(p) else {
                return Outcome::Invalid(format!("{topic}-{p} is not replicated"));
            };
            if !replicas.contains(&(*broker, *core))
                || isr.iter().any(|b| replicas.iter().all(|r| r.0 != *b))
            {
                return Outcome::Invalid(format!(
                    "broker {broker} core {core} (in sync: {isr:?}) is not a replica of {topic}-{p}"
                ));
            }
            if t.leader_epochs.is_empty() {
                t.leader_epochs = vec![0; t.owners.len()];
            }
            if t.isr.is_empty() {
                t.isr = vec![Vec::new(); t.owners.len()];
            }
            let stored = t.leader_epochs[p];
            let same_leader = *epoch == stored && t.brokers[p] == *broker && t.owners[p] == *core;
            if *epoch < stored
                || (*epoch == stored && !same_leader)
                || (same_leader && (isr.is_empty() || *isr == t.isr[p]))
            {
                return Outcome::Unchanged;
            }
            t.leader_epochs[p] = *epoch;
            t.brokers[p] = *broker;
            t.owners[p] = *core;
            t.isr[p] = isr.clone();
            Outcome::Done
        }
        Record::AlterUser {
            user,
            mechanism,
            credential,
        } => match credential {
            Some(c) => {
                let creds = meta.users.entry(user.clone()).or_default();
                if creds.get(mechanism) == Some(c) {
                    return Outcome::Unchanged;
                }
                creds.insert(mechanism.clone(), c.clone());
                Outcome::Done
            }
            None => {
                let Some(creds) = meta.users.get_mut(user) else {
                    return Outcome::NotFound;
                };
                if creds.remove(mechanism).is_none() {
                    return Outcome::NotFound;
                }
                if creds.is_empty() {
                    meta.users.remove(user);
                }
                Outcome::Done
            }
        },
        Record::CreateAcls { acls } => {
            let before = meta.acls.len();
            meta.acls.extend(acls.iter().cloned());
            meta.acls.sort();
            meta.acls.dedup();
            if meta.acls.len() == before {
                Outcome::Unchanged
            } else {
                Outcome::Done
            }
        }
        Record::DeleteAcls { acls } => {
            let before = meta.acls.len();
            meta.acls.retain(|b| !acls.contains(b));
            if meta.acls.len() == before {
                Outcome::Unchanged
            } else {
                Outcome::Done
            }
        }
    }
}

/// A record's replica lists as `TopicMeta` stores them.
fn replica_lists(replicas: &[Vec<Placement>]) -> Vec<Vec<(u64, usize)>> {
    replicas
        .iter()
        .map(|r| r.iter().map(|p| (p.broker, p.core)).collect())
        .collect()
}

/// Whether `t` (built from a record) has `rf` replicas per partition, placed consistently:
/// a record the leader could not place (too few brokers) is refused here, the same way on
/// every broker.
fn check_factor(t: &TopicMeta, rf: usize) -> Result<(), Outcome> {
    if rf == 1 {
        return if t.replicas.is_empty() {
            Ok(())
        } else {
            Err(Outcome::Invalid(
                "replica lists at replication factor 1".into(),
            ))
        };
    }
    if rf == 0 || t.replicas.first().is_none_or(|r| r.len() != rf) {
        return Err(Outcome::InvalidReplicationFactor(format!(
            "replication factor {rf} is larger than the number of registered brokers"
        )));
    }
    crate::metadata::check_replicas(t).map_err(Outcome::Invalid)
}

#[cfg(test)]
mod standalone_tests;
#[cfg(test)]
mod tests;
