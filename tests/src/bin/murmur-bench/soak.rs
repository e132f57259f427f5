//! The soak: three real nodes under steady mixed load for a long time, one of them
//! restarted every few minutes, measured minute by minute.
//!
//! - **Load**: `rate` tasks/s, open loop: a pacer issues them on schedule whatever the
//!   answers do (at most [`IN_FLIGHT_MAX`] wait at once; a task that finds no slot is
//!   counted as shed). Kinds in turn: `echo` 5 in 10, `wordcount` 4 in 10, `ask` 1 in 10
//!   (its blocking send answers when the task asks for input; a second message answers it). Tasks go to the
//!   three nodes in turn; each capsule runs on two of the three, so some run where they
//!   arrive and the rest cross the mesh.
//! - **Pulls**: node 0 holds one signed 8 MiB artifact per minute of the run; at the start
//!   of each minute nodes 1 and 2 pull that minute's one.
//! - **Restarts**: every `restart_every` seconds the next node in turn gets SIGTERM (it
//!   drains and stops) and starts again on the same data directory, ports and key.
//! - **Lost**: every 10th accepted task is looked up again one minute later (`GetTask` at
//!   the node it was sent to), across whatever restarts happened: a task that node no
//!   longer knows, or that is still unfinished, is lost.
//!
//! Each minute's row: tasks accepted (answered with a task), completed, failed (accepted,
//! then failed), refused (never accepted: a refusal or no answer, as while a node restarts),
//! shed, lost of those checked, p50/p99 latency of completed tasks, and per node its
//! resident memory, open file descriptors and `tasks.redb` size at the minute's end.
//! After the table, the failed tasks counted by reason (end state and status text).

use std::collections::BTreeMap;
use std::path::{Path, PathBuf};
use std::sync::atomic::{AtomicU64, Ordering};
use std::sync::{Arc, Mutex, PoisonError};
use std::time::{Duration, Instant};

use murmur_tests::{
    TestNode, add_artifact, init_data_dir_with, install_manifest, publisher, trusting, wait_for,
};
use serde::Serialize;
use serde_json::{Value, json};
use tokio::sync::Semaphore;

/// Tasks waiting for their answer at once; one more is shed.
const IN_FLIGHT_MAX: usize = 4096;
/// One in this many accepted tasks is looked up again a minute later.
const CHECK_EVERY: u64 = 10;
/// How long after its answer a sampled task is looked up.
const CHECK_AFTER: Duration = Duration::from_secs(60);
/// How many refusals and losses the report shows each.
const LOSSES_SHOWN: usize = 20;
/// How many distinct reasons for failed tasks the report counts apart.
const REASONS_MAX: usize = 20;
/// Each minute's artifact.
const ARTIFACT_BYTES: usize = 8 << 20;
/// What each node runs: (capsule name, guest component).
const CAPSULES: [&[(&str, &str)]; 3] = [
    &[("echo", "echo"), ("wordcount", "wordcount")],
    &[("echo", "echo"), ("ask", "ask")],
    &[("wordcount", "wordcount"), ("ask", "ask")],
];

/// The soak's settings.
#[derive(Clone, Copy, Debug, Serialize)]
pub struct Settings {
    pub seconds: u64,
    pub rate: u64,
    pub restart_every: u64,
}

#[derive(Debug, Default, Serialize)]
struct NodeSample {
    running: bool,
    rss_mib: f64,
    fds: u64,
    tasks_db_mib: f64,
}

#[derive(Debug, Default, Serialize)]
struct MinuteRow {
    minute: u64,
    accepted: u64,
    completed: u64,
    failed: u64,
    refused: u64,
    shed: u64,
    checked: u64,
    lost: u64,
    p50_ms: f64,
    p99_ms: f64,
    pulls_ok: u64,
    pulls_failed: u64,
    restarted: Option<usize>,
    nodes: Vec<NodeSample>,
}

#[derive(Debug, Serialize)]
struct Report {
    settings: Settings,
    minutes: Vec<MinuteRow>,
    lost_total: u64,
    checked_total: u64,
    first_refusals: Vec<String>,
    first_losses: Vec<String>,
    /// Failed tasks by reason (at most [`REASONS_MAX`] reasons; the rest as `other`).
    failures: BTreeMap<String, u64>,
}

