//! Revocation with real processes: a closed mesh of three `murnode`s on loopback, an
//! authority that revokes a grant (by serial) and a node (by peer id) with one signed list
//! handed to one node, which spreads it. A node rehearsing wire 1.1 (before revocation
//! lists) shows the receiving end's check on its own; restarted as a current node, it learns
//! the list by anti-entropy and refuses at the sending end too. The list survives a restart.
//!
//! Topology: C runs `wordcount` and is where the list is published; A runs the `relay`
//! capsule (its grant has serial 77) and bootstraps to C; B is an ordinary member that will
//! be revoked, bootstrapped to C.

use std::path::Path;
use std::time::Duration;

use murmur_tests::{TestNode, install_manifest, mur, mur_json, wait_for};
use serde_json::Value;

const CONVERGE: Duration = Duration::from_secs(30);

fn path(p: &Path) -> &str {
    p.to_str().unwrap()
}

/// A certified member of the closed mesh of `authority` (public key), with `capsules`
/// declared, `manifests` installed (name, component, extra manifest TOML), and a
/// certificate signed with `key`.
fn member(key: &Path, authority: &str, extra: &str, manifests: &[(&str, &str, String)]) -> tempfile::TempDir {
    let toml = format!(
        "[adverts]\nrefresh_secs = 1\nttl_secs = 4\n[trust]\nclosed = true\nauthorities = [\"{authority}\"]\n{extra}"
    );
    let data = murmur_tests::init_data_dir_with(&toml);
    for (name, component, extra) in manifests {
        install_manifest(data.path(), name, component, extra);
    }
    let init = murmur_tests::murnode(&["init", "--data-dir", path(data.path()), "--json"]);
    let init: Value = serde_json::from_slice(&init.stdout).unwrap();
    let cert = data.path().join("node.cert");
    let node = init["peer_id"].as_str().unwrap();
    mur_json(&["cert", "sign", "--key", path(key), "--node", node, "--out", path(&cert), "--json"]);
    data
}

fn start(data: &Path, bootstrap: Option<&TestNode>, env: &[(&str, &str)]) -> TestNode {
    let mut args: Vec<String> = murmur_tests::LOOPBACK.iter().map(|s| (*s).to_owned()).collect();
    if let Some(peer) = bootstrap {
        args.extend(["--bootstrap".to_owned(), peer.dial_addrs()[0].clone()]);
    }
    let args: Vec<&str> = args.iter().map(String::as_str).collect();
    TestNode::start_in_env(data, &args, env).expect("node starts")
}

fn lists(node: &TestNode) -> Vec<Value> {
    node.get("/v1/revocations").unwrap()["lists"].as_array().cloned().unwrap_or_default()
}

/// `relay` at A sends "mesh://wordcount WORDS" under its grant; the relay's answer.
fn relay(a: &TestNode, id: &str) -> Value {
    // The relay names its message by the text: a new text each time, a new task.
    let answer = a.send("mesh://relay", &format!("mesh://wordcount {id} words"), id, false).unwrap();
    assert!(answer.get("error").is_none(), "{answer}");
    answer["result"]["task"].clone()
}

fn text(task: &Value) -> &str {
    task["status"]["message"]["parts"][0]["text"].as_str().unwrap_or("")
}

