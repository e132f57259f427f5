//! Grammar of the names that appear in documents and URLs.

use crate::limits::{CAPSULE_NAME_LEN_MAX, VERSION_LEN_MAX};

/// Checks a capsule name: 1 to [`CAPSULE_NAME_LEN_MAX`] characters of lowercase ASCII
/// letters, digits, `-`, `_` and `.`, starting with a letter or digit. Names are lowercase
/// so that `mesh://Echo` and `mesh://echo` can never name two different capsules.
pub fn check_capsule_name(name: &str) -> Result<(), String> {
    if name.is_empty() || name.len() > CAPSULE_NAME_LEN_MAX {
        return Err(format!(
            "capsule name must be 1 to {CAPSULE_NAME_LEN_MAX} characters, got {}",
            name.len()
        ));
    }
    let first_ok = name.starts_with(|c: char| c.is_ascii_lowercase() || c.is_ascii_digit());
    let rest_ok =
        name.bytes().all(|b| b.is_ascii_lowercase() || b.is_ascii_digit() || matches!(b, b'-' | b'_' | b'.'));
    if !first_ok || !rest_ok {
        return Err(format!(
            "capsule name `{}` may hold only a-z, 0-9, `-`, `_`, `.` and must start with a letter or digit",
            name.escape_debug()
        ));
    }
    Ok(())
}

/// Checks a version string: 1 to [`VERSION_LEN_MAX`] characters of ASCII letters, digits
/// and `.`, `-`, `+`, `_` (semantic versions and their build tags). Nothing that quotes,
/// comments or escapes in a manifest, a URL or a shell.
pub fn check_version(version: &str) -> Result<(), String> {
    if version.is_empty() || version.len() > VERSION_LEN_MAX {
        return Err(format!("version must be 1 to {VERSION_LEN_MAX} characters, got {}", version.len()));
    }
    if !version.bytes().all(|b| b.is_ascii_alphanumeric() || matches!(b, b'.' | b'-' | b'+' | b'_')) {
        return Err(format!(
            "version `{}` may hold only ASCII letters, digits and `.`, `-`, `+`, `_`",
            version.escape_debug()
        ));
    }
    Ok(())
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn capsule_names() {
        for ok in ["echo", "word-count", "a", "v1.2_x", "0day"] {
            check_capsule_name(ok).unwrap();
        }
        for bad in ["", "Echo", "-x", ".x", "a b", "a@b", "a/b", "a*", "é", &"x".repeat(65)] {
            assert!(check_capsule_name(bad).is_err(), "{bad}");
        }
    }

    #[test]
    fn versions() {
        check_version("1.2.3-rc.1+build.5").unwrap();
        assert!(check_version("").is_err());
        assert!(check_version("1 2").is_err());
        assert!(check_version(&"1".repeat(65)).is_err());
        // What would end a TOML string or start a comment in a manifest `mur install`
        // writes, or step out of a URL path.
        for bad in ["1\"#", "1'", "1#x", "1/2", "1\\", "1;x", "1=2"] {
            assert!(check_version(bad).is_err(), "{bad}");
        }
    }
}
