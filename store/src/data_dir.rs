//! The data directory: everything a node must not lose.
//!
//! ```text
//! DIR/node.key      the node's ed25519 key (mode 0600); its PeerId is the node's name
//! DIR/murnode.toml  configuration (commented defaults from `murnode init`)
//! DIR/node.cert     closed-mesh certificate from `mur cert sign` (optional)
//! ```

use std::path::{Path, PathBuf};

use anyhow::Context;
use murmur_protocol::SecretKey;

use murmur_config::{CONFIG_FILE, DEFAULT_CONFIG_TOML};

use crate::keyfile;

/// File name of the node key inside the data directory.
pub const KEY_FILE: &str = "node.key";

/// Where the data directory is when no flag or environment variable says.
#[must_use]
pub fn default_path() -> PathBuf {
    if let Some(xdg) = std::env::var_os("XDG_DATA_HOME").filter(|v| !v.is_empty()) {
        return PathBuf::from(xdg).join("murmur");
    }
    match std::env::var_os("HOME").filter(|v| !v.is_empty()) {
        Some(home) => PathBuf::from(home).join(".local/share/murmur"),
        None => PathBuf::from("murmur-data"),
    }
}

/// What `init` did.
#[derive(Debug)]
pub struct Initialized {
    pub key: SecretKey,
    pub key_created: bool,
    pub config_created: bool,
}

/// Creates the directory (mode 0700), a node key and the default config, keeping any that
/// already exist.
pub fn init(dir: &Path) -> anyhow::Result<Initialized> {
    init_with_key(dir, None)
}

/// [`init`], installing the key in the file `key` (a key file as `mur key gen` writes it,
/// mode 0600) instead of making one: how a node gets an identity decided beforehand (a
/// seed that others bootstrap to by its peer id). A data directory that has a key keeps
/// it, and is refused when it is another key: the node would not be the peer others
/// expect.
pub fn init_with_key(dir: &Path, key: Option<&Path>) -> anyhow::Result<Initialized> {
    let given = match key {
        Some(path) => Some(keyfile::read(path).with_context(|| format!("--key {}", path.display()))?),
        None => None,
    };
    crate::file::create_dir_all_durable_mode(dir, 0o700)
        .with_context(|| format!("cannot create data directory {}", dir.display()))?;
    let key_path = dir.join(KEY_FILE);
    let key_created = !key_path.exists();
    let key = if key_created {
        let key = given.unwrap_or_else(keyfile::generate);
        keyfile::create(&key_path, &key)?;
        key
    } else {
        let held = keyfile::read(&key_path)?;
        if let Some(given) = given
            && given.public() != held.public()
        {
            anyhow::bail!(
                "{} already holds the key of node {}, not the key given ({}); a data directory keeps its identity: \
                 use another directory, or remove {} if that node is meant to be gone",
                dir.display(),
                held.node_id(),
                given.node_id(),
                key_path.display()
            );
        }
        held
    };
    let config_path = dir.join(CONFIG_FILE);
    let config_created = !config_path.exists();
    if config_created {
        // It may come to hold API tokens and credentials: its owner's alone, written whole.
        crate::file::write_atomic_private(&config_path, DEFAULT_CONFIG_TOML.as_bytes())?;
    }
    Ok(Initialized { key, key_created, config_created })
}

/// Reads the node key, with a hint when the directory was never initialized.
pub fn node_key(dir: &Path) -> anyhow::Result<SecretKey> {
    let path = dir.join(KEY_FILE);
    if !path.exists() {
        anyhow::bail!(
            "{} has no node key; run `murnode init --data-dir {}` first",
            dir.display(),
            dir.display()
        );
    }
    keyfile::read(&path)
}

#[cfg(test)]
mod tests {
    use std::fs;
    use std::os::unix::fs::PermissionsExt;

    use super::*;

    #[test]
    fn init_twice_keeps_the_key_and_the_config() {
        let tmp = tempfile::tempdir().unwrap();
        let dir = tmp.path().join("node");
        let first = init(&dir).unwrap();
        assert!(first.key_created && first.config_created);
        fs::write(dir.join(CONFIG_FILE), "# edited\n").unwrap();
        let second = init(&dir).unwrap();
        assert!(!second.key_created && !second.config_created);
        assert_eq!(first.key.public(), second.key.public());
        assert_eq!(fs::read_to_string(dir.join(CONFIG_FILE)).unwrap(), "# edited\n");
    }

    #[test]
    fn a_given_key_is_installed_once_and_another_one_is_refused() {
        let tmp = tempfile::tempdir().unwrap();
        let seed = tmp.path().join("seed.key");
        let key = keyfile::generate();
        keyfile::create(&seed, &key).unwrap();
        let dir = tmp.path().join("node");
        let first = init_with_key(&dir, Some(&seed)).unwrap();
        assert!(first.key_created);
        assert_eq!(first.key.public(), key.public());
        assert_eq!(node_key(&dir).unwrap().public(), key.public());
        // Again with the same key: kept.
        assert!(!init_with_key(&dir, Some(&seed)).unwrap().key_created);
        // Another key: refused, and the directory's key is untouched.
        let other = tmp.path().join("other.key");
        keyfile::create(&other, &keyfile::generate()).unwrap();
        let err = format!("{:#}", init_with_key(&dir, Some(&other)).unwrap_err());
        assert!(err.contains("already holds the key of node") && err.contains("keeps its identity"), "{err}");
        assert_eq!(node_key(&dir).unwrap().public(), key.public());
        // A key file others can read is refused before anything is made.
        let fresh = tmp.path().join("fresh");
        fs::set_permissions(&other, fs::Permissions::from_mode(0o644)).unwrap();
        let err = format!("{:#}", init_with_key(&fresh, Some(&other)).unwrap_err());
        assert!(err.contains("--key") && err.contains("chmod 600"), "{err}");
        assert!(!fresh.exists());
    }

    #[test]
    fn the_config_is_written_for_its_owner_only() {
        let tmp = tempfile::tempdir().unwrap();
        let dir = tmp.path().join("node");
        init(&dir).unwrap();
        let mode = fs::metadata(dir.join(CONFIG_FILE)).unwrap().permissions().mode() & 0o777;
        assert_eq!(mode, 0o600, "the config may hold tokens and credentials");
        // No temporary file is left beside it.
        let left: Vec<_> = fs::read_dir(&dir)
            .unwrap()
            .filter_map(Result::ok)
            .filter(|e| e.file_name().to_string_lossy().contains(".tmp-"))
            .collect();
        assert!(left.is_empty());
    }

    #[test]
    fn a_missing_key_says_to_run_init() {
        let tmp = tempfile::tempdir().unwrap();
        let err = node_key(tmp.path()).unwrap_err().to_string();
        assert!(err.contains("murnode init --data-dir"), "{err}");
    }
}
