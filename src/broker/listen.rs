//! Is a TCP port taken by a live listener? The start-up check for `--listen` and
//! `metrics.listen`.
//!
//! Every core's glommio listener sets SO_REUSEPORT, so a bind alone would let a second broker
//! share the port silently. The old check bound a plain std listener first (SO_REUSEADDR, no
//! SO_REUSEPORT) — but the sockets a previous run leaves in TIME_WAIT or FIN_WAIT after it
//! exited (or was killed) with clients connected inherited SO_REUSEPORT, and the kernel
//! refuses that plain bind while they linger: `systemctl restart weir` failed with "Address
//! already in use" for about a minute. Those sockets do not stop a SO_REUSEPORT bind, and they
//! are not listeners. So the check reads the kernel's socket tables (`/proc/net/tcp`,
//! `/proc/net/tcp6`) for a socket in LISTEN state on the port whose address overlaps ours:
//! a live listener refuses the start, leftovers of a dead one do not.
//!
//! A process killed with SIGKILL is reaped before the kernel has torn down its io_uring
//! instances, and an accept in flight there keeps the listening socket open for a few more
//! milliseconds. So a listener seen once is looked for again for up to `SETTLE` before the
//! start is refused: a dead broker's listener is gone by then, a live one is still there.

use std::net::{IpAddr, Ipv4Addr, Ipv6Addr, SocketAddr};
use std::time::{Duration, Instant};

/// How long a listener may take to disappear after its process died.
const SETTLE: Duration = Duration::from_secs(3);

/// `Err` with a message naming the address if a live listener holds `addr`'s port there.
/// Port 0 (the kernel picks) is never taken.
pub fn check_free(what: &str, addr: SocketAddr) -> Result<(), String> {
    if addr.port() == 0 {
        return Ok(());
    }
    let started = Instant::now();
    loop {
        match listener_on(what, addr)? {
            None => return Ok(()),
            Some(l) if started.elapsed() >= SETTLE => {
                return Err(format!(
                    "{what} {addr}: address already in use (a process listens on {l}; \
                     is another weir running?)"
                ))
            }
            Some(_) => std::thread::sleep(Duration::from_millis(20)),
        }
    }
}

/// A live listener whose address overlaps `addr`, if any.
fn listener_on(what: &str, addr: SocketAddr) -> Result<Option<SocketAddr>, String> {
    let mut found = Vec::new();
    for table in ["/proc/net/tcp", "/proc/net/tcp6"] {
        match std::fs::read_to_string(table) {
            Ok(text) => found.extend(listeners(&text)),
            // No IPv6 in this kernel: nothing listens there.
            Err(e) if e.kind() == std::io::ErrorKind::NotFound => {}
            Err(e) => return Err(format!("{what} {addr}: reading {table}: {e}")),
        }
    }
    Ok(found.into_iter().find(|l| overlaps(*l, addr)))
}

/// The LISTEN sockets of one `/proc/net/tcp{,6}` table. Lines that do not parse are ignored.
fn listeners(table: &str) -> Vec<SocketAddr> {
    const LISTEN: &str = "0A";
    table
        .lines()
        .skip(1)
        .filter_map(|line| {
            let mut cols = line.split_whitespace();
            let local = cols.nth(1)?;
            let state = cols.nth(1)?;
            if state != LISTEN {
                return None;
            }
            parse_local(local)
        })
        .collect()
}

/// `0100007F:2384` (IPv4) or 32 hex digits `:PORT` (IPv6): the address as the kernel prints
/// it, each 32-bit word in host byte order.
fn parse_local(s: &str) -> Option<SocketAddr> {
    let (ip, port) = s.split_once(':')?;
    let port = u16::from_str_radix(port, 16).ok()?;
    // Each word was printed as a native-endian u32 of the address's bytes.
    let word = |hex: &str| u32::from_str_radix(hex, 16).ok().map(u32::to_ne_bytes);
    let ip = match ip.len() {
        8 => IpAddr::V4(Ipv4Addr::from(word(ip)?)),
        32 => {
            let mut bytes = [0u8; 16];
            for (i, chunk) in bytes.chunks_exact_mut(4).enumerate() {
                chunk.copy_from_slice(&word(ip.get(i * 8..i * 8 + 8)?)?);
            }
            IpAddr::V6(Ipv6Addr::from(bytes))
        }
        _ => return None,
    };
    Some(SocketAddr::new(ip, port))
}

