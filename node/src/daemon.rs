//! `murnode run`: load the data directory and config, start the node, print one ready
//! line, serve until SIGINT or SIGTERM, then shut down cleanly.

use std::net::SocketAddr;
use std::path::PathBuf;
use std::sync::Arc;
use std::time::{Duration, Instant};

use anyhow::Context;
use serde::Serialize;
use tokio::net::TcpListener;
use tokio::signal::unix::{SignalKind, signal};
use tracing::{info, warn};

use murmur_protocol::limits::{CERT_BYTES_MAX, ENVELOPE_OVERHEAD_MAX};
use murmur_protocol::{Envelope, SecretKey, verify_cert};
use tokio::sync::watch;

use murmur_api::exit::{CliError, CliResult, UsageContext};
use murmur_api::output::print_json;
use murmur_config::{CONFIG_FILE, Config, RawConfig, clock};
use murmur_net::NetHandle;
use murmur_runtime::ports::{NoInference, Ports};
use murmur_runtime::{CapsuleManifest, Runtime, RuntimeOptions};
use murmur_store::ArtifactStore;
use murmur_store::data_dir;

use crate::api::artifacts::InstallTarget;
use crate::api::{self, ApiState};
use crate::artifacts::{Advertiser, Puller, keep_pins};
use crate::tasks::{NodeMessages, OwnerPort, TaskManager, TaskRunner, TaskService};

/// The task database, in the data directory.
pub const TASKS_DB: &str = "tasks.redb";
/// The brains' memory in the data directory.
pub const BRAINS_DB: &str = "brains.redb";
/// Beyond the longest grace, how long the node waits for its brains at shutdown (a
/// script finishing its current step).
const BRAINS_STOP_EXTRA: std::time::Duration = std::time::Duration::from_secs(3);
/// How long a stopping node's API waits for requests still under way before it closes them.
const API_CLOSE_WAIT: Duration = Duration::from_secs(2);
use murmur_config::limits::{ADVERTISE_EVERY, PINS_EVERY};
use murmur_protocol::HostedCapsule;

/// `murnode run`'s inputs after flag and environment parsing.
#[derive(Debug, Clone)]
pub struct RunOptions {
    pub data_dir: PathBuf,
    /// Overrides `api.listen`.
    pub api: Option<String>,
    /// Replaces `network.listen` when not empty.
    pub listen: Vec<String>,
    /// Replaces `network.bootstrap` when not empty.
    pub bootstrap: Vec<String>,
    /// Turns mDNS off whatever the config says.
    pub no_mdns: bool,
    /// Print the ready line as JSON.
    pub json: bool,
}

/// The ready line: what scripts need to talk to the node.
#[derive(Debug, Serialize)]
pub struct Ready {
    pub event: &'static str,
    pub peer_id: String,
    /// The libp2p addresses the node listens on, ports resolved (without `/p2p/`).
    pub listen_addrs: Vec<String>,
    pub api_addr: SocketAddr,
    pub data_dir: String,
}

/// Loads the configuration with the flags applied on top.
pub fn load_config(options: &RunOptions) -> CliResult<Config> {
    let path = options.data_dir.join(CONFIG_FILE);
    let mut raw =
        if path.exists() { RawConfig::load(&path).map_err(CliError::usage)? } else { RawConfig::default() };
    if let Some(api) = &options.api {
        raw.api.listen.clone_from(api);
    }
    if !options.listen.is_empty() {
        raw.network.listen.clone_from(&options.listen);
    }
    if !options.bootstrap.is_empty() {
        raw.network.bootstrap.clone_from(&options.bootstrap);
    }
    if options.no_mdns {
        raw.network.mdns = false;
    }
    Config::from_raw(&raw, &options.data_dir)
        .usage_context(format!("invalid configuration ({})", path.display()))
}

