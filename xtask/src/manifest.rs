//! Just enough of a `Cargo.toml` reader for the dependency rules: the normal dependencies of a
//! manifest (`[dependencies]`, `[dependencies.<name>]` and their `[target.<cfg>.…]` forms),
//! each with its package name and its features, `workspace = true` resolved against the root
//! manifest's `[workspace.dependencies]`. xtask has no dependencies, so no `toml` crate.

/// One dependency as a manifest declares it.
#[derive(Debug, Clone, Default, PartialEq, Eq)]
pub(crate) struct Dep {
    /// The key it is declared under (the name used in `[features]`).
    pub key: String,
    /// The package (`package = "…"`, else the key).
    pub package: String,
    /// `workspace = true`.
    pub workspace: bool,
    /// The features it turns on (for a `workspace = true` one, after [`resolve`], the union of
    /// the member's and the workspace's).
    pub features: Vec<String>,
}

/// Cut comments, then join the lines of a multi-line array into one statement.
fn statements(manifest: &str) -> Vec<String> {
    let mut out = Vec::new();
    let mut current = String::new();
    let mut depth = 0i32;
    for line in manifest.lines() {
        let mut in_str: Option<char> = None;
        for c in line.chars() {
            match in_str {
                Some(q) => {
                    if c == q {
                        in_str = None;
                    }
                }
                None => match c {
                    '#' => break,
                    '"' | '\'' => in_str = Some(c),
                    '[' | '{' => depth += 1,
                    ']' | '}' => depth -= 1,
                    _ => {}
                },
            }
            current.push(c);
        }
        current.push(' ');
        if depth <= 0 {
            let s = current.trim();
            if !s.is_empty() {
                out.push(s.to_owned());
            }
            current.clear();
            depth = 0;
        }
    }
    let s = current.trim();
    if !s.is_empty() {
        out.push(s.to_owned());
    }
    out
}

/// Split at `sep` where it is outside strings, brackets and braces.
fn split_top(s: &str, sep: char) -> Vec<String> {
    let mut out = Vec::new();
    let mut current = String::new();
    let mut depth = 0i32;
    let mut in_str: Option<char> = None;
    for c in s.chars() {
        match in_str {
            Some(q) if c == q => in_str = None,
            Some(_) => {}
            None => match c {
                '"' | '\'' => in_str = Some(c),
                '[' | '{' => depth += 1,
                ']' | '}' => depth -= 1,
                c if c == sep && depth == 0 => {
                    out.push(std::mem::take(&mut current));
                    continue;
                }
                _ => {}
            },
        }
        current.push(c);
    }
    out.push(current);
    out
}

fn unquote(s: &str) -> String {
    s.trim().trim_matches('"').trim_matches('\'').to_owned()
}

/// The strings of an array value (`["a", "b"]`).
fn strings(value: &str) -> Vec<String> {
    let v = value.trim();
    let Some(inner) = v.strip_prefix('[').and_then(|v| v.strip_suffix(']')) else {
        return Vec::new();
    };
    split_top(inner, ',')
        .iter()
        .map(|s| unquote(s))
        .filter(|s| !s.is_empty())
        .collect()
}

/// A table header's dotted path (`[target.'cfg(unix)'.dependencies]`).
fn header_path(statement: &str) -> Option<Vec<String>> {
    let inner = statement.strip_prefix('[')?.strip_suffix(']')?;
    let inner = inner.trim_start_matches('[').trim_end_matches(']');
    Some(split_top(inner, '.').iter().map(|s| unquote(s)).collect())
}

/// Apply one `attribute = value` of a dependency.
fn apply(dep: &mut Dep, attribute: &str, value: &str) {
    match attribute {
        "workspace" => dep.workspace = value.trim() == "true",
        "package" => dep.package = unquote(value),
        "features" => dep.features.extend(strings(value)),
        _ => {}
    }
}

/// Apply a dependency's value: a version string, or an inline table.
fn apply_value(dep: &mut Dep, value: &str) {
    let v = value.trim();
    if let Some(inner) = v.strip_prefix('{').and_then(|v| v.strip_suffix('}')) {
        for pair in split_top(inner, ',') {
            if let Some((k, val)) = pair.split_once('=') {
                apply(dep, &unquote(k), val);
            }
        }
    }
}

fn entry<'a>(deps: &'a mut Vec<Dep>, key: &str) -> &'a mut Dep {
    if let Some(i) = deps.iter().position(|d| d.key == key) {
        return &mut deps[i];
    }
    deps.push(Dep {
        key: key.to_owned(),
        package: key.to_owned(),
        ..Dep::default()
    });
    deps.last_mut().expect("just pushed")
}

