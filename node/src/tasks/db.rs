//! Durable task records in an embedded database (redb), with group commit.
//!
//! Why redb: a pure-Rust, ACID, copy-on-write B-tree in one file, with no C dependency and
//! no server, whose commits are crash-safe (a SIGKILL leaves the last committed state).
//! Why group commit: a durable commit costs an fsync (milliseconds); thousands of tasks a
//! second would each pay one. Writes go to a single writer thread that commits everything
//! queued so far in one transaction, and each caller waits for the commit that includes
//! its write — so an acknowledged write is on disk, and a burst shares one fsync. A batch
//! that nobody waits for (intermediate states) commits without an fsync; the next durable
//! commit, or at the latest one [`TASK_DB_FLUSH_AFTER`] later, carries it to disk. Routes
//! are waited for: the client is told where its task is only once that is on disk. A
//! full queue makes the writer's producers wait their turn; nothing queued is dropped.
//! Records are stored as CBOR (the protocol crate's codec), read back with a size bound.

use std::path::Path;
use std::sync::mpsc as std_mpsc;

use anyhow::Context;
use murmur_protocol::task::TaskId;
use redb::{Database, ReadableDatabase, ReadableTable, ReadableTableMetadata, TableDefinition};
use tokio::sync::oneshot;

use super::record::{RouteRecord, TaskRecord};
use murmur_config::limits::{
    TASK_DB_BATCH_MAX, TASK_DB_CACHE_BYTES, TASK_DB_FLUSH_AFTER, TASK_DB_WRITE_QUEUE_MAX,
    TASK_RECORD_BYTES_MAX,
};

const TASKS: TableDefinition<&[u8; 16], &[u8]> = TableDefinition::new("tasks");

fn decode<T: serde::de::DeserializeOwned + serde::Serialize>(bytes: &[u8]) -> Option<T> {
    murmur_protocol::codec::decode("task record", bytes, TASK_RECORD_BYTES_MAX)
        .map_err(|err| tracing::warn!(error = %err, "unreadable task record skipped"))
        .ok()
}

const ROUTES: TableDefinition<&[u8; 16], &[u8]> = TableDefinition::new("routes");
/// Tasks not yet finished: what a start-up recovers, without reading the finished ones.
const OPEN: TableDefinition<&[u8; 16], ()> = TableDefinition::new("open");
/// Finished tasks by when they finished (ms, big-endian, then the id): retention prunes
/// from the oldest; a start-up loads the newest.
const FINISHED: TableDefinition<&[u8; 24], ()> = TableDefinition::new("finished");
/// Routes by when they were made, the same way.
const ROUTE_TIMES: TableDefinition<&[u8; 24], ()> = TableDefinition::new("route_times");
/// `indexed` = 1 once `OPEN`, `FINISHED` and `ROUTE_TIMES` cover every record (a
/// database written before them is indexed once, at its first open).
const META: TableDefinition<&str, u64> = TableDefinition::new("meta");

/// A time-ordered index key: `ms` big-endian, then the task id.
fn timed(ms: u64, task: &TaskId) -> [u8; 24] {
    let mut key = [0u8; 24];
    key[..8].copy_from_slice(&ms.to_be_bytes());
    key[8..].copy_from_slice(&task.0);
    key
}

fn task_of(key: &[u8; 24]) -> [u8; 16] {
    let mut id = [0u8; 16];
    id.copy_from_slice(&key[8..]);
    id
}

fn ms_of(key: &[u8; 24]) -> u64 {
    let mut ms = [0u8; 8];
    ms.copy_from_slice(&key[..8]);
    u64::from_be_bytes(ms)
}

/// What one pruning pass removed.
#[derive(Clone, Copy, Debug, Default, PartialEq, Eq)]
pub struct Pruned {
    pub tasks: usize,
    pub routes: usize,
}

/// How long, and how many, finished tasks and routes are kept on disk.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub struct Retention {
    pub keep_ms: u64,
    pub keep_max: usize,
}

