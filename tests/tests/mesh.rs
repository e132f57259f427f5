//! The mesh with real processes: discovery, gossip, anti-entropy, expiry, refusals,
//! closed meshes and mDNS.

use std::collections::BTreeSet;
use std::io::Write;
use std::process::{Command, Stdio};
use std::time::{Duration, Instant};

use murmur_protocol::{Advert, HostedCapsule, Millis, SecretKey, Signed};
use murmur_tests::{TestNode, bin, capsules_toml, mur_json, wait_for};
use nix::sys::signal::Signal;

const CONVERGE: Duration = Duration::from_secs(20);

fn names(list: &[&str]) -> BTreeSet<String> {
    list.iter().map(|s| (*s).to_owned()).collect()
}

fn has_all(node: &TestNode, expected: &BTreeSet<String>) -> bool {
    expected.is_subset(&node.capsule_names().into_iter().collect())
}

#[test]
fn five_nodes_bootstrapped_in_a_chain_all_find_each_other() {
    let mut nodes: Vec<TestNode> = Vec::new();
    for k in 0..5 {
        let toml = capsules_toml(&[(&format!("cap{k}"), "1.0.0")]);
        let node = TestNode::start_with(&toml, nodes.last()).unwrap();
        nodes.push(node);
    }
    let all = names(&["cap0", "cap1", "cap2", "cap3", "cap4"]);
    for (k, node) in nodes.iter().enumerate() {
        let others: BTreeSet<String> =
            nodes.iter().filter(|n| n.peer_id() != node.peer_id()).map(|n| n.peer_id().to_owned()).collect();
        wait_for(CONVERGE, &format!("node {k} to connect to the other four"), || {
            let connected: BTreeSet<String> = node.connected_peers().into_iter().collect();
            others.is_subset(&connected).then_some(())
        })
        .unwrap();
        wait_for(CONVERGE, &format!("node {k} to list every capsule"), || has_all(node, &all).then_some(()))
            .unwrap();
    }
    // The same through the CLI a user would run.
    let peers = mur_json(&["peers", "--node", &nodes[4].api, "--json"]);
    let connected = peers["peers"].as_array().unwrap().iter().filter(|p| p["connected"] == true).count();
    assert_eq!(connected, 4);
    let capsules = mur_json(&["capsules", "--node", &nodes[0].api, "--json"]);
    let cap4 = capsules["capsules"].as_array().unwrap().iter().find(|c| c["name"] == "cap4").unwrap();
    assert_eq!(cap4["providers"][0]["peer_id"], nodes[4].peer_id());
    assert_eq!(cap4["providers"][0]["version"], "1.0.0");
}

/// Nodes hosting alpha, beta and gamma, each bootstrapped to the previous one, with
/// `adverts` as their `[adverts]` section; returns once the first two list all three.
fn three_nodes(adverts: &str) -> (TestNode, TestNode, TestNode) {
    let config = |cap: &str| format!("[adverts]\n{adverts}\n{}", capsules_toml(&[(cap, "1.0.0")]));
    let a = TestNode::start_with(&config("alpha"), None).unwrap();
    let b = TestNode::start_with(&config("beta"), Some(&a)).unwrap();
    let c = TestNode::start_with(&config("gamma"), Some(&b)).unwrap();
    let all = names(&["alpha", "beta", "gamma"]);
    for node in [&a, &b] {
        wait_for(CONVERGE, "three capsules", || has_all(node, &all).then_some(())).unwrap();
    }
    (a, b, c)
}

/// Waits until none of `nodes` lists `capsule`.
fn wait_gone(nodes: [&TestNode; 2], capsule: &str, within: Duration) {
    for node in nodes {
        wait_for(within, &format!("{capsule} to leave the directory"), || {
            (!node.capsule_names().contains(&capsule.to_owned())).then_some(())
        })
        .unwrap();
    }
}

