//! Power loss: what a node acknowledged must be on disk, not only in the page cache.
//!
//! A SIGKILL leaves every written page readable, so it cannot show a missing fsync. Here
//! the node runs with `tests/crash/fsync_shim.c` preloaded, which journals what each
//! fsync made durable; after the kill the data directory is rebuilt from that journal
//! alone (see `murmur_tests::crash`) and a node is started on the rebuilt copy. Whatever
//! the first node told a client — a key, a config, an installed artifact and its pin, a
//! finished task, a route to a task on another node — the second must still have.

use std::path::Path;
use std::time::Duration;

use serde_json::Value;

use murmur_tests::crash::Journal;
use murmur_tests::{
    LOOPBACK, TestNode, add_artifact, guest, init_data_dir_with, install_manifest, mur, mur_json, publisher,
    trusting, wait_for,
};

const CONVERGE: Duration = Duration::from_secs(30);

/// Fast adverts, so the two nodes see each other's capsules within seconds.
const FAST: &str = "[adverts]\nrefresh_secs = 1\nttl_secs = 4\n";

/// `sync PATH` (coreutils: fsync of that one file or directory) under the shim.
fn fsync_under(journal: &Journal, path: &Path) {
    let status = std::process::Command::new("sync")
        .arg(path)
        .envs(journal.env().iter().map(|(k, v)| (*k, v.as_str())))
        .status()
        .unwrap();
    assert!(status.success());
}

#[test]
fn the_replay_keeps_exactly_what_fsyncs_covered() {
    let root = tempfile::tempdir().unwrap();
    let journal = Journal::new(root.path()).unwrap();
    let replay = |n: usize| {
        let out = tempfile::tempdir().unwrap();
        let into = out.path().join(n.to_string());
        let replayed = journal.replay(&into).unwrap();
        let mut files: Vec<(String, String)> = std::fs::read_dir(&into)
            .unwrap()
            .map(|e| {
                let e = e.unwrap();
                (e.file_name().into_string().unwrap(), std::fs::read_to_string(e.path()).unwrap())
            })
            .collect();
        files.sort();
        (files, replayed.unsynced_files.len())
    };
    let a = root.path().join("a");
    std::fs::write(&a, "one").unwrap();
    fsync_under(&journal, &a);
    // The file's content is synced, not its name.
    assert_eq!(replay(1), (vec![], 0));
    fsync_under(&journal, root.path());
    assert_eq!(replay(2), (vec![("a".into(), "one".into())], 0));
    // A write after the fsync is lost; a name whose file was never synced comes back empty.
    std::fs::write(&a, "one two").unwrap();
    std::fs::write(root.path().join("b"), "never synced").unwrap();
    fsync_under(&journal, root.path());
    assert_eq!(replay(3), (vec![("a".into(), "one".into()), ("b".into(), String::new())], 1));
    // A rename is durable once its directory is synced.
    std::fs::rename(&a, root.path().join("c")).unwrap();
    assert_eq!(replay(4).0[0].0, "a");
    fsync_under(&journal, root.path());
    assert_eq!(replay(5), (vec![("b".into(), String::new()), ("c".into(), "one".into())], 1));
}

#[test]
fn a_data_directory_murnode_init_made_survives_a_power_loss() {
    let parent = tempfile::tempdir().unwrap();
    let journal = Journal::new(parent.path()).unwrap();
    journal.baseline().unwrap();
    let dir = parent.path().join("node");
    // `murnode init` itself runs under the shim.
    let env = journal.env();
    let out = std::process::Command::new(murmur_tests::bin("murnode"))
        .args(["init", "--data-dir", dir.to_str().unwrap()])
        .envs(env.iter().map(|(k, v)| (*k, v.as_str())))
        .output()
        .unwrap();
    assert!(out.status.success(), "murnode init: {}", String::from_utf8_lossy(&out.stderr));

    let rebuilt = tempfile::tempdir().unwrap();
    let into = rebuilt.path().join("after");
    let replayed = journal.replay(&into).unwrap();
    assert!(replayed.unsynced_files.is_empty(), "names without content: {:?}", replayed.unsynced_files);
    for file in ["node.key", "murnode.toml"] {
        let after = std::fs::read(into.join("node").join(file));
        assert_eq!(after.ok(), std::fs::read(dir.join(file)).ok(), "{file} after a power loss");
    }
    // And the key reads back as the same identity.
    let key = |d: &Path| mur_json(&["key", "show", d.join("node/node.key").to_str().unwrap(), "--json"]);
    assert_eq!(key(&into)["public_key"], key(parent.path())["public_key"]);
}

/// `mur install|artifact pull … --json` through `node`: whether it succeeded, and its last line.
fn pull(node: &TestNode, command: &[&str]) -> (bool, Value) {
    let mut args = command.to_vec();
    args.extend(["--node", &node.api, "--json"]);
    let out = mur(&args);
    let last =
        String::from_utf8_lossy(&out.stdout).lines().filter_map(|l| serde_json::from_str(l).ok()).next_back();
    (out.status.success(), last.unwrap_or(Value::Null))
}

