//! The host functions of one run: the one implementation of `murmur:brain@0.1.0` that a
//! component calls through the runtime and the rhai and JavaScript brains call through
//! [`crate::lang::script`]. It is the runtime's [`BrainPort`] for that run.

use std::sync::Arc;
use std::sync::atomic::{AtomicU64, Ordering};
use std::time::{Duration, Instant};

use base64::Engine as _;
use murmur_runtime::brain::{ChatDelta, ChatRequest, Event, EventEnvelope};
use murmur_runtime::ports::{BrainPort, PortFuture};
use tokio::sync::watch;

use crate::agent::{Agent, JobKind, sender_key};
use crate::clock;

/// Chat streams one run may hold open.
pub const STREAMS_PER_RUN_MAX: usize = 64;

/// One run's host.
pub struct RunHost {
    pub(crate) agent: Arc<Agent>,
    /// True once the run is being stopped (reload past its grace, shutdown, a limit).
    stop: watch::Receiver<bool>,
    /// When the run last came back from a wait (ms on [`RunHost::started`]'s clock): how
    /// long it has worked without waiting.
    busy_since_ms: AtomicU64,
    started: Instant,
}

impl std::fmt::Debug for RunHost {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("RunHost").field("agent", &self.agent.name()).finish_non_exhaustive()
    }
}

impl RunHost {
    pub(crate) fn new(agent: Arc<Agent>, stop: watch::Receiver<bool>) -> Arc<Self> {
        Arc::new(Self { agent, stop, busy_since_ms: AtomicU64::new(0), started: Instant::now() })
    }

    /// Whether the run must stop now: it is being stopped, or it worked longer than its
    /// `busy` bound without waiting. The interpreters ask this as they go.
    pub(crate) fn must_stop(&self) -> Option<String> {
        if *self.stop.borrow() {
            return Some("the run was stopped".into());
        }
        let busy_ms = self.elapsed_ms().saturating_sub(self.busy_since_ms.load(Ordering::Relaxed));
        let limit = self.agent.config.busy;
        (busy_ms >= limit.as_millis() as u64).then(|| {
            format!(
                "worked {busy_ms} ms without waiting (its limit is {} ms: an infinite loop?)",
                limit.as_millis()
            )
        })
    }

    fn elapsed_ms(&self) -> u64 {
        u64::try_from(self.started.elapsed().as_millis()).unwrap_or(u64::MAX)
    }

    /// The run waited: its busy clock starts again.
    pub(crate) fn waited(&self) {
        self.busy_since_ms.store(self.elapsed_ms(), Ordering::Relaxed);
    }

    /// Err once the run is being stopped: a stopped run gets nothing from the host.
    fn live(&self) -> Result<(), String> {
        if *self.stop.borrow() { Err("the run is stopping".to_owned()) } else { Ok(()) }
    }

    /// Waits for `future` unless the run is stopped first (or already is).
    async fn unless_stopped<T>(&self, future: impl Future<Output = T>) -> Result<T, String> {
        self.live()?;
        let mut stop = self.stop.clone();
        let answer = tokio::select! {
            biased;
            _ = stop.wait_for(|stopped| *stopped) => Err("the run is stopping".to_owned()),
            value = future => Ok(value),
        };
        self.waited();
        answer
    }

    async fn sleep_ms(&self, ms: u64) -> Result<(), String> {
        self.unless_stopped(tokio::time::sleep(Duration::from_millis(ms))).await
    }

    fn timer(&self, due_ms: u64) -> Result<String, String> {
        self.live()?;
        let id = uuid::Uuid::new_v4().to_string();
        self.agent.timers().add(due_ms, id.clone()).map_err(|e| e.to_string())?;
        self.agent.timers_changed.notify_one();
        Ok(id)
    }

    fn future(&self, ts: u64) -> Result<u64, String> {
        let now = self.time_now();
        if ts <= now {
            return Err(format!("{ts} is not in the future (now is {now})"));
        }
        Ok(ts)
    }

    fn node(&self) -> Result<Arc<crate::brains::Inner>, String> {
        self.agent.node.upgrade().ok_or_else(|| "the node is shutting down".to_owned())
    }
}

impl BrainPort for RunHost {
    fn subscribe_agent(&self, agent: String) -> Result<String, String> {
        self.live()?;
        let key = sender_key(&agent)?;
        let mut subscriptions = self.agent.subscriptions();
        if !subscriptions.agents.contains_key(&key)
            && subscriptions.agents.len() >= crate::agent::SUBSCRIPTIONS_MAX
        {
            return Err(format!(
                "this run already subscribed to {} senders",
                crate::agent::SUBSCRIPTIONS_MAX
            ));
        }
        let id = subscriptions.agents.entry(key).or_insert_with(|| uuid::Uuid::new_v4().to_string()).clone();
        Ok(id)
    }

