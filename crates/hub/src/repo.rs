//! Checks on names that come from outside (the catalog, the UI, a Hub
//! listing) before they become URLs or paths.
use std::path::{Component, Path};

use crate::error::{Error, Result};

/// `owner/name`: ASCII letters, digits, `.`, `_`, `-`; no `--` or `..`
/// (the Hub forbids them, and the cache folder `models--owner--name` relies on it).
pub fn validate_repo_id(repo: &str) -> Result<()> {
    let invalid = || Error::InvalidRepoId(repo.to_string());
    let (owner, name) = repo.split_once('/').ok_or_else(invalid)?;
    for part in [owner, name] {
        let ok = !part.is_empty()
            && part.len() <= 96
            && part.chars().all(|c| c.is_ascii_alphanumeric() || matches!(c, '.' | '_' | '-'))
            && !part.contains("--")
            && !part.contains("..")
            && !part.starts_with(['.', '-'])
            && !part.ends_with(['.', '-']);
        if !ok {
            return Err(invalid());
        }
    }
    Ok(())
}

/// A branch, tag or commit: it becomes a URL segment and a file under `refs/`.
pub fn validate_revision(revision: &str) -> Result<()> {
    let ok = !revision.is_empty()
        && revision.len() <= 255
        && revision
            .chars()
            .all(|c| c.is_ascii_alphanumeric() || matches!(c, '.' | '_' | '-' | '/'))
        && revision.split('/').all(|part| !part.is_empty() && part != "." && part != "..");
    if ok {
        Ok(())
    } else {
        Err(Error::InvalidRevision(revision.to_string()))
    }
}

/// A file name from a repository listing, which becomes a path below the
/// snapshot folder: relative, `/`-separated, no empty, `.` or `..` parts, no
/// backslashes, drive letters or control characters.
pub fn validate_file_name(name: &str) -> Result<()> {
    let unsafe_name = || Error::UnsafeFileName(name.to_string());
    if name.is_empty()
        || name.len() > 1024
        || name.starts_with('/')
        || name.contains('\\')
        || name.chars().any(|c| c.is_control())
        || Path::new(name).is_absolute()
    {
        return Err(unsafe_name());
    }
    for part in name.split('/') {
        if part.is_empty() || part == "." || part == ".." || part.contains(':') {
            return Err(unsafe_name());
        }
    }
    // belt and braces: what the platform's own parser sees must be plain names too
    if !Path::new(name).components().all(|c| matches!(c, Component::Normal(_))) {
        return Err(unsafe_name());
    }
    Ok(())
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn repo_ids() {
        for ok in [
            "mlx-community/Qwen2.5-VL-3B-Instruct-4bit",
            "a/b",
            "HuggingFaceTB/SmolLM2-135M-Instruct",
        ] {
            validate_repo_id(ok).unwrap();
        }
        for bad in
            ["", "a", "a/b/c", "/a", "a/", "../a", "a/..", "a--b/c", "a/b c", "a/.hidden", "a/b\\c"]
        {
            assert_eq!(validate_repo_id(bad).unwrap_err().code(), "INVALID_REPO_ID", "{bad}");
        }
    }

    #[test]
    fn revisions() {
        for ok in ["main", "v1.0", "refs/pr/1", "0123456789abcdef0123456789abcdef01234567"] {
            validate_revision(ok).unwrap();
        }
        for bad in ["", "../x", "a//b", "/main", "main/", "a b", "x/./y"] {
            assert_eq!(validate_revision(bad).unwrap_err().code(), "INVALID_REVISION", "{bad}");
        }
    }

    #[test]
    fn file_names() {
        for ok in ["config.json", "a/b/c.safetensors", ".gitattributes", "weird..name.txt"] {
            validate_file_name(ok).unwrap();
        }
        for bad in [
            "",
            "../evil",
            "a/../../evil",
            "..",
            ".",
            "/etc/passwd",
            "a//b",
            "a/./b",
            "a\\..\\b",
            "C:/x",
            "c:evil",
            "a/b/",
            "nul\0byte",
            "line\nbreak",
        ] {
            assert_eq!(validate_file_name(bad).unwrap_err().code(), "UNSAFE_FILE_NAME", "{bad:?}");
        }
    }
}
