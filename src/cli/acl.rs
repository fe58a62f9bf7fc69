//! `weir acl ...`: Kafka ACLs over DescribeAcls / CreateAcls / DeleteAcls (so it works against
//! Kafka too), in the spirit of `kafka-acls.sh`:
//!
//! ```text
//! weir acl add --principal User:alice --operation write --topic orders
//! weir acl add --principal User:* --operation read --topic logs- --prefixed
//! weir acl add --principal User:bob --operation read --group app --deny
//! weir acl add --principal User:etl --operation write --transactional-id etl- --prefixed
//! weir acl list [--principal User:alice] [--topic orders]
//! weir acl remove --principal User:alice --topic orders      (every operation)
//! ```

use clap::{Args, Subcommand};
use kafka_protocol::messages::create_acls_request::AclCreation;
use kafka_protocol::messages::delete_acls_request::DeleteAclsFilter;
use kafka_protocol::messages::*;
use serde_json::{json, Value};

use super::admin::*;
use crate::acl::{Operation, PatternType, Permission, ResourceType, CLUSTER_NAME};

#[derive(Debug, Clone, Args)]
pub struct AclArgs {
    #[command(subcommand)]
    pub command: AclCommand,
    #[command(flatten)]
    pub common: Common,
}

/// Which resource an ACL command is about.
#[derive(Debug, Clone, Args)]
pub struct Resource {
    /// A topic (with --prefixed: every topic whose name starts with it; `*`: every topic).
    #[arg(long, conflicts_with_all = ["group", "cluster", "transactional_id"])]
    pub topic: Option<String>,
    /// A consumer group (same rules as --topic).
    #[arg(long, conflicts_with_all = ["topic", "cluster", "transactional_id"])]
    pub group: Option<String>,
    /// A producer's transactional.id (same rules as --topic): WRITE lets it run
    /// transactions, DESCRIBE find its coordinator.
    #[arg(long, conflicts_with_all = ["topic", "group", "cluster"])]
    pub transactional_id: Option<String>,
    /// The cluster (topic creation, ACL and user management, ...).
    #[arg(long, conflicts_with_all = ["topic", "group", "transactional_id"])]
    pub cluster: bool,
    /// The name is a prefix (PREFIXED) rather than a name (LITERAL).
    #[arg(long)]
    pub prefixed: bool,
}

#[derive(Debug, Clone, Subcommand)]
pub enum AclCommand {
    /// Allow (or with --deny, deny) a principal operations on a resource.
    Add {
        /// `User:NAME` (the SASL user; `User:ANONYMOUS` for clients that did not log in;
        /// `User:*` for everyone).
        #[arg(long)]
        principal: String,
        /// Operations, comma-separated: read, write, create, delete, alter, describe,
        /// describe-configs, alter-configs, idempotent-write, all.
        #[arg(long, value_delimiter = ',', required = true)]
        operation: Vec<String>,
        #[command(flatten)]
        resource: Resource,
        /// A client address, or `*` for any.
        #[arg(long, default_value = "*")]
        host: String,
        /// A DENY ACL (wins over any ALLOW).
        #[arg(long)]
        deny: bool,
    },
    /// List ACLs (all, or those of a principal and/or resource).
    List {
        #[arg(long)]
        principal: Option<String>,
        #[command(flatten)]
        resource: Resource,
    },
    /// Remove the ACLs of a principal on a resource (all operations unless --operation).
    Remove {
        #[arg(long)]
        principal: String,
        #[arg(long, value_delimiter = ',')]
        operation: Vec<String>,
        #[command(flatten)]
        resource: Resource,
    },
}

impl Resource {
    /// (type, name, pattern) named on the command line, if any.
    fn named(&self) -> Option<(ResourceType, String, PatternType)> {
        let pattern = if self.prefixed {
            PatternType::Prefixed
        } else {
            PatternType::Literal
        };
        if let Some(t) = &self.topic {
            Some((ResourceType::Topic, t.clone(), pattern))
        } else if let Some(g) = &self.group {
            Some((ResourceType::Group, g.clone(), pattern))
        } else if let Some(t) = &self.transactional_id {
            Some((ResourceType::TransactionalId, t.clone(), pattern))
        } else if self.cluster {
            Some((
                ResourceType::Cluster,
                CLUSTER_NAME.into(),
                PatternType::Literal,
            ))
        } else {
            None
        }
    }
}

fn operations(names: &[String]) -> Res<Vec<Operation>> {
    names
        .iter()
        .map(|n| {
            Operation::parse(n).ok_or_else(|| format!("--operation {n}: not an ACL operation"))
        })
        .collect()
}

/// Runs a `weir acl` command; prints its result; returns the exit code.
pub fn acl(args: AclArgs) -> i32 {
    let json = args.common.json;
    let cmd = args.command.clone();
    let bootstrap = args.common.bootstrap.clone();
    finish(json, run(move || acl_async(bootstrap, cmd)), |v| {
        render(&args.command, v)
    })
}

/// ANY (1) for a filter field left open.
const ANY: i8 = 1;

fn filter(principal: Option<&str>, resource: &Resource, op: Option<Operation>) -> DeleteAclsFilter {
    let (rtype, name, pattern) = match resource.named() {
        Some((t, n, p)) => (t.code(), Some(sb(&n)), p.code()),
        None => (ANY, None, ANY),
    };
    DeleteAclsFilter::default()
        .with_resource_type_filter(rtype)
        .with_resource_name_filter(name)
        .with_pattern_type_filter(pattern)
        .with_principal_filter(principal.map(sb))
        .with_host_filter(None)
        .with_operation(op.map_or(ANY, Operation::code))
        .with_permission_type(ANY)
}

