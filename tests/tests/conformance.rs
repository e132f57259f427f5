//! A node driven only through the documented wire formats: `murmur-conformance`, written
//! from `docs/src/third-party.md` and the pages it links, without the protocol crate,
//! takes part at every level (connect, sync, tasks, artifacts) against a real `murnode`.

use std::process::Command;

use murmur_tests::{LOOPBACK, TestNode, bin, guest, init_data_dir_with, install_manifest};
use serde_json::Value;

#[test]
fn a_node_written_from_the_docs_takes_part_at_every_level() {
    let dir = init_data_dir_with("");
    install_manifest(dir.path(), "wordcount", "wordcount", "");
    let added = murmur_tests::add_artifact(dir.path(), &guest("echo"), ("echo", "1.0.0"), "tool", &[]);
    let node = TestNode::start_in(dir.path(), LOOPBACK).unwrap();
    let out = Command::new(bin("murmur-conformance"))
        .args(["--dial", &node.dial_addrs()[0], "--capsule", "wordcount", "--text", "one two three"])
        .args(["--artifact", "echo@1.0.0"])
        .output()
        .unwrap();
    let stdout = String::from_utf8_lossy(&out.stdout);
    assert!(out.status.success(), "{stdout}{}", String::from_utf8_lossy(&out.stderr));
    let levels: Vec<Value> = stdout.lines().map(|l| serde_json::from_str(l).unwrap()).collect();
    let names: Vec<&str> = levels.iter().map(|l| l["level"].as_str().unwrap()).collect();
    assert_eq!(names, ["connect", "sync", "task", "artifact"]);
    assert!(levels[2]["detail"]["result"].as_str().unwrap().contains("\"words\":3"), "{stdout}");
    assert_eq!(levels[3]["detail"]["manifest"], added["manifest"], "{stdout}");
    assert_eq!(levels[3]["detail"]["content"], added["content"], "{stdout}");
}
