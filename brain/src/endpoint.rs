//! The endpoint: agents served as OpenAI-compatible models. An agent's run subscribes a
//! model ([`Endpoints::subscribe`]); a chat request for it opens a [`Session`]: the agent
//! receives one `endpoint-message` with a fresh session id, streams deltas back with
//! `stream-endpoint`, and a delta with a finish reason ends the reply. Every session ends
//! exactly once — normally, or with an error when the client went away (its [`Session`]
//! was dropped), the agent unsubscribed, or its run ended — and the agent hears of it as
//! `endpoint-session-end`.
//!
//! The HTTP side and the network (requests from other nodes) hold [`Session`]s; this
//! module knows neither. Bounds: [`SESSIONS_MAX`] per node (a refusal is the caller's
//! 429), [`SESSION_DELTAS_MAX`] deltas buffered per session (`stream-endpoint` errs past
//! it: the client reads slower than the agent streams).

use std::collections::{BTreeMap, HashMap};
use std::sync::atomic::{AtomicU64, Ordering};
use std::sync::{Mutex, MutexGuard, PoisonError};

use murmur_protocol::model::{self, ChatDelta, ChatRequest, check_model_name};
use murmur_runtime::brain as wit;
use tokio::sync::{mpsc, oneshot, watch};

use crate::agent::Agent;

/// Sessions one node keeps open at once.
pub const SESSIONS_MAX: usize = 4096;
/// Deltas buffered per session before `stream-endpoint` errs.
pub const SESSION_DELTAS_MAX: usize = 1024;
/// Models one run may subscribe.
pub const MODELS_PER_RUN_MAX: usize = 16;

/// Why a session could not open; each kind means the request was not taken.
#[derive(Clone, Debug, PartialEq, Eq, thiserror::Error)]
pub enum OpenError {
    #[error("no agent of this node serves model `{0}`")]
    NotServed(String),
    #[error("{0}")]
    Busy(String),
}

/// How a session ended, for counters (`murmur_endpoint_sessions_ended_total{outcome}`).
#[derive(Clone, Copy, Debug, PartialEq, Eq, PartialOrd, Ord)]
pub enum Outcome {
    /// The agent streamed a finish reason.
    Completed,
    /// The client went away first.
    ClientGone,
    /// The agent unsubscribed the model.
    Unsubscribed,
    /// The agent's run ended (reload, restart, shutdown).
    RunEnded,
}

impl Outcome {
    pub const ALL: [Self; 4] = [Self::Completed, Self::ClientGone, Self::Unsubscribed, Self::RunEnded];

    #[must_use]
    pub const fn as_str(self) -> &'static str {
        match self {
            Self::Completed => "completed",
            Self::ClientGone => "client_gone",
            Self::Unsubscribed => "unsubscribed",
            Self::RunEnded => "run_ended",
        }
    }

    const fn error(self) -> Option<&'static str> {
        match self {
            Self::Completed => None,
            Self::ClientGone => Some("the client went away"),
            Self::Unsubscribed => Some("the agent unsubscribed the model"),
            Self::RunEnded => Some("the agent's run ended"),
        }
    }
}

/// Counters of the endpoint.
#[derive(Debug, Default)]
pub struct EndpointStats {
    pub opened: AtomicU64,
    pub refused_busy: AtomicU64,
    pub deltas: AtomicU64,
    ended: Mutex<BTreeMap<Outcome, u64>>,
}

impl EndpointStats {
    /// Sessions ended, by outcome (every outcome listed, zeros included).
    #[must_use]
    pub fn ended(&self) -> Vec<(&'static str, u64)> {
        let ended = self.ended.lock().unwrap_or_else(PoisonError::into_inner);
        Outcome::ALL.iter().map(|o| (o.as_str(), ended.get(o).copied().unwrap_or(0))).collect()
    }
}

struct Served {
    agent: String,
    subscription: String,
}

struct Open {
    agent: String,
    subscription: String,
    deltas: mpsc::Sender<ChatDelta>,
    end: oneshot::Sender<Option<String>>,
}

#[derive(Default)]
struct State {
    /// Model → who serves it here.
    models: BTreeMap<String, Served>,
    sessions: HashMap<String, Open>,
}

/// The models of this node's agents and their open sessions.
pub struct Endpoints {
    state: Mutex<State>,
    models: watch::Sender<Vec<String>>,
    pub stats: EndpointStats,
}

