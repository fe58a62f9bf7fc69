//! `weir user ...`: SASL users and their SCRAM credentials, over Kafka's
//! Describe/AlterUserScramCredentials (so it works against Kafka too). The password is salted
//! and hashed here (PBKDF2, a fresh random salt): only the salted password reaches the broker,
//! which stores salt, iterations, StoredKey and ServerKey.

use clap::{Args, Subcommand};
use kafka_protocol::messages::alter_user_scram_credentials_request::{
    ScramCredentialDeletion, ScramCredentialUpsertion,
};
use kafka_protocol::messages::describe_user_scram_credentials_request::UserName;
use kafka_protocol::messages::*;
use serde_json::{json, Value};

use super::admin::*;
use crate::sasl::scram::{self, Hash};
use crate::sasl::Mechanism;

#[derive(Debug, Clone, Args)]
pub struct UserArgs {
    #[command(subcommand)]
    pub command: UserCommand,
    #[command(flatten)]
    pub common: Common,
}

#[derive(Debug, Clone, Subcommand)]
pub enum UserCommand {
    /// Add a user, or change its password (SCRAM credentials, used by every SASL mechanism).
    Add {
        user: String,
        /// The password (visible to other local users in the process list: prefer
        /// --password-stdin).
        #[arg(long, conflicts_with = "password_stdin")]
        password: Option<String>,
        /// Read the password from the first line of standard input.
        #[arg(long)]
        password_stdin: bool,
        /// SCRAM-SHA-256 or SCRAM-SHA-512 (default: both).
        #[arg(long)]
        mechanism: Option<String>,
        /// PBKDF2 iterations (4096 to 16384).
        #[arg(long, default_value_t = scram::DEFAULT_ITERATIONS)]
        iterations: u32,
    },
    /// Delete a user's credentials (all of them, or one mechanism's).
    Delete {
        user: String,
        #[arg(long)]
        mechanism: Option<String>,
    },
    /// List the users and their SCRAM mechanisms.
    List,
}

/// Runs a `weir user` command; prints its result; returns the exit code.
pub fn user(args: UserArgs) -> i32 {
    let json = args.common.json;
    let cmd = match read_password(args.command.clone()) {
        Ok(c) => c,
        Err(e) => return finish(json, Err(e), |_| String::new()),
    };
    let bootstrap = args.common.bootstrap.clone();
    finish(json, run(move || user_async(bootstrap, cmd)), |v| {
        render(&args.command, v)
    })
}

/// Resolves --password-stdin into --password (before the executor starts: stdin blocks).
fn read_password(cmd: UserCommand) -> Res<UserCommand> {
    match cmd {
        UserCommand::Add {
            user,
            password,
            password_stdin,
            mechanism,
            iterations,
        } => {
            let password = match (password, password_stdin) {
                (Some(p), _) => p,
                (None, true) => {
                    let mut line = String::new();
                    std::io::stdin()
                        .read_line(&mut line)
                        .map_err(|e| format!("reading the password from stdin: {e}"))?;
                    line.trim_end_matches(['\r', '\n']).to_string()
                }
                (None, false) => return Err("give --password or --password-stdin".into()),
            };
            if password.is_empty() {
                return Err("the password is empty".into());
            }
            Ok(UserCommand::Add {
                user,
                password: Some(password),
                password_stdin: false,
                mechanism,
                iterations,
            })
        }
        other => Ok(other),
    }
}

/// The SCRAM hashes a --mechanism names (none: both).
fn hashes(mechanism: &Option<String>) -> Res<Vec<Hash>> {
    match mechanism {
        None => Ok(vec![Hash::Sha256, Hash::Sha512]),
        Some(m) => Mechanism::parse(m)
            .and_then(Mechanism::scram)
            .map(|h| vec![h])
            .ok_or_else(|| format!("--mechanism {m}: SCRAM-SHA-256 or SCRAM-SHA-512")),
    }
}

async fn describe(
    conn: &crate::client::Connection,
    users: Option<Vec<String>>,
) -> Res<DescribeUserScramCredentialsResponse> {
    let req = DescribeUserScramCredentialsRequest::default().with_users(users.map(|us| {
        us.iter()
            .map(|u| UserName::default().with_name(sb(u)))
            .collect()
    }));
    let resp = send(conn, &req, 0).await?;
    check(
        resp.error_code,
        resp.error_message.as_ref(),
        "DescribeUserScramCredentials",
    )?;
    Ok(resp)
}

async fn alter(conn: &crate::client::Connection, req: AlterUserScramCredentialsRequest) -> Res<()> {
    let resp = send(conn, &req, 0).await?;
    for r in &resp.results {
        check(
            r.error_code,
            r.error_message.as_ref(),
            &format!("user {}", r.user.as_str()),
        )?;
    }
    Ok(())
}

