//! What one peer may hold of a node at once. Every request stream a peer opens is read into
//! the node's memory as its bytes arrive; the node charges them to a budget per connection
//! (and one for all peers), and a peer that overruns its connection's budget is cut off and
//! held off, while every other peer goes on being served.

use std::process::{Command, Stdio};

use murmur_tests::{LOOPBACK, TestNode, bin, init_data_dir, install_manifest};
use serde_json::Value;

/// One line of JSON from a `murmur-testpeer` run.
fn last_line(out: &std::process::Output) -> Value {
    let stdout = String::from_utf8_lossy(&out.stdout);
    assert!(out.status.success(), "{stdout}{}", String::from_utf8_lossy(&out.stderr));
    serde_json::from_str(stdout.lines().last().unwrap_or_default()).unwrap()
}

#[test]
fn a_peer_holding_task_streams_open_is_cut_off_while_others_are_served() {
    let dir = init_data_dir();
    install_manifest(dir.path(), "echo", "echo", "");
    let node = TestNode::start_in(dir.path(), LOOPBACK).unwrap();
    let addr = node.dial_addrs()[0].clone();

    // 64 task streams of 900 KiB each, all held open: 56 MiB where one connection may have
    // 4 MiB in flight (before the bound, the node read all of them and waited, for as many
    // peers as cared to).
    let flooder = Command::new(bin("murmur-testpeer"))
        .args(["--dial", &addr, "--flood", "64:921600", "--timeout-secs", "15"])
        .stdout(Stdio::piped())
        .stderr(Stdio::piped())
        .spawn()
        .unwrap();

    // Another peer's task is taken meanwhile.
    let honest = Command::new(bin("murmur-testpeer"))
        .args(["--dial", &addr, "--task", "submit:echo:still served", "--timeout-secs", "20"])
        .output()
        .unwrap();
    let answer = &last_line(&honest)["answer"];
    assert!(answer["task"].is_string(), "the honest peer's task was accepted: {answer}");

    let flood = last_line(&flooder.wait_with_output().unwrap());
    assert_eq!(flood["cut_off"], true, "the flooding peer was cut off: {flood}\n{}", node.stderr());
    assert!(flood["after_ms"].as_u64().unwrap() < 15_000, "{flood}");

    assert_eq!(node.metric("murmur_peers_cut_off_total"), 1);
    assert!(node.metric("murmur_request_overruns_total{scope=\"connection\"}") >= 1);
    assert_eq!(node.metric("murmur_request_overruns_total{scope=\"node\"}"), 0);
    assert!(node.stderr().contains("peer cut off"), "the cut is logged: {}", node.stderr());

    // The node's own clients are served too.
    let answer = node.send("echo", "after the flood", "m-1", false).unwrap();
    assert_eq!(answer["result"]["task"]["status"]["state"], "TASK_STATE_COMPLETED", "{answer}");
}