/// Index entries removed per transaction while pruning: a large backlog is pruned in
/// bounded steps, between which other writes go on.
const PRUNE_BATCH: usize = 10_000;

enum Write {
    Put(Box<TaskRecord>, Option<oneshot::Sender<Result<(), String>>>),
    Route(RouteRecord, oneshot::Sender<Result<(), String>>),
    /// Make everything committed so far durable, then answer.
    Flush(oneshot::Sender<Result<(), String>>),
}

/// The task database.
#[derive(Debug)]
pub struct TaskDb {
    db: std::sync::Arc<Database>,
    writes: std_mpsc::SyncSender<Write>,
    writer: Option<std::thread::JoinHandle<()>>,
    /// Writes that found the queue full and waited for room.
    pub(crate) waited: std::sync::atomic::AtomicU64,
}

impl Drop for TaskDb {
    /// Lets the writer finish what is queued and release the file (so it can be reopened).
    fn drop(&mut self) {
        let (closed, _) = std_mpsc::sync_channel(1);
        drop(std::mem::replace(&mut self.writes, closed));
        if let Some(writer) = self.writer.take() {
            let _ = writer.join();
        }
    }
}

impl TaskDb {
    /// Opens (creating) the database at `path` and starts its writer thread.
    pub fn open(path: &Path) -> anyhow::Result<Self> {
        Self::open_with_queue(path, TASK_DB_WRITE_QUEUE_MAX)
    }

    /// [`TaskDb::open`] with a write queue of `queue_max` entries.
    fn open_with_queue(path: &Path, queue_max: usize) -> anyhow::Result<Self> {
        if let Some(dir) = path.parent() {
            murmur_store::file::create_dir_all_durable(dir)?;
        }
        let created = !path.exists();
        let db = std::sync::Arc::new(
            redb::Builder::new()
                .set_cache_size(TASK_DB_CACHE_BYTES)
                .create(path)
                .with_context(|| format!("cannot open task database {}", path.display()))?,
        );
        if created {
            // redb syncs the file on each durable commit, never the directory that names it.
            murmur_store::file::sync_parent(path)?;
        }
        {
            let txn = db.begin_write()?;
            txn.open_table(TASKS)?;
            txn.open_table(ROUTES)?;
            txn.open_table(OPEN)?;
            txn.open_table(FINISHED)?;
            txn.open_table(ROUTE_TIMES)?;
            let indexed = txn.open_table(META)?.get("indexed")?.is_some_and(|v| v.value() == 1);
            if !indexed {
                index_everything(&txn)?;
            }
            txn.commit()?;
        }
        let (writes, queue) = std_mpsc::sync_channel(queue_max);
        let writer_db = db.clone();
        let writer = std::thread::Builder::new()
            .name("murmur-taskdb".into())
            .spawn(move || writer(&writer_db, &queue))?;
        Ok(Self { db, writes, writer: Some(writer), waited: std::sync::atomic::AtomicU64::new(0) })
    }

    /// Queues `write` and waits for its commit's answer.
    async fn durably(
        &self,
        write: Write,
        answer: oneshot::Receiver<Result<(), String>>,
    ) -> anyhow::Result<()> {
        let stopped = || anyhow::anyhow!("the task database writer stopped");
        match self.writes.try_send(write) {
            Ok(()) => {}
            Err(std_mpsc::TrySendError::Full(write)) => {
                // The queue is bounded; a full queue blocks a blocking-pool thread, not
                // the runtime.
                self.waited.fetch_add(1, std::sync::atomic::Ordering::Relaxed);
                let writes = self.writes.clone();
                tokio::task::spawn_blocking(move || writes.send(write)).await?.map_err(|_| stopped())?;
            }
            Err(std_mpsc::TrySendError::Disconnected(_)) => return Err(stopped()),
        }
        answer.await.map_err(|_| stopped())?.map_err(anyhow::Error::msg)
    }

