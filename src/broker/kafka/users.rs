//! DescribeUserScramCredentials and AlterUserScramCredentials: the SASL users (`weir user`,
//! Kafka's `kafka-configs.sh --entity-type users`, AdminClient's `alter_user_scram_credentials`).
//!
//! Describe reads this core's metadata snapshot. Alter checks each change's form here, then
//! core 0 (the only metadata writer) checks it against the current users, stores the
//! credentials durably and makes every core apply them before the answer — so a client told
//! "done" can log in on any core at once.

use std::collections::BTreeMap;
use std::rc::Rc;

use kafka_protocol::messages::alter_user_scram_credentials_response::AlterUserScramCredentialsResult;
use kafka_protocol::messages::describe_user_scram_credentials_response::{
    CredentialInfo, DescribeUserScramCredentialsResult,
};
use kafka_protocol::messages::*;
use weir::sasl::scram::{self, Hash};
use weir::sasl::valid_user_name;

use super::s;
use crate::broker::errors;
use crate::broker::shard::{AlterUsersCall, Shard, UserChange, STOPPING};

pub(super) fn describe_user_scram_credentials(
    shard: &Rc<Shard>,
    d: &DescribeUserScramCredentialsRequest,
) -> DescribeUserScramCredentialsResponse {
    let meta = shard.metadata();
    let mut resp = DescribeUserScramCredentialsResponse::default();
    let asked: Vec<String> = match &d.users {
        Some(users) if !users.is_empty() => users.iter().map(|u| u.name.to_string()).collect(),
        _ => meta.users.keys().cloned().collect(),
    };
    let mut seen = BTreeMap::new();
    for name in &asked {
        *seen.entry(name.as_str()).or_insert(0) += 1;
    }
    for name in seen.keys() {
        let mut r = DescribeUserScramCredentialsResult::default();
        r.user = s(name);
        if seen[name] > 1 {
            r.error_code = errors::DUPLICATE_RESOURCE;
            r.error_message = Some(s(
                "Cannot describe SCRAM credentials for the same user twice in a single request",
            ));
        } else if let Some(creds) = meta.users.get(*name) {
            r.credential_infos = creds
                .iter()
                .filter_map(|(mech, c)| {
                    let hash = weir::sasl::Mechanism::parse(mech)?.scram()?;
                    let mut i = CredentialInfo::default();
                    i.mechanism = hash.wire_type();
                    i.iterations = c.iterations as i32;
                    Some(i)
                })
                .collect();
        } else {
            r.error_code = errors::RESOURCE_NOT_FOUND;
            r.error_message = Some(s(&format!(
                "Attempt to describe a user credential that does not exist: {name}"
            )));
        }
        resp.results.push(r);
    }
    resp
}

/// One user's outcome, checked locally: the changes to send to core 0, or the error.
type Checked = Result<Vec<UserChange>, (i16, String)>;

fn check_user(
    name: &str,
    deletions: &[&alter_user_scram_credentials_request::ScramCredentialDeletion],
    upsertions: &[&alter_user_scram_credentials_request::ScramCredentialUpsertion],
) -> Checked {
    if deletions.len() + upsertions.len() > 1 {
        return Err((
            errors::DUPLICATE_RESOURCE,
            "A user credential cannot be altered twice in the same request".into(),
        ));
    }
    if !valid_user_name(name) {
        return Err((
            errors::UNACCEPTABLE_CREDENTIAL,
            "Username must be 1 to 256 characters with no control characters".into(),
        ));
    }
    let unknown = |t: i8| {
        (
            errors::UNSUPPORTED_SASL_MECHANISM,
            format!("Unknown SCRAM mechanism {t} (1: SCRAM-SHA-256, 2: SCRAM-SHA-512)"),
        )
    };
    if let Some(d) = deletions.first() {
        let hash = Hash::from_wire_type(d.mechanism).ok_or_else(|| unknown(d.mechanism))?;
        return Ok(vec![UserChange {
            user: name.to_string(),
            mechanism: hash.mechanism(),
            credential: None,
        }]);
    }
    let u = upsertions[0];
    let hash = Hash::from_wire_type(u.mechanism).ok_or_else(|| unknown(u.mechanism))?;
    let iterations = u32::try_from(u.iterations).unwrap_or(0);
    if !(scram::MIN_ITERATIONS..=scram::MAX_ITERATIONS).contains(&iterations) {
        return Err((
            errors::UNACCEPTABLE_CREDENTIAL,
            format!(
                "Iterations {} must be between {} and {}",
                u.iterations,
                scram::MIN_ITERATIONS,
                scram::MAX_ITERATIONS
            ),
        ));
    }
    if u.salt.is_empty() || u.salted_password.len() != hash.output_len() {
        return Err((
            errors::UNACCEPTABLE_CREDENTIAL,
            format!(
                "A {} credential needs a salt and a {}-byte salted password",
                hash.mechanism().name(),
                hash.output_len()
            ),
        ));
    }
    Ok(vec![UserChange {
        user: name.to_string(),
        mechanism: hash.mechanism(),
        credential: Some(scram::credential(
            hash,
            &u.salt,
            iterations,
            &u.salted_password,
        )),
    }])
}

pub(super) async fn alter_user_scram_credentials(
    shard: &Rc<Shard>,
    a: &AlterUserScramCredentialsRequest,
) -> AlterUserScramCredentialsResponse {
    let mut users: BTreeMap<String, (Vec<_>, Vec<_>)> = BTreeMap::new();
    for d in &a.deletions {
        users.entry(d.name.to_string()).or_default().0.push(d);
    }
    for u in &a.upsertions {
        users.entry(u.name.to_string()).or_default().1.push(u);
    }
    let mut outcome: BTreeMap<String, (i16, Option<String>)> = BTreeMap::new();
    let mut changes = Vec::new();
    for (name, (dels, ups)) in &users {
        match check_user(name, dels, ups) {
            Ok(c) => changes.extend(c),
            Err((code, msg)) => {
                outcome.insert(name.clone(), (code, Some(msg)));
            }
        }
    }
    if !changes.is_empty() {
        match shard.ask(0, AlterUsersCall(changes)).await {
            Some(results) => {
                for (user, code, msg) in results {
                    outcome.insert(user, (code, msg));
                }
            }
            None => {
                for name in users.keys() {
                    outcome
                        .entry(name.clone())
                        .or_insert((errors::UNKNOWN_SERVER_ERROR, Some(STOPPING.into())));
                }
            }
        }
    }
    let mut resp = AlterUserScramCredentialsResponse::default();
    resp.results = outcome
        .into_iter()
        .map(|(user, (code, msg))| {
            let mut r = AlterUserScramCredentialsResult::default();
            r.user = s(&user);
            r.error_code = code;
            r.error_message = msg.map(|m| s(&m));
            r
        })
        .collect();
    resp
}