#[test]
fn a_killed_node_disappears_after_the_ttl() {
    // Departure notices off: the TTL alone drops it.
    let (a, b, mut c) = three_nodes("refresh_secs = 1\nttl_secs = 3\nsuspect_secs = 0");
    c.kill();
    // Its last advert is valid for at least two more seconds: still listed right now.
    assert!(a.capsule_names().contains(&"gamma".to_owned()), "dropped before its advert expired");
    wait_gone([&a, &b], "gamma", Duration::from_secs(15));
    assert!(a.capsule_names().contains(&"beta".to_owned()), "live nodes stay listed (refreshed)");
    assert!(a.metric("murmur_adverts_expired_total") >= 1);
}

#[test]
fn a_killed_node_is_declared_gone_by_its_peers_long_before_its_ttl() {
    // Adverts live ten minutes; the peers that lose the node declare it gone after 2 s.
    let (a, b, mut c) = three_nodes("refresh_secs = 300\nttl_secs = 600\nsuspect_secs = 2");
    c.kill();
    let killed = Instant::now();
    wait_gone([&a, &b], "gamma", Duration::from_secs(20));
    eprintln!("gamma left every directory {:?} after the kill (TTL 600 s)", killed.elapsed());
    assert_eq!(a.metric("murmur_adverts_expired_total"), 0, "a notice, not the TTL, dropped it");
    let declared = a.metric("murmur_departures_total{kind=\"declared\"}")
        + b.metric("murmur_departures_total{kind=\"declared\"}");
    assert!(declared >= 1, "a witness declared it");
    assert!(a.metric("murmur_departures_total{kind=\"applied\"}") >= 1);
    // The live nodes stay listed: losing a peer is not losing the mesh.
    assert!(has_all(&a, &names(&["alpha", "beta"])) && has_all(&b, &names(&["alpha", "beta"])));
}

#[test]
fn a_frozen_node_is_declared_gone_and_comes_back_when_it_thaws() {
    // SIGSTOP: the kernel keeps the node's TCP connections open and still accepts dials, but
    // nothing answers, as with a machine that hangs or a link that silently drops
    // everything. Peers must notice by ping (TCP alone would keep the connections for about
    // fifteen minutes), declare it gone, and take it back when it answers again.
    let adverts = "refresh_secs = 300\nttl_secs = 600\nsuspect_secs = 2\n\n[network]\nping_interval_secs = 1\nping_timeout_secs = 2";
    let (a, b, c) = three_nodes(adverts);
    let before = advert_seq(&a, c.peer_id()).expect("alpha holds gamma's advert");
    c.signal(Signal::SIGSTOP);
    let frozen = Instant::now();
    // Ping timeout (≤ 3 s), then the redial, which waits out the dial backoff (30 s from
    // the last dial of gamma, made when the mesh formed), then the suspicion (2-3 s).
    wait_gone([&a, &b], "gamma", Duration::from_secs(45));
    eprintln!("gamma left every directory {:?} after it froze (TTL 600 s)", frozen.elapsed());
    assert!(a.metric("murmur_ping_failures_total") + b.metric("murmur_ping_failures_total") >= 1);
    assert_eq!(a.metric("murmur_adverts_expired_total"), 0, "a notice, not the TTL, dropped it");
    assert!(a.metric("murmur_departures_total{kind=\"applied\"}") >= 1);

    c.signal(Signal::SIGCONT);
    let thawed = Instant::now();
    let all = names(&["alpha", "beta", "gamma"]);
    for node in [&a, &b, &c] {
        wait_for(CONVERGE, "gamma back in every directory", || has_all(node, &all).then_some(())).unwrap();
    }
    eprintln!("gamma was back in every directory {:?} after it thawed", thawed.elapsed());
    // Back with a newer advert (the one it announces on reconnecting, or its refutation of
    // the notice): the old one, which the notice named, stays refused as a replay.
    let after = advert_seq(&a, c.peer_id()).expect("alpha holds gamma's advert again");
    assert!(after > before, "gamma's advert {after} is newer than {before}");
}

