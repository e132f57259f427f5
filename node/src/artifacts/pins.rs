//! Pinned artifacts (`[[pins]]`): each is kept on its share of nodes by rendezvous
//! placement, every node computing the same holders without talking.

use std::time::Duration;

use murmur_config::Pin;
use murmur_protocol::Digest;
use tracing::{info, warn};

use super::{Puller, Want};

/// Keeps every pin on its share of nodes: every `every`, for each pin this node's
/// store lacks, it computes the pin's holders among the nodes its directory lists
/// (rendezvous placement, [`murmur_protocol::replicate`]: every node computes the same
/// holders without talking) and pulls the artifact when it is one of them. So a pinned
/// artifact reaches `replicas` nodes, and when a holder leaves, the next node in line
/// pulls it. Pins are keyed by `NAME@VERSION`; the pull trusts what any pull trusts.
pub async fn keep_pins(puller: Puller, pins: Vec<Pin>, every: Duration) {
    if pins.is_empty() {
        return;
    }
    let me = puller.net().local();
    loop {
        tokio::time::sleep(every).await;
        let Ok(members) = puller.net().members().await else { continue };
        for pin in &pins {
            let key = Digest::of(format!("{}@{}", pin.name, pin.version).as_bytes());
            if !murmur_protocol::replicate::should_hold(&me, &key, &members, pin.replicas) {
                continue;
            }
            if matches!(puller.store().find(&pin.name, Some(&pin.version)), Ok(Some(_))) {
                continue;
            }
            let want = Want { name: pin.name.clone(), version: pin.version.clone(), pin: None };
            match puller.pull(&want, &mut |_| {}).await {
                Ok(pulled) => info!(
                    artifact = %format!("{}@{}", pin.name, pin.version),
                    replicas = pin.replicas,
                    bytes = pulled.fetched,
                    "pinned artifact replicated here"
                ),
                Err(err) => warn!(
                    artifact = %format!("{}@{}", pin.name, pin.version),
                    error = %format!("{err:#}"),
                    "cannot replicate a pinned artifact yet"
                ),
            }
        }
    }
}
