//! The group operations that look at or remove whole groups rather than members:
//! DescribeGroups, ListGroups, DeleteGroups, and a deleted topic's offsets.

use std::collections::BTreeMap;

use super::coordinator::*;

impl Coordinator {
    pub fn describe(&self, group_id: &str) -> GroupDescription {
        let mut d = GroupDescription {
            error: codes::NONE,
            state: "Dead".into(),
            protocol_type: String::new(),
            protocol: String::new(),
            members: Vec::new(),
        };
        if !self.offsets.owns(group_id) {
            d.error = codes::NOT_COORDINATOR;
            return d;
        }
        let Some(group) = self.group(group_id) else {
            if self
                .offsets
                .store(group_id)
                .is_some_and(|s| !s.all(group_id).is_empty())
            {
                d.state = "Empty".into();
            }
            return d;
        };
        let g = group.borrow();
        d.state = g.state.name().into();
        d.protocol_type = g.protocol_type.clone().unwrap_or_default();
        d.protocol = g.protocol.clone().unwrap_or_default();
        for id in &g.order {
            let Some(m) = g.members.get(id) else { continue };
            d.members.push(MemberDescription {
                member_id: id.clone(),
                group_instance_id: m.group_instance_id.clone(),
                client_id: m.client_id.clone(),
                client_host: m.client_host.clone(),
                metadata: m
                    .protocols
                    .iter()
                    .find(|(p, _)| Some(p) == g.protocol.as_ref())
                    .map(|(_, md)| md.clone())
                    .unwrap_or_default(),
                assignment: m.assignment.clone(),
            });
            let _ = &m.protocol_type;
        }
        d
    }

    /// Groups on this core: (group id, protocol type, state).
    pub fn list(&self) -> Vec<(String, String, String)> {
        let mut out: BTreeMap<String, (String, String)> = BTreeMap::new();
        for store in self.offsets.open_stores() {
            for g in store.groups() {
                out.insert(g, ("consumer".into(), "Empty".into()));
            }
        }
        for (id, g) in self.groups.borrow().iter() {
            let g = g.borrow();
            out.insert(
                id.clone(),
                (
                    g.protocol_type.clone().unwrap_or_else(|| "consumer".into()),
                    g.state.name().into(),
                ),
            );
        }
        out.into_iter().map(|(k, (t, s))| (k, t, s)).collect()
    }

    pub async fn delete_group(&self, group_id: &str) -> i16 {
        if !self.offsets.owns(group_id) {
            return codes::NOT_COORDINATOR;
        }
        let store = self.offsets.store(group_id);
        let in_memory = self.group(group_id);
        if let Some(g) = &in_memory {
            if !g.borrow().members.is_empty() {
                return codes::NON_EMPTY_GROUP;
            }
        }
        let had_offsets = store.as_ref().is_some_and(|s| !s.all(group_id).is_empty());
        if in_memory.is_none() && !had_offsets {
            return codes::GROUP_ID_NOT_FOUND;
        }
        let deleted = match &store {
            Some(s) => s.delete(Some(group_id), None).await.map(|_| ()),
            None => Ok(()),
        };
        if let Err(e) = deleted {
            tracing::warn!(group = group_id, error = %e, "deleting group offsets failed");
            return e.code();
        }
        self.groups.borrow_mut().remove(group_id);
        codes::NONE
    }

    /// Forgets the committed offsets of a deleted topic, in every group on this core.
    pub async fn topic_deleted(&self, topic: &str) {
        let stores = self.offsets.open_stores();
        for store in stores {
            if let Err(e) = store.delete(None, Some(topic)).await {
                tracing::warn!(topic, error = %e, "deleting offsets of a deleted topic failed");
            }
        }
    }
}