#[test]
fn large_directories_sync_by_summary_between_real_nodes() {
    // 70 adverts of nodes that do not exist, injected at alpha and gossiped on to beta, make
    // both directories large enough (64 nodes) for summaries. Then beta freezes until alpha
    // closes the connection (ping) and thaws: they reconnect, and each side's summary is
    // answered over /murmur/sync/1 and understood (it settles the exchange or leads to the
    // digest of the buckets that differ), and the directories agree.
    let adverts = "refresh_secs = 300\nttl_secs = 600\nsuspect_secs = 0\n\n[network]\nping_interval_secs = 1\nping_timeout_secs = 2";
    let config = |cap: &str| format!("[adverts]\n{adverts}\n{}", capsules_toml(&[(cap, "1.0.0")]));
    let a = TestNode::start_with(&config("alpha"), None).unwrap();
    let b = TestNode::start_with(&config("beta"), Some(&a)).unwrap();
    for node in [&a, &b] {
        wait_for(CONVERGE, "alpha and beta", || has_all(node, &names(&["alpha", "beta"])).then_some(()))
            .unwrap();
    }
    let now = now();
    let bulk_adverts: Vec<Vec<u8>> =
        (0..70u8).map(|n| advert_envelope(&SecretKey::from_seed([n + 0x40; 32]), 1, now, "bulk")).collect();
    let (mut peer, _file) = inject(&a, &bulk_adverts);
    let bulk = |node: &TestNode| {
        let capsules = node.get("/v1/capsules").ok()?;
        let entry = capsules["capsules"].as_array()?.iter().find(|c| c["name"] == "bulk")?.clone();
        Some(entry["providers"].as_array()?.len())
    };
    let outcome = [&a, &b]
        .iter()
        .try_for_each(|node| wait_for(CONVERGE, "70 bulk hosts", || (bulk(node) == Some(70)).then_some(())));
    let _ = peer.kill();
    let _ = peer.wait();
    outcome.unwrap();

    let answered = |node: &TestNode| {
        node.metric("murmur_sync_summaries_total{outcome=\"settled\"}")
            + node.metric("murmur_sync_summaries_total{outcome=\"scoped\"}")
    };
    let before = (answered(&a), answered(&b));
    b.signal(Signal::SIGSTOP);
    let cut = wait_for(CONVERGE, "alpha to close the connection to the frozen beta", || {
        (!a.connected_peers().contains(&b.peer_id().to_owned())).then_some(())
    });
    b.signal(Signal::SIGCONT);
    cut.unwrap();
    wait_for(Duration::from_secs(40), "both summaries answered after the reconnect", || {
        (answered(&a) > before.0 && answered(&b) > before.1).then_some(())
    })
    .unwrap();
    for node in [&a, &b] {
        assert!(node.metric("murmur_sync_summaries_total{outcome=\"started\"}") >= 1);
        assert_eq!(bulk(node), Some(70));
    }
}

/// The sequence number of `peer`'s advert in `node`'s directory, if it holds one.
fn advert_seq(node: &TestNode, peer: &str) -> Option<u64> {
    let peers = node.get("/v1/peers").ok()?;
    peers["peers"].as_array()?.iter().find(|p| p["peer_id"] == peer)?["advert_seq"].as_u64()
}

#[test]
fn a_late_joiner_learns_the_directory_long_before_a_refresh() {
    // Default refresh (30 s): anything the late node learns within the bound below came
    // from anti-entropy on connect, not from a periodic republish.
    let a = TestNode::start_with(&capsules_toml(&[("alpha", "1.0.0")]), None).unwrap();
    let b = TestNode::start_with(&capsules_toml(&[("beta", "1.0.0")]), Some(&a)).unwrap();
    let c = TestNode::start_with(&capsules_toml(&[("gamma", "1.0.0")]), Some(&b)).unwrap();
    let all = names(&["alpha", "beta", "gamma"]);
    wait_for(CONVERGE, "three nodes to converge", || has_all(&c, &all).then_some(())).unwrap();

    let late = TestNode::start_with(&capsules_toml(&[("delta", "1.0.0")]), Some(&c)).unwrap();
    let joined = Instant::now();
    wait_for(Duration::from_secs(10), "the late node to learn every capsule", || {
        has_all(&late, &all).then_some(())
    })
    .unwrap();
    let took = joined.elapsed();
    eprintln!("late joiner learned the directory in {took:?} (refresh interval 30 s)");
    assert!(late.metric("murmur_sync_total{direction=\"sent\"}") >= 1);
    wait_for(CONVERGE, "delta to reach the first node", || {
        a.capsule_names().contains(&"delta".to_owned()).then_some(())
    })
    .unwrap();
}

