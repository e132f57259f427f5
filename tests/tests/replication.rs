//! Artifacts replicating over the mesh, with real `murnode` processes: a capsule added on
//! one node installed and run on another, a provider serving corrupted chunks, a provider
//! killed in the middle of a pull, and a puller killed and restarted.

use std::io::{BufRead, BufReader, Lines};
use std::path::Path;
use std::process::{Child, ChildStdout, Command, Stdio};
use std::time::Duration;

use serde_json::Value;

use murmur_tests::{
    LOOPBACK, TestNode, bin, guest, init_data_dir_with, mur, mur_json, publisher, trusting, wait_for,
};

/// Adds `file` to the store of `dir` as NAME@1.0.0 (a tool), signed with `key`.
fn add_signed(dir: &Path, file: &Path, name: &str, key: &str) -> Value {
    murmur_tests::add_artifact(dir, file, (name, "1.0.0"), "tool", &["--sign-key", key])
}

/// Starts a node on `dir` bootstrapping to `peer`, with fault-injection `env`.
fn start(dir: &Path, peer: Option<&TestNode>, env: &[(&str, &str)]) -> TestNode {
    start_on(LOOPBACK, dir, peer, env)
}

/// Starts a node with `flags` (where it listens) on `dir`, bootstrapping to `peer`.
fn start_on(flags: &[&str], dir: &Path, peer: Option<&TestNode>, env: &[(&str, &str)]) -> TestNode {
    let mut args: Vec<String> = flags.iter().map(|s| (*s).to_owned()).collect();
    if let Some(peer) = peer {
        args.push("--bootstrap".into());
        args.push(peer.dial_addrs()[0].clone());
    }
    let args: Vec<&str> = args.iter().map(String::as_str).collect();
    let node = TestNode::start_in_env(dir, &args, env).unwrap();
    if env.iter().any(|(var, _)| var.starts_with("MURMUR_FAULT_")) {
        // The node reads them only when built with the `fault-injection` feature, which a
        // workspace build turns on; without it these tests would fail for the wrong reason.
        wait_for(Duration::from_secs(5), "the node to say fault injection is on", || {
            node.stderr().contains("fault injection is on").then_some(())
        })
        .unwrap_or_else(|_| {
            panic!("murnode ignored MURMUR_FAULT_*: build it with `cargo build --workspace --bins`")
        });
    }
    node
}

/// `mur artifact pull|install NAME@VERSION --json` through `node`: every line printed.
fn pull_lines(node: &TestNode, command: &[&str]) -> (bool, Vec<Value>) {
    let mut args = command.to_vec();
    args.extend(["--node", &node.api, "--json"]);
    let out = mur(&args);
    let lines =
        String::from_utf8_lossy(&out.stdout).lines().filter_map(|l| serde_json::from_str(l).ok()).collect();
    (out.status.success(), lines)
}

/// Pulls until the mesh has told `node` about a provider; the last line (the outcome).
fn pull_when_known(node: &TestNode, command: &[&str]) -> Value {
    wait_for(Duration::from_secs(30), "a provider to be known", || {
        let (ok, lines) = pull_lines(node, command);
        let last = lines.last().cloned()?;
        if ok {
            return Some(last);
        }
        let message = last["message"].as_str().unwrap_or_default();
        assert!(message.contains("advertises any artifact") || message.contains("no provider"), "{message}");
        None
    })
    .unwrap()
}

/// Waits until `node` knows some provider of some artifact (its pull no longer fails
/// for want of any).
fn wait_known(node: &TestNode) {
    wait_for(Duration::from_secs(30), "a provider to be known", || {
        let (_, lines) = pull_lines(node, &["artifact", "pull", "absent@0.0.1"]);
        let message = lines.last()?["message"].as_str()?.to_owned();
        (!message.contains("advertises any artifact")).then_some(())
    })
    .unwrap();
}

/// `mur artifact pull ARTIFACT --json` through `node`, running: the child and its lines.
fn spawn_pull(node: &TestNode, artifact: &str) -> (Child, Lines<BufReader<ChildStdout>>) {
    let mut pull = Command::new(bin("mur"))
        .args(["artifact", "pull", artifact, "--json", "--node", &node.api])
        .stdout(Stdio::piped())
        .stderr(Stdio::null())
        .spawn()
        .unwrap();
    let lines = BufReader::new(pull.stdout.take().unwrap()).lines();
    (pull, lines)
}

