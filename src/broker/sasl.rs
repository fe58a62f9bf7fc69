//! SASL on a connection of a SASL_PLAINTEXT or SASL_SSL listener: the state machine that
//! admits or refuses each request before it is processed.
//!
//! Until the client has authenticated, only ApiVersions, SaslHandshake and SaslAuthenticate
//! are answered; anything else closes the connection, as Kafka does. The exchange runs in
//! the connection's read loop (in request order, on the core that accepted the connection),
//! looking credentials up in this core's metadata snapshot: nothing is shared or locked
//! between cores. A failed login gets SASL_AUTHENTICATION_FAILED with the same message
//! whatever was wrong (unknown user, wrong password, malformed token), is logged with the
//! real reason and counted, and the connection is closed once the answer is written.
//!
//! Sessions (KIP-368): with `connections.max.reauth.ms` above 0 the SaslAuthenticate answer
//! carries the session lifetime; the client re-authenticates on the same connection
//! (SaslHandshake again, same mechanism and user) before it runs out, and a request after
//! that closes the connection.

use std::rc::Rc;
use std::time::{Duration, Instant};

use bytes::Bytes;
use kafka_protocol::messages::{ApiKey, SaslAuthenticateResponse, SaslHandshakeResponse};
use kafka_protocol::protocol::StrBytes;
use weir::sasl::scram::{self, ScramServer, Step};
use weir::sasl::{plain, Mechanism};

use crate::broker::errors;
use crate::broker::kafka::{encode_response, Body, ProtocolError, Request};
use crate::broker::log_limit::LogLimit;
use crate::broker::metrics::CoreMetrics;
use crate::broker::shard::Shard;

/// What to do with a request on a SASL connection.
pub enum Admit {
    /// Process it as usual.
    Pass,
    /// Send this answer (already encoded) in its turn and go on reading.
    Answer(Bytes),
    /// Send this answer, then close the connection (the reason is for the log).
    AnswerAndClose(Bytes, String),
    /// Close the connection now (the reason is for the log).
    Close(String),
}

enum State {
    /// Waiting for SaslHandshake.
    Handshake,
    /// Handshake done: the mechanism's first token comes next.
    Token(Mechanism),
    /// A SCRAM exchange after its first round.
    Scram(Mechanism, ScramServer),
    /// Authenticated (a later SaslHandshake starts a re-authentication).
    Done,
}

/// One connection's authentication.
pub struct ConnAuth {
    state: State,
    /// The authenticated user, once there is one (kept during a re-authentication).
    user: Option<String>,
    /// The mechanism of the first authentication (a re-authentication must use it).
    mechanism: Option<Mechanism>,
    /// When the session ends (`connections.max.reauth.ms`), if it does.
    expires: Option<Instant>,
    /// The last SaslHandshake was v0: tokens come as raw frames, not SaslAuthenticate.
    raw: bool,
}

/// What every failed login is told, whatever was wrong.
fn failure_message(m: Mechanism) -> String {
    format!(
        "Authentication failed: invalid credentials with SASL mechanism {}",
        m.name()
    )
}

impl ConnAuth {
    pub fn new() -> ConnAuth {
        ConnAuth {
            state: State::Handshake,
            user: None,
            mechanism: None,
            expires: None,
            raw: false,
        }
    }

    /// The authenticated user, if any.
    pub fn user(&self) -> Option<&str> {
        self.user.as_deref()
    }

    /// Decides what happens to `req`; runs the SASL exchange for SaslHandshake and
    /// SaslAuthenticate.
    pub async fn admit(
        &mut self,
        shard: &Rc<Shard>,
        req: &Request,
        peer: &str,
    ) -> Result<Admit, ProtocolError> {
        match &req.body {
            Body::ApiVersions(_) | Body::ApiVersionsUnsupported => Ok(Admit::Pass),
            Body::SaslHandshake(h) => self.handshake(shard, req, h.mechanism.as_str()),
            Body::SaslAuthenticate(a) => {
                self.authenticate(shard, req, a.auth_bytes.clone(), peer)
                    .await
            }
            _ => Ok(match (&self.user, self.expires) {
                (None, _) => {
                    Admit::Close(format!("{:?} request before SASL authentication", req.key))
                }
                (Some(u), Some(t)) if Instant::now() >= t => Admit::Close(format!(
                    "the SASL session of {u} expired without re-authentication \
                     (connections.max.reauth.ms)"
                )),
                _ => Admit::Pass,
            }),
        }
    }

