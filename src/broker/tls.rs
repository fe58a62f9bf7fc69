//! TLS for SSL listeners (rustls with the ring provider; no OpenSSL).
//!
//! The certificate, key and truststore are read and checked once at start-up, on the main
//! thread (a bad file stops the start with a message). Each core then gets its own
//! `ServerConfig` clone with its own session cache, and terminates its own connections: the
//! handshake and every record's encryption run on the core that accepted the connection,
//! inside that connection's task (`futures_rustls::TlsAcceptor` over glommio's `TcpStream`,
//! no `Send` needed, no thread or lock shared between cores on the data path).
//!
//! Certificates are reloaded on SIGHUP (`TlsSource::reload`, on the signal thread): the files
//! are read and checked again, and a good new configuration replaces the old one for
//! connections accepted from then on (each core notices the bumped generation at its next
//! accept and builds a fresh acceptor); a bad one is logged and the old one kept. Open
//! connections keep the session they have.

use std::cell::RefCell;
use std::path::Path;
use std::sync::atomic::{AtomicU64, Ordering};
use std::sync::{Arc, Mutex};

use rustls::pki_types::pem::PemObject;
use rustls::pki_types::{CertificateDer, PrivateKeyDer};
use rustls::server::WebPkiClientVerifier;
use rustls::{RootCertStore, ServerConfig};
use weir::config::{ClientAuth, SslConfig};

/// Longest a TLS handshake may take before the connection is closed (a client that connects
/// and says nothing, or a plaintext Kafka client waiting for an answer, holds no resources
/// past it).
pub const HANDSHAKE_TIMEOUT: std::time::Duration = std::time::Duration::from_secs(10);

pub(crate) fn provider() -> Arc<rustls::crypto::CryptoProvider> {
    Arc::new(rustls::crypto::ring::default_provider())
}

pub(crate) fn read_certs(what: &str, path: &Path) -> Result<Vec<CertificateDer<'static>>, String> {
    let certs: Vec<_> = CertificateDer::pem_file_iter(path)
        .map_err(|e| format!("{what} {}: {e}", path.display()))?
        .collect::<Result<_, _>>()
        .map_err(|e| format!("{what} {}: {e}", path.display()))?;
    if certs.is_empty() {
        return Err(format!(
            "{what} {}: no PEM CERTIFICATE in it",
            path.display()
        ));
    }
    Ok(certs)
}

/// The server's TLS configuration from the `ssl.*` settings (checked by
/// `BrokerConfig::check_listeners`: certificate and key are set).
pub fn server_config(ssl: &SslConfig) -> Result<Arc<ServerConfig>, String> {
    let (certs, key) = identity(ssl)?;
    let builder = ServerConfig::builder_with_provider(provider())
        .with_safe_default_protocol_versions()
        .map_err(|e| format!("TLS: {e}"))?;
    let client_auth = ssl.client_auth.unwrap_or(ClientAuth::None);
    let builder = match client_auth {
        ClientAuth::None => builder.with_no_client_auth(),
        ClientAuth::Requested | ClientAuth::Required => {
            if ssl.truststore.is_none() {
                return Err("ssl.client.auth needs ssl.truststore.location".into());
            }
            let v = WebPkiClientVerifier::builder_with_provider(trust_roots(ssl)?, provider());
            let v = if client_auth == ClientAuth::Requested {
                v.allow_unauthenticated()
            } else {
                v
            };
            builder.with_client_cert_verifier(
                v.build()
                    .map_err(|e| format!("ssl.truststore.location: {e}"))?,
            )
        }
    };
    let config = builder
        .with_single_cert(certs, key)
        .map_err(|e| format!("ssl.certificate.location / ssl.key.location: {e}"))?;
    Ok(Arc::new(config))
}

/// This broker's certificate chain and private key (`ssl.certificate.location`,
/// `ssl.key.location`).
pub(crate) fn identity(
    ssl: &SslConfig,
) -> Result<(Vec<CertificateDer<'static>>, PrivateKeyDer<'static>), String> {
    let cert_path = ssl
        .certificate
        .as_deref()
        .ok_or("ssl.certificate.location is not set")?;
    let key_path = ssl.key.as_deref().ok_or("ssl.key.location is not set")?;
    let certs = read_certs("ssl.certificate.location", cert_path)?;
    let key = PrivateKeyDer::from_pem_file(key_path).map_err(|e| {
        format!(
            "ssl.key.location {}: {e} (a PEM PRIVATE KEY, RSA PRIVATE KEY or EC PRIVATE KEY, \
             not encrypted)",
            key_path.display()
        )
    })?;
    Ok((certs, key))
}

