//! Mesh figures: advert convergence (a capsule added on one node, until every node lists
//! it, next to one gossip hop) and the resident memory of an idle node and of one holding
//! 1,000 adverts.

use std::collections::BTreeSet;
use std::io::Write;
use std::path::Path;
use std::process::{Command, Stdio};
use std::sync::Arc;
use std::sync::atomic::{AtomicBool, Ordering};
use std::time::{Duration, Instant};

use anyhow::Context;
use murmur_protocol::{Advert, HostedCapsule, Millis, SecretKey, Signed};
use murmur_tests::{TestNode, bin, capsules_toml, wait_for};
use serde::Serialize;

use crate::percentile;

#[derive(Debug, Serialize)]
struct Convergence {
    nodes: usize,
    runs: usize,
    first_p50_ms: f64,
    first_p99_ms: f64,
    all_p50_ms: f64,
    all_p99_ms: f64,
    all_max_ms: f64,
}

#[derive(Debug, Serialize)]
struct Memory {
    idle_rss_kib: u64,
    adverts: usize,
    with_adverts_rss_kib: u64,
    per_advert_bytes: f64,
}

#[derive(Debug, Serialize)]
struct MeshReport {
    convergence: Vec<Convergence>,
    memory: Memory,
}

/// Runs the mesh figures and writes them to `out`.
pub fn run(sizes: &[usize], runs: usize, out: &Path) -> anyhow::Result<()> {
    let convergence: Vec<Convergence> =
        sizes.iter().map(|&n| convergence(n, runs)).collect::<anyhow::Result<_>>()?;
    let memory = memory(1000)?;
    print_table(&convergence, &memory);
    let report = MeshReport { convergence, memory };
    std::fs::write(out, serde_json::to_string_pretty(&report)?)?;
    eprintln!("wrote {}", out.display());
    Ok(())
}

fn convergence(n: usize, runs: usize) -> anyhow::Result<Convergence> {
    eprintln!("mesh of {n} nodes: starting");
    let mut nodes: Vec<TestNode> = Vec::new();
    for k in 0..n {
        let toml = capsules_toml(&[(&format!("base{k}"), "1.0.0")]);
        nodes.push(TestNode::start_with(&toml, nodes.last())?);
    }
    let base: BTreeSet<String> = (0..n).map(|k| format!("base{k}")).collect();
    for node in &nodes {
        wait_for(Duration::from_secs(60), "initial convergence", || {
            base.is_subset(&node.capsule_names().into_iter().collect()).then_some(())
        })?;
    }
    let (mut first, mut all) = (Vec::new(), Vec::new());
    for run in 0..runs {
        let origin = run % n;
        let name = format!("probe{run}");
        let toml = capsules_toml(&[(&format!("base{origin}"), "1.0.0"), (&name, "1.0.0")]);
        std::fs::write(nodes[origin].data_dir.join("murnode.toml"), toml)?;
        let started = Instant::now();
        nodes[origin].reload();
        let (first_ms, all_ms) = time_until_listed(&nodes, origin, &name)?;
        first.push(first_ms);
        all.push(all_ms);
        eprintln!("  run {run}: first {first_ms:.1} ms, all {all_ms:.1} ms ({:?} total)", started.elapsed());
    }
    first.sort_by(f64::total_cmp);
    all.sort_by(f64::total_cmp);
    Ok(Convergence {
        nodes: n,
        runs,
        first_p50_ms: percentile(&first, 50.0),
        first_p99_ms: percentile(&first, 99.0),
        all_p50_ms: percentile(&all, 50.0),
        all_p99_ms: percentile(&all, 99.0),
        all_max_ms: *all.last().unwrap_or(&0.0),
    })
}

