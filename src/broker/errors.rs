//! Kafka error codes, and the one place where storage errors become them.

use weir_storage::Error;

pub const NONE: i16 = 0;
pub const UNKNOWN_SERVER_ERROR: i16 = -1;
pub const OFFSET_OUT_OF_RANGE: i16 = 1;
pub const CORRUPT_MESSAGE: i16 = 2;
pub const UNKNOWN_TOPIC_OR_PARTITION: i16 = 3;
pub const NOT_LEADER_OR_FOLLOWER: i16 = 6;
pub const REQUEST_TIMED_OUT: i16 = 7;
pub const REPLICA_NOT_AVAILABLE: i16 = 9;
pub const MESSAGE_TOO_LARGE: i16 = 10;
pub const INVALID_TOPIC_EXCEPTION: i16 = 17;
pub const NOT_ENOUGH_REPLICAS: i16 = 19;
pub const INVALID_REQUIRED_ACKS: i16 = 21;
pub const TOPIC_AUTHORIZATION_FAILED: i16 = 29;
pub const GROUP_AUTHORIZATION_FAILED: i16 = 30;
pub const CLUSTER_AUTHORIZATION_FAILED: i16 = 31;
pub const UNSUPPORTED_SASL_MECHANISM: i16 = 33;
pub const ILLEGAL_SASL_STATE: i16 = 34;
pub const UNSUPPORTED_VERSION: i16 = 35;
pub const TOPIC_ALREADY_EXISTS: i16 = 36;
pub const INVALID_PARTITIONS: i16 = 37;
pub const INVALID_REPLICATION_FACTOR: i16 = 38;
pub const INVALID_REPLICA_ASSIGNMENT: i16 = 39;
pub const INVALID_CONFIG: i16 = 40;
pub const NOT_CONTROLLER: i16 = 41;
pub const INVALID_REQUEST: i16 = 42;
pub const POLICY_VIOLATION: i16 = 44;
pub const OUT_OF_ORDER_SEQUENCE_NUMBER: i16 = 45;
pub const INVALID_PRODUCER_EPOCH: i16 = 47;
pub const INVALID_TXN_STATE: i16 = 48;
pub const INVALID_PRODUCER_ID_MAPPING: i16 = 49;
pub const INVALID_TRANSACTION_TIMEOUT: i16 = 50;
pub const CONCURRENT_TRANSACTIONS: i16 = 51;
pub const COORDINATOR_NOT_AVAILABLE: i16 = 15;
pub const COORDINATOR_LOAD_IN_PROGRESS: i16 = 14;
pub const NOT_COORDINATOR: i16 = 16;
pub const OPERATION_NOT_ATTEMPTED: i16 = 55;
pub const TRANSACTIONAL_ID_AUTHORIZATION_FAILED: i16 = 53;
pub const PRODUCER_FENCED: i16 = 90;
pub const TRANSACTIONAL_ID_NOT_FOUND: i16 = 105;
pub const KAFKA_STORAGE_ERROR: i16 = 56;
pub const LOG_DIR_NOT_FOUND: i16 = 57;
pub const SASL_AUTHENTICATION_FAILED: i16 = 58;
/// KIP-320: the client's leader epoch is older than this broker's for the partition.
pub const FENCED_LEADER_EPOCH: i16 = 74;
/// KIP-320: the client's leader epoch is newer than this broker knows of.
pub const UNKNOWN_LEADER_EPOCH: i16 = 75;
pub const NO_REASSIGNMENT_IN_PROGRESS: i16 = 85;
/// A record a topic's config does not allow (a record without a key on a compacted topic).
pub const INVALID_RECORD: i16 = 87;
pub const INVALID_TIMESTAMP: i16 = 32;
pub const RESOURCE_NOT_FOUND: i16 = 91;
pub const DUPLICATE_RESOURCE: i16 = 92;
pub const UNACCEPTABLE_CREDENTIAL: i16 = 93;
pub const UNKNOWN_TOPIC_ID: i16 = 100;

/// Maps a storage error to the Kafka error code a client should see for that partition.
pub fn storage_error_code(e: &Error) -> i16 {
    if e.is_storage_error() || e.is_no_space() {
        return KAFKA_STORAGE_ERROR;
    }
    match e {
        Error::OffsetOutOfRange { .. } => OFFSET_OUT_OF_RANGE,
        Error::InvalidBatch(_) => CORRUPT_MESSAGE,
        Error::InvalidRecords {
            kind: weir_storage::error::Invalid::Record,
            ..
        } => INVALID_RECORD,
        Error::InvalidRecords {
            kind: weir_storage::error::Invalid::Timestamp,
            ..
        } => INVALID_TIMESTAMP,
        Error::BatchTooLarge { .. } => MESSAGE_TOO_LARGE,
        Error::OutOfOrderSequence { .. } => OUT_OF_ORDER_SEQUENCE_NUMBER,
        Error::InvalidProducerEpoch { .. } => INVALID_PRODUCER_EPOCH,
        // The object store is down and the partition's upload backlog is full: retriable,
        // producers retry until the store is back (the response's message says why).
        Error::UploadBacklog { .. } => KAFKA_STORAGE_ERROR,
        // The log was closed under us (shutdown, topic deleted): the client should refresh
        // its metadata and retry.
        Error::Closed => NOT_LEADER_OR_FOLLOWER,
        _ => UNKNOWN_SERVER_ERROR,
    }
}

/// ElectLeaders: the preferred replica is not in sync (or did not take over in time).
pub const PREFERRED_LEADER_NOT_AVAILABLE: i16 = 80;
/// ElectLeaders (UNCLEAN): no replica may be elected.
pub const ELIGIBLE_LEADERS_NOT_AVAILABLE: i16 = 83;
/// ElectLeaders: the replica asked for leads already.
pub const ELECTION_NOT_NEEDED: i16 = 84;
/// No leader is known for the partition now (one is being elected).
pub const LEADER_NOT_AVAILABLE: i16 = 5;

#[cfg(test)]
mod tests {
    use super::*;
    use weir_storage::error::BatchError;

    #[test]
    fn mapping() {
        assert_eq!(
            storage_error_code(&Error::InvalidBatch(BatchError::BadMagic(1))),
            CORRUPT_MESSAGE
        );
        assert_eq!(
            storage_error_code(&Error::BatchTooLarge { size: 2, max: 1 }),
            MESSAGE_TOO_LARGE
        );
        assert_eq!(
            storage_error_code(&Error::OffsetOutOfRange {
                offset: 9,
                log_start_offset: 0,
                log_end_offset: 1
            }),
            OFFSET_OUT_OF_RANGE
        );
        assert_eq!(
            storage_error_code(&Error::LogFailed("x".into())),
            KAFKA_STORAGE_ERROR
        );
    }
}
