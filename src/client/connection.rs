//! One TCP connection to a Kafka-protocol broker: size-prefixed frames, request headers,
//! correlation ids, and pipelining — any number of requests on the wire, their responses
//! matched in order by a reader task.
//!
//! Frame (both directions): `i32 size` (big-endian, bytes after it) then the message.
//! A request is `RequestHeader` (v1 or v2 by API version) + body; a response starts with
//! `i32 correlation_id` (+ tagged fields for flexible versions).

use std::cell::{Cell, RefCell};
use std::collections::{HashMap, VecDeque};
use std::future::Future;
use std::marker::PhantomData;
use std::os::fd::{AsRawFd, FromRawFd, RawFd};
use std::pin::Pin;
use std::rc::Rc;
use std::task::{Context, Poll};

use bytes::{BufMut, Bytes, BytesMut};
use futures_lite::io::AsyncWriteExt;
use glommio::net::TcpStream;
use glommio::sync::Semaphore;
use kafka_protocol::messages::{
    ApiVersionsRequest, ApiVersionsResponse, RequestHeader, ResponseHeader,
};
use kafka_protocol::protocol::{Decodable, Encodable, HeaderVersion, Request, StrBytes};

use super::error::{Error, Result};
use super::sync::{promise, Resolver, Waiter};

/// Largest response frame accepted (a guard against garbage sizes).
pub const MAX_FRAME_BYTES: usize = 256 << 20;

/// Encodes `size | header | body` for one request.
pub fn encode_request_frame<R: Request>(
    req: &R,
    version: i16,
    correlation_id: i32,
    client_id: &StrBytes,
) -> Result<Bytes> {
    let header = RequestHeader::default()
        .with_request_api_key(R::KEY)
        .with_request_api_version(version)
        .with_correlation_id(correlation_id)
        .with_client_id(Some(client_id.clone()));
    let header_version = R::header_version(version);
    let size = header
        .compute_size(header_version)
        .and_then(|h| Ok(h + req.compute_size(version)?))
        .map_err(Error::protocol)?;
    let mut buf = BytesMut::with_capacity(4 + size);
    buf.put_i32(size as i32);
    header
        .encode(&mut buf, header_version)
        .map_err(Error::protocol)?;
    req.encode(&mut buf, version).map_err(Error::protocol)?;
    debug_assert_eq!(buf.len(), 4 + size, "compute_size disagrees with encode");
    Ok(buf.freeze())
}

/// Reads the correlation id at the start of a response frame body.
pub fn decode_frame_header(body: &[u8]) -> Result<i32> {
    let id: [u8; 4] = body
        .get(..4)
        .and_then(|b| b.try_into().ok())
        .ok_or_else(|| Error::Protocol(format!("response frame of {} bytes", body.len())))?;
    Ok(i32::from_be_bytes(id))
}

fn decode_response<T: Decodable + HeaderVersion>(mut body: Bytes, version: i16) -> Result<T> {
    ResponseHeader::decode(&mut body, T::header_version(version)).map_err(Error::protocol)?;
    T::decode(&mut body, version).map_err(Error::protocol)
}

struct Pending {
    correlation_id: i32,
    done: Resolver<Result<Bytes>>,
}

/// State shared by the connection handle and its reader task.
struct Shared {
    inflight: RefCell<VecDeque<Pending>>,
    failed: RefCell<Option<Error>>,
    fd: RawFd,
    /// Streaming fetches: the Open's correlation id → where its messages go. Frames with
    /// such an id are stream messages (ack, pushes, end), not in-line responses.
    streams: RefCell<HashMap<i32, glommio::channels::local_channel::LocalSender<Bytes>>>,
}

impl Shared {
    /// Marks the connection dead and fails everything outstanding.
    fn fail(&self, e: Error) {
        if self.failed.borrow().is_none() {
            *self.failed.borrow_mut() = Some(e.clone());
            // Makes the reader task see EOF and the broker close its side.
            shutdown_socket(self.fd);
        }
        let drained: Vec<Pending> = self.inflight.borrow_mut().drain(..).collect();
        for p in drained {
            p.done.resolve(Err(e.clone()));
        }
        // Dropping the senders ends every stream's receiver (it sees the failure).
        self.streams.borrow_mut().clear();
    }
}

