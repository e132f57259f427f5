//! Simulator throughput: events per second on one core with the real protocol code, with
//! the shared signature cache and, side by side, the naive baseline that runs ed25519 in
//! every node for every advert.
//!
//! Run: `cargo bench -p murmur-sim --bench sim`. Throughput is reported in events/s.

use criterion::{Criterion, Throughput, criterion_group, criterion_main};
use murmur_sim::{Options, Scenario, Sim};

fn scenario(nodes: usize) -> Scenario {
    let mut scenario = Scenario { nodes, duration_s: 60, ..Scenario::default() };
    scenario.check.liveness_bound_s = 30;
    scenario
}

fn events(nodes: usize) -> u64 {
    Sim::new(scenario(nodes), Options { seed: 1, ..Options::default() }).run().metrics.events
}

fn throughput(c: &mut Criterion) {
    let mut group = c.benchmark_group("sim_steady_60s");
    group.sample_size(10);
    for nodes in [100, 500] {
        group.throughput(Throughput::Elements(events(nodes)));
        group.bench_function(format!("{nodes}_nodes/cached"), |b| {
            b.iter(|| Sim::new(scenario(nodes), Options { seed: 1, ..Options::default() }).run())
        });
        group.bench_function(format!("{nodes}_nodes/naive_ed25519"), |b| {
            b.iter(|| {
                Sim::new(scenario(nodes), Options { seed: 1, uncached: true, ..Options::default() }).run()
            })
        });
    }
    group.finish();
}

criterion_group!(benches, throughput);
criterion_main!(benches);
