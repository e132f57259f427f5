//! Air-gapped bundles: export, verify and import, and every tampering an importer must
//! refuse without writing anything.

use std::io::Read;
use std::path::{Path, PathBuf};

use murmur_protocol::{Millis, PublicKey, SecretKey};
use murmur_store::bundle::{self, CATALOG_ENTRY};
use murmur_store::{ArtifactMeta, ArtifactStore, CapsuleKind, Platform, Stored};

const NOW: Millis = Millis(1_800_000_000_000);

fn meta(name: &str, version: &str) -> ArtifactMeta {
    ArtifactMeta {
        name: name.into(),
        version: version.into(),
        kind: CapsuleKind::Tool,
        runtime: Platform::Wasm,
        description: String::new(),
        tags: vec![],
        input_schema: None,
        output_schema: None,
    }
}

fn publisher() -> SecretKey {
    SecretKey::from_seed([9; 32])
}

fn trusted() -> Vec<PublicKey> {
    vec![publisher().public()]
}

/// A store with two artifacts, exported to `dir/bundle.tar`.
fn exported(dir: &Path) -> (PathBuf, Vec<Stored>) {
    let store = ArtifactStore::open(&dir.join("source")).unwrap();
    let a = store.add(&meta("echo", "1.0.0"), &vec![7u8; 300_000], None).unwrap();
    let b = store.add(&meta("wordcount", "2.1.0"), b"component bytes", None).unwrap();
    let out = dir.join("bundle.tar");
    let report =
        bundle::export(&store, &[a.clone(), b.clone()], &publisher(), NOW, &out, &mut |_, _| {}).unwrap();
    assert_eq!(report.artifacts, vec!["echo@1.0.0", "wordcount@2.1.0"]);
    assert_eq!(report.blobs, 6);
    (out, vec![a, b])
}

/// Everything under a store's root, to show nothing changed.
fn snapshot(root: &Path) -> Vec<(String, Vec<u8>)> {
    let mut files = Vec::new();
    let mut stack = vec![root.to_path_buf()];
    while let Some(dir) = stack.pop() {
        for entry in std::fs::read_dir(&dir).unwrap() {
            let path = entry.unwrap().path();
            if path.is_dir() {
                stack.push(path);
            } else if path.file_name().is_some_and(|n| n != ".lock") {
                files.push((
                    path.strip_prefix(root).unwrap().display().to_string(),
                    std::fs::read(&path).unwrap(),
                ));
            }
        }
    }
    files.sort();
    files
}

/// The bundle's entries: (name, bytes).
fn entries(path: &Path) -> Vec<(String, Vec<u8>)> {
    let mut archive = tar::Archive::new(std::fs::File::open(path).unwrap());
    archive
        .entries()
        .unwrap()
        .map(|e| {
            let mut e = e.unwrap();
            let name = e.path().unwrap().display().to_string();
            let mut bytes = Vec::new();
            e.read_to_end(&mut bytes).unwrap();
            (name, bytes)
        })
        .collect()
}

/// One entry to forge: name, bytes, type, and a header size overriding the real one.
type Forged<'a> = (&'a str, &'a [u8], tar::EntryType, Option<u64>);

