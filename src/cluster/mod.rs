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
    /// A new topic; `id` and `partitions` are filled in by the metadata leader (`plan`).
    CreateTopic {
        name: String,
        count: usize,
        #[serde(default)]
        id: String,
        #[serde(default)]
        partitions: Vec<Placement>,
        configs: BTreeMap<String, String>,
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
    /// Grows a topic to `count` partitions; `added` is filled in by the metadata leader.
    CreatePartitions {
        topic: String,
        count: usize,
        #[serde(default)]
        added: Vec<Placement>,
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
    Invalid(String),
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

/// Partitions per (broker, core) of `meta`, for every core of every registered broker.
fn load(meta: &Metadata) -> BTreeMap<(u64, usize), usize> {
    let mut load = BTreeMap::new();
    for (&b, info) in &meta.brokers {
        for c in 0..info.cores.max(1) {
            load.insert((b, c), 0usize);
        }
    }
    for t in meta.topics.values() {
        for (b, c) in Metadata::placement(t, 0) {
            if let Some(n) = load.get_mut(&(b, c)) {
                *n += 1;
            }
        }
    }
    load
}

/// `count` new partitions, each on the least loaded (broker, core) of the registered
/// brokers (ties: the lowest broker, then core).
fn place(load: &mut BTreeMap<(u64, usize), usize>, count: usize) -> Result<Vec<Placement>, String> {
    (0..count)
        .map(|_| {
            let (&(broker, core), n) = load
                .iter_mut()
                .min_by_key(|(k, n)| (**n, **k))
                .ok_or("no broker has registered yet")?;
            *n += 1;
            Ok(Placement { broker, core })
        })
        .collect()
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
                ..
            } => {
                if id.is_empty() {
                    *id = crate::metadata::new_topic_id();
                }
                if partitions.is_empty() {
                    *partitions = place(&mut load(meta), *count)?;
                }
            }
            Record::CreatePartitions {
                topic,
                count,
                added,
            } => {
                let current = meta.topics.get(topic).map_or(0, |t| t.owners.len());
                if added.is_empty() && *count > current {
                    *added = place(&mut load(meta), *count - current)?;
                }
            }
            _ => {}
        }
        Ok(())
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
        } => {
            if !valid_topic_name(name) {
                return Outcome::Invalid(format!("invalid topic name '{name}'"));
            }
            if meta.topics.contains_key(name) {
                return Outcome::TopicExists;
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
            meta.topics.insert(
                name.clone(),
                TopicMeta {
                    id: id.clone(),
                    owners: partitions.iter().map(|p| p.core).collect(),
                    configs: configs.clone(),
                    brokers: partitions.iter().map(|p| p.broker).collect(),
                },
            );
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
        } => {
            let Some(t) = meta.topics.get_mut(topic) else {
                return Outcome::UnknownTopic;
            };
            let current = t.owners.len();
            if *count <= current
                || *count > Metadata::MAX_PARTITIONS
                || added.len() != count - current
            {
                return Outcome::InvalidPartitions(format!(
                    "topic '{topic}' has {current} partitions; cannot grow to {count} with {} placed",
                    added.len()
                ));
            }
            if t.brokers.len() != current {
                return Outcome::Invalid(format!("topic '{topic}' has no cluster placement"));
            }
            t.owners.extend(added.iter().map(|p| p.core));
            t.brokers.extend(added.iter().map(|p| p.broker));
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

#[cfg(test)]
mod tests;
