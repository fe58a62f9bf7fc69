//! `listeners`, `advertised.listeners` and the `ssl.*` settings: where the broker listens,
//! with which security protocol, and what it tells clients.
//!
//! Kafka's form: `listeners=PLAINTEXT://127.0.0.1:9092,SASL_SSL://0.0.0.0:9192`. A listener's
//! name is its security protocol (PLAINTEXT, SSL, SASL_PLAINTEXT or SASL_SSL; Kafka's custom
//! names through `listener.security.protocol.map` are not supported). A bare `host:port` is a
//! PLAINTEXT listener, as `--listen` has always been.

use std::path::PathBuf;

/// How a listener's connections are secured.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum SecurityProtocol {
    Plaintext,
    Ssl,
    /// SASL authentication, no TLS.
    SaslPlaintext,
    /// SASL authentication inside TLS.
    SaslSsl,
}

impl SecurityProtocol {
    pub const ALL: [SecurityProtocol; 4] = [
        SecurityProtocol::Plaintext,
        SecurityProtocol::Ssl,
        SecurityProtocol::SaslPlaintext,
        SecurityProtocol::SaslSsl,
    ];

    pub fn name(self) -> &'static str {
        match self {
            SecurityProtocol::Plaintext => "PLAINTEXT",
            SecurityProtocol::Ssl => "SSL",
            SecurityProtocol::SaslPlaintext => "SASL_PLAINTEXT",
            SecurityProtocol::SaslSsl => "SASL_SSL",
        }
    }

    /// Whether connections are TLS (SSL, SASL_SSL).
    pub fn tls(self) -> bool {
        matches!(self, SecurityProtocol::Ssl | SecurityProtocol::SaslSsl)
    }

    /// Whether clients must authenticate with SASL first (SASL_PLAINTEXT, SASL_SSL).
    pub fn sasl(self) -> bool {
        matches!(
            self,
            SecurityProtocol::SaslPlaintext | SecurityProtocol::SaslSsl
        )
    }

    fn parse(key: &str, name: &str) -> Result<SecurityProtocol, String> {
        let upper = name.to_ascii_uppercase();
        SecurityProtocol::ALL
            .into_iter()
            .find(|p| p.name() == upper)
            .ok_or_else(|| {
                format!(
                    "{key}: unknown listener '{name}' (PLAINTEXT, SSL, SASL_PLAINTEXT or SASL_SSL)"
                )
            })
    }
}

/// One `listeners` entry.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct Listener {
    pub protocol: SecurityProtocol,
    /// host:port as given (resolved at start-up).
    pub address: String,
}

/// `ssl.client.auth`: whether SSL clients must present a certificate signed by the
/// truststore's CAs.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum ClientAuth {
    None,
    Requested,
    Required,
}

/// The `ssl.*` settings (used by SSL listeners).
#[derive(Debug, Clone, Default)]
pub struct SslConfig {
    /// `ssl.certificate.location`: PEM file of the server's certificate chain, leaf first.
    pub certificate: Option<PathBuf>,
    /// `ssl.key.location`: PEM file of its private key (PKCS#8, PKCS#1 or SEC1; unencrypted).
    pub key: Option<PathBuf>,
    /// `ssl.truststore.location`: PEM file of the CAs that sign client certificates.
    pub truststore: Option<PathBuf>,
    pub client_auth: Option<ClientAuth>,
}

impl ClientAuth {
    pub fn name(self) -> &'static str {
        match self {
            ClientAuth::None => "none",
            ClientAuth::Requested => "requested",
            ClientAuth::Required => "required",
        }
    }

    pub(super) fn parse(key: &str, value: &str) -> Result<ClientAuth, String> {
        match value.trim() {
            "none" => Ok(ClientAuth::None),
            "requested" => Ok(ClientAuth::Requested),
            "required" => Ok(ClientAuth::Required),
            v => Err(format!("{key}: '{v}' is not none, requested or required")),
        }
    }
}

/// `[NAME://]host:port`: the name (if any) and the address.
fn split_entry(entry: &str) -> (Option<&str>, &str) {
    match entry.trim().split_once("://") {
        Some((name, rest)) => (Some(name.trim()), rest.trim()),
        None => (None, entry.trim()),
    }
}