/// What the load records, per minute of the run.
#[derive(Default)]
struct Tally {
    rows: Vec<MinuteRow>,
    latencies_ms: Vec<Vec<f64>>,
    refusals: Vec<String>,
    losses: Vec<String>,
    failures: BTreeMap<String, u64>,
}

impl Tally {
    fn at(&mut self, minute: u64) -> &mut MinuteRow {
        let m = minute as usize;
        while self.rows.len() <= m {
            let n = self.rows.len() as u64;
            self.rows.push(MinuteRow { minute: n, ..MinuteRow::default() });
            self.latencies_ms.push(Vec::new());
        }
        &mut self.rows[m]
    }
}

type Shared = Arc<Mutex<Tally>>;

fn tally<R>(shared: &Shared, f: impl FnOnce(&mut Tally) -> R) -> R {
    f(&mut shared.lock().unwrap_or_else(PoisonError::into_inner))
}

/// One node of the soak: where it lives and how it is started again.
struct Member {
    dir: PathBuf,
    args: Vec<String>,
    api: String,
    node: Option<TestNode>,
}

impl Member {
    fn start(&mut self) -> anyhow::Result<()> {
        let args: Vec<&str> = self.args.iter().map(String::as_str).collect();
        self.node = Some(TestNode::launch_env(&[], &self.dir, &args, &[("MURNODE_LOG", "warn")])?);
        Ok(())
    }

    fn sample(&self) -> NodeSample {
        let db = std::fs::metadata(self.dir.join("tasks.redb")).map_or(0, |m| m.len());
        let mut sample = NodeSample { tasks_db_mib: db as f64 / 1_048_576.0, ..NodeSample::default() };
        if let Some(pid) = self.node.as_ref().and_then(TestNode::pid) {
            sample.running = true;
            sample.rss_mib = rss_kib(pid) as f64 / 1024.0;
            sample.fds = std::fs::read_dir(format!("/proc/{pid}/fd")).map_or(0, |d| d.count() as u64);
        }
        sample
    }
}

fn rss_kib(pid: u32) -> u64 {
    let status = std::fs::read_to_string(format!("/proc/{pid}/status")).unwrap_or_default();
    status
        .lines()
        .find_map(|l| l.strip_prefix("VmRSS:"))
        .and_then(|v| v.trim().trim_end_matches("kB").trim().parse().ok())
        .unwrap_or(0)
}

fn free_port() -> anyhow::Result<u16> {
    Ok(std::net::TcpListener::bind("127.0.0.1:0")?.local_addr()?.port())
}

/// The three nodes, node 0 holding one artifact per minute; they know each other.
fn prepare(work: &Path, minutes: u64) -> anyhow::Result<Vec<Member>> {
    let (key, public) = publisher(work);
    let config = format!(
        "{}[adverts]\nrefresh_secs = 5\nttl_secs = 30\n\n[tasks]\nkeep_max = 50000\n",
        trusting(&public)
    );
    let mut members = Vec::new();
    let mut first_addr = None;
    for (i, capsules) in CAPSULES.iter().enumerate() {
        let dir = init_data_dir_with(&config).keep();
        for (name, component) in *capsules {
            install_manifest(&dir, name, component, "[lifecycle]\nworkers = 64\n");
        }
        if i == 0 {
            for minute in 0..minutes {
                let file = work.join(format!("soak-{minute}.bin"));
                let content: Vec<u8> = (0..ARTIFACT_BYTES as u64)
                    .map(|b| ((b ^ (minute << 20)).wrapping_mul(2_654_435_761) >> 24) as u8)
                    .collect();
                std::fs::write(&file, &content)?;
                let name = format!("soak-{minute}");
                add_artifact(&dir, &file, (&name, "1.0.0"), "tool", &["--sign-key", &key]);
                std::fs::remove_file(&file)?;
            }
        }
        let (api, p2p) = (free_port()?, free_port()?);
        let mut args: Vec<String> = ["--api", &format!("127.0.0.1:{api}")]
            .into_iter()
            .chain(["--listen", &format!("/ip4/127.0.0.1/tcp/{p2p}"), "--no-mdns"])
            .map(str::to_owned)
            .collect();
        if let Some(addr) = &first_addr {
            args.extend(["--bootstrap".to_owned(), String::clone(addr)]);
        }
        let mut member = Member { dir, args, api: format!("http://127.0.0.1:{api}"), node: None };
        member.start()?;
        if i == 0 {
            let node = member.node.as_ref().expect("started");
            first_addr = Some(node.dial_addrs()[0].clone());
        }
        members.push(member);
    }
    // Node 0 restarts too: let it find the others again without its bootstrap.
    let addrs: Vec<String> =
        members.iter().filter_map(|m| m.node.as_ref()).map(|n| n.dial_addrs()[0].clone()).collect();
    members[0].args.extend(["--bootstrap".to_owned(), addrs[1].clone()]);
    for member in &members {
        let node = member.node.as_ref().expect("started");
        wait_for(Duration::from_secs(60), "every node to list every capsule", || {
            let names = node.capsule_names();
            ["echo", "wordcount", "ask"].iter().all(|c| names.iter().any(|n| n == c)).then_some(())
        })?;
    }
    Ok(members)
}

