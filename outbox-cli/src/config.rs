//! `--config FILE` (or `OUTBOX_CONFIG`) and `OUTBOX_*` for every flag.
//!
//! Before clap parses the command line, the flags the command line does not give are filled
//! in, in this order of precedence: the flag itself, then the environment (`OUTBOX_` and the
//! flag's long name in upper snake case: `--poll-interval` is `OUTBOX_POLL_INTERVAL`), then the
//! file, then clap's default. The file is TOML: a key is a flag's long name (`poll-interval`
//! or `poll_interval`); top-level keys apply to every command that has the flag (the egress
//! flags, `store`, `namespace`, … set once), a table named after a command (`[relay]`,
//! `[serve]`, `[endpoints]`, …) applies to that command and its subcommands and wins over
//! the top level. A key that is no flag of any command (or, in a table, of that command) is
//! refused with its file and line. A switch is `true`/`false`; a repeatable flag takes an
//! array (from the environment: values separated by commas).

use std::collections::BTreeSet;
use std::ffi::OsString;

use clap::{ArgAction, Command};

use crate::error::{CliError, CliResult};

/// One flag of the command being run.
struct Flag {
    long: String,
    short: Option<char>,
    /// Whether clap reads an environment variable of its own for it.
    own_env: Option<OsString>,
    takes_value: bool,
    repeatable: bool,
    /// The long names of the flags it conflicts with.
    conflicts: Vec<String>,
}

/// The flag's `OUTBOX_*` name.
pub fn env_name(long: &str) -> String {
    format!("OUTBOX_{}", long.replace('-', "_").to_uppercase())
}

fn flags_of(cmd: &Command) -> Vec<Flag> {
    cmd.get_arguments()
        .filter(|a| !a.is_positional())
        .filter_map(|a| {
            let long = a.get_long()?.to_owned();
            if ["help", "version", "config"].contains(&long.as_str()) {
                return None;
            }
            let action = a.get_action();
            Some(Flag {
                long,
                short: a.get_short(),
                own_env: a.get_env().map(|e| e.to_owned()),
                takes_value: action.takes_values(),
                repeatable: matches!(action, ArgAction::Append),
                conflicts: cmd
                    .get_arg_conflicts_with(a)
                    .iter()
                    .filter_map(|c| c.get_long().map(str::to_owned))
                    .collect(),
            })
        })
        .collect()
}

/// Every flag's long name in `cmd` and all its subcommands.
fn all_longs(cmd: &Command, into: &mut BTreeSet<String>) {
    for f in flags_of(cmd) {
        into.insert(f.long);
    }
    for sub in cmd.get_subcommands() {
        all_longs(sub, into);
    }
}

/// The command path (`["endpoints", "create"]`) the arguments select, and the leaf command.
fn select<'a>(root: &'a Command, args: &[OsString]) -> (Vec<String>, &'a Command) {
    let mut cmd = root;
    let mut path = Vec::new();
    for a in args.iter().skip(1) {
        let Some(a) = a.to_str() else { continue };
        if a == "--" {
            break;
        }
        if a.starts_with('-') {
            continue;
        }
        if let Some(sub) = cmd.find_subcommand(a) {
            path.push(sub.get_name().to_owned());
            cmd = sub;
        }
        if !cmd.has_subcommands() {
            break;
        }
    }
    (path, cmd)
}

/// The `--config` value on the command line, else `OUTBOX_CONFIG`.
fn config_path(args: &[OsString]) -> Option<OsString> {
    let mut it = args.iter().skip(1);
    while let Some(a) = it.next() {
        let s = a.to_string_lossy();
        if s == "--" {
            break;
        }
        if s == "--config" {
            return it.next().cloned();
        }
        if let Some(v) = s.strip_prefix("--config=") {
            return Some(v.into());
        }
    }
    std::env::var_os("OUTBOX_CONFIG")
}

