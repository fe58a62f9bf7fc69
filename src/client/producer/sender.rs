//! The producer's sending side: sealing batches, the sender task, one Produce request per
//! broker with bounded requests in flight, retries, and completing the deliveries.

use super::*;

pub(super) fn now_ms() -> i64 {
    SystemTime::now()
        .duration_since(UNIX_EPOCH)
        .map_or(0, |d| d.as_millis() as i64)
}

impl Inner {
    /// Closes an open batch and queues it for the sender.
    pub(super) fn seal(&self, topic: &str, partition: i32, mut batch: OpenBatch) {
        let data = batch
            .builder
            .take()
            .expect("open batches hold a builder")
            .build();
        self.ready.borrow_mut().push_back(ReadyBatch {
            tp: TopicPartition::new(topic, partition),
            data,
            bytes: batch.bytes,
            attempts: 0,
            not_before: Instant::now(),
            done: batch.done,
        });
        self.wake.notify();
    }

    /// Seals batches whose linger expired (all of them when flushing or closing); returns
    /// the earliest time an open batch will expire.
    pub(super) fn seal_lingered(&self, now: Instant) -> Option<Instant> {
        let all = self.flushing.get() > 0 || self.closed.get() || self.config.linger.is_zero();
        let mut next: Option<Instant> = None;
        let mut expired = Vec::new();
        {
            let mut open = self.open.borrow_mut();
            for (topic, slots) in open.iter_mut() {
                for (p, slot) in slots.iter_mut().enumerate() {
                    let Some(b) = slot else { continue };
                    let deadline = b.created + self.config.linger;
                    if all || deadline <= now {
                        expired.push((topic.clone(), p as i32, slot.take().expect("some")));
                    } else {
                        next = Some(next.map_or(deadline, |n| n.min(deadline)));
                    }
                }
            }
        }
        for (topic, p, b) in expired {
            self.seal(&topic, p, b);
        }
        next
    }

    pub(super) fn resolve(&self, batch: ReadyBatch, result: Result<i64>) {
        batch.done.resolve(result);
        self.buffered_bytes
            .set(self.buffered_bytes.get().saturating_sub(batch.bytes));
        self.unresolved_batches
            .set(self.unresolved_batches.get().saturating_sub(1));
        self.space.notify();
        self.progress.notify();
    }

    /// Retries a failed batch if the error allows and attempts remain; else fails it.
    pub(super) fn fail_or_retry(&self, mut batch: ReadyBatch, err: Error) {
        if err.invalidates_metadata() {
            self.cluster.invalidate(&batch.tp.topic);
        }
        if err.is_retriable() && batch.attempts < self.config.retries && !self.closed.get() {
            batch.attempts += 1;
            batch.not_before = Instant::now() + self.config.retry_backoff;
            self.ready.borrow_mut().push_front(batch);
            self.wake.notify();
        } else {
            self.resolve(batch, Err(err));
        }
    }

    pub(super) fn permits(&self, node: i32) -> Rc<Semaphore> {
        self.in_flight
            .borrow_mut()
            .entry(node)
            .or_insert_with(|| Rc::new(Semaphore::new(self.config.max_in_flight.max(1) as u64)))
            .clone()
    }
}

pub(super) async fn sender_loop(inner: Rc<Inner>) {
    loop {
        let now = Instant::now();
        let mut next = inner.seal_lingered(now);
        let mut due = Vec::new();
        {
            let mut ready = inner.ready.borrow_mut();
            let mut later = VecDeque::new();
            while let Some(b) = ready.pop_front() {
                if b.not_before <= now {
                    due.push(b);
                } else {
                    next = Some(next.map_or(b.not_before, |n| n.min(b.not_before)));
                    later.push_back(b);
                }
            }
            *ready = later;
        }
        if !due.is_empty() {
            send_batches(&inner, due).await;
            continue;
        }
        if inner.closed.get() && inner.unresolved_batches.get() == 0 {
            break;
        }
        if inner.closed.get() && Rc::strong_count(&inner) == 1 {
            // The producer is gone and nothing can be retried any more: fail what is left.
            break;
        }
        match next {
            Some(t) => {
                let wait = t.saturating_duration_since(Instant::now());
                futures_lite::future::or(inner.wake.wait(), glommio::timer::sleep(wait)).await;
            }
            None => inner.wake.wait().await,
        }
    }
    inner.sender_running.set(false);
    inner.sender_done.notify();
}

