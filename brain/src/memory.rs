//! Agents' memory: a string store per agent in the node's embedded database
//! (`DIR/brains.redb`, redb), so it survives reloads, restarts of a run and of the node.
//! Each agent sees only its own keys. Keys, values and the number of keys per agent are
//! bounded; a write past a bound is refused and changes nothing.

use std::path::Path;
use std::sync::Arc;

use anyhow::Context;
use redb::{Database, ReadableDatabase, ReadableTable, TableDefinition};

/// (agent, key) → value.
const MEMORY: TableDefinition<(&str, &str), &str> = TableDefinition::new("memory");

/// Bytes of one key: a name, not a payload.
pub const KEY_BYTES_MAX: usize = 256;
/// Bytes of one value: "not a database — keep values small" (the specification).
pub const VALUE_BYTES_MAX: usize = 64 * 1024;
/// Keys one agent may hold.
pub const KEYS_MAX: usize = 4096;

/// The memory of every agent of a node. Cheap to clone.
#[derive(Clone, Debug)]
pub struct Memory {
    db: Arc<Database>,
}

impl Memory {
    /// Opens (or creates) the database at `path`.
    pub fn open(path: &Path) -> anyhow::Result<Self> {
        let created = !path.exists();
        let db = redb::Builder::new()
            .set_cache_size(murmur_config::limits::BRAIN_DB_CACHE_BYTES)
            .create(path)
            .with_context(|| format!("cannot open {}", path.display()))?;
        if created {
            // redb syncs the file on each durable commit, never the directory that names it.
            murmur_store::file::sync_parent(path)?;
        }
        let txn = db.begin_write()?;
        txn.open_table(MEMORY)?;
        txn.commit()?;
        Ok(Self { db: Arc::new(db) })
    }

    /// The value of `key` for `agent`.
    pub fn get(&self, agent: &str, key: &str) -> Result<Option<String>, String> {
        let run = || -> anyhow::Result<Option<String>> {
            let txn = self.db.begin_read()?;
            let table = txn.open_table(MEMORY)?;
            Ok(table.get((agent, key))?.map(|v| v.value().to_owned()))
        };
        run().map_err(|e| format!("memory: {e:#}"))
    }

    /// Stores `value` under `key` for `agent`, durably.
    pub fn set(&self, agent: &str, key: &str, value: &str) -> Result<(), String> {
        check_key(key)?;
        if value.len() > VALUE_BYTES_MAX {
            return Err(format!(
                "memory: a value is at most {VALUE_BYTES_MAX} bytes, this one {} (keep values small: subscription handles, state, checkpoints)",
                value.len()
            ));
        }
        let run = || -> anyhow::Result<Result<(), String>> {
            let txn = self.db.begin_write()?;
            {
                let mut table = txn.open_table(MEMORY)?;
                if table.get((agent, key))?.is_none() {
                    let held = table
                        .range((agent, "")..)?
                        .take_while(|e| e.as_ref().is_ok_and(|(k, _)| k.value().0 == agent))
                        .count();
                    if held >= KEYS_MAX {
                        return Ok(Err(format!(
                            "memory: agent `{agent}` already holds {KEYS_MAX} keys; remove some first"
                        )));
                    }
                }
                table.insert((agent, key), value)?;
            }
            txn.commit()?;
            Ok(Ok(()))
        };
        run().map_err(|e| format!("memory: {e:#}"))?
    }

    /// Deletes `key` for `agent`; true when a value was present.
    pub fn remove(&self, agent: &str, key: &str) -> Result<bool, String> {
        let run = || -> anyhow::Result<bool> {
            let txn = self.db.begin_write()?;
            let removed = txn.open_table(MEMORY)?.remove((agent, key))?.is_some();
            txn.commit()?;
            Ok(removed)
        };
        run().map_err(|e| format!("memory: {e:#}"))
    }

    /// Every key of `agent` with its value, in key order.
    pub fn list(&self, agent: &str) -> Result<Vec<(String, String)>, String> {
        let run = || -> anyhow::Result<Vec<(String, String)>> {
            let txn = self.db.begin_read()?;
            let table = txn.open_table(MEMORY)?;
            let mut entries = Vec::new();
            for entry in table.range((agent, "")..)? {
                let (key, value) = entry?;
                let (owner, key) = key.value();
                if owner != agent {
                    break;
                }
                entries.push((key.to_owned(), value.value().to_owned()));
            }
            Ok(entries)
        };
        run().map_err(|e| format!("memory: {e:#}"))
    }
}

fn check_key(key: &str) -> Result<(), String> {
    if key.is_empty() || key.len() > KEY_BYTES_MAX {
        return Err(format!("memory: a key is 1 to {KEY_BYTES_MAX} bytes, this one {}", key.len()));
    }
    Ok(())
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn memory_is_per_agent_bounded_and_survives_reopening() {
        let dir = tempfile::tempdir().unwrap();
        let path = dir.path().join("brains.redb");
        {
            let memory = Memory::open(&path).unwrap();
            memory.set("planner", "plan", "step 1").unwrap();
            memory.set("planner", "count", "3").unwrap();
            memory.set("writer", "plan", "draft").unwrap();
            assert!(
                memory
                    .set("planner", "big", &"x".repeat(VALUE_BYTES_MAX + 1))
                    .unwrap_err()
                    .contains("at most")
            );
            assert!(memory.set("planner", "", "x").is_err());
            assert_eq!(memory.get("planner", "big").unwrap(), None, "a refused write changes nothing");
            assert!(memory.remove("planner", "count").unwrap());
            assert!(!memory.remove("planner", "count").unwrap());
        }
        let memory = Memory::open(&path).unwrap();
        assert_eq!(memory.get("planner", "plan").unwrap().as_deref(), Some("step 1"));
        assert_eq!(memory.get("writer", "plan").unwrap().as_deref(), Some("draft"));
        assert_eq!(memory.list("planner").unwrap(), [("plan".to_owned(), "step 1".to_owned())]);
        assert!(memory.list("nobody").unwrap().is_empty());
    }
}