    fn unsubscribe_agent(&self, id: String) -> Result<(), String> {
        let mut subscriptions = self.agent.subscriptions();
        let before = subscriptions.agents.len();
        subscriptions.agents.retain(|_, uuid| *uuid != id);
        if subscriptions.agents.len() == before {
            return Err(format!("{id} is no agent subscription of this run"));
        }
        Ok(())
    }

    fn subscribe_lifecycle(&self) -> Result<String, String> {
        self.live()?;
        let mut subscriptions = self.agent.subscriptions();
        if subscriptions.lifecycle_used {
            return Err("this run already subscribed to lifecycle events (one subscription per run)".into());
        }
        let id = uuid::Uuid::new_v4().to_string();
        subscriptions.lifecycle = Some(id.clone());
        subscriptions.lifecycle_used = true;
        Ok(id)
    }

    fn unsubscribe_lifecycle(&self, id: String) {
        let mut subscriptions = self.agent.subscriptions();
        if subscriptions.lifecycle.as_deref() == Some(id.as_str()) {
            subscriptions.lifecycle = None;
        }
    }

    fn send_agent(&self, agent: String, payload: String) -> PortFuture<'_, Result<(), String>> {
        Box::pin(async move {
            let node = self.node()?;
            let sent = self.unless_stopped(node.send(self.agent.name(), &agent, payload)).await?;
            sent.map_err(|e| e.message)
        })
    }

    fn recv(&self) -> PortFuture<'_, Result<EventEnvelope, String>> {
        Box::pin(async move {
            let timeout = self.agent.config.recv_timeout;
            match self.unless_stopped(tokio::time::timeout(timeout, self.agent.inbox.next())).await? {
                Ok(event) => Ok(event),
                Err(_) => Err(format!("no event within recv_timeout_secs ({} s)", timeout.as_secs())),
            }
        })
    }

    fn try_recv(&self) -> Option<EventEnvelope> {
        self.live().ok()?;
        self.agent.inbox.pop()
    }

    fn time_now(&self) -> u64 {
        murmur_config::clock::now().0
    }

    fn time_format(&self, ts: u64, format: String) -> Result<String, String> {
        clock::format(ts, &format)
    }

    fn wait_until(&self, ts: u64) -> Result<String, String> {
        let ts = self.future(ts)?;
        self.timer(ts)
    }

    fn wait_for(&self, ms: u64) -> Result<String, String> {
        self.timer(self.time_now().saturating_add(ms))
    }

    fn wait_cron(&self, spec: String) -> Result<String, String> {
        let due = clock::next_cron(&spec, self.time_now())?;
        self.timer(due)
    }

    fn cancel_timer(&self, id: String) -> bool {
        if self.live().is_err() {
            return false;
        }
        let cancelled = self.agent.timers().cancel(&id);
        self.agent.timers_changed.notify_one();
        cancelled
    }

    fn sleep_for(&self, ms: u64) -> PortFuture<'_, Result<(), String>> {
        Box::pin(self.sleep_ms(ms))
    }

    fn sleep_until(&self, ts: u64) -> PortFuture<'_, Result<(), String>> {
        Box::pin(async move {
            let now = self.time_now();
            if ts <= now {
                return Err(format!("{ts} is not in the future (now is {now})"));
            }
            self.sleep_ms(ts - now).await
        })
    }

    fn sleep_cron(&self, spec: String) -> PortFuture<'_, Result<(), String>> {
        Box::pin(async move {
            let now = self.time_now();
            let due = clock::next_cron(&spec, now)?;
            self.sleep_ms(due.saturating_sub(now)).await
        })
    }

    fn whoami(&self) -> String {
        self.agent.name().to_owned()
    }

    fn log(&self, level: String, message: String) {
        self.agent.logs.brain(&level, &message);
    }

    fn new_uuid(&self) -> String {
        uuid::Uuid::new_v4().to_string()
    }

    fn base64_encode(&self, bytes: Vec<u8>) -> String {
        base64::engine::general_purpose::STANDARD.encode(bytes)
    }

    fn base64_decode(&self, data: String) -> Result<Vec<u8>, String> {
        base64::engine::general_purpose::STANDARD
            .decode(data)
            .map_err(|e| format!("not standard padded base64: {e}"))
    }

    fn memory_get(&self, key: String) -> PortFuture<'_, Result<Option<String>, String>> {
        Box::pin(async move {
            self.live()?;
            let (memory, agent) = (self.node()?.memory.clone(), self.agent.name().to_owned());
            spawn_blocking(move || memory.get(&agent, &key)).await
        })
    }

    fn memory_set(&self, key: String, value: String) -> PortFuture<'_, Result<(), String>> {
        Box::pin(async move {
            self.live()?;
            let (memory, agent) = (self.node()?.memory.clone(), self.agent.name().to_owned());
            spawn_blocking(move || memory.set(&agent, &key, &value)).await
        })
    }

    fn memory_remove(&self, key: String) -> PortFuture<'_, Result<bool, String>> {
        Box::pin(async move {
            self.live()?;
            let (memory, agent) = (self.node()?.memory.clone(), self.agent.name().to_owned());
            spawn_blocking(move || memory.remove(&agent, &key)).await
        })
    }

    fn subscribe_endpoint(&self, model: String) -> Result<String, String> {
        self.live()?;
        self.node()?.endpoints.subscribe(self.agent.name(), &model)
    }

    fn unsubscribe_endpoint(&self, id: String) -> Result<(), String> {
        let node = self.node()?;
        node.endpoints.unsubscribe(&node, self.agent.name(), &id)
    }

    fn stream_endpoint(&self, session: String, delta: ChatDelta) -> Result<(), String> {
        self.live()?;
        let node = self.node()?;
        node.endpoints.stream(&node, self.agent.name(), &session, crate::endpoint::from_wit_delta(delta))
    }

    fn chat_stream(&self, request: ChatRequest) -> Result<String, String> {
        self.live()?;
        let node = self.node()?;
        murmur_protocol::model::check_model_name(&request.model)?;
        let wire = crate::endpoint::from_wit_request(&request);
        wire.check().map_err(|(field, reason)| format!("the request's {field} {reason}"))?;
        let (host, agent) = (node.clone(), self.agent.clone());
        self.agent.spawn_job(&host, JobKind::ChatStream, STREAMS_PER_RUN_MAX, |id| {
            forward_chat(node, agent, id, request.provider, request.model, wire)
        })
    }

    fn cancel_stream(&self, id: String) -> bool {
        self.agent.cancel_job(&id, JobKind::ChatStream)
    }

    fn call_tool(&self, server: String, name: String, arguments: String) -> Result<String, String> {
        self.live()?;
        crate::tooling::call_tool(&self.node()?, &self.agent, server, name, arguments)
    }

    fn subscribe_resource_list(&self, server: String) -> Result<String, String> {
        self.live()?;
        crate::tooling::subscribe(&self.node()?, &self.agent, server, None)
    }

    fn subscribe_resource(&self, server: String, uri: String) -> Result<String, String> {
        self.live()?;
        crate::tooling::subscribe(&self.node()?, &self.agent, server, Some(uri))
    }

    fn unsubscribe_resource(&self, id: String) -> bool {
        crate::tooling::unsubscribe(&self.agent, &id)
    }
}

