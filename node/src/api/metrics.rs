//! Prometheus text exposition of the mesh counters.

use std::fmt::Write;

use murmur_protocol::directory::Refusal;

use murmur_brain::BrainMetrics;
use murmur_net::NetMetrics;
use murmur_protocol::agent::AgentCheck;

/// Renders every metric, with zero-valued series included so dashboards see them at once.
/// The endpoint's figures at the time of the scrape.
#[derive(Debug, Default)]
pub struct ModelFigures {
    pub sessions_open: u64,
    pub sessions_opened: u64,
    pub sessions_ended: Vec<(&'static str, u64)>,
    pub sessions_refused_busy: u64,
    pub deltas: u64,
    pub completions_open: u64,
    pub remote_opened: u64,
    pub failovers: u64,
    pub served_for_peers: u64,
    pub peer_refusals: Vec<(&'static str, u64)>,
    pub upstream_errors: u64,
    /// Tokens of finished completions: prompt, completion.
    pub tokens: [u64; 2],
}

impl ModelFigures {
    #[must_use]
    pub fn of(state: &super::ApiState) -> Self {
        use std::sync::atomic::Ordering::Relaxed;
        let endpoints = state.brains.endpoints();
        let router = &state.models.stats;
        Self {
            sessions_open: endpoints.open_sessions() as u64,
            sessions_opened: endpoints.stats.opened.load(Relaxed),
            sessions_ended: endpoints.stats.ended(),
            sessions_refused_busy: endpoints.stats.refused_busy.load(Relaxed),
            deltas: endpoints.stats.deltas.load(Relaxed),
            completions_open: state.completions.load(Relaxed) as u64,
            tokens: [state.tokens[0].load(Relaxed), state.tokens[1].load(Relaxed)],
            remote_opened: router.remote_opened.load(Relaxed),
            failovers: router.failovers.load(Relaxed),
            served_for_peers: router.served.load(Relaxed),
            peer_refusals: router.refusals(),
            upstream_errors: state.upstreams.errors.load(Relaxed),
        }
    }
}

pub fn render(
    m: &NetMetrics,
    brains: &BrainMetrics,
    models: &ModelFigures,
    mcp: &[murmur_mcp::ServerStatus],
    task_db_waits: u64,
) -> String {
    let mut out = String::new();
    let mut metric = |name: &str, kind: &str, help: &str, series: &[(&str, u64)]| {
        let _ = writeln!(out, "# HELP {name} {help}");
        let _ = writeln!(out, "# TYPE {name} {kind}");
        for (labels, value) in series {
            if labels.is_empty() {
                let _ = writeln!(out, "{name} {value}");
            } else {
                let _ = writeln!(out, "{name}{{{labels}}} {value}");
            }
        }
    };
    let d = &m.directory;
    let s = &m.mesh;
    metric(
        "murmur_peers_connected",
        "gauge",
        "Peers with an open libp2p connection.",
        &[("", m.peers_connected as u64)],
    );
    metric(
        "murmur_directory_nodes",
        "gauge",
        "Nodes whose advert the directory holds.",
        &[("", m.directory_nodes as u64)],
    );
    metric(
        "murmur_directory_capsules",
        "gauge",
        "Distinct capsule names in the directory.",
        &[("", m.directory_capsules as u64)],
    );
    metric(
        "murmur_artifact_requests_served_total",
        "counter",
        "/murmur/artifact/1 requests served to peers, and refused as busy.",
        &[("outcome=\"served\"", m.artifact_served), ("outcome=\"busy\"", m.artifact_busy)],
    );
    metric(
        "murmur_artifact_bulk_served_total",
        "counter",
        "Chunks answered to peers on /murmur/artifact-bulk/1 streams, and bulk streams refused (all busy).",
        &[("outcome=\"served\"", m.artifact_bulk_served), ("outcome=\"refused\"", m.artifact_bulk_refused)],
    );
    metric(
        "murmur_ping_failures_total",
        "counter",
        "Pings unanswered within network.ping_timeout_secs; each closed its connection (the peer froze, lost power or is cut off).",
        &[("", m.ping_failures)],
    );
    let version = |reason: &str| m.version_refusals.get(reason).copied().unwrap_or(0);
    metric(
        "murmur_peers_refused_version_total",
        "counter",
        "Peers disconnected at identify for their wire version: another major, or not a murmur node.",
        &[
            ("reason=\"other_major\"", version("other_major")),
            ("reason=\"not_murmur\"", version("not_murmur")),
        ],
    );
    metric(
        "murmur_adverts_accepted_total",
        "counter",
        "Adverts accepted into the directory.",
        &[("", d.accepted)],
    );
    let refused: Vec<(String, u64)> = Refusal::REASONS
        .iter()
        .map(|reason| (format!("reason=\"{reason}\""), d.refused.get(reason).copied().unwrap_or(0)))
        .collect();
    let refused: Vec<(&str, u64)> = refused.iter().map(|(l, v)| (l.as_str(), *v)).collect();
    metric("murmur_adverts_refused_total", "counter", "Adverts refused, by reason.", &refused);
    metric("murmur_adverts_expired_total", "counter", "Adverts dropped at their TTL.", &[("", d.expired)]);
    metric(
        "murmur_adverts_evicted_total",
        "counter",
        "Adverts a full directory dropped, least recently refreshed first, to admit a fresher one.",
        &[("", d.evicted)],
    );
    metric(
        "murmur_adverts_revoked_total",
        "counter",
        "Adverts dropped because a revocation list named their node.",
        &[("", d.revoked)],
    );
    metric(
        "murmur_revocation_lists",
        "gauge",
        "Revocation lists held (the latest of each trusted authority).",
        &[("", m.revocation_lists as u64)],
    );
    metric(
        "murmur_revocations_total",
        "counter",
        "Revocation lists taken (new), and refused (old copies, untrusted or invalid).",
        &[
            ("outcome=\"taken\"", m.mesh.revocations_taken),
            ("outcome=\"refused\"", m.mesh.revocations_refused),
        ],
    );
    metric(
        "murmur_departures_total",
        "counter",
        "Departure notices: adverts they dropped here, notices this node signed as a witness, and notices about this node it refuted by republishing.",
        &[
            ("kind=\"applied\"", d.departed),
            ("kind=\"declared\"", s.departures_declared),
            ("kind=\"refuted\"", s.refutations),
        ],
    );
    metric(
        "murmur_gossip_messages_total",
        "counter",
        "Advert gossip messages received and published.",
        &[("direction=\"in\"", s.gossip_in_messages), ("direction=\"out\"", s.gossip_out_messages)],
    );
    metric(
        "murmur_gossip_bytes_total",
        "counter",
        "Advert gossip payload bytes received and published (not counting relays).",
        &[("direction=\"in\"", s.gossip_in_bytes), ("direction=\"out\"", s.gossip_out_bytes)],
    );
    metric(
        "murmur_gossip_verdicts_total",
        "counter",
        "Validation verdicts on received gossip.",
        &[
            ("verdict=\"accept\"", s.gossip_accepted),
            ("verdict=\"ignore\"", s.gossip_ignored),
            ("verdict=\"reject\"", s.gossip_rejected),
        ],
    );
    metric(
        "murmur_sync_total",
        "counter",
        "Anti-entropy exchanges started and answered.",
        &[("direction=\"sent\"", s.syncs_sent), ("direction=\"answered\"", s.syncs_answered)],
    );
    metric(
        "murmur_sync_summaries_total",
        "counter",
        "Anti-entropy exchanges this node started with a summary; those the answer settled, and those that went on to a digest of the buckets that differed.",
        &[
            ("outcome=\"started\"", s.sync_summaries),
            ("outcome=\"settled\"", s.sync_summaries_settled),
            ("outcome=\"scoped\"", s.sync_summaries_scoped),
        ],
    );
    metric(
        "murmur_peers_refused_total",
        "counter",
        "Peers disconnected for lacking admission.",
        &[("", s.peers_refused)],
    );
    metric(
        "murmur_peers_cut_off_total",
        "counter",
        "Peers cut off and held off for sending more request bytes at once than a connection may.",
        &[("", s.peers_cut_off)],
    );
    let overruns = |scope: &str| m.request_overruns.get(scope).copied().unwrap_or(0);
    metric(
        "murmur_request_overruns_total",
        "counter",
        "Inbound requests failed for overrunning a budget of request bytes in flight: a connection's (its peer was cut off) or the node's.",
        &[("scope=\"connection\"", overruns("connection")), ("scope=\"node\"", overruns("node"))],
    );
    let r = &m.router;
    metric(
        "murmur_tasks_routed_total",
        "counter",
        "Tasks this node placed, by outcome (failovers: a provider that did not take one).",
        &[
            ("outcome=\"submitted\"", r.submitted),
            ("outcome=\"routed\"", r.routed),
            ("outcome=\"failover\"", r.failovers),
            ("outcome=\"rejected\"", r.rejected),
            ("outcome=\"failed\"", r.failed),
            ("outcome=\"duplicate\"", r.duplicates),
        ],
    );
    // Every check name the node can refuse with, so each series exists from the start.
    let checks = [
        "no_grant",
        "untrusted_issuer",
        "bad_signature",
        "expired",
        "not_yet_valid",
        "wrong_capsule",
        "wrong_artifact",
        "target_not_allowed",
        "sender_not_hosted",
        "not_hosted",
        "not_accepting",
    ];
    let mut refusals: Vec<(String, u64)> = checks
        .iter()
        .map(|c| (format!("check=\"{c}\""), m.task_refusals.get(*c).copied().unwrap_or(0)))
        .collect();
    for (check, count) in &m.task_refusals {
        if !checks.contains(&check.as_str()) {
            refusals.push((format!("check=\"{check}\""), *count));
        }
    }
    let refusals: Vec<(&str, u64)> = refusals.iter().map(|(l, v)| (l.as_str(), *v)).collect();
    metric(
        "murmur_task_refusals_total",
        "counter",
        "Tasks this node refused before running anything, by failed check.",
        &refusals,
    );
    let agent_refusals: Vec<(String, u64)> = AgentCheck::ALL
        .iter()
        .map(|c| (format!("check=\"{c}\""), m.agent_refusals.get(c.as_str()).copied().unwrap_or(0)))
        .collect();
    let agent_refusals: Vec<(&str, u64)> = agent_refusals.iter().map(|(l, v)| (l.as_str(), *v)).collect();
    metric(
        "murmur_agent_messages_refused_total",
        "counter",
        "Agent messages from peers this node refused, by failed check (sender_not_advertised: a peer spoke for an agent it does not run).",
        &agent_refusals,
    );
    metric(
        "murmur_agent_messages_received_total",
        "counter",
        "Agent messages from peers this node took (into an inbox, or dropped by the recipient's subscriptions).",
        &[("", m.agent_delivered)],
    );
    render_brains(&mut metric, brains);
    render_models(&mut metric, models);
    render_mcp(&mut metric, mcp);
    metric(
        "murmur_task_db_write_waits_total",
        "counter",
        "Task writes that found the database's queue full and waited for room (none is dropped).",
        &[("", task_db_waits)],
    );
    out
}

/// The MCP servers' series: whether each is up, its restarts, its requests by outcome.
fn render_mcp(
    metric: &mut impl FnMut(&str, &str, &str, &[(&str, u64)]),
    servers: &[murmur_mcp::ServerStatus],
) {
    let label = |s: &murmur_mcp::ServerStatus, extra: &str| format!("server=\"{}\"{extra}", s.name);
    let up: Vec<(String, u64)> = servers
        .iter()
        .map(|s| (label(s, ""), u64::from(matches!(s.state, murmur_mcp::LinkState::Up { .. }))))
        .collect();
    let restarts: Vec<(String, u64)> = servers.iter().map(|s| (label(s, ""), s.restarts)).collect();
    let requests: Vec<(String, u64)> = servers
        .iter()
        .flat_map(|s| [(label(s, ",outcome=\"ok\""), s.ok), (label(s, ",outcome=\"failed\""), s.failed)])
        .collect();
    for (name, kind, help, series) in [
        ("murmur_mcp_up", "gauge", "Whether the node is connected to each MCP server.", up),
        (
            "murmur_mcp_restarts_total",
            "counter",
            "Times the node started an MCP server again after it failed, died or stopped answering pings.",
            restarts,
        ),
        (
            "murmur_mcp_requests_total",
            "counter",
            "Requests brains made of each MCP server, by outcome (failed: an error, a timeout, a tool that reported an error).",
            requests,
        ),
    ] {
        let series: Vec<(&str, u64)> = series.iter().map(|(l, v)| (l.as_str(), *v)).collect();
        metric(name, kind, help, &series);
    }
}

/// The endpoint's series: sessions of this node's agents, completions served by its
/// `/v1`, and model streams between nodes.
fn render_models(metric: &mut impl FnMut(&str, &str, &str, &[(&str, u64)]), m: &ModelFigures) {
    let ended: Vec<(String, u64)> =
        m.sessions_ended.iter().map(|(o, c)| (format!("outcome=\"{o}\""), *c)).collect();
    let refusals: Vec<(String, u64)> =
        m.peer_refusals.iter().map(|(c, n)| (format!("check=\"{c}\""), *n)).collect();
    fn borrow(v: &[(String, u64)]) -> Vec<(&str, u64)> {
        v.iter().map(|(l, c)| (l.as_str(), *c)).collect()
    }
    metric(
        "murmur_endpoint_sessions_open",
        "gauge",
        "Endpoint sessions of this node's agents open now.",
        &[("", m.sessions_open)],
    );
    metric(
        "murmur_endpoint_sessions_opened_total",
        "counter",
        "Endpoint sessions opened on this node's agents.",
        &[("", m.sessions_opened)],
    );
    metric(
        "murmur_endpoint_sessions_ended_total",
        "counter",
        "Endpoint sessions ended, by outcome (completed, client_gone, unsubscribed, run_ended).",
        &borrow(&ended),
    );
    metric(
        "murmur_endpoint_sessions_refused_total",
        "counter",
        "Endpoint sessions refused because the node's session limit or the agent's inbox was full.",
        &[("", m.sessions_refused_busy)],
    );
    metric(
        "murmur_endpoint_chunks_total",
        "counter",
        "Deltas this node's agents streamed to endpoint sessions.",
        &[("", m.deltas)],
    );
    metric(
        "murmur_endpoint_completions_open",
        "gauge",
        "Chat completions this node's /v1 serves now.",
        &[("", m.completions_open)],
    );
    metric(
        "murmur_endpoint_tokens_total",
        "counter",
        "Tokens of the chat completions this node's /v1 finished, by kind (the agent's usage, else counted with cl100k_base).",
        &[("kind=\"prompt\"", m.tokens[0]), ("kind=\"completion\"", m.tokens[1])],
    );
    metric(
        "murmur_model_remote_sessions_total",
        "counter",
        "Sessions this node opened on another node's agents.",
        &[("", m.remote_opened)],
    );
    metric(
        "murmur_model_failovers_total",
        "counter",
        "Model requests moved to the next node because the chosen one provably did not take them.",
        &[("", m.failovers)],
    );
    metric(
        "murmur_model_served_total",
        "counter",
        "Model streams from peers that became sessions here.",
        &[("", m.served_for_peers)],
    );
    metric(
        "murmur_model_refusals_total",
        "counter",
        "Model streams from peers refused here, by check.",
        &borrow(&refusals),
    );
    metric(
        "murmur_upstream_errors_total",
        "counter",
        "Brains' streams from upstream providers that failed to open.",
        &[("", m.upstream_errors)],
    );
}

/// The brains' series: per agent, events by kind, drops by reason, inbox depth, pending
/// timers and restarts.
fn render_brains(metric: &mut impl FnMut(&str, &str, &str, &[(&str, u64)]), brains: &BrainMetrics) {
    let mut delivered = Vec::new();
    let mut dropped = Vec::new();
    let mut depth = Vec::new();
    let mut timers = Vec::new();
    let mut restarts = Vec::new();
    for agent in &brains.agents {
        let name = &agent.name;
        for kind in ["message", "timer", "error", "reload", "shutdown"] {
            let count = agent.delivered.get(kind).copied().unwrap_or(0);
            delivered.push((format!("agent=\"{name}\",kind=\"{kind}\""), count));
        }
        for (kind, count) in &agent.delivered {
            if !["message", "timer", "error", "reload", "shutdown"].contains(kind) {
                delivered.push((format!("agent=\"{name}\",kind=\"{kind}\""), *count));
            }
        }
        for reason in ["not_subscribed", "inbox_full", "timer_inbox_full"] {
            let count = agent.dropped.get(reason).copied().unwrap_or(0);
            dropped.push((format!("agent=\"{name}\",reason=\"{reason}\""), count));
        }
        depth.push((format!("agent=\"{name}\""), agent.inbox_depth as u64));
        timers.push((format!("agent=\"{name}\""), agent.timers as u64));
        restarts.push((format!("agent=\"{name}\""), u64::from(agent.restarts)));
    }
    fn borrow(v: &[(String, u64)]) -> Vec<(&str, u64)> {
        v.iter().map(|(l, c)| (l.as_str(), *c)).collect()
    }
    metric(
        "murmur_agent_events_delivered_total",
        "counter",
        "Events put in an agent's inbox, by kind.",
        &borrow(&delivered),
    );
    metric(
        "murmur_agent_events_dropped_total",
        "counter",
        "Events that never reached an agent's inbox, by reason (not_subscribed: a message from a sender it did not subscribe to).",
        &borrow(&dropped),
    );
    metric("murmur_agent_inbox_depth", "gauge", "Events waiting in an agent's inbox.", &borrow(&depth));
    metric("murmur_agent_timers", "gauge", "Timers an agent's run has pending.", &borrow(&timers));
    metric(
        "murmur_agent_restarts_total",
        "counter",
        "Runs of an agent restarted after a trap or an unexpected exit.",
        &borrow(&restarts),
    );
}