/// Signs an advert for `key` with the given sequence number and issue time.
fn advert_envelope(key: &SecretKey, seq: u64, issued_at: Millis, capsule: &str) -> Vec<u8> {
    let mut advert = Advert::new(seq, issued_at, 90_000);
    advert.capsules.push(HostedCapsule { name: capsule.into(), digest: None, version: "6.6.6".into() });
    Signed::sign(advert, key).unwrap().envelope().encode()
}

/// Starts a test peer that dials `node` and publishes `envelopes` on the advert topic; it
/// stays connected until killed. The file it reads them from lives as long as the returned
/// handle.
fn inject(node: &TestNode, envelopes: &[Vec<u8>]) -> (std::process::Child, tempfile::NamedTempFile) {
    let file = tempfile::NamedTempFile::new().unwrap();
    for envelope in envelopes {
        writeln!(file.as_file(), "{}", hex::encode(envelope)).unwrap();
    }
    let peer = Command::new(bin("murmur-testpeer"))
        .args(["--dial", &node.dial_addrs()[0], "--publish", file.path().to_str().unwrap()])
        .stdin(Stdio::piped())
        .stdout(Stdio::piped())
        .spawn()
        .unwrap();
    (peer, file)
}

/// An advert that claims `victim`'s key but is signed by another key.
fn forged_envelope(victim: &SecretKey, now: Millis) -> Vec<u8> {
    let forger = SecretKey::from_seed([0x66; 32]);
    let genuine = advert_envelope(victim, now.0 + 1_000_000, now, "forged");
    let forged = advert_envelope(&forger, now.0 + 1_000_000, now, "forged");
    // Splice the forger's signature into the victim's envelope.
    let mut value: ciborium::Value = ciborium::de::from_reader(genuine.as_slice()).unwrap();
    let forged_value: ciborium::Value = ciborium::de::from_reader(forged.as_slice()).unwrap();
    let forged_sig =
        forged_value.as_map().unwrap().iter().find(|(k, _)| k.as_text() == Some("sig")).unwrap().1.clone();
    for (k, v) in value.as_map_mut().unwrap() {
        if k.as_text() == Some("sig") {
            *v = forged_sig.clone();
        }
    }
    murmur_protocol::codec::encode(&value)
}

fn now() -> Millis {
    Millis(std::time::SystemTime::now().duration_since(std::time::UNIX_EPOCH).unwrap().as_millis() as u64)
}