    fn handshake(
        &mut self,
        shard: &Rc<Shard>,
        req: &Request,
        name: &str,
    ) -> Result<Admit, ProtocolError> {
        let enabled = &shard.config.sasl_mechanisms;
        let mut resp = SaslHandshakeResponse::default();
        resp.mechanisms = enabled
            .iter()
            .map(|m| StrBytes::from_static_str(m.name()))
            .collect();
        let answer = |resp: &SaslHandshakeResponse| {
            encode_response(ApiKey::SaslHandshake, req.version, req.correlation_id, resp)
        };
        if !matches!(self.state, State::Handshake | State::Done) {
            resp.error_code = errors::ILLEGAL_SASL_STATE;
            return Ok(Admit::AnswerAndClose(
                answer(&resp)?,
                "SaslHandshake in the middle of a SASL exchange".into(),
            ));
        }
        let wanted = Mechanism::parse(name).filter(|m| enabled.contains(m));
        let Some(m) = wanted else {
            resp.error_code = errors::UNSUPPORTED_SASL_MECHANISM;
            return Ok(Admit::AnswerAndClose(
                answer(&resp)?,
                format!("SASL mechanism {name:?} is not enabled (sasl.enabled.mechanisms)"),
            ));
        };
        if self.mechanism.is_some_and(|was| was != m) {
            resp.error_code = errors::ILLEGAL_SASL_STATE;
            return Ok(Admit::AnswerAndClose(
                answer(&resp)?,
                format!(
                    "re-authentication with {} instead of the session's mechanism",
                    m.name()
                ),
            ));
        }
        self.state = State::Token(m);
        self.raw = req.version == 0;
        Ok(Admit::Answer(answer(&resp)?))
    }

    /// Whether the next frame is a raw SASL token (after a SaslHandshake v0: the tokens
    /// travel without Kafka's request header, as before KIP-152).
    pub fn expects_raw_token(&self) -> bool {
        self.raw && matches!(self.state, State::Token(_) | State::Scram(..))
    }

    /// A raw token (after SaslHandshake v0): the answer to write (size-prefixed raw bytes).
    /// A failed login is answered by closing, as Kafka does.
    pub async fn raw_token(&mut self, shard: &Rc<Shard>, token: Bytes, peer: &str) -> Admit {
        let framed = |b: &[u8]| {
            let mut out = Vec::with_capacity(4 + b.len());
            out.extend_from_slice(&(b.len() as i32).to_be_bytes());
            out.extend_from_slice(b);
            Bytes::from(out)
        };
        match self.exchange(shard, token, peer).await {
            Exchange::Challenge(c) => Admit::Answer(framed(&c)),
            Exchange::Success(f, _) => Admit::Answer(framed(&f)),
            Exchange::Failed(_, why) => Admit::Close(format!("SASL authentication failed: {why}")),
            Exchange::OutOfOrder => Admit::Close("raw SASL token out of order".into()),
        }
    }

    async fn authenticate(
        &mut self,
        shard: &Rc<Shard>,
        req: &Request,
        token: Bytes,
        peer: &str,
    ) -> Result<Admit, ProtocolError> {
        let mut resp = SaslAuthenticateResponse::default();
        let encode = |resp: &SaslAuthenticateResponse| {
            encode_response(
                ApiKey::SaslAuthenticate,
                req.version,
                req.correlation_id,
                resp,
            )
        };
        match self.exchange(shard, token, peer).await {
            Exchange::Challenge(c) => {
                resp.auth_bytes = c;
                Ok(Admit::Answer(encode(&resp)?))
            }
            Exchange::Success(f, lifetime_ms) => {
                resp.auth_bytes = f;
                resp.session_lifetime_ms = lifetime_ms;
                Ok(Admit::Answer(encode(&resp)?))
            }
            Exchange::Failed(m, why) => {
                // Kafka's `connection.failed.authentication.delay.ms`: a failed login is
                // answered late, so that guessing costs the guesser time too.
                let delay = shard.config.failed_authentication_delay_ms;
                if delay > 0 {
                    glommio::timer::sleep(Duration::from_millis(delay)).await;
                }
                resp.error_code = errors::SASL_AUTHENTICATION_FAILED;
                resp.error_message = Some(StrBytes::from_string(failure_message(m)));
                Ok(Admit::AnswerAndClose(
                    encode(&resp)?,
                    format!("SASL authentication failed: {why}"),
                ))
            }
            Exchange::OutOfOrder => {
                resp.error_code = errors::ILLEGAL_SASL_STATE;
                resp.error_message = Some(StrBytes::from_static_str(
                    "SaslAuthenticate without a SaslHandshake first",
                ));
                Ok(Admit::AnswerAndClose(
                    encode(&resp)?,
                    "SaslAuthenticate without a SaslHandshake".into(),
                ))
            }
        }
    }

