//! `weir`: a Kafka-wire-compatible streaming log broker, thread-per-core on glommio.
//!
//! `weir serve` starts one pinned glommio executor per core. See ARCHITECTURE.md for the
//! path of a Produce and a Fetch through the modules.

use weir::config;
mod errors;
mod fetch_budget;
mod fetch_response;
mod group;
mod kafka;
mod listen;
mod metrics;
mod server;
mod shard;
mod streaming;
mod sync;
mod wheel;

/// Shared with the library crate (and its fuzz target `metadata_file`).
use weir::metadata;

use std::net::ToSocketAddrs;
use std::path::PathBuf;
use std::sync::atomic::Ordering;
use std::sync::Arc;
use std::time::{Duration, Instant};

use clap::{Parser, Subcommand};
use glommio::channels::channel_mesh::MeshBuilder;
use glommio::{LocalExecutorBuilder, Placement};
use tracing::{error, info, warn};

use crate::config::BrokerConfig;
use crate::metadata::Metadata;
use crate::shard::{Global, ReqMsg, RespMsg, Shard};

#[derive(Parser)]
#[command(
    name = "weir",
    version,
    about = "Kafka-compatible streaming log broker, thread-per-core"
)]
struct Cli {
    #[command(subcommand)]
    command: Command,
}

#[derive(Subcommand)]
enum Command {
    /// Run the broker.
    Serve(ServeArgs),
    /// Benchmark a broker (our own or --bootstrap) against the raw disk and loopback TCP.
    Bench(weir::bench::BenchArgs),
    /// Manage topics on any Kafka-protocol broker: create, list, describe, delete, alter-config.
    Topic(weir::admin::TopicArgs),
    /// Consumer groups on any Kafka-protocol broker: list, describe, reset-offsets.
    Group(weir::admin::GroupArgs),
}

#[derive(clap::Args)]
struct ServeArgs {
    /// Directory for partition logs and metadata [default: ./data]
    #[arg(long)]
    data_dir: Option<PathBuf>,
    /// Address to listen on; port 0 picks a free port [default: 127.0.0.1:9092]
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
}

fn main() {
    init_logging();
    let cli = Cli::parse();
    let code = match cli.command {
        Command::Serve(args) => match serve(args) {
            Ok(()) => 0,
            Err(e) => {
                error!("{e}");
                eprintln!("weir: {e}");
                1
            }
        },
        Command::Topic(args) => weir::admin::topic(args),
        Command::Group(args) => weir::admin::group(args),
        Command::Bench(args) => {
            if weir::bench::run(args) == std::process::ExitCode::SUCCESS {
                0
            } else {
                1
            }
        }
    };
    std::process::exit(code);
}

