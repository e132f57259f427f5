//! Where a brain comes from, in which language, and how the node notices it changed.

use std::path::{Path, PathBuf};
use std::sync::Arc;

use murmur_protocol::Digest;
use murmur_store::ArtifactStore;

/// Bytes of a brain's source (a script or a component).
pub const SOURCE_BYTES_MAX: u64 = 16 * 1024 * 1024;

/// The language a brain is written in.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum Language {
    Rhai,
    Js,
    Wasm,
}

impl Language {
    /// The name the config, `mur` and the docs use.
    #[must_use]
    pub const fn as_str(self) -> &'static str {
        match self {
            Self::Rhai => "rhai",
            Self::Js => "js",
            Self::Wasm => "wasm",
        }
    }

    /// The language a file name says (`.rhai`, `.js`/`.mjs`, `.wasm`).
    #[must_use]
    pub fn of_path(path: &Path) -> Option<Self> {
        match path.extension()?.to_str()? {
            "rhai" => Some(Self::Rhai),
            "js" | "mjs" => Some(Self::Js),
            "wasm" => Some(Self::Wasm),
            _ => None,
        }
    }
}

impl std::str::FromStr for Language {
    type Err = String;

    fn from_str(text: &str) -> Result<Self, Self::Err> {
        match text {
            "rhai" => Ok(Self::Rhai),
            "js" | "javascript" => Ok(Self::Js),
            "wasm" => Ok(Self::Wasm),
            other => Err(format!("unknown brain language `{other}` (one of: rhai, js, wasm)")),
        }
    }
}

/// Where a brain's source is.
#[derive(Clone, Debug, PartialEq, Eq)]
pub enum Source {
    /// A file on this machine (absolute).
    File(PathBuf),
    /// An artifact of kind `brain` in the node's store.
    Stored { name: String, version: String },
}

impl Source {
    /// How the source is named to others (`mur agent ls`, peers): a file's name without
    /// its directory, or `NAME@VERSION`.
    #[must_use]
    pub fn public_name(&self) -> String {
        match self {
            Self::File(path) => {
                path.file_name().map_or_else(String::new, |n| n.to_string_lossy().into_owned())
            }
            Self::Stored { name, version } => format!("{name}@{version}"),
        }
    }
}

impl std::fmt::Display for Source {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        match self {
            Self::File(path) => write!(f, "{}", path.display()),
            Self::Stored { name, version } => write!(f, "{name}@{version}"),
        }
    }
}

/// A brain's source as read once: its bytes, language and fingerprint.
#[derive(Clone, Debug)]
pub struct Read {
    pub bytes: Vec<u8>,
    pub language: Language,
    pub digest: Digest,
}

impl Source {
    /// Reads the source; `language` is the config's, else what the file name or the
    /// content says (a component starts with `\0asm`).
    pub fn read(&self, store: &Arc<ArtifactStore>, language: Option<Language>) -> Result<Read, String> {
        let bytes = match self {
            Self::File(path) => {
                let len = std::fs::metadata(path)
                    .map_err(|e| format!("cannot read {}: {e}", path.display()))?
                    .len();
                if len > SOURCE_BYTES_MAX {
                    return Err(format!(
                        "{} is {len} bytes, more than a brain may be ({SOURCE_BYTES_MAX})",
                        path.display()
                    ));
                }
                std::fs::read(path).map_err(|e| format!("cannot read {}: {e}", path.display()))?
            }
            Self::Stored { name, version } => {
                let stored =
                    store.find(name, Some(version)).map_err(|e| format!("{e:#}"))?.ok_or_else(|| {
                        format!("{name}@{version} is not in the store (`mur artifact add … --kind brain`)")
                    })?;
                if stored.meta.kind != murmur_store::CapsuleKind::Brain {
                    return Err(format!("{name}@{version} is a {}, not a brain", stored.meta.kind));
                }
                if stored.size > SOURCE_BYTES_MAX {
                    return Err(format!(
                        "{name}@{version} is {} bytes, more than a brain may be ({SOURCE_BYTES_MAX})",
                        stored.size
                    ));
                }
                store.content(&stored).map_err(|e| format!("{e:#}"))?
            }
        };
        let sniffed = if bytes.starts_with(b"\0asm") { Some(Language::Wasm) } else { None };
        let named = match self {
            Self::File(path) => Language::of_path(path),
            Self::Stored { .. } => None,
        };
        let language = language.or(sniffed).or(named).ok_or_else(|| {
            format!("cannot tell the language of brain {self}: name the file .rhai, .js or .wasm, or set `language` in its [[agents]] entry")
        })?;
        Ok(Read { digest: Digest::of(&bytes), bytes, language })
    }
}
