//! Project automation behind `cargo xtask`: `ci`, `tidy` (house rules), and `bench`.

use std::fs;
use std::path::{Path, PathBuf};

/// The longest source file tidy accepts.
pub const MAX_LINES: usize = 800;

/// One broken house rule.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct Problem {
    /// The file.
    pub path: PathBuf,
    /// What is wrong.
    pub what: String,
}

/// The workspace root (the parent of this crate's folder).
pub fn workspace_root() -> PathBuf {
    Path::new(env!("CARGO_MANIFEST_DIR"))
        .parent()
        .map(Path::to_path_buf)
        .unwrap_or_else(|| PathBuf::from("."))
}

fn rust_files(dir: &Path, out: &mut Vec<PathBuf>) {
    let Ok(entries) = fs::read_dir(dir) else {
        return;
    };
    for e in entries.flatten() {
        let p = e.path();
        let name = e.file_name();
        let name = name.to_string_lossy();
        if p.is_dir() {
            if name == "target" || name.starts_with('.') {
                continue;
            }
            rust_files(&p, out);
        } else if name.ends_with(".rs") {
            out.push(p);
        }
    }
}

/// Check the house rules under `root`: no ignored tests, no `todo!`/`unimplemented!`, every
/// crate on the workspace lints, no source file over [`MAX_LINES`] lines.
pub fn tidy(root: &Path) -> Vec<Problem> {
    let mut problems = Vec::new();
    // Built from pieces so this file does not flag itself.
    let banned = [
        format!("#[{}", "ignore"),
        format!("{}!(", "todo"),
        format!("{}!(", "unimplemented"),
    ];
    let mut files = Vec::new();
    rust_files(root, &mut files);
    files.sort();
    for f in &files {
        let Ok(text) = fs::read_to_string(f) else {
            continue;
        };
        for b in &banned {
            if text.contains(b.as_str()) {
                problems.push(Problem {
                    path: f.clone(),
                    what: format!("contains `{b}`"),
                });
            }
        }
        let lines = text.lines().count();
        if lines > MAX_LINES {
            problems.push(Problem {
                path: f.clone(),
                what: format!("has {lines} lines (limit {MAX_LINES})"),
            });
        }
    }
    let Ok(manifest) = fs::read_to_string(root.join("Cargo.toml")) else {
        problems.push(Problem {
            path: root.join("Cargo.toml"),
            what: "unreadable".into(),
        });
        return problems;
    };
    for member in workspace_members(&manifest) {
        let path = root.join(&member).join("Cargo.toml");
        match fs::read_to_string(&path) {
            Ok(text) if opts_into_workspace_lints(&text) => {}
            Ok(_) => problems.push(Problem {
                path,
                what: "does not say `[lints] workspace = true`".into(),
            }),
            Err(_) => problems.push(Problem {
                path,
                what: "missing".into(),
            }),
        }
    }
    problems
}

fn workspace_members(manifest: &str) -> Vec<String> {
    let Some(start) = manifest.find("members") else {
        return Vec::new();
    };
    let rest = &manifest[start..];
    let (Some(open), Some(close)) = (rest.find('['), rest.find(']')) else {
        return Vec::new();
    };
    rest[open + 1..close]
        .split(',')
        .map(|s| s.trim().trim_matches('"').to_owned())
        .filter(|s| !s.is_empty())
        .collect()
}

fn opts_into_workspace_lints(manifest: &str) -> bool {
    let mut in_lints = false;
    for line in manifest.lines().map(str::trim) {
        if line.starts_with('[') {
            in_lints = line == "[lints]";
        } else if in_lints && line.replace(' ', "") == "workspace=true" {
            return true;
        }
    }
    false
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn finds_lints_and_members() {
        assert!(opts_into_workspace_lints(
            "[package]\nname='x'\n\n[lints]\nworkspace = true\n"
        ));
        assert!(!opts_into_workspace_lints(
            "[package]\nname='x'\n[dependencies]\nworkspace = true\n"
        ));
        assert_eq!(
            workspace_members("[workspace]\nmembers = [\n \"a\",\n \"b\",\n]\n"),
            vec!["a", "b"]
        );
    }

    #[test]
    fn flags_banned_markers_in_a_scratch_tree() {
        let dir = std::env::temp_dir().join(format!("xtask-tidy-{}", std::process::id()));
        let _ = fs::remove_dir_all(&dir);
        fs::create_dir_all(dir.join("c/src")).unwrap();
        fs::write(dir.join("Cargo.toml"), "[workspace]\nmembers = [\"c\"]\n").unwrap();
        fs::write(dir.join("c/Cargo.toml"), "[package]\nname = \"c\"\n").unwrap();
        fs::write(
            dir.join("c/src/lib.rs"),
            format!("fn f() {{ {}!() }}\n", "todo"),
        )
        .unwrap();
        let p = tidy(&dir);
        let _ = fs::remove_dir_all(&dir);
        assert_eq!(p.len(), 2, "{p:?}");
    }
}