    /// Stores `record` durably; returns once it is on disk.
    pub async fn put(&self, record: TaskRecord) -> anyhow::Result<()> {
        let (tx, rx) = oneshot::channel();
        self.durably(Write::Put(Box::new(record), Some(tx)), rx).await
    }

    /// Stores `record` with the next commit, without waiting for it (for intermediate
    /// states whose loss a crash turns into "failed: node restarted" anyway). A full queue
    /// makes the caller wait for room: the writer thread drains it whatever the runtime
    /// does, so the wait is short and cannot deadlock, and nothing is dropped.
    pub fn put_eventually(&self, record: TaskRecord) {
        let write = Write::Put(Box::new(record), None);
        match self.writes.try_send(write) {
            Ok(()) => {}
            Err(std_mpsc::TrySendError::Full(write)) => {
                self.waited.fetch_add(1, std::sync::atomic::Ordering::Relaxed);
                if self.writes.send(write).is_err() {
                    tracing::error!("the task database writer stopped: a task state was not stored");
                }
            }
            Err(std_mpsc::TrySendError::Disconnected(_)) => {
                tracing::error!("the task database writer stopped: a task state was not stored");
            }
        }
    }

    /// Makes every write so far durable (the node calls this when it stops: a reference
    /// cycle through the runtime keeps the database from being dropped).
    pub async fn flush(&self) -> anyhow::Result<()> {
        let (tx, rx) = oneshot::channel();
        let writes = self.writes.clone();
        tokio::task::spawn_blocking(move || writes.send(Write::Flush(tx)))
            .await?
            .map_err(|_| anyhow::anyhow!("the task database writer stopped"))?;
        rx.await.map_err(|_| anyhow::anyhow!("the task database writer stopped"))?.map_err(anyhow::Error::msg)
    }

    /// Stores where a task sent from here went; returns once it is on disk (a client told
    /// where its task is finds it after a crash of this node too).
    pub async fn put_route(&self, route: RouteRecord) -> anyhow::Result<()> {
        let (tx, rx) = oneshot::channel();
        self.durably(Write::Route(route, tx), rx).await
    }

    /// Where a task sent from here went.
    pub fn route(&self, task: &TaskId) -> anyhow::Result<Option<RouteRecord>> {
        let txn = self.db.begin_read()?;
        let table = txn.open_table(ROUTES)?;
        Ok(table.get(&task.0)?.and_then(|v| decode(v.value())))
    }

    /// Every stored route.
    pub fn routes(&self) -> anyhow::Result<Vec<RouteRecord>> {
        let txn = self.db.begin_read()?;
        let table = txn.open_table(ROUTES)?;
        let mut routes = Vec::new();
        for entry in table.iter()? {
            let (_, value) = entry?;
            if let Some(route) = decode(value.value()) {
                routes.push(route);
            }
        }
        Ok(routes)
    }

    /// The newest `max` stored routes, newest first.
    pub fn newest_routes(&self, max: usize) -> anyhow::Result<Vec<RouteRecord>> {
        let txn = self.db.begin_read()?;
        let (times, routes) = (txn.open_table(ROUTE_TIMES)?, txn.open_table(ROUTES)?);
        let mut newest = Vec::new();
        for entry in times.iter()?.rev() {
            if newest.len() >= max {
                break;
            }
            let (key, _) = entry?;
            if let Some(route) = routes.get(&task_of(key.value()))?.and_then(|v| decode(v.value())) {
                newest.push(route);
            }
        }
        Ok(newest)
    }

