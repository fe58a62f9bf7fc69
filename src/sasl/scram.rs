//! SCRAM-SHA-256 and SCRAM-SHA-512 (RFC 5802, RFC 7677) as Kafka speaks them: the server's
//! side of the two-round exchange, the message parsers, and the stored credential.
//!
//! ```text
//! client-first   n,,n=alice,r=<client nonce>            (gs2 header "n,," or "y,,", optional a=authzid)
//! server-first   r=<client nonce><server nonce>,s=<salt b64>,i=<iterations>
//! client-final   c=<gs2 header b64>,r=<nonce>,p=<ClientProof b64>
//! server-final   v=<ServerSignature b64>
//! ```
//!
//! SaltedPassword = PBKDF2(password, salt, iterations); ClientKey = HMAC(SaltedPassword,
//! "Client Key"); StoredKey = H(ClientKey); ServerKey = HMAC(SaltedPassword, "Server Key").
//! The server keeps salt, iterations, StoredKey and ServerKey; it checks the proof by
//! recovering ClientKey = ClientProof XOR HMAC(StoredKey, AuthMessage) and comparing
//! H(ClientKey) with StoredKey.
//!
//! An unknown user gets a challenge like a known one (salt derived from the name with a
//! secret of this process, the default iteration count) and fails at the final step with the
//! same answer as a wrong password: nothing tells a client which part was wrong.

use std::num::NonZeroU32;
use std::sync::OnceLock;

use ring::{digest, hmac, pbkdf2, rand::SecureRandom};

use super::scram_messages::fail;
pub use super::scram_messages::{
    parse_client_final, parse_client_first, ClientFinal, ClientFirst, Failure, MAX_MESSAGE,
};
use super::{b64, same_bytes, unb64, ScramCredential};

/// Fewest and most PBKDF2 iterations a credential may have (Kafka's bounds).
pub const MIN_ITERATIONS: u32 = 4096;
pub const MAX_ITERATIONS: u32 = 16384;
/// What `weir user add` uses, as Kafka's tools do.
pub const DEFAULT_ITERATIONS: u32 = 4096;
/// Bytes of random salt of a new credential, and of the server's nonce.
const SALT_BYTES: usize = 32;
const NONCE_BYTES: usize = 24;

/// The hash of a SCRAM mechanism.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum Hash {
    Sha256,
    Sha512,
}

impl Hash {
    fn hmac_key(self, key: &[u8]) -> hmac::Key {
        let alg = match self {
            Hash::Sha256 => hmac::HMAC_SHA256,
            Hash::Sha512 => hmac::HMAC_SHA512,
        };
        hmac::Key::new(alg, key)
    }

    pub fn hmac(self, key: &[u8], data: &[u8]) -> Vec<u8> {
        hmac::sign(&self.hmac_key(key), data).as_ref().to_vec()
    }

    pub fn digest(self, data: &[u8]) -> Vec<u8> {
        let alg = match self {
            Hash::Sha256 => &digest::SHA256,
            Hash::Sha512 => &digest::SHA512,
        };
        digest::digest(alg, data).as_ref().to_vec()
    }

    /// Bytes of this hash's output (the length of StoredKey, ServerKey, a proof).
    pub fn output_len(self) -> usize {
        match self {
            Hash::Sha256 => 32,
            Hash::Sha512 => 64,
        }
    }

    /// The `mechanism` number of Describe/AlterUserScramCredentials.
    pub fn wire_type(self) -> i8 {
        match self {
            Hash::Sha256 => 1,
            Hash::Sha512 => 2,
        }
    }

    pub fn from_wire_type(t: i8) -> Option<Hash> {
        match t {
            1 => Some(Hash::Sha256),
            2 => Some(Hash::Sha512),
            _ => None,
        }
    }

    pub fn mechanism(self) -> super::Mechanism {
        match self {
            Hash::Sha256 => super::Mechanism::ScramSha256,
            Hash::Sha512 => super::Mechanism::ScramSha512,
        }
    }
}

/// Hi(password, salt, iterations) of RFC 5802: PBKDF2 with HMAC of the mechanism's hash.
pub fn salted_password(hash: Hash, password: &[u8], salt: &[u8], iterations: u32) -> Vec<u8> {
    let alg = match hash {
        Hash::Sha256 => pbkdf2::PBKDF2_HMAC_SHA256,
        Hash::Sha512 => pbkdf2::PBKDF2_HMAC_SHA512,
    };
    let mut out = vec![0u8; hash.output_len()];
    let n = NonZeroU32::new(iterations.max(1)).unwrap_or(NonZeroU32::MIN);
    pbkdf2::derive(alg, n, salt, password, &mut out);
    out
}

