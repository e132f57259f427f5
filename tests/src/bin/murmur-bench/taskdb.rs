//! Task database figures: how long a node takes to start with many finished tasks on
//! disk, and what pruning them costs. A database of N finished tasks is written once;
//! then, side by side, the start-up's read as it was (every record read and decoded) and
//! `TaskManager::open` as it is (the unfinished tasks and the newest finished ones), and
//! one pruning pass down to `--keep` tasks.

use std::path::Path;
use std::time::Instant;

use murmur_node::tasks::{Origin, Retention, TaskDb, TaskManager, TaskRecord};
use murmur_protocol::task::{TaskId, TaskState};
use serde_json::json;

pub fn run(finished: usize, keep: usize, runs: usize, out: &Path) -> anyhow::Result<()> {
    let dir = tempfile::tempdir()?;
    let path = dir.path().join("tasks.redb");
    let runtime = tokio::runtime::Runtime::new()?;
    let began = Instant::now();
    {
        let db = TaskDb::open(&path)?;
        for n in 0..finished {
            let task = TaskId::derive("bench@client", &format!("m{n}"));
            let at = n as u64;
            let mut record =
                TaskRecord::new(task, "echo", "m", None, "a few words of input".into(), Origin::Client, at);
            record.transition(TaskState::Working, None, at);
            record.transition(TaskState::Completed, Some("a few words of output".into()), at);
            db.put_eventually(record);
        }
        runtime.block_on(db.flush())?;
    }
    let size = std::fs::metadata(&path)?.len();
    eprintln!(
        "wrote {finished} finished tasks ({} MiB) in {:.1} s",
        size >> 20,
        began.elapsed().as_secs_f64()
    );

    let (mut scan, mut open) = (Vec::new(), Vec::new());
    for _ in 0..runs {
        let started = Instant::now();
        let all = TaskDb::open(&path)?.all()?.len();
        scan.push(started.elapsed().as_secs_f64());
        anyhow::ensure!(all == finished, "read {all} of {finished} records");
        let started = Instant::now();
        let manager = runtime.block_on(TaskManager::open(&path))?;
        open.push(started.elapsed().as_secs_f64());
        drop(manager);
    }
    let median = |mut v: Vec<f64>| {
        v.sort_by(f64::total_cmp);
        v[v.len() / 2]
    };
    let (scan, open) = (median(scan), median(open));
    let started = Instant::now();
    let pruned =
        TaskDb::open(&path)?.prune(finished as u64, Retention { keep_ms: u64::MAX, keep_max: keep })?;
    let prune_s = started.elapsed().as_secs_f64();

    println!("{:<52} {:>10}", "task database", "median");
    println!("{:<52} {:>9.3}s", format!("start-up read as before: every record ({finished})"), scan);
    println!("{:<52} {:>9.3}s", "TaskManager::open now: unfinished + newest 10,000", open);
    println!("{:<52} {:>9.1}x", "faster", scan / open);
    println!("{:<52} {:>9.3}s", format!("prune {} finished tasks down to {keep}", pruned.tasks), prune_s);
    let report = json!({
        "finished": finished, "file_bytes": size, "runs": runs,
        "startup_scan_s": scan, "startup_open_s": open, "ratio": scan / open,
        "prune": { "pruned": pruned.tasks, "kept": keep, "seconds": prune_s },
    });
    std::fs::write(out, serde_json::to_string_pretty(&report)?)?;
    println!("{report}");
    Ok(())
}