/// Polls every node but `origin` in its own thread; returns (first, last) arrival in ms.
fn time_until_listed(nodes: &[TestNode], origin: usize, name: &str) -> anyhow::Result<(f64, f64)> {
    let start = Instant::now();
    let deadline = start + Duration::from_secs(60);
    let done = Arc::new(AtomicBool::new(false));
    let arrivals: Vec<f64> = std::thread::scope(|scope| {
        let handles: Vec<_> = nodes
            .iter()
            .enumerate()
            .filter(|(i, _)| *i != origin)
            .map(|(_, node)| {
                let done = done.clone();
                scope.spawn(move || {
                    let client = reqwest::blocking::Client::new();
                    let url = format!("{}/v1/capsules", node.api);
                    while Instant::now() < deadline && !done.load(Ordering::Relaxed) {
                        if let Ok(text) = client.get(&url).send().and_then(|r| r.text())
                            && text.contains(&format!("\"name\":\"{name}\""))
                        {
                            return Some(start.elapsed().as_secs_f64() * 1000.0);
                        }
                        std::thread::sleep(Duration::from_millis(2));
                    }
                    None
                })
            })
            .collect();
        let results: Vec<Option<f64>> = handles.into_iter().map(|h| h.join().unwrap_or(None)).collect();
        done.store(true, Ordering::Relaxed);
        results.into_iter().flatten().collect()
    });
    anyhow::ensure!(arrivals.len() + 1 == nodes.len(), "{name} did not reach every node within 60 s");
    let first = arrivals.iter().copied().fold(f64::INFINITY, f64::min);
    let last = arrivals.iter().copied().fold(0.0, f64::max);
    Ok((first, last))
}

fn rss_kib(pid: u32) -> anyhow::Result<u64> {
    let status = std::fs::read_to_string(format!("/proc/{pid}/status"))?;
    status
        .lines()
        .find_map(|l| l.strip_prefix("VmRSS:"))
        .and_then(|v| v.trim().trim_end_matches("kB").trim().parse().ok())
        .context("VmRSS")
}

fn memory(count: usize) -> anyhow::Result<Memory> {
    eprintln!("memory: idle node, then {count} adverts");
    let node = TestNode::start_with("", None)?;
    std::thread::sleep(Duration::from_secs(2));
    let pid = node.pid().context("pid")?;
    let idle = rss_kib(pid)?;

    let now = Millis(std::time::SystemTime::now().duration_since(std::time::UNIX_EPOCH)?.as_millis() as u64);
    let file = tempfile::NamedTempFile::new()?;
    for i in 0..count {
        let mut seed = [0u8; 32];
        seed[..8].copy_from_slice(&(i as u64 + 1).to_le_bytes());
        let mut advert = Advert::new(now.0, now, 600_000);
        advert.addrs = vec![format!("/ip4/10.1.{}.{}/tcp/7421", i / 250, i % 250)];
        advert.capsules = (0..3)
            .map(|c| HostedCapsule { name: format!("cap-{i}-{c}"), digest: None, version: "1.0.0".into() })
            .collect();
        let envelope = Signed::sign(advert, &SecretKey::from_seed(seed))?.envelope().encode();
        writeln!(file.as_file(), "{}", hex::encode(envelope))?;
    }
    let mut peer = Command::new(bin("murmur-testpeer"))
        .args(["--dial", &node.dial_addrs()[0], "--publish", file.path().to_str().context("path")?])
        .stdin(Stdio::piped())
        .stdout(Stdio::null())
        .spawn()?;
    let held = wait_for(Duration::from_secs(120), "1,000 adverts held", || {
        let nodes = node.metric("murmur_directory_nodes");
        (nodes as usize > count).then_some(nodes)
    });
    let _ = peer.kill();
    let _ = peer.wait();
    held?;
    let with = rss_kib(pid)?;
    Ok(Memory {
        idle_rss_kib: idle,
        adverts: count,
        with_adverts_rss_kib: with,
        per_advert_bytes: (with.saturating_sub(idle) * 1024) as f64 / count as f64,
    })
}

fn print_table(convergence: &[Convergence], memory: &Memory) {
    println!("advert convergence (a capsule added on one node until every node lists it)");
    println!(
        "{:>6} {:>5} {:>14} {:>14} {:>12} {:>12} {:>11} {:>10}",
        "nodes",
        "runs",
        "first p50 ms",
        "first p99 ms",
        "all p50 ms",
        "all p99 ms",
        "all max ms",
        "all/first"
    );
    for c in convergence {
        println!(
            "{:>6} {:>5} {:>14.1} {:>14.1} {:>12.1} {:>12.1} {:>11.1} {:>10.2}",
            c.nodes,
            c.runs,
            c.first_p50_ms,
            c.first_p99_ms,
            c.all_p50_ms,
            c.all_p99_ms,
            c.all_max_ms,
            c.all_p50_ms / c.first_p50_ms
        );
    }
    println!();
    println!("resident memory");
    println!("  idle node:                 {:>8} KiB", memory.idle_rss_kib);
    println!(
        "  node holding {} adverts: {:>8} KiB  ({:.0} bytes per advert)",
        memory.adverts, memory.with_adverts_rss_kib, memory.per_advert_bytes
    );
}