/// The stored credential of a salted password (what AlterUserScramCredentials sends: the
/// client salts and hashes, the password never reaches the broker).
pub fn credential(hash: Hash, salt: &[u8], iterations: u32, salted: &[u8]) -> ScramCredential {
    let client_key = hash.hmac(salted, b"Client Key");
    ScramCredential {
        salt: b64(salt),
        iterations,
        stored_key: b64(&hash.digest(&client_key)),
        server_key: b64(&hash.hmac(salted, b"Server Key")),
    }
}

/// Random bytes from the system's generator.
pub fn random_bytes(n: usize) -> Vec<u8> {
    let mut out = vec![0u8; n];
    ring::rand::SystemRandom::new()
        .fill(&mut out)
        .expect("the system random number generator failed");
    out
}

/// A fresh random salt, and the salted password of `password` with it (the client side of
/// AlterUserScramCredentials).
pub fn salt_password(hash: Hash, password: &str, iterations: u32) -> (Vec<u8>, Vec<u8>) {
    let salt = random_bytes(SALT_BYTES);
    let salted = salted_password(hash, password.as_bytes(), &salt, iterations);
    (salt, salted)
}

/// Whether `password` is the one `cred` was made from (PLAIN's check).
pub fn check_password(hash: Hash, cred: &ScramCredential, password: &[u8]) -> bool {
    let (Some(salt), Some(stored)) = (unb64(&cred.salt), unb64(&cred.stored_key)) else {
        return false;
    };
    if !(MIN_ITERATIONS..=MAX_ITERATIONS).contains(&cred.iterations) {
        return false;
    }
    let salted = salted_password(hash, password, &salt, cred.iterations);
    same_bytes(&hash.digest(&hash.hmac(&salted, b"Client Key")), &stored)
}

static FAKE_SECRET: OnceLock<Vec<u8>> = OnceLock::new();

/// Sets the secret unknown users' challenges are derived from (the broker's, kept in its data
/// directory, so that an unknown user's salt is as stable across restarts as a real one's).
/// Only the first call counts; without one a random secret of this process is used.
pub fn set_fake_secret(secret: &[u8]) {
    let _ = FAKE_SECRET.set(secret.to_vec());
}

fn fake_secret() -> &'static [u8] {
    FAKE_SECRET.get_or_init(|| random_bytes(32))
}

/// The credential an unknown user is challenged with (SCRAM), and checked against (PLAIN, at
/// the cost of a real check): the same salt for the same name every time, the default
/// iteration count and salt length of new users, keys no password matches.
pub fn fake_credential(hash: Hash, username: &str) -> ScramCredential {
    let salt = hash.hmac(fake_secret(), username.as_bytes());
    ScramCredential {
        salt: b64(&salt[..SALT_BYTES.min(salt.len())]),
        iterations: DEFAULT_ITERATIONS,
        stored_key: b64(&random_bytes(hash.output_len())),
        server_key: b64(&random_bytes(hash.output_len())),
    }
}

/// What the server says next.
#[derive(Debug, Clone, PartialEq, Eq)]
pub enum Step {
    /// The server-first message; the exchange goes on.
    Challenge(Vec<u8>),
    /// Authenticated as `username`; `server_final` proves the server knew the credential.
    Success {
        username: String,
        server_final: Vec<u8>,
    },
}

/// What the server keeps between the two rounds.
struct SentFirst {
    first: ClientFirst,
    server_first: String,
    nonce: String,
    cred: ScramCredential,
    known: bool,
}

enum State {
    Start,
    SentFirst(Box<SentFirst>),
    Finished,
}

/// The server's side of one SCRAM exchange.
pub struct ScramServer {
    hash: Hash,
    state: State,
}

impl ScramServer {
    pub fn new(hash: Hash) -> ScramServer {
        ScramServer {
            hash,
            state: State::Start,
        }
    }

    /// Takes the client's next message. `lookup` finds a user's stored credential for this
    /// mechanism. Any error ends the exchange.
    pub fn step(
        &mut self,
        msg: &[u8],
        lookup: impl FnOnce(&str) -> Option<ScramCredential>,
    ) -> Result<Step, Failure> {
        // Alphanumeric, like Kafka's.
        let nonce: String = random_bytes(NONCE_BYTES)
            .iter()
            .map(|b| format!("{b:02x}"))
            .collect();
        self.step_with_nonce(msg, lookup, &nonce)
    }

