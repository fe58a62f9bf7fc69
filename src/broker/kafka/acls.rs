//! DescribeAcls, CreateAcls, DeleteAcls (Kafka's AdminClient, `kafka-acls.sh`, `weir acl`).
//!
//! ACLs live in the metadata: Describe reads this core's snapshot; Create and Delete check
//! their input here and send it to core 0, which stores the result durably and makes every
//! core apply it before answering — so an ACL that is "created" is enforced on every core
//! from the next request on. They are stored whether or not the authorizer is on (as in
//! Redpanda), so that ACLs can be set up before `authorizer.class.name` turns checks on.

use std::rc::Rc;

use kafka_protocol::messages::create_acls_response::AclCreationResult;
use kafka_protocol::messages::delete_acls_response::{
    DeleteAclsFilterResult, DeleteAclsMatchingAcl,
};
use kafka_protocol::messages::describe_acls_response::{AclDescription, DescribeAclsResource};
use kafka_protocol::messages::*;
use weir::acl::{
    check_binding, AclBinding, AclFilter, Operation, PatternFilter, PatternType, Permission,
    ResourceType,
};

use super::s;
use crate::broker::errors;
use crate::broker::shard::{CreateAclsCall, DeleteAclsCall, Shard, STOPPING};

/// "ANY" in a filter's enum fields.
const ANY: i8 = 1;

fn filter_from_wire(
    rtype: i8,
    name: Option<&str>,
    pattern: i8,
    principal: Option<&str>,
    host: Option<&str>,
    op: i8,
    perm: i8,
) -> Result<AclFilter, String> {
    fn any_or<T>(code: i8, what: &str, f: fn(i8) -> Option<T>) -> Result<Option<T>, String> {
        if code == ANY {
            return Ok(None);
        }
        f(code)
            .map(Some)
            .ok_or_else(|| format!("unknown {what} {code}"))
    }
    Ok(AclFilter {
        resource_type: any_or(rtype, "resource type", ResourceType::from_code)?,
        resource_name: name.map(str::to_string),
        pattern: PatternFilter::from_code(pattern)
            .ok_or_else(|| format!("unknown pattern type {pattern}"))?,
        principal: principal.map(str::to_string),
        host: host.map(str::to_string),
        operation: any_or(op, "operation", Operation::from_code)?,
        permission: any_or(perm, "permission type", Permission::from_code)?,
    })
}

pub(super) fn describe_acls(shard: &Rc<Shard>, d: &DescribeAclsRequest) -> DescribeAclsResponse {
    let mut resp = DescribeAclsResponse::default();
    let filter = match filter_from_wire(
        d.resource_type_filter,
        d.resource_name_filter.as_deref(),
        d.pattern_type_filter,
        d.principal_filter.as_deref(),
        d.host_filter.as_deref(),
        d.operation,
        d.permission_type,
    ) {
        Ok(f) => f,
        Err(e) => {
            resp.error_code = errors::INVALID_REQUEST;
            resp.error_message = Some(s(&e));
            return resp;
        }
    };
    let meta = shard.metadata();
    // Grouped by resource, in the stored (sorted) order.
    for b in meta.acls.iter().filter(|b| filter.matches(b)) {
        let same = resp
            .resources
            .last()
            .is_some_and(|r: &DescribeAclsResource| {
                r.resource_type == b.resource_type.code()
                    && r.resource_name.as_str() == b.resource_name
                    && r.pattern_type == b.pattern_type.code()
            });
        if !same {
            let mut r = DescribeAclsResource::default();
            r.resource_type = b.resource_type.code();
            r.resource_name = s(&b.resource_name);
            r.pattern_type = b.pattern_type.code();
            resp.resources.push(r);
        }
        let mut a = AclDescription::default();
        a.principal = s(&b.principal);
        a.host = s(&b.host);
        a.operation = b.operation.code();
        a.permission_type = b.permission.code();
        if let Some(r) = resp.resources.last_mut() {
            r.acls.push(a);
        }
    }
    resp
}

