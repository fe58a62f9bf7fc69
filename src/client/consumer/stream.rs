//! The consumer's streaming-fetch path: pushed batches from an open stream, and the credit
//! it gives back as batches are consumed (docs/streaming-fetch.md).

use super::*;

impl Consumer {
    /// Streaming fetch: `None` when it cannot be used (then `config.streaming` is turned off
    /// if the broker does not offer it, and the caller falls back to long polls).
    pub(super) async fn poll_stream(&mut self) -> Option<Result<Vec<FetchedBatch>>> {
        use crate::protocol::stream_fetch::{EndReason, StreamMsg, StreamOp, StreamPartition};
        if self.positions.is_empty() {
            return Some(Err(Error::Invalid("no partitions assigned".to_string())));
        }
        if self.stream_stale {
            self.stream_stale = false;
            if let Some(old) = self.stream.take() {
                self.fetches_sent += 1;
                let _ = old
                    .conn
                    .stream_op(&StreamOp::Cancel {
                        stream_id: old.stream_id,
                    })
                    .await;
            }
        }
        if self.stream.is_none() {
            let mut node = None;
            let mut partitions = Vec::new();
            for (tp, pos) in &self.positions {
                let leader = match self.cluster.leader(tp).await {
                    Ok(l) => l,
                    Err(e) => return Some(Err(e)),
                };
                if node.is_some_and(|n| n != leader) {
                    return None; // several leaders: long polls (one per broker) instead
                }
                node = Some(leader);
                partitions.push(StreamPartition {
                    topic: tp.topic.clone(),
                    partition: tp.partition,
                    offset: (*pos)?,
                });
            }
            let conn = match self.cluster.connection(node?).await {
                Ok(c) => c,
                Err(e) => return Some(Err(e)),
            };
            if !conn.supports_streaming() {
                self.config.streaming = false;
                return None;
            }
            let stream_id = self.next_stream_id;
            self.next_stream_id = self.next_stream_id.wrapping_add(1).max(1);
            let op = StreamOp::Open {
                stream_id,
                credit: self.config.stream_credit,
                max_push_bytes: self.config.stream_max_push_bytes,
                deadline_ms: self
                    .config
                    .stream_deadline
                    .as_millis()
                    .min(i32::MAX as u128) as i32,
                partitions,
            };
            let rx = match conn.open_stream(&op).await {
                Ok(rx) => rx,
                Err(e) => return Some(Err(e)),
            };
            self.fetches_sent += 1;
            self.stream = Some(ActiveStream {
                conn,
                stream_id,
                rx,
                drained: 0,
            });
        }
        let deadline = std::time::Instant::now() + self.config.max_wait;
        loop {
            let left = deadline.saturating_duration_since(std::time::Instant::now());
            let st = self.stream.as_ref()?;
            let got = futures_lite::future::or(async { Some(st.rx.recv().await) }, async {
                glommio::timer::sleep(left).await;
                None
            })
            .await;
            let body = match got {
                None => {
                    // Nothing within max_wait. The broker may be holding a batch larger
                    // than the credit it has left: give back whatever was drained.
                    if let Err(e) = self.give_back_credit().await {
                        return Some(Err(e));
                    }
                    return Some(Ok(Vec::new()));
                }
                Some(None) => {
                    self.stream = None;
                    return Some(Err(Error::Closed));
                }
                Some(Some(b)) => b,
            };
            let msg = match StreamMsg::decode(body) {
                Ok(m) => m,
                Err(e) => {
                    self.stream = None;
                    return Some(Err(Error::Protocol(e.to_string())));
                }
            };
            match msg {
                StreamMsg::Ack { error: 0, .. } => continue,
                StreamMsg::Ack { error, .. } => {
                    // Refused: this consumer uses long polls from now on.
                    self.stream = None;
                    self.config.streaming = false;
                    tracing::debug!(error, "streaming fetch refused; using long polls");
                    return None;
                }
                StreamMsg::End { reason, error, .. } => {
                    self.stream = None;
                    if reason == EndReason::CreditSpent
                        && error == ResponseError::MessageTooLarge.code()
                    {
                        // A batch larger than our whole credit: the next stream gets more.
                        let c = &mut self.config;
                        c.stream_credit = c.stream_credit.saturating_mul(2);
                        c.stream_max_push_bytes = c.stream_max_push_bytes.saturating_mul(2);
                        return Some(Ok(Vec::new()));
                    }
                    if error != 0 && reason == EndReason::Error {
                        return Some(Err(Error::Broker {
                            code: error,
                            context: "streaming fetch".to_string(),
                        }));
                    }
                    return Some(Ok(Vec::new()));
                }
                StreamMsg::Data {
                    partitions,
                    credit_left,
                    ..
                } => {
                    self.pushes += 1;
                    let mut out = Vec::new();
                    let mut bytes = 0usize;
                    let mut first_error = None;
                    for p in partitions {
                        let tp = TopicPartition::new(p.topic.as_str(), p.partition);
                        bytes += p.records.len();
                        if p.error != 0 {
                            first_error.get_or_insert(Error::Broker {
                                code: p.error,
                                context: format!("streaming fetch of {tp}"),
                            });
                            continue;
                        }
                        let Some(Some(pos)) = self.positions.get(&tp).copied() else {
                            continue;
                        };
                        self.high_watermarks.insert(tp.clone(), p.high_watermark);
                        let mut next = pos;
                        let mut at = 0usize;
                        for (header, _) in Batches::new(&p.records) {
                            let len = header.total_bytes();
                            let start = at;
                            at += len;
                            if header.last_offset() < next {
                                continue;
                            }
                            if !header.is_control() {
                                out.push(fetched(
                                    &tp,
                                    header,
                                    p.records.slice(start..start + len),
                                    next,
                                    p.high_watermark,
                                ));
                            }
                            next = header.last_offset() + 1;
                        }
                        self.positions.insert(tp, Some(next));
                    }
                    // The buffer drains as poll hands the data over: the room goes back to
                    // the broker once half the credit is drained (one request per half
                    // window, not one per push).
                    let half = i64::from(self.config.stream_credit / 2).max(1);
                    let low = credit_left < self.config.stream_max_push_bytes;
                    let give = self.stream.as_mut().is_some_and(|st| {
                        st.drained += bytes as i64;
                        // Also when the broker is nearly out of credit (large batches).
                        st.drained >= half || low
                    });
                    if give {
                        if let Err(e) = self.give_back_credit().await {
                            return Some(Err(e));
                        }
                    }
                    if first_error.is_some() {
                        // The broker took the failed partition out of the stream.
                        self.stream_stale = true;
                    }
                    return Some(match first_error {
                        Some(e) if out.is_empty() => Err(e),
                        _ => Ok(out),
                    });
                }
            }
        }
    }

    /// Sends the stream a CREDIT for what the application was handed since the last one.
    pub(super) async fn give_back_credit(&mut self) -> Result<()> {
        let Some(st) = self.stream.as_mut() else {
            return Ok(());
        };
        if st.drained <= 0 {
            return Ok(());
        }
        let add = st.drained.min(i64::from(i32::MAX)) as i32;
        st.drained -= i64::from(add);
        self.fetches_sent += 1;
        let op = crate::protocol::stream_fetch::StreamOp::Credit {
            stream_id: st.stream_id,
            add,
        };
        if let Err(e) = st.conn.stream_op(&op).await {
            self.stream = None;
            return Err(e);
        }
        Ok(())
    }
}