fn init_logging() {
    let filter = tracing_subscriber::EnvFilter::try_from_default_env()
        .unwrap_or_else(|_| tracing_subscriber::EnvFilter::new("info"));
    // Colours only on a terminal (log files and test harnesses get plain text).
    let ansi = std::io::IsTerminal::is_terminal(&std::io::stderr())
        && std::env::var_os("NO_COLOR").is_none_or(|v| v.is_empty());
    // `init` also installs the `log` → `tracing` bridge (glommio logs through `log`).
    tracing_subscriber::fmt()
        .with_env_filter(filter)
        .with_writer(std::io::stderr)
        .with_ansi(ansi)
        .init();
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

fn serve(args: ServeArgs) -> Result<(), String> {
    check_io_uring()?;
    let mut config = build_config(&args)?;
    // TcpListener::bind panics on an unresolvable address: check it here, with a message.
    let listen_addr = config
        .listen
        .to_socket_addrs()
        .map_err(|e| format!("--listen {}: {e}", config.listen))?
        .next()
        .ok_or_else(|| format!("--listen {}: no address", config.listen))?;
    // SO_REUSEPORT (which every core's listener sets) would let a second broker share the
    // port silently: refuse to start when a live process listens there (listen::check_free;
    // a previous run's lingering connections do not count).
    listen::check_free("--listen", listen_addr)?;
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
    if config.listeners_per_core && listen_addr.port() != 0 {
        for c in 0..cores {
            let port = u16::try_from(usize::from(listen_addr.port()) + 1 + c)
                .map_err(|_| format!("listeners.per.core: core {c}'s port is past 65535"))?;
            let addr = std::net::SocketAddr::new(listen_addr.ip(), port);
            listen::check_free(&format!("listeners.per.core (core {c})"), addr)?;
        }
    }
    shard::data_dir_ok(&config.data_dir)?;
    // Absolute from here on: logs name the real place, and glommio cannot open relative paths.
    config.data_dir = std::path::absolute(&config.data_dir)
        .map_err(|e| format!("{}: {e}", config.data_dir.display()))?;

    // Metadata: loaded (or created) before any executor starts; partitions are re-spread
    // if the core count changed since the last run.
    let mut meta = Metadata::load(&config.data_dir)?.unwrap_or_else(|| Metadata::empty(cores));
    if meta.respread(cores) {
        info!(
            cores,
            "core count changed: partitions re-spread over the cores"
        );
    }
    meta.save(&config.data_dir)?;
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
    let meta = Arc::new(meta);
    let config = Arc::new(config);
    let global = Arc::new(Global::new(cores));

    // Signals: first SIGINT/SIGTERM starts a graceful shutdown, a second one exits at once.
    let mut signals = signal_hook::iterator::Signals::new([
        signal_hook::consts::SIGINT,
        signal_hook::consts::SIGTERM,
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
        std::thread::Builder::new()
            .name("weir-signals".into())
            .spawn(move || {
                for sig in signals.forever() {
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
        let watch = watch_fds.pop_front().expect("one watch socket per core");
        let handle = LocalExecutorBuilder::new(Placement::Fixed(cpu))
            .name(&format!("weir-core-{i}"))
            .io_memory(2 << 20)
            .preempt_timer(Duration::from_millis(10))
            .spawn(move || async move {
                let res = core_main(
                    cores,
                    config,
                    global,
                    meta,
                    (req_mesh, resp_mesh),
                    listen_addr,
                    watch,
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

/// How often an idle core's reactor wakes up anyway (see `core_main`). Each trip costs the
/// kernel a walk of io_uring's poll-cancel hash (`io_poll_find`), which holds one entry per
/// socket waiting for data: with 10,000 parked fetches a 20 ms tick cost 3.3-3.7% of a core,
/// 100 ms costs 0.9-1.1% (`weir bench idle-polls`, docs/bench.md). A lost wake-up is rare
/// (glommio#261): 100 ms bounds it.
const REACTOR_KEEPALIVE: Duration = Duration::from_millis(100);

async fn core_main(
    cores: usize,
    config: Arc<BrokerConfig>,
    global: Arc<Global>,
    meta: Arc<Metadata>,
    (req_mesh, resp_mesh): (
        MeshBuilder<ReqMsg, glommio::channels::channel_mesh::Full>,
        MeshBuilder<RespMsg, glommio::channels::channel_mesh::Full>,
    ),
    listen: std::net::SocketAddr,
    watch: std::os::unix::net::UnixStream,
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
    let id = shard.id;
    shard.open_owned().await;
    shard.open_groups().await?;

    let wheel_queue = glommio::executor().create_task_queue(
        glommio::Shares::default(),
        glommio::Latency::Matters(Duration::from_millis(2)),
        "fetch-wheel",
    );
    glommio::spawn_local_into(shard.clone().run_wheel(), wheel_queue)
        .map_err(|e| e.to_string())?
        .detach();
    glommio::spawn_local(shard.clone().run_retention()).detach();

    // Core 0 binds first (port 0 → the kernel picks); the others bind the same port.
    let listener = if id == 0 {
        let l = glommio::net::TcpListener::bind(listen)
            .map_err(|e| format!("binding {listen}: {e}"))?;
        let port = l.local_addr().map_err(|e| e.to_string())?.port();
        global.port.store(port, Ordering::SeqCst);
        l
    } else {
        let started = Instant::now();
        while global.port.load(Ordering::SeqCst) == 0 {
            if started.elapsed() > Duration::from_secs(30) {
                return Err("core 0 never bound its listener".into());
            }
            glommio::timer::sleep(Duration::from_millis(1)).await;
        }
        let addr = std::net::SocketAddr::new(listen.ip(), global.port.load(Ordering::SeqCst));
        glommio::net::TcpListener::bind(addr).map_err(|e| format!("binding {addr}: {e}"))?
    };
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
            glommio::spawn_local(metrics::serve(shard.clone(), l)).detach();
        }
    }
    // listeners.per.core: this core's own port (listen port + 1 + core, or kernel-picked).
    let core_listener = if config.listeners_per_core {
        let port = match listen.port() {
            0 => 0,
            p => u16::try_from(usize::from(p) + 1 + id)
                .map_err(|_| format!("listeners.per.core: port {p} + 1 + {id} is past 65535"))?,
        };
        let addr = std::net::SocketAddr::new(listen.ip(), port);
        let l = glommio::net::TcpListener::bind(addr)
            .map_err(|e| format!("binding core {id}'s listener {addr}: {e}"))?;
        let port = l.local_addr().map_err(|e| e.to_string())?.port();
        global.core_ports[id].store(port, Ordering::SeqCst);
        Some(l)
    } else {
        None
    };
    let bound = listener.local_addr().map_err(|e| e.to_string())?;
    *shard.advertised.borrow_mut() = advertised(&config, &bound);
    if global.bound.fetch_add(1, Ordering::SeqCst) + 1 == cores {
        server::log_listening(&bound);
    }
    if let Some(l) = core_listener {
        // Every core's port is known once all have bound: then this core can advertise them.
        let started = Instant::now();
        while global.bound.load(Ordering::SeqCst) < cores {
            if started.elapsed() > Duration::from_secs(30) {
                return Err("the other cores never bound their listeners".into());
            }
            glommio::timer::sleep(Duration::from_millis(1)).await;
        }
        *shard.core_endpoints.borrow_mut() = core_endpoints(&config, &bound, &global, cores);
        glommio::spawn_local(server::accept_loop(shard.clone(), l)).detach();
    }

    // Shutdown watcher: woken by the byte the signal thread writes to this core's socket.
    {
        let shard = shard.clone();
        use std::os::fd::{FromRawFd, IntoRawFd};
        // SAFETY: the fd comes from `into_raw_fd` of a socket we own; glommio takes it over.
        let mut watch = unsafe { glommio::net::UnixStream::from_raw_fd(watch.into_raw_fd()) };
        glommio::spawn_local(async move {
            let mut byte = [0u8; 1];
            let _ = futures_lite::AsyncReadExt::read(&mut watch, &mut byte).await;
            shard.shutdown.fire();
        })
        .detach();
    }

    server::accept_loop(shard.clone(), listener).await;

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

/// `listeners.per.core`: the (host, port) advertised for each core. The host is the one
/// advertised for the broker; the port is the core's own, or, when `advertised.listeners`
/// names a port P (a proxy or NAT in front), P + 1 + core.
fn core_endpoints(
    config: &BrokerConfig,
    bound: &std::net::SocketAddr,
    global: &Global,
    cores: usize,
) -> Vec<(String, i32)> {
    let (host, port) = advertised(config, bound);
    let explicit_port = config.advertised_listener.as_ref().is_some_and(|a| {
        a.rsplit_once(':')
            .is_some_and(|(_, p)| p.parse::<i32>().is_ok())
    });
    (0..cores)
        .map(|c| {
            let p = if explicit_port {
                port + 1 + c as i32
            } else {
                i32::from(global.core_ports[c].load(Ordering::SeqCst))
            };
            (host.clone(), p)
        })
        .collect()
}

fn advertised(config: &BrokerConfig, bound: &std::net::SocketAddr) -> (String, i32) {
    if let Some(a) = &config.advertised_listener {
        if let Some((h, p)) = a.rsplit_once(':') {
            if let Ok(p) = p.parse::<i32>() {
                return (h.trim_matches(['[', ']']).to_string(), p);
            }
        }
        return (a.clone(), i32::from(bound.port()));
    }
    let host = if bound.ip().is_unspecified() {
        "127.0.0.1".to_string()
    } else {
        bound.ip().to_string()
    };
    (host, i32::from(bound.port()))
}
