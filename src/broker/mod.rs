//! The broker (`weir serve`): start-up on the main thread, then one pinned glommio executor
//! per core (`core::core_main`).
//!
//! Layers, lowest first (a module uses only those below it; `scripts/check_layers.py` keeps
//! the imports free of cycles):
//! - `sync`, `errors`, `wheel`, `metrics`: single-core primitives, Kafka error codes, the
//!   timing wheel, per-core counters;
//! - `group`: the group coordinator and the committed-offsets store of one core;
//! - `shard`: one core's partitions and its end of the cross-core meshes (the data path);
//! - `kafka`: the request layer, one handler per Kafka API, calling shards;
//! - `streaming`, `server`, `metrics_endpoint`: connections (Kafka and HTTP);
//! - `listen`, `core` and this file: start-up and shutdown.

mod controller;
mod core;
mod errors;
mod group;
mod kafka;
mod listen;
mod log_limit;
mod login_failures;
mod metrics;
mod metrics_endpoint;
mod peer;
mod raft;
mod replica;
mod sasl;
mod server;
mod shard;
#[cfg(test)]
mod sim;
mod sockets;
mod streaming;
mod sync;
#[cfg(feature = "tiered-storage")]
mod tier;
#[cfg(not(feature = "tiered-storage"))]
#[path = "tier_off.rs"]
mod tier;
mod tls;
mod txn;
mod wheel;

use std::net::ToSocketAddrs;
use std::path::PathBuf;
use std::sync::atomic::Ordering;
use std::sync::Arc;
use std::time::Duration;

use glommio::channels::channel_mesh::MeshBuilder;
use glommio::{LocalExecutorBuilder, Placement};
use tracing::{error, info, warn};

use weir::config::{self, BrokerConfig};
use weir::metadata::Metadata;

use self::shard::{Global, ReqMsg, RespMsg};

#[derive(clap::Args)]
pub struct ServeArgs {
    /// Directory for partition logs and metadata [default: ./data]
    #[arg(long)]
    data_dir: Option<PathBuf>,
    /// Address to listen on (the `listeners` setting: `PLAINTEXT://host:port,SSL://host:port`
    /// or a bare host:port); port 0 picks a free port [default: 127.0.0.1:9092]
    #[arg(long)]
    listen: Option<String>,
    /// host:port given to clients in Metadata responses [default: the bound address]
    #[arg(long)]
    advertised_listener: Option<String>,
    /// Number of cores (executors) [default: every CPU this process may run on]
    #[arg(long)]
    cores: Option<usize>,
    /// File of Kafka-named key=value settings (docs/configuration.md); flags override it,
    /// and WEIR_* environment variables (e.g. WEIR_LOG_RETENTION_MS) override both
    #[arg(long)]
    config: Option<PathBuf>,
    /// A Kafka-named setting, e.g. --set log.retention.ms=60000 (repeatable)
    #[arg(long = "set", value_name = "KEY=VALUE")]
    set: Vec<String>,
    /// This broker's id in a cluster (the `node.id` setting); needs --peers
    #[arg(long)]
    node_id: Option<u64>,
    /// Every broker of the cluster, this one included, as ID@HOST:PORT,... (inter-broker
    /// addresses; the `controller.quorum.voters` setting); needs --node-id
    #[arg(long)]
    peers: Option<String>,
}

/// CPUs this process may run on (sched_getaffinity), in order.
fn allowed_cpus() -> Vec<usize> {
    // SAFETY: cpu_set_t is plain data; sched_getaffinity writes at most its size.
    let mut set: libc::cpu_set_t = unsafe { std::mem::zeroed() };
    let rc =
        unsafe { libc::sched_getaffinity(0, std::mem::size_of::<libc::cpu_set_t>(), &mut set) };
    if rc != 0 {
        return (0..std::thread::available_parallelism().map_or(1, |n| n.get())).collect();
    }
    (0..libc::CPU_SETSIZE as usize)
        .filter(|&c| unsafe { libc::CPU_ISSET(c, &set) })
        .collect()
}