fn completed(answer: &Value) -> (String, String) {
    let task = &answer["result"]["task"];
    assert_eq!(task["status"]["state"], "TASK_STATE_COMPLETED", "{answer}");
    let text = task["status"]["message"]["parts"][0]["text"].as_str().unwrap_or_default().to_owned();
    (task["id"].as_str().unwrap().to_owned(), text)
}

fn start(dir: &Path, bootstrap: &TestNode, env: &[(&str, &str)]) -> TestNode {
    let mut args: Vec<String> = LOOPBACK.iter().map(|s| (*s).to_owned()).collect();
    args.extend(["--bootstrap".to_owned(), bootstrap.dial_addrs()[0].clone()]);
    let args: Vec<&str> = args.iter().map(String::as_str).collect();
    TestNode::start_in_env(dir, &args, env).unwrap()
}

#[test]
fn what_a_node_acknowledged_survives_a_power_loss() {
    // A publishes a signed `echo` and runs `wordcount`; C, under the shim, installs echo from
    // A, runs echo tasks itself and sends wordcount tasks to A (C keeps their routes).
    let work = tempfile::tempdir().unwrap();
    let (key, public) = publisher(work.path());
    let a_dir = init_data_dir_with(FAST);
    install_manifest(a_dir.path(), "wordcount", "wordcount", "");
    let added = add_artifact(a_dir.path(), &guest("echo"), ("echo", "1.0.0"), "tool", &["--sign-key", &key]);
    let a = TestNode::start_in(a_dir.path(), LOOPBACK).unwrap();

    let c_dir = init_data_dir_with(&format!("{FAST}{}", trusting(&public)));
    let journal = Journal::new(c_dir.path()).unwrap();
    journal.baseline().unwrap();
    let env = journal.env();
    let env: Vec<(&str, &str)> = env.iter().map(|(k, v)| (*k, v.as_str())).collect();
    let mut c = start(c_dir.path(), &a, &env);
    let peer_id = c.peer_id().to_owned();

    let (ok, done) = wait_for(CONVERGE, "C to install echo from A", || {
        let (ok, done) = pull(&c, &["install", "echo@1.0.0"]);
        let message = done["message"].as_str().unwrap_or_default();
        let unknown = message.contains("advertises any artifact") || message.contains("no provider");
        (ok || !unknown).then_some((ok, done))
    })
    .unwrap();
    assert!(ok && done["installed"] == true, "{done}");
    wait_for(CONVERGE, "C to see wordcount on A", || {
        c.capsule_names().iter().any(|n| n == "wordcount").then_some(())
    })
    .unwrap();

    let mut local = Vec::new();
    let mut routed = Vec::new();
    for i in 0..8 {
        local
            .push(completed(&c.send("mesh://echo", &format!("kept {i}"), &format!("e-{i}"), false).unwrap()));
        let words = vec!["w"; i + 1].join(" ");
        routed.push(completed(&c.send("mesh://wordcount", &words, &format!("w-{i}"), false).unwrap()));
    }
    // Power lost right after the last answer.
    c.kill();
    let (file_syncs, dir_syncs) = journal.counts().unwrap();
    assert!(file_syncs > 0 && dir_syncs > 0, "the shim saw no fsync: is LD_PRELOAD honoured?");

    let rebuilt = tempfile::tempdir().unwrap();
    let r_dir = rebuilt.path().join("c");
    let replayed = journal.replay(&r_dir).unwrap();
    // The test's own stderr capture is never synced, and the advisory-lock files hold no
    // content (only their flock matters); nothing else the node keeps may come back empty.
    let empty: Vec<_> = replayed
        .unsynced_files
        .iter()
        .filter(|p| {
            let name = p.file_name().unwrap().to_string_lossy();
            !(name.starts_with("stderr-") || name == ".lock" || name == murmur_store::lock::GUARD_FILE)
        })
        .collect();
    assert!(empty.is_empty(), "files whose name survived but whose content did not: {empty:?}");

    let r = start(&r_dir, &a, &[]);
    assert_eq!(r.peer_id(), peer_id, "the key survives");
    // The installed artifact, its pin and its manifest: echo runs from the store.
    let listed = mur_json(&["artifact", "ls", "--data-dir", r_dir.to_str().unwrap(), "--json"]);
    assert!(
        listed["artifacts"].as_array().unwrap().iter().any(|s| s["content"] == added["content"]),
        "the store lost echo: {listed}"
    );
    let lock = std::fs::read_to_string(r_dir.join("murmur.lock")).unwrap_or_default();
    assert!(lock.contains(added["content"].as_str().unwrap()), "the pin is lost: {lock:?}");
    let run =
        mur_json(&["tool", "run", "echo", "--data", "after the power loss", "--node", &r.api, "--json"]);
    assert_eq!(run["result"]["data"], "after the power loss");
    // Every task C answered is there, finished, with its result; the routed ones through
    // the routes C kept (its router knows nothing of them now).
    for (id, text) in local.iter().chain(&routed) {
        let got = wait_for(CONVERGE, "the task after the power loss", || {
            r.task(id).ok().filter(|t| t.get("result").is_some())
        })
        .unwrap();
        assert_eq!(got["result"]["status"]["state"], "TASK_STATE_COMPLETED", "{id}: {got}");
        assert_eq!(
            got["result"]["status"]["message"]["parts"][0]["text"].as_str(),
            Some(text.as_str()),
            "{id}"
        );
    }
}