#[test]
fn a_revocation_published_at_one_node_expels_the_node_and_stops_the_grant_everywhere() {
    let dir = tempfile::tempdir().unwrap();
    let key = dir.path().join("authority.key");
    let authority =
        mur_json(&["key", "gen", "--out", path(&key), "--json"])["public_key"].as_str().unwrap().to_owned();
    let grant = dir.path().join("relay.grant");
    let signed = mur(&[
        "grant",
        "sign",
        "--key",
        path(&key),
        "--capsule",
        "relay",
        "--allow",
        "mesh://wordcount",
        "--serial",
        "77",
        "--out",
        path(&grant),
    ]);
    assert!(signed.status.success(), "{}", String::from_utf8_lossy(&signed.stderr));
    let relay_manifest =
        format!("grant = \"{}\"\n[capabilities]\nnetwork = {{ allow = [\"mesh://*\"] }}\n", grant.display());
    let c_dir = member(&key, &authority, "", &[("wordcount", "wordcount", String::new())]);
    let a_dir = member(&key, &authority, "", &[("relay", "relay", relay_manifest)]);
    let b_dir = member(&key, &authority, &murmur_tests::capsules_toml(&[("beta", "1.0.0")]), &[]);
    let mut c = start(c_dir.path(), None, &[]);
    // A speaks wire 1.1: it takes part in the mesh but never hears of revocation lists.
    let mut a = start(a_dir.path(), Some(&c), &[("MURMUR_WIRE_MINOR", "1")]);
    let b = start(b_dir.path(), Some(&c), &[]);
    for node in [&a, &c] {
        wait_for(CONVERGE, "every capsule listed", || {
            let names = node.capsule_names();
            ["wordcount", "relay", "beta"].iter().all(|n| names.iter().any(|l| l == n)).then_some(())
        })
        .unwrap();
    }
    let before = relay(&a, "before");
    assert_eq!(before["status"]["state"], "TASK_STATE_COMPLETED", "{before}");
    assert!(text(&before).contains("task_id"), "the grant works before: {}", text(&before));

    // Bad lists change nothing: one from an authority nobody trusts, then junk.
    let rogue = dir.path().join("rogue.key");
    mur_json(&["key", "gen", "--out", path(&rogue), "--json"]);
    let rogue_list = dir.path().join("rogue.cbor");
    mur_json(&[
        "revocation",
        "sign",
        "--key",
        path(&rogue),
        "--grant",
        "77",
        "--out",
        path(&rogue_list),
        "--json",
    ]);
    let refused = mur(&["revocation", "publish", path(&rogue_list), "--node", &c.api]);
    // Exit 1, as for an invalid grant: the node refused it (a file that is no list: 2).
    assert_eq!(refused.status.code(), Some(1), "{}", String::from_utf8_lossy(&refused.stderr));
    assert!(String::from_utf8_lossy(&refused.stderr).contains("not a trusted authority"));
    let junk = dir.path().join("junk.cbor");
    std::fs::write(&junk, b"not a list").unwrap();
    assert_eq!(mur(&["revocation", "publish", path(&junk), "--node", &c.api]).status.code(), Some(2));
    assert!(lists(&c).is_empty());

    // The authority revokes grant 77 and node B; the list is handed to C alone.
    let list = dir.path().join("rev-1.cbor");
    let b_id = b.peer_id().to_owned();
    mur_json(&[
        "revocation",
        "sign",
        "--key",
        path(&key),
        "--grant",
        "77",
        "--node",
        &b_id,
        "--out",
        path(&list),
        "--json",
    ]);
    let taken = mur_json(&["revocation", "publish", path(&list), "--node", &c.api, "--json"]);
    assert_eq!(taken["newly_revoked_nodes"], serde_json::json!([b_id]), "{taken}");
    // C expels B and drops its advert; B's own view no longer reaches C's directory.
    wait_for(CONVERGE, "C to expel B", || {
        (!c.connected_peers().contains(&b_id) && !c.capsule_names().contains(&"beta".to_owned()))
            .then_some(())
    })
    .unwrap();
    // An older copy of the list is refused by name.
    let again = mur(&["revocation", "publish", path(&list), "--node", &c.api]);
    assert_eq!(again.status.code(), Some(1));
    assert!(
        String::from_utf8_lossy(&again.stderr).contains("is not newer"),
        "{}",
        String::from_utf8_lossy(&again.stderr)
    );

    // A (wire 1.1) has not heard of it: its own check passes, so C's receiving end refuses.
    assert!(lists(&a).is_empty(), "a 1.1 node is sent no revocation list");
    let at_receiver = relay(&a, "receiver");
    let answer: Value = serde_json::from_str(text(&at_receiver)).unwrap_or(Value::Null);
    assert_eq!(answer["state"], "rejected", "C refuses a task under a revoked grant: {at_receiver}");
    assert_eq!(c.metric("murmur_task_refusals_total{check=\"revoked\"}"), 1);

    // A upgraded (the same data directory, wire 1.2) learns the list from C by anti-entropy,
    // and refuses at the sending end: nothing leaves A.
    a.terminate(Duration::from_secs(10)).unwrap();
    let a = start(a_dir.path(), Some(&c), &[]);
    if wait_for(CONVERGE, "A to learn the list by anti-entropy", || (lists(&a).len() == 1).then_some(()))
        .is_err()
    {
        panic!("A did not learn the list\nA: {}\nC: {}", a.stderr(), c.stderr());
    }
    let at_sender = relay(&a, "sender");
    assert_eq!(at_sender["status"]["state"], "TASK_STATE_FAILED", "{at_sender}");
    assert!(text(&at_sender).contains("grant check failed (revoked)"), "{}", text(&at_sender));
    assert_eq!(c.metric("murmur_task_refusals_total{check=\"revoked\"}"), 1, "nothing reached C");
    wait_for(CONVERGE, "A to drop B", || (!a.capsule_names().contains(&"beta".to_owned())).then_some(()))
        .unwrap();

    // C keeps the list across a restart, before any peer reminds it.
    c.terminate(Duration::from_secs(10)).unwrap();
    let c = start(c_dir.path(), None, &[]);
    let held = lists(&c);
    assert_eq!(held.len(), 1, "{held:?}");
    assert_eq!(held[0]["grants"], serde_json::json!([77]));
    assert_eq!(held[0]["nodes"], serde_json::json!([b_id]));
    let shown = mur_json(&["revocation", "ls", "--node", &c.api, "--json"]);
    assert_eq!(shown["lists"][0]["authority"], authority.as_str());
}