/// Runs the node until a shutdown signal.
pub async fn run(options: RunOptions) -> CliResult {
    let key = data_dir::node_key(&options.data_dir).map_err(CliError::usage)?;
    let config = load_config(&options)?;
    let cert = own_certificate(&key, &config).map_err(CliError::usage)?;
    let revocations = crate::revocations::load(&options.data_dir).map_err(CliError::usage)?;
    let peer_id = key.node_id().to_string();

    let listener = TcpListener::bind(config.api_listen)
        .await
        .with_context(|| format!("cannot listen for the API on {}", config.api_listen))?;
    let api_addr = listener.local_addr().context("cannot read the API address")?;

    // Wired once, in order, each piece given what it needs when it is made: the network's
    // handle first (usable before its driver runs), pulls and advertising over it, the task
    // database and the task service, the runtime's ports (pulls, messages through the task
    // service), the runtime,
    // the runner of owned tasks, and last the network's driver, which hands it task
    // requests. Nothing is attached later.
    let store = Arc::new(ArtifactStore::open(&options.data_dir.join("store")).map_err(CliError::failed)?);
    let (net, pending) = murmur_net::handle(key.node_id());
    let advertiser = Advertiser::new(net.clone(), store.clone());
    let puller = Puller::new(net.clone(), store.clone(), config.trust.publishers.clone(), advertiser.clone());
    let owner_config = murmur_protocol::owner::OwnerConfig {
        finished_max: config.tasks_finished_in_memory,
        ..murmur_protocol::owner::OwnerConfig::default()
    };
    let manager = TaskManager::open_with(&options.data_dir.join(TASKS_DB), owner_config)
        .await
        .map_err(CliError::failed)?;
    let retention = crate::tasks::Retention {
        keep_ms: u64::try_from(config.tasks_keep.as_millis()).unwrap_or(u64::MAX),
        keep_max: config.tasks_keep_max,
    };
    tokio::spawn(manager.clone().keep_pruning(retention, murmur_config::limits::TASK_PRUNE_EVERY));
    // What dead processes left (temporary files), abandoned pulls and old shell logs.
    tokio::spawn(crate::housekeeping::keep_clean(
        options.data_dir.clone(),
        config.tasks_keep,
        murmur_config::limits::HOUSEKEEPING_EVERY,
    ));
    let tasks = TaskService::new(manager.clone(), net.clone());
    let messages = NodeMessages::new(config.trust.authorities.clone(), tasks.clone(), net.clone())
        .map_err(CliError::failed)?;
    let ports = Ports { artifacts: Arc::new(puller.clone()), messages, inference: Arc::new(NoInference) };
    let runtime = start_runtime(&options, &config, store.clone(), ports)?;
    let models = crate::models::ModelRouter::new(net.clone());
    let upstreams = Arc::new(
        crate::upstream::Upstreams::new(
            config.agents.iter().map(|a| (a.name.clone(), a.providers.clone())).collect(),
            config.credentials.clone(),
        )
        .map_err(CliError::failed)?,
    );
    // MCP servers start in the background: one that fails is retried, never fatal.
    let mcp = Arc::new(murmur_mcp::Servers::start(&config.mcp, &config.credentials, &options.data_dir));
    let brains = murmur_brain::Brains::start(
        config.agents.iter().map(crate::brains::agent_config).collect(),
        runtime.clone(),
        store.clone(),
        &options.data_dir.join(BRAINS_DB),
        &options.data_dir.join("agents"),
        crate::brains::NetMesh::new(net.clone(), models.clone(), upstreams.clone()),
        Arc::new(crate::brains::NodeMcp(mcp.clone())),
    )
    .map_err(CliError::failed)?;
    let runner = TaskRunner::start(manager.clone(), runtime.clone(), config.runtime.audience);
    let (stop_tx, stop_rx) = watch::channel(false);
    let hosted = hosted_capsules(&runtime, &config.capsules);
    let owner = Arc::new(OwnerPort::new(runner, key.node_id()));
    let advertised = murmur_net::Advertised { capsules: hosted, agents: brains.names(), cert, revocations };
    let ports =
        murmur_net::Ports { tasks: owner, agents: Arc::new(crate::brains::BrainInbox(brains.clone())) };
    let network = murmur_net::start(pending, &key, &config, advertised, ports, store, stop_rx)
        .await
        .context("cannot start networking")?;
    models.serve(brains.clone()).map_err(CliError::failed)?;
    models.advertise(&brains);
    tokio::spawn(crate::revocations::keep_stored(options.data_dir.clone(), net.watch_revocations()));
    tokio::spawn(advertiser.advertise_every(ADVERTISE_EVERY));
    tokio::spawn(keep_pins(puller.clone(), config.pins.clone(), PINS_EVERY));
    let state = Arc::new(ApiState {
        peer_id: peer_id.clone(),
        api_addr,
        listen_addrs: network.listen_addrs.iter().map(|a| format!("{a}/p2p/{peer_id}")).collect(),
        streams: std::sync::atomic::AtomicUsize::new(0),
        started: Instant::now(),
        net: net.clone(),
        runtime: runtime.clone(),
        tasks,
        policy: config.api_policy.clone(),
        puller,
        install: InstallTarget::new(&options.data_dir, &config.runtime.capsules_dir, config.capsules.clone()),
        brains: brains.clone(),
        models,
        upstreams,
        mcp: mcp.clone(),
        completions: std::sync::atomic::AtomicUsize::new(0),
        completions_max: config.completions_max,
        tokens: Default::default(),
    });

    let ready = Ready {
        event: "ready",
        peer_id,
        listen_addrs: network.listen_addrs.iter().map(ToString::to_string).collect(),
        api_addr,
        data_dir: options.data_dir.display().to_string(),
    };
    if options.json {
        print_json(&ready);
    } else {
        println!("murnode ready: peer {} api http://{}", ready.peer_id, ready.api_addr);
        for addr in &ready.listen_addrs {
            println!("  listening on {addr}/p2p/{}", ready.peer_id);
        }
    }
    info!(peer = %ready.peer_id, api = %api_addr, "node started");
    // A service manager (systemd `Type=notify`) learns the node is up once the API and
    // the mesh listen; without `$NOTIFY_SOCKET` this does nothing.
    match crate::notify::ready(&format!("peer {} api http://{api_addr}", ready.peer_id)) {
        Ok(true) => info!("readiness sent to the service manager"),
        Ok(false) => {}
        Err(err) => {
            tracing::warn!(error = %err, "cannot tell the service manager the node is ready ($NOTIFY_SOCKET)")
        }
    }

    let grace = config.agents.iter().map(|a| a.grace).max().unwrap_or_default();
    let drain_for = config.tasks_drain;
    tokio::spawn(reload_on_sighup(options.clone(), config, runtime, net.clone()));

    // No Nagle on the API: a stream's small events (SSE chunks) go out as they are made,
    // not 40 ms later when the client's delayed ACK arrives.
    let listener = axum::serve::ListenerExt::tap_io(listener, |tcp| {
        if let Err(err) = tcp.set_nodelay(true) {
            tracing::debug!(error = %err, "cannot set TCP_NODELAY on an API connection");
        }
    });
    // Once the node may stop, the API finishes the requests under way; streams that would
    // go on (a dashboard's task feed, a follow of agent logs, a subscription to a task that
    // waits for input) are cut after API_CLOSE_WAIT, or they would hold the node up forever.
    let (stopping_tx, stopping_rx) = tokio::sync::oneshot::channel::<()>();
    let drained = {
        let (manager, net) = (manager.clone(), net.clone());
        async move {
            stop_after_drain(manager, net, drain_for).await;
            let _ = stopping_tx.send(());
        }
    };
    let server = axum::serve(listener, api::app(state).into_make_service_with_connect_info::<SocketAddr>())
        .with_graceful_shutdown(drained);
    tokio::select! {
        served = server => served.context("API server failed")?,
        () = async {
            if stopping_rx.await.is_ok() {
                tokio::time::sleep(API_CLOSE_WAIT).await;
            } else {
                std::future::pending::<()>().await;
            }
        } => info!(wait_ms = API_CLOSE_WAIT.as_millis() as u64, "closed the API's streams still open"),
    }
    // Brains hear `shutdown` and get their grace while the network still runs (they may
    // send a last message).
    brains.shutdown(grace + BRAINS_STOP_EXTRA).await;
    mcp.stop().await;
    let _ = stop_tx.send(true);
    let _ = network.task.await;
    // Writes nobody waited for (`working`, routes) reach the disk before the process ends.
    if let Err(err) = manager.flush().await {
        tracing::error!(error = %format!("{err:#}"), "task database flush at shutdown failed");
    }
    info!("node stopped");
    Ok(())
}

