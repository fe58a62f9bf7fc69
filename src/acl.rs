//! Kafka's ACL model: bindings (resource, pattern, principal, host, operation, permission),
//! the filters of DescribeAcls / DeleteAcls, and the decision `authorize` makes for one
//! request — the same rules as Kafka's StandardAuthorizer:
//!
//! - a super user (`super.users`) may do everything;
//! - a DENY binding that matches wins over any ALLOW;
//! - an ALLOW of READ, WRITE, DELETE or ALTER also allows DESCRIBE, and ALTER_CONFIGS allows
//!   DESCRIBE_CONFIGS; ALL matches every operation;
//! - a binding matches a resource by LITERAL name (or the wildcard `*`) or PREFIXED name, a
//!   principal by equality or `User:*`, a host by equality or `*`;
//! - a resource no binding names at all is allowed only with `allow.everyone.if.no.acl.found`.
//!
//! Pure and synchronous (no broker state): the broker keeps the bindings in its metadata and
//! every core decides from its own snapshot, with no lock shared between cores.

use serde::{Deserialize, Serialize};

/// Defines a Kafka enum of i8 codes with its Kafka name.
macro_rules! kafka_enum {
    ($(#[$m:meta])* $name:ident { $($var:ident = $code:literal, $text:literal;)* }) => {
        $(#[$m])*
        #[derive(Debug, Clone, Copy, PartialEq, Eq, PartialOrd, Ord, Hash, Serialize, Deserialize)]
        #[serde(rename_all = "SCREAMING_SNAKE_CASE")]
        pub enum $name { $($var,)* }

        impl $name {
            pub const ALL_VALUES: &'static [$name] = &[$($name::$var,)*];

            pub fn code(self) -> i8 {
                match self { $($name::$var => $code,)* }
            }

            pub fn from_code(code: i8) -> Option<$name> {
                match code { $($code => Some($name::$var),)* _ => None }
            }

            /// Kafka's name (`TOPIC`, `READ`, ...).
            pub fn name(self) -> &'static str {
                match self { $($name::$var => $text,)* }
            }

            pub fn parse(text: &str) -> Option<$name> {
                let t = text.trim().to_ascii_uppercase().replace('-', "_");
                Self::ALL_VALUES.iter().copied().find(|v| v.name() == t)
            }
        }
    };
}

kafka_enum!(
    /// What a binding is about (Kafka's ResourceType; ANY = 1 only in filters).
    ResourceType {
        Topic = 2, "TOPIC";
        Group = 3, "GROUP";
        Cluster = 4, "CLUSTER";
        TransactionalId = 5, "TRANSACTIONAL_ID";
        DelegationToken = 6, "DELEGATION_TOKEN";
        User = 7, "USER";
    }
);

kafka_enum!(
    /// How a binding's resource name matches (ANY = 1 and MATCH = 2 only in filters).
    PatternType {
        Literal = 3, "LITERAL";
        Prefixed = 4, "PREFIXED";
    }
);

kafka_enum!(
    /// Kafka's AclOperation (ANY = 1 only in filters).
    Operation {
        All = 2, "ALL";
        Read = 3, "READ";
        Write = 4, "WRITE";
        Create = 5, "CREATE";
        Delete = 6, "DELETE";
        Alter = 7, "ALTER";
        Describe = 8, "DESCRIBE";
        ClusterAction = 9, "CLUSTER_ACTION";
        DescribeConfigs = 10, "DESCRIBE_CONFIGS";
        AlterConfigs = 11, "ALTER_CONFIGS";
        IdempotentWrite = 12, "IDEMPOTENT_WRITE";
        CreateTokens = 13, "CREATE_TOKENS";
        DescribeTokens = 14, "DESCRIBE_TOKENS";
    }
);

kafka_enum!(
    /// Kafka's AclPermissionType (ANY = 1 only in filters).
    Permission {
        Deny = 2, "DENY";
        Allow = 3, "ALLOW";
    }
);

/// The one name of the cluster resource.
pub const CLUSTER_NAME: &str = "kafka-cluster";
/// The wildcard resource name, principal and host.
pub const WILDCARD: &str = "*";
/// The principal of a client that did not authenticate (PLAINTEXT, SSL without a
/// certificate), as Kafka names it.
pub const ANONYMOUS: &str = "User:ANONYMOUS";

/// One ACL.
#[derive(Debug, Clone, PartialEq, Eq, PartialOrd, Ord, Hash, Serialize, Deserialize)]
pub struct AclBinding {
    pub resource_type: ResourceType,
    pub resource_name: String,
    pub pattern_type: PatternType,
    /// `User:alice`, or `User:*` for everyone.
    pub principal: String,
    /// A client IP address, or `*`.
    pub host: String,
    pub operation: Operation,
    pub permission: Permission,
}

/// Why a binding cannot be stored (CreateAcls answers INVALID_REQUEST with it).
pub fn check_binding(b: &AclBinding) -> Result<(), String> {
    if b.resource_name.is_empty() {
        return Err("the resource name is empty".into());
    }
    if b.resource_type == ResourceType::Cluster && b.resource_name != CLUSTER_NAME {
        return Err(format!(
            "the cluster resource is named {CLUSTER_NAME}, not {}",
            b.resource_name
        ));
    }
    match b.principal.split_once(':') {
        Some((kind, name)) if !kind.is_empty() && !name.is_empty() => {}
        _ => {
            return Err(format!(
                "principal {:?} is not TYPE:NAME (e.g. User:alice, User:*)",
                b.principal
            ))
        }
    }
    if b.host.is_empty() {
        return Err("the host is empty (use * for any host)".into());
    }
    if b.resource_name.len() > 4096 || b.principal.len() > 4096 || b.host.len() > 256 {
        return Err("a name is too long".into());
    }
    Ok(())
}

/// A DescribeAcls / DeleteAcls filter: `None` matches anything.
#[derive(Debug, Clone, Default, PartialEq, Eq)]
pub struct AclFilter {
    pub resource_type: Option<ResourceType>,
    pub resource_name: Option<String>,
    /// `PatternFilter::Match`: the bindings that would apply to `resource_name` (literal,
    /// wildcard and prefixes of it).
    pub pattern: PatternFilter,
    pub principal: Option<String>,
    pub host: Option<String>,
    pub operation: Option<Operation>,
    pub permission: Option<Permission>,
}

#[derive(Debug, Clone, Copy, Default, PartialEq, Eq)]
pub enum PatternFilter {
    #[default]
    Any,
    Match,
    Exactly(PatternType),
}

impl PatternFilter {
    /// From the wire: ANY = 1, MATCH = 2, LITERAL = 3, PREFIXED = 4.
    pub fn from_code(code: i8) -> Option<PatternFilter> {
        match code {
            1 => Some(PatternFilter::Any),
            2 => Some(PatternFilter::Match),
            c => PatternType::from_code(c).map(PatternFilter::Exactly),
        }
    }
}

impl AclFilter {
    pub fn matches(&self, b: &AclBinding) -> bool {
        let name_ok = match (&self.resource_name, self.pattern) {
            (None, PatternFilter::Exactly(p)) => b.pattern_type == p,
            (None, _) => true,
            (Some(n), PatternFilter::Any) => b.resource_name == *n,
            (Some(n), PatternFilter::Exactly(p)) => b.pattern_type == p && b.resource_name == *n,
            (Some(n), PatternFilter::Match) => resource_matches(b, n),
        };
        name_ok
            && self.resource_type.is_none_or(|t| t == b.resource_type)
            && self.principal.as_ref().is_none_or(|p| *p == b.principal)
            && self.host.as_ref().is_none_or(|h| *h == b.host)
            && self.operation.is_none_or(|o| o == b.operation)
            && self.permission.is_none_or(|p| p == b.permission)
    }
}

/// Whether binding `b` applies to the resource named `name` (of `b`'s type).
fn resource_matches(b: &AclBinding, name: &str) -> bool {
    match b.pattern_type {
        PatternType::Literal => b.resource_name == name || b.resource_name == WILDCARD,
        PatternType::Prefixed => name.starts_with(&b.resource_name),
    }
}

/// Whether an ALLOW of `granted` allows `wanted`.
fn implies(granted: Operation, wanted: Operation) -> bool {
    use Operation::*;
    granted == wanted
        || granted == All
        || (wanted == Describe && matches!(granted, Read | Write | Delete | Alter))
        || (wanted == DescribeConfigs && granted == AlterConfigs)
}

/// The authorizer's settings.
#[derive(Debug, Clone, Default, PartialEq, Eq)]
pub struct AuthorizerConfig {
    /// Check ACLs at all (`authorizer.class.name` set).
    pub enabled: bool,
    /// `super.users`: principals allowed everything.
    pub super_users: Vec<String>,
    /// `allow.everyone.if.no.acl.found`.
    pub allow_if_no_acl: bool,
}

/// Who asks: the authenticated principal and the client's address.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct Session {
    pub principal: String,
    pub host: String,
}