fn build_config(args: &ServeArgs) -> Result<BrokerConfig, String> {
    let mut c = BrokerConfig::default();
    if let Some(path) = &args.config {
        c.load_file(path)?;
    }
    for kv in &args.set {
        let (k, v) = kv
            .split_once('=')
            .ok_or_else(|| format!("--set {kv}: expected KEY=VALUE"))?;
        c.set(k, v)?;
    }
    if let Some(d) = &args.data_dir {
        c.set("log.dirs", &d.to_string_lossy())?;
    }
    if let Some(l) = &args.listen {
        c.set("listeners", l)?;
    }
    if let Some(a) = &args.advertised_listener {
        c.set("advertised.listeners", a)?;
    }
    if let Some(id) = args.node_id {
        c.set("node.id", &id.to_string())?;
    }
    if let Some(p) = &args.peers {
        c.set("controller.quorum.voters", p)?;
    }
    // Environment variables last: they override the file and the flags.
    let applied = c.apply_env(std::env::vars())?;
    if !applied.is_empty() {
        info!(variables = ?applied, "settings from the environment");
    }
    Ok(c)
}

/// Checks that this process may use io_uring, so that a kernel without it, a container whose
/// seccomp profile blocks it, or `kernel.io_uring_disabled` gives a message rather than a
/// panic deep in glommio.
fn check_io_uring() -> Result<(), String> {
    // struct io_uring_params is 120 bytes; zeroed asks for nothing special.
    let mut params = [0u64; 15];
    // SAFETY: io_uring_setup(2) with one entry and a valid, writable params buffer.
    let fd = unsafe { libc::syscall(libc::SYS_io_uring_setup, 1u32, params.as_mut_ptr()) };
    if fd >= 0 {
        // SAFETY: closing the ring fd we just got.
        unsafe { libc::close(fd as i32) };
        return Ok(());
    }
    let e = std::io::Error::last_os_error();
    let why = match e.raw_os_error() {
        Some(libc::ENOSYS) => "this kernel has no io_uring (Linux 5.8 or later is needed)",
        Some(libc::EPERM) | Some(libc::EACCES) => {
            "io_uring is not permitted: a container's seccomp profile blocks it (Docker's default \
             does: run with a profile allowing io_uring_setup/io_uring_enter/io_uring_register, or \
             --security-opt seccomp=unconfined), or the sysctl kernel.io_uring_disabled is set \
             (0 enables it for everyone; 1 only for the group kernel.io_uring_group)"
        }
        Some(libc::ENOMEM) => {
            "io_uring could not lock its memory: raise RLIMIT_MEMLOCK (LimitMEMLOCK= in systemd, \
             ulimit -l)"
        }
        _ => "io_uring_setup failed",
    };
    Err(format!(
        "io_uring is unavailable ({e}): {why}. See docs/running.md."
    ))
}

/// A cluster's addresses (`node.id` + `controller.quorum.voters`): this broker's own
/// inter-broker address (checked free) and every peer's, resolved. `None`: standalone.
#[allow(clippy::type_complexity)]
fn cluster_addresses(
    config: &BrokerConfig,
) -> Result<Option<(std::net::SocketAddr, Vec<(u64, std::net::SocketAddr)>)>, String> {
    let (id, voters) = match (config.node_id, config.voters.as_slice()) {
        (None, []) => return Ok(None),
        (Some(_), []) => {
            return Err("node.id (--node-id) needs controller.quorum.voters (--peers)".into())
        }
        (None, _) => {
            return Err("controller.quorum.voters (--peers) needs node.id (--node-id)".into())
        }
        (Some(id), v) => (id, v),
    };
    let resolve = |addr: &str| -> Result<std::net::SocketAddr, String> {
        addr.to_socket_addrs()
            .map_err(|e| format!("controller.quorum.voters {addr}: {e}"))?
            .next()
            .ok_or_else(|| format!("controller.quorum.voters {addr}: no address"))
    };
    let own = voters.iter().find(|v| v.id == id).ok_or_else(|| {
        format!("node.id {id} is not one of controller.quorum.voters (--peers must name this broker too)")
    })?;
    let listen = resolve(&own.addr)?;
    listen::check_free(
        "the inter-broker address (controller.quorum.voters)",
        listen,
    )?;
    let mut peers = Vec::new();
    for v in voters.iter().filter(|v| v.id != id) {
        peers.push((v.id, resolve(&v.addr)?));
    }
    Ok(Some((listen, peers)))
}