/// The CAs of `ssl.truststore.location`.
pub(crate) fn trust_roots(ssl: &SslConfig) -> Result<Arc<RootCertStore>, String> {
    let path = ssl
        .truststore
        .as_deref()
        .ok_or("ssl.truststore.location is not set")?;
    let mut roots = RootCertStore::empty();
    for c in read_certs("ssl.truststore.location", path)? {
        roots
            .add(c)
            .map_err(|e| format!("ssl.truststore.location {}: {e}", path.display()))?;
    }
    Ok(Arc::new(roots))
}

/// One core's acceptor: the shared configuration with a session cache of its own (so
/// resuming a session touches no other core's lock).
fn core_acceptor(base: &Arc<ServerConfig>) -> futures_rustls::TlsAcceptor {
    let mut c = (**base).clone();
    c.session_storage = rustls::server::ServerSessionMemoryCache::new(1024);
    futures_rustls::TlsAcceptor::from(Arc::new(c))
}

/// The broker's TLS configuration, replaceable at run time (SIGHUP). Cores read it only when
/// `generation` has moved since their last accept: one atomic load per accepted connection,
/// the mutex only after a reload.
pub struct TlsSource {
    ssl: SslConfig,
    generation: AtomicU64,
    config: Mutex<Arc<ServerConfig>>,
}

impl TlsSource {
    /// Reads and checks the files (start-up: an error stops the start).
    pub fn load(ssl: &SslConfig) -> Result<Arc<TlsSource>, String> {
        Ok(Arc::new(TlsSource {
            ssl: ssl.clone(),
            generation: AtomicU64::new(0),
            config: Mutex::new(server_config(ssl)?),
        }))
    }

    /// Reads the files again (SIGHUP; blocking: call it off the cores). On an error the
    /// current configuration stays.
    pub fn reload(&self) -> Result<(), String> {
        let fresh = server_config(&self.ssl)?;
        *self.config.lock().unwrap_or_else(|e| e.into_inner()) = fresh;
        self.generation.fetch_add(1, Ordering::Release);
        Ok(())
    }

    fn current(&self) -> (u64, Arc<ServerConfig>) {
        let generation = self.generation.load(Ordering::Acquire);
        let config = self
            .config
            .lock()
            .unwrap_or_else(|e| e.into_inner())
            .clone();
        (generation, config)
    }
}

/// One core's acceptor, rebuilt when the source has been reloaded.
pub struct CoreTls {
    source: Arc<TlsSource>,
    cached: RefCell<(u64, futures_rustls::TlsAcceptor)>,
}

impl CoreTls {
    pub fn new(source: Arc<TlsSource>) -> CoreTls {
        let (generation, config) = source.current();
        CoreTls {
            cached: RefCell::new((generation, core_acceptor(&config))),
            source,
        }
    }

    /// The acceptor for a connection accepted now.
    pub fn acceptor(&self) -> futures_rustls::TlsAcceptor {
        let now = self.source.generation.load(Ordering::Acquire);
        if self.cached.borrow().0 != now {
            let (generation, config) = self.source.current();
            *self.cached.borrow_mut() = (generation, core_acceptor(&config));
        }
        self.cached.borrow().1.clone()
    }
}

/// The principal of a client that presented a certificate (verified against the truststore
/// in the handshake): `User:` + its subject's distinguished name in RFC 2253 form, most
/// specific first (`User:CN=alice,OU=eng,O=corp`) — Kafka's default
/// (`ssl.principal.mapping.rules=DEFAULT`), so ACLs written for Kafka match.
pub fn client_principal(conn: &rustls::ServerConnection) -> Option<String> {
    let cert = conn.peer_certificates()?.first()?;
    subject_dn(cert.as_ref()).map(|dn| format!("User:{dn}"))
}

/// One DER element: (tag, contents, what follows).
fn der(b: &[u8]) -> Option<(u8, &[u8], &[u8])> {
    let (&tag, rest) = b.split_first()?;
    let (&first, rest) = rest.split_first()?;
    let (len, rest) = if first < 0x80 {
        (first as usize, rest)
    } else {
        let n = (first & 0x7f) as usize;
        if n == 0 || n > 4 || rest.len() < n {
            return None;
        }
        let len = rest[..n].iter().fold(0usize, |a, &x| (a << 8) | x as usize);
        (len, &rest[n..])
    };
    (rest.len() >= len).then(|| (tag, &rest[..len], &rest[len..]))
}