/// `listeners`: one or more comma-separated `[NAME://]host:port`, each name at most once.
pub(super) fn parse_listeners(key: &str, value: &str) -> Result<Vec<Listener>, String> {
    let mut out: Vec<Listener> = Vec::new();
    for entry in value.split(',').filter(|e| !e.trim().is_empty()) {
        let (name, address) = split_entry(entry);
        let protocol = match name {
            None => SecurityProtocol::Plaintext,
            Some(n) => SecurityProtocol::parse(key, n)?,
        };
        if address.rsplit_once(':').is_none() {
            return Err(format!("{key}: '{}' is not host:port", entry.trim()));
        }
        if out.iter().any(|l| l.protocol == protocol) {
            return Err(format!(
                "{key}: {} is listed twice (each listener name once)",
                protocol.name()
            ));
        }
        out.push(Listener {
            protocol,
            address: address.to_string(),
        });
    }
    if out.is_empty() {
        return Err(format!("{key}: no listener given"));
    }
    Ok(out)
}

/// `advertised.listeners`: comma-separated `[NAME://]host:port`; a bare one is the first
/// listener's (as `--advertised-listener host:port` always was).
pub(super) fn parse_advertised(
    key: &str,
    value: &str,
) -> Result<Vec<(Option<SecurityProtocol>, String)>, String> {
    let mut out = Vec::new();
    for entry in value.split(',').filter(|e| !e.trim().is_empty()) {
        let (name, address) = split_entry(entry);
        let protocol = name.map(|n| SecurityProtocol::parse(key, n)).transpose()?;
        out.push((protocol, address.to_string()));
    }
    Ok(out)
}

/// `sasl.enabled.mechanisms`: a non-empty list of mechanisms weir speaks, each once.
pub(super) fn parse_mechanisms(
    key: &str,
    value: &str,
) -> Result<Vec<crate::sasl::Mechanism>, String> {
    let mut out = Vec::new();
    for name in value.split(',').map(str::trim).filter(|n| !n.is_empty()) {
        let m = crate::sasl::Mechanism::parse(name).ok_or_else(|| {
            format!("{key}: unknown SASL mechanism '{name}' (SCRAM-SHA-256, SCRAM-SHA-512, PLAIN)")
        })?;
        if !out.contains(&m) {
            out.push(m);
        }
    }
    if out.is_empty() {
        return Err(format!("{key}: no mechanism given"));
    }
    Ok(out)
}

/// `authorizer.class.name`: Kafka's authorizers or `weir` turn ACL checks on; `none` or
/// empty leaves them off.
pub(super) fn parse_authorizer(key: &str, value: &str) -> Result<bool, String> {
    match value.trim() {
        "" | "none" => Ok(false),
        "weir"
        | "org.apache.kafka.metadata.authorizer.StandardAuthorizer"
        | "kafka.security.authorizer.AclAuthorizer" => Ok(true),
        v => Err(format!(
            "{key}: '{v}' is not an authorizer weir has (weir, \
             org.apache.kafka.metadata.authorizer.StandardAuthorizer, \
             kafka.security.authorizer.AclAuthorizer, or none)"
        )),
    }
}

/// `super.users`: `;`-separated principals, each `TYPE:NAME`.
pub(super) fn parse_principals(key: &str, value: &str) -> Result<Vec<String>, String> {
    let mut out = Vec::new();
    for p in value
        .split(';')
        .map(str::trim)
        .filter(|p| !p.is_empty() && *p != "none")
    {
        match p.split_once(':') {
            Some((t, n)) if !t.is_empty() && !n.is_empty() => out.push(p.to_string()),
            _ => return Err(format!("{key}: '{p}' is not a principal like User:alice")),
        }
    }
    Ok(out)
}

/// `name://addr,...` as Kafka prints it.
pub(super) fn render(listeners: &[Listener]) -> String {
    listeners
        .iter()
        .map(|l| format!("{}://{}", l.protocol.name(), l.address))
        .collect::<Vec<_>>()
        .join(",")
}

impl super::BrokerConfig {
    /// The advertised host:port of listener `index`, if `advertised.listeners` names one.
    pub fn advertised_for(&self, index: usize) -> Option<&str> {
        let protocol = self.listeners.get(index)?.protocol;
        self.advertised_listeners
            .iter()
            .find(|(p, _)| *p == Some(protocol))
            .or_else(|| {
                (index == 0)
                    .then(|| self.advertised_listeners.iter().find(|(p, _)| p.is_none()))
                    .flatten()
            })
            .map(|(_, a)| a.as_str())
    }