fn shutdown_socket(fd: RawFd) {
    // SAFETY: shutdown(2) touches no memory; `fd` is the socket of a stream that is still
    // open (the reader task holds it until it has seen the shutdown).
    unsafe {
        libc::shutdown(fd, libc::SHUT_RDWR);
    }
}

struct Inner {
    addr: String,
    client_id: StrBytes,
    writer: RefCell<Option<TcpStream>>,
    write_lock: Semaphore,
    next_correlation_id: Cell<i32>,
    shared: Rc<Shared>,
    /// api key -> (min, max) supported by the broker.
    versions: RefCell<HashMap<i16, (i16, i16)>>,
}

impl Drop for Inner {
    fn drop(&mut self) {
        self.shared.fail(Error::Closed);
    }
}

/// A pipelined connection. Cheap to clone; the socket closes when the last clone goes.
#[derive(Clone)]
pub struct Connection {
    inner: Rc<Inner>,
}

/// The response to one request; await it (or poll it) to get the decoded message.
pub struct ResponseFuture<T> {
    waiter: Waiter<Result<Bytes>>,
    /// A pending response keeps its connection open.
    _conn: Connection,
    version: i16,
    _message: PhantomData<fn() -> T>,
}

impl<T: Decodable + HeaderVersion> Future for ResponseFuture<T> {
    type Output = Result<T>;
    fn poll(mut self: Pin<&mut Self>, cx: &mut Context<'_>) -> Poll<Result<T>> {
        let version = self.version;
        match Pin::new(&mut self.waiter).poll(cx) {
            Poll::Pending => Poll::Pending,
            Poll::Ready(None) => Poll::Ready(Err(Error::Closed)),
            Poll::Ready(Some(Err(e))) => Poll::Ready(Err(e)),
            Poll::Ready(Some(Ok(body))) => Poll::Ready(decode_response(body, version)),
        }
    }
}

impl Connection {
    /// Connects, then negotiates API versions.
    pub async fn connect(addr: &str, client_id: &str) -> Result<Connection> {
        let stream = TcpStream::connect(addr)
            .await
            .map_err(|e| Error::io("connect", addr, &std::io::Error::other(e.to_string())))?;
        stream
            .set_nodelay(true)
            .map_err(|e| Error::io("set_nodelay", addr, &std::io::Error::other(e.to_string())))?;
        let fd = stream.as_raw_fd();
        // The reader gets its own stream on a dup of the socket: see `SocketReader`.
        // SAFETY: dup(2) of a socket we own; the new fd is owned by the new stream.
        let read_fd = unsafe { libc::dup(fd) };
        if read_fd < 0 {
            return Err(Error::io("dup", addr, &std::io::Error::last_os_error()));
        }
        // SAFETY: `read_fd` is a fresh, open socket fd nobody else owns.
        let read_stream = unsafe { TcpStream::from_raw_fd(read_fd) };
        let shared = Rc::new(Shared {
            inflight: RefCell::new(VecDeque::new()),
            failed: RefCell::new(None),
            fd,
            streams: RefCell::new(HashMap::new()),
        });
        let reader = SocketReader {
            stream: read_stream,
            fd: read_fd,
            buf: BytesMut::with_capacity(READ_CHUNK),
        };
        glommio::spawn_local(reader_loop(reader, shared.clone(), addr.to_string())).detach();
        let conn = Connection {
            inner: Rc::new(Inner {
                addr: addr.to_string(),
                client_id: StrBytes::from_string(client_id.to_string()),
                writer: RefCell::new(Some(stream)),
                write_lock: Semaphore::new(1),
                next_correlation_id: Cell::new(1),
                shared,
                versions: RefCell::new(HashMap::new()),
            }),
        };
        conn.negotiate_versions().await?;
        Ok(conn)
    }

    pub fn addr(&self) -> &str {
        &self.inner.addr
    }

