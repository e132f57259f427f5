//! The simulator stays honest about the system that ships. One small story — four nodes
//! publish adverts, one is killed, a fifth joins late — runs in the simulator and with real
//! `murnode` processes, and both end with the same directory on every live node. A longer
//! one, on a network with latency and a partition, is compared change by change: every
//! change must reach every node in the same order in both, and within a stated factor of
//! the simulated time.

use std::collections::{BTreeMap, BTreeSet};
use std::sync::atomic::{AtomicBool, Ordering};
use std::sync::{Arc, Mutex};
use std::time::{Duration, Instant};

use murmur_protocol::HostedCapsule;
use murmur_sim::scenario::{Fault, Scenario};
use murmur_sim::{Options, Sim, Verdict};
use murmur_tests::hub::HubLab;
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

// Change by change, on a network with latency and a partition.

/// One-way latency of the lab's wire and of the simulated network.
const WIRE_MS: u64 = 25;
/// How often both worlds' directories are sampled.
const TICK_MS: u64 = 20;
/// Simulated time given to forming the first four nodes' mesh: scenario time 0 is here in
/// the simulation, and the moment all four real nodes know each other in the lab.
const FORMED_MS: u64 = 8_000;
/// The story, in scenario milliseconds.
const STORY: [(i64, &str); 5] = [
    (2_000, "node 1 swaps fid-1 for fid-1b"),
    (8_000, "node 2 is killed"),
    (14_000, "node 4 joins, dialling node 3"),
    (22_000, "nodes 0 and 1 are cut off from the rest"),
    (28_000, "the cut heals"),
];
const KILL_AT: i64 = STORY[1].0;
const END_MS: i64 = 38_000;
/// The timing envelope: a change reaches a node in the lab within `FACTOR` times its
/// simulated delay plus `SLACK_MS`, and the other way round. The slack covers a process's
/// start-up (the simulator starts a node at once), a config reload, and sampling.
const FACTOR: i64 = 2;
const SLACK_MS: i64 = 1_000;

/// A directory entry: a capsule and the index of a node hosting it.
type Entry = (String, u32);
/// A real node's directory as its API shows it: capsule name → peer ids.
type RealView = BTreeMap<String, Vec<String>>;
/// A node's directory over scenario time: when it changed, and to what (`None`: down).
type Timeline = Vec<(i64, Option<View>)>;

fn entries(view: Option<&View>) -> BTreeSet<Entry> {
    view.into_iter()
        .flat_map(|v| v.iter().flat_map(|(name, hosts)| hosts.iter().map(|h| (name.clone(), *h))))
        .collect()
}

/// One change seen at one node: which step of the story it followed, the entry, whether it
/// appeared or went, and when (scenario ms).
#[derive(Debug, Clone, PartialEq, Eq, PartialOrd, Ord)]
struct Seen {
    step: usize,
    entry: Entry,
    appeared: bool,
    at: i64,
}

/// What a node's directory held at scenario time 0, and every change after it, before `until`.
fn changes(timeline: &Timeline, until: i64) -> (BTreeSet<Entry>, Vec<Seen>) {
    let start = timeline.iter().rev().find(|(at, _)| *at <= 0).and_then(|(_, v)| v.as_ref());
    let baseline = entries(start);
    let mut state = baseline.clone();
    let mut seen = Vec::new();
    for (at, view) in timeline.iter().filter(|(at, _)| *at > 0 && *at < until) {
        let now = entries(view.as_ref());
        let step = STORY.iter().filter(|(t, _)| t <= at).count();
        for entry in now.difference(&state) {
            seen.push(Seen { step, entry: entry.clone(), appeared: true, at: *at });
        }
        for entry in state.difference(&now) {
            seen.push(Seen { step, entry: entry.clone(), appeared: false, at: *at });
        }
        state = now;
    }
    (baseline, seen)
}

fn story_capsules(k: usize) -> Vec<HostedCapsule> {
    vec![HostedCapsule { name: capsule(k), digest: None, version: "1.0.0".into() }]
}

