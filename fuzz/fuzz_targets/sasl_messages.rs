//! The SASL tokens a client sends before it has authenticated — anyone who reaches a SASL
//! listener can send them: SCRAM's client-first and client-final messages (both rounds of
//! `ScramServer::step`, against a real stored credential) and PLAIN's message. None may
//! panic, and no input may log in without the password: the credential's password is 32
//! random bytes the input cannot know. Input: first byte picks the mechanism; the rest is
//! split at the first 0xff into the two SCRAM messages (or is the PLAIN message).
#![no_main]

use std::sync::OnceLock;

use libfuzzer_sys::fuzz_target;
use weir::sasl::scram::{self, Hash, ScramServer, Step};
use weir::sasl::{plain, ScramCredential};

fn credential(hash: Hash) -> &'static ScramCredential {
    static CREDS: OnceLock<[ScramCredential; 2]> = OnceLock::new();
    let creds = CREDS.get_or_init(|| {
        let password = scram::random_bytes(32);
        [Hash::Sha256, Hash::Sha512].map(|h| {
            let salt = scram::random_bytes(16);
            let salted = scram::salted_password(h, &password, &salt, scram::MIN_ITERATIONS);
            scram::credential(h, &salt, scram::MIN_ITERATIONS, &salted)
        })
    });
    &creds[(hash == Hash::Sha512) as usize]
}

fuzz_target!(|data: &[u8]| {
    let Some((&pick, rest)) = data.split_first() else {
        return;
    };
    if pick % 3 == 2 {
        if let Ok(auth) = plain::parse(rest) {
            assert!(!auth.username.is_empty() && !auth.password.is_empty());
        }
        return;
    }
    let hash = if pick % 3 == 0 { Hash::Sha256 } else { Hash::Sha512 };
    let (first, last) = match rest.iter().position(|&b| b == 0xff) {
        Some(i) => (&rest[..i], &rest[i + 1..]),
        None => (rest, &[][..]),
    };
    let mut server = ScramServer::new(hash);
    let lookup = |u: &str| (u == "alice").then(|| credential(hash).clone());
    match server.step(first, lookup) {
        Ok(Step::Challenge(c)) => {
            let c = String::from_utf8(c).expect("server-first is text");
            assert!(c.starts_with("r="), "{c}");
            let second = server.step(last, lookup);
            assert!(
                !matches!(second, Ok(Step::Success { .. })),
                "logged in without the password: {first:?} / {last:?}"
            );
            assert!(server.step(last, lookup).is_err(), "an exchange ends after two rounds");
        }
        Ok(Step::Success { .. }) => panic!("SCRAM succeeded in one round"),
        Err(_) => {}
    }
});