pub(super) async fn create_acls(shard: &Rc<Shard>, c: &CreateAclsRequest) -> CreateAclsResponse {
    let checked: Vec<Result<AclBinding, String>> = c
        .creations
        .iter()
        .map(|a| {
            let b = AclBinding {
                resource_type: ResourceType::from_code(a.resource_type)
                    .ok_or_else(|| format!("unknown resource type {}", a.resource_type))?,
                resource_name: a.resource_name.to_string(),
                pattern_type: PatternType::from_code(a.resource_pattern_type).ok_or_else(|| {
                    format!(
                        "pattern type {} cannot be stored (LITERAL or PREFIXED)",
                        a.resource_pattern_type
                    )
                })?,
                principal: a.principal.to_string(),
                host: a.host.to_string(),
                operation: Operation::from_code(a.operation)
                    .ok_or_else(|| format!("unknown operation {}", a.operation))?,
                permission: Permission::from_code(a.permission_type)
                    .ok_or_else(|| format!("unknown permission type {}", a.permission_type))?,
            };
            check_binding(&b)?;
            Ok(b)
        })
        .collect();
    let new: Vec<AclBinding> = checked.iter().filter_map(|r| r.clone().ok()).collect();
    let stored = if new.is_empty() {
        Ok(())
    } else {
        (shard.ask(0, CreateAclsCall(new)).await).unwrap_or_else(|| Err(STOPPING.into()))
    };
    let mut resp = CreateAclsResponse::default();
    resp.results = checked
        .into_iter()
        .map(|r| {
            let mut res = AclCreationResult::default();
            match (r, &stored) {
                (Err(e), _) => {
                    res.error_code = errors::INVALID_REQUEST;
                    res.error_message = Some(s(&e));
                }
                (Ok(_), Err(e)) => {
                    res.error_code = errors::KAFKA_STORAGE_ERROR;
                    res.error_message = Some(s(e));
                }
                (Ok(_), Ok(())) => {}
            }
            res
        })
        .collect();
    resp
}

pub(super) async fn delete_acls(shard: &Rc<Shard>, d: &DeleteAclsRequest) -> DeleteAclsResponse {
    let filters: Vec<Result<AclFilter, String>> = d
        .filters
        .iter()
        .map(|f| {
            filter_from_wire(
                f.resource_type_filter,
                f.resource_name_filter.as_deref(),
                f.pattern_type_filter,
                f.principal_filter.as_deref(),
                f.host_filter.as_deref(),
                f.operation,
                f.permission_type,
            )
        })
        .collect();
    let good: Vec<AclFilter> = filters.iter().filter_map(|f| f.clone().ok()).collect();
    let mut deleted = if good.is_empty() {
        Ok(Vec::new())
    } else {
        (shard.ask(0, DeleteAclsCall(good)).await).unwrap_or_else(|| Err(STOPPING.into()))
    }
    .map(|v| v.into_iter());
    let mut resp = DeleteAclsResponse::default();
    for f in filters {
        let mut r = DeleteAclsFilterResult::default();
        match (f, &mut deleted) {
            (Err(e), _) => {
                r.error_code = errors::INVALID_REQUEST;
                r.error_message = Some(s(&e));
            }
            (Ok(_), Err(e)) => {
                r.error_code = errors::KAFKA_STORAGE_ERROR;
                r.error_message = Some(s(e));
            }
            (Ok(_), Ok(matched)) => {
                for b in matched.next().unwrap_or_default() {
                    let mut m = DeleteAclsMatchingAcl::default();
                    m.resource_type = b.resource_type.code();
                    m.resource_name = s(&b.resource_name);
                    m.pattern_type = b.pattern_type.code();
                    m.principal = s(&b.principal);
                    m.host = s(&b.host);
                    m.operation = b.operation.code();
                    m.permission_type = b.permission.code();
                    r.matching_acls.push(m);
                }
            }
        }
        resp.filter_results.push(r);
    }
    resp
}