fn given(args: &[OsString], flag: &Flag) -> bool {
    args.iter().skip(1).any(|a| {
        let s = a.to_string_lossy();
        let long = format!("--{}", flag.long);
        s == long
            || s.starts_with(&format!("{long}="))
            || flag.short.is_some_and(|c| {
                s.len() >= 2 && s.starts_with('-') && !s.starts_with("--") && s[1..].starts_with(c)
            })
    })
}

/// The line of byte `offset` in `text` (1-based).
fn line_of(text: &str, offset: usize) -> usize {
    text[..offset.min(text.len())].matches('\n').count() + 1
}

/// A value from the file: the arguments it stands for.
fn file_value(
    flag: &Flag,
    value: &toml_edit::Item,
    at: &dyn Fn() -> String,
) -> CliResult<Vec<OsString>> {
    let bad =
        |why: &str| CliError::usage(format!("invalid input: {}: `{}` {why}", at(), flag.long));
    let scalar = |v: &toml_edit::Value| -> CliResult<String> {
        match v {
            toml_edit::Value::String(s) => Ok(s.value().clone()),
            toml_edit::Value::Integer(i) => Ok(i.value().to_string()),
            toml_edit::Value::Float(f) => Ok(f.value().to_string()),
            toml_edit::Value::Boolean(b) => Ok(b.value().to_string()),
            _ => Err(bad("takes a string, a number or a boolean")),
        }
    };
    let Some(v) = value.as_value() else {
        return Err(bad("is a flag, not a table"));
    };
    let long = OsString::from(format!("--{}", flag.long));
    if !flag.takes_value {
        return match v.as_bool() {
            Some(true) => Ok(vec![long]),
            Some(false) => Ok(vec![]),
            None => Err(bad("is a switch: use true or false")),
        };
    }
    if let Some(array) = v.as_array() {
        if !flag.repeatable {
            return Err(bad("takes one value, not an array"));
        }
        let mut out = Vec::new();
        for item in array.iter() {
            out.push(long.clone());
            out.push(scalar(item)?.into());
        }
        return Ok(out);
    }
    Ok(vec![long, scalar(v)?.into()])
}

/// A value from the environment: the arguments it stands for.
fn env_value(flag: &Flag, name: &str, value: &str) -> CliResult<Vec<OsString>> {
    let long = OsString::from(format!("--{}", flag.long));
    if !flag.takes_value {
        return match value.to_ascii_lowercase().as_str() {
            "1" | "true" | "yes" | "on" => Ok(vec![long]),
            "" | "0" | "false" | "no" | "off" => Ok(vec![]),
            _ => Err(CliError::usage(format!(
                "invalid input: {name} is a switch: use true or false"
            ))),
        };
    }
    if flag.repeatable {
        return Ok(value
            .split(',')
            .filter(|v| !v.trim().is_empty())
            .flat_map(|v| [long.clone(), v.trim().into()])
            .collect());
    }
    Ok(vec![long, value.into()])
}