    /// Whether the connection has failed (it will not recover; make a new one).
    pub fn is_failed(&self) -> bool {
        self.inner.shared.failed.borrow().is_some()
    }

    /// Requests written whose responses have not arrived yet.
    pub fn in_flight(&self) -> usize {
        self.inner.shared.inflight.borrow().len()
    }

    async fn negotiate_versions(&self) -> Result<()> {
        let req = ApiVersionsRequest::default()
            .with_client_software_name(StrBytes::from_static_str(
                crate::protocol::stream_fetch::CLIENT_SOFTWARE_NAME,
            ))
            .with_client_software_version(StrBytes::from_static_str(env!("CARGO_PKG_VERSION")));
        let mut resp: ApiVersionsResponse = self.send(&req, 3).await?.await?;
        if resp.error_code == 35 {
            // UNSUPPORTED_VERSION: the broker answers in v0 with what it supports.
            resp = self.send(&req, 0).await?.await?;
        }
        Error::check(resp.error_code, || "ApiVersions".to_string())?;
        let mut versions = self.inner.versions.borrow_mut();
        for k in resp.api_keys {
            versions.insert(k.api_key, (k.min_version, k.max_version));
        }
        Ok(())
    }

    /// Whether the broker offered weir's streaming fetch extension.
    pub fn supports_streaming(&self) -> bool {
        self.inner
            .versions
            .borrow()
            .get(&crate::protocol::stream_fetch::API_KEY)
            .is_some_and(|&(lo, hi)| {
                lo <= crate::protocol::stream_fetch::VERSION
                    && crate::protocol::stream_fetch::VERSION <= hi
            })
    }

    /// Opens a stream (`op` must be `StreamOp::Open`): its messages (ack, pushes, end)
    /// arrive on the returned receiver, as raw frame bodies (`StreamMsg::decode`).
    pub async fn open_stream(
        &self,
        op: &crate::protocol::stream_fetch::StreamOp,
    ) -> Result<glommio::channels::local_channel::LocalReceiver<Bytes>> {
        let (tx, rx) = glommio::channels::local_channel::new_unbounded();
        self.write_stream_op(op, Some(tx)).await?;
        Ok(rx)
    }

    /// Sends a Credit or Cancel for a stream (no response: the pushes tell).
    pub async fn stream_op(&self, op: &crate::protocol::stream_fetch::StreamOp) -> Result<()> {
        self.write_stream_op(op, None).await
    }

    async fn write_stream_op(
        &self,
        op: &crate::protocol::stream_fetch::StreamOp,
        route: Option<glommio::channels::local_channel::LocalSender<Bytes>>,
    ) -> Result<()> {
        let inner = &self.inner;
        self.write_frame(|id| {
            if let Some(tx) = route {
                inner.shared.streams.borrow_mut().insert(id, tx);
            }
            Ok(op.request_frame(id, inner.client_id.as_str()))
        })
        .await
    }

    /// The highest version of `R` both sides speak, at most `cap`.
    pub fn version<R: Request>(&self, cap: i16) -> Result<i16> {
        let (broker_min, broker_max) = self
            .inner
            .versions
            .borrow()
            .get(&R::KEY)
            .copied()
            .ok_or(Error::UnsupportedVersion { api_key: R::KEY })?;
        let max = broker_max.min(cap).min(R::VERSIONS.max);
        let min = broker_min.max(R::VERSIONS.min);
        if min > max {
            return Err(Error::UnsupportedVersion { api_key: R::KEY });
        }
        Ok(max)
    }

    /// Writes a request and returns its response future; the request is on the wire when
    /// this returns, so calling it several times pipelines.
    pub async fn send<R: Request>(
        &self,
        req: &R,
        version: i16,
    ) -> Result<ResponseFuture<R::Response>> {
        let (done, waiter) = promise();
        self.write(req, version, Some(done)).await?;
        Ok(ResponseFuture {
            waiter,
            _conn: self.clone(),
            version,
            _message: PhantomData,
        })
    }

    /// Writes a request that gets no response (Produce with acks=0).
    pub async fn send_oneway<R: Request>(&self, req: &R, version: i16) -> Result<()> {
        self.write(req, version, None).await
    }

