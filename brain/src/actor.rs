//! One agent's actor: it runs the brain, watches its source, and decides what follows each
//! run. A valid change of the source tells the running brain `reload` (when it subscribed
//! to lifecycle events) and gives it its grace to exit, then runs the new code; an invalid
//! change is a reload-failure `error` event and the live run goes on. A run that traps or
//! ends unexpectedly is run again after a back-off (1 s, doubling to 60 s, back to 1 s
//! after a run that lasted a minute). At shutdown a subscribed brain is told `shutdown`
//! and given its grace; one that did not subscribe is stopped at once.

use std::sync::Arc;
use std::time::{Duration, Instant, SystemTime};

use murmur_protocol::Digest;
use murmur_runtime::brain::Event;
use tokio::sync::watch;
use tracing::Level;

use crate::agent::{Agent, State};
use crate::brains::Inner;
use crate::lang::{self, Compiled};
use crate::run::{self, RunHost};
use crate::source::Source;

/// How often a brain's source is checked for a change.
pub const WATCH_EVERY: Duration = Duration::from_millis(500);
/// The first wait before a failed run runs again, and the longest.
pub const BACKOFF_MIN: Duration = Duration::from_secs(1);
pub const BACKOFF_MAX: Duration = Duration::from_secs(60);
/// A run that lasted this long resets the back-off.
pub const STABLE_RUN: Duration = Duration::from_secs(60);
/// How long a stopped run may take to let go (a script finishing its current step).
const STOP_WAIT: Duration = Duration::from_secs(5);

/// What a brain's source looked like when last checked.
struct Watched {
    stamp: Option<(SystemTime, u64)>,
    digest: Option<Digest>,
}

/// The file whose change means `agent`'s source may have changed.
pub(crate) fn watched_path(agent: &Agent, node: &Inner) -> std::path::PathBuf {
    match &agent.config.source {
        Source::File(path) => path.clone(),
        Source::Stored { .. } => node.store.root().join("index.json"),
    }
}

/// A file's modification time and size.
pub(crate) fn stamp(path: &std::path::Path) -> Option<(SystemTime, u64)> {
    let meta = std::fs::metadata(path).ok()?;
    Some((meta.modified().ok()?, meta.len()))
}

/// Every agent's source, checked every [`WATCH_EVERY`] by one task (each distinct file
/// once), and each agent whose file changed told so: idle brains cost no wake-ups of
/// their own.
pub(crate) async fn watch_sources(node: Arc<Inner>) {
    let mut shutdown = node.shutdown.subscribe();
    let mut stamps: std::collections::BTreeMap<std::path::PathBuf, Option<(SystemTime, u64)>> =
        std::collections::BTreeMap::new();
    loop {
        let mut by_path: std::collections::BTreeMap<std::path::PathBuf, Vec<Arc<Agent>>> =
            std::collections::BTreeMap::new();
        for agent in node.all() {
            by_path.entry(watched_path(&agent, &node)).or_default().push(agent);
        }
        for (path, agents) in by_path {
            let now = stamp(&path);
            match stamps.insert(path, now) {
                Some(before) if before != now => agents.iter().for_each(|a| a.source_changed.notify_one()),
                _ => {}
            }
        }
        tokio::select! {
            () = tokio::time::sleep(WATCH_EVERY) => {}
            _ = shutdown.changed() => return,
        }
    }
}

impl Watched {
    /// A new version of the source, when it changed since the last look.
    async fn changed(
        &mut self,
        agent: &Arc<Agent>,
        node: &Arc<Inner>,
    ) -> Option<Result<(Compiled, Digest), String>> {
        let now = stamp(&watched_path(agent, node));
        if now == self.stamp {
            return None;
        }
        self.stamp = now;
        let (agent, node, seen) = (agent.clone(), node.clone(), self.digest);
        let outcome = off_executor(move || {
            let read = agent.config.source.read(&node.store, agent.config.language)?;
            if Some(read.digest) == seen {
                return Ok(None);
            }
            let compiled = lang::compile(&read, &agent.config, &node.runtime);
            Ok(Some((read.digest, compiled)))
        })
        .await;
        match outcome {
            Err(why) => Some(Err(why)),
            Ok(None) => None,
            Ok(Some((digest, compiled))) => {
                self.digest = Some(digest);
                Some(compiled.map(|compiled| (compiled, digest)))
            }
        }
    }
}

/// Loads the source as it is now.
async fn load(agent: &Arc<Agent>, node: &Arc<Inner>) -> Result<(Compiled, Digest), String> {
    let (agent, node) = (agent.clone(), node.clone());
    off_executor(move || {
        let read = agent.config.source.read(&node.store, agent.config.language)?;
        agent.set_language(read.language);
        lang::compile(&read, &agent.config, &node.runtime).map(|compiled| (compiled, read.digest))
    })
    .await
}

/// Reading (up to 16 MiB), hashing and compiling (a component: up to seconds) happen on a
/// blocking thread, never on the executor.
async fn off_executor<T: Send + 'static>(
    work: impl FnOnce() -> Result<T, String> + Send + 'static,
) -> Result<T, String> {
    tokio::task::spawn_blocking(work).await.map_err(|e| format!("loading the brain failed: {e}"))?
}

/// Why a run is being ended by the host.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
enum Ending {
    Reload,
    Shutdown,
}