static NEXT_ID: AtomicU64 = AtomicU64::new(0);

/// How one task ended, as its sender saw it.
enum Outcome {
    Completed {
        id: String,
    },
    /// Accepted, then not completed: `why` is its end state and status text.
    Failed {
        id: String,
        why: String,
    },
    Refused(String),
}

async fn rpc(client: &reqwest::Client, url: &str, method: &str, params: Value) -> Result<Value, String> {
    let body = json!({ "jsonrpc": "2.0", "id": 1, "method": method, "params": params });
    let answer = client.post(url).json(&body).send().await.map_err(|e| format!("no answer: {e}"))?;
    answer.json().await.map_err(|e| format!("no answer: {e}"))
}

fn state(task: &Value) -> &str {
    task["status"]["state"].as_str().unwrap_or_default()
}

/// Sends one task of `kind` to the node at `url` and waits for its end.
async fn one_task(client: &reqwest::Client, url: &str, kind: &str) -> Outcome {
    let n = NEXT_ID.fetch_add(1, Ordering::Relaxed);
    let message_id = format!("soak-{}-{n}", std::process::id());
    let text = if kind == "wordcount" { "the quick brown fox jumps over the lazy dog" } else { "soak" };
    let params = json!({
        "tenant": format!("mesh://{kind}"),
        "message": { "messageId": message_id, "role": "ROLE_USER", "parts": [{ "text": text }] },
        // Blocking: the answer comes when the task ends, or when it stops to ask for input.
        "configuration": { "returnImmediately": false },
    });
    let answer = match rpc(client, url, "SendMessage", params).await {
        Ok(answer) => answer,
        Err(e) => return Outcome::Refused(e),
    };
    let task = &answer["result"]["task"];
    let Some(id) = task["id"].as_str().map(str::to_owned) else {
        return Outcome::Refused(
            answer["error"]["message"].as_str().unwrap_or("no task in the answer").to_owned(),
        );
    };
    let mut task = task.clone();
    if kind == "ask" && state(&task) == "TASK_STATE_INPUT_REQUIRED" {
        let reply = json!({
            "message": { "messageId": format!("{message_id}-reply"), "role": "ROLE_USER", "taskId": id,
                "parts": [{ "text": "yes" }] },
            "configuration": { "returnImmediately": false },
        });
        match rpc(client, url, "SendMessage", reply).await {
            Ok(answer) => task = answer["result"]["task"].clone(),
            Err(e) => return Outcome::Failed { id, why: format!("the reply got {e}") },
        }
    }
    if state(&task) == "TASK_STATE_COMPLETED" {
        Outcome::Completed { id }
    } else {
        Outcome::Failed { why: failure_of(&task), id }
    }
}

