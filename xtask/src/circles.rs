//! No import circles between the files of one crate: a file's `use crate::…`, `use super::…`
//! and inline `crate::…` paths are its arrows to other files of its crate, and no set of files
//! may reach each other through them (each circle is reported once, with its files).
//!
//! What counts: the non-test code of each member's `src/` (a file's `#[cfg(test)]` module and
//! everything after it is left out, as are comments and `$crate` paths in macros). A path
//! points at the deepest module file it names (`crate::sql::claim::Sql` → `src/sql/claim.rs`);
//! `mod x;` is a declaration, not an arrow.

use std::collections::{BTreeMap, BTreeSet};
use std::fs;
use std::path::{Path, PathBuf};

use crate::{rust_files, workspace_members, Problem};

/// Every import circle among the files of one member crate's `src/`.
pub fn import_circles(root: &Path) -> Vec<Problem> {
    let manifest = fs::read_to_string(root.join("Cargo.toml")).unwrap_or_default();
    let mut problems = Vec::new();
    for member in workspace_members(&manifest) {
        let src = root.join(&member).join("src");
        let mut files = Vec::new();
        rust_files(&src, &mut files);
        let modules: BTreeMap<Vec<String>, PathBuf> = files
            .iter()
            .filter_map(|f| Some((module_path(&src, f)?, f.clone())))
            .collect();
        let mut arrows: BTreeMap<PathBuf, BTreeSet<PathBuf>> = BTreeMap::new();
        for (module, file) in &modules {
            let text = fs::read_to_string(file).unwrap_or_default();
            let to = arrows.entry(file.clone()).or_default();
            for path in referenced_paths(&code_of(&text), module) {
                if let Some(target) = deepest_module(&modules, &path) {
                    if target != file {
                        to.insert(target.clone());
                    }
                }
            }
        }
        for circle in circles(&arrows) {
            let names: Vec<String> = circle
                .iter()
                .map(|p| {
                    p.strip_prefix(root)
                        .unwrap_or(p)
                        .to_string_lossy()
                        .into_owned()
                })
                .collect();
            problems.push(Problem {
                path: circle[0].clone(),
                what: format!(
                    "import circle between {} files: {} (break it by moving what they share into a file both import)",
                    names.len(),
                    names.join(", ")
                ),
            });
        }
    }
    problems
}

/// `src/a/b.rs` and `src/a/b/mod.rs` → `["a", "b"]`; `lib.rs`/`main.rs` → `[]`; a binary
/// under `src/bin/` is a crate of its own and is left out.
fn module_path(src: &Path, file: &Path) -> Option<Vec<String>> {
    let rel = file.strip_prefix(src).ok()?;
    let mut parts: Vec<String> = rel
        .components()
        .map(|c| c.as_os_str().to_string_lossy().into_owned())
        .collect();
    if parts.first().is_some_and(|p| p == "bin") {
        return None;
    }
    let last = parts.pop()?;
    let stem = last.strip_suffix(".rs")?;
    if parts.is_empty() && (stem == "lib" || stem == "main") {
        return Some(Vec::new());
    }
    if stem != "mod" {
        parts.push(stem.to_owned());
    }
    Some(parts)
}

/// The text without comments, string-free enough for paths, and without the test module.
fn code_of(text: &str) -> String {
    let mut out = String::new();
    for line in text.lines() {
        if line.trim_start().starts_with("#[cfg(test)]") {
            break;
        }
        let code = line.split("//").next().unwrap_or("");
        out.push_str(code);
        out.push('\n');
    }
    out
}

/// The module paths (from the crate root) that `code` of module `at` refers to.
fn referenced_paths(code: &str, at: &[String]) -> Vec<Vec<String>> {
    let mut out = Vec::new();
    // `use` trees, which may group: `use crate::{a::X, b};`.
    for stmt in code.split(';') {
        let Some(pos) = stmt.find("use ") else {
            continue;
        };
        let tree = stmt[pos + 4..].trim();
        let (base, rest) = if let Some(r) = tree.strip_prefix("crate::") {
            (Vec::new(), r)
        } else if tree.starts_with("super::") {
            let mut base = at.to_vec();
            let mut r = tree;
            while let Some(next) = r.strip_prefix("super::") {
                base.pop();
                r = next;
            }
            (base, r)
        } else {
            continue;
        };
        expand(&base, rest, &mut out);
    }
    // Inline paths: `crate::a::b::f(..)`.
    let bytes = code.as_bytes();
    let mut i = 0;
    while let Some(off) = code[i..].find("crate::") {
        let start = i + off;
        i = start + 7;
        let before = start.checked_sub(1).map(|b| bytes[b]);
        if before.is_some_and(|b| b == b'$' || b.is_ascii_alphanumeric() || b == b'_') {
            continue;
        }
        let mut path = Vec::new();
        for seg in code[i..].split("::") {
            let name: String = seg
                .chars()
                .take_while(|c| c.is_ascii_alphanumeric() || *c == '_')
                .collect();
            let whole = name.len() == seg.len();
            if !name.is_empty() {
                path.push(name);
            }
            if !whole || path.is_empty() {
                break;
            }
        }
        out.push(path);
    }
    out
}