fn simulated_timelines() -> Vec<Timeline> {
    let formed_s = FORMED_MS / 1000;
    let at_s = |step: usize| formed_s + STORY[step].0 as u64 / 1000;
    let mut scenario = Scenario {
        name: "fidelity-timeline".into(),
        nodes: 4,
        duration_s: formed_s + END_MS as u64 / 1000,
        ..Scenario::default()
    };
    scenario.protocol.refresh_s = 1;
    scenario.protocol.ttl_s = 3;
    scenario.network.latency_ms = vec![vec![WIRE_MS]];
    scenario.network.jitter_ms = 0;
    scenario.topology.join_spread_s = 1;
    scenario.topology.bootstrap_peers = 1;
    scenario.workload.change_interval_ms = 0;
    scenario.faults = vec![
        Fault::Crash { at_s: at_s(1), count: 0, nodes: vec![2], restart_after_s: None },
        Fault::Join { at_s: at_s(2), count: 1 },
        Fault::Partition {
            at_s: at_s(3),
            until_s: at_s(4),
            fraction: 0.0,
            by_region: false,
            one_way: false,
            nodes: vec![0, 1],
        },
    ];
    scenario.check.liveness_bound_s = 10;
    let mut sim = Sim::new(scenario, Options { seed: 1, ..Options::default() });
    for k in 0..5 {
        sim.set_capsules(k, story_capsules(k));
    }
    let swap = vec![HostedCapsule { name: "fid-1b".into(), digest: None, version: "1.0.0".into() }];
    let (outcome, timelines) = sim.run_timeline(TICK_MS, &[(FORMED_MS + STORY[0].0 as u64, 1, swap)]);
    assert_eq!(outcome.verdict, Verdict::Pass, "{:?}", outcome.findings);
    timelines
        .into_iter()
        .map(|t| t.into_iter().map(|(at, view)| (at as i64 - FORMED_MS as i64, view)).collect())
        .collect()
}

/// What a watch saw: when it asked, and the answer (`None`: no answer).
type Samples = Arc<Mutex<Vec<(Instant, Option<RealView>)>>>;

/// Samples one real node's directory every `TICK_MS`, from inside its namespace.
struct Watch {
    samples: Samples,
    stop: Arc<AtomicBool>,
    thread: Option<std::thread::JoinHandle<()>>,
}

fn real_view_of(json: &serde_json::Value) -> Option<RealView> {
    let mut view = RealView::new();
    for capsule in json["capsules"].as_array()? {
        let mut hosts: Vec<String> = capsule["providers"]
            .as_array()?
            .iter()
            .filter_map(|p| p["peer_id"].as_str().map(str::to_owned))
            .collect();
        hosts.sort_unstable();
        if !hosts.is_empty() {
            view.insert(capsule["name"].as_str()?.to_owned(), hosts);
        }
    }
    Some(view)
}

impl Watch {
    fn start(lab: &HubLab, host: usize, node: &TestNode) -> Self {
        let samples = Arc::new(Mutex::new(Vec::new()));
        let stop = Arc::new(AtomicBool::new(false));
        let url = format!("{}/v1/capsules", node.api);
        let (out, halt) = (Arc::clone(&samples), Arc::clone(&stop));
        let thread = lab
            .spawn_in(host, move || {
                let client =
                    reqwest::blocking::Client::builder().timeout(Duration::from_millis(500)).build().unwrap();
                let mut next = Instant::now();
                while !halt.load(Ordering::SeqCst) {
                    let asked = Instant::now();
                    let view = client
                        .get(&url)
                        .send()
                        .ok()
                        .and_then(|r| r.json::<serde_json::Value>().ok())
                        .and_then(|json| real_view_of(&json));
                    let mut samples = out.lock().unwrap();
                    if samples.last().is_none_or(|(_, last): &(Instant, Option<RealView>)| *last != view) {
                        samples.push((asked, view));
                    }
                    drop(samples);
                    next += Duration::from_millis(TICK_MS);
                    std::thread::sleep(next.saturating_duration_since(Instant::now()));
                }
            })
            .expect("a thread in the host's namespace");
        Self { samples, stop, thread: Some(thread) }
    }

    fn latest(&self) -> Option<RealView> {
        self.samples.lock().unwrap().last().and_then(|(_, v)| v.clone())
    }

