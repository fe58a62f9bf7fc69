//! Tiered storage's object store: S3 (or an S3-compatible server) through `object_store`,
//! on a thread of its own ("weir-s3") running a single-threaded tokio runtime. Cores never
//! wait on the network: each core's [`S3Store`] (the engine's `tier::ObjectStore`) sends a
//! job over a channel and awaits its answer on a oneshot, so a slow or unreachable store
//! only slows that partition's uploads and remote reads, never a reactor. Bytes cross as
//! `bytes::Bytes` (`Send`).

use std::ops::Range;
use std::sync::Arc;

use bytes::Bytes;
use futures::future::BoxFuture;
use futures::TryStreamExt;
use object_store::aws::AmazonS3Builder;
use object_store::path::Path;
use object_store::{MultipartUpload, ObjectStore as _, PutPayload};
use weir::config::RemoteStorageConfig;
use weir_storage::tier::{ObjectInfo, ObjectStore, StoreFuture, Upload};
use weir_storage::Error;

type Store = Arc<object_store::aws::AmazonS3>;
type Job = Box<dyn FnOnce(Store) -> BoxFuture<'static, ()> + Send>;

/// The S3 client thread's handle: cloned into every core.
#[derive(Clone)]
pub struct S3Client {
    jobs: tokio::sync::mpsc::UnboundedSender<Job>,
    prefix: Option<String>,
}

impl S3Client {
    /// Starts the client thread for the bucket `config` names. Credentials come from the
    /// standard environment variables (AWS_ACCESS_KEY_ID, AWS_SECRET_ACCESS_KEY,
    /// AWS_SESSION_TOKEN), as every S3 tool reads them.
    pub fn start(config: &RemoteStorageConfig) -> Result<S3Client, String> {
        let bucket = config
            .bucket
            .as_deref()
            .ok_or("remote.log.storage.system.enable=true needs remote.log.storage.s3.bucket")?;
        // A few quick retries inside one request (a dropped connection, a 503), then the
        // error: the tiering pass fails, is counted (weir_remote_errors_total) and the next
        // pass starts over, rather than one request retrying for object_store's default 3 min.
        let retry = object_store::RetryConfig {
            max_retries: 3,
            retry_timeout: std::time::Duration::from_secs(10),
            backoff: object_store::BackoffConfig::default(),
        };
        let mut b = AmazonS3Builder::from_env()
            .with_bucket_name(bucket)
            .with_region(&config.region)
            .with_retry(retry);
        if let Some(endpoint) = &config.endpoint {
            b = b
                .with_endpoint(endpoint)
                .with_allow_http(endpoint.starts_with("http://"))
                .with_virtual_hosted_style_request(false);
        }
        let store: Store = Arc::new(b.build().map_err(|e| format!("the S3 client: {e}"))?);
        let (jobs, mut rx) = tokio::sync::mpsc::unbounded_channel::<Job>();
        let runtime = tokio::runtime::Builder::new_current_thread()
            .enable_all()
            .build()
            .map_err(|e| format!("the S3 client's runtime: {e}"))?;
        std::thread::Builder::new()
            .name("weir-s3".into())
            .spawn(move || {
                runtime.block_on(async move {
                    while let Some(job) = rx.recv().await {
                        tokio::spawn(job(store.clone()));
                    }
                })
            })
            .map_err(|e| format!("the S3 client thread: {e}"))?;
        Ok(S3Client {
            jobs,
            prefix: config.prefix.clone(),
        })
    }

    /// The key prefix of a partition's objects.
    pub fn partition_prefix(&self, topic: &str, partition: i32) -> String {
        match &self.prefix {
            Some(p) => format!("{}/{topic}-{partition}", p.trim_end_matches('/')),
            None => format!("{topic}-{partition}"),
        }
    }

    /// Runs `f` on the client thread and awaits its answer here.
    async fn call<T, F>(&self, f: F) -> weir_storage::Result<T>
    where
        T: Send + 'static,
        F: FnOnce(Store) -> BoxFuture<'static, object_store::Result<T>> + Send + 'static,
    {
        answer(self.submit(f)?).await
    }

    /// Starts `f` on the client thread; its answer comes on the receiver.
    fn submit<T, F>(&self, f: F) -> weir_storage::Result<Answer<T>>
    where
        T: Send + 'static,
        F: FnOnce(Store) -> BoxFuture<'static, object_store::Result<T>> + Send + 'static,
    {
        let (tx, rx) = tokio::sync::oneshot::channel();
        let job: Job = Box::new(move |store| {
            Box::pin(async move {
                let _ = tx.send(f(store).await);
            })
        });
        self.jobs
            .send(job)
            .map_err(|_| Error::Remote("the S3 client thread stopped".into()))?;
        Ok(rx)
    }
}

type Answer<T> = tokio::sync::oneshot::Receiver<object_store::Result<T>>;

async fn answer<T>(rx: Answer<T>) -> weir_storage::Result<T> {
    rx.await
        .map_err(|_| Error::Remote("the S3 client thread stopped".into()))?
        .map_err(|e| Error::Remote(e.to_string()))
}

fn path(key: &str) -> weir_storage::Result<Path> {
    Path::parse(key).map_err(|e| Error::Remote(format!("object key {key:?}: {e}")))
}