/// One chat stream of `agent`: opened on this node's endpoint when an agent of this node
/// serves the model, else through the mesh port (another node, or an upstream provider);
/// its deltas become `chat-delta` events tagged `id`, paced by the brain's reading, then
/// one `chat-end` (after an `error` event when the stream failed).
async fn forward_chat(
    node: Arc<crate::brains::Inner>,
    agent: Arc<Agent>,
    id: String,
    provider: Option<String>,
    model: String,
    request: murmur_protocol::model::ChatRequest,
) {
    let opened: Result<Box<dyn crate::brains::ChatStream>, String> =
        if provider.is_none() && node.endpoints.serves(&model) {
            node.endpoints.open(&node, &model, request).map(|s| Box::new(s) as _).map_err(|e| e.to_string())
        } else {
            node.mesh.open_chat(agent.name(), provider, model, request).await
        };
    drop(node);
    let error = match opened {
        Err(error) => Some(error),
        Ok(mut stream) => loop {
            match stream.next().await {
                Ok(delta) => {
                    agent
                        .push_paced(id.clone(), Event::ChatDelta(crate::endpoint::to_wit_delta(delta)))
                        .await;
                }
                Err(end) => break end,
            }
        },
    };
    if let Some(error) = error {
        agent.push_paced(id.clone(), Event::Error(error)).await;
    }
    agent.push_paced(id, Event::ChatEnd).await;
}

async fn spawn_blocking<T: Send + 'static>(
    work: impl FnOnce() -> Result<T, String> + Send + 'static,
) -> Result<T, String> {
    tokio::task::spawn_blocking(work).await.map_err(|e| format!("memory: {e}"))?
}

/// The timers of `agent`, fired into its inbox as they come due; runs as long as the
/// agent does.
pub(crate) async fn fire_timers(agent: Arc<Agent>, mut stop: watch::Receiver<bool>) {
    loop {
        let next = agent.timers().poll_timeout();
        let wait = next.map(|due| Duration::from_millis(due.saturating_sub(murmur_config::clock::now().0)));
        tokio::select! {
            () = async {
                match wait {
                    Some(wait) => tokio::time::sleep(wait).await,
                    None => std::future::pending().await,
                }
            } => {}
            () = agent.timers_changed.notified() => continue,
            _ = stop.changed() => return,
        }
        // Expired and pushed under the timers' lock: a run that ends meanwhile clears its
        // timers first, so no timer of an old run fires into the next.
        let mut timers = agent.timers();
        for id in timers.expire(murmur_config::clock::now().0) {
            // A full inbox drops the timer (counted): the brain is not reading.
            let _ = agent.push(id, Event::Timer);
        }
        drop(timers);
    }
}