    fn finish(mut self, t0: Instant, peers: &[String]) -> Timeline {
        self.stop.store(true, Ordering::SeqCst);
        if let Some(thread) = self.thread.take() {
            thread.join().expect("the watch thread");
        }
        let index = |id: &String| peers.iter().position(|p| p == id).map_or(u32::MAX, |i| i as u32);
        let samples = self.samples.lock().unwrap();
        samples
            .iter()
            .map(|(at, view)| {
                let at =
                    if *at >= t0 { (*at - t0).as_millis() as i64 } else { -((t0 - *at).as_millis() as i64) };
                let view = view.as_ref().map(|v| {
                    v.iter()
                        .map(|(name, ids)| {
                            let mut hosts: Vec<u32> = ids.iter().map(index).collect();
                            hosts.sort_unstable();
                            (name.clone(), hosts)
                        })
                        .collect()
                });
                (at, view)
            })
            .collect()
    }
}

fn story_config(name: &str) -> String {
    format!("[adverts]\nrefresh_secs = 1\nttl_secs = 3\n{}", capsules_toml(&[(name, "1.0.0")]))
}

fn launch_on(lab: &HubLab, k: usize, dir: &tempfile::TempDir, bootstrap: Option<&TestNode>) -> TestNode {
    let listen = format!("/ip4/{}/tcp/0", lab.ip(k));
    let boot = bootstrap.map(|b| b.dial_addrs()[0].clone());
    let mut args = vec!["--api", "127.0.0.1:0", "--listen", &listen, "--no-mdns"];
    if let Some(boot) = &boot {
        args.extend(["--bootstrap", boot]);
    }
    TestNode::launch(&lab.launcher(k), dir.path(), &args).unwrap()
}

fn real_timelines(lab: &HubLab) -> Vec<Timeline> {
    let dirs: Vec<tempfile::TempDir> =
        (0..5).map(|k| murmur_tests::init_data_dir_with(&story_config(&capsule(k)))).collect();
    let mut nodes: Vec<Option<TestNode>> = Vec::new();
    for (k, dir) in dirs.iter().enumerate().take(4) {
        let node = launch_on(lab, k, dir, nodes.last().and_then(Option::as_ref));
        nodes.push(Some(node));
    }
    let mut peers: Vec<String> = nodes.iter().flatten().map(|n| n.peer_id().to_owned()).collect();
    let mut watches: Vec<Watch> =
        nodes.iter().enumerate().map(|(k, n)| Watch::start(lab, k, n.as_ref().unwrap())).collect();
    let full: RealView = (0..4).map(|k| (capsule(k), vec![peers[k].clone()])).collect();
    wait_for(Duration::from_secs(30), "four real nodes to know each other", || {
        watches.iter().all(|w| w.latest().as_ref() == Some(&full)).then_some(())
    })
    .unwrap();

    let t0 = Instant::now();
    let at = |step: usize| t0 + Duration::from_millis(STORY[step].0 as u64);
    let sleep_until = |when: Instant| std::thread::sleep(when.saturating_duration_since(Instant::now()));

    sleep_until(at(0));
    let config = dirs[1].path().join("murnode.toml");
    let text = std::fs::read_to_string(&config).unwrap().replace("name = \"fid-1\"", "name = \"fid-1b\"");
    std::fs::write(&config, text).unwrap();
    nodes[1].as_ref().unwrap().reload();

    sleep_until(at(1));
    nodes[2].as_mut().unwrap().kill();

    sleep_until(at(2));
    let late = launch_on(lab, 4, &dirs[4], nodes[3].as_ref());
    peers.push(late.peer_id().to_owned());
    watches.push(Watch::start(lab, 4, &late));
    nodes.push(Some(late));

    sleep_until(at(3));
    lab.split(&[0, 1]);
    sleep_until(at(4));
    lab.heal();
    sleep_until(t0 + Duration::from_millis(END_MS as u64));

    let timelines = watches.into_iter().map(|w| w.finish(t0, &peers)).collect();
    let (delivered, dropped) = lab.frames();
    eprintln!("hub: {delivered} frames delivered, {dropped} dropped");
    for (k, node) in nodes.iter().enumerate() {
        if let Some(node) = node
            && !node.stderr().is_empty()
        {
            eprintln!("--- node {k} stderr (tail) ---\n{}", tail(&node.stderr(), 20));
        }
    }
    drop(nodes);
    timelines
}