#[test]
fn forged_and_replayed_adverts_are_refused_counted_and_never_relayed() {
    let a = TestNode::start_with(&capsules_toml(&[("alpha", "1.0.0")]), None).unwrap();
    let b = TestNode::start_with(&capsules_toml(&[("beta", "1.0.0")]), Some(&a)).unwrap();
    wait_for(CONVERGE, "a and b to converge", || has_all(&a, &names(&["alpha", "beta"])).then_some(()))
        .unwrap();

    let b_key = SecretKey::from_slice(&std::fs::read(b.data_dir.join("node.key")).unwrap()).unwrap();
    let now = now();
    let envelopes = [
        forged_envelope(&b_key, now),
        // b's real key, an old sequence number: a replay of an advert b once sent.
        advert_envelope(&b_key, 1, now, "replayed"),
        // b's real key, a new sequence number, but issued two hours ago: a stale copy.
        advert_envelope(&b_key, now.0 * 2, now.minus(2 * 3_600_000), "expired"),
    ];
    let (mut peer, _file) = inject(&a, &envelopes);
    let refused = |node: &TestNode, reason: &str| {
        node.metric(&format!("murmur_adverts_refused_total{{reason=\"{reason}\"}}"))
    };
    let outcome = wait_for(CONVERGE, "a to refuse all three", || {
        (refused(&a, "bad_signature") >= 1 && refused(&a, "stale") >= 1 && refused(&a, "expired") >= 1)
            .then_some(())
    });
    let _ = peer.kill();
    let _ = peer.wait();
    outcome.unwrap();
    assert!(a.metric("murmur_gossip_verdicts_total{verdict=\"reject\"}") >= 1, "the forgery is a rejection");
    // Give any relay a chance to happen, then check nothing reached the third party.
    std::thread::sleep(Duration::from_millis(1500));
    for node in [&a, &b] {
        let listed = node.capsule_names();
        for bad in ["forged", "replayed", "expired"] {
            assert!(!listed.contains(&bad.to_owned()), "{bad} listed by {}", node.peer_id());
        }
    }
    // Had a relayed any of the three, b would have refused it too: honest traffic gives b
    // no reason for these refusals (it holds no older advert of anyone, and its own advert
    // never comes back older than it is).
    for reason in ["bad_signature", "stale", "expired"] {
        assert_eq!(refused(&b, reason), 0, "a relayed something it refused ({reason} at b)");
    }
}

#[test]
fn a_closed_mesh_admits_only_certified_nodes() {
    let dir = tempfile::tempdir().unwrap();
    let authority_key = dir.path().join("authority.key");
    let authority = mur_json(&["key", "gen", "--out", authority_key.to_str().unwrap(), "--json"]);
    let authority = authority["public_key"].as_str().unwrap().to_owned();
    let closed = |cap: &str| {
        format!(
            "[trust]\nclosed = true\nauthorities = [\"{authority}\"]\n{}",
            capsules_toml(&[(cap, "1.0.0")])
        )
    };
    let certified = |cap: &str, bootstrap: Option<&TestNode>| {
        let data = murmur_tests::init_data_dir_with(&closed(cap));
        let peer_id = murmur_tests::murnode(&["init", "--data-dir", data.path().to_str().unwrap(), "--json"]);
        let peer_id: serde_json::Value = serde_json::from_slice(&peer_id.stdout).unwrap();
        let cert = data.path().join("node.cert");
        mur_json(&[
            "cert",
            "sign",
            "--key",
            authority_key.to_str().unwrap(),
            "--node",
            peer_id["peer_id"].as_str().unwrap(),
            "--out",
            cert.to_str().unwrap(),
            "--json",
        ]);
        let mut args: Vec<String> = murmur_tests::LOOPBACK.iter().map(|s| (*s).to_owned()).collect();
        if let Some(peer) = bootstrap {
            args.extend(["--bootstrap".to_owned(), peer.dial_addrs()[0].clone()]);
        }
        let args: Vec<&str> = args.iter().map(String::as_str).collect();
        TestNode::start_owned(data, &args).unwrap()
    };
    let a = certified("alpha", None);
    let b = certified("beta", Some(&a));
    wait_for(CONVERGE, "certified nodes to exchange adverts", || {
        has_all(&a, &names(&["alpha", "beta"])).then_some(())
    })
    .unwrap();

    // An open-mesh node with no certificate dials into the closed mesh.
    let intruder = TestNode::start_with(&capsules_toml(&[("intruder", "1.0.0")]), Some(&a)).unwrap();
    wait_for(CONVERGE, "a to refuse the intruder", || {
        (a.metric("murmur_peers_refused_total") >= 1).then_some(())
    })
    .unwrap();
    // Refused, it stays out: whatever dials again (its bootstrap retries, either side's
    // Kademlia) meets a's block list, so a never lists it as connected again.
    let intruder_id = intruder.peer_id().to_owned();
    for _ in 0..30 {
        assert!(!a.connected_peers().contains(&intruder_id), "a is connected to the refused intruder");
        std::thread::sleep(Duration::from_millis(100));
    }
    assert!(!a.capsule_names().contains(&"intruder".to_owned()));
    assert!(!b.capsule_names().contains(&"intruder".to_owned()));
    // a says so: the intruder is listed as refused, held off for most of a minute.
    let peers = a.get("/v1/peers").unwrap();
    let listed =
        peers["peers"].as_array().unwrap().iter().find(|p| p["peer_id"] == intruder_id.as_str()).cloned();
    let listed = listed.expect("a lists the intruder it refused");
    assert_eq!(listed["connected"], false, "{listed}");
    assert!(listed["held_ms"].as_u64().is_some_and(|ms| (30_000..=60_000).contains(&ms)), "{listed}");

    // A closed-mesh node without its certificate refuses to start, saying how to get one.
    let data = murmur_tests::init_data_dir_with(&closed("x"));
    let out = murmur_tests::murnode(&["run", "--data-dir", data.path().to_str().unwrap(), "--no-mdns"]);
    assert_eq!(out.status.code(), Some(2));
    assert!(String::from_utf8_lossy(&out.stderr).contains("mur cert sign"));
}