/// The broker's own secret (`DATA_DIR/weir-secret`, 32 random bytes made at the first start,
/// readable by the broker's user only): what unknown SASL users' challenges are derived from,
/// so that they stay the same across restarts as a real user's do.
fn broker_secret(data_dir: &std::path::Path) -> Result<Vec<u8>, String> {
    use std::io::Write;
    use std::os::unix::fs::OpenOptionsExt;
    let path = data_dir.join("weir-secret");
    match std::fs::read(&path) {
        Ok(s) if s.len() == 32 => return Ok(s),
        Ok(_) => return Err(format!("{}: not 32 bytes", path.display())),
        Err(e) if e.kind() == std::io::ErrorKind::NotFound => {}
        Err(e) => return Err(format!("{}: {e}", path.display())),
    }
    let secret = weir::sasl::scram::random_bytes(32);
    let tmp = data_dir.join("weir-secret.tmp");
    let write = || -> std::io::Result<()> {
        let mut f = std::fs::OpenOptions::new()
            .write(true)
            .create(true)
            .truncate(true)
            .mode(0o600)
            .open(&tmp)?;
        f.write_all(&secret)?;
        f.sync_all()?;
        std::fs::rename(&tmp, &path)?;
        std::fs::File::open(data_dir)?.sync_all()
    };
    write().map_err(|e| format!("{}: {e}", path.display()))?;
    Ok(secret)
}

/// Raises the soft open-file limit to the hard one: segment files (up to
/// `log.open.segment.files.max`) and connections (`max.connections`) each hold a descriptor,
/// and the usual soft default of 1,024 is far below either.
fn raise_open_file_limit() {
    let mut lim = libc::rlimit {
        rlim_cur: 0,
        rlim_max: 0,
    };
    // SAFETY: getrlimit/setrlimit with a valid pointer to a local rlimit.
    unsafe {
        if libc::getrlimit(libc::RLIMIT_NOFILE, &mut lim) == 0 && lim.rlim_cur < lim.rlim_max {
            let from = lim.rlim_cur;
            lim.rlim_cur = lim.rlim_max;
            if libc::setrlimit(libc::RLIMIT_NOFILE, &lim) == 0 {
                info!(
                    from,
                    to = lim.rlim_max,
                    "raised the open-file limit to the hard limit"
                );
            }
        }
    }
}

/// The segment files one core keeps open: `log.open.segment.files.max` (by default half the
/// open-file limit) split between the cores, at least 16 each.
pub(crate) fn open_segment_files_per_core(config: &BrokerConfig, cores: usize) -> usize {
    let total = config.open_segment_files_max.unwrap_or_else(|| {
        let mut lim = libc::rlimit {
            rlim_cur: 0,
            rlim_max: 0,
        };
        // SAFETY: getrlimit with a valid pointer to a local rlimit.
        let soft = if unsafe { libc::getrlimit(libc::RLIMIT_NOFILE, &mut lim) } == 0 {
            lim.rlim_cur
        } else {
            1024
        };
        usize::try_from(soft / 2).unwrap_or(usize::MAX)
    });
    (total / cores.max(1)).max(16)
}

