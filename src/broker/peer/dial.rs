//! Dialing a peer broker: a TCP connection from this broker's own inter-broker address when
//! it names one (so a peer, and a firewall, sees each broker come from its own address even
//! when they share a host), within a timeout, without blocking the reactor.

use std::net::{IpAddr, SocketAddr};
use std::time::{Duration, Instant};

use glommio::net::TcpStream;

const CONNECT_TIMEOUT: Duration = Duration::from_secs(1);
/// How often a connection from a bound source address is checked while it is being made.
const CONNECT_POLL: Duration = Duration::from_millis(2);

/// The address to connect to a peer at `peer` from, for a broker whose own inter-broker
/// address is `own`: that address itself when it names one (not 0.0.0.0 or ::) of the peer's
/// family; otherwise none (the kernel picks, by its routes).
pub(super) fn source_for(own: SocketAddr, peer: SocketAddr) -> Option<IpAddr> {
    let ip = own.ip();
    (!ip.is_unspecified() && own.is_ipv4() == peer.is_ipv4()).then_some(ip)
}

/// A connection to `addr`, from `source` (any port) when given, within `CONNECT_TIMEOUT`.
/// glommio's `TcpStream` cannot bind before it connects, so a bound one is made with socket2,
/// connected without blocking the reactor (a non-blocking `connect`, then its state looked at
/// every `CONNECT_POLL`: a connection on one host is made in microseconds, and one to an
/// unreachable peer gives up at the timeout as glommio's does), then handed to glommio.
pub(super) async fn connect(addr: SocketAddr, source: Option<IpAddr>) -> Result<TcpStream, String> {
    let Some(source) = source else {
        return TcpStream::connect_timeout(addr, CONNECT_TIMEOUT)
            .await
            .map_err(|e| e.to_string());
    };
    let io = |what: &str, e: std::io::Error| format!("{what}: {e}");
    let socket = socket2::Socket::new(
        socket2::Domain::for_address(addr),
        socket2::Type::STREAM,
        Some(socket2::Protocol::TCP),
    )
    .map_err(|e| io("socket", e))?;
    if let Err(e) = socket.bind(&SocketAddr::new(source, 0).into()) {
        // The voters entry names an address this host does not have (behind NAT, or a
        // container's published address): connect as before, from whatever the kernel picks.
        tracing::debug!(%source, error = %e, "cannot bind a peer connection to this broker's voters address; connecting unbound");
        return TcpStream::connect_timeout(addr, CONNECT_TIMEOUT)
            .await
            .map_err(|e| e.to_string());
    }
    socket
        .set_nonblocking(true)
        .map_err(|e| io("set_nonblocking", e))?;
    match socket.connect(&addr.into()) {
        Ok(()) => {}
        Err(e) if e.raw_os_error() == Some(libc::EINPROGRESS) => {
            let deadline = Instant::now() + CONNECT_TIMEOUT;
            loop {
                // SO_ERROR first: a refused connection is no longer "in progress" either.
                if let Some(e) = socket.take_error().map_err(|e| io("SO_ERROR", e))? {
                    return Err(e.to_string());
                }
                if socket.peer_addr().is_ok() {
                    break; // established
                }
                if Instant::now() >= deadline {
                    return Err("connection timed out".into());
                }
                glommio::timer::sleep(CONNECT_POLL).await;
            }
        }
        Err(e) => return Err(e.to_string()),
    }
    // glommio's own sockets are blocking ones (it reads and writes through io_uring).
    socket
        .set_nonblocking(false)
        .map_err(|e| io("set_nonblocking", e))?;
    Ok(TcpStream::from(socket))
}

#[cfg(test)]
mod tests {
    use super::super::net::{read_frame, Frame, Reply};
    use super::*;
    use futures_lite::AsyncWriteExt;

    #[test]
    fn source_address_is_the_brokers_own_when_it_names_one() {
        let at = |s: &str| s.parse::<SocketAddr>().unwrap();
        assert_eq!(
            source_for(at("127.0.0.2:9093"), at("127.0.0.3:9093")),
            Some("127.0.0.2".parse().unwrap())
        );
        assert_eq!(source_for(at("0.0.0.0:9093"), at("127.0.0.3:9093")), None);
        assert_eq!(source_for(at("[::]:9093"), at("[::1]:9093")), None);
        assert_eq!(source_for(at("127.0.0.2:9093"), at("[::1]:9093")), None);
    }

    /// A peer sees the connection come from this broker's own address (what lets a firewall
    /// rule cut one broker pair on a shared host), frames flow on it, and a refused connection
    /// is an error at once, not a hang of the reactor.
    #[test]
    fn connections_leave_from_the_bound_source_address() {
        glommio::LocalExecutorBuilder::default()
            .io_memory(1 << 20)
            .spawn(|| async {
                let listener = glommio::net::TcpListener::bind("127.0.0.3:0").unwrap();
                let addr = listener.local_addr().unwrap();
                let accepted = glommio::spawn_local(async move {
                    let mut s = listener.accept().await.unwrap();
                    let from = s.peer_addr().unwrap();
                    (from, read_frame(&mut s).await.unwrap())
                });
                let mut out = connect(addr, Some("127.0.0.2".parse().unwrap()))
                    .await
                    .unwrap();
                let frame = Frame::Reply(Reply {
                    req: 5,
                    result: Ok(12),
                });
                out.write_all(&frame.encode()).await.unwrap();
                let (from, got) = accepted.await;
                assert_eq!(from.ip(), "127.0.0.2".parse::<IpAddr>().unwrap());
                assert_eq!(got, Some(frame));
                // Nothing listens there any more: refused, well within the timeout.
                drop(out);
                let t0 = Instant::now();
                let free = std::net::TcpListener::bind("127.0.0.3:0").unwrap();
                let closed = free.local_addr().unwrap();
                drop(free);
                assert!(connect(closed, Some("127.0.0.2".parse().unwrap()))
                    .await
                    .is_err());
                assert!(t0.elapsed() < CONNECT_TIMEOUT);
                // A voters address this host does not have (NAT, a container's published
                // address) must not keep the brokers apart: the connection is made unbound.
                let listener = glommio::net::TcpListener::bind("127.0.0.1:0").unwrap();
                let addr = listener.local_addr().unwrap();
                let accepted = glommio::spawn_local(async move { listener.accept().await.is_ok() });
                assert!(connect(addr, Some("192.0.2.1".parse().unwrap()))
                    .await
                    .is_ok());
                assert!(accepted.await);
            })
            .unwrap()
            .join()
            .unwrap();
    }
}