/// A failed task's reason as the report groups it: its state and status text.
fn failure_of(task: &Value) -> String {
    let text = task["status"]["message"]["parts"][0]["text"].as_str().unwrap_or("no status text");
    let text: String = text.chars().take(160).collect();
    match state(task) {
        "" => format!("no task in the answer: {text}"),
        state => format!("{state}: {text}"),
    }
}

/// Whether the node at `url` still knows task `id` as finished, and what it said; `None`
/// while it does not answer (restarting). An owner elsewhere that does not answer
/// (`unavailable`: restarting) is no answer either: the task is not lost for that.
async fn still_there(client: &reqwest::Client, url: &str, id: &str) -> Option<(bool, String)> {
    let answer = rpc(client, url, "GetTask", json!({ "id": id })).await.ok()?;
    if answer["error"]["data"]["check"] == "unavailable" {
        return None;
    }
    let finished =
        ["TASK_STATE_COMPLETED", "TASK_STATE_FAILED", "TASK_STATE_CANCELED", "TASK_STATE_REJECTED"];
    let seen = match answer.get("error") {
        Some(error) => format!("error {error}"),
        None => state(&answer["result"]).to_owned(),
    };
    Some((finished.contains(&state(&answer["result"])), seen))
}

/// Looks task `id` up again at `url` a minute after `answered`, for `minute`'s row.
async fn check_later(
    client: reqwest::Client,
    url: String,
    id: String,
    answered: Instant,
    minute: u64,
    shared: Shared,
) {
    tokio::time::sleep_until((answered + CHECK_AFTER).into()).await;
    let mut found = None;
    for _ in 0..30 {
        found = still_there(&client, &url, &id).await;
        if found.is_some() {
            break;
        }
        tokio::time::sleep(Duration::from_secs(2)).await;
    }
    let since = answered.elapsed().as_secs();
    tally(&shared, |t| {
        let row = t.at(minute);
        row.checked += 1;
        if found.as_ref().is_none_or(|(finished, _)| !finished) {
            row.lost += 1;
            if t.losses.len() < LOSSES_SHOWN {
                let seen = found.map_or_else(|| "no answer".to_owned(), |(_, seen)| seen);
                t.losses.push(format!(
                    "minute {minute}, checked {since} s after its answer: task {id} at {url}: {seen}"
                ));
            }
        }
    });
}

/// Pulls `artifact` on the node at `url`; true when it ends with `done`.
async fn pull(client: &reqwest::Client, url: &str, artifact: &str) -> bool {
    let Ok(answer) =
        client.post(format!("{url}/v1/artifacts/pull")).json(&json!({ "artifact": artifact })).send().await
    else {
        return false;
    };
    let text = answer.text().await.unwrap_or_default();
    text.lines()
        .last()
        .and_then(|l| serde_json::from_str::<Value>(l).ok())
        .is_some_and(|v| v["event"] == "done")
}

