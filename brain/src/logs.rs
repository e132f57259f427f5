//! An agent's log: what its brain wrote with `log` and what the host says about its runs
//! (started, stopped, restarted, why), kept three ways: the node's own log (`tracing`,
//! with the agent's name as a field), the last lines in memory for `mur agent logs`, and
//! `DIR/agents/<name>/brain.log` on disk (bounded: one older file is kept).

use std::collections::VecDeque;
use std::io::Write;
use std::path::PathBuf;
use std::sync::Mutex;

use serde::Serialize;
use tokio::sync::broadcast;

/// Lines kept in memory per agent.
pub const LINES_KEPT: usize = 1000;
/// Bytes of a brain's log file before it is rotated to `brain.log.1`.
pub const FILE_BYTES_MAX: u64 = 4 * 1024 * 1024;
/// Bytes of one line (a brain logging a megabyte gets it cut).
pub const LINE_BYTES_MAX: usize = 4096;
/// Lines a `--follow` reader may lag behind before it misses some (the ring is allocated
/// with the agent: kept small, it costs a few KiB per brain).
const FOLLOW_LAG_MAX: usize = 64;

/// One line.
#[derive(Clone, Debug, PartialEq, Eq, Serialize)]
pub struct Line {
    pub ts_ms: u64,
    /// `trace` … `error`.
    pub level: String,
    /// `brain` (its own `log`) or `host` (the node about the brain).
    pub source: String,
    pub message: String,
}

/// The log of one agent.
#[derive(Debug)]
pub struct Logs {
    agent: String,
    file: PathBuf,
    lines: Mutex<VecDeque<Line>>,
    /// Held while the file is rotated or appended to (the actor and a script thread may
    /// both write).
    file_lock: Mutex<()>,
    follow: broadcast::Sender<Line>,
}

/// A level by name; unknown names are `info` (the specification).
#[must_use]
pub fn level_of(name: &str) -> tracing::Level {
    match name {
        "trace" => tracing::Level::TRACE,
        "debug" => tracing::Level::DEBUG,
        "warn" => tracing::Level::WARN,
        "error" => tracing::Level::ERROR,
        _ => tracing::Level::INFO,
    }
}

impl Logs {
    /// The log of `agent`, written to `dir/brain.log`.
    #[must_use]
    pub fn new(agent: &str, dir: PathBuf) -> Self {
        let (follow, _) = broadcast::channel(FOLLOW_LAG_MAX);
        Self {
            agent: agent.to_owned(),
            file: dir.join("brain.log"),
            lines: Mutex::default(),
            file_lock: Mutex::default(),
            follow,
        }
    }

    /// A line from the brain's own `log(level, message)`.
    pub fn brain(&self, level: &str, message: &str) {
        self.write(level_of(level), "brain", message);
    }

    /// A line from the host about the brain.
    pub fn host(&self, level: tracing::Level, message: &str) {
        self.write(level, "host", message);
    }

    fn write(&self, level: tracing::Level, source: &str, message: &str) {
        let mut message = message.to_owned();
        if message.len() > LINE_BYTES_MAX {
            let end = (0..=LINE_BYTES_MAX).rev().find(|i| message.is_char_boundary(*i)).unwrap_or(0);
            message.truncate(end);
            message.push_str(" … [cut]");
        }
        let agent = self.agent.as_str();
        match level {
            tracing::Level::TRACE => tracing::trace!(agent, source, "{message}"),
            tracing::Level::DEBUG => tracing::debug!(agent, source, "{message}"),
            tracing::Level::INFO => tracing::info!(agent, source, "{message}"),
            tracing::Level::WARN => tracing::warn!(agent, source, "{message}"),
            tracing::Level::ERROR => tracing::error!(agent, source, "{message}"),
        }
        let line = Line {
            ts_ms: murmur_config::clock::now().0,
            level: level.as_str().to_lowercase(),
            source: source.into(),
            message,
        };
        self.append(&line);
        {
            let mut lines = self.lines.lock().unwrap_or_else(std::sync::PoisonError::into_inner);
            if lines.len() >= LINES_KEPT {
                lines.pop_front();
            }
            lines.push_back(line.clone());
        }
        let _ = self.follow.send(line);
    }

    fn append(&self, line: &Line) {
        let _serial = self.file_lock.lock().unwrap_or_else(std::sync::PoisonError::into_inner);
        if std::fs::metadata(&self.file).is_ok_and(|m| m.len() >= FILE_BYTES_MAX) {
            let _ = std::fs::rename(&self.file, self.file.with_extension("log.1"));
        }
        let text = format!("{} {} {} {}\n", line.ts_ms, line.level, line.source, line.message);
        let written = std::fs::OpenOptions::new()
            .create(true)
            .append(true)
            .open(&self.file)
            .and_then(|mut file| file.write_all(text.as_bytes()));
        if let Err(error) = written {
            tracing::debug!(agent = %self.agent, %error, "cannot write the brain log");
        }
    }

    /// The last `count` lines, oldest first.
    #[must_use]
    pub fn tail(&self, count: usize) -> Vec<Line> {
        let lines = self.lines.lock().unwrap_or_else(std::sync::PoisonError::into_inner);
        lines.iter().skip(lines.len().saturating_sub(count)).cloned().collect()
    }

    /// Lines from now on.
    #[must_use]
    pub fn follow(&self) -> broadcast::Receiver<Line> {
        self.follow.subscribe()
    }
}