#[test]
fn sighup_republishes_changed_capsules() {
    let a = TestNode::start_with(&capsules_toml(&[("alpha", "1.0.0")]), None).unwrap();
    let b = TestNode::start_with("", Some(&a)).unwrap();
    wait_for(CONVERGE, "alpha at b", || has_all(&b, &names(&["alpha"])).then_some(())).unwrap();
    std::fs::write(a.data_dir.join("murnode.toml"), capsules_toml(&[("alpha", "1.0.0"), ("omega", "2.0.0")]))
        .unwrap();
    a.reload();
    wait_for(CONVERGE, "omega at b after reload", || has_all(&b, &names(&["omega"])).then_some(())).unwrap();
    // A broken config on reload is refused; the node keeps running as it was.
    std::fs::write(a.data_dir.join("murnode.toml"), "[[capsules]]\nname = \"Bad Name\"\nversion = \"1\"\n")
        .unwrap();
    a.reload();
    std::thread::sleep(Duration::from_millis(500));
    assert!(has_all(&a, &names(&["alpha", "omega"])));
    assert_eq!(a.get("/healthz").unwrap()["status"], "ok");
}

#[test]
fn nodes_with_no_bootstrap_find_each_other_by_mdns() {
    let lab = match murmur_tests::netns::Lab::new(3) {
        Ok(lab) => lab,
        Err(reason) => {
            eprintln!("SKIPPED: network namespaces unavailable here ({reason})");
            return;
        }
    };
    let mut nodes = Vec::new();
    let mut dirs = Vec::new();
    // The API is reached from the lab's bridge, not loopback: it takes a token.
    const TOKEN: &str = "lab-token-0123456789abcdef";
    for i in 0..3 {
        let config =
            format!("[api]\ntokens = [\"{TOKEN}\"]\n\n{}", capsules_toml(&[(&format!("lan{i}"), "1.0.0")]));
        let dir = murmur_tests::init_data_dir_with(&config);
        let api = format!("{}:0", lab.ip(i));
        let mut node = TestNode::launch(
            &lab.launcher(i),
            dir.path(),
            &["--api", &api, "--listen", "/ip4/0.0.0.0/tcp/0"],
        )
        .unwrap();
        node.token = Some(TOKEN.into());
        nodes.push(node);
        dirs.push(dir);
    }
    let all = names(&["lan0", "lan1", "lan2"]);
    for node in &nodes {
        wait_for(CONVERGE, "mDNS discovery and gossip", || has_all(node, &all).then_some(())).unwrap();
        assert_eq!(node.connected_peers().len(), 2, "{}", node.stderr());
    }
    // What a node announces is its LAN address, never loopback.
    let peers = nodes[0].get("/v1/peers").unwrap();
    for peer in peers["peers"].as_array().unwrap() {
        for addr in peer["addrs"].as_array().unwrap() {
            assert!(!addr.as_str().unwrap().contains("/127.0.0.1/"), "{addr}");
        }
    }
    drop(nodes);
}