/// `size` bytes that compress badly and differ per `seed`.
fn noise(size: usize, seed: u64) -> Vec<u8> {
    let mut state = seed.wrapping_mul(0x9E37_79B9_7F4A_7C15) | 1;
    (0..size)
        .map(|_| {
            state ^= state << 13;
            state ^= state >> 7;
            state ^= state << 17;
            state as u8
        })
        .collect()
}

#[test]
fn a_capsule_added_on_one_node_is_installed_and_runs_on_another() {
    let work = tempfile::tempdir().unwrap();
    let (key, public) = publisher(work.path());
    let a_dir = init_data_dir_with("");
    let added = add_signed(a_dir.path(), &guest("echo"), "echo", &key);
    let a = start(a_dir.path(), None, &[]);
    let b_dir = init_data_dir_with("");
    let b = start(b_dir.path(), Some(&a), &[]);
    let c_dir = init_data_dir_with(&trusting(&public));
    let c = start(c_dir.path(), Some(&b), &[]);

    // B does not trust the publisher: it refuses, naming why, and stores nothing.
    wait_known(&b);
    let (ok, lines) = pull_lines(&b, &["artifact", "pull", "echo@1.0.0"]);
    assert!(!ok);
    let message = lines.last().unwrap()["message"].as_str().unwrap().to_owned();
    assert!(message.contains("trust.publishers") && message.contains("--digest"), "{message}");
    assert!(std::fs::read_dir(b_dir.path().join("store/blobs/sha256")).unwrap().next().is_none());
    // Pinned by its manifest digest, B takes it without trusting anyone (and keeps no
    // signature: it cannot vouch for one).
    let manifest = added["manifest"].as_str().unwrap();
    let (ok, lines) = pull_lines(&b, &["artifact", "pull", "echo@1.0.0", "--digest", manifest]);
    assert!(ok, "{lines:?}");
    assert_eq!(lines.last().unwrap()["content"], added["content"]);
    assert!(!b_dir.path().join("store/signatures").join(&manifest[7..]).exists());

    // C trusts it: install pulls, pins, runs and advertises.
    let done = pull_when_known(&c, &["install", "echo@1.0.0"]);
    assert_eq!(done["event"], "done", "{done}");
    assert_eq!(done["installed"], true);
    assert_eq!(done["content"], added["content"]);
    assert!(c_dir.path().join("store/signatures").join(&manifest[7..]).exists(), "C keeps the signature");
    let lock = std::fs::read_to_string(c_dir.path().join("murmur.lock")).unwrap();
    assert!(lock.contains(added["content"].as_str().unwrap()), "{lock}");
    let run =
        mur_json(&["tool", "run", "echo", "--data", "pulled over the mesh", "--node", &c.api, "--json"]);
    assert_eq!(run["result"]["data"], "pulled over the mesh");
    wait_for(Duration::from_secs(20), "A to see echo hosted by C", || {
        let view = a.get("/v1/capsules").ok()?;
        let providers =
            view["capsules"].as_array()?.iter().find(|c| c["name"] == "echo")?["providers"].clone();
        providers.as_array()?.iter().any(|p| p["peer_id"] == c.peer_id()).then_some(())
    })
    .unwrap();

    // Again: already there; with a wrong pin: refused before anything changes.
    let (ok, lines) = pull_lines(&c, &["artifact", "pull", "echo@1.0.0"]);
    assert!(ok);
    assert_eq!(lines.last().unwrap()["already"], true);
    let bad = mur(&["artifact", "pull", "Echo@1.0.0", "--node", &c.api]);
    assert_eq!(bad.status.code(), Some(2), "a malformed name is a usage error");
    assert!(
        String::from_utf8_lossy(&bad.stderr).contains("name"),
        "{}",
        String::from_utf8_lossy(&bad.stderr)
    );
    let wrong = format!("sha256:{}", "0".repeat(64));
    let (ok, lines) = pull_lines(&c, &["artifact", "pull", "echo@1.0.0", "--digest", &wrong]);
    assert!(!ok);
    assert!(lines.last().unwrap()["message"].as_str().unwrap().contains("nothing was changed"));
}

