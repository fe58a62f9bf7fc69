//! Mutual TLS between brokers (`security.inter.broker.protocol=SSL`): who may talk on the
//! peer port, and who a connection is.
//!
//! Every broker presents its own certificate (`ssl.certificate.location`) on both ends of a
//! peer connection, and accepts only certificates signed by the cluster's CA
//! (`ssl.truststore.location`). A certificate is valid for a broker when it names that
//! broker's host in `controller.quorum.voters` (a DNS or IP subject alternative name, as TLS
//! server certificates do): an outbound connection checks that of the broker it dials, and an
//! inbound one is known as the brokers whose hosts the certificate names (`PeerIdentity`) —
//! never as what its frames say they are from. A frame naming another sender closes the
//! connection (`inbound.rs`). Brokers with distinct hosts have certificates that tell them
//! apart; brokers sharing a host share what their certificates can prove.

use std::sync::Arc;
use std::time::Duration;

use futures_rustls::{TlsAcceptor, TlsConnector};
use rustls::pki_types::{CertificateDer, ServerName};
use rustls::server::{ParsedCertificate, WebPkiClientVerifier};
use rustls::{ClientConfig, ServerConfig};
use weir::cluster::Voter;
use weir::config::SslConfig;

use crate::broker::tls::{identity, provider, trust_roots};

/// Longest a peer's TLS handshake may take.
pub const HANDSHAKE_TIMEOUT: Duration = Duration::from_secs(5);

/// This broker's side of mutual TLS with its peers.
#[derive(Clone)]
pub struct PeerTls {
    pub acceptor: TlsAcceptor,
    pub connector: TlsConnector,
    /// Every broker's host (`controller.quorum.voters`), by id.
    voters: Vec<(u64, String)>,
}

impl PeerTls {
    /// Reads and checks the `ssl.*` files (start-up: an error stops the start).
    pub fn load(ssl: &SslConfig, voters: &[Voter]) -> Result<PeerTls, String> {
        let (certs, key) = identity(ssl)?;
        let roots = trust_roots(ssl)?;
        let verifier = WebPkiClientVerifier::builder_with_provider(roots.clone(), provider())
            .build()
            .map_err(|e| format!("ssl.truststore.location: {e}"))?;
        let server = ServerConfig::builder_with_provider(provider())
            .with_safe_default_protocol_versions()
            .map_err(|e| format!("TLS: {e}"))?
            .with_client_cert_verifier(verifier)
            .with_single_cert(certs.clone(), key.clone_key())
            .map_err(|e| format!("ssl.certificate.location / ssl.key.location: {e}"))?;
        let client = ClientConfig::builder_with_provider(provider())
            .with_safe_default_protocol_versions()
            .map_err(|e| format!("TLS: {e}"))?
            .with_root_certificates(roots)
            .with_client_auth_cert(certs, key)
            .map_err(|e| format!("ssl.certificate.location / ssl.key.location: {e}"))?;
        let voters = voters
            .iter()
            .map(|v| (v.id, host_of(&v.addr).to_string()))
            .collect();
        Ok(PeerTls {
            acceptor: TlsAcceptor::from(Arc::new(server)),
            connector: TlsConnector::from(Arc::new(client)),
            voters,
        })
    }

    /// The name an outbound connection to broker `id` checks its certificate against.
    pub fn server_name(&self, id: u64) -> Option<ServerName<'static>> {
        let host = &self.voters.iter().find(|v| v.0 == id)?.1;
        ServerName::try_from(host.clone()).ok()
    }

    /// Who the peer presenting `cert` may be: the brokers (other than `own_id`) whose host
    /// the certificate is valid for.
    pub fn identify(&self, cert: &CertificateDer<'_>, own_id: u64) -> PeerIdentity {
        let Ok(parsed) = ParsedCertificate::try_from(cert) else {
            return PeerIdentity(Vec::new());
        };
        PeerIdentity(
            self.voters
                .iter()
                .filter(|(id, _)| *id != own_id)
                .filter(|(_, host)| {
                    ServerName::try_from(host.as_str())
                        .is_ok_and(|n| rustls::client::verify_server_name(&parsed, &n).is_ok())
                })
                .map(|(id, _)| *id)
                .collect(),
        )
    }
}

/// The brokers an authenticated peer connection may speak for (see the module docs).
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct PeerIdentity(pub Vec<u64>);

impl PeerIdentity {
    pub fn may_be(&self, id: u64) -> bool {
        self.0.contains(&id)
    }
}

/// The host of `host:port` (`[v6]:port` too).
fn host_of(addr: &str) -> &str {
    let host = addr.rsplit_once(':').map_or(addr, |(h, _)| h);
    host.trim_start_matches('[').trim_end_matches(']')
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn hosts_of_voter_addresses() {
        assert_eq!(host_of("127.0.0.2:9100"), "127.0.0.2");
        assert_eq!(host_of("broker-1.example.com:9100"), "broker-1.example.com");
        assert_eq!(host_of("[::1]:9100"), "::1");
    }
}
