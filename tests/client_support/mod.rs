//! Shared by the `client_*` integration tests: a real `weir serve` child on port 0 in a
//! temp dir, and a glommio executor to run the client on.

#![allow(dead_code)]

use std::future::Future;
use std::io::{BufRead, BufReader};
use std::process::{Child, Command, Stdio};
use std::time::Duration;

pub struct TestBroker {
    pub addr: String,
    child: Child,
    _dir: tempfile::TempDir,
}

impl TestBroker {
    /// Starts the broker with Kafka-named settings (`key=value`).
    pub fn start(settings: &[&str]) -> TestBroker {
        std::fs::create_dir_all(env!("CARGO_TARGET_TMPDIR")).expect("target tmp dir");
        let dir = tempfile::Builder::new()
            .prefix("weir-client-test")
            .tempdir_in(env!("CARGO_TARGET_TMPDIR"))
            .expect("temp dir");
        let mut cmd = Command::new(env!("CARGO_BIN_EXE_weir"));
        cmd.arg("serve")
            .arg("--data-dir")
            .arg(dir.path())
            .arg("--listen")
            .arg("127.0.0.1:0")
            .arg("--cores")
            .arg("1")
            .args(["--set", "metrics.listen=127.0.0.1:0"]);
        for s in settings {
            cmd.arg("--set").arg(s);
        }
        let mut child = cmd
            .env(
                "RUST_LOG",
                std::env::var("WEIR_TEST_BROKER_LOG").unwrap_or_else(|_| "warn".into()),
            )
            .stdout(Stdio::piped())
            .stderr(Stdio::inherit())
            .spawn()
            .expect("spawn weir serve");
        let stdout = child.stdout.take().expect("piped stdout");
        let (tx, rx) = std::sync::mpsc::channel();
        std::thread::spawn(move || {
            let mut tx = Some(tx);
            for line in BufReader::new(stdout).lines() {
                let Ok(line) = line else { break };
                if let Some(a) = line.trim().strip_prefix("listening on ") {
                    if let Some(tx) = tx.take() {
                        let _ = tx.send(a.trim().to_string());
                    }
                }
            }
        });
        let addr = match rx.recv_timeout(Duration::from_secs(30)) {
            Ok(a) => a,
            Err(_) => {
                let _ = child.kill();
                panic!("weir serve did not report its address");
            }
        };
        TestBroker {
            addr,
            child,
            _dir: dir,
        }
    }
}

impl Drop for TestBroker {
    fn drop(&mut self) {
        let _ = self.child.kill();
        let _ = self.child.wait();
    }
}

/// Runs `f` on a fresh glommio executor (the client is single-threaded).
pub fn run<G, F, T>(f: G) -> T
where
    G: FnOnce() -> F + Send + 'static,
    F: Future<Output = T> + 'static,
    T: Send + 'static,
{
    glommio::LocalExecutorBuilder::new(glommio::Placement::Unbound)
        .io_memory(1 << 20)
        // The default preempt_timer: a short one (500 us) made glommio 0.9 lose socket
        // wake-ups here, stalling responses that sat in the receive queue.
        .spawn(f)
        .expect("executor")
        .join()
        .expect("executor panicked")
}

/// Fails the test instead of hanging it.
pub async fn within<T>(secs: u64, what: &str, f: impl Future<Output = T>) -> T {
    futures_lite::future::or(async { Some(f.await) }, async {
        glommio::timer::sleep(Duration::from_secs(secs)).await;
        None
    })
    .await
    .unwrap_or_else(|| panic!("{what}: no answer within {secs} s"))
}