impl std::fmt::Debug for Endpoints {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("Endpoints").field("models", &*self.models.borrow()).finish_non_exhaustive()
    }
}

impl Default for Endpoints {
    fn default() -> Self {
        Self {
            state: Mutex::default(),
            models: watch::channel(Vec::new()).0,
            stats: EndpointStats::default(),
        }
    }
}

/// An open session, held by whoever serves the client: deltas in order, then the end.
/// Dropping it before the end ends the session with "the client went away".
#[derive(Debug)]
pub struct Session {
    pub id: String,
    deltas: mpsc::Receiver<ChatDelta>,
    end: Option<oneshot::Receiver<Option<String>>>,
    endpoints: std::sync::Weak<crate::brains::Inner>,
}

impl Session {
    /// The next delta; `Err` once the session ended, with its error (none: completed).
    /// Cancel-safe.
    pub async fn next(&mut self) -> Result<ChatDelta, Option<String>> {
        if let Some(delta) = self.deltas.recv().await {
            return Ok(delta);
        }
        let Some(end) = self.end.take() else { return Err(Some("the session already ended".into())) };
        Err(end.await.unwrap_or_else(|_| Some("the session ended without a word".into())))
    }

    /// A delta already buffered, without waiting (for batching).
    pub fn try_next(&mut self) -> Option<ChatDelta> {
        self.deltas.try_recv().ok()
    }
}

impl Drop for Session {
    fn drop(&mut self) {
        if let Some(inner) = self.endpoints.upgrade() {
            inner.endpoints.end(&inner, &self.id, Outcome::ClientGone);
        }
    }
}