/// Runs `agent` until the node shuts down.
pub(crate) async fn supervise(agent: Arc<Agent>, node: Arc<Inner>) {
    let mut shutdown = node.shutdown.subscribe();
    let (timers_stop, timers_stopped) = watch::channel(false);
    tokio::spawn(run::fire_timers(agent.clone(), timers_stopped));
    let mut watched = Watched { stamp: stamp(&watched_path(&agent, &node)), digest: None };
    let mut backoff = BACKOFF_MIN;
    let mut ready: Option<(Compiled, Digest)> = None;
    'runs: while !*shutdown.borrow() {
        let (compiled, digest) = match ready.take() {
            Some(ready) => ready,
            None => match load(&agent, &node).await {
                Ok(loaded) => loaded,
                Err(why) => {
                    agent
                        .logs
                        .host(Level::ERROR, &format!("the brain does not load: {why}; waiting for a change"));
                    agent.set_state(State::Failed(why));
                    loop {
                        tokio::select! {
                            () = agent.source_changed.notified() => {
                                if watched.changed(&agent, &node).await.is_some() {
                                    continue 'runs;
                                }
                            }
                            _ = shutdown.changed() => break 'runs,
                        }
                    }
                }
            },
        };
        watched.digest = Some(digest);
        agent.begin_run();
        agent.set_state(State::Running);
        agent.stats.runs.fetch_add(1, std::sync::atomic::Ordering::Relaxed);
        let (stop, stopped) = watch::channel(false);
        let host = RunHost::new(agent.clone(), stopped);
        let mut running = lang::start(&compiled, host, &node.runtime);
        let started = Instant::now();
        agent
            .logs
            .host(Level::INFO, &format!("run started ({})", agent.language().map_or("?", |l| l.as_str())));

        let mut ending: Option<Ending> = None;
        let mut next: Option<(Compiled, Digest)> = None;
        let mut deadline: Option<tokio::time::Instant> = None;
        let outcome = loop {
            tokio::select! {
                outcome = &mut running.done => {
                    break outcome.unwrap_or_else(|_| Err("the run ended without an answer".into()));
                }
                () = agent.source_changed.notified(), if ending.is_none() => {
                    match watched.changed(&agent, &node).await {
                        None => {}
                        Some(Ok(new)) => {
                            agent.logs.host(Level::INFO, "the brain's source changed: reloading");
                            next = Some(new);
                            ending = Some(Ending::Reload);
                            let told = agent.lifecycle(Event::Reload);
                            deadline = Some(tokio::time::Instant::now() + if told { agent.config.grace } else { Duration::ZERO });
                        }
                        Some(Err(why)) => {
                            agent.logs.host(Level::WARN, &format!("the edit does not load, the running brain goes on: {why}"));
                            agent.lifecycle(Event::Error(format!("reload failed: {why}")));
                        }
                    }
                }
                _ = shutdown.changed(), if ending != Some(Ending::Shutdown) => {
                    ending = Some(Ending::Shutdown);
                    let told = agent.lifecycle(Event::Shutdown);
                    let at = tokio::time::Instant::now() + if told { agent.config.grace } else { Duration::ZERO };
                    // A reload's grace already running is not extended by the shutdown.
                    deadline = Some(deadline.map_or(at, |earlier| earlier.min(at)));
                }
                () = sleep_until(deadline), if deadline.is_some() => {
                    let _ = stop.send(true);
                    running.abort();
                    if tokio::time::timeout(STOP_WAIT, &mut running.done).await.is_err() {
                        // Every host call of a stopped run errs and its interpreter is told
                        // to stop: it ends soon. No new run starts beside it.
                        agent.logs.host(Level::ERROR, "the run did not stop within 5 s; waiting for it before anything else runs");
                        let _ = (&mut running.done).await;
                    }
                    break Err("stopped by the host".into());
                }
            }
        };
        let _ = stop.send(true);
        // What belonged to the run goes with it now, not when the next one starts.
        agent.end_run();
        match ending {
            Some(Ending::Shutdown) => {
                agent.logs.host(Level::INFO, &format!("run ended at shutdown: {}", describe(&outcome)));
                break;
            }
            Some(Ending::Reload) => {
                agent.logs.host(Level::INFO, &format!("run ended for a reload: {}", describe(&outcome)));
                backoff = BACKOFF_MIN;
                ready = next;
            }
            None => {
                agent.stats.restarts.fetch_add(1, std::sync::atomic::Ordering::Relaxed);
                if started.elapsed() >= STABLE_RUN {
                    backoff = BACKOFF_MIN;
                }
                agent.logs.host(
                    Level::WARN,
                    &format!(
                        "run ended unexpectedly ({}); restarting in {} s",
                        describe(&outcome),
                        backoff.as_secs()
                    ),
                );
                agent.set_state(State::Restarting);
                let wait = tokio::time::sleep(backoff);
                tokio::pin!(wait);
                loop {
                    tokio::select! {
                        () = &mut wait => break,
                        () = agent.source_changed.notified() => {
                            // A fix restarts it at once.
                            match watched.changed(&agent, &node).await {
                                Some(Ok(new)) => {
                                    ready = Some(new);
                                    break;
                                }
                                Some(Err(why)) => agent.logs.host(Level::WARN, &format!("the edit does not load: {why}")),
                                None => {}
                            }
                        }
                        _ = shutdown.changed() => break 'runs,
                    }
                }
                if ready.is_none() {
                    ready = Some((compiled, digest));
                    backoff = (backoff * 2).min(BACKOFF_MAX);
                } else {
                    backoff = BACKOFF_MIN;
                }
            }
        }
    }
    agent.set_state(State::Stopped);
    let _ = timers_stop.send(true);
}

async fn sleep_until(deadline: Option<tokio::time::Instant>) {
    match deadline {
        Some(at) => tokio::time::sleep_until(at).await,
        None => std::future::pending().await,
    }
}

fn describe(outcome: &Result<(), String>) -> String {
    match outcome {
        Ok(()) => "it returned".into(),
        Err(why) => why.clone(),
    }
}
