//! `weir`: a Kafka-wire-compatible streaming log broker, thread-per-core on glommio.
//!
//! This file is only the command line: `weir serve` runs the broker (`broker`, this binary's
//! own modules), `weir topic|group|bench` are tools of the library crate (`weir::cli`). See
//! ARCHITECTURE.md for the path of a Produce and a Fetch through the modules.

mod broker;

use clap::{Parser, Subcommand};
use tracing::error;

#[derive(Parser)]
#[command(
    name = "weir",
    version,
    about = "Kafka-compatible streaming log broker, thread-per-core"
)]
struct Cli {
    #[command(subcommand)]
    command: Command,
}

#[derive(Subcommand)]
enum Command {
    /// Run the broker.
    Serve(broker::ServeArgs),
    /// Benchmark a broker (our own or --bootstrap) against the raw disk and loopback TCP.
    Bench(weir::cli::bench::BenchArgs),
    /// Manage topics on any Kafka-protocol broker: create, list, describe, delete, alter-config.
    Topic(weir::cli::TopicArgs),
    /// Consumer groups on any Kafka-protocol broker: list, describe, reset-offsets.
    Group(weir::cli::GroupArgs),
    /// SASL users on any Kafka-protocol broker: add (or change the password), delete, list.
    User(weir::cli::UserArgs),
    /// ACLs on any Kafka-protocol broker: add, list, remove.
    Acl(weir::cli::AclArgs),
    /// A cluster's brokers, racks, metadata quorum and partition spread: describe.
    Cluster(weir::cli::ClusterArgs),
}

fn main() {
    init_logging();
    let cli = Cli::parse();
    let code = match cli.command {
        Command::Serve(args) => {
            abort_on_panic();
            match broker::serve(args) {
                Ok(()) => 0,
                Err(e) => {
                    error!("{e}");
                    eprintln!("weir: {e}");
                    1
                }
            }
        }
        Command::Topic(args) => weir::cli::topic(args),
        Command::Group(args) => weir::cli::group(args),
        Command::User(args) => weir::cli::user(args),
        Command::Acl(args) => weir::cli::acl(args),
        Command::Cluster(args) => weir::cli::cluster(args),
        Command::Bench(args) => {
            if weir::cli::bench::run(args) == std::process::ExitCode::SUCCESS {
                0
            } else {
                1
            }
        }
    };
    std::process::exit(code);
}

/// A panic on any thread of a running broker ends the process. Each core is a glommio
/// executor on its own thread: a core whose thread panicked stopped serving its partitions,
/// its Raft groups and (core 0) the peer connections, while the other cores went on
/// accepting clients — a broker half alive, whose clients hung. Ended, it is restarted (by
/// its supervisor) and recovers from its files as after any crash.
fn abort_on_panic() {
    let report = std::panic::take_hook();
    std::panic::set_hook(Box::new(move |info| {
        report(info);
        eprintln!(
            "weir: a thread of the broker panicked; stopping (the next start recovers its files)"
        );
        std::process::abort();
    }));
}

fn init_logging() {
    let filter = tracing_subscriber::EnvFilter::try_from_default_env()
        .unwrap_or_else(|_| tracing_subscriber::EnvFilter::new("info"));
    // Colours only on a terminal (log files and test harnesses get plain text).
    let ansi = std::io::IsTerminal::is_terminal(&std::io::stderr())
        && std::env::var_os("NO_COLOR").is_none_or(|v| v.is_empty());
    // `init` also installs the `log` → `tracing` bridge (glommio logs through `log`).
    tracing_subscriber::fmt()
        .with_env_filter(filter)
        .with_writer(std::io::stderr)
        .with_ansi(ansi)
        .init();
}