/// `args` with the flags they do not give filled in from the environment and the file.
pub fn expand(root: &Command, args: Vec<OsString>) -> CliResult<Vec<OsString>> {
    let (path, leaf) = select(root, &args);
    let flags = flags_of(leaf);
    let file = match config_path(&args) {
        Some(p) => {
            let text = std::fs::read_to_string(&p).map_err(|e| {
                CliError::usage(format!(
                    "invalid input: --config {}: {e}",
                    p.to_string_lossy()
                ))
            })?;
            Some((p.to_string_lossy().into_owned(), text))
        }
        None => None,
    };
    let doc = match &file {
        Some((name, text)) => Some(toml_edit::Document::parse(text.as_str()).map_err(|e| {
            let line = e.span().map_or(0, |s| line_of(text, s.start));
            CliError::usage(format!(
                "invalid input: {name}:{line}: not TOML: {}",
                e.message()
            ))
        })?),
        None => None,
    };
    if let (Some(doc), Some((name, text))) = (&doc, &file) {
        check_keys(root, doc.as_table(), name, text)?;
    }

    let mut extra: Vec<OsString> = Vec::new();
    let on_line: BTreeSet<&str> = flags
        .iter()
        .filter(|f| given(&args, f))
        .map(|f| f.long.as_str())
        .collect();
    for flag in &flags {
        // Given, or ruled out by a flag that is (`--admin` leaves OUTBOX_TENANT unused).
        let ruled_out = flag.conflicts.iter().any(|c| on_line.contains(c.as_str()))
            || flags
                .iter()
                .any(|g| on_line.contains(g.long.as_str()) && g.conflicts.contains(&flag.long));
        if on_line.contains(flag.long.as_str()) || ruled_out {
            continue;
        }
        let env = flag
            .own_env
            .clone()
            .unwrap_or_else(|| env_name(&flag.long).into());
        if let Some(v) = std::env::var_os(&env) {
            if flag.own_env.is_none() {
                let name = env.to_string_lossy();
                extra.extend(env_value(flag, &name, &v.to_string_lossy())?);
            }
            // clap reads its own variable.
            continue;
        }
        let (Some(doc), Some((name, text))) = (&doc, &file) else {
            continue;
        };
        // The innermost table that sets it wins: [endpoints.create] over [endpoints] over
        // the top level.
        let mut found = None;
        let mut table = Some(doc.as_table());
        let mut depth = 0;
        while let Some(t) = table {
            if let Some((key, item)) = lookup(t, &flag.long) {
                found = Some((key.span(), item));
            }
            table = path
                .get(depth)
                .and_then(|p| t.get(p))
                .and_then(|i| i.as_table());
            depth += 1;
        }
        if let Some((span, item)) = found {
            let at = || {
                format!(
                    "{name}:{}",
                    span.as_ref().map_or(0, |s| line_of(text, s.start))
                )
            };
            extra.extend(file_value(flag, item, &at)?);
        }
    }
    if extra.is_empty() {
        return Ok(args);
    }
    let mut out = args;
    let at = out.iter().position(|a| a == "--").unwrap_or(out.len());
    out.splice(at..at, extra);
    Ok(out)
}

fn lookup<'a>(
    table: &'a toml_edit::Table,
    long: &str,
) -> Option<(&'a toml_edit::Key, &'a toml_edit::Item)> {
    table
        .get_key_value(long)
        .or_else(|| table.get_key_value(&long.replace('-', "_")))
}

/// Refuse a key that is no flag of any command (top level) or of its table's command.
fn check_keys(root: &Command, top: &toml_edit::Table, name: &str, text: &str) -> CliResult<()> {
    let mut any = BTreeSet::new();
    all_longs(root, &mut any);
    check_table(root, top, &any, true, "outbox", name, text)
}

fn check_table(
    cmd: &Command,
    table: &toml_edit::Table,
    any: &BTreeSet<String>,
    top: bool,
    cmd_name: &str,
    name: &str,
    text: &str,
) -> CliResult<()> {
    let mut here = BTreeSet::new();
    all_longs(cmd, &mut here);
    for (k, item) in table.iter() {
        let key = table.key(k).expect("a key of the table");
        let line = key.span().map_or(0, |s| line_of(text, s.start));
        if let (Some(sub), Some(t)) = (cmd.find_subcommand(k), item.as_table()) {
            let sub_name = format!("{cmd_name} {}", sub.get_name());
            check_table(sub, t, any, false, &sub_name, name, text)?;
            continue;
        }
        let long = k.replace('_', "-");
        let known = if top {
            any.contains(&long)
        } else {
            here.contains(&long)
        };
        if !known {
            let whose = if top {
                "a flag of no command".to_owned()
            } else {
                format!("not a flag of `{cmd_name}`")
            };
            return Err(CliError::usage(format!(
                "invalid input: {name}:{line}: unknown key `{k}` ({whose})"
            )));
        }
    }
    Ok(())
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn env_names_are_upper_snake() {
        assert_eq!(env_name("poll-interval"), "OUTBOX_POLL_INTERVAL");
        assert_eq!(env_name("tenant"), "OUTBOX_TENANT");
    }

    #[test]
    fn lines_count_from_one() {
        let text = "a = 1\nb = 2\n";
        assert_eq!(line_of(text, 0), 1);
        assert_eq!(line_of(text, 6), 2);
    }
}