/// A tar of `entries`, written with raw headers so that names the tar crate would refuse
/// (`..`, absolute) and links can be made. `size` overrides the header's size.
fn forge(path: &Path, entries: &[Forged<'_>]) {
    let mut out = tar::Builder::new(std::fs::File::create(path).unwrap());
    for (name, bytes, kind, size) in entries {
        let mut header = tar::Header::new_old();
        let raw = &mut header.as_old_mut().name;
        raw[..name.len()].copy_from_slice(name.as_bytes());
        header.set_size(size.unwrap_or(bytes.len() as u64));
        header.set_mode(0o644);
        header.set_entry_type(*kind);
        if *kind == tar::EntryType::Symlink || *kind == tar::EntryType::Link {
            header.set_link_name("/etc/passwd").unwrap();
        }
        header.set_cksum();
        out.append(&header, *bytes).unwrap();
    }
    out.finish().unwrap();
}

fn import_refused(bundle: &Path, fresh: &Path, expect: &str) {
    let store = ArtifactStore::open(fresh).unwrap();
    let before = snapshot(fresh);
    let err = bundle::import(&store, bundle, &trusted(), &mut |_, _| {}).unwrap_err();
    let text = format!("{err:#}");
    assert!(text.contains(expect), "expected `{expect}` in: {text}");
    assert_eq!(snapshot(fresh), before, "a refused bundle changes nothing in the store");
    assert!(bundle::verify(bundle, &trusted(), &mut |_, _| {}).is_err(), "verify refuses it too");
}

#[test]
fn a_bundle_round_trips_into_another_store_and_importing_again_changes_nothing() {
    let dir = tempfile::tempdir().unwrap();
    let (bundle_path, originals) = exported(dir.path());
    // The layout inside: catalog first, then an OCI layout.
    let names: Vec<String> = entries(&bundle_path).into_iter().map(|(n, _)| n).collect();
    assert_eq!(names[..3], [CATALOG_ENTRY, "oci-layout", "index.json"]);
    assert!(names[3..].iter().all(|n| n.starts_with("blobs/sha256/") && n.len() == 13 + 64));

    let checked = bundle::verify(&bundle_path, &trusted(), &mut |_, _| {}).unwrap();
    assert_eq!(checked.publisher, publisher().public().to_string());

    let target = ArtifactStore::open(&dir.path().join("target")).unwrap();
    let mut last = (0, 0);
    let report =
        bundle::import(&target, &bundle_path, &trusted(), &mut |done, total| last = (done, total)).unwrap();
    assert_eq!((report.blobs, report.blobs_written), (6, 6));
    assert_eq!(last.0, last.1, "progress reaches the total");
    for original in &originals {
        let imported = target.find(&original.meta.name, Some(&original.meta.version)).unwrap().unwrap();
        assert_eq!(&imported, original);
        assert_eq!(
            target.content(&imported).unwrap(),
            ArtifactStore::open(&dir.path().join("source")).unwrap().content(original).unwrap()
        );
        // The catalog is kept as the artifact's publisher signature, for peers that pull it.
        let signature = target.signature(&imported.manifest).expect("the catalog is kept");
        assert_eq!(signature.signer(), publisher().public());
    }
    let before = snapshot(&dir.path().join("target"));
    let again = bundle::import(&target, &bundle_path, &trusted(), &mut |_, _| {}).unwrap();
    assert_eq!(again.blobs_written, 0, "idempotent");
    assert_eq!(snapshot(&dir.path().join("target")), before);
}

#[test]
fn an_untrusted_or_tampered_catalog_is_refused_before_anything_else_is_read() {
    let dir = tempfile::tempdir().unwrap();
    let (bundle_path, _) = exported(dir.path());
    let store = ArtifactStore::open(&dir.path().join("fresh")).unwrap();
    let stranger = vec![SecretKey::from_seed([3; 32]).public()];
    let err = bundle::import(&store, &bundle_path, &stranger, &mut |_, _| {}).unwrap_err();
    assert!(format!("{err:#}").contains("untrusted_issuer"), "{err:#}");
    let err = bundle::import(&store, &bundle_path, &[], &mut |_, _| {}).unwrap_err();
    assert!(format!("{err:#}").contains("trust.publishers"), "{err:#}");
    assert!(store.list().unwrap().is_empty());

    // One byte flipped in the catalog's signed body.
    let mut all = entries(&bundle_path);
    let len = all[0].1.len();
    all[0].1[len - 80] ^= 0x01;
    let forged = dir.path().join("catalog-flipped.tar");
    let owned: Vec<Forged<'_>> =
        all.iter().map(|(n, b)| (n.as_str(), b.as_slice(), tar::EntryType::Regular, None)).collect();
    forge(&forged, &owned);
    import_refused(&forged, &dir.path().join("fresh2"), "catalog refused");
}

#[test]
fn tampered_entries_are_refused_and_nothing_is_written() {
    let dir = tempfile::tempdir().unwrap();
    let (bundle_path, _) = exported(dir.path());
    let all = entries(&bundle_path);
    let regular = tar::EntryType::Regular;
    let base: Vec<Forged<'_>> = all.iter().map(|(n, b)| (n.as_str(), b.as_slice(), regular, None)).collect();
    let big = all.iter().position(|(_, b)| b.len() == 300_000).unwrap();
    let cases: Vec<(&str, Vec<Forged<'_>>, &str)> = vec![
        // One byte flipped in the largest blob (the last one read: earlier blobs verified).
        (
            "blob-flipped",
            {
                let mut v = base.clone();
                let mut flipped = all[big].1.clone();
                flipped[150_000] ^= 0x01;
                v[big].1 = Box::leak(flipped.into_boxed_slice());
                v.swap(big, all.len() - 1);
                v
            },
            "hash to",
        ),
        (
            "traversal",
            {
                let mut v = base.clone();
                v.push(("../escaped", b"x", regular, None));
                v
            },
            "paths must be relative",
        ),
        (
            "absolute",
            {
                let mut v = base.clone();
                v.insert(3, ("/tmp/murmur-absolute", b"x", regular, None));
                v
            },
            "paths must be relative",
        ),
        (
            "symlink",
            {
                let mut v = base.clone();
                v.insert(3, ("blobs/sha256/link", b"", tar::EntryType::Symlink, None));
                v
            },
            "not a regular file",
        ),
        (
            "hardlink",
            {
                let mut v = base.clone();
                v.insert(3, ("index2.json", b"", tar::EntryType::Link, None));
                v
            },
            "not a regular file",
        ),
        (
            "duplicate",
            {
                let mut v = base.clone();
                v.push(v[3]);
                v
            },
            "appears twice",
        ),
        (
            "size-lie",
            {
                let mut v = base.clone();
                // The header claims fewer bytes than the catalog declares.
                let short: &[u8] = &all[big].1[..1000];
                v[big] = (v[big].0, short, regular, Some(1000));
                v
            },
            "the catalog says",
        ),
        (
            "unlisted",
            {
                let mut v = base.clone();
                v.push((
                    "blobs/sha256/0000000000000000000000000000000000000000000000000000000000000000",
                    b"x",
                    regular,
                    None,
                ));
                v
            },
            "not in the catalog",
        ),
        (
            "missing-blob",
            {
                let mut v = base.clone();
                v.remove(big);
                v
            },
            "not in the bundle",
        ),
        (
            "catalog-not-first",
            {
                let mut v = base.clone();
                v.swap(0, 1);
                v
            },
            "not the catalog",
        ),
    ];
    for (name, tar_entries, expect) in cases {
        let path = dir.path().join(format!("{name}.tar"));
        forge(&path, &tar_entries);
        import_refused(&path, &dir.path().join(format!("store-{name}")), expect);
    }
    assert!(!dir.path().join("escaped").exists() && !Path::new("/tmp/murmur-absolute").exists());
}

#[test]
fn bytes_after_the_end_of_the_archive_are_refused_and_record_padding_is_not() {
    let dir = tempfile::tempdir().unwrap();
    let (bundle_path, _) = exported(dir.path());
    let exported_bytes = std::fs::read(&bundle_path).unwrap();
    let variant = |name: &str, bytes: &[u8]| {
        let path = dir.path().join(name);
        std::fs::write(&path, bytes).unwrap();
        path
    };
    // Data appended after the end-of-archive marker: not covered by the signature.
    let mut appended = exported_bytes.clone();
    appended.extend_from_slice(b"#!/bin/sh\nsmuggled payload\n");
    let path = variant("appended.tar", &appended);
    import_refused(&path, &dir.path().join("store-appended"), "past its last entry");
    // A second archive after the first (what `cat a.tar b.tar` makes).
    let mut doubled = exported_bytes.clone();
    doubled.extend_from_slice(&exported_bytes);
    let path = variant("doubled.tar", &doubled);
    import_refused(&path, &dir.path().join("store-doubled"), "past its last entry");
    // A marker cut short: only one of its two zero blocks.
    let path = variant("truncated.tar", &exported_bytes[..exported_bytes.len() - 512]);
    import_refused(&path, &dir.path().join("store-truncated"), "truncated");
    // Zero padding up to a 10 KiB record (tar's and dd's blocking) is the same bundle.
    let mut padded = exported_bytes.clone();
    padded.resize(padded.len().div_ceil(10_240) * 10_240, 0);
    let path = variant("padded.tar", &padded);
    let store = ArtifactStore::open(&dir.path().join("store-padded")).unwrap();
    let report = bundle::import(&store, &path, &trusted(), &mut |_, _| {}).unwrap();
    assert_eq!(report.artifacts, vec!["echo@1.0.0", "wordcount@2.1.0"]);
}

#[test]
fn an_import_interrupted_midway_converges_when_run_again() {
    let dir = tempfile::tempdir().unwrap();
    let (bundle_path, originals) = exported(dir.path());
    let root = dir.path().join("target");
    let store = ArtifactStore::open(&root).unwrap();
    // What a killed import leaves: a staging directory with a partial blob in it.
    std::fs::create_dir_all(root.join(".import")).unwrap();
    std::fs::write(root.join(".import").join("partial"), b"half a blob").unwrap();
    let report = bundle::import(&store, &bundle_path, &trusted(), &mut |_, _| {}).unwrap();
    assert_eq!(report.blobs_written, 6);
    assert!(!root.join(".import").exists(), "staging is cleared");
    assert_eq!(store.list().unwrap().len(), originals.len());
}

/// The OCI image-layout specification's rules, checked on an extracted bundle: no OCI
/// tool installs here from the package registries, so the test applies the rules itself.
#[test]
fn an_extracted_bundle_is_a_valid_oci_image_layout() {
    use murmur_protocol::Digest;
    let dir = tempfile::tempdir().unwrap();
    let (bundle_path, _) = exported(dir.path());
    let files: std::collections::BTreeMap<String, Vec<u8>> = entries(&bundle_path).into_iter().collect();
    let json = |name: &str| -> serde_json::Value { serde_json::from_slice(&files[name]).unwrap() };

    // `oci-layout`: the layout version.
    assert_eq!(json("oci-layout")["imageLayoutVersion"], "1.0.0");
    // Every blob is named by the SHA-256 of its bytes (`blobs/<alg>/<encoded>`).
    let blobs: Vec<(&String, &Vec<u8>)> = files.iter().filter(|(n, _)| n.starts_with("blobs/")).collect();
    for (name, bytes) in &blobs {
        assert_eq!(**name, format!("blobs/sha256/{}", Digest::of(bytes).hex()), "content-addressed");
    }
    let blob = |descriptor: &serde_json::Value| -> Vec<u8> {
        let digest = descriptor["digest"].as_str().unwrap();
        let hex = digest.strip_prefix("sha256:").expect("sha256 digests");
        assert!(hex.len() == 64 && hex.bytes().all(|b| b.is_ascii_hexdigit() && !b.is_ascii_uppercase()));
        let bytes =
            files.get(&format!("blobs/sha256/{hex}")).unwrap_or_else(|| panic!("{digest} is in the layout"));
        assert_eq!(descriptor["size"].as_u64(), Some(bytes.len() as u64), "descriptor size");
        assert!(descriptor["mediaType"].is_string());
        bytes.clone()
    };
    // `index.json`: an image index whose descriptors resolve; each manifest's config and
    // layers resolve too.
    let index = json("index.json");
    assert_eq!(index["schemaVersion"], 2);
    assert_eq!(index["mediaType"], "application/vnd.oci.image.index.v1+json");
    let manifests = index["manifests"].as_array().unwrap();
    assert_eq!(manifests.len(), 2);
    let mut referenced = std::collections::BTreeSet::new();
    for descriptor in manifests {
        assert_eq!(descriptor["mediaType"], "application/vnd.oci.image.manifest.v1+json");
        assert!(
            descriptor["annotations"]["org.opencontainers.image.ref.name"].as_str().unwrap().contains(':')
        );
        let manifest: serde_json::Value = serde_json::from_slice(&blob(descriptor)).unwrap();
        assert_eq!(manifest["schemaVersion"], 2);
        referenced.insert(descriptor["digest"].as_str().unwrap().to_owned());
        for part in std::iter::once(&manifest["config"]).chain(manifest["layers"].as_array().unwrap()) {
            blob(part);
            referenced.insert(part["digest"].as_str().unwrap().to_owned());
        }
    }
    assert_eq!(referenced.len(), blobs.len(), "every blob is referenced, none is missing");
}

/// A PAX `size` record overrides the ustar header's size: the importer bounds by the real
/// length, so a large entry disguised behind a small header is refused before it is read.
#[test]
fn a_pax_size_record_cannot_smuggle_a_large_entry() {
    let dir = tempfile::tempdir().unwrap();
    let (bundle_path, _) = exported(dir.path());
    let all = entries(&bundle_path);
    let path = dir.path().join("pax.tar");
    let mut out = tar::Builder::new(std::fs::File::create(&path).unwrap());
    for (name, bytes) in &all {
        if name == "index.json" {
            let big = vec![b' '; 2 * 1024 * 1024];
            out.append_pax_extensions([("size", big.len().to_string().as_bytes())]).unwrap();
            let mut header = tar::Header::new_ustar();
            header.set_path(name).unwrap();
            header.set_size(2);
            header.set_mode(0o644);
            header.set_cksum();
            out.append(&header, big.as_slice()).unwrap();
        } else {
            let mut header = tar::Header::new_ustar();
            header.set_path(name).unwrap();
            header.set_size(bytes.len() as u64);
            header.set_mode(0o644);
            header.set_cksum();
            out.append(&header, bytes.as_slice()).unwrap();
        }
    }
    out.finish().unwrap();
    drop(out);
    import_refused(&path, &dir.path().join("store"), "more than 1048576");
}

/// A trusted publisher cannot silently re-point a name@version this store already has, and
/// a damaged local copy of a blob is replaced by the bundle's verified one.
#[test]
fn an_import_never_replaces_an_existing_version_and_repairs_damaged_blobs() {
    let dir = tempfile::tempdir().unwrap();
    let (bundle_path, originals) = exported(dir.path());
    let root = dir.path().join("target");
    let store = ArtifactStore::open(&root).unwrap();
    store.add(&meta("echo", "1.0.0"), b"a different echo", None).unwrap();
    let before = snapshot(&root);
    let err = bundle::import(&store, &bundle_path, &trusted(), &mut |_, _| {}).unwrap_err();
    assert!(format!("{err:#}").contains("already has echo@1.0.0 as another artifact"), "{err:#}");
    assert_eq!(snapshot(&root), before, "nothing changed, wordcount@2.1.0 included");

    let fresh = dir.path().join("fresh");
    let store = ArtifactStore::open(&fresh).unwrap();
    bundle::import(&store, &bundle_path, &trusted(), &mut |_, _| {}).unwrap();
    let content = fresh.join("blobs/sha256").join(originals[0].content.hex());
    let mut damaged = std::fs::read(&content).unwrap();
    damaged[10] ^= 0xff;
    std::fs::write(&content, &damaged).unwrap();
    assert!(store.content(&originals[0]).is_err());
    let report = bundle::import(&store, &bundle_path, &trusted(), &mut |_, _| {}).unwrap();
    assert_eq!(report.blobs_written, 1, "only the damaged blob is written again");
    assert!(store.content(&originals[0]).is_ok());
}
