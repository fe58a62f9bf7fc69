//! Tiered storage in a build without the `tiered-storage` feature (the fuzz crate's): no S3
//! client, so `remote.log.storage.system.enable=true` is refused at start-up
//! (`check_config`) and no log gets a remote tier.

use std::rc::Rc;

use weir::config::BrokerConfig;
use weir_storage::tier::ObjectStore;

/// The S3 client's handle: none in this build.
pub struct S3Client;

impl S3Client {
    /// The key prefix of a partition's objects (never asked: there is no client).
    pub fn partition_prefix(&self, topic: &str, partition: i32) -> String {
        format!("{topic}-{partition}")
    }
}

/// No client in this build.
pub fn client(_config: &BrokerConfig) -> Option<S3Client> {
    None
}

/// No object store in this build.
pub fn store(_config: &BrokerConfig) -> Option<Rc<dyn ObjectStore>> {
    None
}

/// Refuses a config that turns tiered storage on.
pub fn check_config(config: &BrokerConfig) -> Result<(), String> {
    if config.remote_storage_enable {
        return Err(
            "remote.log.storage.system.enable=true: this build of weir has no tiered \
                    storage (build it with the default features, or --features tiered-storage)"
                .into(),
        );
    }
    Ok(())
}