#[test]
fn a_provider_serving_corrupted_chunks_is_dropped_and_the_pull_completes_from_an_honest_one() {
    let work = tempfile::tempdir().unwrap();
    let (key, public) = publisher(work.path());
    let file = work.path().join("model.bin");
    std::fs::write(&file, noise(16 << 20, 1)).unwrap();

    let honest_dir = init_data_dir_with("");
    let added = add_signed(honest_dir.path(), &file, "model", &key);
    let honest = start(honest_dir.path(), None, &[]);
    let liar_dir = init_data_dir_with("");
    add_signed(liar_dir.path(), &file, "model", &key);
    let liar = start(liar_dir.path(), Some(&honest), &[("MURMUR_FAULT_CORRUPT_CHUNKS", "1")]);
    let puller_dir = init_data_dir_with(&trusting(&public));
    let puller = start(puller_dir.path(), Some(&honest), &[]);
    wait_for(Duration::from_secs(20), "the puller to know both providers", || {
        let peers = puller.get("/v1/peers").ok()?;
        let with_adverts = peers["peers"].as_array()?.iter().filter(|p| p["advert_seq"].is_u64()).count();
        (with_adverts >= 2).then_some(())
    })
    .unwrap();

    let done = pull_when_known(&puller, &["artifact", "pull", "model@1.0.0"]);
    assert_eq!(done["event"], "done", "{done}");
    assert_eq!(done["content"], added["content"]);
    let penalized = done["penalized"].as_array().unwrap();
    assert!(
        penalized.iter().any(|p| p["provider"] == liar.peer_id()),
        "the corrupting provider was dropped: {done}"
    );
    assert!(penalized.iter().all(|p| p["provider"] != honest.peer_id()), "{done}");
    // What the store holds is the publisher's bytes.
    let shown = mur_json(&[
        "artifact",
        "show",
        "model@1.0.0",
        "--data-dir",
        puller_dir.path().to_str().unwrap(),
        "--json",
    ]);
    assert_eq!(shown["content"], added["content"]);
    let blob = puller_dir.path().join("store/blobs/sha256").join(&added["content"].as_str().unwrap()[7..]);
    assert_eq!(std::fs::read(blob).unwrap(), std::fs::read(&file).unwrap());
    drop(liar);
}

#[test]
fn chunks_travel_on_bulk_streams_and_a_provider_without_them_is_asked_chunk_by_chunk() {
    let work = tempfile::tempdir().unwrap();
    let (key, public) = publisher(work.path());
    let file = work.path().join("model.bin");
    std::fs::write(&file, noise(8 << 20, 3)).unwrap();

    // Old: serves no `/murmur/artifact-bulk/1`, as a node from before it.
    let old_dir = init_data_dir_with("");
    let added = add_signed(old_dir.path(), &file, "model", &key);
    let old = start(old_dir.path(), None, &[("MURMUR_FAULT_NO_BULK", "1")]);
    let puller_dir = init_data_dir_with(&trusting(&public));
    let puller = start(puller_dir.path(), Some(&old), &[]);
    let done = pull_when_known(&puller, &["artifact", "pull", "model@1.0.0"]);
    assert_eq!(done["event"], "done", "{done}");
    assert_eq!(done["content"], added["content"]);
    assert!(done["penalized"].as_array().unwrap().is_empty(), "the old provider was not blamed: {done}");
    let bulk = "murmur_artifact_bulk_served_total{outcome=\"served\"}";
    let single = "murmur_artifact_requests_served_total{outcome=\"served\"}";
    assert_eq!(old.metric(bulk), 0);
    assert!(old.metric(single) >= 8, "every chunk asked the old way: {}", old.metric(single));

    // The puller now provides it too, with bulk streams: a second puller's chunks from it
    // come on one.
    let second_dir = init_data_dir_with(&trusting(&public));
    let second = start(second_dir.path(), Some(&puller), &[]);
    wait_for(Duration::from_secs(20), "the second puller to know both providers", || {
        let peers = second.get("/v1/peers").ok()?;
        let with_adverts = peers["peers"].as_array()?.iter().filter(|p| p["advert_seq"].is_u64()).count();
        (with_adverts >= 2).then_some(())
    })
    .unwrap();
    let single_before = puller.metric(single);
    let done = pull_when_known(&second, &["artifact", "pull", "model@1.0.0"]);
    assert_eq!(done["event"], "done", "{done}");
    assert_eq!(done["content"], added["content"]);
    assert!(puller.metric(bulk) >= 1, "chunks came on a bulk stream");
    assert!(
        puller.metric(single) <= single_before + 4,
        "the bulk-serving provider answered only the resolve and the metadata the old way: {} then {}",
        single_before,
        puller.metric(single)
    );
    let blob = second_dir.path().join("store/blobs/sha256").join(&added["content"].as_str().unwrap()[7..]);
    assert_eq!(std::fs::read(blob).unwrap(), std::fs::read(&file).unwrap());
}

