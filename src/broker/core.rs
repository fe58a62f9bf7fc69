//! One core's life: its start-up order, its listeners, and its part of the shutdown.

use std::sync::atomic::Ordering;
use std::sync::Arc;
use std::time::{Duration, Instant};

use glommio::channels::channel_mesh::MeshBuilder;
use tracing::info;
use weir::config::BrokerConfig;
use weir::metadata::Metadata;

use super::shard::{Global, ReqMsg, RespMsg, Shard};
use super::{metrics_endpoint, server};

/// How often an idle core's reactor wakes up anyway (see `core_main`). Each trip costs the
/// kernel a walk of io_uring's poll-cancel hash (`io_poll_find`), which holds one entry per
/// socket waiting for data: with 10,000 parked fetches a 20 ms tick cost 3.3-3.7% of a core,
/// 100 ms costs 0.9-1.1% (`weir bench idle-polls`, docs/bench.md). A lost wake-up is rare
/// (glommio#261): 100 ms bounds it.
/// A core's start-up steps, as `Global::steps` records them.
const STARTUP_STEPS: [&str; 6] = [
    "priming direct I/O and joining the meshes",
    "opening its partitions",
    "opening its group offsets logs",
    "opening its transaction logs",
    "starting its tasks and binding its listeners",
    "bound",
];

/// "core 1 still opening its partitions, ...": the cores that have not bound yet, for a
/// start-up that gives up waiting for them.
fn laggards(global: &Global) -> String {
    let at = |c: usize| global.steps[c].load(Ordering::Relaxed);
    let behind: Vec<String> = (0..global.steps.len())
        .filter(|&c| at(c) + 1 < STARTUP_STEPS.len())
        .map(|c| format!("core {c} still {}", STARTUP_STEPS[at(c)]))
        .collect();
    behind.join(", ")
}

const REACTOR_KEEPALIVE: Duration = Duration::from_millis(100);