    /// What a start-up loads: every task not yet finished, and the newest `finished_max`
    /// finished ones (the rest stay on disk for `get`); and whether some stayed there.
    pub fn startup_records(&self, finished_max: usize) -> anyhow::Result<(Vec<TaskRecord>, bool)> {
        let txn = self.db.begin_read()?;
        let (tasks, open, finished) =
            (txn.open_table(TASKS)?, txn.open_table(OPEN)?, txn.open_table(FINISHED)?);
        let mut records = Vec::new();
        for entry in open.iter()? {
            let (key, _) = entry?;
            if let Some(record) = tasks.get(key.value())?.and_then(|v| decode(v.value())) {
                records.push(record);
            }
        }
        let mut loaded = 0;
        for entry in finished.iter()?.rev().take(finished_max) {
            let (key, _) = entry?;
            if let Some(record) = tasks.get(&task_of(key.value()))?.and_then(|v| decode(v.value())) {
                records.push(record);
                loaded += 1;
            }
        }
        let left = finished.len()? > loaded as u64;
        Ok((records, left))
    }

    /// Finished tasks from newest to oldest finish, starting below `below` (an index key a
    /// previous call returned; `None`: from the newest): up to `want` records that `keep`
    /// accepts, reading no more than `read_max` records. Entries `skip` names are passed
    /// over unread (the caller holds them elsewhere). Returns the records and, unless the
    /// index ran out, the key to continue below.
    pub fn finished_page(
        &self,
        below: Option<&[u8; 24]>,
        want: usize,
        read_max: usize,
        skip: impl Fn(&TaskId) -> bool,
        mut keep: impl FnMut(&TaskRecord) -> bool,
    ) -> anyhow::Result<(Vec<TaskRecord>, Option<[u8; 24]>)> {
        let txn = self.db.begin_read()?;
        let (tasks, finished) = (txn.open_table(TASKS)?, txn.open_table(FINISHED)?);
        let entries = match below {
            Some(key) => finished.range::<&[u8; 24]>(..key)?,
            None => finished.iter()?,
        };
        let (mut page, mut read, mut last) = (Vec::new(), 0, None);
        for entry in entries.rev() {
            if page.len() >= want || read >= read_max {
                return Ok((page, last));
            }
            let (key, _) = entry?;
            let key = *key.value();
            last = Some(key);
            let id = task_of(&key);
            if skip(&TaskId(id)) {
                continue;
            }
            read += 1;
            if let Some(record) = tasks.get(&id)?.and_then(|v| decode::<TaskRecord>(v.value()))
                && keep(&record)
            {
                page.push(record);
            }
        }
        Ok((page, None))
    }

    /// Finished tasks and routes on disk now.
    pub fn finished_and_routes(&self) -> anyhow::Result<(u64, u64)> {
        let txn = self.db.begin_read()?;
        Ok((txn.open_table(FINISHED)?.len()?, txn.open_table(ROUTE_TIMES)?.len()?))
    }

    /// Removes finished tasks and routes older than `retention.keep_ms` before `now_ms`,
    /// and the oldest beyond `retention.keep_max` of each, in bounded transactions.
    /// Unfinished tasks are never pruned.
    pub fn prune(&self, now_ms: u64, retention: Retention) -> anyhow::Result<Pruned> {
        let cutoff = now_ms.saturating_sub(retention.keep_ms);
        let mut pruned = Pruned::default();
        loop {
            let txn = self.db.begin_write()?;
            let (tasks_done, routes_done);
            {
                let mut tasks = txn.open_table(TASKS)?;
                let mut finished = txn.open_table(FINISHED)?;
                let (n, more) =
                    prune_index(&mut finished, cutoff, retention.keep_max, |id| tasks.remove(id).map(drop))?;
                pruned.tasks += n;
                tasks_done = !more;
                let mut routes = txn.open_table(ROUTES)?;
                let mut times = txn.open_table(ROUTE_TIMES)?;
                let (n, more) =
                    prune_index(&mut times, cutoff, retention.keep_max, |id| routes.remove(id).map(drop))?;
                pruned.routes += n;
                routes_done = !more;
            }
            txn.commit()?;
            if tasks_done && routes_done {
                return Ok(pruned);
            }
        }
    }

