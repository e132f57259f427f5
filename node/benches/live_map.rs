//! The owner's map of live tasks (`TaskManager`), shared by every request handler and
//! worker: today's `Mutex<BTreeMap>` next to `DashMap` (sharded locks), under the load the
//! node puts on it — many lookups (every `get`, `events`, `reply`, stream poll) and a few
//! inserts and removals (acceptances, forgotten tasks) from several threads at once.
//!
//! ```text
//! cargo bench -p murmur-node --bench live_map
//! ```

use std::collections::BTreeMap;
use std::hint::black_box;
use std::sync::{Arc, Mutex};
use std::thread;

use criterion::{Criterion, criterion_group, criterion_main};
use dashmap::DashMap;
use murmur_protocol::task::TaskId;

/// Tasks held, as a busy owner holds them.
const HELD: usize = 10_000;
/// Operations per thread per iteration.
const OPS: usize = 5_000;

trait LiveMap: Send + Sync {
    fn get(&self, task: &TaskId) -> Option<Arc<u64>>;
    fn insert(&self, task: TaskId, value: Arc<u64>);
    fn remove(&self, task: &TaskId);
}

impl LiveMap for Mutex<BTreeMap<TaskId, Arc<u64>>> {
    fn get(&self, task: &TaskId) -> Option<Arc<u64>> {
        self.lock().unwrap().get(task).cloned()
    }
    fn insert(&self, task: TaskId, value: Arc<u64>) {
        self.lock().unwrap().insert(task, value);
    }
    fn remove(&self, task: &TaskId) {
        self.lock().unwrap().remove(task);
    }
}

impl LiveMap for DashMap<TaskId, Arc<u64>> {
    fn get(&self, task: &TaskId) -> Option<Arc<u64>> {
        DashMap::get(self, task).map(|e| e.value().clone())
    }
    fn insert(&self, task: TaskId, value: Arc<u64>) {
        DashMap::insert(self, task, value);
    }
    fn remove(&self, task: &TaskId) {
        DashMap::remove(self, task);
    }
}

fn ids(n: usize, salt: &str) -> Vec<TaskId> {
    (0..n).map(|i| TaskId::derive(salt, &i.to_string())).collect()
}

/// `threads` threads, each doing `OPS` operations: one in twenty an insert and a removal,
/// the rest lookups of held tasks.
fn load(map: &Arc<dyn LiveMap>, held: &Arc<Vec<TaskId>>, threads: usize) {
    let handles: Vec<_> = (0..threads)
        .map(|t| {
            let (map, held) = (map.clone(), held.clone());
            thread::spawn(move || {
                let fresh = ids(OPS / 20 + 1, &format!("fresh-{t}"));
                for op in 0..OPS {
                    if op % 20 == 0 {
                        let id = fresh[op / 20];
                        map.insert(id, Arc::new(op as u64));
                        map.remove(&id);
                    } else {
                        black_box(map.get(&held[(op * 7919 + t) % held.len()]));
                    }
                }
            })
        })
        .collect();
    for handle in handles {
        handle.join().unwrap();
    }
}

fn bench(c: &mut Criterion) {
    let held = Arc::new(ids(HELD, "held"));
    let btree: Arc<dyn LiveMap> = {
        let map = Mutex::new(BTreeMap::new());
        for id in held.iter() {
            LiveMap::insert(&map, *id, Arc::new(0));
        }
        Arc::new(map)
    };
    let dash: Arc<dyn LiveMap> = {
        let map = DashMap::new();
        for id in held.iter() {
            LiveMap::insert(&map, *id, Arc::new(0));
        }
        Arc::new(map)
    };
    let mut group = c.benchmark_group("live_map");
    for threads in [1, 4, 16] {
        group.bench_function(format!("mutex_btreemap/{threads}_threads"), |b| {
            b.iter(|| load(&btree, &held, threads))
        });
        group
            .bench_function(format!("dashmap/{threads}_threads"), |b| b.iter(|| load(&dash, &held, threads)));
    }
    group.finish();
}

criterion_group!(benches, bench);
criterion_main!(benches);