pub fn run(settings: Settings, out: &Path) -> anyhow::Result<()> {
    anyhow::ensure!(
        settings.rate > 0 && settings.seconds >= 60,
        "--rate must be > 0 and --seconds at least 60"
    );
    let minutes = settings.seconds.div_ceil(60);
    let work = tempfile::tempdir()?;
    eprintln!("preparing three nodes and {minutes} artifacts of {} MiB…", ARTIFACT_BYTES >> 20);
    let members = Arc::new(Mutex::new(prepare(work.path(), minutes)?));
    let urls: Vec<String> = members
        .lock()
        .unwrap_or_else(PoisonError::into_inner)
        .iter()
        .map(|m| format!("{}/", m.api))
        .collect();
    let shared: Shared = Arc::default();
    let started = Instant::now();
    let end = started + Duration::from_secs(settings.seconds);

    // Restarts and the per-minute samples run on their own thread: they block.
    let sampler = {
        let (members, shared) = (members.clone(), shared.clone());
        std::thread::spawn(move || -> anyhow::Result<()> {
            let mut next_restart = started + Duration::from_secs(settings.restart_every);
            let mut next_sample = started + Duration::from_secs(60);
            let mut turn = 0;
            while Instant::now() < end + Duration::from_secs(1) {
                let now = Instant::now();
                if settings.restart_every > 0 && now >= next_restart && now < end {
                    let i = turn % 3;
                    turn += 1;
                    next_restart += Duration::from_secs(settings.restart_every);
                    let minute = now.duration_since(started).as_secs() / 60;
                    eprintln!("minute {minute}: restarting node {i}");
                    let mut node = members.lock().unwrap_or_else(PoisonError::into_inner)[i].node.take();
                    if let Some(node) = node.as_mut() {
                        node.terminate(Duration::from_secs(60))?;
                    }
                    members.lock().unwrap_or_else(PoisonError::into_inner)[i].start()?;
                    tally(&shared, |t| t.at(minute).restarted = Some(i));
                }
                if now >= next_sample {
                    let minute = now.duration_since(started).as_secs() / 60 - 1;
                    let samples: Vec<NodeSample> = members
                        .lock()
                        .unwrap_or_else(PoisonError::into_inner)
                        .iter()
                        .map(Member::sample)
                        .collect();
                    tally(&shared, |t| t.at(minute).nodes = samples);
                    next_sample += Duration::from_secs(60);
                }
                std::thread::sleep(Duration::from_millis(100));
            }
            Ok(())
        })
    };

    let threads = tokio::runtime::Builder::new_multi_thread().worker_threads(2).enable_all().build()?;
    threads.block_on(async {
        let client = reqwest::Client::builder().pool_max_idle_per_host(512).build()?;
        let slots = Arc::new(Semaphore::new(IN_FLIGHT_MAX));
        let mut tasks = tokio::task::JoinSet::new();
        let mut pulled_minute = None;
        let mut issued: u64 = 0;
        let mut tick = tokio::time::interval(Duration::from_millis(1));
        tick.set_missed_tick_behavior(tokio::time::MissedTickBehavior::Burst);
        while Instant::now() < end {
            tick.tick().await;
            let elapsed = started.elapsed();
            let minute = elapsed.as_secs() / 60;
            if pulled_minute != Some(minute) {
                pulled_minute = Some(minute);
                for node in [1, 2] {
                    let (client, url, shared) =
                        (client.clone(), urls[node].trim_end_matches('/').to_owned(), shared.clone());
                    tasks.spawn(async move {
                        let artifact = format!("soak-{minute}@1.0.0");
                        let mut ok = pull(&client, &url, &artifact).await;
                        if !ok {
                            // The node may be restarting: once more, a little later.
                            tokio::time::sleep(Duration::from_secs(20)).await;
                            ok = pull(&client, &url, &artifact).await;
                        }
                        tally(&shared, |t| {
                            let row = t.at(minute);
                            if ok { row.pulls_ok += 1 } else { row.pulls_failed += 1 }
                        });
                    });
                }
            }
            let due = (elapsed.as_secs_f64() * settings.rate as f64) as u64;
            while issued < due {
                let n = issued;
                issued += 1;
                let Ok(permit) = slots.clone().try_acquire_owned() else {
                    tally(&shared, |t| t.at(minute).shed += 1);
                    continue;
                };
                let kind = match n % 10 {
                    0..5 => "echo",
                    5..9 => "wordcount",
                    _ => "ask",
                };
                let url = urls[(n % 3) as usize].clone();
                let (client, counts, shared) = (client.clone(), shared.clone(), shared.clone());
                let sent = Instant::now();
                let outcome = async move {
                    let outcome = one_task(&client, &url, kind).await;
                    drop(permit);
                    let latency_ms = sent.elapsed().as_secs_f64() * 1000.0;
                    let id = tally(&counts, |t| match outcome {
                        Outcome::Completed { id } => {
                            t.at(minute).accepted += 1;
                            t.at(minute).completed += 1;
                            t.latencies_ms[minute as usize].push(latency_ms);
                            Some(id)
                        }
                        Outcome::Failed { id, why } => {
                            t.at(minute).accepted += 1;
                            t.at(minute).failed += 1;
                            let known = t.failures.len() < REASONS_MAX || t.failures.contains_key(&why);
                            *t.failures.entry(if known { why } else { "other".into() }).or_default() += 1;
                            Some(id)
                        }
                        Outcome::Refused(why) => {
                            t.at(minute).refused += 1;
                            if t.refusals.len() < LOSSES_SHOWN {
                                t.refusals.push(format!("minute {minute}: {why}"));
                            }
                            None
                        }
                    });
                    id.filter(|_| n.is_multiple_of(CHECK_EVERY)).map(|id| (client, url, id))
                };
                tasks.spawn(async move {
                    if let Some((client, url, id)) = outcome.await {
                        check_later(client, url, id, Instant::now(), minute, shared).await;
                    }
                });
            }
            while tasks.try_join_next().is_some() {}
        }
        eprintln!("load done; waiting for the last answers and checks…");
        while tasks.join_next().await.is_some() {}
        anyhow::Ok(())
    })?;
    sampler.join().map_err(|_| anyhow::anyhow!("the sampler thread panicked"))??;

    let mut tally = Arc::try_unwrap(shared)
        .map_err(|_| anyhow::anyhow!("tally still shared"))?
        .into_inner()
        .unwrap_or_else(PoisonError::into_inner);
    for (row, latencies) in tally.rows.iter_mut().zip(tally.latencies_ms.iter_mut()) {
        latencies.sort_by(f64::total_cmp);
        if !latencies.is_empty() {
            row.p50_ms = crate::percentile(latencies, 50.0);
            row.p99_ms = crate::percentile(latencies, 99.0);
        }
    }
    tally.rows.truncate(minutes as usize);
    let report = Report {
        settings,
        lost_total: tally.rows.iter().map(|r| r.lost).sum(),
        checked_total: tally.rows.iter().map(|r| r.checked).sum(),
        minutes: tally.rows,
        first_refusals: tally.refusals,
        first_losses: tally.losses,
        failures: tally.failures,
    };
    print_table(&report);
    for member in members.lock().unwrap_or_else(PoisonError::into_inner).iter_mut() {
        if let Some(mut node) = member.node.take() {
            let _ = node.terminate(Duration::from_secs(30));
        }
        let _ = std::fs::remove_dir_all(&member.dir);
    }
    std::fs::write(out, serde_json::to_string_pretty(&report)?)?;
    eprintln!("wrote {}", out.display());
    Ok(())
}