/// Groups due batches by leader and writes one Produce request per leader.
pub(super) async fn send_batches(inner: &Rc<Inner>, due: Vec<ReadyBatch>) {
    // A Produce request carries at most one batch per partition: later batches of a
    // partition wait (in order) for the next request.
    let mut this_round: Vec<ReadyBatch> = Vec::with_capacity(due.len());
    let mut deferred: Vec<ReadyBatch> = Vec::new();
    for b in due {
        if this_round.iter().any(|x| x.tp == b.tp) || deferred.iter().any(|x| x.tp == b.tp) {
            deferred.push(b);
        } else {
            this_round.push(b);
        }
    }
    if !deferred.is_empty() {
        let mut ready = inner.ready.borrow_mut();
        for b in deferred.into_iter().rev() {
            ready.push_front(b);
        }
        inner.wake.notify();
    }
    let mut by_leader: HashMap<i32, Vec<ReadyBatch>> = HashMap::new();
    for b in this_round {
        match inner.cluster.leader(&b.tp).await {
            Ok(node) => by_leader.entry(node).or_default().push(b),
            Err(e) => inner.fail_or_retry(b, e),
        }
    }
    for (node, batches) in by_leader {
        let conn = match inner.cluster.connection(node).await {
            Ok(c) => c,
            Err(e) => {
                batches
                    .into_iter()
                    .for_each(|b| inner.fail_or_retry(b, e.clone()));
                continue;
            }
        };
        let permit = match inner.permits(node).acquire_static_permit(1).await {
            Ok(p) => p,
            Err(_) => {
                batches
                    .into_iter()
                    .for_each(|b| inner.resolve(b, Err(Error::Closed)));
                continue;
            }
        };
        produce(inner, &conn, batches, permit).await;
    }
}

pub(super) async fn produce(
    inner: &Rc<Inner>,
    conn: &Connection,
    batches: Vec<ReadyBatch>,
    permit: StaticPermit,
) {
    let version = match conn.version::<ProduceRequest>(PRODUCE_VERSION_MAX) {
        Ok(v) => v,
        Err(e) => {
            batches
                .into_iter()
                .for_each(|b| inner.resolve(b, Err(e.clone())));
            return;
        }
    };
    let mut topics: Vec<TopicProduceData> = Vec::new();
    for b in &batches {
        let pd = PartitionProduceData::default()
            .with_index(b.tp.partition)
            .with_records(Some(b.data.clone()));
        match topics.iter_mut().find(|t| t.name.0.as_str() == b.tp.topic) {
            Some(t) => t.partition_data.push(pd),
            None => topics.push(
                TopicProduceData::default()
                    .with_name(TopicName(StrBytes::from_string(b.tp.topic.clone())))
                    .with_partition_data(vec![pd]),
            ),
        }
    }
    let req = ProduceRequest::default()
        .with_transactional_id(None)
        .with_acks(inner.config.acks.code())
        .with_timeout_ms(
            inner
                .config
                .request_timeout
                .as_millis()
                .min(i32::MAX as u128) as i32,
        )
        .with_topic_data(topics);
    if inner.config.acks == Acks::None {
        let res = conn.send_oneway(&req, version).await;
        drop(permit);
        for b in batches {
            match &res {
                Ok(()) => inner.resolve(b, Ok(-1)),
                Err(e) => inner.fail_or_retry(b, e.clone()),
            }
        }
        return;
    }
    match conn.send(&req, version).await {
        Ok(fut) => {
            let inner = inner.clone();
            glommio::spawn_local(async move {
                let timeout = inner.config.request_timeout;
                let res = with_timeout(fut, timeout).await;
                drop(permit);
                complete(&inner, batches, res);
            })
            .detach();
        }
        Err(e) => {
            drop(permit);
            batches
                .into_iter()
                .for_each(|b| inner.fail_or_retry(b, e.clone()));
        }
    }
}

pub(super) async fn with_timeout<T>(fut: ResponseFuture<T>, timeout: Duration) -> Result<T>
where
    T: kafka_protocol::protocol::Decodable + kafka_protocol::protocol::HeaderVersion,
{
    futures_lite::future::or(fut, async {
        glommio::timer::sleep(timeout).await;
        Err(Error::Timeout { op: "produce" })
    })
    .await
}

pub(super) fn complete(inner: &Inner, batches: Vec<ReadyBatch>, res: Result<ProduceResponse>) {
    let resp = match res {
        Ok(r) => r,
        Err(e) => {
            batches
                .into_iter()
                .for_each(|b| inner.fail_or_retry(b, e.clone()));
            return;
        }
    };
    for b in batches {
        let part = resp
            .responses
            .iter()
            .filter(|t| t.name.0.as_str() == b.tp.topic)
            .flat_map(|t| t.partition_responses.iter())
            .find(|p| p.index == b.tp.partition);
        match part {
            None => {
                let e = Error::Protocol(format!("Produce response lacks {}", b.tp));
                inner.resolve(b, Err(e));
            }
            Some(p) if p.error_code == 0 => {
                let base = p.base_offset;
                inner.resolve(b, Ok(base));
            }
            Some(p) => {
                let e = Error::Broker {
                    code: p.error_code,
                    context: format!("produce to {}", b.tp),
                };
                inner.fail_or_retry(b, e);
            }
        }
    }
}
