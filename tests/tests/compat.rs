//! Rolling upgrades: a node of this build and one announcing the previous minor wire
//! version (`MURMUR_WIRE_MINOR=0`, `/murmur/1.0.0`, which behaves as that minor: it does
//! not read `settle_wait_ms`) share one mesh: adverts, tasks both ways (blocking sends, so
//! the newer node must leave out what the older cannot read) and artifacts both ways. A
//! peer of another major is refused at identify, logged and counted.

use std::path::Path;
use std::time::Duration;

use murmur_tests::{LOOPBACK, TestNode, bin, guest, init_data_dir_with, install_manifest, mur, wait_for};
use serde_json::Value;

const CONVERGE: Duration = Duration::from_secs(30);

fn start(dir: &Path, peer: Option<&TestNode>, env: &[(&str, &str)]) -> TestNode {
    let mut args: Vec<String> = LOOPBACK.iter().map(|s| (*s).to_owned()).collect();
    if let Some(peer) = peer {
        args.extend(["--bootstrap".to_owned(), peer.dial_addrs()[0].clone()]);
    }
    let args: Vec<&str> = args.iter().map(String::as_str).collect();
    TestNode::start_in_env(dir, &args, env).unwrap()
}

/// Adds the guest component `component` to the store of `dir` as NAME@1.0.0.
fn add(dir: &Path, component: &str, name: &str) -> Value {
    murmur_tests::add_artifact(dir, &guest(component), (name, "1.0.0"), "tool", &[])
}

/// Pulls NAME@1.0.0 pinned to `manifest` through `node`, once a provider is known.
fn pull(node: &TestNode, name: &str, manifest: &str) -> Value {
    let artifact = format!("{name}@1.0.0");
    wait_for(CONVERGE, "the pull to succeed", || {
        let out = mur(&["artifact", "pull", &artifact, "--digest", manifest, "--json", "--node", &node.api]);
        let last: Value =
            String::from_utf8_lossy(&out.stdout).lines().rev().find_map(|l| serde_json::from_str(l).ok())?;
        out.status.success().then_some(last)
    })
    .unwrap()
}

fn completed_text(node: &TestNode, target: &str, text: &str, message: &str) -> String {
    let answer = node.send(target, text, message, false).unwrap();
    let task = &answer["result"]["task"];
    assert_eq!(task["status"]["state"], "TASK_STATE_COMPLETED", "{answer}");
    task["status"]["message"]["parts"][0]["text"].as_str().unwrap().to_owned()
}

#[test]
fn a_node_of_the_previous_minor_shares_the_mesh_and_another_major_is_refused() {
    let new_dir = init_data_dir_with("[adverts]\nrefresh_secs = 1\nttl_secs = 4\n");
    install_manifest(new_dir.path(), "wordcount", "wordcount", "");
    let from_new = add(new_dir.path(), "echo", "echo-new");
    let old_dir = init_data_dir_with("[adverts]\nrefresh_secs = 1\nttl_secs = 4\n");
    install_manifest(old_dir.path(), "echo", "echo", "");
    let from_old = add(old_dir.path(), "wordcount", "wordcount-old");
    let new = start(new_dir.path(), None, &[]);
    let old = start(old_dir.path(), Some(&new), &[("MURMUR_WIRE_MINOR", "0")]);
    assert!(old.stderr().contains("announcing an older wire version"), "{}", old.stderr());

    // Adverts: each sees the other's capsule.
    for (node, name) in [(&new, "echo"), (&old, "wordcount")] {
        wait_for(CONVERGE, "the other node's capsule", || {
            node.capsule_names().iter().any(|n| n == name).then_some(())
        })
        .unwrap();
    }

    // Tasks both ways, blocking: the newer node must not send the older one
    // settle_wait_ms, or the older node's strict decoder fails the request.
    assert!(completed_text(&new, "mesh://echo", "to the old node", "m-1").contains("to the old node"));
    assert!(completed_text(&old, "mesh://wordcount", "to the new node", "m-2").contains("\"words\":4"));

    // Artifacts both ways.
    let pulled = pull(&old, "echo-new", from_new["manifest"].as_str().unwrap());
    assert_eq!(pulled["content"], from_new["content"], "{pulled}");
    let pulled = pull(&new, "wordcount-old", from_old["manifest"].as_str().unwrap());
    assert_eq!(pulled["content"], from_old["content"], "{pulled}");

    // A peer of another major is disconnected at identify, logged and counted.
    let refused = "murmur_peers_refused_version_total{reason=\"other_major\"}";
    assert_eq!(new.metric(refused), 0);
    let _ = std::process::Command::new(bin("murmur-testpeer"))
        .args([
            "--dial",
            &new.dial_addrs()[0],
            "--identify",
            "/murmur/2.0.0",
            "--task",
            "get:00000000-0000-0000-0000-000000000001",
        ])
        .args(["--timeout-secs", "5"])
        .output()
        .unwrap();
    wait_for(CONVERGE, "the refusal to be counted", || (new.metric(refused) == 1).then_some(())).unwrap();
    assert!(new.stderr().contains("majors differ"), "{}", new.stderr());
    assert_eq!(old.metric(refused), 0, "a minor apart is no refusal");
}
