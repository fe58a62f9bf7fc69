//! The broker under test: our own `weir serve` child in a scratch directory, or an
//! existing one (`--bootstrap`). Also reads a process's CPU time and RSS from /proc.

use std::io::{BufRead, BufReader};
use std::path::Path;
use std::process::{Child, Command, Stdio};
use std::time::Duration;

pub struct Broker {
    pub bootstrap: String,
    /// Our child, when we started the broker.
    child: Option<Child>,
    pub pid: Option<u32>,
}

impl Broker {
    /// Starts `weir serve` (this executable) on port 0 and waits for `listening on ...`.
    pub fn spawn(data_dir: &Path, settings: &[String]) -> std::io::Result<Broker> {
        let exe = std::env::current_exe()?;
        let mut cmd = Command::new(exe);
        cmd.arg("serve")
            .arg("--data-dir")
            .arg(data_dir)
            .arg("--listen")
            .arg("127.0.0.1:0")
            // A free port, not 9644 (another broker may run); a later --set overrides.
            .args(["--set", "metrics.listen=127.0.0.1:0"]);
        for s in settings {
            cmd.arg("--set").arg(s);
        }
        let mut child = cmd
            .stdout(Stdio::piped())
            .stderr(Stdio::inherit())
            .stdin(Stdio::null())
            .spawn()?;
        let stdout = child.stdout.take().expect("piped");
        let (tx, rx) = std::sync::mpsc::channel();
        std::thread::spawn(move || {
            let mut tx = Some(tx);
            for line in BufReader::new(stdout).lines() {
                let Ok(line) = line else { break };
                if let Some(addr) = line.trim().strip_prefix("listening on ") {
                    if let Some(tx) = tx.take() {
                        let _ = tx.send(addr.trim().to_string());
                    }
                }
            }
        });
        match rx.recv_timeout(Duration::from_secs(30)) {
            Ok(addr) => Ok(Broker {
                bootstrap: addr,
                pid: Some(child.id()),
                child: Some(child),
            }),
            Err(_) => {
                let _ = child.kill();
                let _ = child.wait();
                Err(std::io::Error::other(
                    "weir serve did not print 'listening on ADDR' within 30 s",
                ))
            }
        }
    }

    pub fn external(bootstrap: &str, pid: Option<u32>) -> Broker {
        Broker {
            bootstrap: bootstrap.to_string(),
            child: None,
            pid,
        }
    }

    pub fn stop(&mut self) {
        if let Some(mut c) = self.child.take() {
            // SIGTERM first so the broker can close its logs; then make sure.
            // SAFETY: kill(2) on our own child's pid.
            unsafe {
                libc::kill(c.id() as i32, libc::SIGTERM);
            }
            for _ in 0..50 {
                if let Ok(Some(_)) = c.try_wait() {
                    return;
                }
                std::thread::sleep(Duration::from_millis(100));
            }
            let _ = c.kill();
            let _ = c.wait();
        }
    }
}

impl Drop for Broker {
    fn drop(&mut self) {
        self.stop();
    }
}

/// CPU seconds (user + system) a process has used.
pub fn cpu_seconds(pid: u32) -> Option<f64> {
    let stat = std::fs::read_to_string(format!("/proc/{pid}/stat")).ok()?;
    // Fields after the parenthesised command name; utime and stime are fields 14 and 15.
    let rest = &stat[stat.rfind(')')? + 2..];
    let fields: Vec<&str> = rest.split_whitespace().collect();
    let utime: f64 = fields.get(11)?.parse().ok()?;
    let stime: f64 = fields.get(12)?.parse().ok()?;
    // SAFETY: sysconf has no memory effects.
    let ticks = unsafe { libc::sysconf(libc::_SC_CLK_TCK) } as f64;
    Some((utime + stime) / ticks)
}

/// Resident set size in bytes.
pub fn rss_bytes(pid: u32) -> Option<u64> {
    let status = std::fs::read_to_string(format!("/proc/{pid}/status")).ok()?;
    let line = status.lines().find(|l| l.starts_with("VmRSS:"))?;
    let kb: u64 = line.split_whitespace().nth(1)?.parse().ok()?;
    Some(kb * 1024)
}
