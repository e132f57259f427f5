//! A libp2p peer for tests and benchmarks that speaks just enough of murmur's protocols to
//! inject what no honest node sends. With `--publish FILE` it dials a node, waits until the
//! node subscribes to the advert topic, publishes the envelopes it was given (hex, one per
//! line), reports, and stays connected until stdin closes or it is killed. With
//! `--agent-message FROM:TO:TEXT` it sends one `/murmur/agent/1` message claiming to come
//! from agent FROM (which it does not advertise), prints the node's answer and exits; with
//! `--task …` one `/murmur/task/1` request, as a node that placed nothing; with `--flood
//! STREAMS:BYTES` it holds that many task streams open and reports whether it was cut off.
//!
//! It is deliberately not a murnode: it signs nothing itself and validates nothing, so a
//! test can make it carry forgeries and replays that no honest node would send.

use std::io::BufRead;
use std::time::Duration;

use anyhow::Context;
use clap::Parser;
use futures::StreamExt;
use libp2p::swarm::{NetworkBehaviour, SwarmEvent};
use libp2p::{Multiaddr, SwarmBuilder, gossipsub, identify, noise, tcp, yamux};
use murmur_protocol::Digest;
use murmur_protocol::mesh::ADVERT_TOPIC;
use tokio::io::AsyncBufReadExt;

/// Inject advert envelopes into a murmur mesh over gossipsub.
#[derive(Debug, Parser)]
struct Args {
    /// The node to dial, a multiaddr ending in /p2p/<peer id>.
    #[arg(long)]
    dial: Multiaddr,
    /// File with one hex-encoded envelope per line.
    #[arg(long, required_unless_present_any = ["agent_message", "task", "flood"])]
    publish: Option<std::path::PathBuf>,
    /// Send one agent message `FROM:TO:TEXT` instead (a forged sender).
    #[arg(long, conflicts_with = "publish")]
    agent_message: Option<String>,
    /// Send one task request instead: `get:ID`, `cancel:ID`, `events:ID`, or
    /// `submit:CAPSULE:MESSAGE[:ID]` (a client's task, under ID if given).
    #[arg(long, conflicts_with_all = ["publish", "agent_message"])]
    task: Option<String>,
    /// Flood the node instead: `STREAMS:BYTES` task streams of BYTES junk bytes each, all
    /// held open; reports whether (and when) the node cut this peer off.
    #[arg(long, conflicts_with_all = ["publish", "agent_message", "task"])]
    flood: Option<String>,
    /// The identify protocol version to announce (another major is refused by nodes).
    #[arg(long, default_value = "/murmur/1.0.0")]
    identify: String,
    /// Give up if the node has not subscribed within this many seconds.
    #[arg(long, default_value_t = 30)]
    timeout_secs: u64,
}

#[derive(NetworkBehaviour)]
struct Behaviour {
    identify: identify::Behaviour,
    gossipsub: gossipsub::Behaviour,
}