fn tail(text: &str, lines: usize) -> String {
    let all: Vec<&str> = text.lines().collect();
    all[all.len().saturating_sub(lines)..].join("\n")
}

fn describe(seen: &[Seen]) -> String {
    seen.iter()
        .map(|s| {
            format!(
                "  after step {} ({}): {} ({}, node {}) at {} ms",
                s.step,
                s.step.checked_sub(1).map_or("formation", |i| STORY[i].1),
                if s.appeared { "+" } else { "-" },
                s.entry.0,
                s.entry.1,
                s.at
            )
        })
        .collect::<Vec<_>>()
        .join("\n")
}

#[test]
fn every_change_reaches_every_node_in_the_same_order_and_time_envelope_as_simulated() {
    let lab = match murmur_tests::hub::HubLab::new(5, Duration::from_millis(WIRE_MS)) {
        Ok(lab) => lab,
        Err(reason) if std::env::var_os("MURMUR_REQUIRE_NETNS").is_some() => {
            panic!("MURMUR_REQUIRE_NETNS is set but the lab cannot be made: {reason}")
        }
        Err(reason) => {
            eprintln!("SKIPPED: the lab's namespaces and taps are unavailable here ({reason})");
            return;
        }
    };
    let simulated = simulated_timelines();
    let real = real_timelines(&lab);
    assert_eq!(simulated.len(), 5, "the simulation made five nodes");

    let full: BTreeSet<Entry> = (0..4u32).map(|k| (capsule(k as usize), k)).collect();
    let mut problems = Vec::new();
    let mut rows = Vec::new();
    for k in 0..5 {
        let until = if k == 2 { KILL_AT } else { END_MS };
        let (sim_start, sim_seen) = changes(&simulated[k], until);
        let (real_start, real_seen) = changes(&real[k], until);
        let expected_start = if k < 4 { full.clone() } else { BTreeSet::new() };
        assert_eq!(sim_start, expected_start, "node {k} in the simulation at scenario time 0");
        assert_eq!(real_start, expected_start, "node {k} in the lab at scenario time 0");
        // The same changes, each after the same step of the story: the order is the same.
        let key = |s: &Seen| (s.step, s.entry.clone(), s.appeared);
        let mut sim_sorted = sim_seen.clone();
        sim_sorted.sort_by_key(key);
        let mut real_sorted = real_seen.clone();
        real_sorted.sort_by_key(key);
        let sim_keys: Vec<_> = sim_sorted.iter().map(key).collect();
        let real_keys: Vec<_> = real_sorted.iter().map(key).collect();
        if sim_keys != real_keys {
            problems.push(format!(
                "node {k} saw different changes.\n simulated:\n{}\n real:\n{}",
                describe(&sim_seen),
                describe(&real_seen)
            ));
            continue;
        }
        for (s, r) in sim_sorted.iter().zip(&real_sorted) {
            let since = STORY[s.step - 1].0;
            let (ds, dr) = (s.at - since, r.at - since);
            rows.push((s.step, k, s.entry.clone(), s.appeared, ds, dr));
            if dr > FACTOR * ds + SLACK_MS || ds > FACTOR * dr + SLACK_MS {
                problems.push(format!(
                    "node {k}: {} ({}, node {}) after step {} took {dr} ms in the lab and {ds} ms simulated, \
                     outside {FACTOR}x + {SLACK_MS} ms",
                    if s.appeared { "+" } else { "-" },
                    s.entry.0,
                    s.entry.1,
                    s.step
                ));
            }
        }
    }
    eprintln!("step  node  change              simulated ms  lab ms");
    for (step, k, entry, appeared, ds, dr) in &rows {
        let change = format!("{}{}@{}", if *appeared { "+" } else { "-" }, entry.0, entry.1);
        eprintln!("{step:>4}  {k:>4}  {change:<18}  {ds:>12}  {dr:>6}");
    }
    // Every step of the story changed something somewhere: none of it was vacuous.
    for step in 1..=STORY.len() {
        assert!(rows.iter().any(|r| r.0 == step), "step {step} ({}) changed no directory", STORY[step - 1].1);
    }
    assert!(problems.is_empty(), "{}", problems.join("\n"));
}