    /// Checks what only the whole configuration can tell: every advertised listener names a
    /// listener, and an SSL listener has a certificate and key (and client authentication a
    /// truststore).
    pub fn check_listeners(&self) -> Result<(), String> {
        for (p, a) in &self.advertised_listeners {
            if let Some(p) = p {
                if !self.listeners.iter().any(|l| l.protocol == *p) {
                    return Err(format!(
                        "advertised.listeners: {}://{a} names no listener in listeners={}",
                        p.name(),
                        render(&self.listeners)
                    ));
                }
            }
        }
        if let Some(l) = self.listeners.iter().find(|l| l.protocol.tls()) {
            if self.ssl.certificate.is_none() || self.ssl.key.is_none() {
                return Err(format!(
                    "an {} listener needs ssl.certificate.location and ssl.key.location \
                     (PEM files; docs/security.md)",
                    l.protocol.name()
                ));
            }
            if self.ssl.client_auth.is_some_and(|c| c != ClientAuth::None)
                && self.ssl.truststore.is_none()
            {
                return Err(
                    "ssl.client.auth needs ssl.truststore.location (the PEM file of the \
                     CAs that sign client certificates)"
                        .into(),
                );
            }
        }
        if !self.voters.is_empty() {
            match self.inter_broker_protocol {
                None => {
                    return Err("a cluster (controller.quorum.voters) needs \
                         security.inter.broker.protocol: SSL (mutual TLS between brokers, with \
                         ssl.certificate.location, ssl.key.location and the cluster's CA in \
                         ssl.truststore.location) or, on a trusted network only, PLAINTEXT \
                         (docs/security.md, \"Between brokers\")"
                        .into())
                }
                Some(SecurityProtocol::Ssl)
                    if self.ssl.certificate.is_none()
                        || self.ssl.key.is_none()
                        || self.ssl.truststore.is_none() =>
                {
                    return Err("security.inter.broker.protocol=SSL needs \
                         ssl.certificate.location, ssl.key.location (this broker's certificate \
                         and key) and ssl.truststore.location (the CA that signs every \
                         broker's certificate)"
                        .into())
                }
                _ => {}
            }
        }
        Ok(())
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::config::BrokerConfig;

    #[test]
    fn kafka_listener_lists() {
        let l = parse_listeners(
            "listeners",
            "PLAINTEXT://127.0.0.1:9092, SSL://0.0.0.0:9192",
        )
        .unwrap();
        assert_eq!(l.len(), 2);
        assert_eq!(l[1].protocol, SecurityProtocol::Ssl);
        assert_eq!(l[1].address, "0.0.0.0:9192");
        assert_eq!(render(&l), "PLAINTEXT://127.0.0.1:9092,SSL://0.0.0.0:9192");
        let bare = parse_listeners("listeners", "127.0.0.1:0").unwrap();
        assert_eq!(bare[0].protocol, SecurityProtocol::Plaintext);
        let e = parse_listeners("listeners", "SSL://a:1,ssl://b:2").unwrap_err();
        assert!(e.contains("twice"), "{e}");
        let s = parse_listeners("listeners", "SASL_SSL://a:1,sasl_plaintext://b:2").unwrap();
        assert_eq!(s[0].protocol, SecurityProtocol::SaslSsl);
        assert!(s[0].protocol.tls() && s[0].protocol.sasl());
        assert!(!s[1].protocol.tls() && s[1].protocol.sasl());
        let e = parse_listeners("listeners", "SASL_GSSAPI://a:1").unwrap_err();
        assert!(e.contains("unknown listener"), "{e}");
        assert!(parse_listeners("listeners", "SSL://nohost").is_err());
    }

    #[test]
    fn advertised_per_listener_and_checked() {
        let mut c = BrokerConfig::default();
        c.set("listeners", "PLAINTEXT://127.0.0.1:0,SSL://127.0.0.1:0")
            .unwrap();
        c.set("advertised.listeners", "SSL://broker.example:9193")
            .unwrap();
        assert_eq!(c.advertised_for(0), None);
        assert_eq!(c.advertised_for(1), Some("broker.example:9193"));
        let e = c.check_listeners().unwrap_err();
        assert!(e.contains("ssl.certificate.location"), "{e}");
        c.set("ssl.certificate.location", "/c.pem").unwrap();
        c.set("ssl.key.location", "/k.pem").unwrap();
        c.check_listeners().unwrap();
        c.set("ssl.client.auth", "required").unwrap();
        assert!(c.check_listeners().unwrap_err().contains("truststore"));
        c.set("advertised.listeners", "h:1").unwrap();
        assert_eq!(c.advertised_for(0), Some("h:1"));
        assert_eq!(c.advertised_for(1), None);
        c.set("listeners", "PLAINTEXT://127.0.0.1:0").unwrap();
        c.set("advertised.listeners", "SSL://h:1").unwrap();
        assert!(c
            .check_listeners()
            .unwrap_err()
            .contains("names no listener"));
    }
}