#[tokio::main]
async fn main() -> anyhow::Result<()> {
    let args = Args::parse();
    if let Some(message) = &args.agent_message {
        return agent_message(&args, message).await;
    }
    if let Some(spec) = &args.task {
        return task_request(&args, spec).await;
    }
    if let Some(spec) = &args.flood {
        return flood(&args, spec).await;
    }
    let publish = args.publish.as_ref().context("--publish FILE or --agent-message FROM:TO:TEXT")?;
    let envelopes: Vec<Vec<u8>> = std::io::BufReader::new(std::fs::File::open(publish)?)
        .lines()
        .map(|line| Ok(hex::decode(line?.trim())?))
        .collect::<anyhow::Result<_>>()
        .context("reading envelopes")?;

    let mut swarm = SwarmBuilder::with_new_identity()
        .with_tokio()
        .with_tcp(tcp::Config::default(), noise::Config::new, yamux::Config::default)?
        .with_behaviour(|key| {
            let config = gossipsub::ConfigBuilder::default()
                .validation_mode(gossipsub::ValidationMode::Strict)
                .message_id_fn(|m: &gossipsub::Message| {
                    gossipsub::MessageId::from(Digest::of(&m.data).0.to_vec())
                })
                .max_transmit_size(64 * 1024)
                .heartbeat_interval(Duration::from_millis(500))
                .heartbeat_initial_delay(Duration::from_millis(100))
                .build()
                .map_err(|e| anyhow::anyhow!("{e}"))?;
            let mut gossipsub =
                gossipsub::Behaviour::new(gossipsub::MessageAuthenticity::Signed(key.clone()), config)
                    .map_err(|e| anyhow::anyhow!("{e}"))?;
            gossipsub.subscribe(&gossipsub::IdentTopic::new(ADVERT_TOPIC))?;
            let identify =
                identify::Behaviour::new(identify::Config::new(args.identify.clone(), key.public()));
            Ok(Behaviour { identify, gossipsub })
        })?
        .with_swarm_config(|c| c.with_idle_connection_timeout(Duration::from_secs(300)))
        .build();
    swarm.dial(args.dial.clone())?;

    let deadline = tokio::time::Instant::now() + Duration::from_secs(args.timeout_secs);
    loop {
        let event = tokio::time::timeout_at(deadline, swarm.select_next_some())
            .await
            .context("the node never subscribed to the advert topic")?;
        if let SwarmEvent::Behaviour(BehaviourEvent::Gossipsub(gossipsub::Event::Subscribed { .. })) = event {
            break;
        }
    }
    let topic = gossipsub::IdentTopic::new(ADVERT_TOPIC);
    let mut published = 0;
    for envelope in envelopes {
        match swarm.behaviour_mut().gossipsub.publish(topic.clone(), envelope) {
            Ok(_) => published += 1,
            Err(err) => eprintln!("publish failed: {err}"),
        }
        // Let the swarm flush between messages so a large batch is not dropped at once.
        while let Ok(Some(_)) = tokio::time::timeout(Duration::from_millis(1), swarm.next()).await {}
    }
    println!("{}", serde_json::json!({ "event": "published", "count": published }));

    let mut stdin = tokio::io::BufReader::new(tokio::io::stdin()).lines();
    loop {
        tokio::select! {
            _ = swarm.select_next_some() => {}
            line = stdin.next_line() => if !matches!(line, Ok(Some(_))) { break },
        }
    }
    Ok(())
}

/// Sends one request on `protocol` to the node `--dial` names, as a fresh identity, and
/// returns the answer's bytes. `request` gets this peer's own id (for ids derived from it).
async fn ask(
    args: &Args,
    protocol: &'static str,
    request: impl FnOnce(&libp2p::PeerId) -> Vec<u8>,
) -> anyhow::Result<Vec<u8>> {
    let mut session = murmur_tests::peer::Session::dial(
        &args.dial,
        &args.identify,
        Duration::from_secs(args.timeout_secs),
    )?;
    let bytes = request(&session.local());
    let answer = session.ask(protocol, bytes).await;
    session.until_identified(Duration::from_secs(args.timeout_secs)).await;
    answer
}

/// Holds STREAMS task streams of BYTES bytes each open and prints whether the node cut
/// this peer off, and after how long.
async fn flood(args: &Args, spec: &str) -> anyhow::Result<()> {
    let (streams, bytes) = spec.split_once(':').context("--flood takes STREAMS:BYTES")?;
    let (streams, bytes): (usize, usize) = (streams.parse()?, bytes.parse()?);
    let wait = Duration::from_secs(args.timeout_secs);
    let mut session = murmur_tests::peer::Session::dial(&args.dial, &args.identify, wait)?;
    let flood = session.flood(streams, bytes, wait).await?;
    let after_ms = u64::try_from(flood.after.as_millis()).unwrap_or(u64::MAX);
    println!("{}", serde_json::json!({ "event": "flooded", "cut_off": flood.cut_off, "after_ms": after_ms }));
    Ok(())
}