impl Endpoints {
    fn state(&self) -> MutexGuard<'_, State> {
        self.state.lock().unwrap_or_else(PoisonError::into_inner)
    }

    /// The models served here, sorted.
    #[must_use]
    pub fn models(&self) -> Vec<String> {
        self.models.borrow().clone()
    }

    /// Told whenever the models served here change (the node republishes its advert).
    #[must_use]
    pub fn watch(&self) -> watch::Receiver<Vec<String>> {
        self.models.subscribe()
    }

    /// Whether an agent of this node serves `model`.
    #[must_use]
    pub fn serves(&self, model: &str) -> bool {
        self.state().models.contains_key(model)
    }

    /// Sessions open now.
    #[must_use]
    pub fn open_sessions(&self) -> usize {
        self.state().sessions.len()
    }

    fn publish(&self, state: &State) {
        let models: Vec<String> = state.models.keys().cloned().collect();
        self.models.send_if_modified(|current| {
            let changed = *current != models;
            *current = models;
            changed
        });
    }

    /// Agent `agent` serves `model`: the subscription's UUID.
    pub(crate) fn subscribe(&self, agent: &str, model: &str) -> Result<String, String> {
        check_model_name(model)?;
        let mut state = self.state();
        if let Some(served) = state.models.get(model) {
            return Err(if served.agent == agent {
                format!("this agent already serves model `{model}` (subscription {})", served.subscription)
            } else {
                format!("model `{model}` is already served by agent `{}` on this node", served.agent)
            });
        }
        if state.models.values().filter(|s| s.agent == agent).count() >= MODELS_PER_RUN_MAX {
            return Err(format!("a run serves at most {MODELS_PER_RUN_MAX} models"));
        }
        if state.models.len() >= model::ADVERT_MODELS_MAX {
            return Err(format!(
                "this node serves {} models, as many as it may advertise",
                model::ADVERT_MODELS_MAX
            ));
        }
        let id = uuid::Uuid::new_v4().to_string();
        state.models.insert(model.to_owned(), Served { agent: agent.to_owned(), subscription: id.clone() });
        self.publish(&state);
        Ok(id)
    }

    /// Agent `agent` stops serving the model of subscription `id`: its open sessions end
    /// with an error.
    pub(crate) fn unsubscribe(
        &self,
        inner: &crate::brains::Inner,
        agent: &str,
        id: &str,
    ) -> Result<(), String> {
        let ended = {
            let mut state = self.state();
            let Some(model) = state
                .models
                .iter()
                .find(|(_, s)| s.agent == agent && s.subscription == id)
                .map(|(m, _)| m.clone())
            else {
                return Err(format!("{id} is no endpoint subscription of this run"));
            };
            state.models.remove(&model);
            self.publish(&state);
            take_sessions(&mut state, |open| open.subscription == id)
        };
        self.finish(inner, ended, Outcome::Unsubscribed, true);
        Ok(())
    }

    /// Agent `agent`'s run ended: its models and sessions go with it (the agent is not
    /// told: its inbox went with the run).
    pub(crate) fn end_run(&self, inner: &crate::brains::Inner, agent: &str) {
        let ended = {
            let mut state = self.state();
            let before = state.models.len();
            state.models.retain(|_, s| s.agent != agent);
            if state.models.len() != before {
                self.publish(&state);
            }
            take_sessions(&mut state, |open| open.agent == agent)
        };
        self.finish(inner, ended, Outcome::RunEnded, false);
    }

    /// Opens a session on `model` for `request`: the serving agent gets the request.
    pub(crate) fn open(
        &self,
        inner: &std::sync::Arc<crate::brains::Inner>,
        model: &str,
        request: ChatRequest,
    ) -> Result<Session, OpenError> {
        let mut state = self.state();
        let Some(served) = state.models.get(model) else {
            return Err(OpenError::NotServed(model.to_owned()));
        };
        let (agent_name, subscription) = (served.agent.clone(), served.subscription.clone());
        if state.sessions.len() >= SESSIONS_MAX {
            self.stats.refused_busy.fetch_add(1, Ordering::Relaxed);
            return Err(OpenError::Busy(format!(
                "this node has {SESSIONS_MAX} endpoint sessions open, its limit"
            )));
        }
        let Some(agent) = inner.agent(&agent_name) else {
            return Err(OpenError::NotServed(model.to_owned()));
        };
        let id = uuid::Uuid::new_v4().to_string();
        let message = wit::EndpointMessage {
            session: id.clone(),
            messages: request.messages.into_iter().map(wit_message).collect(),
            tools: request.tools.into_iter().map(wit_tool).collect(),
            params: request.params,
        };
        // Pushed under the lock: the session exists when the agent can first see it.
        if let Err(full) = agent.push(subscription.clone(), wit::Event::EndpointMessage(message)) {
            self.stats.refused_busy.fetch_add(1, Ordering::Relaxed);
            return Err(OpenError::Busy(format!("agent `{agent_name}`: {full}")));
        }
        let (deltas_tx, deltas) = mpsc::channel(SESSION_DELTAS_MAX);
        let (end_tx, end) = oneshot::channel();
        state
            .sessions
            .insert(id.clone(), Open { agent: agent_name, subscription, deltas: deltas_tx, end: end_tx });
        self.stats.opened.fetch_add(1, Ordering::Relaxed);
        Ok(Session { id, deltas, end: Some(end), endpoints: std::sync::Arc::downgrade(inner) })
    }

    /// Agent `agent` streams `delta` to `session`; a finish reason ends it.
    pub(crate) fn stream(
        &self,
        inner: &crate::brains::Inner,
        agent: &str,
        session: &str,
        delta: ChatDelta,
    ) -> Result<(), String> {
        delta.check()?;
        let finished = delta.finish_reason.is_some();
        {
            let state = self.state();
            let Some(open) = state.sessions.get(session).filter(|o| o.agent == agent) else {
                return Err(format!(
                    "{session} is no open endpoint session of this agent (it ended, or never was)"
                ));
            };
            open.deltas.try_send(delta).map_err(|e| match e {
                mpsc::error::TrySendError::Full(_) => format!(
                    "session {session} has {SESSION_DELTAS_MAX} deltas buffered: its client reads slower than you stream; wait and retry"
                ),
                mpsc::error::TrySendError::Closed(_) => format!("session {session} ended"),
            })?;
        }
        self.stats.deltas.fetch_add(1, Ordering::Relaxed);
        if finished {
            self.end(inner, session, Outcome::Completed);
        }
        Ok(())
    }

    /// Ends `session` (if still open) with `outcome`.
    pub(crate) fn end(&self, inner: &crate::brains::Inner, session: &str, outcome: Outcome) {
        let ended = self.state().sessions.remove(session).map(|open| (session.to_owned(), open));
        self.finish(inner, ended.into_iter().collect(), outcome, true);
    }

    fn finish(
        &self,
        inner: &crate::brains::Inner,
        ended: Vec<(String, Open)>,
        outcome: Outcome,
        tell_agent: bool,
    ) {
        if ended.is_empty() {
            return;
        }
        *self.stats.ended.lock().unwrap_or_else(PoisonError::into_inner).entry(outcome).or_default() +=
            ended.len() as u64;
        for (id, open) in ended {
            let error = outcome.error().map(str::to_owned);
            // The client hears first (its deltas stay buffered ahead of the end).
            let _ = open.end.send(error.clone());
            drop(open.deltas);
            if tell_agent && let Some(agent) = inner.agent(&open.agent) {
                let end = wit::EndpointSessionEnd { session: id, error };
                let _ = push_end(&agent, open.subscription, end);
            }
        }
    }
}