async fn user_async(bootstrap: String, cmd: UserCommand) -> Res<Value> {
    let conn = connect(&bootstrap).await?;
    match cmd {
        UserCommand::Add {
            user,
            password,
            mechanism,
            iterations,
            ..
        } => {
            let password = password.unwrap_or_default();
            let mut req = AlterUserScramCredentialsRequest::default();
            let hashes = hashes(&mechanism)?;
            for &hash in &hashes {
                let (salt, salted) = scram::salt_password(hash, &password, iterations);
                req.upsertions.push(
                    ScramCredentialUpsertion::default()
                        .with_name(sb(&user))
                        .with_mechanism(hash.wire_type())
                        .with_iterations(iterations as i32)
                        .with_salt(salt.into())
                        .with_salted_password(salted.into()),
                );
            }
            // One change per user and request (Kafka refuses a user twice in one request).
            for up in std::mem::take(&mut req.upsertions) {
                let one = AlterUserScramCredentialsRequest::default().with_upsertions(vec![up]);
                alter(&conn, one).await?;
            }
            let names: Vec<&str> = hashes.iter().map(|h| h.mechanism().name()).collect();
            Ok(json!({ "user": user, "mechanisms": names, "iterations": iterations }))
        }
        UserCommand::Delete { user, mechanism } => {
            let hashes = match &mechanism {
                Some(_) => hashes(&mechanism)?,
                None => {
                    let d = describe(&conn, Some(vec![user.clone()])).await?;
                    let mut hs = Vec::new();
                    for r in &d.results {
                        check(
                            r.error_code,
                            r.error_message.as_ref(),
                            &format!("user {user}"),
                        )?;
                        hs.extend(
                            r.credential_infos
                                .iter()
                                .filter_map(|c| Hash::from_wire_type(c.mechanism)),
                        );
                    }
                    hs
                }
            };
            for &hash in &hashes {
                let del = ScramCredentialDeletion::default()
                    .with_name(sb(&user))
                    .with_mechanism(hash.wire_type());
                alter(
                    &conn,
                    AlterUserScramCredentialsRequest::default().with_deletions(vec![del]),
                )
                .await?;
            }
            let names: Vec<&str> = hashes.iter().map(|h| h.mechanism().name()).collect();
            Ok(json!({ "user": user, "deleted": names }))
        }
        UserCommand::List => {
            let d = describe(&conn, None).await?;
            let users: Vec<Value> = d
                .results
                .iter()
                .map(|r| {
                    let creds: Vec<Value> = r
                        .credential_infos
                        .iter()
                        .map(|c| {
                            let name = Hash::from_wire_type(c.mechanism)
                                .map(|h| h.mechanism().name().to_string())
                                .unwrap_or_else(|| format!("mechanism {}", c.mechanism));
                            json!({ "mechanism": name, "iterations": c.iterations })
                        })
                        .collect();
                    json!({ "user": r.user.as_str(), "credentials": creds })
                })
                .collect();
            Ok(json!({ "users": users }))
        }
    }
}

fn render(cmd: &UserCommand, v: &Value) -> String {
    match cmd {
        UserCommand::Add { .. } => format!(
            "user {}: {} credentials stored ({} iterations)",
            s(&v["user"]),
            v["mechanisms"]
                .as_array()
                .map(|a| a.iter().map(s).collect::<Vec<_>>().join(", "))
                .unwrap_or_default(),
            s(&v["iterations"])
        ),
        UserCommand::Delete { .. } => format!(
            "user {}: {} credentials deleted",
            s(&v["user"]),
            v["deleted"]
                .as_array()
                .map(|a| a.iter().map(s).collect::<Vec<_>>().join(", "))
                .unwrap_or_default()
        ),
        UserCommand::List => {
            let rows: Vec<Vec<String>> = v["users"]
                .as_array()
                .map(|a| {
                    a.iter()
                        .map(|u| {
                            let creds = u["credentials"]
                                .as_array()
                                .map(|cs| {
                                    cs.iter()
                                        .map(|c| {
                                            format!(
                                                "{} ({} iterations)",
                                                s(&c["mechanism"]),
                                                s(&c["iterations"])
                                            )
                                        })
                                        .collect::<Vec<_>>()
                                        .join(", ")
                                })
                                .unwrap_or_default();
                            vec![s(&u["user"]), creds]
                        })
                        .collect()
                })
                .unwrap_or_default();
            table(&["USER", "CREDENTIALS"], &rows)
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn mechanisms_named_on_the_command_line() {
        assert_eq!(hashes(&None).unwrap(), vec![Hash::Sha256, Hash::Sha512]);
        assert_eq!(
            hashes(&Some("scram-sha-512".into())).unwrap(),
            vec![Hash::Sha512]
        );
        assert!(hashes(&Some("PLAIN".into())).is_err());
    }
}