/// Sends one `/murmur/agent/1` message as agent FROM and prints the answer.
async fn agent_message(args: &Args, spec: &str) -> anyhow::Result<()> {
    use murmur_protocol::agent::{AgentMessage, AgentRequest, AgentResponse};
    let mut parts = spec.splitn(3, ':');
    let (from, to, text) =
        (parts.next().unwrap_or(""), parts.next().unwrap_or(""), parts.next().unwrap_or(""));
    let request = AgentRequest::Message(AgentMessage { to: to.into(), from: from.into(), text: text.into() });
    let response = ask(args, murmur_tests::peer::AGENT, |_| request.encode()).await?;
    let answer = match AgentResponse::decode(&response).context("the node's answer")? {
        AgentResponse::Delivered => serde_json::json!({ "delivered": true }),
        AgentResponse::Refused { check, reason } => serde_json::json!({ "check": check, "reason": reason }),
        AgentResponse::Status { .. } => serde_json::json!({ "status": true }),
    };
    println!("{}", serde_json::json!({ "event": "answered", "answer": answer }));
    Ok(())
}

/// Sends one `/murmur/task/1` request (`get:ID`, `cancel:ID`, `events:ID`, or
/// `submit:CAPSULE:MESSAGE[:ID]`, a client's task under the id this peer derives, or ID)
/// and prints the answer.
async fn task_request(args: &Args, spec: &str) -> anyhow::Result<()> {
    use murmur_protocol::NodeId;
    use murmur_protocol::task::{Sender, Submit, TaskId, TaskRequest, TaskResponse};
    let parts: Vec<&str> = spec.split(':').collect();
    let id = |text: &str| text.parse::<TaskId>().context("a task id");
    let request: Box<dyn FnOnce(&libp2p::PeerId) -> TaskRequest> = match parts[..] {
        ["get", task] => {
            let task = id(task)?;
            Box::new(move |_| TaskRequest::Get { task })
        }
        ["cancel", task] => {
            let task = id(task)?;
            Box::new(move |_| TaskRequest::Cancel { task })
        }
        ["events", task] => {
            let task = id(task)?;
            Box::new(move |_| TaskRequest::Events { task, after: 0, wait_ms: 0, settled: false })
        }
        ["submit", capsule, message, ref chosen @ ..] => {
            let chosen = chosen.first().map(|t| id(t)).transpose()?;
            let (capsule, message) = (capsule.to_owned(), message.to_owned());
            Box::new(move |me| {
                let me = NodeId::from_peer_id(me).expect("an ed25519 identity");
                TaskRequest::Submit(Submit {
                    task: chosen.unwrap_or_else(|| TaskId::placed(&me, &Sender::Client, &message)),
                    text: "from a test peer".into(),
                    sender: Sender::Client,
                    capsule,
                    context: None,
                    message,
                    traceparent: None,
                    settle_wait_ms: 0,
                })
            })
        }
        _ => anyhow::bail!("--task takes get:ID, cancel:ID, events:ID or submit:CAPSULE:MESSAGE[:ID]"),
    };
    let response = ask(args, murmur_tests::peer::TASK, |me| request(me).encode()).await?;
    let answer = match TaskResponse::decode(&response).context("the node's answer")? {
        TaskResponse::NotFound => serde_json::json!({ "not_found": true }),
        TaskResponse::Refused { check, reason } => serde_json::json!({ "check": check, "reason": reason }),
        TaskResponse::Accepted(s) | TaskResponse::Snapshot(s) => {
            serde_json::json!({ "task": s.task.to_string(), "state": s.state.to_string() })
        }
        TaskResponse::Events { snapshot, .. } => {
            serde_json::json!({ "events": true, "task": snapshot.task.to_string() })
        }
    };
    println!("{}", serde_json::json!({ "event": "answered", "answer": answer }));
    Ok(())
}