fn acl_json(
    rtype: i8,
    name: &str,
    pattern: i8,
    principal: &str,
    host: &str,
    op: i8,
    perm: i8,
) -> Value {
    let n = |x: Option<&'static str>, code: i8| x.map(str::to_string).unwrap_or(code.to_string());
    json!({
        "resource_type": n(ResourceType::from_code(rtype).map(ResourceType::name), rtype),
        "resource_name": name,
        "pattern_type": n(PatternType::from_code(pattern).map(PatternType::name), pattern),
        "principal": principal,
        "host": host,
        "operation": n(Operation::from_code(op).map(Operation::name), op),
        "permission": n(Permission::from_code(perm).map(Permission::name), perm),
    })
}

async fn acl_async(bootstrap: String, cmd: AclCommand) -> Res<Value> {
    let conn = connect(&bootstrap).await?;
    match cmd {
        AclCommand::Add {
            principal,
            operation,
            resource,
            host,
            deny,
        } => {
            let (rtype, name, pattern) = resource
                .named()
                .ok_or("name the resource: --topic, --group, --transactional-id or --cluster")?;
            let perm = if deny {
                Permission::Deny
            } else {
                Permission::Allow
            };
            let ops = operations(&operation)?;
            let req = CreateAclsRequest::default().with_creations(
                ops.iter()
                    .map(|op| {
                        AclCreation::default()
                            .with_resource_type(rtype.code())
                            .with_resource_name(sb(&name))
                            .with_resource_pattern_type(pattern.code())
                            .with_principal(sb(&principal))
                            .with_host(sb(&host))
                            .with_operation(op.code())
                            .with_permission_type(perm.code())
                    })
                    .collect(),
            );
            let resp = send(&conn, &req, 3).await?;
            for r in &resp.results {
                check(r.error_code, r.error_message.as_ref(), "CreateAcls")?;
            }
            let added: Vec<Value> = ops
                .iter()
                .map(|op| {
                    acl_json(
                        rtype.code(),
                        &name,
                        pattern.code(),
                        &principal,
                        &host,
                        op.code(),
                        perm.code(),
                    )
                })
                .collect();
            Ok(json!({ "added": added }))
        }
        AclCommand::List {
            principal,
            resource,
        } => {
            let f = filter(principal.as_deref(), &resource, None);
            let req = DescribeAclsRequest::default()
                .with_resource_type_filter(f.resource_type_filter)
                .with_resource_name_filter(f.resource_name_filter)
                .with_pattern_type_filter(f.pattern_type_filter)
                .with_principal_filter(f.principal_filter)
                .with_host_filter(None)
                .with_operation(ANY)
                .with_permission_type(ANY);
            let resp = send(&conn, &req, 3).await?;
            check(resp.error_code, resp.error_message.as_ref(), "DescribeAcls")?;
            let mut acls = Vec::new();
            for r in &resp.resources {
                for a in &r.acls {
                    acls.push(acl_json(
                        r.resource_type,
                        &r.resource_name,
                        r.pattern_type,
                        &a.principal,
                        &a.host,
                        a.operation,
                        a.permission_type,
                    ));
                }
            }
            Ok(json!({ "acls": acls }))
        }
        AclCommand::Remove {
            principal,
            operation,
            resource,
        } => {
            if resource.named().is_none() {
                return Err(
                    "name the resource: --topic, --group, --transactional-id or --cluster".into(),
                );
            }
            let ops = operations(&operation)?;
            let filters: Vec<DeleteAclsFilter> = if ops.is_empty() {
                vec![filter(Some(&principal), &resource, None)]
            } else {
                ops.iter()
                    .map(|op| filter(Some(&principal), &resource, Some(*op)))
                    .collect()
            };
            let resp = send(
                &conn,
                &DeleteAclsRequest::default().with_filters(filters),
                3,
            )
            .await?;
            let mut removed = Vec::new();
            for fr in &resp.filter_results {
                check(fr.error_code, fr.error_message.as_ref(), "DeleteAcls")?;
                for m in &fr.matching_acls {
                    removed.push(acl_json(
                        m.resource_type,
                        &m.resource_name,
                        m.pattern_type,
                        &m.principal,
                        &m.host,
                        m.operation,
                        m.permission_type,
                    ));
                }
            }
            Ok(json!({ "removed": removed }))
        }
    }
}

fn rows(list: &Value) -> Vec<Vec<String>> {
    list.as_array()
        .map(|a| {
            a.iter()
                .map(|x| {
                    [
                        "principal",
                        "permission",
                        "operation",
                        "resource_type",
                        "pattern_type",
                        "resource_name",
                        "host",
                    ]
                    .iter()
                    .map(|k| s(&x[*k]))
                    .collect()
                })
                .collect()
        })
        .unwrap_or_default()
}

fn render(cmd: &AclCommand, v: &Value) -> String {
    let headers = [
        "PRINCIPAL",
        "PERMISSION",
        "OPERATION",
        "TYPE",
        "PATTERN",
        "NAME",
        "HOST",
    ];
    match cmd {
        AclCommand::Add { .. } => format!("added:\n{}", table(&headers, &rows(&v["added"]))),
        AclCommand::List { .. } => table(&headers, &rows(&v["acls"])),
        AclCommand::Remove { .. } => format!("removed:\n{}", table(&headers, &rows(&v["removed"]))),
    }
}