/// The dependencies of every table whose header path, with the dependency's own name cut
/// off, satisfies `is_table`.
fn deps_of(manifest: &str, is_table: impl Fn(&[String]) -> bool) -> Vec<Dep> {
    let mut deps = Vec::new();
    // `Some(None)`: inside a table of dependencies; `Some(Some(name))`: inside one's own table.
    let mut section: Option<Option<String>> = None;
    for s in statements(manifest) {
        if s.starts_with('[') {
            section = header_path(&s).and_then(|path| {
                if is_table(&path) {
                    Some(None)
                } else if path.len() > 1 && is_table(&path[..path.len() - 1]) {
                    Some(path.last().cloned())
                } else {
                    None
                }
            });
            continue;
        }
        let Some(section) = &section else { continue };
        let Some((key, value)) = s.split_once('=') else {
            continue;
        };
        let key: Vec<String> = split_top(key.trim(), '.')
            .iter()
            .map(|k| unquote(k))
            .collect();
        match section {
            None => {
                let dep = entry(&mut deps, &key[0]);
                if key.len() == 1 {
                    apply_value(dep, value);
                } else {
                    apply(dep, &key[1], value);
                }
            }
            Some(name) => apply(entry(&mut deps, name), &key[0], value),
        }
    }
    deps
}

/// The normal dependencies of a member manifest, target-specific ones included.
pub(crate) fn dependencies(manifest: &str) -> Vec<Dep> {
    deps_of(manifest, |p| {
        p == ["dependencies"] || (p.len() == 3 && p[0] == "target" && p[2] == "dependencies")
    })
}

/// The root manifest's `[workspace.dependencies]`.
pub(crate) fn workspace_dependencies(root_manifest: &str) -> Vec<Dep> {
    deps_of(root_manifest, |p| p == ["workspace", "dependencies"])
}

/// Resolve `workspace = true` dependencies against the workspace's: the package comes from
/// the workspace entry, the features are the union of both.
pub(crate) fn resolve(deps: Vec<Dep>, workspace: &[Dep]) -> Vec<Dep> {
    deps.into_iter()
        .map(|mut d| {
            if d.workspace {
                if let Some(w) = workspace.iter().find(|w| w.key == d.key) {
                    d.package = w.package.clone();
                    for f in &w.features {
                        if !d.features.contains(f) {
                            d.features.push(f.clone());
                        }
                    }
                }
            }
            d
        })
        .collect()
}

/// The `[features]` table: each feature with what it turns on.
pub(crate) fn features(manifest: &str) -> Vec<(String, Vec<String>)> {
    let mut in_features = false;
    let mut out = Vec::new();
    for s in statements(manifest) {
        if s.starts_with('[') {
            in_features = header_path(&s).is_some_and(|p| p == ["features"]);
        } else if in_features {
            if let Some((k, v)) = s.split_once('=') {
                out.push((unquote(k), strings(v)));
            }
        }
    }
    out
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn reads_every_form_of_a_dependency() {
        let m = r#"
[package]
name = "x"

[dependencies]
a = "1"
b.workspace = true
c = { workspace = true, features = ["sync", "rt"] } # comment
d = { version = "1", package = "real-d" }
e = { workspace = true, features = [
    "net", # the sockets
    "time",
] }

[dependencies.f]
workspace = true
features = ["macros"]

[target.'cfg(unix)'.dependencies]
g = "1"

[dev-dependencies]
h = "1"

[features]
extra = ["c/fs", "dep:d"]
"#;
        let deps = dependencies(m);
        let names: Vec<_> = deps.iter().map(|d| d.package.as_str()).collect();
        assert_eq!(names, ["a", "b", "c", "real-d", "e", "f", "g"]);
        assert!(deps[1].workspace);
        assert_eq!(deps[2].features, ["sync", "rt"]);
        assert_eq!(deps[4].features, ["net", "time"]);
        assert!(deps[5].workspace);
        assert_eq!(deps[5].features, ["macros"]);
        assert_eq!(
            features(m),
            [(
                "extra".to_owned(),
                vec!["c/fs".to_owned(), "dep:d".to_owned()]
            )]
        );

        let root = "[workspace.dependencies]\nb = { version = \"1\", package = \"real-b\" }\nc = { version = \"1\", features = [\"io-util\"] }\n";
        let resolved = resolve(deps, &workspace_dependencies(root));
        assert_eq!(resolved[1].package, "real-b");
        assert_eq!(resolved[2].features, ["sync", "rt", "io-util"]);
    }
}
