//! TLS for SSL listeners (rustls with the ring provider; no OpenSSL).
//!
//! The certificate, key and truststore are read and checked once at start-up, on the main
//! thread (a bad file stops the start with a message). Each core then gets its own
//! `ServerConfig` clone with its own session cache, and terminates its own connections: the
//! handshake and every record's encryption run on the core that accepted the connection,
//! inside that connection's task (`futures_rustls::TlsAcceptor` over glommio's `TcpStream`,
//! no `Send` needed, no thread or lock shared between cores on the data path).
//!
//! Certificates are not reloaded: replacing the files needs a restart (for now).

use std::path::Path;
use std::sync::Arc;

use rustls::pki_types::pem::PemObject;
use rustls::pki_types::{CertificateDer, PrivateKeyDer};
use rustls::server::WebPkiClientVerifier;
use rustls::{RootCertStore, ServerConfig};
use weir::config::{ClientAuth, SslConfig};

/// Longest a TLS handshake may take before the connection is closed (a client that connects
/// and says nothing, or a plaintext Kafka client waiting for an answer, holds no resources
/// past it).
pub const HANDSHAKE_TIMEOUT: std::time::Duration = std::time::Duration::from_secs(10);

fn provider() -> Arc<rustls::crypto::CryptoProvider> {
    Arc::new(rustls::crypto::ring::default_provider())
}

fn read_certs(what: &str, path: &Path) -> Result<Vec<CertificateDer<'static>>, String> {
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
    let builder = ServerConfig::builder_with_provider(provider())
        .with_safe_default_protocol_versions()
        .map_err(|e| format!("TLS: {e}"))?;
    let client_auth = ssl.client_auth.unwrap_or(ClientAuth::None);
    let builder = match client_auth {
        ClientAuth::None => builder.with_no_client_auth(),
        ClientAuth::Requested | ClientAuth::Required => {
            let path = ssl
                .truststore
                .as_deref()
                .ok_or("ssl.client.auth needs ssl.truststore.location")?;
            let mut roots = RootCertStore::empty();
            for c in read_certs("ssl.truststore.location", path)? {
                roots
                    .add(c)
                    .map_err(|e| format!("ssl.truststore.location {}: {e}", path.display()))?;
            }
            let v = WebPkiClientVerifier::builder_with_provider(Arc::new(roots), provider());
            let v = if client_auth == ClientAuth::Requested {
                v.allow_unauthenticated()
            } else {
                v
            };
            builder.with_client_cert_verifier(
                v.build()
                    .map_err(|e| format!("ssl.truststore.location {}: {e}", path.display()))?,
            )
        }
    };
    let config = builder
        .with_single_cert(certs, key)
        .map_err(|e| format!("ssl.certificate.location / ssl.key.location: {e}"))?;
    Ok(Arc::new(config))
}

/// One core's acceptor: the shared configuration with a session cache of its own (so
/// resuming a session touches no other core's lock).
pub fn core_acceptor(base: &Arc<ServerConfig>) -> futures_rustls::TlsAcceptor {
    let mut c = (**base).clone();
    c.session_storage = rustls::server::ServerSessionMemoryCache::new(1024);
    futures_rustls::TlsAcceptor::from(Arc::new(c))
}
