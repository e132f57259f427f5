//! Bundle throughput: export, verify, import, next to SHA-256 and a file copy.

use std::path::Path;
use std::time::Instant;

use murmur_protocol::{Digest, Millis, SecretKey};
use murmur_store::bundle;
use murmur_store::{ArtifactMeta, ArtifactStore, CapsuleKind, Platform};
use serde::Serialize;

#[derive(Debug, Serialize)]
struct Row {
    size_mib: u64,
    sha256_mb_s: f64,
    copy_mb_s: f64,
    copy_fsync_mb_s: f64,
    export_mb_s: f64,
    verify_mb_s: f64,
    import_mb_s: f64,
}

fn median(mut v: Vec<f64>) -> f64 {
    v.sort_by(f64::total_cmp);
    v[v.len() / 2]
}

fn rate(bytes: u64, started: Instant) -> f64 {
    bytes as f64 / 1e6 / started.elapsed().as_secs_f64()
}

pub fn run(sizes_mib: &[u64], runs: usize, out: &Path) -> anyhow::Result<()> {
    let key = SecretKey::from_seed([5; 32]);
    let trusted = [key.public()];
    let mut rows = Vec::new();
    for &mib in sizes_mib {
        let size = mib * 1024 * 1024;
        let content: Vec<u8> = (0..size).map(|i| (i.wrapping_mul(2_654_435_761) >> 24) as u8).collect();
        let work = tempfile::tempdir()?;
        let file = work.path().join("content.wasm");
        std::fs::write(&file, &content)?;
        let source = ArtifactStore::open(&work.path().join("source"))?;
        let meta = ArtifactMeta {
            name: "big".into(),
            version: "1.0.0".into(),
            kind: CapsuleKind::Tool,
            runtime: Platform::Wasm,
            description: String::new(),
            tags: vec![],
            input_schema: None,
            output_schema: None,
        };
        let stored = source.add(&meta, &content, None)?;
        let (mut sha, mut copy, mut synced) = (vec![], vec![], vec![]);
        let (mut export, mut verify, mut import) = (vec![], vec![], vec![]);
        for run in 0..runs.max(1) {
            let started = Instant::now();
            std::hint::black_box(Digest::of(&content));
            sha.push(rate(size, started));
            let started = Instant::now();
            std::fs::copy(&file, work.path().join(format!("copy-{run}")))?;
            copy.push(rate(size, started));
            // The disk's ceiling: a copy made durable, as export and import make theirs.
            let started = Instant::now();
            let synced_path = work.path().join(format!("synced-{run}"));
            std::fs::copy(&file, &synced_path)?;
            std::fs::File::open(&synced_path)?.sync_all()?;
            synced.push(rate(size, started));
            std::fs::remove_file(&synced_path)?;
            let bundle_path = work.path().join(format!("b-{run}.bundle"));
            let started = Instant::now();
            bundle::export(
                &source,
                std::slice::from_ref(&stored),
                &key,
                Millis(0),
                &bundle_path,
                &mut |_, _| {},
            )?;
            export.push(rate(size, started));
            let started = Instant::now();
            bundle::verify(&bundle_path, &trusted, &mut |_, _| {})?;
            verify.push(rate(size, started));
            let target = ArtifactStore::open(&work.path().join(format!("target-{run}")))?;
            let started = Instant::now();
            bundle::import(&target, &bundle_path, &trusted, &mut |_, _| {})?;
            import.push(rate(size, started));
            std::fs::remove_file(work.path().join(format!("copy-{run}")))?;
        }
        rows.push(Row {
            size_mib: mib,
            sha256_mb_s: median(sha),
            copy_mb_s: median(copy),
            copy_fsync_mb_s: median(synced),
            export_mb_s: median(export),
            verify_mb_s: median(verify),
            import_mb_s: median(import),
        });
    }
    println!(
        "{:>6} {:>12} {:>10} {:>11} {:>10} {:>10} {:>10} {:>14}",
        "MiB", "sha256 MB/s", "copy MB/s", "copy+fsync", "export", "verify", "import", "import/sha256"
    );
    for r in &rows {
        println!(
            "{:>6} {:>12.0} {:>10.0} {:>11.0} {:>10.0} {:>10.0} {:>10.0} {:>13.0}%",
            r.size_mib,
            r.sha256_mb_s,
            r.copy_mb_s,
            r.copy_fsync_mb_s,
            r.export_mb_s,
            r.verify_mb_s,
            r.import_mb_s,
            100.0 * r.import_mb_s / r.sha256_mb_s
        );
    }
    std::fs::write(out, serde_json::to_string_pretty(&rows)?)?;
    eprintln!("wrote {}", out.display());
    Ok(())
}
