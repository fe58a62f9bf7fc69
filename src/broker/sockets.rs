//! Socket helpers below the connection code: hanging up on a peer that sends nothing more.

use std::os::fd::RawFd;

/// Shuts the socket `fd` down both ways, while its stream still holds it. Dropping a glommio
/// stream with a read in flight closes the socket only once that read completes — which a
/// client or peer that sends nothing more (after a failed TLS handshake, say) never makes
/// happen, so it would keep the connection, its buffers and a file descriptor.
pub fn hang_up(fd: RawFd) {
    // SAFETY: shutdown(2) on a descriptor the caller's stream owns and keeps open; no memory
    // is passed.
    unsafe {
        libc::shutdown(fd, libc::SHUT_RDWR);
    }
}
