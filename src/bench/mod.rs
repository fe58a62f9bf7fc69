//! `weir bench`.
use clap::Args;

#[derive(Debug, Args)]
pub struct BenchArgs {}

pub fn run(_args: BenchArgs) -> std::process::ExitCode {
    std::process::ExitCode::SUCCESS
}