    async fn write<R: Request>(
        &self,
        req: &R,
        version: i16,
        done: Option<Resolver<Result<Bytes>>>,
    ) -> Result<()> {
        let inner = &self.inner;
        self.write_frame(|id| {
            let frame = encode_request_frame(req, version, id, &inner.client_id)?;
            if let Some(done) = done {
                inner.shared.inflight.borrow_mut().push_back(Pending {
                    correlation_id: id,
                    done,
                });
            }
            Ok(frame)
        })
        .await
    }

    /// Under the write lock: takes the next correlation id, has `frame` encode the request
    /// with it (and register where the answer goes), and writes it.
    async fn write_frame(&self, frame: impl FnOnce(i32) -> Result<Bytes>) -> Result<()> {
        let inner = &self.inner;
        let _permit = inner
            .write_lock
            .acquire_permit(1)
            .await
            .map_err(|_| Error::Closed)?;
        if let Some(e) = inner.shared.failed.borrow().clone() {
            return Err(e);
        }
        let id = inner.next_correlation_id.get();
        inner.next_correlation_id.set(id.wrapping_add(1));
        let frame = frame(id)?;
        let mut writer = inner.writer.borrow_mut().take().ok_or(Error::Closed)?;
        let res = writer.write_all(&frame).await;
        *inner.writer.borrow_mut() = Some(writer);
        if let Err(e) = res {
            let err = Error::io("write", &inner.addr, &e);
            inner.shared.fail(err.clone());
            return Err(err);
        }
        Ok(())
    }
}

const READ_CHUNK: usize = 256 << 10;

/// The read side of a connection. It reads with non-blocking `recv(2)` straight into its
/// buffer and, when the socket is empty, waits for data with glommio's io_uring
/// `peek` (a real receive operation). It does not use glommio's `AsyncRead` for
/// sockets: in glommio 0.9 that path waits on a POLL_ADD which, with a writer active on
/// the same socket, was seen to never complete — responses sat in the receive queue
/// (`ss` showed Recv-Q > 0) while the reader slept, stalling produce flushes.
struct SocketReader {
    stream: TcpStream,
    fd: RawFd,
    buf: BytesMut,
}

impl SocketReader {
    /// Reads more bytes into `buf`; `Ok(0)` at end of stream.
    async fn fill(&mut self, want: usize) -> std::io::Result<usize> {
        self.buf.reserve(want.max(READ_CHUNK / 4));
        loop {
            let spare = self.buf.spare_capacity_mut();
            // SAFETY: recv writes at most `spare.len()` bytes into the spare capacity.
            let n = unsafe {
                libc::recv(
                    self.fd,
                    spare.as_mut_ptr().cast(),
                    spare.len(),
                    libc::MSG_DONTWAIT,
                )
            };
            if n > 0 {
                // SAFETY: recv initialised `n` bytes of the spare capacity.
                unsafe { self.buf.set_len(self.buf.len() + n as usize) };
                return Ok(n as usize);
            }
            if n == 0 {
                return Ok(0);
            }
            let e = std::io::Error::last_os_error();
            match e.kind() {
                std::io::ErrorKind::WouldBlock => {}
                std::io::ErrorKind::Interrupted => continue,
                _ => return Err(e),
            }
            let mut one = [0u8; 1];
            if self.stream.peek(&mut one).await? == 0 {
                return Ok(0);
            }
        }
    }

    /// The next response frame body (after the size prefix), without copying.
    async fn frame(&mut self, addr: &str) -> Result<Bytes> {
        while self.buf.len() < 4 {
            self.more(4, addr).await?;
        }
        let size = i32::from_be_bytes(self.buf[..4].try_into().expect("4 bytes"));
        if size < 4 || size as usize > MAX_FRAME_BYTES {
            return Err(Error::Protocol(format!(
                "{addr}: response frame size {size}"
            )));
        }
        let total = 4 + size as usize;
        while self.buf.len() < total {
            self.more(total - self.buf.len(), addr).await?;
        }
        let mut frame = self.buf.split_to(total);
        let _ = frame.split_to(4);
        Ok(frame.freeze())
    }