#[test]
fn a_pull_whose_provider_is_killed_finishes_from_another_and_a_restarted_puller_resumes() {
    let work = tempfile::tempdir().unwrap();
    let (key, public) = publisher(work.path());
    let file = work.path().join("model.bin");
    let size = 24usize << 20;
    std::fs::write(&file, noise(size, 2)).unwrap();

    // A serves slowly (so the pull is still running when it dies); B has the same artifact
    // but is not started until A has served part of it.
    let a_dir = init_data_dir_with("");
    let added = add_signed(a_dir.path(), &file, "model", &key);
    let mut a = start(a_dir.path(), None, &[("MURMUR_FAULT_SERVE_DELAY_MS", "1500")]);
    let c_dir = init_data_dir_with(&trusting(&public));
    let mut c = start(c_dir.path(), Some(&a), &[]);
    wait_known(&c);

    // First attempt: kill the puller after some chunks, restart it, and pull again: it
    // resumes from the chunks already on disk.
    let (mut pull, mut lines) = spawn_pull(&c, "model@1.0.0");
    let written = loop {
        let line: Value = serde_json::from_str(&lines.next().expect("progress lines").unwrap()).unwrap();
        if line["event"] == "chunks" && line["written"].as_u64().unwrap() >= 4 << 20 {
            break line["written"].as_u64().unwrap();
        }
        assert!(
            line["event"] != "done" && line["event"] != "error",
            "ended before it could be interrupted: {line}"
        );
    };
    assert!(written < size as u64);
    c.kill();
    let _ = pull.kill();
    let _ = pull.wait();
    let c = start(c_dir.path(), Some(&a), &[]);
    wait_known(&c);

    // Second attempt: it resumes from what the first wrote.
    let (mut pull, mut lines) = spawn_pull(&c, "model@1.0.0");
    loop {
        let line: Value = serde_json::from_str(&lines.next().expect("progress lines").unwrap()).unwrap();
        assert!(line["event"] != "done" && line["event"] != "error", "{line}");
        if line["event"] == "chunks" {
            break;
        }
    }
    // A dies with the pull half done; the pull waits for another provider, and B, holding
    // the same artifact, starts and takes over.
    a.kill();
    let b_dir = init_data_dir_with("");
    add_signed(b_dir.path(), &file, "model", &key);
    let b = start(b_dir.path(), Some(&c), &[]);
    let mut last = Value::Null;
    for line in lines {
        last = serde_json::from_str(&line.unwrap()).unwrap();
    }
    assert!(pull.wait().unwrap().success(), "{last}");
    assert_eq!(last["event"], "done", "{last}");
    assert_eq!(last["content"], added["content"]);
    assert!(last["resumed_chunks"].as_u64().unwrap() >= 4, "the restarted pull resumed: {last}");
    assert!(last["fetched"].as_u64().unwrap() < size as u64, "{last}");
    assert!(
        b.metric("murmur_artifact_bulk_served_total{outcome=\"served\"}") > 0,
        "B served chunks (on a bulk stream): {last}"
    );
    let blob = c_dir.path().join("store/blobs/sha256").join(&added["content"].as_str().unwrap()[7..]);
    assert_eq!(std::fs::read(blob).unwrap(), std::fs::read(&file).unwrap());
    assert!(
        !c_dir
            .path()
            .join("store/.pull")
            .join(format!("{}.part", &added["content"].as_str().unwrap()[7..]))
            .exists()
    );
}

#[test]
fn a_pinned_artifact_reaches_its_replication_factor_on_the_nodes_placement_picks() {
    use murmur_protocol::{Digest, NodeId, replicate};

    let work = tempfile::tempdir().unwrap();
    let (key, public) = publisher(work.path());
    let config = format!("{}\n[[pins]]\nartifact = \"echo@1.0.0\"\nreplicas = 2\n", trusting(&public));
    let first_dir = init_data_dir_with(&config);
    add_signed(first_dir.path(), &guest("echo"), "echo", &key);
    let first = start(first_dir.path(), None, &[]);
    let mut dirs = vec![first_dir];
    let mut nodes = vec![first];
    for _ in 0..3 {
        let dir = init_data_dir_with(&config);
        let node = start(dir.path(), Some(&nodes[0]), &[]);
        dirs.push(dir);
        nodes.push(node);
    }
    let members: Vec<NodeId> = nodes.iter().map(|n| n.peer_id().parse().unwrap()).collect();
    let chosen = replicate::holders(&Digest::of(b"echo@1.0.0"), &members, 2);
    let holds = |i: usize| {
        mur(&["artifact", "show", "echo@1.0.0", "--data-dir", dirs[i].path().to_str().unwrap(), "--json"])
            .status
            .success()
    };
    wait_for(Duration::from_secs(40), "the pin's holders to pull it", || {
        let holding: Vec<NodeId> = (0..nodes.len()).filter(|&i| holds(i)).map(|i| members[i]).collect();
        chosen.iter().all(|c| holding.contains(c)).then_some(())
    })
    .unwrap();
    let holding = (0..nodes.len()).filter(|&i| holds(i)).count();
    assert!(holding >= 2, "at least the replication factor holds it: {holding}");
}