pub(super) async fn core_main(
    cores: usize,
    config: Arc<BrokerConfig>,
    global: Arc<Global>,
    meta: Arc<Metadata>,
    (req_mesh, resp_mesh): (
        MeshBuilder<ReqMsg, glommio::channels::channel_mesh::Full>,
        MeshBuilder<RespMsg, glommio::channels::channel_mesh::Full>,
    ),
    // Each listener's resolved address (as in `config.listeners`), and the TLS
    // configuration of SSL listeners.
    (listens, tls): (
        Vec<std::net::SocketAddr>,
        Option<Arc<super::tls::TlsSource>>,
    ),
    // The socket the signal thread wakes this core with, (core 0 of a broker in a cluster)
    // what its metadata Raft node starts from, and (every core in a cluster) what its links
    // to the peers' cores need.
    (watch, cluster, links): (
        std::os::unix::net::UnixStream,
        Option<super::controller::Boot>,
        Option<super::peer::links::LinkBoot>,
    ),
) -> Result<(), String> {
    // glommio's shared channels (the meshes, and joining them) wake a sleeping executor
    // through an eventfd and can lose that wake-up (glommio#261): both cores then sleep in
    // io_uring_enter with nothing to time them out (seen as a start-up hang in ~1% of
    // starts). A periodic timer bounds any lost wake-up to one tick: each reactor trip
    // also polls the shared channels.
    glommio::spawn_local(async {
        loop {
            glommio::timer::sleep(REACTOR_KEEPALIVE).await;
        }
    })
    .detach();
    // Must precede every other DMA open on this thread (glommio#605).
    weir_storage::io::prime_dma_probe(&config.data_dir)
        .await
        .map_err(|e| format!("priming direct I/O in {}: {e}", config.data_dir.display()))?;
    weir_storage::io::set_open_file_limit(super::open_segment_files_per_core(&config, cores));
    let (shard, receivers) = if cores > 1 {
        let (req_tx, req_rx) = req_mesh
            .join()
            .await
            .map_err(|_| "joining the request mesh")?;
        let (resp_tx, resp_rx) = resp_mesh
            .join()
            .await
            .map_err(|_| "joining the reply mesh")?;
        let id = req_tx.peer_id();
        assert_eq!(
            id,
            resp_tx.peer_id(),
            "both meshes order peers by executor id"
        );
        let shard = Shard::new(id, cores, config.clone(), meta, Some(req_tx), Some(resp_tx));
        (shard, Some((req_rx, resp_rx)))
    } else {
        (Shard::new(0, 1, config.clone(), meta, None, None), None)
    };
    if let Some((req_rx, resp_rx)) = receivers {
        shard.start_mesh(req_rx, resp_rx);
    }
    if let Some(boot) = links {
        let router = shard.replica_host().clone();
        let links = super::peer::links::Links::new(boot, Box::new(move |m| router.raft_in(m)));
        shard.replica_host().set_links(links);
    }
    *shard.metadata_current.borrow_mut() = global.metadata_current.clone();
    shard.replica_host().set_rejoin(global.rejoin.clone());
    let id = shard.id;
    let step = |s: usize| global.steps[id].store(s, Ordering::Relaxed);
    step(1);
    shard.open_owned().await;
    step(2);
    shard.open_group_coordinator().await?;
    step(3);
    shard.open_txns().await?;
    step(4);
    let wheel_queue = glommio::executor().create_task_queue(
        glommio::Shares::default(),
        glommio::Latency::Matters(Duration::from_millis(2)),
        "fetch-wheel",
    );
    glommio::spawn_local_into(shard.clone().run_wheel(), wheel_queue)
        .map_err(|e| e.to_string())?
        .detach();
    glommio::spawn_local(shard.clone().run_retention()).detach();
    glommio::spawn_local(shard.clone().run_tiering()).detach();
    super::shard::spawn_cleaner(shard.clone());

    // Core 0 binds each listener first (port 0 → the kernel picks); the others bind the same
    // ports.
    let mut listeners = Vec::with_capacity(listens.len());
    for (li, &listen) in listens.iter().enumerate() {
        let l = if id == 0 {
            let l = glommio::net::TcpListener::bind(listen)
                .map_err(|e| format!("binding {listen}: {e}"))?;
            let port = l.local_addr().map_err(|e| e.to_string())?.port();
            global.ports[li].store(port, Ordering::SeqCst);
            l
        } else {
            let started = Instant::now();
            while global.ports[li].load(Ordering::SeqCst) == 0 {
                if started.elapsed() > Duration::from_secs(30) {
                    let at = global.steps[0].load(Ordering::Relaxed);
                    return Err(format!(
                        "core 0 never bound its listener (still {})",
                        STARTUP_STEPS.get(at).unwrap_or(&"?")
                    ));
                }
                glommio::timer::sleep(Duration::from_millis(1)).await;
            }
            let addr =
                std::net::SocketAddr::new(listen.ip(), global.ports[li].load(Ordering::SeqCst));
            glommio::net::TcpListener::bind(addr).map_err(|e| format!("binding {addr}: {e}"))?
        };
        listeners.push(l);
    }
    // Core 0 serves the metrics endpoint (it asks every core over the mesh).
    if id == 0 {
        if let Some(m) = &config.metrics_listen {
            let addr: std::net::SocketAddr =
                m.parse().map_err(|e| format!("metrics.listen {m}: {e}"))?;
            let l = glommio::net::TcpListener::bind(addr)
                .map_err(|e| format!("binding metrics.listen {addr}: {e}"))?;
            let bound = l.local_addr().map_err(|e| e.to_string())?;
            info!(addr = %bound, "metrics endpoint");
            println!("metrics on http://{bound}/metrics");
            glommio::spawn_local(metrics_endpoint::serve(shard.clone(), l)).detach();
        }
    }
    // listeners.per.core: this core's own port per listener (its port + 1 + core, or
    // kernel-picked).
    let mut core_listeners = Vec::new();
    if config.listeners_per_core {
        for (li, &listen) in listens.iter().enumerate() {
            let port = match listen.port() {
                0 => 0,
                p => u16::try_from(usize::from(p) + 1 + id).map_err(|_| {
                    format!("listeners.per.core: port {p} + 1 + {id} is past 65535")
                })?,
            };
            let addr = std::net::SocketAddr::new(listen.ip(), port);
            let l = glommio::net::TcpListener::bind(addr)
                .map_err(|e| format!("binding core {id}'s listener {addr}: {e}"))?;
            let port = l.local_addr().map_err(|e| e.to_string())?.port();
            global.core_ports[li * cores + id].store(port, Ordering::SeqCst);
            core_listeners.push(l);
        }
    }
    let bound = listeners
        .iter()
        .map(|l| l.local_addr().map_err(|e| e.to_string()))
        .collect::<Result<Vec<_>, _>>()?;
    *shard.advertised.borrow_mut() = (0..bound.len())
        .map(|li| advertised(config.advertised_for(li), &bound[li]))
        .collect();
    step(STARTUP_STEPS.len() - 1);
    if global.bound.fetch_add(1, Ordering::SeqCst) + 1 == cores {
        for (l, addr) in config.listeners.iter().zip(&bound) {
            server::log_listener(l.protocol.name(), addr);
        }
        server::log_listening(&bound[0]);
    }
    // Each core terminates the TLS of its own connections, with its own session cache.
    let acceptor = tls.map(|t| std::rc::Rc::new(super::tls::CoreTls::new(t)));
    let endpoint = |li: usize, kind: server::Listener| server::Endpoint {
        listener: li,
        kind,
        tls: config.listeners[li]
            .protocol
            .tls()
            .then(|| acceptor.clone())
            .flatten(),
        sasl: config.listeners[li].protocol.sasl(),
    };
    if !core_listeners.is_empty() {
        // Every core's port is known once all have bound: then this core can advertise them.
        let started = Instant::now();
        while global.bound.load(Ordering::SeqCst) < cores {
            if started.elapsed() > Duration::from_secs(30) {
                return Err(format!(
                    "the other cores never bound their listeners ({})",
                    laggards(&global)
                ));
            }
            glommio::timer::sleep(Duration::from_millis(1)).await;
        }
        *shard.core_endpoints.borrow_mut() = (0..bound.len())
            .map(|li| core_endpoints(&config, li, &bound[li], &global, cores))
            .collect();
        for (li, l) in core_listeners.into_iter().enumerate() {
            let ep = endpoint(li, server::Listener::Core);
            glommio::spawn_local(server::accept_loop(shard.clone(), l, ep)).detach();
        }
    }
    // The metadata Raft group (core 0, cluster only). Started once every core has opened its
    // logs and bound its listeners: applying a committed record makes every core open or
    // retire logs (`Req::Apply`), which must not race a core's own start-up opening. Then
    // this broker registers its endpoints, all known now.
    if let Some(boot) = cluster {
        let started = Instant::now();
        while global.bound.load(Ordering::SeqCst) < cores {
            if started.elapsed() > Duration::from_secs(30) {
                return Err(format!(
                    "the other cores never bound their listeners ({})",
                    laggards(&global)
                ));
            }
            glommio::timer::sleep(Duration::from_millis(1)).await;
        }
        let node = start_cluster(&shard, boot)?;
        glommio::spawn_local(shard.clone().register_broker(node)).detach();
    }

    // Shutdown watcher: woken by the byte the signal thread writes to this core's socket. In
    // a cluster this core's leaderships move away first (`ReplicaHost::step_down`), while it goes
    // on serving; then its listeners close.
    {
        let shard = shard.clone();
        use std::os::fd::{FromRawFd, IntoRawFd};
        // SAFETY: the fd comes from `into_raw_fd` of a socket we own; glommio takes it over.
        let mut watch = unsafe { glommio::net::UnixStream::from_raw_fd(watch.into_raw_fd()) };
        glommio::spawn_local(async move {
            let mut byte = [0u8; 1];
            let _ = futures_lite::AsyncReadExt::read(&mut watch, &mut byte).await;
            shard.stopping.fire();
            shard.replica_host().step_down().await;
            shard.shutdown.fire();
        })
        .detach();
    }

    // The first listener's loop runs here; the others beside it (all end at shutdown).
    let mut listeners = listeners.into_iter().enumerate();
    let (_, first) = listeners.next().expect("at least one listener");
    for (li, l) in listeners {
        let ep = endpoint(li, server::Listener::Bootstrap);
        glommio::spawn_local(server::accept_loop(shard.clone(), l, ep)).detach();
    }
    server::accept_loop(
        shard.clone(),
        first,
        endpoint(0, server::Listener::Bootstrap),
    )
    .await;

    // Answer in-flight requests (parked fetches were fired by the wheel driver).
    let started = Instant::now();
    while shard.connections.get() > 0 && started.elapsed() < Duration::from_secs(10) {
        glommio::timer::sleep(Duration::from_millis(5)).await;
    }
    // Keep serving other cores' requests until every core is done with its connections.
    global.drained.fetch_add(1, Ordering::SeqCst);
    while global.drained.load(Ordering::SeqCst) < cores
        && started.elapsed() < Duration::from_secs(20)
    {
        glommio::timer::sleep(Duration::from_millis(5)).await;
    }
    shard.close_all().await;
    // Stay reachable until every core closed its logs (a late cross-core reply may be
    // in flight).
    global.exited.fetch_add(1, Ordering::SeqCst);
    while global.exited.load(Ordering::SeqCst) < cores
        && started.elapsed() < Duration::from_secs(30)
    {
        glommio::timer::sleep(Duration::from_millis(5)).await;
    }
    Ok(())
}