/// Would binding `ours` collide with a listener on `theirs`? Same port, and the addresses
/// are equal or either is the wildcard (an IPv6 wildcard is dual-stack by default).
pub fn overlaps(theirs: SocketAddr, ours: SocketAddr) -> bool {
    if theirs.port() != ours.port() {
        return false;
    }
    let canon = |ip: IpAddr| match ip {
        IpAddr::V6(v6) => v6.to_ipv4_mapped().map_or(ip, IpAddr::V4),
        v4 => v4,
    };
    let (t, o) = (canon(theirs.ip()), canon(ours.ip()));
    t == o || t.is_unspecified() || o.is_unspecified()
}

#[cfg(test)]
mod tests {
    use super::*;

    // Captured from this machine: a listener on 127.0.0.1:9092, a TIME_WAIT from it, a
    // listener on 0.0.0.0:22.
    const TCP: &str = "  sl  local_address rem_address   st tx_queue rx_queue tr tm->when retrnsmt   uid  timeout inode
   0: 0100007F:2384 00000000:0000 0A 00000000:00000000 00:00000000 00000000     0        0 1 1 0 100 0 0 10 0
   1: 0100007F:2384 0100007F:C8F2 06 00000000:00000000 03:00001520 00000000     0        0 0 3 0
   2: 00000000:0016 00000000:0000 0A 00000000:00000000 00:00000000 00000000     0        0 2 1 0 100 0 0 10 0
";
    // [::]:9644 and [::1]:8080 listening.
    const TCP6: &str = "  sl  local_address                         remote_address                        st tx_queue rx_queue tr tm->when retrnsmt   uid  timeout inode
   0: 00000000000000000000000000000000:25AC 00000000000000000000000000000000:0000 0A 00000000:00000000 00:00000000 00000000     0        0 3 1 0 100 0 0 10 0
   1: 00000000000000000000000001000000:1F90 00000000000000000000000000000000:0000 0A 00000000:00000000 00:00000000 00000000     0        0 4 1 0 100 0 0 10 0
";

    fn a(s: &str) -> SocketAddr {
        s.parse().unwrap()
    }

    #[test]
    fn reads_listeners_not_time_wait() {
        assert_eq!(listeners(TCP), vec![a("127.0.0.1:9092"), a("0.0.0.0:22")]);
        assert_eq!(listeners(TCP6), vec![a("[::]:9644"), a("[::1]:8080")]);
    }

    #[test]
    fn overlap_rules() {
        assert!(overlaps(a("127.0.0.1:9092"), a("127.0.0.1:9092")));
        assert!(overlaps(a("0.0.0.0:9092"), a("127.0.0.1:9092")));
        assert!(overlaps(a("127.0.0.1:9092"), a("0.0.0.0:9092")));
        assert!(overlaps(a("[::]:9092"), a("127.0.0.1:9092")));
        assert!(overlaps(a("[::ffff:127.0.0.1]:9092"), a("127.0.0.1:9092")));
        assert!(!overlaps(a("127.0.0.2:9092"), a("127.0.0.1:9092")));
        assert!(!overlaps(a("127.0.0.1:9093"), a("127.0.0.1:9092")));
    }

    #[test]
    fn a_live_listener_is_found_and_port_zero_is_free() {
        let l = std::net::TcpListener::bind("127.0.0.1:0").unwrap();
        let addr = l.local_addr().unwrap();
        let err = check_free("--listen", addr).unwrap_err();
        assert!(err.contains("already in use"), "{err}");
        drop(l);
        check_free("--listen", addr).unwrap();
        check_free("--listen", a("127.0.0.1:0")).unwrap();
    }
}
