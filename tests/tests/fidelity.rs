//! The simulator stays honest about the system that ships: one small story — four nodes
//! publish adverts, one is killed, a fifth joins late — runs in the simulator and with real
//! `murnode` processes, and both end with the same directory on every live node.

use std::collections::BTreeMap;
use std::time::Duration;

use murmur_protocol::HostedCapsule;
use murmur_sim::scenario::{Fault, Scenario};
use murmur_sim::{Options, Sim, Verdict};
use murmur_tests::{TestNode, capsules_toml, wait_for};

type View = BTreeMap<String, Vec<u32>>;

const KILLED: usize = 2;

fn capsule(k: usize) -> String {
    format!("fid-{k}")
}

fn simulated() -> Vec<Option<View>> {
    let mut scenario = Scenario { name: "fidelity".into(), nodes: 4, duration_s: 40, ..Scenario::default() };
    scenario.protocol.refresh_s = 1;
    scenario.protocol.ttl_s = 3;
    scenario.topology.join_spread_s = 1;
    scenario.topology.bootstrap_peers = 1;
    scenario.workload.change_interval_ms = 0;
    scenario.faults = vec![
        Fault::Crash { at_s: 10, count: 0, nodes: vec![KILLED], restart_after_s: None },
        Fault::Join { at_s: 15, count: 1 },
    ];
    scenario.check.liveness_bound_s = 20;
    let mut sim = Sim::new(scenario, Options { seed: 1, ..Options::default() });
    for k in 0..5 {
        sim.set_capsules(k, vec![HostedCapsule { name: capsule(k), digest: None, version: "1.0.0".into() }]);
    }
    let (outcome, views) = sim.run_with_views();
    assert_eq!(outcome.verdict, Verdict::Pass, "{:?}", outcome.findings);
    views
}

fn real_view(node: &TestNode, peers: &[String]) -> View {
    let json = node.get("/v1/capsules").unwrap();
    let mut view = View::new();
    for capsule in json["capsules"].as_array().unwrap() {
        let mut hosts: Vec<u32> = capsule["providers"]
            .as_array()
            .unwrap()
            .iter()
            .map(|p| peers.iter().position(|id| id == p["peer_id"].as_str().unwrap()).unwrap() as u32)
            .collect();
        hosts.sort_unstable();
        view.insert(capsule["name"].as_str().unwrap().to_owned(), hosts);
    }
    view
}

#[test]
fn the_simulator_and_real_processes_end_with_the_same_directories() {
    let simulated = simulated();

    let fast = |k: usize| {
        format!("[adverts]\nrefresh_secs = 1\nttl_secs = 3\n{}", capsules_toml(&[(&capsule(k), "1.0.0")]))
    };
    let mut nodes: Vec<Option<TestNode>> = Vec::new();
    for k in 0..4 {
        let bootstrap = nodes.last().and_then(Option::as_ref);
        nodes.push(Some(TestNode::start_with(&fast(k), bootstrap).unwrap()));
    }
    let mut peers: Vec<String> = nodes.iter().flatten().map(|n| n.peer_id().to_owned()).collect();
    for node in nodes.iter().flatten() {
        wait_for(Duration::from_secs(20), "four nodes to converge", || {
            (real_view(node, &peers).len() == 4).then_some(())
        })
        .unwrap();
    }
    if let Some(mut killed) = nodes[KILLED].take() {
        killed.kill();
    }
    let late = TestNode::start_with(&fast(4), nodes[3].as_ref()).unwrap();
    peers.push(late.peer_id().to_owned());
    nodes.push(Some(late));

    for (k, node) in nodes.iter().enumerate() {
        let Some(node) = node else {
            assert!(simulated[k].is_none(), "node {k} is dead in the simulation too");
            continue;
        };
        let expected = simulated[k].clone().expect("alive in the simulation");
        assert!(
            !expected.contains_key(&capsule(KILLED)) && expected.contains_key(&capsule(4)),
            "{expected:?}"
        );
        wait_for(Duration::from_secs(20), &format!("node {k} to match the simulation {expected:?}"), || {
            (real_view(node, &peers) == expected).then_some(())
        })
        .unwrap();
    }
}
