//! The runtime through the binaries: a node runs the capsules in its capsules directory,
//! advertises exactly those (with their digests), and runs tools for `mur`.

use murmur_tests::{TestNode, guest, mur, mur_json, wait_for};

fn node_with_echo() -> TestNode {
    let dir = murmur_tests::init_data_dir();
    let capsules = dir.path().join("capsules");
    std::fs::create_dir_all(&capsules).unwrap();
    std::fs::write(
        capsules.join("echo.toml"),
        format!(
            "name = \"echo\"\nversion = \"0.1.0\"\nkind = \"tool\"\nartifact = \"{}\"\n",
            guest("echo").display()
        ),
    )
    .unwrap();
    TestNode::start_owned(dir, murmur_tests::LOOPBACK).unwrap()
}

#[test]
fn a_node_runs_and_advertises_the_capsules_in_its_directory() {
    let node = node_with_echo();
    let installed = mur_json(&["capsule", "ls", "--node", &node.api, "--json"]);
    assert_eq!(installed[0]["name"], "echo");
    let digest = murmur_protocol::Digest::of(&std::fs::read(guest("echo")).unwrap()).to_string();
    assert_eq!(installed[0]["digest"], digest.as_str());
    let advertised = wait_for(std::time::Duration::from_secs(10), "echo in the directory", || {
        let capsules = mur_json(&["capsules", "--node", &node.api, "--json"]);
        capsules["capsules"].as_array().and_then(|c| c.first().cloned())
    })
    .unwrap();
    assert_eq!(
        advertised["providers"][0]["digest"],
        digest.as_str(),
        "the advert carries what the node runs"
    );

    let run = mur_json(&["tool", "run", "echo", "--data", "hi there", "--node", &node.api, "--json"]);
    assert_eq!(run["result"]["data"], "hi there");
    assert_eq!(run["calls"][0]["state_effect"], "read");
    let out = mur(&["tool", "run", "nope", "--data", "x", "--node", &node.api]);
    assert_eq!(out.status.code(), Some(1));
    assert!(String::from_utf8_lossy(&out.stderr).contains("no capsule or tool named `nope`"));
}

#[test]
fn mur_runs_a_component_file_directly() {
    let run = mur_json(&[
        "tool",
        "run",
        guest("wordcount").to_str().unwrap(),
        "--input",
        r#"{"data":"a b c"}"#,
        "--json",
    ]);
    assert!(run["result"]["data"].as_str().unwrap().contains("\"words\":3"));
    let out = mur(&["tool", "run", guest("misbehaving_unversioned").to_str().unwrap(), "--data", "x"]);
    assert_eq!(out.status.code(), Some(2));
    assert!(String::from_utf8_lossy(&out.stderr).contains("murmur:tool/run@0.1.0"));
}

#[test]
fn a_bad_manifest_stops_the_node_from_starting_and_names_the_key() {
    let dir = murmur_tests::init_data_dir();
    let capsules = dir.path().join("capsules");
    std::fs::create_dir_all(&capsules).unwrap();
    std::fs::write(capsules.join("bad.toml"), "name = \"bad\"\nversion = \"1\"\nkind = \"tool\"\nartifact = \"x.wasm\"\n[limits]\nmemory_mb = 99999\n").unwrap();
    let out = murmur_tests::murnode(&["run", "--data-dir", dir.path().to_str().unwrap(), "--no-mdns"]);
    assert_eq!(out.status.code(), Some(2));
    let err = String::from_utf8_lossy(&out.stderr);
    assert!(err.contains("bad.toml") && err.contains("`limits.memory_mb`"), "{err}");
}