pub fn serve(args: ServeArgs) -> Result<(), String> {
    check_io_uring()?;
    raise_open_file_limit();
    let mut config = build_config(&args)?;
    config.check_listeners()?;
    // TcpListener::bind panics on an unresolvable address: check it here, with a message.
    let mut listen_addrs = Vec::with_capacity(config.listeners.len());
    for l in &config.listeners {
        let what = format!("listeners {}://{}", l.protocol.name(), l.address);
        let addr = l
            .address
            .to_socket_addrs()
            .map_err(|e| format!("{what}: {e}"))?
            .next()
            .ok_or_else(|| format!("{what}: no address"))?;
        // SO_REUSEPORT (which every core's listener sets) would let a second broker share the
        // port silently: refuse to start when a live process listens there (listen::check_free;
        // a previous run's lingering connections do not count).
        listen::check_free(&what, addr)?;
        listen_addrs.push(addr);
    }
    // Read and checked once, before any core starts: a bad file stops the start here.
    let tls = if config.listeners.iter().any(|l| l.protocol.tls()) {
        Some(tls::TlsSource::load(&config.ssl)?)
    } else {
        None
    };
    // The metrics endpoint: resolved and checked for a listener already there, like --listen.
    let metrics_addr = match &config.metrics_listen {
        None => None,
        Some(m) => {
            let addr = m
                .to_socket_addrs()
                .map_err(|e| format!("metrics.listen {m}: {e}"))?
                .next()
                .ok_or_else(|| format!("metrics.listen {m}: no address"))?;
            listen::check_free("metrics.listen", addr)
                .map_err(|e| format!("{e} (set metrics.listen=off to run without metrics)"))?;
            Some(addr)
        }
    };
    // Resolved once here (no DNS on the cores).
    config.metrics_listen = metrics_addr.map(|a| a.to_string());
    let cpus = allowed_cpus();
    let cores = args.cores.unwrap_or(cpus.len()).max(1);
    if cores > 1024 {
        return Err(format!("--cores {cores}: too many"));
    }
    // Every fixed port this broker binds, by listener: none may be another's (SO_REUSEPORT
    // would let two of our own listeners share a port, each getting half the connections).
    let mut ours: Vec<(std::net::SocketAddr, String)> = Vec::new();
    for (l, &addr) in config.listeners.iter().zip(&listen_addrs) {
        if addr.port() == 0 {
            continue;
        }
        ours.push((addr, format!("the {} listener", l.protocol.name())));
        if config.listeners_per_core {
            for c in 0..cores {
                let port = u16::try_from(usize::from(addr.port()) + 1 + c)
                    .map_err(|_| format!("listeners.per.core: core {c}'s port is past 65535"))?;
                let core_addr = std::net::SocketAddr::new(addr.ip(), port);
                let what = format!(
                    "listeners.per.core ({} listener, core {c})",
                    l.protocol.name()
                );
                listen::check_free(&what, core_addr)?;
                ours.push((core_addr, what));
            }
        }
    }
    for (i, (a, what)) in ours.iter().enumerate() {
        if let Some((_, other)) = ours[..i].iter().find(|(b, _)| listen::overlaps(*a, *b)) {
            return Err(format!(
                "{what} and {other} would both use port {}: give the listeners ports further \
                 apart (listeners.per.core uses each listener's port + 1 + core, for {cores} \
                 cores), or set listeners.per.core=false",
                a.port()
            ));
        }
    }
    // A cluster: this broker's own inter-broker address and its peers', resolved here (no
    // DNS on the cores).
    tier::check_config(&config)?;
    let cluster_addrs = cluster_addresses(&config)?;
    shard::data_dir_ok(&config.data_dir)?;
    // Absolute from here on: logs name the real place, and glommio cannot open relative paths.
    config.data_dir = std::path::absolute(&config.data_dir)
        .map_err(|e| format!("{}: {e}", config.data_dir.display()))?;

    // A cluster broker's data directory identity, before anything is written there: a
    // directory with no state rejoins its Raft groups (raft::rejoin).
    let rejoining = match (&cluster_addrs, config.node_id) {
        (Some(_), Some(id)) => {
            let had_state = controller::store::path(&config.data_dir).exists();
            let identity = raft::rejoin::Identity::establish(&config.data_dir, id, had_state)?;
            info!(node = id, directory_id = %identity.directory_id, "data directory");
            identity.rejoining
        }
        _ => {
            raft::rejoin::refuse_cluster_dir_standalone(
                &config.data_dir,
                &controller::store::path(&config.data_dir),
            )?;
            None
        }
    };
    // Metadata: loaded (or created) before any executor starts; partitions are re-spread
    // if the core count changed since the last run.
    let mut meta = Metadata::load(&config.data_dir)?.unwrap_or_else(|| Metadata::empty(cores));
    if config.node_id.is_none() && meta.topics.values().any(|t| !t.brokers.is_empty()) {
        // A cluster broker's directory that lost its identity and its metadata log too
        // (`refuse_cluster_dir_standalone` found neither): its topics are placed on brokers.
        return Err(format!(
            "{}: the topics here are placed on the brokers of a cluster: start this directory's \
             broker with --node-id and --peers as before, or give a standalone broker a data \
             directory of its own",
            config.data_dir.display()
        ));
    }
    meta.local_broker = config.node_id;
    if config.node_id.is_some()
        && meta.cores != cores
        && meta.topics.values().any(|t| !t.brokers.is_empty())
    {
        return Err(format!(
            "the core count changed ({} to {cores}): moving a cluster broker's partitions \
             between cores is not supported yet; start it with --cores {}",
            meta.cores, meta.cores
        ));
    }
    if meta.respread(cores) {
        info!(
            cores,
            "core count changed: partitions re-spread over the cores"
        );
    }
    meta.save(&config.data_dir)?;
    weir::sasl::scram::set_fake_secret(&broker_secret(&config.data_dir)?);
    // Overrides stored by an older weir (or edited by hand) that today's bounds refuse are
    // ignored for that topic: say so, once per override, with what is used instead.
    for (topic, t) in &meta.topics {
        for (key, value, why) in config::invalid_overrides(&t.configs) {
            let instead = config::TOPIC_CONFIGS
                .iter()
                .find(|(k, _)| *k == key)
                .and_then(|(_, broker_key)| config.value_of(broker_key))
                .unwrap_or_else(|| "the default".to_string());
            warn!(%topic, %key, %value, %why, %instead,
                "stored topic config override is invalid: ignored, the broker setting applies");
        }
    }
    info!(
        data_dir = %config.data_dir.display(),
        topics = meta.topics.len(),
        cores,
        "starting"
    );
    // Create the direct-I/O probe file once, before the cores race to create it.
    {
        let dir = config.data_dir.clone();
        LocalExecutorBuilder::default()
            .io_memory(1 << 20)
            .spawn(move || async move { weir_storage::io::prime_dma_probe(&dir).await })
            .map_err(|e| format!("starting the probe executor: {e}"))?
            .join()
            .map_err(|e| format!("probe executor failed: {e}"))?
            .map_err(|e| format!("priming direct I/O in {}: {e}", config.data_dir.display()))?;
    }
    let mut cluster_boot = match cluster_addrs {
        None => None,
        Some((listen, peers)) => Some(controller::Boot {
            id: config.node_id.expect("checked with the voters"),
            peers,
            listen,
            log: controller::store::load(&config.data_dir)?,
            applied: meta.applied_index,
            caught_up: Default::default(),
            rejoin: Default::default(),
            tls: match config.inter_broker_protocol {
                Some(weir::config::SecurityProtocol::Ssl) => Some(
                    peer::peer_tls::PeerTls::load(&config.ssl, &config.voters)
                        .map_err(|e| format!("security.inter.broker.protocol=SSL: {e}"))?,
                ),
                _ => {
                    tracing::warn!(
                        "security.inter.broker.protocol=PLAINTEXT: the peer port is neither \
                         authenticated nor encrypted; anyone who reaches it can change the \
                         cluster's metadata (trusted networks only)"
                    );
                    None
                }
            },
        }),
    };
    let link_boot = cluster_boot.as_ref().map(|b| peer::links::LinkBoot {
        id: b.id,
        peers: b.peers.clone(),
        listen: b.listen,
        tls: b.tls.clone(),
    });
    let meta = Arc::new(meta);
    let config = Arc::new(config);
    let mut global = Global::new(cores, listen_addrs.len(), cluster_boot.is_some());
    global.rejoin = Arc::new(raft::rejoin::Shared::new(rejoining));
    let global = Arc::new(global);
    if let Some(boot) = cluster_boot.as_mut() {
        boot.caught_up = global.metadata_current.clone();
        boot.rejoin = global.rejoin.clone();
    }

    // Signals: first SIGINT/SIGTERM starts a graceful shutdown, a second one exits at once;
    // SIGHUP reloads the TLS certificate and key.
    let mut signals = signal_hook::iterator::Signals::new([
        signal_hook::consts::SIGINT,
        signal_hook::consts::SIGTERM,
        signal_hook::consts::SIGHUP,
    ])
    .map_err(|e| format!("installing signal handlers: {e}"))?;
    // One socketpair per core: the signal thread writes a byte, the core's watcher task is
    // woken by the read (no polling of a flag).
    let mut wakers = Vec::with_capacity(cores);
    let mut watch_fds = std::collections::VecDeque::with_capacity(cores);
    for _ in 0..cores {
        let (tx, rx) = std::os::unix::net::UnixStream::pair()
            .map_err(|e| format!("creating the shutdown socketpair: {e}"))?;
        rx.set_nonblocking(true).map_err(|e| e.to_string())?;
        wakers.push(tx);
        watch_fds.push_back(rx);
    }
    {
        let global = global.clone();
        let tls = tls.clone();
        std::thread::Builder::new()
            .name("weir-signals".into())
            .spawn(move || {
                for sig in signals.forever() {
                    if sig == signal_hook::consts::SIGHUP {
                        match tls.as_ref().map(|t| t.reload()) {
                            None => info!("SIGHUP: no TLS listener, nothing to reload"),
                            Some(Ok(())) => info!(
                                "SIGHUP: TLS certificate and key reloaded; new connections use them"
                            ),
                            Some(Err(e)) => warn!(error = %e,
                                "SIGHUP: TLS reload failed; keeping the current certificate"),
                        }
                        continue;
                    }
                    if global.shutdown.swap(true, Ordering::SeqCst) {
                        warn!(sig, "second signal: exiting now");
                        std::process::exit(130);
                    }
                    info!(
                        sig,
                        "shutting down: no new connections, finishing requests, closing logs"
                    );
                    for w in &mut wakers {
                        let _ = std::io::Write::write_all(w, b"x");
                    }
                }
            })
            .map_err(|e| e.to_string())?;
    }

    let mesh_depth = config.mesh_queue_depth + shard::mesh_fetch_depth(cores);
    let req_mesh: MeshBuilder<ReqMsg, _> = MeshBuilder::full(cores, mesh_depth);
    let resp_mesh: MeshBuilder<RespMsg, _> = MeshBuilder::full(cores, mesh_depth);
    let mut handles = Vec::new();
    for i in 0..cores {
        let cpu = cpus.get(i % cpus.len().max(1)).copied().unwrap_or(0);
        let (config, global, meta) = (config.clone(), global.clone(), meta.clone());
        let (req_mesh, resp_mesh) = (req_mesh.clone(), resp_mesh.clone());
        let (listen_addrs, tls) = (listen_addrs.clone(), tls.clone());
        let watch = watch_fds.pop_front().expect("one watch socket per core");
        let cluster = if i == 0 { cluster_boot.take() } else { None };
        let links = link_boot.clone();
        let handle = LocalExecutorBuilder::new(Placement::Fixed(cpu))
            .name(&format!("weir-core-{i}"))
            .io_memory(2 << 20)
            .preempt_timer(Duration::from_millis(10))
            .spawn(move || async move {
                let res = core::core_main(
                    cores,
                    config,
                    global,
                    meta,
                    (req_mesh, resp_mesh),
                    (listen_addrs, tls),
                    (watch, cluster, links),
                )
                .await;
                if let Err(e) = &res {
                    // Startup errors only: the other cores may be waiting for this one.
                    error!(core = i, "{e}");
                    eprintln!("weir: core {i}: {e}");
                    std::process::exit(1);
                }
                res
            })
            .map_err(|e| format!("starting executor {i} on cpu {cpu}: {e}"))?;
        handles.push(handle);
    }
    let mut failed = None;
    for h in handles {
        match h.join() {
            Ok(Ok(())) => {}
            Ok(Err(e)) => failed = Some(e),
            Err(e) => failed = Some(format!("executor failed: {e}")),
        }
    }
    match failed {
        Some(e) => Err(e),
        None => {
            info!("shut down cleanly");
            Ok(())
        }
    }
}
