//! SASL PLAIN (RFC 4616): one message, `authzid NUL authcid NUL password`, one answer.
//!
//! The password travels in the clear inside the SASL frame: use PLAIN on SASL_SSL
//! listeners (as Kafka advises). weir checks it against the user's stored SCRAM credential
//! (`super::scram::check_password`), so a user made once (`weir user add`) logs in with
//! every mechanism.

/// The user and password of a PLAIN message.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct PlainAuth {
    pub username: String,
    pub password: Vec<u8>,
}

/// Longest PLAIN message accepted.
pub const MAX_MESSAGE: usize = 4096;

/// Parses a PLAIN message. An authorization id, if given, must be the user name (Kafka
/// refuses to act as another user the same way).
pub fn parse(msg: &[u8]) -> Result<PlainAuth, String> {
    if msg.len() > MAX_MESSAGE {
        return Err(format!("PLAIN message of {} bytes", msg.len()));
    }
    let mut parts = msg.split(|&b| b == 0);
    let (Some(authzid), Some(user), Some(password), None) =
        (parts.next(), parts.next(), parts.next(), parts.next())
    else {
        return Err("PLAIN message is not authzid NUL user NUL password".into());
    };
    let Ok(username) = std::str::from_utf8(user) else {
        return Err("PLAIN user name is not UTF-8".into());
    };
    if username.is_empty() || password.is_empty() {
        return Err("PLAIN user name or password is empty".into());
    }
    if !authzid.is_empty() && authzid != user {
        return Err("authorization id differs from the user name".into());
    }
    Ok(PlainAuth {
        username: username.to_string(),
        password: password.to_vec(),
    })
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn parses_and_refuses() {
        assert_eq!(
            parse(b"\0alice\0s3cret").unwrap(),
            PlainAuth {
                username: "alice".into(),
                password: b"s3cret".to_vec()
            }
        );
        assert!(parse(b"alice\0alice\0pw").is_ok());
        for bad in [
            &b""[..],
            b"alice",
            b"\0alice",
            b"\0\0pw",
            b"\0alice\0",
            b"bob\0alice\0pw",
            b"\0alice\0pw\0more",
            b"\0\xff\0pw",
        ] {
            assert!(parse(bad).is_err(), "{bad:?}");
        }
    }
}