/// Starts the connections to the other brokers and the metadata Raft node on core 0: peers'
/// partition messages and calls go to the shard, the node applies committed records
/// through it.
fn start_cluster(
    shard: &std::rc::Rc<Shard>,
    boot: super::controller::Boot,
) -> Result<std::rc::Rc<super::controller::Node>, String> {
    let (applier, reader, server) = (shard.clone(), shard.clone(), shard.clone());
    let (router, waker, linker) = (
        shard.replica_host().clone(),
        shard.replica_host().clone(),
        shard.replica_host().clone(),
    );
    let peer_hooks = super::peer::PeerHooks {
        partition: Box::new(move |m| router.raft_in(m)),
        peer_changed: Box::new(move |peer, up| waker.peer_changed(peer, up)),
        call: Box::new(move |call| {
            let shard = server.clone();
            Box::pin(async move { shard.serve_peer_call(call).await })
        }),
        link: Box::new(move |fd, core, addr| linker.take_link(fd, core, addr)),
    };
    let peers = super::peer::Peers::new(
        boot.id,
        &boot.peers,
        boot.listen,
        boot.tls.clone(),
        peer_hooks,
    );
    let hooks = super::controller::Hooks {
        apply: Box::new(move |batches, last| {
            let shard = applier.clone();
            Box::pin(async move { shard.apply_cluster(batches, last).await })
        }),
        current: Box::new(move || reader.metadata()),
    };
    let node = super::controller::Node::start(boot, hooks, peers.clone())?;
    // No await since `Node::start` bound the listener: no frame is read before these are set.
    shard.set_peers(peers);
    shard.set_controller(node.clone());
    Ok(node)
}

