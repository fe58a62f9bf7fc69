//! What the client knows about the cluster: brokers, topic partitions and their leaders
//! (from Metadata), and one pipelined connection per broker.

use std::cell::RefCell;
use std::collections::HashMap;
use std::rc::Rc;
use std::time::Duration;

use kafka_protocol::messages::create_topics_request::CreatableTopic;
use kafka_protocol::messages::list_offsets_request::{ListOffsetsPartition, ListOffsetsTopic};
use kafka_protocol::messages::metadata_request::MetadataRequestTopic;
use kafka_protocol::messages::{
    CreateTopicsRequest, ListOffsetsRequest, MetadataRequest, MetadataResponse, TopicName,
};
use kafka_protocol::protocol::StrBytes;
use kafka_protocol::ResponseError;

use super::connection::Connection;
use super::error::{Error, Result};
use super::TopicPartition;

/// Highest API versions this client speaks (newer Fetch/Produce versions name topics by id).
pub(crate) const METADATA_VERSION_MAX: i16 = 12;
pub(crate) const PRODUCE_VERSION_MAX: i16 = 11;
pub(crate) const FETCH_VERSION_MAX: i16 = 12;
pub(crate) const LIST_OFFSETS_VERSION_MAX: i16 = 7;
pub(crate) const CREATE_TOPICS_VERSION_MAX: i16 = 5;

#[derive(Debug, Clone)]
pub struct ClusterConfig {
    /// `host:port` of brokers to ask for metadata first.
    pub bootstrap: Vec<String>,
    pub client_id: String,
    /// Whether Metadata requests may create missing topics (broker permitting).
    pub allow_auto_create_topics: bool,
    /// How often and how long apart a metadata lookup is retried on retriable errors.
    pub metadata_retries: u32,
    pub retry_backoff: Duration,
}

impl ClusterConfig {
    pub fn new(bootstrap: impl Into<String>) -> Self {
        ClusterConfig {
            bootstrap: vec![bootstrap.into()],
            client_id: "weir-client".to_string(),
            allow_auto_create_topics: true,
            metadata_retries: 5,
            retry_backoff: Duration::from_millis(100),
        }
    }
}

#[derive(Debug, Clone)]
struct TopicMeta {
    /// Leader broker id per partition index (-1: no leader).
    leaders: Vec<i32>,
}

/// Brokers, topics and connections, shared by producers and consumers on one executor.
pub struct Cluster {
    config: ClusterConfig,
    brokers: RefCell<HashMap<i32, String>>,
    topics: RefCell<HashMap<String, TopicMeta>>,
    connections: RefCell<HashMap<i32, Connection>>,
    bootstrap: RefCell<Option<Connection>>,
}

impl Cluster {
    /// Connects to the first reachable bootstrap broker and loads the broker list.
    pub async fn connect(config: ClusterConfig) -> Result<Rc<Cluster>> {
        let cluster = Rc::new(Cluster {
            config,
            brokers: RefCell::new(HashMap::new()),
            topics: RefCell::new(HashMap::new()),
            connections: RefCell::new(HashMap::new()),
            bootstrap: RefCell::new(None),
        });
        cluster.metadata_conn().await?;
        cluster.refresh(&[]).await?;
        Ok(cluster)
    }

    pub fn config(&self) -> &ClusterConfig {
        &self.config
    }

    async fn metadata_conn(&self) -> Result<Connection> {
        if let Some(c) = self.bootstrap.borrow().as_ref().filter(|c| !c.is_failed()) {
            return Ok(c.clone());
        }
        let mut last = Error::Invalid("no bootstrap brokers".to_string());
        let mut candidates = self.config.bootstrap.clone();
        candidates.extend(self.brokers.borrow().values().cloned());
        for addr in candidates {
            match Connection::connect(&addr, &self.config.client_id).await {
                Ok(c) => {
                    *self.bootstrap.borrow_mut() = Some(c.clone());
                    return Ok(c);
                }
                Err(e) => last = e,
            }
        }
        Err(last)
    }

    /// Refreshes brokers and the given topics (none: brokers only). Topic-level errors are
    /// recorded by leaving the topic out; see [`Cluster::partitions`].
    async fn refresh(&self, topics: &[&str]) -> Result<MetadataResponse> {
        let conn = self.metadata_conn().await?;
        let version = conn.version::<MetadataRequest>(METADATA_VERSION_MAX)?;
        let req = MetadataRequest::default()
            .with_topics(Some(
                topics
                    .iter()
                    .map(|t| {
                        MetadataRequestTopic::default()
                            .with_name(Some(TopicName(StrBytes::from_string(t.to_string()))))
                    })
                    .collect(),
            ))
            .with_allow_auto_topic_creation(self.config.allow_auto_create_topics);
        let resp = conn.send(&req, version).await?.await?;
        {
            let mut brokers = self.brokers.borrow_mut();
            brokers.clear();
            for b in &resp.brokers {
                brokers.insert(b.node_id.0, format!("{}:{}", b.host.as_str(), b.port));
            }
        }
        let mut known = self.topics.borrow_mut();
        for t in &resp.topics {
            let Some(name) = t.name.as_ref() else {
                continue;
            };
            if t.error_code != 0 || t.partitions.is_empty() {
                known.remove(name.0.as_str());
                continue;
            }
            let n = t
                .partitions
                .iter()
                .map(|p| p.partition_index + 1)
                .max()
                .unwrap_or(0);
            let mut leaders = vec![-1; n.max(0) as usize];
            for p in &t.partitions {
                if p.partition_index >= 0 {
                    leaders[p.partition_index as usize] =
                        if p.error_code == 0 { p.leader_id.0 } else { -1 };
                }
            }
            known.insert(name.0.as_str().to_string(), TopicMeta { leaders });
        }
        Ok(resp)
    }