    async fn more(&mut self, want: usize, addr: &str) -> Result<()> {
        match self.fill(want).await {
            Ok(0) => Err(Error::io(
                "read",
                addr,
                &std::io::Error::from(std::io::ErrorKind::UnexpectedEof),
            )),
            Ok(_) => Ok(()),
            Err(e) => Err(Error::io("read", addr, &e)),
        }
    }
}

/// Hands a streaming-fetch frame to its stream; false if `id` is not a stream's. The route
/// goes when the stream ends (an End, or an Ack refusing it).
fn route_stream(shared: &Shared, id: i32, body: &Bytes) -> bool {
    use crate::protocol::stream_fetch::{MSG_ACK, MSG_END};
    let mut streams = shared.streams.borrow_mut();
    let Some(tx) = streams.get(&id) else {
        return false;
    };
    // body: correlation id (4), stream id (4), kind (1), [ack: error (2)]
    let kind = body.get(8).map(|&k| k as i8);
    let refused = kind == Some(MSG_ACK) && body.get(9..11).is_some_and(|e| e != [0, 0]);
    // A consumer that dropped its stream no longer reads: its frames are dropped.
    let _ = tx.try_send(body.clone());
    if kind == Some(MSG_END) || refused {
        streams.remove(&id);
    }
    true
}

async fn reader_loop(mut rd: SocketReader, shared: Rc<Shared>, addr: String) {
    loop {
        match rd.frame(&addr).await {
            Ok(body) => {
                let id = match decode_frame_header(&body) {
                    Ok(id) => id,
                    Err(e) => return shared.fail(e),
                };
                if route_stream(&shared, id, &body) {
                    continue;
                }
                let next = shared.inflight.borrow_mut().pop_front();
                match next {
                    Some(p) if p.correlation_id == id => p.done.resolve(Ok(body)),
                    Some(p) => {
                        let e = Error::Protocol(format!(
                            "{addr}: response for correlation id {id}, expected {}",
                            p.correlation_id
                        ));
                        p.done.resolve(Err(e.clone()));
                        return shared.fail(e);
                    }
                    None => {
                        return shared.fail(Error::Protocol(format!(
                            "{addr}: unsolicited response (correlation id {id})"
                        )))
                    }
                }
            }
            Err(e) => return shared.fail(e),
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use kafka_protocol::messages::{MetadataRequest, MetadataResponse};

    #[test]
    fn frame_has_size_prefix_and_header() {
        let req = MetadataRequest::default().with_topics(None);
        let id = StrBytes::from_static_str("c");
        let frame = encode_request_frame(&req, 12, 77, &id).unwrap();
        let size = i32::from_be_bytes(frame[..4].try_into().unwrap()) as usize;
        assert_eq!(size, frame.len() - 4);
        // Header v2: api key, api version, correlation id, client id (nullable string).
        assert_eq!(i16::from_be_bytes([frame[4], frame[5]]), 3);
        assert_eq!(i16::from_be_bytes([frame[6], frame[7]]), 12);
        assert_eq!(i32::from_be_bytes(frame[8..12].try_into().unwrap()), 77);
        let mut body = frame.slice(4..);
        let hdr = kafka_protocol::protocol::decode_request_header_from_buffer(&mut body).unwrap();
        assert_eq!(hdr.correlation_id, 77);
        let back = MetadataRequest::decode(&mut body, 12).unwrap();
        assert_eq!(back, req);
    }

    #[test]
    fn response_decodes_after_header() {
        let resp = MetadataResponse::default().with_controller_id(3.into());
        let version = 12;
        let mut buf = BytesMut::new();
        ResponseHeader::default()
            .with_correlation_id(9)
            .encode(&mut buf, MetadataResponse::header_version(version))
            .unwrap();
        resp.encode(&mut buf, version).unwrap();
        let body = buf.freeze();
        assert_eq!(decode_frame_header(&body).unwrap(), 9);
        let back: MetadataResponse = decode_response(body, version).unwrap();
        assert_eq!(back, resp);
        assert!(decode_frame_header(&[0, 1]).is_err());
    }
}