#[test]
fn a_script_capsule_pulls_a_tool_from_the_mesh_and_runs_it_in_the_same_call() {
    let work = tempfile::tempdir().unwrap();
    let (key, public) = publisher(work.path());
    let a_dir = init_data_dir_with("");
    let added = add_signed(a_dir.path(), &guest("wordcount"), "wordcount", &key);
    let a = start(a_dir.path(), None, &[]);
    // C runs the pipeline capsule, which pulls wordcount@1.0.0 through artifact-manager:
    // C's store lacks it, so the node fetches it from the mesh.
    let c_dir = init_data_dir_with(&trusting(&public));
    let capsules = c_dir.path().join("capsules");
    std::fs::create_dir_all(&capsules).unwrap();
    std::fs::write(
        capsules.join("pipeline.toml"),
        format!(
            "name = \"pipeline\"\nversion = \"0.1.0\"\nkind = \"capsule\"\nartifact = \"{}\"\n\
             [capabilities]\ntools = [\"wordcount\"]\n[wasi]\nenv = {{ PIPELINE_PULL = \"wordcount@1.0.0\" }}\n",
            guest("pipeline").display()
        ),
    )
    .unwrap();
    let c = start(c_dir.path(), Some(&a), &[]);
    wait_known(&c);
    let run = mur_json(&["capsule", "run", "pipeline", "--node", &c.api, "--json"]);
    let stdout = run["stdout"].as_str().unwrap();
    assert!(stdout.contains("pulled wordcount@1.0.0") && stdout.contains("\"words\":2"), "{stdout}");
    let lock = std::fs::read_to_string(c_dir.path().join("work/pipeline/murmur.lock")).unwrap();
    assert!(lock.contains(added["content"].as_str().unwrap()), "{lock}");
    let shown = mur_json(&[
        "artifact",
        "show",
        "wordcount@1.0.0",
        "--data-dir",
        c_dir.path().to_str().unwrap(),
        "--json",
    ]);
    assert_eq!(shown["content"], added["content"], "now in C's store too");
}

/// Flags for a node that listens on QUIC only. A QUIC peer that is gone never refuses a
/// dial (UDP has no connection to reset): asking it just goes unanswered until a timeout,
/// like a host powered off.
const QUIC_ONLY: &[&str] = &["--listen", "/ip4/127.0.0.1/udp/0/quic-v1", "--no-mdns"];

#[test]
fn a_provider_that_is_down_but_still_advertised_does_not_hold_up_the_resolve() {
    let work = tempfile::tempdir().unwrap();
    let (key, public) = publisher(work.path());
    let file = work.path().join("model.bin");
    std::fs::write(&file, noise(6 << 20, 5)).unwrap();
    let a_dir = init_data_dir_with("");
    add_signed(a_dir.path(), &file, "model", &key);
    let a = start_on(QUIC_ONLY, a_dir.path(), None, &[]);
    // B pulls the artifact, so it advertises it too; then it dies without a word.
    let b_dir = init_data_dir_with(&trusting(&public));
    let mut b = start_on(QUIC_ONLY, b_dir.path(), Some(&a), &[]);
    let done = pull_when_known(&b, &["artifact", "pull", "model@1.0.0"]);
    assert_eq!(done["event"], "done", "{done}");
    let c_dir = init_data_dir_with(&trusting(&public));
    let c = start_on(QUIC_ONLY, c_dir.path(), Some(&a), &[]);
    wait_for(Duration::from_secs(30), "C to know both providers", || {
        let peers = c.get("/v1/peers").ok()?;
        let providers = peers["peers"].as_array()?.iter().filter(|p| p["artifacts"] == 1).count();
        (providers >= 2).then_some(())
    })
    .unwrap();
    b.kill();

    // B's advert is still live on C, so C asks it too; the resolve settles on A's answer and
    // does not wait out B's timeout (5 s); the pull completes from A.
    let (ok, lines) = pull_lines(&c, &["artifact", "pull", "model@1.0.0"]);
    assert!(ok, "{lines:?}");
    let resolved = lines.iter().find(|l| l["event"] == "resolved").expect("a resolved line");
    assert_eq!(resolved["unanswered"], 1, "{resolved}");
    assert_eq!(lines.last().unwrap()["event"], "done");
}
