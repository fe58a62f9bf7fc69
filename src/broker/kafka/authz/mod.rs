//! ACL checks of each request, on the core that serves the connection, from that core's
//! metadata snapshot (no lock, no hop): Kafka's required operation per API and its
//! *_AUTHORIZATION_FAILED answers.
//!
//! Three shapes, as the APIs need them:
//! - `gate`: the whole request is about one group or the cluster (JoinGroup, the ACL and
//!   user APIs, ...): refused as a whole, nothing processed.
//! - `split_*`: a request about several topics or groups that changes something (CreateTopics,
//!   DeleteRecords, AlterConfigs, DeleteGroups, OffsetCommit, ...): the denied ones are taken
//!   out before the handler runs — so nothing is done to them — and answered with the error
//!   after it (`patch_*`).
//! - `patch_*` alone: a request that only reads (Metadata, ListOffsets, DescribeConfigs,
//!   OffsetFetch, ...): the handler runs, and what the principal may not see is hidden or
//!   replaced by the error.
//!
//! Produce and Fetch check per topic inside their handlers (`produce.rs`, `fetch.rs`), so that
//! a denied partition is never written or read. With `authorizer.class.name` unset every
//! function here returns at once.

mod gate;
mod patch;

pub(super) use gate::gate;
pub(super) use patch::*;

use weir::acl::{self, Operation, ResourceType, Session, CLUSTER_NAME};

use super::{Body, Request};
use crate::broker::shard::Shard;

/// May `session` do `op` on (`rtype`, `name`)? Always with the authorizer off.
pub fn allowed(
    shard: &Shard,
    session: &Session,
    op: Operation,
    rtype: ResourceType,
    name: &str,
) -> bool {
    let cfg = &shard.config.authorizer;
    !cfg.enabled || acl::authorize(cfg, &shard.metadata().acls, session, op, rtype, name)
}

pub(super) fn cluster(shard: &Shard, session: &Session, op: Operation) -> bool {
    allowed(shard, session, op, ResourceType::Cluster, CLUSTER_NAME)
}

pub fn topic(shard: &Shard, session: &Session, op: Operation, name: &str) -> bool {
    allowed(shard, session, op, ResourceType::Topic, name)
}

pub(super) fn group(shard: &Shard, session: &Session, op: Operation, name: &str) -> bool {
    allowed(shard, session, op, ResourceType::Group, name)
}

pub fn transactional_id(shard: &Shard, session: &Session, op: Operation, name: &str) -> bool {
    allowed(shard, session, op, ResourceType::TransactionalId, name)
}

/// CREATE on the cluster or on the topic (CreateTopics, auto-creation).
pub fn may_create(shard: &Shard, session: &Session, name: &str) -> bool {
    cluster(shard, session, Operation::Create) || topic(shard, session, Operation::Create, name)
}

pub(super) fn on(shard: &Shard) -> bool {
    shard.config.authorizer.enabled
}

/// A request with its denied parts taken out, and what they were.
#[derive(Default)]
pub(super) struct Denied {
    pub names: Vec<String>,
}

impl Denied {
    pub fn is_empty(&self) -> bool {
        self.names.is_empty()
    }
}

/// Takes the denied topics (or groups) out of a request that changes them; returns the
/// request to process (`None`: the original, nothing denied) and what was taken out.
pub(super) fn split(shard: &Shard, req: &Request, session: &Session) -> (Option<Body>, Denied) {
    let mut denied = Denied::default();
    if !on(shard) {
        return (None, denied);
    }
    use Operation::*;
    let mut keep = |ok: bool, name: &str| {
        if !ok {
            denied.names.push(name.to_string());
        }
        ok
    };
    // A config resource is kept (or taken out) under its `config_key`.
    let keep_config = |keep: &mut dyn FnMut(bool, &str) -> bool, rtype: i8, name: &str| {
        let ok = config_resource_ok(shard, session, AlterConfigs, rtype, name);
        keep(ok, &config_key(rtype, name))
    };
    let body = match &req.body {
        Body::CreateTopics(c) => {
            let mut c = c.clone();
            c.topics
                .retain(|t| keep(may_create(shard, session, &t.name), &t.name));
            Body::CreateTopics(c)
        }
        Body::DeleteTopics(d) => {
            let mut d = d.clone();
            d.topic_names
                .retain(|t| keep(topic(shard, session, Delete, t), t));
            d.topics.retain(|t| {
                let name = match &t.name {
                    Some(n) => n.to_string(),
                    None => shard.topic_name(&t.topic_id).unwrap_or_default(),
                };
                // An unknown id is answered by the handler (UNKNOWN_TOPIC_ID).
                name.is_empty() || keep(topic(shard, session, Delete, &name), &name)
            });
            Body::DeleteTopics(d)
        }
        Body::CreatePartitions(c) => {
            let mut c = c.clone();
            c.topics
                .retain(|t| keep(topic(shard, session, Alter, &t.name), &t.name));
            Body::CreatePartitions(c)
        }
        Body::DeleteRecords(d) => {
            let mut d = d.clone();
            d.topics
                .retain(|t| keep(topic(shard, session, Delete, &t.name), &t.name));
            Body::DeleteRecords(d)
        }
        Body::AlterConfigs(a) => {
            let mut a = a.clone();
            a.resources
                .retain(|r| keep_config(&mut keep, r.resource_type, &r.resource_name));
            Body::AlterConfigs(a)
        }
        Body::IncrementalAlterConfigs(a) => {
            let mut a = a.clone();
            a.resources
                .retain(|r| keep_config(&mut keep, r.resource_type, &r.resource_name));
            Body::IncrementalAlterConfigs(a)
        }
        Body::DeleteGroups(d) => {
            let mut d = d.clone();
            d.groups_names
                .retain(|g| keep(group(shard, session, Delete, g), g));
            Body::DeleteGroups(d)
        }
        Body::OffsetCommit(c) => {
            let mut c = c.clone();
            c.topics
                .retain(|t| keep(topic(shard, session, Read, &t.name), &t.name));
            Body::OffsetCommit(c)
        }
        Body::TxnOffsetCommit(c) => {
            let mut c = c.clone();
            c.topics
                .retain(|t| keep(topic(shard, session, Read, &t.name), &t.name));
            Body::TxnOffsetCommit(c)
        }
        Body::OffsetDelete(d) => {
            let mut d = d.clone();
            d.topics
                .retain(|t| keep(topic(shard, session, Read, &t.name), &t.name));
            Body::OffsetDelete(d)
        }
        _ => return (None, denied),
    };
    if denied.is_empty() {
        (None, denied)
    } else {
        (Some(body), denied)
    }
}

/// The name a config resource is tracked by in `Denied` (type and name).
pub(super) fn config_key(rtype: i8, name: &str) -> String {
    format!("{rtype}/{name}")
}

/// Config resources: a topic (2) by its name, a broker (4) as the cluster.
pub(super) fn config_resource_ok(
    shard: &Shard,
    session: &Session,
    op: Operation,
    rtype: i8,
    name: &str,
) -> bool {
    match rtype {
        2 => topic(shard, session, op, name),
        _ => cluster(shard, session, op),
    }
}

pub(super) fn topic_error(denied: &Denied, name: &str) -> bool {
    denied.names.iter().any(|n| n == name)
}