/// The broker's S3 client, started by the first core that asks (`None`: tiered storage is
/// off, or the client could not start: said once in the log).
pub fn client(config: &weir::config::BrokerConfig) -> Option<S3Client> {
    static CLIENT: std::sync::OnceLock<Option<S3Client>> = std::sync::OnceLock::new();
    CLIENT
        .get_or_init(|| {
            let c = config.remote_storage()?;
            S3Client::start(c)
                .inspect_err(|e| tracing::error!(error = %e, "tiered storage is off"))
                .ok()
        })
        .clone()
}

/// A config this build can serve (the build without the feature refuses tiered storage:
/// `tier_off.rs`).
pub fn check_config(_config: &weir::config::BrokerConfig) -> Result<(), String> {
    Ok(())
}

/// This core's object store (`None`: tiered storage is off).
pub fn store(config: &weir::config::BrokerConfig) -> Option<std::rc::Rc<S3Store>> {
    thread_local!(static STORE: std::cell::OnceCell<Option<std::rc::Rc<S3Store>>> =
        const { std::cell::OnceCell::new() });
    STORE.with(|s| {
        s.get_or_init(|| client(config).map(|c| std::rc::Rc::new(S3Store(c))))
            .clone()
    })
}

/// A core's view of the S3 client: the engine's object store.
pub struct S3Store(pub S3Client);

impl ObjectStore for S3Store {
    fn put(&self, key: &str, body: Bytes) -> StoreFuture<'_, ()> {
        let p = path(key);
        Box::pin(async move {
            let p = p?;
            self.0
                .call(move |s| Box::pin(async move { s.put(&p, body.into()).await.map(|_| ()) }))
                .await
        })
    }

    fn upload(&self, key: &str) -> StoreFuture<'_, Box<dyn Upload>> {
        let p = path(key);
        Box::pin(async move {
            let p = p?;
            let up = self
                .0
                .call(move |s| Box::pin(async move { s.put_multipart(&p).await }))
                .await?;
            Ok(Box::new(S3Upload {
                client: self.0.clone(),
                up: Some(up),
                in_flight: Default::default(),
            }) as Box<dyn Upload>)
        })
    }

    fn get_range(&self, key: &str, range: Range<u64>) -> StoreFuture<'_, Bytes> {
        let p = path(key);
        Box::pin(async move {
            let p = p?;
            self.0
                .call(move |s| {
                    Box::pin(async move {
                        if range.end == u64::MAX && range.start == 0 {
                            s.get(&p).await?.bytes().await
                        } else {
                            s.get_range(&p, range).await
                        }
                    })
                })
                .await
        })
    }

    fn delete(&self, key: &str) -> StoreFuture<'_, ()> {
        let p = path(key);
        Box::pin(async move {
            let p = p?;
            self.0
                .call(move |s| {
                    Box::pin(async move {
                        match s.delete(&p).await {
                            Err(object_store::Error::NotFound { .. }) => Ok(()),
                            r => r,
                        }
                    })
                })
                .await
        })
    }

    fn list(&self, prefix: &str) -> StoreFuture<'_, Vec<ObjectInfo>> {
        let p = path(prefix.trim_end_matches('/'));
        Box::pin(async move {
            let p = p?;
            self.0
                .call(move |s| {
                    Box::pin(async move {
                        let metas: Vec<_> = s.list(Some(&p)).try_collect().await?;
                        Ok(metas
                            .into_iter()
                            .map(|m| ObjectInfo {
                                key: m.location.to_string(),
                                size: m.size,
                            })
                            .collect())
                    })
                })
                .await
        })
    }
}

/// A multipart upload in progress (each part the engine's 8 MiB upload part; S3's minimum
/// is 5 MiB but for the last).
struct S3Upload {
    client: S3Client,
    up: Option<Box<dyn MultipartUpload>>,
    /// Parts on their way: up to `PARTS_IN_FLIGHT`, so that one upload keeps several PUTs
    /// busy instead of waiting out each one's round trip.
    in_flight: std::collections::VecDeque<Answer<()>>,
}

/// Parts of one upload sent at once (8 MiB each: 32 MiB of a segment in memory at most).
const PARTS_IN_FLIGHT: usize = 4;

impl Upload for S3Upload {
    fn write(&mut self, part: Bytes) -> StoreFuture<'_, ()> {
        let fut = self
            .up
            .as_mut()
            .map(|up| up.put_part(PutPayload::from_bytes(part)));
        Box::pin(async move {
            let fut = fut.ok_or_else(|| Error::Remote("upload already finished".into()))?;
            let rx = self.client.submit(move |_| fut)?;
            self.in_flight.push_back(rx);
            if self.in_flight.len() >= PARTS_IN_FLIGHT {
                if let Some(oldest) = self.in_flight.pop_front() {
                    answer(oldest).await?;
                }
            }
            Ok(())
        })
    }

    fn finish(mut self: Box<Self>) -> StoreFuture<'static, ()> {
        Box::pin(async move {
            while let Some(rx) = self.in_flight.pop_front() {
                answer(rx).await?;
            }
            let mut up = self
                .up
                .take()
                .ok_or_else(|| Error::Remote("upload already finished".into()))?;
            self.client
                .call(move |_| Box::pin(async move { up.complete().await.map(|_| ()) }))
                .await
        })
    }

    fn abort(mut self: Box<Self>) -> StoreFuture<'static, ()> {
        Box::pin(async move {
            let Some(mut up) = self.up.take() else {
                return Ok(());
            };
            self.client
                .call(move |_| Box::pin(async move { up.abort().await }))
                .await
        })
    }
}
