//! `mur peers`: who this node is connected to and which nodes it knows.

use clap::Args;

use super::client::NodeArgs;
use murmur_api::exit::CliResult;
use murmur_api::output::{Table, print_json};
use murmur_api::views::PeersView;

#[derive(Debug, Args)]
pub struct PeersArgs {
    #[command(flatten)]
    node: NodeArgs,
    /// Print the API's JSON document instead of a table.
    #[arg(long)]
    json: bool,
}

pub fn run(args: PeersArgs) -> CliResult {
    let view: PeersView = args.node.get("/v1/peers")?;
    if args.json {
        print_json(&view);
        return Ok(());
    }
    let mut table = Table::new(&["PEER", "STATE", "RTT", "LAST SEEN", "CAPSULES", "ADDRESS"]);
    for peer in &view.peers {
        let state = match (peer.connected, peer.admitted, peer.held_ms) {
            (_, _, Some(ms)) => format!("refused ({}s)", ms.div_ceil(1000)),
            (true, true, _) => "connected".into(),
            (true, false, _) => "connecting".into(),
            (false, _, None) => "known".into(),
        };
        table.row(vec![
            peer.peer_id.clone(),
            state,
            peer.rtt_ms.map_or_else(|| "-".into(), |ms| format!("{ms:.1}ms")),
            peer.last_seen_ms.map_or_else(|| "-".into(), human_age),
            peer.capsules.to_string(),
            peer.addrs.first().cloned().unwrap_or_default(),
        ]);
    }
    table.print();
    let connected = view.peers.iter().filter(|p| p.connected).count();
    eprintln!("{} peers ({connected} connected); this node is {}", view.peers.len(), view.local_peer_id);
    Ok(())
}

/// `850ms`, `12s`, `3m`, `2h` ago.
#[must_use]
pub fn human_age(ms: u64) -> String {
    match ms {
        0..1_000 => format!("{ms}ms ago"),
        1_000..60_000 => format!("{}s ago", ms / 1000),
        60_000..3_600_000 => format!("{}m ago", ms / 60_000),
        _ => format!("{}h ago", ms / 3_600_000),
    }
}
