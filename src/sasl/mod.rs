//! SASL authentication as Kafka brokers do it: the mechanisms PLAIN (RFC 4616) and
//! SCRAM-SHA-256 / SCRAM-SHA-512 (RFC 5802, RFC 7677), the message formats of each, and the
//! stored form of a user's credentials.
//!
//! Pure and synchronous, with no broker state, so that the fuzz target `sasl_messages` can
//! feed the parsers arbitrary bytes; the broker (`broker::sasl`) drives a connection's
//! exchange with them and looks credentials up in its metadata.
//!
//! Only SCRAM credentials are stored (salted and hashed, never the password): PLAIN checks
//! the password it is given against the user's SCRAM-SHA-512 or SCRAM-SHA-256 credential, as
//! Redpanda does, so one user store serves every mechanism.

pub mod plain;
pub mod scram;
mod scram_messages;

use serde::{Deserialize, Serialize};

/// A SASL mechanism weir speaks.
#[derive(Debug, Clone, Copy, PartialEq, Eq, PartialOrd, Ord, Hash)]
pub enum Mechanism {
    Plain,
    ScramSha256,
    ScramSha512,
}

impl Mechanism {
    pub const ALL: [Mechanism; 3] = [
        Mechanism::Plain,
        Mechanism::ScramSha256,
        Mechanism::ScramSha512,
    ];

    /// The name on the wire (SaslHandshake) and in `sasl.enabled.mechanisms`.
    pub fn name(self) -> &'static str {
        match self {
            Mechanism::Plain => "PLAIN",
            Mechanism::ScramSha256 => "SCRAM-SHA-256",
            Mechanism::ScramSha512 => "SCRAM-SHA-512",
        }
    }

    pub fn parse(name: &str) -> Option<Mechanism> {
        Mechanism::ALL
            .into_iter()
            .find(|m| m.name().eq_ignore_ascii_case(name.trim()))
    }

    /// The SCRAM hash of a SCRAM mechanism.
    pub fn scram(self) -> Option<scram::Hash> {
        match self {
            Mechanism::Plain => None,
            Mechanism::ScramSha256 => Some(scram::Hash::Sha256),
            Mechanism::ScramSha512 => Some(scram::Hash::Sha512),
        }
    }
}

/// One user's stored SCRAM credential for one mechanism: what RFC 5802 calls the
/// authentication information — salt, iteration count, StoredKey and ServerKey (base64 in the
/// metadata file). The password cannot be recovered from it, but it is an offline
/// dictionary attack's input and, StoredKey with a captured exchange, a login: its `Debug`
/// (what log lines show, e.g. an applied metadata record) names the iteration count only.
#[derive(Clone, Serialize, Deserialize, PartialEq, Eq)]
pub struct ScramCredential {
    pub salt: String,
    pub iterations: u32,
    pub stored_key: String,
    pub server_key: String,
}

impl std::fmt::Debug for ScramCredential {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("ScramCredential")
            .field("iterations", &self.iterations)
            .finish_non_exhaustive()
    }
}

impl ScramCredential {
    /// Whether the fields decode and the iteration count is within Kafka's bounds.
    pub fn valid(&self) -> bool {
        (scram::MIN_ITERATIONS..=scram::MAX_ITERATIONS).contains(&self.iterations)
            && unb64(&self.salt).is_some_and(|s| !s.is_empty())
            && unb64(&self.stored_key).is_some_and(|k| k.len() == 32 || k.len() == 64)
            && unb64(&self.server_key).is_some_and(|k| k.len() == 32 || k.len() == 64)
    }
}

/// Longest user name weir accepts (Kafka has no limit; this bounds the metadata file).
pub const MAX_USER_NAME: usize = 256;

/// A user name that can be stored: non-empty, bounded, printable, no control characters.
pub fn valid_user_name(name: &str) -> bool {
    !name.is_empty() && name.len() <= MAX_USER_NAME && !name.chars().any(char::is_control)
}

/// Compares two byte strings in time independent of where they differ.
pub(crate) fn same_bytes(a: &[u8], b: &[u8]) -> bool {
    if a.len() != b.len() {
        return false;
    }
    a.iter().zip(b).fold(0u8, |acc, (x, y)| acc | (x ^ y)) == 0
}

pub(crate) fn b64(bytes: &[u8]) -> String {
    use base64::Engine;
    base64::engine::general_purpose::STANDARD.encode(bytes)
}

pub(crate) fn unb64(text: &str) -> Option<Vec<u8>> {
    use base64::Engine;
    base64::engine::general_purpose::STANDARD.decode(text).ok()
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn mechanism_names_round_trip() {
        for m in Mechanism::ALL {
            assert_eq!(Mechanism::parse(m.name()), Some(m));
        }
        assert_eq!(
            Mechanism::parse("scram-sha-256"),
            Some(Mechanism::ScramSha256)
        );
        assert_eq!(Mechanism::parse("GSSAPI"), None);
    }

    #[test]
    fn user_names() {
        assert!(valid_user_name("alice"));
        assert!(valid_user_name("a,b=c"));
        assert!(!valid_user_name(""));
        assert!(!valid_user_name("a\nb"));
        assert!(!valid_user_name(&"x".repeat(MAX_USER_NAME + 1)));
    }
}

#[cfg(test)]
mod credential_debug_tests {
    use super::*;

    /// Regression (issue 35): AlterUser metadata records were logged at INFO with the salt,
    /// StoredKey and ServerKey of the credential.
    #[test]
    fn debug_shows_no_secret_field() {
        let c = ScramCredential {
            salt: "c2FsdHNhbHQ=".into(),
            iterations: 4096,
            stored_key: "c3RvcmVka2V5".into(),
            server_key: "c2VydmVya2V5".into(),
        };
        let shown = format!("{c:?}");
        assert!(shown.contains("4096"), "{shown}");
        for secret in [&c.salt, &c.stored_key, &c.server_key] {
            assert!(!shown.contains(secret.as_str()), "{shown}");
        }
    }
}