    /// `host:port` of broker `node_id`, as Metadata advertised it.
    pub fn broker_addr(&self, node_id: i32) -> Option<String> {
        self.brokers.borrow().get(&node_id).cloned()
    }

    /// Forgets what we know of `topic` so the next lookup asks the broker.
    pub fn invalidate(&self, topic: &str) {
        self.topics.borrow_mut().remove(topic);
    }

    /// The number of partitions of `topic`, asking the broker (with bounded retries of
    /// retriable errors such as UNKNOWN_TOPIC_OR_PARTITION while a topic is created).
    pub async fn partitions(&self, topic: &str) -> Result<usize> {
        let mut attempt = 0;
        loop {
            if let Some(t) = self.topics.borrow().get(topic) {
                return Ok(t.leaders.len());
            }
            let resp = self.refresh(&[topic]).await?;
            if self.topics.borrow().contains_key(topic) {
                continue;
            }
            let code = resp
                .topics
                .iter()
                .find(|t| t.name.as_ref().is_some_and(|n| n.0.as_str() == topic))
                .map(|t| t.error_code)
                .unwrap_or(ResponseError::UnknownTopicOrPartition.code());
            let code = if code == 0 {
                ResponseError::LeaderNotAvailable.code()
            } else {
                code
            };
            let err = Error::Broker {
                code,
                context: format!("metadata for topic {topic}"),
            };
            attempt += 1;
            if !err.is_retriable() || attempt > self.config.metadata_retries {
                return Err(err);
            }
            glommio::timer::sleep(self.config.retry_backoff).await;
        }
    }

    /// The leader broker id of a partition, looking it up if needed.
    pub async fn leader(&self, tp: &TopicPartition) -> Result<i32> {
        let mut attempt = 0;
        loop {
            let n = self.partitions(&tp.topic).await?;
            if tp.partition < 0 || tp.partition as usize >= n {
                return Err(Error::Invalid(format!("{tp}: topic has {n} partitions")));
            }
            let leader = self.topics.borrow()[&tp.topic].leaders[tp.partition as usize];
            if leader >= 0 {
                return Ok(leader);
            }
            attempt += 1;
            if attempt > self.config.metadata_retries {
                return Err(Error::Broker {
                    code: ResponseError::LeaderNotAvailable.code(),
                    context: tp.to_string(),
                });
            }
            self.invalidate(&tp.topic);
            glommio::timer::sleep(self.config.retry_backoff).await;
        }
    }

    /// The connection to broker `node_id`, connecting (again) if needed.
    pub async fn connection(&self, node_id: i32) -> Result<Connection> {
        if let Some(c) = self.connections.borrow().get(&node_id) {
            if !c.is_failed() {
                return Ok(c.clone());
            }
        }
        let addr = match self.brokers.borrow().get(&node_id) {
            Some(a) => a.clone(),
            None => {
                return Err(Error::Invalid(format!("unknown broker id {node_id}")));
            }
        };
        let conn = Connection::connect(&addr, &self.config.client_id).await?;
        let mut conns = self.connections.borrow_mut();
        match conns.get(&node_id) {
            // Another task connected while we did: share its connection.
            Some(c) if !c.is_failed() => Ok(c.clone()),
            _ => {
                conns.insert(node_id, conn.clone());
                Ok(conn)
            }
        }
    }

    /// ListOffsets for one partition: `timestamp` -2 is the log start, -1 the log end.
    pub async fn list_offset(&self, tp: &TopicPartition, timestamp: i64) -> Result<i64> {
        let leader = self.leader(tp).await?;
        let conn = self.connection(leader).await?;
        let version = conn.version::<ListOffsetsRequest>(LIST_OFFSETS_VERSION_MAX)?;
        let req = ListOffsetsRequest::default()
            .with_replica_id((-1).into())
            .with_topics(vec![ListOffsetsTopic::default()
                .with_name(TopicName(StrBytes::from_string(tp.topic.clone())))
                .with_partitions(vec![ListOffsetsPartition::default()
                    .with_partition_index(tp.partition)
                    .with_current_leader_epoch(-1)
                    .with_timestamp(timestamp)])]);
        let resp = conn.send(&req, version).await?.await?;
        let p = resp
            .topics
            .iter()
            .flat_map(|t| t.partitions.iter())
            .find(|p| p.partition_index == tp.partition)
            .ok_or_else(|| Error::Protocol(format!("ListOffsets response lacks {tp}")))?;
        Error::check(p.error_code, || format!("ListOffsets {tp}"))?;
        Ok(p.offset)
    }

    /// Creates a topic with `partitions` partitions (replication factor 1) on the
    /// controller; an existing topic is not an error. Returns whether it was created.
    pub async fn create_topic(&self, topic: &str, partitions: i32) -> Result<bool> {
        let conn = self.metadata_conn().await?;
        let version = conn.version::<CreateTopicsRequest>(CREATE_TOPICS_VERSION_MAX)?;
        let req = CreateTopicsRequest::default()
            .with_topics(vec![CreatableTopic::default()
                .with_name(TopicName(StrBytes::from_string(topic.to_string())))
                .with_num_partitions(partitions)
                .with_replication_factor(1)])
            .with_timeout_ms(30_000);
        let resp = conn.send(&req, version).await?.await?;
        let code = resp
            .topics
            .iter()
            .find(|t| t.name.0.as_str() == topic)
            .map_or(0, |t| t.error_code);
        self.invalidate(topic);
        if code == ResponseError::TopicAlreadyExists.code() {
            return Ok(false);
        }
        Error::check(code, || format!("create topic {topic}"))?;
        Ok(true)
    }
}