/// Opens the artifact store and starts the capsule runtime with every manifest in the
/// capsules directory. A manifest that does not load stops the start, naming its file.
fn start_runtime(
    options: &RunOptions,
    config: &Config,
    store: Arc<ArtifactStore>,
    ports: Ports,
) -> CliResult<Runtime> {
    let runtime = Runtime::new(
        RuntimeOptions {
            data_dir: options.data_dir.clone(),
            pooling: config.runtime.pooling,
            credentials: config.credentials.clone(),
        },
        store,
        ports,
    )
    .map_err(CliError::failed)?;
    let problems = install_all(&runtime, config, &options.data_dir);
    if !problems.is_empty() {
        return Err(CliError::usage(anyhow::anyhow!(
            "capsules that cannot run:\n  - {}",
            problems.join("\n  - ")
        )));
    }
    Ok(runtime)
}

/// Installs the capsules directory and the listed manifests; returns every problem.
fn install_all(runtime: &Runtime, config: &Config, data_dir: &std::path::Path) -> Vec<String> {
    let mut problems = runtime.install_dir(&config.runtime.capsules_dir);
    for path in &config.runtime.manifests {
        if let Err(err) = CapsuleManifest::load(path, data_dir).and_then(|m| runtime.install(m)) {
            problems.push(format!("{}: {err:#}", path.display()));
        }
    }
    problems
}

/// What the node advertises: the capsules it runs, then those its config only declares.
/// `declared`: the capsules the config declares without running them.
pub fn hosted_capsules(runtime: &Runtime, declared: &[HostedCapsule]) -> Vec<HostedCapsule> {
    let mut hosted = runtime.hosted();
    for declared in declared {
        if !hosted.iter().any(|h| h.name == declared.name) {
            hosted.push(declared.clone());
        }
    }
    hosted.truncate(murmur_protocol::limits::ADVERT_CAPSULES_MAX);
    hosted
}

