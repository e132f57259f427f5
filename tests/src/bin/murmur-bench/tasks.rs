//! Task figures: latency distributions and throughput, local next to mesh.

use std::path::Path;
use std::sync::Arc;
use std::sync::atomic::{AtomicU64, Ordering};
use std::time::{Duration, Instant};

use murmur_tests::{TestNode, install_manifest, wait_for};
use serde::Serialize;
use serde_json::json;

#[derive(Debug, Serialize)]
struct Latency {
    name: String,
    samples: usize,
    p50_us: f64,
    p99_us: f64,
}

#[derive(Debug, Serialize)]
struct Throughput {
    name: String,
    clients: usize,
    tasks: u64,
    seconds: f64,
    tasks_per_s: f64,
    errors: u64,
}

#[derive(Debug, Serialize)]
struct Report {
    latency: Vec<Latency>,
    mesh_overhead_p50_us: f64,
    mesh_overhead_p99_us: f64,
    throughput: Vec<Throughput>,
}

const CONFIG: &str = "[adverts]\nrefresh_secs = 5\nttl_secs = 30\n";

fn node(capsule: &str, bootstrap: Option<&TestNode>) -> anyhow::Result<(TestNode, tempfile::TempDir)> {
    node_with(CONFIG, capsule, bootstrap)
}

/// A release node with `config`, running `echo` as `capsule`, bootstrapped to `bootstrap`.
pub fn node_with(
    config: &str,
    capsule: &str,
    bootstrap: Option<&TestNode>,
) -> anyhow::Result<(TestNode, tempfile::TempDir)> {
    let dir = murmur_tests::init_data_dir_with(config);
    install_manifest(dir.path(), capsule, "echo", "[lifecycle]\nworkers = 64\n");
    let mut flags: Vec<String> = murmur_tests::LOOPBACK.iter().map(|s| (*s).to_owned()).collect();
    if let Some(peer) = bootstrap {
        flags.extend(["--bootstrap".to_owned(), peer.dial_addrs()[0].clone()]);
    }
    let flags: Vec<&str> = flags.iter().map(String::as_str).collect();
    // Logs at warn: per-task info lines would measure the terminal.
    let node = TestNode::start_in_env(dir.path(), &flags, &[("MURNODE_LOG", "warn")])?;
    Ok((node, dir))
}

static NEXT_ID: AtomicU64 = AtomicU64::new(0);

/// One blocking `SendMessage`; true when the task completed.
async fn send(client: &reqwest::Client, url: &str, tenant: &str) -> anyhow::Result<bool> {
    let id = NEXT_ID.fetch_add(1, Ordering::Relaxed);
    let body = json!({ "jsonrpc": "2.0", "id": id, "method": "SendMessage", "params": {
        "tenant": tenant,
        "message": { "messageId": format!("bench-{}-{id}", std::process::id()), "parts": [{ "text": "x" }] },
    }});
    let answer: serde_json::Value = client.post(url).json(&body).send().await?.json().await?;
    Ok(answer["result"]["task"]["status"]["state"] == "TASK_STATE_COMPLETED")
}

fn summarize(name: &str, mut micros: Vec<f64>) -> Latency {
    micros.sort_by(f64::total_cmp);
    Latency {
        name: name.into(),
        samples: micros.len(),
        p50_us: crate::percentile(&micros, 50.0),
        p99_us: crate::percentile(&micros, 99.0),
    }
}

async fn throughput(url: &str, tenant: &str, name: &str, clients: usize, seconds: u64) -> Throughput {
    let done = Arc::new(AtomicU64::new(0));
    let errors = Arc::new(AtomicU64::new(0));
    let started = Instant::now();
    let until = started + Duration::from_secs(seconds);
    let workers: Vec<_> = (0..clients)
        .map(|_| {
            let (done, errors) = (done.clone(), errors.clone());
            let (url, tenant) = (url.to_owned(), tenant.to_owned());
            tokio::spawn(async move {
                let client = reqwest::Client::new();
                while Instant::now() < until {
                    match send(&client, &url, &tenant).await {
                        Ok(true) => done.fetch_add(1, Ordering::Relaxed),
                        _ => errors.fetch_add(1, Ordering::Relaxed),
                    };
                }
            })
        })
        .collect();
    for worker in workers {
        let _ = worker.await;
    }
    let seconds = started.elapsed().as_secs_f64();
    let tasks = done.load(Ordering::Relaxed);
    Throughput {
        name: name.into(),
        clients,
        tasks,
        seconds,
        tasks_per_s: tasks as f64 / seconds,
        errors: errors.load(Ordering::Relaxed),
    }
}

pub fn run(samples: usize, seconds: u64, out: &Path) -> anyhow::Result<()> {
    let (a, _a_dir) = node("echo", None)?;
    let (_b, _b_dir) = node("echo-remote", Some(&a))?;
    wait_for(Duration::from_secs(30), "A to know echo-remote", || {
        a.capsule_names().iter().any(|n| n == "echo-remote").then_some(())
    })?;
    let url = format!("{}/", a.api);
    let threads = tokio::runtime::Builder::new_multi_thread().worker_threads(2).enable_all().build()?;
    let report = threads.block_on(async {
        let client = reqwest::Client::new();
        for _ in 0..samples / 10 + 20 {
            send(&client, &url, "echo").await?;
            send(&client, &url, "echo-remote").await?;
        }
        // Interleaved, so both see the same machine noise.
        let (mut local, mut mesh) = (Vec::with_capacity(samples), Vec::with_capacity(samples));
        for _ in 0..samples {
            let start = Instant::now();
            anyhow::ensure!(send(&client, &url, "echo").await?, "a local echo task did not complete");
            local.push(start.elapsed().as_secs_f64() * 1e6);
            let start = Instant::now();
            anyhow::ensure!(send(&client, &url, "echo-remote").await?, "a mesh echo task did not complete");
            mesh.push(start.elapsed().as_secs_f64() * 1e6);
        }
        let local = summarize("echo task, owner = this node", local);
        let mesh = summarize("echo task, owner = the other node", mesh);
        let mut figures = Vec::new();
        for clients in [1, 64] {
            figures.push(throughput(&url, "echo", "local", clients, seconds).await);
            figures.push(throughput(&url, "echo-remote", "mesh", clients, seconds).await);
        }
        anyhow::Ok(Report {
            mesh_overhead_p50_us: mesh.p50_us - local.p50_us,
            mesh_overhead_p99_us: mesh.p99_us - local.p99_us,
            latency: vec![local, mesh],
            throughput: figures,
        })
    })?;
    println!("{:<40} {:>8} {:>10} {:>10}", "blocking SendMessage round trip", "samples", "p50 µs", "p99 µs");
    for l in &report.latency {
        println!("{:<40} {:>8} {:>10.1} {:>10.1}", l.name, l.samples, l.p50_us, l.p99_us);
    }
    println!(
        "mesh overhead: p50 {:.1} µs, p99 {:.1} µs (ratio p50 {:.2}x)",
        report.mesh_overhead_p50_us,
        report.mesh_overhead_p99_us,
        report.latency[1].p50_us / report.latency[0].p50_us
    );
    println!("\n{:<10} {:>8} {:>10} {:>12} {:>8}", "throughput", "clients", "tasks", "tasks/s", "errors");
    for t in &report.throughput {
        println!("{:<10} {:>8} {:>10} {:>12.0} {:>8}", t.name, t.clients, t.tasks, t.tasks_per_s, t.errors);
    }
    std::fs::write(out, serde_json::to_string_pretty(&report)?)?;
    eprintln!("wrote {}", out.display());
    Ok(())
}