/// `listeners.per.core`: the (host, port) advertised for each core on listener `li`. The
/// host is the one advertised for the listener; the port is the core's own, or, when
/// `advertised.listeners` names a port P for it (a proxy or NAT in front), P + 1 + core.
fn core_endpoints(
    config: &BrokerConfig,
    li: usize,
    bound: &std::net::SocketAddr,
    global: &Global,
    cores: usize,
) -> Vec<(String, i32)> {
    let given = config.advertised_for(li);
    let (host, port) = advertised(given, bound);
    let explicit_port = given.is_some_and(|a| {
        a.rsplit_once(':')
            .is_some_and(|(_, p)| p.parse::<i32>().is_ok())
    });
    (0..cores)
        .map(|c| {
            let p = if explicit_port {
                port + 1 + c as i32
            } else {
                i32::from(global.core_ports[li * cores + c].load(Ordering::SeqCst))
            };
            (host.clone(), p)
        })
        .collect()
}

fn advertised(given: Option<&str>, bound: &std::net::SocketAddr) -> (String, i32) {
    if let Some(a) = given {
        if let Some((h, p)) = a.rsplit_once(':') {
            if let Ok(p) = p.parse::<i32>() {
                return (h.trim_matches(['[', ']']).to_string(), p);
            }
        }
        return (a.to_string(), i32::from(bound.port()));
    }
    let host = if bound.ip().is_unspecified() {
        "127.0.0.1".to_string()
    } else {
        bound.ip().to_string()
    };
    (host, i32::from(bound.port()))
}