    /// Every stored record.
    pub fn all(&self) -> anyhow::Result<Vec<TaskRecord>> {
        let txn = self.db.begin_read()?;
        let table = txn.open_table(TASKS)?;
        let mut records = Vec::new();
        for entry in table.iter()? {
            let (_, value) = entry?;
            if let Some(record) = decode(value.value()) {
                records.push(record);
            }
        }
        Ok(records)
    }

    /// One record.
    pub fn get(&self, task: &TaskId) -> anyhow::Result<Option<TaskRecord>> {
        let txn = self.db.begin_read()?;
        let table = txn.open_table(TASKS)?;
        Ok(table.get(&task.0)?.and_then(|v| decode(v.value())))
    }
}

/// Removes from `index` (and, through `remove`, the record each entry names) the entries
/// older than `cutoff` and the oldest beyond `keep_max`, at most [`PRUNE_BATCH`]; how many,
/// and whether more are due.
fn prune_index(
    index: &mut redb::Table<&[u8; 24], ()>,
    cutoff: u64,
    keep_max: usize,
    mut remove: impl FnMut(&[u8; 16]) -> Result<(), redb::StorageError>,
) -> anyhow::Result<(usize, bool)> {
    let len = usize::try_from(index.len()?).unwrap_or(usize::MAX);
    let mut doomed = Vec::new();
    for entry in index.iter()? {
        let (key, _) = entry?;
        let key = *key.value();
        let over = len - doomed.len() > keep_max;
        if !(over || ms_of(&key) < cutoff) || doomed.len() >= PRUNE_BATCH {
            break;
        }
        doomed.push(key);
    }
    for key in &doomed {
        index.remove(key)?;
        remove(&task_of(key))?;
    }
    Ok((doomed.len(), doomed.len() >= PRUNE_BATCH))
}

/// Builds the indexes of a database written before them: one full read, once.
fn index_everything(txn: &redb::WriteTransaction) -> anyhow::Result<()> {
    let tasks = txn.open_table(TASKS)?;
    let mut open = txn.open_table(OPEN)?;
    let mut finished = txn.open_table(FINISHED)?;
    for entry in tasks.iter()? {
        let (_, value) = entry?;
        if let Some(record) = decode::<TaskRecord>(value.value()) {
            if record.state.is_terminal() {
                finished.insert(&timed(record.updated_ms, &record.task), ())?;
            } else {
                open.insert(&record.task.0, ())?;
            }
        }
    }
    let routes = txn.open_table(ROUTES)?;
    let mut times = txn.open_table(ROUTE_TIMES)?;
    for entry in routes.iter()? {
        let (_, value) = entry?;
        if let Some(route) = decode::<RouteRecord>(value.value()) {
            times.insert(&timed(route.created_ms, &route.task), ())?;
        }
    }
    txn.open_table(META)?.insert("indexed", 1)?;
    Ok(())
}

fn writer(db: &Database, queue: &std_mpsc::Receiver<Write>) {
    // Since when commits have been in memory only (none: everything is on disk).
    let mut undurable_since: Option<std::time::Instant> = None;
    loop {
        let first = match undurable_since {
            None => match queue.recv() {
                Ok(write) => write,
                Err(_) => return,
            },
            Some(since) => match queue.recv_timeout(TASK_DB_FLUSH_AFTER.saturating_sub(since.elapsed())) {
                Ok(write) => write,
                Err(timeout_or_closed) => {
                    // Idle (or closing) with writes in memory only: carry them to disk.
                    if let Err(err) = commit(db, &[], true) {
                        tracing::error!(error = %format!("{err:#}"), "task database flush failed");
                    }
                    undurable_since = None;
                    if timeout_or_closed == std_mpsc::RecvTimeoutError::Disconnected {
                        return;
                    }
                    continue;
                }
            },
        };
        let mut batch = vec![first];
        while batch.len() < TASK_DB_BATCH_MAX {
            match queue.try_recv() {
                Ok(more) => batch.push(more),
                Err(_) => break,
            }
        }
        let waited_for =
            batch.iter().any(|w| matches!(w, Write::Put(_, Some(_)) | Write::Route(..) | Write::Flush(_)));
        let overdue = undurable_since.is_some_and(|since| since.elapsed() >= TASK_DB_FLUSH_AFTER);
        let durable = waited_for || overdue;
        let result = commit(db, &batch, durable).map_err(|e| format!("{e:#}"));
        match &result {
            Err(err) => tracing::error!(error = %err, "task database commit failed"),
            Ok(()) if durable => undurable_since = None,
            Ok(()) => {
                undurable_since.get_or_insert_with(std::time::Instant::now);
            }
        }
        for write in batch {
            if let Write::Put(_, Some(reply)) | Write::Route(_, reply) | Write::Flush(reply) = write {
                let _ = reply.send(result.clone());
            }
        }
    }
}