/// This node's closed-mesh certificate, checked before use so a node never starts with a
/// certificate its peers would refuse.
fn own_certificate(key: &SecretKey, config: &Config) -> anyhow::Result<Option<Envelope>> {
    if !config.trust.closed {
        return Ok(None);
    }
    let path = &config.trust.cert;
    let bytes = murmur_store::file::read_bounded(path, CERT_BYTES_MAX + ENVELOPE_OVERHEAD_MAX).with_context(
        || {
            format!(
                "a closed mesh needs this node's certificate (issue one with `mur cert sign --node {}`)",
                key.node_id()
            )
        },
    )?;
    let envelope =
        Envelope::decode(&bytes).with_context(|| format!("{} is not a node certificate", path.display()))?;
    verify_cert(envelope.clone(), &config.trust.authorities, clock::now(), &key.node_id())
        .with_context(|| format!("{} cannot admit this node", path.display()))?;
    Ok(Some(envelope))
}

/// Re-reads the config file on SIGHUP and applies what can change while running: the
/// declared capsules. Other changed keys are reported as needing a restart. A config that
/// no longer validates is reported and ignored; the node keeps running as it was.
async fn reload_on_sighup(options: RunOptions, mut current: Config, runtime: Runtime, net: NetHandle) {
    let Ok(mut hup) = signal(SignalKind::hangup()) else { return };
    while hup.recv().await.is_some() {
        let next = match load_config(&options) {
            Ok(next) => next,
            Err(err) => {
                warn!(error = %err, "config reload refused; keeping the running configuration");
                continue;
            }
        };
        for problem in install_all(&runtime, &next, &options.data_dir) {
            warn!(problem = %problem, "capsule not (re)installed");
        }
        let hosted = hosted_capsules(&runtime, &next.capsules);
        match net.set_hosted(hosted.clone()).await {
            Ok(()) => info!(capsules = hosted.len(), "config reloaded: hosted capsules updated"),
            Err(err) => warn!(error = %err, "config reload: cannot update capsules"),
        }
        let restart_needed =
            Config { capsules: current.capsules.clone(), runtime: current.runtime.clone(), ..next.clone() }
                != current;
        if restart_needed {
            warn!(
                "config reload: keys other than [[capsules]] and [runtime] changed; they take effect after a restart"
            );
        }
        current = Config { capsules: next.capsules, ..current };
    }
}

/// Resolves once the node may stop. At SIGINT or SIGTERM it drains first, for at most
/// `drain_for` (`tasks.drain_secs`), with the API still serving: it takes no new tasks
/// (senders go to other nodes hosting the capsule), withdraws its capsules from the
/// directory, and waits until the tasks it runs and has queued have ended. A second signal
/// stops the wait.
async fn stop_after_drain(manager: TaskManager, net: murmur_net::NetHandle, drain_for: Duration) {
    shutdown_signal().await;
    // The service manager learns at once that the node is stopping (and why it takes time).
    if drain_for.is_zero() {
        let _ = crate::notify::notify("STOPPING=1");
        return;
    }
    let _ = crate::notify::notify("STOPPING=1\nSTATUS=draining: finishing the tasks it holds");
    manager.drain();
    if let Err(err) = net.set_hosted(Vec::new()).await {
        tracing::warn!(error = %format!("{err:#}"), "draining: cannot withdraw this node's capsules from the directory");
    }
    let started = tokio::time::Instant::now();
    info!(
        tasks = manager.busy(),
        drain_secs = drain_for.as_secs(),
        "draining: taking no new tasks and withdrew this node's capsules; waiting for the tasks it holds"
    );
    let drained = async {
        while manager.busy() > 0 && started.elapsed() < drain_for {
            tokio::time::sleep(Duration::from_millis(100)).await;
        }
    };
    tokio::select! {
        () = drained => {}
        () = shutdown_signal() => info!("a second signal: stopping without waiting for the tasks"),
    }
    let left = manager.busy();
    let waited_ms = u64::try_from(started.elapsed().as_millis()).unwrap_or(u64::MAX);
    if left == 0 {
        info!(waited_ms, "drained: every task this node held has ended");
    } else {
        tracing::warn!(
            left,
            waited_ms,
            "stopping with tasks unfinished: those running end failed at the next start, queued ones run then"
        );
    }
}

/// Resolves on SIGINT or SIGTERM.
pub async fn shutdown_signal() {
    let mut term = signal(SignalKind::terminate()).expect("installing a SIGTERM handler succeeds on Unix");
    let mut int = signal(SignalKind::interrupt()).expect("installing a SIGINT handler succeeds on Unix");
    let which = tokio::select! {
        _ = term.recv() => "SIGTERM",
        _ = int.recv() => "SIGINT",
    };
    info!(signal = which, "shutting down");
}
