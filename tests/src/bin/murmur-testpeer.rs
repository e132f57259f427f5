//! A libp2p peer for tests and benchmarks that speaks just enough of murmur's protocols to
//! inject gossip: it dials a node, waits until the node subscribes to the advert topic,
//! publishes the envelopes it was given (hex, one per line), reports, and stays connected
//! until stdin closes or it is killed.
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
    #[arg(long)]
    publish: std::path::PathBuf,
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
    let envelopes: Vec<Vec<u8>> = std::io::BufReader::new(std::fs::File::open(&args.publish)?)
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
                identify::Behaviour::new(identify::Config::new("/murmur/1.0.0".into(), key.public()));
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