    /// One token of the mechanism's exchange, whatever its framing.
    async fn exchange(&mut self, shard: &Rc<Shard>, token: Bytes, peer: &str) -> Exchange {
        let state = std::mem::replace(&mut self.state, State::Handshake);
        let (m, outcome) = match state {
            State::Handshake | State::Done => return Exchange::OutOfOrder,
            State::Token(Mechanism::Plain) => (
                Mechanism::Plain,
                check_plain(shard, &token, peer)
                    .await
                    .map(|u| (u, Bytes::new())),
            ),
            State::Token(m) => {
                let server = ScramServer::new(m.scram().expect("a SCRAM mechanism"));
                match self.scram_step(shard, m, server, &token) {
                    Ok(Some(challenge)) => return Exchange::Challenge(challenge),
                    Ok(None) => (m, Err("SCRAM ended after one message".into())),
                    Err(e) => (m, Err(e)),
                }
            }
            State::Scram(m, mut server) => {
                let meta = shard.metadata();
                match server.step(&token, |u| meta.scram_credential(u, m).cloned()) {
                    Ok(Step::Success {
                        username,
                        server_final,
                    }) => (m, Ok((username, Bytes::from(server_final)))),
                    Ok(Step::Challenge(_)) => (m, Err("SCRAM asked for a third round".into())),
                    Err(e) => (m, Err(e.0)),
                }
            }
        };
        let outcome = outcome.and_then(|(user, fin)| match &self.user {
            Some(was) if *was != user => {
                Err(format!("re-authentication as {user} on a session of {was}"))
            }
            _ => Ok((user, fin)),
        });
        match outcome {
            Ok((user, fin)) => {
                let reauth = self.user.is_some();
                CoreMetrics::bump(if reauth {
                    &shard.metrics.sasl_reauthentications
                } else {
                    &shard.metrics.sasl_authentications
                });
                tracing::debug!(core = shard.id, %peer, %user, mechanism = m.name(), reauth,
                    "SASL authentication succeeded");
                let lifetime_ms = shard.config.connections_max_reauth_ms;
                self.expires =
                    (lifetime_ms > 0).then(|| Instant::now() + Duration::from_millis(lifetime_ms));
                self.user = Some(user);
                self.mechanism = Some(m);
                self.state = State::Done;
                Exchange::Success(fin, lifetime_ms.min(i64::MAX as u64) as i64)
            }
            Err(why) => {
                CoreMetrics::bump(&shard.metrics.sasl_authentication_failures);
                shard.login_failures.failed(peer_ip(peer));
                if let Some(left_out) = FAILED_LOG.with(LogLimit::allow) {
                    tracing::warn!(core = shard.id, %peer, mechanism = m.name(), reason = %why,
                        left_out, "SASL authentication failed; closing connection");
                }
                Exchange::Failed(m, why)
            }
        }
    }

    /// A SCRAM exchange's first round: the challenge (the exchange goes on in `State::Scram`).
    fn scram_step(
        &mut self,
        shard: &Rc<Shard>,
        m: Mechanism,
        mut server: ScramServer,
        token: &[u8],
    ) -> Result<Option<Bytes>, String> {
        let meta = shard.metadata();
        match server.step(token, |u| meta.scram_credential(u, m).cloned()) {
            Ok(Step::Challenge(challenge)) => {
                self.state = State::Scram(m, server);
                Ok(Some(Bytes::from(challenge)))
            }
            Ok(Step::Success { .. }) => Ok(None),
            Err(e) => Err(e.0),
        }
    }
}

/// What one token of an exchange led to.
enum Exchange {
    /// The server's next message; the exchange goes on.
    Challenge(Bytes),
    /// Logged in: the mechanism's last message (may be empty) and the session lifetime (ms).
    Success(Bytes, i64),
    /// The login failed (mechanism, the real reason for the log).
    Failed(Mechanism, String),
    /// A token without a handshake before it.
    OutOfOrder,
}

/// PLAIN: the password checked against the user's stored SCRAM credential (SHA-512 if the
/// user has one, else SHA-256). PBKDF2 takes milliseconds, so it runs off this core's reactor.
async fn check_plain(shard: &Rc<Shard>, token: &[u8], peer: &str) -> Result<String, String> {
    let auth = plain::parse(token)?;
    if shard.login_failures.throttled(peer_ip(peer)) {
        return Err(format!(
            "too many failed logins from {peer} (no password checked: throttled)"
        ));
    }
    let meta = shard.metadata();
    let cred = [Mechanism::ScramSha512, Mechanism::ScramSha256]
        .into_iter()
        .find_map(|m| {
            Some((
                m.scram()?,
                meta.scram_credential(&auth.username, m)?.clone(),
            ))
        });
    // An unknown user's password is checked against a made-up credential, at the same cost
    // as a real one's: the answer's timing does not tell whether the user exists.
    let known = cred.is_some();
    let (hash, cred) = cred.unwrap_or_else(|| {
        let hash = Mechanism::ScramSha512.scram().expect("a SCRAM mechanism");
        (hash, scram::fake_credential(hash, &auth.username))
    });
    let password = auth.password;
    let ok =
        weir_storage::io::off_reactor(move || scram::check_password(hash, &cred, &password)).await;
    match (known, ok) {
        (true, true) => Ok(auth.username),
        (true, false) => Err(format!("wrong password for user {}", auth.username)),
        (false, _) => Err(format!("unknown user {}", auth.username)),
    }
}

thread_local! {
    /// Failed logins are logged at most once a second per core (a brute force made two lines
    /// each).
    static FAILED_LOG: LogLimit = const { LogLimit::new(Duration::from_secs(1)) };
}

/// The address part of a peer's `ip:port`.
fn peer_ip(peer: &str) -> &str {
    peer.rsplit_once(':').map_or(peer, |(ip, _)| ip)
}
