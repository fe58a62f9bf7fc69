//! SCRAM's client messages (RFC 5802 section 7), parsed strictly: what an unauthenticated
//! client sends, so every field is checked and bounded (the fuzz target `sasl_messages`
//! drives these through `ScramServer`).

use super::unb64;

/// Longest SCRAM message accepted (a client-first is a user name and a nonce).
pub const MAX_MESSAGE: usize = 4096;

/// Why an exchange failed: for the broker's log (the client is told only that
/// authentication failed).
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct Failure(pub String);

pub(super) fn fail<T>(why: impl Into<String>) -> Result<T, Failure> {
    Err(Failure(why.into()))
}

/// The client's first message.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct ClientFirst {
    /// "n,," or "y,," (with any a=authzid): echoed base64 in the final message's c=.
    pub gs2_header: String,
    pub username: String,
    pub nonce: String,
    /// client-first-message-bare: the part from "n=" on, part of the AuthMessage.
    pub bare: String,
}

/// A `saslname` of RFC 5802: "=2C" is ',', "=3D" is '=', any other '=' is an error.
fn unescape_name(s: &str) -> Option<String> {
    let mut out = String::with_capacity(s.len());
    let mut rest = s;
    while let Some(i) = rest.find('=') {
        out.push_str(&rest[..i]);
        let esc = rest.get(i..i + 3)?;
        out.push(match esc {
            "=2C" => ',',
            "=3D" => '=',
            _ => return None,
        });
        rest = &rest[i + 3..];
    }
    out.push_str(rest);
    Some(out)
}

fn printable_nonce(n: &str) -> bool {
    !n.is_empty() && n.bytes().all(|b| (0x21..=0x7e).contains(&b) && b != b',')
}

pub fn parse_client_first(msg: &[u8]) -> Result<ClientFirst, Failure> {
    if msg.len() > MAX_MESSAGE {
        return fail(format!("client-first of {} bytes", msg.len()));
    }
    let Ok(text) = std::str::from_utf8(msg) else {
        return fail("client-first is not UTF-8");
    };
    let mut parts = text.splitn(3, ',');
    let (Some(cbind), Some(authzid), Some(bare)) = (parts.next(), parts.next(), parts.next())
    else {
        return fail("client-first has no gs2 header");
    };
    match cbind {
        "n" | "y" => {}
        c if c.starts_with("p=") => return fail("channel binding is not supported"),
        _ => return fail("client-first: bad gs2 channel-binding flag"),
    }
    let authzid = match authzid {
        "" => None,
        a => match a.strip_prefix("a=").and_then(unescape_name) {
            Some(a) => Some(a),
            None => return fail("client-first: bad authzid"),
        },
    };
    let mut fields = bare.split(',');
    if bare.starts_with("m=") {
        return fail("client-first: mandatory extension not supported");
    }
    let Some(username) = fields
        .next()
        .and_then(|f| f.strip_prefix("n="))
        .and_then(unescape_name)
    else {
        return fail("client-first: no n=username");
    };
    let Some(nonce) = fields.next().and_then(|f| f.strip_prefix("r=")) else {
        return fail("client-first: no r=nonce");
    };
    if !printable_nonce(nonce) {
        return fail("client-first: bad nonce");
    }
    for ext in fields {
        // Kafka's one extension is tokenauth=true (delegation tokens), which weir does not
        // have; other extensions are ignored, as Kafka does.
        if ext.eq_ignore_ascii_case("tokenauth=true") {
            return fail("delegation tokens (tokenauth) are not supported");
        }
    }
    if username.is_empty() {
        return fail("client-first: empty user name");
    }
    if authzid.as_ref().is_some_and(|a| *a != username) {
        return fail("authorization id differs from the user name");
    }
    Ok(ClientFirst {
        gs2_header: format!("{cbind},{},", parts_authzid(text)),
        username,
        nonce: nonce.to_string(),
        bare: bare.to_string(),
    })
}

/// The raw authzid field of a client-first (between the first and second comma).
fn parts_authzid(text: &str) -> &str {
    text.split(',').nth(1).unwrap_or("")
}

/// The client's final message.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct ClientFinal {
    /// c=: the gs2 header, base64.
    pub channel_binding: String,
    pub nonce: String,
    pub proof: Vec<u8>,
    /// client-final-message-without-proof: part of the AuthMessage.
    pub without_proof: String,
}

pub fn parse_client_final(msg: &[u8]) -> Result<ClientFinal, Failure> {
    if msg.len() > MAX_MESSAGE {
        return fail(format!("client-final of {} bytes", msg.len()));
    }
    let Ok(text) = std::str::from_utf8(msg) else {
        return fail("client-final is not UTF-8");
    };
    let Some((without_proof, proof)) = text.rsplit_once(",p=") else {
        return fail("client-final: no p=proof");
    };
    let Some(proof) = unb64(proof) else {
        return fail("client-final: proof is not base64");
    };
    let mut fields = without_proof.split(',');
    let Some(cb) = fields.next().and_then(|f| f.strip_prefix("c=")) else {
        return fail("client-final: no c=channel-binding");
    };
    let Some(nonce) = fields.next().and_then(|f| f.strip_prefix("r=")) else {
        return fail("client-final: no r=nonce");
    };
    Ok(ClientFinal {
        channel_binding: cb.to_string(),
        nonce: nonce.to_string(),
        proof,
        without_proof: without_proof.to_string(),
    })
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn malformed_messages_are_refused() {
        for m in [
            &b""[..],
            b"n,,",
            b"n,,r=abc",
            b"p=tls-unique,,n=a,r=b",
            b"n,,n=a=2X,r=b",
            b"n,,n=a,r=b,tokenauth=true",
            b"n,a=bob,n=alice,r=b",
            b"n,,m=ext,n=a,r=b",
            b"n,,n=a,r=b c",
            b"\xff\xfe",
        ] {
            assert!(
                parse_client_first(m).is_err(),
                "{:?}",
                String::from_utf8_lossy(m)
            );
        }
        let ok = parse_client_first(b"n,a=al=2Cice,n=al=2Cice,r=xyz").unwrap();
        assert_eq!(ok.username, "al,ice");
        assert_eq!(ok.gs2_header, "n,a=al=2Cice,");
        for m in [&b"c=biws,r=x"[..], b"c=biws,r=x,p=!!", b"r=x,p=AAAA"] {
            assert!(parse_client_final(m).is_err());
        }
    }
}