/// May `session` do `op` on the resource (`rtype`, `name`)?
pub fn authorize(
    config: &AuthorizerConfig,
    acls: &[AclBinding],
    session: &Session,
    op: Operation,
    rtype: ResourceType,
    name: &str,
) -> bool {
    if !config.enabled || config.super_users.contains(&session.principal) {
        return true;
    }
    let mut any_for_resource = false;
    let mut allowed = false;
    for b in acls {
        if b.resource_type != rtype || !resource_matches(b, name) {
            continue;
        }
        any_for_resource = true;
        let who = b.principal == session.principal || b.principal == "User:*";
        let host = b.host == WILDCARD || b.host == session.host;
        if !(who && host) {
            continue;
        }
        match b.permission {
            Permission::Deny if b.operation == op || b.operation == Operation::All => return false,
            Permission::Allow if implies(b.operation, op) => allowed = true,
            _ => {}
        }
    }
    allowed || (!any_for_resource && config.allow_if_no_acl)
}

/// Whether some ACL lets `session` WRITE to some topic (with InitProducerId, Kafka lets such
/// a principal be an idempotent producer without IDEMPOTENT_WRITE on the cluster).
pub fn may_write_some_topic(
    config: &AuthorizerConfig,
    acls: &[AclBinding],
    session: &Session,
) -> bool {
    if !config.enabled || config.super_users.contains(&session.principal) {
        return true;
    }
    acls.iter().any(|b| {
        b.resource_type == ResourceType::Topic
            && b.permission == Permission::Allow
            && implies(b.operation, Operation::Write)
            && (b.principal == session.principal || b.principal == "User:*")
            && (b.host == WILDCARD || b.host == session.host)
    })
}

