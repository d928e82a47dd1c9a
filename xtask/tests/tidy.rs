//! `cargo xtask tidy` as a test: the house rules hold for the whole workspace.

#[test]
fn workspace_is_tidy() {
    let problems = xtask::tidy(&xtask::workspace_root());
    assert!(problems.is_empty(), "house rules broken:\n{problems:#?}");
}