/// Expand a `use` tree below `base` into the paths it names.
fn expand(base: &[String], tree: &str, out: &mut Vec<Vec<String>>) {
    let tree = tree.trim();
    if let Some(inner) = tree.strip_prefix('{').and_then(|t| t.strip_suffix('}')) {
        for part in split_top(inner) {
            expand(base, part, out);
        }
        return;
    }
    match tree.split_once("::") {
        Some((head, rest)) => {
            let mut b = base.to_vec();
            b.push(head.trim().to_owned());
            expand(&b, rest, out);
        }
        None => {
            let name = tree.split(" as ").next().unwrap_or("").trim();
            let mut b = base.to_vec();
            if name != "self" && name != "*" && !name.is_empty() {
                b.push(name.to_owned());
            }
            out.push(b);
        }
    }
}

/// Split `a, b::{c, d}, e` at the commas outside braces.
fn split_top(s: &str) -> Vec<&str> {
    let (mut depth, mut start, mut parts) = (0usize, 0usize, Vec::new());
    for (i, c) in s.char_indices() {
        match c {
            '{' => depth += 1,
            '}' => depth = depth.saturating_sub(1),
            ',' if depth == 0 => {
                parts.push(&s[start..i]);
                start = i + 1;
            }
            _ => {}
        }
    }
    parts.push(&s[start..]);
    parts.into_iter().filter(|p| !p.trim().is_empty()).collect()
}

/// The file of the deepest module that `path` names (the crate root names none).
fn deepest_module<'a>(
    modules: &'a BTreeMap<Vec<String>, PathBuf>,
    path: &[String],
) -> Option<&'a PathBuf> {
    (1..=path.len()).rev().find_map(|n| modules.get(&path[..n]))
}

/// The strongly connected sets of two or more files (Tarjan's algorithm), each sorted.
fn circles(arrows: &BTreeMap<PathBuf, BTreeSet<PathBuf>>) -> Vec<Vec<PathBuf>> {
    struct Walk<'a> {
        arrows: &'a BTreeMap<PathBuf, BTreeSet<PathBuf>>,
        index: BTreeMap<&'a PathBuf, (usize, usize)>,
        stack: Vec<&'a PathBuf>,
        on_stack: BTreeSet<&'a PathBuf>,
        next: usize,
        found: Vec<Vec<PathBuf>>,
    }
    fn visit<'a>(w: &mut Walk<'a>, v: &'a PathBuf) {
        w.index.insert(v, (w.next, w.next));
        w.next += 1;
        w.stack.push(v);
        w.on_stack.insert(v);
        let arrows = w.arrows;
        for to in arrows.get(v).into_iter().flatten() {
            if !w.index.contains_key(to) {
                visit(w, to);
                let low = w.index[to].1.min(w.index[v].1);
                w.index.get_mut(v).expect("visited").1 = low;
            } else if w.on_stack.contains(to) {
                let low = w.index[to].0.min(w.index[v].1);
                w.index.get_mut(v).expect("visited").1 = low;
            }
        }
        if w.index[v].0 == w.index[v].1 {
            let mut set = Vec::new();
            while let Some(top) = w.stack.pop() {
                w.on_stack.remove(top);
                set.push(top.clone());
                if top == v {
                    break;
                }
            }
            if set.len() > 1 {
                set.sort();
                w.found.push(set);
            }
        }
    }
    let mut w = Walk {
        arrows,
        index: BTreeMap::new(),
        stack: Vec::new(),
        on_stack: BTreeSet::new(),
        next: 0,
        found: Vec::new(),
    };
    for v in arrows.keys() {
        if !w.index.contains_key(v) {
            visit(&mut w, v);
        }
    }
    w.found
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::scratch::{assert_one, Scratch};

    fn s(parts: &[&str]) -> Vec<String> {
        parts.iter().map(|p| p.to_string()).collect()
    }

    #[test]
    fn use_trees_and_inline_paths_are_read() {
        let code = "use crate::{claim, rows::{self, get}};\nuse super::state::*;\nfn f() { crate::sql::claim::Sql::new(); $crate::x::y(); }\n";
        let paths = referenced_paths(code, &s(&["memory", "claim"]));
        assert!(paths.contains(&s(&["claim"])));
        assert!(paths.contains(&s(&["rows"])));
        assert!(paths.contains(&s(&["rows", "get"])));
        assert!(paths.contains(&s(&["memory", "state"])));
        assert!(paths.contains(&s(&["sql", "claim", "Sql", "new"])));
        assert!(!paths.iter().any(|p| p.first().is_some_and(|f| f == "x")));
    }

    #[test]
    fn a_circle_between_files_is_reported_once() {
        let t = Scratch::tidy_workspace("circle");
        t.write(
            "outbox-serve/src/lib.rs",
            "//! A crate.\nmod a;\nmod b;\nmod c;\n",
        );
        t.write("outbox-serve/src/a.rs", "use crate::b::B;\npub struct A;\n");
        t.write(
            "outbox-serve/src/b.rs",
            "pub struct B;\nfn f() { crate::c::g(); }\n",
        );
        t.write("outbox-serve/src/c.rs", "use crate::a::A;\npub fn g() {}\n");
        assert_one(
            &import_circles(t.root()),
            "a.rs",
            "import circle between 3 files",
        );
    }

    #[test]
    fn arrows_one_way_a_test_module_and_comments_are_no_circle() {
        let t = Scratch::tidy_workspace("no-circle");
        t.write("outbox-serve/src/lib.rs", "//! A crate.\nmod a;\nmod b;\n");
        t.write("outbox-serve/src/a.rs", "use crate::b::B;\npub struct A;\n");
        t.write(
            "outbox-serve/src/b.rs",
            "//! Used by [`crate::a::A`].\npub struct B;\n\n#[cfg(test)]\nmod tests {\n    use crate::a::A;\n}\n",
        );
        assert!(import_circles(t.root()).is_empty());
    }
}