#[test]
fn nodes_connect_over_quic_alone() {
    let quic = ["--listen", "/ip4/127.0.0.1/udp/0/quic-v1", "--no-mdns"];
    let a_dir = murmur_tests::init_data_dir_with(&capsules_toml(&[("over-quic", "1.0.0")]));
    let a = TestNode::start_owned(a_dir, &quic).unwrap();
    assert!(a.dial_addrs()[0].contains("/quic-v1/"), "{:?}", a.dial_addrs());
    let b_dir = murmur_tests::init_data_dir_with("");
    let bootstrap = a.dial_addrs()[0].clone();
    let mut args = quic.to_vec();
    args.extend(["--bootstrap", &bootstrap]);
    let b = TestNode::start_owned(b_dir, &args).unwrap();
    wait_for(CONVERGE, "the advert over QUIC", || has_all(&b, &names(&["over-quic"])).then_some(())).unwrap();
    assert_eq!(b.connected_peers(), vec![a.peer_id().to_owned()]);
}

/// Start order must not matter: a node whose bootstrap peer is down when it starts dials
/// it again (every 5 s while it has no peer at all) and connects once the peer is up.
#[test]
fn a_node_started_before_its_bootstrap_peer_connects_once_the_peer_comes_up() {
    let a_dir = murmur_tests::init_data_dir_with(&capsules_toml(&[("started-late", "1.0.0")]));
    // A first run only to learn A's address (its port and peer id), then A is stopped. A
    // listens on 127.0.0.2 (loopback too), where no other test's node takes its port while
    // it is down.
    let mut a = TestNode::start_in(a_dir.path(), &["--listen", "/ip4/127.0.0.2/tcp/0", "--no-mdns"]).unwrap();
    let a_addr = a.dial_addrs()[0].clone();
    let a_listen = a_addr.split("/p2p/").next().unwrap().to_owned();
    let a_id = a.peer_id().to_owned();
    a.terminate(Duration::from_secs(10)).unwrap();
    drop(a);

    let b =
        TestNode::start(&["--listen", "/ip4/127.0.0.1/tcp/0", "--no-mdns", "--bootstrap", &a_addr]).unwrap();
    // B's first dial finds nobody listening.
    std::thread::sleep(Duration::from_millis(1500));
    assert!(b.connected_peers().is_empty());
    let a = TestNode::start_in(a_dir.path(), &["--listen", &a_listen, "--no-mdns"]).unwrap();
    assert_eq!(a.peer_id(), a_id);
    wait_for(CONVERGE, "B to connect to the bootstrap peer that started after it", || {
        b.connected_peers().contains(&a_id).then_some(())
    })
    .unwrap();
    wait_for(CONVERGE, "A's advert at B", || has_all(&b, &names(&["started-late"])).then_some(())).unwrap();
}

#[test]
fn a_node_announcing_early_republishes_when_its_first_peer_subscribes() {
    // Two nodes join the same one, one announcing early. Both publish at start (to no one)
    // and a second after their first connection; the early one also the moment gossipsub
    // tells it the peer subscribed.
    let hub = TestNode::start_with(&capsules_toml(&[("hub", "1.0.0")]), None).unwrap();
    let joiner = |cap: &str, early: bool| {
        let toml = format!("[adverts]\nannounce_early = {early}\n{}", capsules_toml(&[(cap, "1.0.0")]));
        TestNode::start_with(&toml, Some(&hub)).unwrap()
    };
    let (plain, early) = (joiner("plain", false), joiner("early", true));
    for cap in ["plain", "early"] {
        wait_for(CONVERGE, &format!("{cap} to reach the hub"), || {
            hub.capsule_names().contains(&cap.to_owned()).then_some(())
        })
        .unwrap();
    }
    let out = "murmur_gossip_messages_total{direction=\"out\"}";
    // Past both nodes' announcement a second after connecting; refresh is 30 s away.
    std::thread::sleep(Duration::from_secs(3));
    assert_eq!(early.metric(out), plain.metric(out) + 1, "one publication more, at the subscription");
}
