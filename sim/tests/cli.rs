//! The `murmur-sim` command line: exit codes, JSON, reproduction lines.

use std::process::Command;

fn sim(args: &[&str]) -> std::process::Output {
    Command::new(env!("CARGO_BIN_EXE_murmur-sim")).args(args).output().unwrap()
}

#[test]
fn a_passing_run_exits_zero_with_json_metrics() {
    let out = sim(&["run", "steady", "--nodes", "20", "--seed", "4", "--json"]);
    assert_eq!(out.status.code(), Some(0), "{}", String::from_utf8_lossy(&out.stderr));
    let json: serde_json::Value = serde_json::from_slice(&out.stdout).unwrap();
    assert_eq!(json["verdict"], "pass");
    for key in ["events_per_sec", "messages_per_node_per_sec", "bytes_per_node_per_sec"] {
        assert!(json["metrics"][key].as_f64().unwrap() > 0.0, "{key}");
    }
    assert_eq!(json["trace_hash"].as_str().unwrap().len(), 64);
    assert!(json["metrics"]["convergence"]["p99_ms"].is_u64());
}

#[test]
fn the_canary_exits_with_the_safety_code_and_a_repro_line() {
    let out = sim(&["run", "steady", "--nodes", "20", "--seed", "9", "--canary"]);
    assert_eq!(out.status.code(), Some(4));
    let text = String::from_utf8_lossy(&out.stdout);
    assert!(text.contains("reproduce: cargo run --release -p murmur-sim -- run"), "{text}");
    assert!(text.contains("--seed 9") && text.contains("--canary"), "{text}");
    assert!(text.contains("[protocol]"), "the resolved scenario is printed: {text}");
}

#[test]
fn a_panic_in_a_run_exits_with_the_crash_code_and_a_repro_line() {
    let out = sim(&["run", "steady", "--nodes", "20", "--seed", "5", "--plant", "panic"]);
    assert_eq!(out.status.code(), Some(3), "{}", String::from_utf8_lossy(&out.stderr));
    let text = String::from_utf8_lossy(&out.stdout);
    assert!(text.contains("Crash") && text.contains("panic: planted panic"), "{text}");
    assert!(text.contains("--seed 5") && text.contains("--plant panic"), "{text}");
    let out = sim(&["run", "steady", "--nodes", "20", "--plant", "panic", "--json"]);
    assert_eq!(out.status.code(), Some(3));
    let json: serde_json::Value = serde_json::from_slice(&out.stdout).unwrap();
    assert_eq!((json["verdict"].as_str(), json["exit_code"].as_u64()), (Some("crash"), Some(3)));
    // In a sweep the crash outranks every other verdict.
    let out = sim(&["sweep", "steady", "--nodes", "20", "--seeds", "1..=2", "--plant", "panic"]);
    assert_eq!(out.status.code(), Some(3), "{}", String::from_utf8_lossy(&out.stderr));
}

#[test]
fn help_shows_each_example_on_its_own_line() {
    let out = sim(&["--help"]);
    assert_eq!(out.status.code(), Some(0));
    let help = String::from_utf8_lossy(&out.stdout);
    for example in ["murmur-sim run partition --seed 42", "murmur-sim sweep churn --seeds 1..50"] {
        assert!(help.lines().any(|line| line.trim() == example), "{example}: {help}");
    }
}

#[test]
fn a_sweep_summarizes_every_seed() {
    let out = sim(&["sweep", "byzantine", "--nodes", "20", "--seeds", "1..=3", "--jobs", "2"]);
    assert_eq!(out.status.code(), Some(0), "{}", String::from_utf8_lossy(&out.stderr));
    let table = String::from_utf8_lossy(&out.stdout);
    assert_eq!(table.lines().count(), 4, "header and three seeds: {table}");
    assert!(String::from_utf8_lossy(&out.stderr).contains("3 of 3 seeds passed"));
}

#[test]
fn usage_errors_exit_two() {
    assert_eq!(sim(&["run", "no-such-scenario"]).status.code(), Some(2));
    assert_eq!(sim(&["sweep", "steady", "--seeds", "5..1"]).status.code(), Some(2));
    assert_eq!(
        sim(&["run", "steady", "--duration", "10"]).status.code(),
        Some(2),
        "liveness bound cannot fit"
    );
}
