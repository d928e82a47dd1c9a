//! `cargo xtask tidy` as a test: the house rules hold for the whole workspace.

#[test]
fn workspace_is_tidy() {
    let problems = xtask::tidy(&xtask::workspace_root());
    assert!(problems.is_empty(), "house rules broken:\n{problems:#?}");
}

#[test]
fn rust_version_covers_the_dependency_graph() {
    let problems = xtask::rust_version(&xtask::workspace_root());
    assert!(
        problems.is_empty(),
        "rust-version is not honest:\n{problems:#?}"
    );
}