fn take_sessions(state: &mut State, which: impl Fn(&Open) -> bool) -> Vec<(String, Open)> {
    let ids: Vec<String> =
        state.sessions.iter().filter(|(_, o)| which(o)).map(|(id, _)| id.clone()).collect();
    ids.into_iter().filter_map(|id| state.sessions.remove(&id).map(|open| (id, open))).collect()
}

fn push_end(
    agent: &Agent,
    subscription: String,
    end: wit::EndpointSessionEnd,
) -> Result<(), crate::inbox::Full> {
    agent.push(subscription, wit::Event::EndpointSessionEnd(end))
}

fn wit_message(m: model::ChatMessage) -> wit::ChatMessage {
    wit::ChatMessage {
        role: m.role,
        content: m.content,
        name: m.name,
        tool_calls: m
            .tool_calls
            .into_iter()
            .map(|c| wit::ToolCall { id: c.id, name: c.name, arguments: c.arguments })
            .collect(),
        tool_call_id: m.tool_call_id,
    }
}

fn wit_tool(t: model::ToolSpec) -> wit::ToolSpec {
    wit::ToolSpec { name: t.name, description: t.description, parameters: t.parameters }
}

/// A delta a brain streamed, as the wire carries it.
#[must_use]
pub fn from_wit_delta(d: wit::ChatDelta) -> ChatDelta {
    ChatDelta {
        usage: d.usage.map(|u| model::Usage {
            total_tokens: u.total_tokens,
            prompt_tokens: u.prompt_tokens,
            completion_tokens: u.completion_tokens,
        }),
        content: d.content,
        reasoning: d.reasoning,
        tool_call: d.tool_call.map(|c| model::ToolCallDelta {
            id: c.id,
            name: c.name,
            index: c.index,
            arguments: c.arguments,
        }),
        finish_reason: d.finish_reason,
    }
}

/// A delta of the wire, as a brain receives it (`chat-delta`).
#[must_use]
pub fn to_wit_delta(d: ChatDelta) -> wit::ChatDelta {
    wit::ChatDelta {
        content: d.content,
        reasoning: d.reasoning,
        tool_call: d.tool_call.map(|c| wit::ToolCallDelta {
            index: c.index,
            id: c.id,
            name: c.name,
            arguments: c.arguments,
        }),
        finish_reason: d.finish_reason,
        usage: d.usage.map(|u| wit::Usage {
            prompt_tokens: u.prompt_tokens,
            completion_tokens: u.completion_tokens,
            total_tokens: u.total_tokens,
        }),
    }
}

/// A brain's chat request (`provider.chat-stream`), as the wire carries it.
#[must_use]
pub fn from_wit_request(r: &wit::ChatRequest) -> ChatRequest {
    ChatRequest {
        tools: r
            .tools
            .iter()
            .map(|t| model::ToolSpec {
                name: t.name.clone(),
                parameters: t.parameters.clone(),
                description: t.description.clone(),
            })
            .collect(),
        params: r.params.clone(),
        messages: r
            .messages
            .iter()
            .map(|m| model::ChatMessage {
                name: m.name.clone(),
                role: m.role.clone(),
                content: m.content.clone(),
                tool_calls: m
                    .tool_calls
                    .iter()
                    .map(|c| model::ToolCall {
                        id: c.id.clone(),
                        name: c.name.clone(),
                        arguments: c.arguments.clone(),
                    })
                    .collect(),
                tool_call_id: m.tool_call_id.clone(),
            })
            .collect(),
    }
}
