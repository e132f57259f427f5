//! Costs of the protocol's hot operations: signing and verifying documents, the advert
//! codec, and merging a large directory.
//!
//! Run: `cargo bench -p murmur-protocol --bench protocol`.

use std::hint::black_box;

use criterion::{BatchSize, Criterion, criterion_group, criterion_main};
use murmur_protocol::directory::{Input, Source};
use murmur_protocol::*;

const T0: Millis = Millis(1_800_000_000_000);

fn advert_with(capsules: usize, seq: u64) -> Advert {
    let mut advert = Advert::new(seq, T0, 90_000);
    advert.addrs = vec!["/ip4/10.0.0.1/tcp/7421".into(), "/ip4/10.0.0.1/udp/7421/quic-v1".into()];
    advert.capsules = (0..capsules)
        .map(|i| HostedCapsule {
            name: format!("capsule-{i:03}"),
            digest: Some(Digest::of(&i.to_le_bytes())),
            version: "1.0.0".into(),
        })
        .collect();
    advert
}

fn grant() -> Grant {
    let mut grant = Grant::new("pipeline", 1, T0, T0.plus(86_400_000));
    grant.network =
        ["mesh://echo", "mesh://wordcount", "localhost:*"].iter().map(|p| p.parse().unwrap()).collect();
    grant.tools = vec!["wordcount".into()];
    grant
}

fn signing(c: &mut Criterion) {
    let key = SecretKey::from_seed([1; 32]);
    let authorities = [key.public()];
    let mut group = c.benchmark_group("sign_verify");
    group.bench_function("grant/sign", |b| b.iter(|| Signed::sign(black_box(grant()), &key).unwrap()));
    let grant_env = Signed::sign(grant(), &key).unwrap().into_envelope();
    group.bench_function("grant/verify", |b| {
        b.iter(|| {
            verify_grant(black_box(grant_env.clone()), &authorities, T0, GrantExpectation::default()).unwrap()
        })
    });
    group.bench_function("advert/sign", |b| {
        b.iter(|| Signed::sign(black_box(advert_with(3, 1)), &key).unwrap())
    });
    let advert_env = Signed::sign(advert_with(3, 1), &key).unwrap().into_envelope();
    group.bench_function("advert/verify", |b| {
        b.iter(|| black_box(advert_env.clone()).open::<Advert>().unwrap())
    });
    group.finish();
}

fn codec(c: &mut Criterion) {
    let key = SecretKey::from_seed([1; 32]);
    let advert = advert_with(100, 1);
    let body = murmur_protocol::codec::encode(&advert);
    let envelope = Signed::sign(advert.clone(), &key).unwrap().envelope().encode();
    println!("advert with 100 capsules: body {} bytes, envelope {} bytes", body.len(), envelope.len());
    let mut group = c.benchmark_group("codec_advert_100_capsules");
    group.bench_function("encode", |b| b.iter(|| murmur_protocol::codec::encode(black_box(&advert))));
    group.bench_function("decode", |b| {
        b.iter(|| Envelope::decode(black_box(&envelope)).unwrap().peek::<Advert>().unwrap())
    });
    group.finish();
}

fn directory_merge(c: &mut Criterion) {
    const NODES: usize = 10_000;
    let adverts: Vec<Envelope> = (0..NODES)
        .map(|i| {
            let mut seed = [0u8; 32];
            seed[..8].copy_from_slice(&(i as u64).to_le_bytes());
            let mut advert = advert_with(3, 1);
            advert.capsules[0].name = format!("unique-{i}");
            Signed::sign(advert, &SecretKey::from_seed(seed)).unwrap().into_envelope()
        })
        .collect();
    let mut group = c.benchmark_group("directory");
    group.sample_size(10);
    group.bench_function("merge_10000_adverts", |b| {
        b.iter_batched(
            || adverts.clone(),
            |adverts| {
                let mut dir = Directory::new(DirectoryConfig::default());
                for envelope in adverts {
                    dir.handle(T0, Input::Advert { envelope, source: Source::Local });
                    while dir.poll_output().is_some() {}
                }
                assert_eq!(dir.len(), NODES);
                dir
            },
            BatchSize::LargeInput,
        )
    });
    let mut full = Directory::new(DirectoryConfig::default());
    for envelope in &adverts {
        full.insert(T0, envelope.clone(), Source::Local).unwrap();
    }
    let empty = Directory::new(DirectoryConfig::default()).digest();
    group.bench_function("digest_10000", |b| b.iter(|| black_box(&full).digest()));
    group.bench_function("missing_for_empty_peer_10000", |b| {
        b.iter(|| black_box(&full).missing_for(black_box(&empty), usize::MAX, usize::MAX))
    });
    // A sync request carrying the whole 10,000-node digest, decoded as a responder does;
    // beside it the baseline of before, which also checked every entry's key (a point
    // decompression each).
    let request = sync::SyncRequest::new(None, full.digest()).encode();
    group.bench_function("sync_request_decode_10000", |b| {
        b.iter(|| sync::SyncRequest::decode(black_box(&request)).unwrap())
    });
    group.bench_function("sync_request_decode_10000_keys_checked", |b| {
        b.iter(|| {
            let decoded = sync::SyncRequest::decode(black_box(&request)).unwrap();
            for entry in decoded.digest.entries() {
                PublicKey::from_bytes(*entry.0.key().as_bytes()).unwrap();
            }
            decoded
        })
    });
    group.finish();
}

criterion_group!(benches, signing, codec, directory_merge);
criterion_main!(benches);