    fn step_with_nonce(
        &mut self,
        msg: &[u8],
        lookup: impl FnOnce(&str) -> Option<ScramCredential>,
        server_nonce: &str,
    ) -> Result<Step, Failure> {
        match std::mem::replace(&mut self.state, State::Finished) {
            State::Start => {
                let first = parse_client_first(msg)?;
                let (cred, known) = match lookup(&first.username) {
                    Some(c) => (c, true),
                    None => (fake_credential(self.hash, &first.username), false),
                };
                let nonce = format!("{}{server_nonce}", first.nonce);
                let server_first = format!("r={nonce},s={},i={}", cred.salt, cred.iterations);
                let out = server_first.clone().into_bytes();
                self.state = State::SentFirst(Box::new(SentFirst {
                    first,
                    server_first,
                    nonce,
                    cred,
                    known,
                }));
                Ok(Step::Challenge(out))
            }
            State::SentFirst(sent) => {
                let SentFirst {
                    first,
                    server_first,
                    nonce,
                    cred,
                    known,
                } = *sent;
                let fin = parse_client_final(msg)?;
                if unb64(&fin.channel_binding).as_deref() != Some(first.gs2_header.as_bytes()) {
                    return fail("client-final: channel binding differs from the gs2 header");
                }
                // librdkafka before 2.6.1 (Debian's kcat among them) prepends its own nonce
                // once more (librdkafka#4895); Kafka 3.8.1-3.9 accept that form, and so does
                // weir: it still carries this exchange's fresh server nonce, so a replayed
                // client-final cannot match.
                let buggy_librdkafka = format!("{}{nonce}", first.nonce);
                if fin.nonce != nonce && fin.nonce != buggy_librdkafka {
                    return fail("client-final: nonce differs from the server's");
                }
                let (Some(stored), Some(server_key)) =
                    (unb64(&cred.stored_key), unb64(&cred.server_key))
                else {
                    return fail(format!(
                        "stored credential of {} is corrupt",
                        first.username
                    ));
                };
                let auth_message = format!("{},{server_first},{}", first.bare, fin.without_proof);
                let signature = self.hash.hmac(&stored, auth_message.as_bytes());
                if fin.proof.len() != signature.len() {
                    return fail("client-final: proof has the wrong length");
                }
                let client_key: Vec<u8> = fin
                    .proof
                    .iter()
                    .zip(&signature)
                    .map(|(p, s)| p ^ s)
                    .collect();
                if !same_bytes(&self.hash.digest(&client_key), &stored) || !known {
                    return fail(if known {
                        format!("wrong password for user {}", first.username)
                    } else {
                        format!("unknown user {}", first.username)
                    });
                }
                let verifier = self.hash.hmac(&server_key, auth_message.as_bytes());
                Ok(Step::Success {
                    username: first.username,
                    server_final: format!("v={}", b64(&verifier)).into_bytes(),
                })
            }
            State::Finished => fail("SCRAM exchange already finished"),
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    /// RFC 7677 section 3: user "user", password "pencil", SCRAM-SHA-256.
    #[test]
    fn rfc7677_example() {
        let salt = unb64("W22ZaJ0SNY7soEsUEjb6gQ==").unwrap();
        let salted = salted_password(Hash::Sha256, b"pencil", &salt, 4096);
        let cred = credential(Hash::Sha256, &salt, 4096, &salted);
        let mut server = ScramServer::new(Hash::Sha256);
        let step = server
            .step_with_nonce(
                b"n,,n=user,r=rOprNGfwEbeRWgbNEkqO",
                |u| (u == "user").then(|| cred.clone()),
                "%hvYDpWUa2RaTCAfuxFIlj)hNlF$k0",
            )
            .unwrap();
        assert_eq!(
            step,
            Step::Challenge(
                b"r=rOprNGfwEbeRWgbNEkqO%hvYDpWUa2RaTCAfuxFIlj)hNlF$k0,s=W22ZaJ0SNY7soEsUEjb6gQ==,i=4096"
                    .to_vec()
            )
        );
        let step = server
            .step(
                b"c=biws,r=rOprNGfwEbeRWgbNEkqO%hvYDpWUa2RaTCAfuxFIlj)hNlF$k0,p=dHzbZapWIk4jUhN+Ute9ytag9zjfMHgsqmmiz7AndVQ=",
                |_| None,
            )
            .unwrap();
        assert_eq!(
            step,
            Step::Success {
                username: "user".into(),
                server_final: b"v=6rriTRBi23WpRR/wtup+mMhUZUn/dB5nLTJRsjl95G4=".to_vec()
            }
        );
        assert!(check_password(Hash::Sha256, &cred, b"pencil"));
        assert!(!check_password(Hash::Sha256, &cred, b"pencil2"));
    }

    /// A client's side, to drive the server with a real exchange.
    fn client_final(hash: Hash, password: &str, first_bare: &str, server_first: &str) -> String {
        let fields: Vec<&str> = server_first.split(',').collect();
        let nonce = fields[0].strip_prefix("r=").unwrap();
        let salt = unb64(fields[1].strip_prefix("s=").unwrap()).unwrap();
        let iters: u32 = fields[2].strip_prefix("i=").unwrap().parse().unwrap();
        let salted = salted_password(hash, password.as_bytes(), &salt, iters);
        let client_key = hash.hmac(&salted, b"Client Key");
        let stored = hash.digest(&client_key);
        let without_proof = format!("c=biws,r={nonce}");
        let auth = format!("{first_bare},{server_first},{without_proof}");
        let sig = hash.hmac(&stored, auth.as_bytes());
        let proof: Vec<u8> = client_key.iter().zip(&sig).map(|(a, b)| a ^ b).collect();
        format!("{without_proof},p={}", b64(&proof))
    }

    fn exchange(hash: Hash, stored_for: &str, user: &str, password: &str) -> Result<Step, Failure> {
        let (salt, salted) = salt_password(hash, "secret", DEFAULT_ITERATIONS);
        let cred = credential(hash, &salt, DEFAULT_ITERATIONS, &salted);
        let lookup = |u: &str| (u == stored_for).then(|| cred.clone());
        let mut server = ScramServer::new(hash);
        let bare = format!("n={user},r=abcdefgh");
        let Step::Challenge(sf) = server.step(format!("n,,{bare}").as_bytes(), lookup)? else {
            panic!("no challenge")
        };
        let sf = String::from_utf8(sf).unwrap();
        let fin = client_final(hash, password, &bare, &sf);
        server.step(fin.as_bytes(), lookup)
    }

    #[test]
    fn both_hashes_accept_the_password_and_refuse_others_alike() {
        for hash in [Hash::Sha256, Hash::Sha512] {
            assert!(matches!(
                exchange(hash, "alice", "alice", "secret"),
                Ok(Step::Success { ref username, .. }) if username == "alice"
            ));
            let wrong = exchange(hash, "alice", "alice", "guess").unwrap_err();
            let unknown = exchange(hash, "alice", "mallory", "secret").unwrap_err();
            assert!(wrong.0.contains("wrong password"), "{wrong:?}");
            assert!(unknown.0.contains("unknown user"), "{unknown:?}");
        }
    }

    /// librdkafka < 2.6.1 sends r=<client nonce><client nonce><server nonce>: accepted; any
    /// other nonce is refused even with a correct proof.
    #[test]
    fn old_librdkafka_nonce_form() {
        let hash = Hash::Sha256;
        let (salt, salted) = salt_password(hash, "secret", DEFAULT_ITERATIONS);
        let cred = credential(hash, &salt, DEFAULT_ITERATIONS, &salted);
        for (form, ok) in [("doubled", true), ("other", false)] {
            let mut server = ScramServer::new(hash);
            let lookup = |_: &str| Some(cred.clone());
            let Ok(Step::Challenge(sf)) = server.step(b"n,,n=alice,r=cnonce", lookup) else {
                panic!()
            };
            let sf = String::from_utf8(sf).unwrap();
            let full = sf
                .split(',')
                .next()
                .unwrap()
                .strip_prefix("r=")
                .unwrap()
                .to_string();
            let sent = if form == "doubled" {
                format!("cnonce{full}")
            } else {
                format!("x{full}")
            };
            // The client's proof covers the server-first it received and the nonce it sent.
            let client_key = hash.hmac(&salted, b"Client Key");
            let without_proof = format!("c=biws,r={sent}");
            let auth = format!("n=alice,r=cnonce,{sf},{without_proof}");
            let sig = hash.hmac(&hash.digest(&client_key), auth.as_bytes());
            let proof: Vec<u8> = client_key.iter().zip(&sig).map(|(a, b)| a ^ b).collect();
            let fin = format!("{without_proof},p={}", b64(&proof));
            let auth_ok = match server.step(fin.as_bytes(), lookup) {
                Ok(Step::Success { .. }) => true,
                Err(e) => {
                    assert!(
                        e.0.contains("nonce") || e.0.contains("wrong password"),
                        "{e:?}"
                    );
                    false
                }
                other => panic!("{other:?}"),
            };
            assert_eq!(auth_ok, ok, "{form}");
        }
    }

    #[test]
    fn unknown_users_get_a_stable_plausible_challenge() {
        let mut a = ScramServer::new(Hash::Sha256);
        let mut b = ScramServer::new(Hash::Sha256);
        let Ok(Step::Challenge(x)) = a.step(b"n,,n=ghost,r=abc", |_| None) else {
            panic!()
        };
        let Ok(Step::Challenge(y)) = b.step(b"n,,n=ghost,r=abc", |_| None) else {
            panic!()
        };
        let salt = |m: &[u8]| {
            String::from_utf8(m.to_vec())
                .unwrap()
                .split(',')
                .nth(1)
                .map(str::to_string)
        };
        assert_eq!(
            salt(&x),
            salt(&y),
            "the same salt for the same unknown name"
        );
        assert!(String::from_utf8(x).unwrap().ends_with(",i=4096"));
    }
}
