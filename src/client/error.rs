//! One error type for the client. Clone, because one failed batch fails every record in it.

use kafka_protocol::ResponseError;

pub type Result<T, E = Error> = std::result::Result<T, E>;

#[derive(Debug, Clone, PartialEq, Eq)]
#[non_exhaustive]
pub enum Error {
    /// Connecting, reading or writing a socket failed; the connection is dropped.
    Io {
        op: &'static str,
        addr: String,
        kind: std::io::ErrorKind,
        message: String,
    },
    /// The broker sent bytes we could not decode, or we could not encode a request.
    Protocol(String),
    /// The broker answered with a Kafka error code.
    Broker {
        code: i16,
        /// Where: topic-partition, or the API name for request-level errors.
        context: String,
    },
    /// The broker supports no version of an API we need in the range we speak.
    UnsupportedVersion { api_key: i16 },
    /// No answer within the configured request timeout.
    Timeout { op: &'static str },
    /// The connection or producer was closed while the request was outstanding.
    Closed,
    /// A bad argument from the caller (unknown partition, missing position...).
    Invalid(String),
}

impl Error {
    pub(crate) fn io(op: &'static str, addr: impl ToString, e: &std::io::Error) -> Error {
        Error::Io {
            op,
            addr: addr.to_string(),
            kind: e.kind(),
            message: e.to_string(),
        }
    }

    pub(crate) fn protocol(e: impl std::fmt::Display) -> Error {
        Error::Protocol(e.to_string())
    }

    /// `Ok(())` for error code 0, otherwise `Error::Broker`.
    pub(crate) fn check(code: i16, context: impl FnOnce() -> String) -> Result<()> {
        if code == 0 {
            Ok(())
        } else {
            Err(Error::Broker {
                code,
                context: context(),
            })
        }
    }

    /// The Kafka error, when this is a broker error with a known code.
    pub fn kafka_error(&self) -> Option<ResponseError> {
        match self {
            Error::Broker { code, .. } => ResponseError::try_from_code(*code),
            _ => None,
        }
    }

    /// Whether retrying the same request may succeed: retriable Kafka codes, I/O errors
    /// and timeouts.
    pub fn is_retriable(&self) -> bool {
        match self {
            Error::Broker { code, .. } => {
                ResponseError::try_from_code(*code).is_some_and(|e| e.is_retriable())
            }
            Error::Io { .. } | Error::Timeout { .. } => true,
            _ => false,
        }
    }

    /// Whether the error means our metadata (leaders, topics) is stale.
    pub(crate) fn invalidates_metadata(&self) -> bool {
        matches!(
            self.kafka_error(),
            Some(
                ResponseError::NotLeaderOrFollower
                    | ResponseError::UnknownTopicOrPartition
                    | ResponseError::LeaderNotAvailable
                    | ResponseError::FencedLeaderEpoch
                    | ResponseError::UnknownLeaderEpoch
            )
        ) || matches!(self, Error::Io { .. })
    }
}

impl std::fmt::Display for Error {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        match self {
            Error::Io {
                op, addr, message, ..
            } => write!(f, "{op} {addr}: {message}"),
            Error::Protocol(m) => write!(f, "protocol error: {m}"),
            Error::Broker { code, context } => match ResponseError::try_from_code(*code) {
                Some(e) => write!(f, "{context}: broker error {code} ({e:?})"),
                None => write!(f, "{context}: broker error {code}"),
            },
            Error::UnsupportedVersion { api_key } => {
                write!(f, "broker supports no usable version of API key {api_key}")
            }
            Error::Timeout { op } => write!(f, "{op}: timed out"),
            Error::Closed => write!(f, "closed"),
            Error::Invalid(m) => write!(f, "{m}"),
        }
    }
}

impl std::error::Error for Error {}