#[cfg(test)]
mod tests {
    use super::*;

    fn bind(
        rtype: ResourceType,
        name: &str,
        pattern: PatternType,
        principal: &str,
        op: Operation,
        perm: Permission,
    ) -> AclBinding {
        AclBinding {
            resource_type: rtype,
            resource_name: name.into(),
            pattern_type: pattern,
            principal: principal.into(),
            host: "*".into(),
            operation: op,
            permission: perm,
        }
    }

    fn alice() -> Session {
        Session {
            principal: "User:alice".into(),
            host: "10.0.0.1".into(),
        }
    }

    const ON: AuthorizerConfig = AuthorizerConfig {
        enabled: true,
        super_users: Vec::new(),
        allow_if_no_acl: false,
    };

    #[test]
    fn kafka_rules() {
        use Operation::*;
        use PatternType::*;
        use Permission::*;
        use ResourceType::*;
        let acls = vec![
            bind(Topic, "orders", Literal, "User:alice", Write, Allow),
            bind(Topic, "logs-", Prefixed, "User:*", Read, Allow),
            bind(Topic, "logs-secret", Literal, "User:alice", All, Deny),
            bind(Group, "*", Literal, "User:alice", Read, Allow),
        ];
        let can = |op, t, n: &str| authorize(&ON, &acls, &alice(), op, t, n);
        assert!(can(Write, Topic, "orders"));
        assert!(can(Describe, Topic, "orders"), "WRITE implies DESCRIBE");
        assert!(!can(Read, Topic, "orders"));
        assert!(can(Read, Topic, "logs-app"), "prefix and User:*");
        assert!(!can(Read, Topic, "logs-secret"), "DENY wins");
        assert!(can(Read, Group, "any-group"), "wildcard name");
        assert!(!can(Read, Topic, "other"), "no ACL: denied by default");
        let open = AuthorizerConfig {
            allow_if_no_acl: true,
            ..ON.clone()
        };
        assert!(authorize(&open, &acls, &alice(), Read, Topic, "other"));
        assert!(
            !authorize(&open, &acls, &alice(), Read, Topic, "orders"),
            "an ACL exists for orders, just not this one"
        );
        let su = AuthorizerConfig {
            super_users: vec!["User:alice".into()],
            ..ON.clone()
        };
        assert!(authorize(&su, &acls, &alice(), Read, Topic, "logs-secret"));
        assert!(authorize(
            &AuthorizerConfig::default(),
            &acls,
            &alice(),
            Read,
            Topic,
            "logs-secret"
        ));
        let mut on_host = bind(Topic, "t", Literal, "User:alice", Read, Allow);
        on_host.host = "10.0.0.2".into();
        assert!(!authorize(&ON, &[on_host], &alice(), Read, Topic, "t"));
    }

    #[test]
    fn filters() {
        use PatternType::*;
        let b = bind(
            ResourceType::Topic,
            "logs-",
            Prefixed,
            "User:bob",
            Operation::Read,
            Permission::Allow,
        );
        assert!(AclFilter::default().matches(&b));
        let by_match = AclFilter {
            resource_name: Some("logs-app".into()),
            pattern: PatternFilter::Match,
            ..Default::default()
        };
        assert!(by_match.matches(&b));
        let literal = AclFilter {
            resource_name: Some("logs-".into()),
            pattern: PatternFilter::Exactly(Literal),
            ..Default::default()
        };
        assert!(!literal.matches(&b));
        let other = AclFilter {
            principal: Some("User:alice".into()),
            ..Default::default()
        };
        assert!(!other.matches(&b));
        assert_eq!(
            Operation::parse("describe-configs"),
            Some(Operation::DescribeConfigs)
        );
        assert_eq!(ResourceType::from_code(2), Some(ResourceType::Topic));
        assert!(check_binding(&b).is_ok());
        let mut bad = b.clone();
        bad.principal = "alice".into();
        assert!(check_binding(&bad).is_err());
    }
}
