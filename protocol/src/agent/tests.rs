use super::*;
use crate::advert::{Advert, HostedCapsule};
use crate::directory::{DirectoryConfig, Input, Source};
use crate::identity::SecretKey;
use crate::signed::Signed;

const T0: Millis = Millis(1_800_000_000_000);
const TTL_MS: u64 = 90_000;

fn key(n: u8) -> SecretKey {
    SecretKey::from_seed([n; 32])
}

/// A directory where node `n` runs the agents of `adverts[n]` (and a capsule named like
/// the first agent, which must not count as an agent).
fn directory(adverts: &[(u8, &[&str])]) -> Directory {
    let mut dir = Directory::new(DirectoryConfig::default());
    for (n, agents) in adverts {
        let mut advert = Advert::new(1, T0, TTL_MS);
        advert.agents = agents.iter().map(|a| (*a).to_owned()).collect();
        advert.capsules =
            vec![HostedCapsule { name: "capsule-only".into(), digest: None, version: "1".into() }];
        let envelope = Signed::sign(advert, &key(*n)).unwrap().into_envelope();
        dir.handle(
            T0,
            Input::Advert { envelope, source: Source::Gossip { from: key(9).node_id(), token: 0 } },
        );
    }
    while dir.poll_output().is_some() {}
    dir
}

fn address(text: &str) -> AgentAddress {
    text.parse().unwrap()
}

#[test]
fn addresses_are_names_or_names_at_a_peer() {
    let node = key(1).node_id();
    assert_eq!(
        address(&format!("planner@{node}")),
        AgentAddress { name: "planner".into(), node: Some(node) }
    );
    assert_eq!(address("planner").to_string(), "planner");
    for bad in ["", "Planner", "mur", "a b", "planner@not-a-peer"] {
        assert!(bad.parse::<AgentAddress>().is_err(), "{bad}");
    }
}

#[test]
fn a_name_goes_to_the_one_node_that_runs_it() {
    let local = key(5).node_id();
    let dir = directory(&[(1, &["planner"]), (2, &["writer", "critic"])]);
    let to = |name: &str, local_runs| destination(&dir, T0, local, local_runs, &address(name));
    assert_eq!(to("planner", false), Ok(Destination::Remote(key(1).node_id())));
    assert_eq!(to("critic", false), Ok(Destination::Remote(key(2).node_id())));
    assert_eq!(to("mine", true), Ok(Destination::Local));
    assert_eq!(to("nobody", false), Err(AddressError::Unknown("nobody".into())));
    // A capsule of that name is no agent.
    assert_eq!(to("capsule-only", false), Err(AddressError::Unknown("capsule-only".into())));
    // Past its advert's life, a node runs nothing.
    let later = T0.plus(TTL_MS + 60_000);
    assert!(destination(&dir, later, local, false, &address("planner")).is_err());
}

#[test]
fn a_name_two_nodes_run_is_ambiguous_and_a_peer_picks_one() {
    let local = key(5).node_id();
    let dir = directory(&[(1, &["planner"]), (2, &["planner"])]);
    let Err(AddressError::Ambiguous { nodes, .. }) = destination(&dir, T0, local, false, &address("planner"))
    else {
        panic!("two nodes run planner");
    };
    assert_eq!(nodes.len(), 2);
    // This node running it too is a third, not a tie-break.
    let Err(AddressError::Ambiguous { nodes, .. }) = destination(&dir, T0, local, true, &address("planner"))
    else {
        panic!("three nodes run planner");
    };
    assert_eq!(nodes[0], local);
    let pinned = address(&format!("planner@{}", key(2).node_id()));
    assert_eq!(destination(&dir, T0, local, false, &pinned), Ok(Destination::Remote(key(2).node_id())));
    let wrong = address(&format!("writer@{}", key(2).node_id()));
    assert!(matches!(destination(&dir, T0, local, false, &wrong), Err(AddressError::NotAt { .. })));
    let here = address(&format!("planner@{local}"));
    assert_eq!(destination(&dir, T0, local, true, &here), Ok(Destination::Local));
    assert!(matches!(destination(&dir, T0, local, false, &here), Err(AddressError::NotAt { .. })));
}

#[test]
fn a_peer_may_send_only_as_an_agent_it_advertises_or_as_its_clients() {
    let dir = directory(&[(1, &["planner"]), (2, &["writer"])]);
    let (one, two, stranger) = (key(1).node_id(), key(2).node_id(), key(7).node_id());
    assert_eq!(check_sender(&dir, T0, &one, "planner"), Ok(()));
    assert_eq!(check_sender(&dir, T0, &two, "planner"), Err(AgentCheck::SenderNotAdvertised));
    assert_eq!(check_sender(&dir, T0, &stranger, "planner"), Err(AgentCheck::SenderNotAdvertised));
    // A member's clients may speak as `mur`; a peer with no advert may not, even as that.
    assert_eq!(check_sender(&dir, T0, &one, CLIENT_SENDER), Ok(()));
    assert_eq!(check_sender(&dir, T0, &stranger, CLIENT_SENDER), Err(AgentCheck::SenderNotAdvertised));
    assert_eq!(
        check_sender(&dir, T0.plus(TTL_MS + 60_000), &one, "planner"),
        Err(AgentCheck::SenderNotAdvertised)
    );
}

#[test]
fn messages_round_trip_and_bounds_are_checked_on_decode() {
    let request = AgentRequest::Message(AgentMessage {
        to: "writer".into(),
        from: "planner".into(),
        text: "hello".into(),
    });
    assert_eq!(AgentRequest::decode(&request.encode()).unwrap(), request);
    let from_client = AgentRequest::Message(AgentMessage {
        to: "w".into(),
        from: CLIENT_SENDER.into(),
        text: String::new(),
    });
    assert_eq!(AgentRequest::decode(&from_client.encode()).unwrap(), from_client);
    assert_eq!(AgentRequest::decode(&AgentRequest::Status.encode()).unwrap(), AgentRequest::Status);
    let status = AgentStatus {
        name: "planner".into(),
        brain: "planner.rhai".into(),
        state: "running".into(),
        language: "rhai".into(),
        restarts: 2,
    };
    for response in [
        AgentResponse::Delivered,
        AgentResponse::Refused { check: "inbox_full".into(), reason: "full".into() },
        AgentResponse::Status { agents: vec![status] },
    ] {
        assert_eq!(AgentResponse::decode(&response.encode()).unwrap(), response);
    }
    let long = AgentRequest::Message(AgentMessage {
        to: "writer".into(),
        from: "planner".into(),
        text: "x".repeat(AGENT_MESSAGE_BYTES_MAX + 1),
    });
    assert!(matches!(AgentRequest::decode(&long.encode()), Err(DecodeError::Invalid { field: "text", .. })));
    let bad_name = AgentRequest::Message(AgentMessage {
        to: "Writer".into(),
        from: "planner".into(),
        text: String::new(),
    });
    assert!(matches!(
        AgentRequest::decode(&bad_name.encode()),
        Err(DecodeError::Invalid { field: "to", .. })
    ));
    let as_client = AgentRequest::Message(AgentMessage {
        to: CLIENT_SENDER.into(),
        from: "planner".into(),
        text: String::new(),
    });
    assert!(AgentRequest::decode(&as_client.encode()).is_err(), "no agent is named mur");
}