/// The subject of a DER certificate as an RFC 2253 string.
fn subject_dn(cert: &[u8]) -> Option<String> {
    let (_, cert, _) = der(cert)?; // Certificate SEQUENCE
    let (_, mut tbs, _) = der(cert)?; // TBSCertificate SEQUENCE
    if tbs.first() == Some(&0xa0) {
        tbs = der(tbs)?.2; // [0] version
    }
    let rest = der(tbs)?.2; // serialNumber
    let rest = der(rest)?.2; // signature AlgorithmIdentifier
    let rest = der(rest)?.2; // issuer
    let rest = der(rest)?.2; // validity
    let (_, mut name, _) = der(rest)?; // subject Name
    let mut rdns = Vec::new();
    while !name.is_empty() {
        let (_, mut set, next) = der(name)?; // RelativeDistinguishedName SET
        name = next;
        let mut parts = Vec::new();
        while !set.is_empty() {
            let (_, atv, next) = der(set)?; // AttributeTypeAndValue SEQUENCE
            set = next;
            let (_, oid, value) = der(atv)?;
            let (vtag, raw, _) = der(value)?;
            let key = oid_name(oid)?;
            let text = match (key.starts_with(|c: char| c.is_ascii_digit()), vtag) {
                (false, 0x0c | 0x13 | 0x16 | 0x14) => escape(&String::from_utf8_lossy(raw)),
                (false, 0x1e) => escape(&String::from_utf16_lossy(
                    &raw.chunks(2)
                        .map(|c| u16::from_be_bytes([c[0], *c.get(1).unwrap_or(&0)]))
                        .collect::<Vec<_>>(),
                )),
                // Unknown attributes (and unusual string types): '#' + the DER value in hex.
                _ => {
                    let whole = &value[..value.len() - der(value)?.2.len()];
                    format!(
                        "#{}",
                        whole.iter().map(|b| format!("{b:02x}")).collect::<String>()
                    )
                }
            };
            parts.push(format!("{key}={text}"));
        }
        rdns.push(parts.join("+"));
    }
    rdns.reverse();
    Some(rdns.join(","))
}

/// RFC 2253's keyword for an attribute type, or its dotted OID.
fn oid_name(oid: &[u8]) -> Option<String> {
    let known: &[(&[u8], &str)] = &[
        (&[0x55, 0x04, 0x03], "CN"),
        (&[0x55, 0x04, 0x06], "C"),
        (&[0x55, 0x04, 0x07], "L"),
        (&[0x55, 0x04, 0x08], "ST"),
        (&[0x55, 0x04, 0x09], "STREET"),
        (&[0x55, 0x04, 0x0a], "O"),
        (&[0x55, 0x04, 0x0b], "OU"),
        (
            &[0x09, 0x92, 0x26, 0x89, 0x93, 0xf2, 0x2c, 0x64, 0x01, 0x19],
            "DC",
        ),
        (
            &[0x09, 0x92, 0x26, 0x89, 0x93, 0xf2, 0x2c, 0x64, 0x01, 0x01],
            "UID",
        ),
    ];
    if let Some((_, k)) = known.iter().find(|(o, _)| *o == oid) {
        return Some(k.to_string());
    }
    let (&first, rest) = oid.split_first()?;
    let mut arcs = vec![(first / 40) as u64, (first % 40) as u64];
    let mut acc: u64 = 0;
    for &b in rest {
        acc = acc.checked_mul(128)? | (b & 0x7f) as u64;
        if b & 0x80 == 0 {
            arcs.push(acc);
            acc = 0;
        }
    }
    Some(
        arcs.iter()
            .map(u64::to_string)
            .collect::<Vec<_>>()
            .join("."),
    )
}

/// RFC 2253 escaping of an attribute value.
fn escape(v: &str) -> String {
    let mut out = String::with_capacity(v.len());
    let last = v.chars().count().saturating_sub(1);
    for (i, c) in v.chars().enumerate() {
        let special = matches!(c, ',' | '+' | '"' | '\\' | '<' | '>' | ';')
            || (i == 0 && (c == '#' || c == ' '))
            || (i == last && c == ' ');
        if special {
            out.push('\\');
        }
        out.push(c);
    }
    out
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn rfc2253_names() {
        assert_eq!(oid_name(&[0x55, 0x04, 0x03]).as_deref(), Some("CN"));
        // emailAddress, 1.2.840.113549.1.9.1
        assert_eq!(
            oid_name(&[0x2a, 0x86, 0x48, 0x86, 0xf7, 0x0d, 0x01, 0x09, 0x01]).as_deref(),
            Some("1.2.840.113549.1.9.1")
        );
        assert_eq!(escape("a,b+c"), "a\\,b\\+c");
        assert_eq!(escape(" #x "), "\\ #x\\ ");
        assert!(der(&[0x30, 0x05, 1]).is_none(), "a length past the end");
    }
}