/// Commits `batch` in one transaction: on disk when it returns if `durable`, else with the
/// next durable commit.
fn commit(db: &Database, batch: &[Write], durable: bool) -> anyhow::Result<()> {
    let mut txn = db.begin_write()?;
    txn.set_durability(if durable { redb::Durability::Immediate } else { redb::Durability::None })?;
    {
        let mut tasks = txn.open_table(TASKS)?;
        let mut routes = txn.open_table(ROUTES)?;
        let mut open = txn.open_table(OPEN)?;
        let mut finished = txn.open_table(FINISHED)?;
        let mut route_times = txn.open_table(ROUTE_TIMES)?;
        for write in batch {
            match write {
                Write::Put(record, _) => {
                    // Writes of one task may reach the queue out of order (they are queued
                    // after the record's lock is released): never let an older state
                    // replace a newer one.
                    let stored = tasks.get(&record.task.0)?.and_then(|v| decode::<TaskRecord>(v.value()));
                    let stored_seq = stored.as_ref().map(|r| r.seq);
                    if stored_seq.is_some_and(|seq| seq > record.seq) {
                        continue;
                    }
                    let was_finished = stored.as_ref().is_some_and(|r| r.state.is_terminal());
                    tasks
                        .insert(&record.task.0, murmur_protocol::codec::encode(record.as_ref()).as_slice())?;
                    if record.state.is_terminal() {
                        open.remove(&record.task.0)?;
                        if !was_finished {
                            finished.insert(&timed(record.updated_ms, &record.task), ())?;
                        }
                    } else {
                        open.insert(&record.task.0, ())?;
                    }
                }
                Write::Route(route, _) => {
                    routes.insert(&route.task.0, murmur_protocol::codec::encode(route).as_slice())?;
                    route_times.insert(&timed(route.created_ms, &route.task), ())?;
                }
                Write::Flush(_) => {}
            }
        }
    }
    txn.commit()?;
    Ok(())
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::tasks::record::Origin;

    #[tokio::test]
    async fn records_and_routes_survive_a_reopen() {
        let dir = tempfile::tempdir().unwrap();
        let path = dir.path().join("tasks.redb");
        let task = TaskId::derive("client@x", "m1");
        {
            let db = TaskDb::open(&path).unwrap();
            db.put(TaskRecord::new(task, "echo", "m1", None, "hi".into(), Origin::Client, 5)).await.unwrap();
            db.put_route(RouteRecord {
                task,
                owner: "peer".into(),
                capsule: "echo".into(),
                created_ms: 5,
                client: None,
            })
            .await
            .unwrap();
            db.put(TaskRecord::new(
                TaskId::derive("client@x", "m2"),
                "echo",
                "m2",
                None,
                "x".into(),
                Origin::Client,
                6,
            ))
            .await
            .unwrap();
            assert_eq!(db.routes().unwrap().len(), 1);
        }
        let db = TaskDb::open(&path).unwrap();
        assert_eq!(db.get(&task).unwrap().unwrap().input, "hi");
        assert_eq!(db.all().unwrap().len(), 2);
        assert_eq!(db.route(&task).unwrap().unwrap().owner, "peer");
    }

    #[tokio::test]
    async fn an_older_state_never_replaces_a_newer_one() {
        let dir = tempfile::tempdir().unwrap();
        let db = TaskDb::open(&dir.path().join("tasks.redb")).unwrap();
        let task = TaskId::derive("client@x", "m1");
        let mut record = TaskRecord::new(task, "echo", "m1", None, "hi".into(), Origin::Client, 5);
        let submitted = record.clone();
        record.transition(murmur_protocol::task::TaskState::Canceled, Some("canceled".into()), 6);
        db.put(record).await.unwrap();
        // The acceptance's write arrives late.
        db.put(submitted).await.unwrap();
        assert_eq!(db.get(&task).unwrap().unwrap().state, murmur_protocol::task::TaskState::Canceled);
    }

    #[tokio::test]
    async fn writes_nobody_waits_for_reach_the_disk_when_idle_and_at_close() {
        let dir = tempfile::tempdir().unwrap();
        let path = dir.path().join("tasks.redb");
        let task = TaskId::derive("client@x", "m1");
        let route = |n: &str| RouteRecord {
            task: TaskId::derive("client@x", n),
            owner: "peer".into(),
            capsule: "echo".into(),
            created_ms: 5,
            client: None,
        };
        {
            let db = TaskDb::open(&path).unwrap();
            db.put_eventually(TaskRecord::new(task, "echo", "m1", None, "hi".into(), Origin::Client, 5));
            db.put_route(route("r1")).await.unwrap();
            // Readable at once (committed in memory), on disk after TASK_DB_FLUSH_AFTER.
            tokio::time::sleep(TASK_DB_FLUSH_AFTER + std::time::Duration::from_millis(300)).await;
            assert_eq!(db.routes().unwrap().len(), 1);
            db.put_route(route("r2")).await.unwrap();
            db.flush().await.unwrap();
            db.put_route(route("r3")).await.unwrap();
            // Closing carries the last one to disk.
        }
        let db = TaskDb::open(&path).unwrap();
        assert_eq!(db.get(&task).unwrap().unwrap().input, "hi");
        assert_eq!(db.routes().unwrap().len(), 3);
    }

    fn finished(n: u64, at_ms: u64) -> TaskRecord {
        let task = TaskId::derive("client@x", &format!("f{n}"));
        let mut record = TaskRecord::new(task, "echo", "m", None, "x".into(), Origin::Client, at_ms);
        record.transition(murmur_protocol::task::TaskState::Completed, Some("done".into()), at_ms);
        record
    }

    fn open_task(n: u64) -> TaskRecord {
        TaskRecord::new(
            TaskId::derive("client@x", &format!("o{n}")),
            "echo",
            "m",
            None,
            "x".into(),
            Origin::Client,
            1,
        )
    }

    fn route_at(n: u64, at_ms: u64) -> RouteRecord {
        RouteRecord {
            task: TaskId::derive("client@x", &format!("r{n}")),
            owner: "peer".into(),
            capsule: "echo".into(),
            created_ms: at_ms,
            client: None,
        }
    }

    #[tokio::test]
    async fn retention_prunes_by_age_then_by_count_and_never_an_unfinished_task() {
        let dir = tempfile::tempdir().unwrap();
        let db = TaskDb::open(&dir.path().join("tasks.redb")).unwrap();
        for n in 1..=10 {
            db.put(finished(n, n * 1000)).await.unwrap();
            db.put_route(route_at(n, n * 1000)).await.unwrap();
        }
        for n in 1..=3 {
            db.put(open_task(n)).await.unwrap();
        }
        // Older than 5 s at 10 s: the first four of each go.
        let pruned = db.prune(10_000, Retention { keep_ms: 5_500, keep_max: 1000 }).unwrap();
        assert_eq!(pruned, Pruned { tasks: 4, routes: 4 });
        assert!(db.get(&finished(4, 0).task).unwrap().is_none());
        assert!(db.get(&finished(5, 0).task).unwrap().is_some());
        // Then at most three of each: the oldest go first.
        let pruned = db.prune(10_000, Retention { keep_ms: 60_000, keep_max: 3 }).unwrap();
        assert_eq!(pruned, Pruned { tasks: 3, routes: 3 });
        assert_eq!(db.finished_and_routes().unwrap(), (3, 3));
        assert!(db.get(&finished(8, 0).task).unwrap().is_some());
        assert!(db.route(&route_at(7, 0).task).unwrap().is_none());
        // Unfinished tasks stay, however old.
        let pruned = db.prune(u64::MAX, Retention { keep_ms: 0, keep_max: 1000 }).unwrap();
        assert_eq!(pruned, Pruned { tasks: 3, routes: 3 });
        let (records, left) = db.startup_records(100).unwrap();
        assert_eq!((records.len(), left), (3, false));
        assert!(records.iter().all(|r| !r.state.is_terminal()));
    }

    #[tokio::test]
    async fn a_start_up_reads_the_unfinished_tasks_and_only_the_newest_finished() {
        let dir = tempfile::tempdir().unwrap();
        let db = TaskDb::open(&dir.path().join("tasks.redb")).unwrap();
        for n in 1..=20 {
            db.put(finished(n, n)).await.unwrap();
        }
        for n in 1..=5 {
            db.put(open_task(n)).await.unwrap();
        }
        let (records, left) = db.startup_records(4).unwrap();
        assert!(left, "sixteen finished tasks stayed on disk");
        assert_eq!(records.iter().filter(|r| !r.state.is_terminal()).count(), 5);
        let mut newest: Vec<u64> =
            records.iter().filter(|r| r.state.is_terminal()).map(|r| r.updated_ms).collect();
        newest.sort_unstable();
        assert_eq!(newest, [17, 18, 19, 20]);
    }

    #[tokio::test]
    async fn a_database_written_before_the_indexes_is_indexed_at_its_first_open() {
        let dir = tempfile::tempdir().unwrap();
        let path = dir.path().join("tasks.redb");
        {
            let db = TaskDb::open(&path).unwrap();
            db.put(finished(1, 5)).await.unwrap();
            db.put(open_task(1)).await.unwrap();
            db.put_route(route_at(1, 5)).await.unwrap();
            // What an older murnode left: the records, no indexes.
            let txn = db.db.begin_write().unwrap();
            assert!(txn.delete_table(OPEN).unwrap());
            assert!(txn.delete_table(FINISHED).unwrap());
            assert!(txn.delete_table(ROUTE_TIMES).unwrap());
            assert!(txn.delete_table(META).unwrap());
            txn.commit().unwrap();
        }
        let db = TaskDb::open(&path).unwrap();
        let (records, left) = db.startup_records(10).unwrap();
        assert_eq!((records.len(), left), (2, false));
        assert_eq!(db.newest_routes(10).unwrap().len(), 1);
        assert_eq!(db.finished_and_routes().unwrap(), (1, 1));
    }

    #[tokio::test]
    async fn a_full_queue_makes_writers_wait_and_drops_nothing() {
        let dir = tempfile::tempdir().unwrap();
        let path = dir.path().join("tasks.redb");
        let n = 3000;
        {
            // A queue of 4: thousands of writes in a burst must find it full.
            let db = TaskDb::open_with_queue(&path, 4).unwrap();
            for i in 0..n {
                let task = TaskId::derive("client@x", &format!("m{i}"));
                db.put_eventually(TaskRecord::new(task, "echo", "m", None, "x".into(), Origin::Client, 5));
            }
            assert!(db.waited.load(std::sync::atomic::Ordering::Relaxed) > 0, "the queue never filled");
        }
        let db = TaskDb::open(&path).unwrap();
        assert_eq!(db.all().unwrap().len(), n, "a write queued while the queue was full was lost");
    }
}