fn print_table(report: &Report) {
    println!(
        "{:>3} {:>8} {:>8} {:>6} {:>7} {:>5} {:>9} {:>7} {:>7} {:>5} {:>7}  {:<44}",
        "min",
        "accepted",
        "complete",
        "failed",
        "refused",
        "shed",
        "lost/chk",
        "p50 ms",
        "p99 ms",
        "pulls",
        "restart",
        "per node: RSS MiB / fds / tasks.redb MiB"
    );
    for r in &report.minutes {
        let nodes: Vec<String> = r
            .nodes
            .iter()
            .map(|n| {
                if n.running {
                    format!("{:.0}/{}/{:.1}", n.rss_mib, n.fds, n.tasks_db_mib)
                } else {
                    "down".into()
                }
            })
            .collect();
        println!(
            "{:>3} {:>8} {:>8} {:>6} {:>7} {:>5} {:>9} {:>7.1} {:>7.1} {:>5} {:>7}  {:<44}",
            r.minute,
            r.accepted,
            r.completed,
            r.failed,
            r.refused,
            r.shed,
            format!("{}/{}", r.lost, r.checked),
            r.p50_ms,
            r.p99_ms,
            format!("{}/{}", r.pulls_ok, r.pulls_ok + r.pulls_failed),
            r.restarted.map_or("-".to_owned(), |i| format!("node {i}")),
            nodes.join("  ")
        );
    }
    println!("lost: {} of {} checked", report.lost_total, report.checked_total);
    for line in &report.first_losses {
        println!("  lost: {line}");
    }
    if !report.failures.is_empty() {
        println!("failed, by reason:");
        for (why, count) in &report.failures {
            println!("  {count:>6}  {why}");
        }
    }
    if !report.first_refusals.is_empty() {
        println!("first refusals:");
        for line in &report.first_refusals {
            println!("  {line}");
        }
    }
}
