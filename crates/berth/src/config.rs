//! Configuration for every subcommand: the TOML file, then the environment, then the command line
//! (each later layer wins), and `--print-config`; all of it derived from the clap declarations.
//!
//! One declaration per option: its `#[arg(…)]` in the Args struct of the subcommands that take it.
//! From clap's reflection (`Cli::command()`, `Arg::get_long`, `get_env`, `get_action`, the value
//! parser's type, `ArgMatches::value_source`) this module derives:
//! - the file's keys: the long names of the agent's options (the agent takes every key);
//! - which subcommand takes which key: every (sub)command with an option of the key's name, except
//!   the argument structs it declares [`CommandLineOnly`] (`berth run`'s metadata endpoint options,
//!   `berth validate`'s secret checks); so `berth cluster …` and `berth controller` take `etcd`;
//! - each key's kind: a `bool` option is a switch, a repeatable one (`KEY=VALUE`) a table, the
//!   others a value;
//! - the environment variables that beat the file (clap's `env`);
//! - `--print-config`: every key the subcommand takes, its value as clap holds it (durations and
//!   numbers typed) and, as a comment after it, the layer that set it.
//!
//! What clap has no field for is attached to the same `#[arg(…)]` as a [`Key`] (`add =
//! Key::new()…`): a file key named unlike its flag (`node-attributes` for `--node-attribute`,
//! `container-instance-tags`, `api-socket` for the client commands' `--agent`), a list the file
//! gives as an array ([`Key::list`]), the environment variables berth's own code reads besides
//! clap's (ECS's names, `DOCKER_HOST`; [`Key::env`]), and the value `--print-config` shows when
//! berth resolves it beyond clap (ECS's names and computed defaults applied; [`Key::shown`]). An
//! option whose environment value clap hides (`hide_env_values`: `engine-auth-data`) is never
//! printed.
//!
//! Adding an option: declare it with clap in the Args struct of the subcommands that take it (a
//! shared struct such as `PullArgs` when `run` and the agent both take it). When clap holds its
//! whole meaning, that is all: it is a key of the file, layered, and printed with its provenance.
//! Otherwise add `add = crate::config::Key::new()…` to the same `#[arg(…)]`. A new switch is
//! declared like the others (`action = Set, num_args = 0..=1, require_equals, default_missing_value
//! = "true"`), so `--switch=false` turns off what the file turned on.
//!
//! Why clap's reflection rather than a layering crate such as figment: the file is layered by
//! turning its keys into flags before clap parses, so every value goes through its option's own
//! value parser and a bad one is reported under the flag's name; figment would need a second
//! (serde) declaration of every option, parse values its own way, and still leave clap's defaults
//! and environment variables to reconcile with its layers. clap's `unstable-ext` feature
//! (`Arg::add`, `Command::add`) carries the facts clap has no field for; it is outside clap's
//! semver promise, so the workspace holds clap to 4.6.x.
//!
//! How: before clap parses, [`apply`] reads the file (`--config FILE`, anywhere before `--`;
//! default [`DEFAULT_CONFIG`], where a missing file is fine) and turns every key the chosen
//! subcommand takes into a flag placed right after the name of the (sub)command that declares it,
//! before the user's own flags. Clap's `args_override_self` makes the user's later flag win over an
//! injected one; a key whose environment variable is set (non-empty) is not injected, so the
//! environment wins over the file (clap, or berth's code for ECS's names, reads the variable).
//!
//! Invariants: every key of the file is checked for every subcommand (an unknown key, or a value of
//! the wrong type, is an error naming the file and the key, whichever subcommand runs); a known key
//! that does not apply to this subcommand is ignored there (`metadata-addr` means nothing to
//! `berth gc`). A subcommand that takes no key reads the file only when `--config` names it.
//!
//! Limits: a value that clap rejects is reported by clap under the flag's name. A switch that ECS's
//! variable turns on (`ECS_ENABLE_CONTAINER_METADATA=true`) stays on whatever the flag says (berth's
//! code ORs the two; `--print-config` then names the variable). Only long options take keys; the
//! subcommand walk skips a long option's separate value but not a short option's (none of berth's
//! short options takes a value).

use anyhow::Context as _;
use clap::builder::{ArgExt, CommandExt};
use clap::parser::ValueSource;
use clap::{Arg, ArgAction, ArgMatches, Command, CommandFactory as _};
use std::any::{Any, TypeId};
use std::cell::RefCell;
use std::collections::{BTreeMap, BTreeSet};
use std::ffi::OsString;
use std::path::{Path, PathBuf};
use std::rc::Rc;
use std::time::Duration;

/// The default configuration file.
pub const DEFAULT_CONFIG: &str = "/etc/berth/berth.toml";

/// What `--print-config` shows for an option instead of clap's value (`None` leaves the key out).
pub type Shown = fn(&Resolved<'_>) -> anyhow::Result<Option<toml::Value>>;

/// The facts about an option that clap has no field for, attached to its declaration:
/// `#[arg(long, …, add = crate::config::Key::new().env(&[…]).shown(…))]` (see the module header).
/// Declared on the agent's option, they hold for the key wherever it is taken (the client commands'
/// `--agent` names its key itself).
#[derive(Debug, Clone, Copy, Default)]
pub struct Key {
    name: Option<&'static str>,
    env: &'static [&'static str],
    list: bool,
    shown: Option<Shown>,
    command_line_only: bool,
}

impl ArgExt for Key {}

impl Key {
    pub const fn new() -> Self {
        Key {
            name: None,
            env: &[],
            list: false,
            shown: None,
            command_line_only: false,
        }
    }

    /// Not a key of the file: the option is read from the command line only (`--print-config`).
    pub const fn command_line_only() -> Self {
        Key {
            command_line_only: true,
            ..Key::new()
        }
    }

    /// The key in the file, when it is not the long option's name.
    pub const fn named(self, name: &'static str) -> Self {
        Key {
            name: Some(name),
            ..self
        }
    }

    /// Environment variables berth's own code reads for this option besides clap's `env` (ECS's
    /// names): any of them set (non-empty) beats the file, and `--print-config` names it.
    pub const fn env(self, names: &'static [&'static str]) -> Self {
        Key { env: names, ..self }
    }

    /// A list: the file gives an array of strings, passed to the flag as one JSON array (ECS's
    /// syntax), or one string passed as written.
    pub const fn list(self) -> Self {
        Key { list: true, ..self }
    }

    /// What `--print-config` shows: the value as berth resolves it (ECS's names, computed
    /// defaults), not as clap holds it.
    pub const fn shown(self, shown: Shown) -> Self {
        Key {
            shown: Some(shown),
            ..self
        }
    }
}

/// Declared on a subcommand's Args struct (`#[command(add =
/// crate::config::CommandLineOnly::of::<MetadataArgs>())]`): the options of that argument struct
/// (the ones it flattens included) are read from this subcommand's command line only, never from
/// the file, though the agent takes them as keys.
#[derive(Debug, Clone)]
pub struct CommandLineOnly(fn(Command) -> Command);

impl CommandExt for CommandLineOnly {}

impl CommandLineOnly {
    pub fn of<T: clap::Args>() -> Self {
        CommandLineOnly(T::augment_args)
    }

    /// The ids of the options of the argument struct.
    fn ids(&self) -> BTreeSet<String> {
        (self.0)(Command::new("probe"))
            .get_arguments()
            .map(|a| a.get_id().to_string())
            .collect()
    }
}

/// What a key's value must be in the file, and how it becomes a flag.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
enum Kind {
    /// A string or an integer, passed as `--flag=VALUE`.
    Value,
    /// A boolean switch: `true` passes `--flag`, `false` `--flag=false`.
    Switch,
    /// A list of strings (or one string), passed as `--flag=["a","b"]` (JSON, ECS's syntax).
    List,
    /// A table of strings, passed as one `--flag=KEY=VALUE` per entry (tags, node attributes).
    Map,
}

/// One key of the file: one of the agent's options.
struct Def {
    name: String,
    kind: Kind,
    /// Clap's environment variable and the [`Key::env`] ones: any set (non-empty) beats the file.
    env: Vec<String>,
    key: Key,
    /// Never printed (clap hides its environment value).
    secret: bool,
}

/// The facts attached to `arg` (none: the defaults).
fn key_of(arg: &Arg) -> Key {
    arg.get::<Key>().copied().unwrap_or_default()
}

/// The file key `arg` stands for, if any: its [`Key::named`] name, else its long name.
fn file_name(arg: &Arg) -> Option<&str> {
    let key = key_of(arg);
    if key.command_line_only {
        return None;
    }
    key.name.or_else(|| arg.get_long())
}

fn kind_of(arg: &Arg, key: &Key) -> Kind {
    if key.list {
        Kind::List
    } else if matches!(arg.get_action(), ArgAction::Append) {
        Kind::Map
    } else if matches!(arg.get_action(), ArgAction::SetTrue | ArgAction::SetFalse)
        || arg.get_value_parser().type_id() == TypeId::of::<bool>()
    {
        Kind::Switch
    } else {
        Kind::Value
    }
}

/// Every key of the file, in the order the agent declares its options.
fn catalog(root: &Command) -> Vec<Def> {
    let Some(agent) = root.find_subcommand("agent") else {
        return Vec::new();
    };
    agent
        .get_arguments()
        .filter_map(|arg| {
            let name = file_name(arg)?.to_owned();
            let key = key_of(arg);
            let mut env: Vec<String> = arg
                .get_env()
                .map(|v| v.to_string_lossy().into_owned())
                .into_iter()
                .collect();
            env.extend(key.env.iter().map(|v| v.to_string()));
            Some(Def {
                name,
                kind: kind_of(arg, &key),
                env,
                key,
                secret: arg.is_hide_env_values_set(),
            })
        })
        .collect()
}

/// The keys `cmd` takes itself: each key's index in `defs`, with `cmd`'s option for it.
fn taken_by<'c>(cmd: &'c Command, defs: &[Def]) -> Vec<(usize, &'c Arg)> {
    let command_line_only = cmd
        .get::<CommandLineOnly>()
        .map(CommandLineOnly::ids)
        .unwrap_or_default();
    cmd.get_arguments()
        .filter(|a| !command_line_only.contains(a.get_id().as_str()) && a.get_long().is_some())
        .filter_map(|a| {
            let name = file_name(a)?;
            Some((defs.iter().position(|d| d.name == name)?, a))
        })
        .collect()
}

/// Whether `--long VALUE` takes the next word as its value somewhere along `path`.
fn takes_separate_value(path: &[&Command], long: &str) -> bool {
    path.iter().flat_map(|c| c.get_arguments()).any(|a| {
        (a.get_long() == Some(long) || a.get_all_aliases().into_iter().flatten().any(|x| x == long))
            && a.get_action().takes_values()
            && !a.is_require_equals_set()
    })
}

/// The subcommands named on the command line, outermost first, each with the index of its name
/// in `argv`.
fn subcommand_path<'c>(argv: &[OsString], root: &'c Command) -> Vec<(usize, &'c Command)> {
    let mut path: Vec<(usize, &Command)> = Vec::new();
    let mut i = 1;
    while i < argv.len() {
        let Some(a) = argv[i].to_str() else { break };
        if a == "--" {
            break;
        }
        if let Some(long) = a.strip_prefix("--") {
            let mut along: Vec<&Command> = vec![root];
            along.extend(path.iter().map(|(_, c)| *c));
            if !long.contains('=') && takes_separate_value(&along, long) {
                i += 1;
            }
            i += 1;
            continue;
        }
        if a.starts_with('-') {
            i += 1;
            continue;
        }
        let current = path.last().map_or(root, |(_, c)| *c);
        match current.find_subcommand(a) {
            Some(sub) => path.push((i, sub)),
            None => break,
        }
        i += 1;
    }
    path
}

/// Where the subcommand's name is in `argv` (the first word after the program that is neither an
/// option nor the value of `--config`), if any.
fn subcommand_at(argv: &[OsString]) -> Option<usize> {
    let mut i = 1;
    while i < argv.len() {
        let a = argv[i].to_str()?;
        if a == "--" {
            return None;
        }
        if a == "--config" {
            i += 2;
            continue;
        }
        if !a.starts_with('-') {
            return Some(i);
        }
        i += 1;
    }
    None
}

/// The file given with `--config FILE` or `--config=FILE`, anywhere before `--`.
fn explicit_config(argv: &[OsString]) -> Option<PathBuf> {
    let args = argv.get(1..)?;
    for (i, a) in args.iter().enumerate() {
        let Some(a) = a.to_str() else { continue };
        if a == "--" {
            break;
        }
        if let Some(v) = a.strip_prefix("--config=") {
            return Some(PathBuf::from(v));
        }
        if a == "--config" {
            return args.get(i + 1).map(PathBuf::from);
        }
    }
    None
}

/// The command line with the file layered in, and what `--print-config` needs to say where each
/// value came from.
pub struct Layering {
    /// The command line clap parses: the user's, with the file's keys injected.
    pub argv: Vec<OsString>,
    /// The user's own command line.
    user: Vec<OsString>,
    /// The file the keys came from (None when none was read).
    file: Option<PathBuf>,
}

impl Layering {
    fn unchanged(argv: Vec<OsString>) -> Self {
        Layering {
            user: argv.clone(),
            argv,
            file: None,
        }
    }

    /// Whether the user's own command line gives `arg` (by its long name or an alias).
    fn user_gave(&self, arg: &Arg) -> bool {
        let names: Vec<&str> = arg
            .get_long()
            .into_iter()
            .chain(arg.get_all_aliases().into_iter().flatten())
            .collect();
        self.user
            .iter()
            .skip(1)
            .filter_map(|a| a.to_str())
            .take_while(|a| *a != "--")
            .filter_map(|a| a.strip_prefix("--"))
            .any(|a| {
                let name = a.split_once('=').map_or(a, |(n, _)| n);
                names.contains(&name)
            })
    }
}

/// Layer the configuration file under the environment and the command line (see the module
/// header). `argv` is the whole command line, program name first.
pub fn apply(argv: Vec<OsString>) -> anyhow::Result<Layering> {
    layering(
        argv,
        |path| std::fs::read_to_string(path),
        |var| std::env::var_os(var).is_some_and(|v| !v.is_empty()),
    )
}

/// [`apply`] with the file reader and the environment given (for tests).
fn layering(
    argv: Vec<OsString>,
    read: impl Fn(&Path) -> std::io::Result<String>,
    env_set: impl Fn(&str) -> bool,
) -> anyhow::Result<Layering> {
    let Some(pos) = subcommand_at(&argv) else {
        return Ok(Layering::unchanged(argv));
    };
    if argv[pos] == "help" {
        return Ok(Layering::unchanged(argv));
    }
    let root = crate::Cli::command();
    let defs = catalog(&root);
    // Each key the command line's subcommands take: the argv index after which its flag goes
    // (the name of the outermost subcommand that declares it) and the flag.
    let mut applies: BTreeMap<usize, (usize, &str)> = BTreeMap::new();
    for (at, cmd) in subcommand_path(&argv, &root) {
        for (def, arg) in taken_by(cmd, &defs) {
            if let Some(long) = arg.get_long() {
                applies.entry(def).or_insert((at, long));
            }
        }
    }
    let explicit = explicit_config(&argv);
    // A subcommand that takes no key (completions, volume-plugin) does not read the default file
    // at all: a broken /etc/berth/berth.toml must not break them.
    if applies.is_empty() && explicit.is_none() {
        return Ok(Layering::unchanged(argv));
    }
    let path = explicit
        .clone()
        .unwrap_or_else(|| PathBuf::from(DEFAULT_CONFIG));
    let text = match read(&path) {
        Ok(t) => t,
        Err(e) if e.kind() == std::io::ErrorKind::NotFound && explicit.is_none() => {
            return Ok(Layering::unchanged(argv));
        }
        Err(e) => anyhow::bail!("cannot read the configuration file {}: {e}", path.display()),
    };
    let table: toml::Table = text
        .parse()
        .with_context(|| format!("{} is not valid TOML", path.display()))?;
    let mut injected: BTreeMap<usize, Vec<OsString>> = BTreeMap::new();
    for (name, value) in &table {
        let Some(index) = defs.iter().position(|d| &d.name == name) else {
            let known: Vec<&str> = defs.iter().map(|d| d.name.as_str()).collect();
            anyhow::bail!(
                "{}: unknown option {name:?} (known: {})",
                path.display(),
                known.join(", ")
            );
        };
        let def = &defs[index];
        let flags = values(def, value)
            .map_err(|why| anyhow::anyhow!("{}: option {name:?}{why}", path.display()))?;
        let Some((at, long)) = applies.get(&index) else {
            continue;
        };
        if def.env.iter().any(|v| env_set(v)) {
            continue;
        }
        let slot = injected.entry(*at).or_default();
        for value in flags {
            slot.push(match value {
                Some(v) => format!("--{long}={v}").into(),
                None => format!("--{long}").into(),
            });
        }
    }
    let mut out: Vec<OsString> = Vec::with_capacity(argv.len());
    for (i, a) in argv.iter().enumerate() {
        out.push(a.clone());
        if let Some(flags) = injected.remove(&i) {
            out.extend(flags);
        }
    }
    Ok(Layering {
        argv: out,
        user: argv,
        file: Some(path),
    })
}

/// The flag values a file value gives `def` (`None`: the flag alone), or why it is of the wrong
/// type (the text after the option's name in the error).
fn values(def: &Def, value: &toml::Value) -> Result<Vec<Option<String>>, String> {
    let name = &def.name;
    match (def.kind, value) {
        (Kind::Switch, toml::Value::Boolean(true)) => Ok(vec![None]),
        (Kind::Switch, toml::Value::Boolean(false)) => Ok(vec![Some("false".into())]),
        (Kind::Switch, other) => Err(format!(
            " must be a boolean (true or false), found {}",
            other.type_str()
        )),
        (Kind::Value, toml::Value::String(s)) => Ok(vec![Some(s.clone())]),
        (Kind::Value, toml::Value::Integer(n)) => Ok(vec![Some(n.to_string())]),
        (Kind::Value, other) => Err(format!(
            " must be a string or a number, found {}",
            other.type_str()
        )),
        (Kind::List, toml::Value::String(s)) => Ok(vec![Some(s.clone())]),
        (Kind::List, toml::Value::Array(items)) => {
            let mut names = Vec::new();
            for item in items {
                match item {
                    toml::Value::String(s) => names.push(s.clone()),
                    other => {
                        return Err(format!(
                            " must be a list of strings, found a list holding {}",
                            other.type_str()
                        ));
                    }
                }
            }
            serde_json::to_string(&names)
                .map(|json| vec![Some(json)])
                .map_err(|e| format!(": {e}"))
        }
        (Kind::List, other) => Err(format!(
            " must be a list of strings (or one string), found {}",
            other.type_str()
        )),
        (Kind::Map, toml::Value::Table(entries)) => entries
            .iter()
            .map(|(k, v)| match v {
                toml::Value::String(v) => Ok(Some(format!("{k}={v}"))),
                other => Err(format!(
                    ": the value of {k:?} must be a string, found {}",
                    other.type_str()
                )),
            })
            .collect(),
        (Kind::Map, other) => Err(format!(
            " must be a table of strings (e.g. {name} = {{ rack = \"r1\" }}), found {}",
            other.type_str()
        )),
    }
}

/// One option's value while `--print-config` resolves it (what a [`Shown`] function gets).
pub struct Resolved<'a> {
    matches: &'a ArgMatches,
    id: &'a str,
    /// Resolutions several keys share, computed once per printing ([`Resolved::once`]).
    memo: &'a RefCell<Vec<Rc<dyn Any>>>,
}

impl<'a> Resolved<'a> {
    /// This option's value as clap parsed it (None when it has none).
    pub fn value<T: Any + Clone + Send + Sync + 'static>(&self) -> Option<&'a T> {
        self.matches.try_get_one::<T>(self.id).ok().flatten()
    }

    /// The argument struct this option belongs to, parsed from the same matches, once.
    pub fn args<T: clap::FromArgMatches + 'static>(&self) -> anyhow::Result<Rc<T>> {
        self.once(|m| Ok(T::from_arg_matches(m)?))
    }

    /// `resolve`'s answer, computed once per printing for each answer type: the first key that
    /// needs it computes it (and logs what it warns about once), the others reuse it.
    pub fn once<T: 'static>(
        &self,
        resolve: impl FnOnce(&ArgMatches) -> anyhow::Result<T>,
    ) -> anyhow::Result<Rc<T>> {
        let hit = self
            .memo
            .borrow()
            .iter()
            .find_map(|v| v.clone().downcast::<T>().ok());
        if let Some(hit) = hit {
            return Ok(hit);
        }
        let answer = Rc::new(resolve(self.matches)?);
        self.memo.borrow_mut().push(answer.clone());
        Ok(answer)
    }
}

/// A duration as the file writes it (`1h 30m`).
pub fn duration(d: Duration) -> toml::Value {
    humantime::format_duration(d).to_string().into()
}

/// A list of strings as the file writes it.
pub fn strings<S: Into<String>>(items: impl IntoIterator<Item = S>) -> toml::Value {
    toml::Value::Array(
        items
            .into_iter()
            .map(|s| toml::Value::String(s.into()))
            .collect(),
    )
}

/// [`Shown`] for an option whose type prints itself in the file's syntax (its `Display`), so
/// `--print-config` shows it normalized (`off`, `40/60`) rather than as written.
pub fn display<T: std::fmt::Display + Any + Clone + Send + Sync + 'static>(
    r: &Resolved<'_>,
) -> anyhow::Result<Option<toml::Value>> {
    Ok(r.value::<T>().map(|v| v.to_string().into()))
}

/// The value clap holds for the option: a table for a repeatable `KEY=VALUE` option, a duration
/// as the file writes it, numbers and booleans typed, anything else as given.
fn clap_value(r: &Resolved<'_>, kind: Kind) -> Option<toml::Value> {
    fn int<T: Copy + TryInto<i64> + Any + Clone + Send + Sync + 'static>(
        r: &Resolved<'_>,
    ) -> Option<toml::Value> {
        r.value::<T>()
            .map(|n| toml::Value::Integer((*n).try_into().unwrap_or(i64::MAX)))
    }
    if kind == Kind::Map {
        let table: toml::Table = r
            .matches
            .get_raw(r.id)?
            .filter_map(|v| v.to_str()?.split_once('='))
            .map(|(k, v)| (k.to_owned(), toml::Value::from(v)))
            .collect();
        return (!table.is_empty()).then(|| table.into());
    }
    if let Some(d) = r.value::<Duration>() {
        return Some(duration(*d));
    }
    if let Some(b) = r.value::<bool>() {
        return Some((*b).into());
    }
    int::<u8>(r)
        .or_else(|| int::<u16>(r))
        .or_else(|| int::<u32>(r))
        .or_else(|| int::<u64>(r))
        .or_else(|| int::<usize>(r))
        .or_else(|| int::<i32>(r))
        .or_else(|| int::<i64>(r))
        .or_else(|| {
            let raw = r.matches.get_raw(r.id)?.next()?;
            Some(raw.to_string_lossy().into_owned().into())
        })
}

/// The first of `names` set (non-empty) in the environment.
fn set_in_env(names: &[&'static str]) -> Option<&'static str> {
    names
        .iter()
        .copied()
        .find(|v| std::env::var_os(v).is_some_and(|x| !x.is_empty()))
}

/// Where the value of `arg` came from, in `--print-config`'s words.
fn provenance(
    m: &ArgMatches,
    arg: &Arg,
    def: &Def,
    layering: &Layering,
    shown_differs: bool,
) -> String {
    let ecs = set_in_env(def.key.env);
    let long = arg.get_long().unwrap_or_default();
    match (m.value_source(arg.get_id().as_str()), ecs) {
        // berth's code read ECS's variable over what clap holds (a switch it turned on).
        (_, Some(var)) if shown_differs => format!("environment {var}"),
        (Some(ValueSource::CommandLine), _) => match &layering.file {
            Some(file) if !layering.user_gave(arg) => format!("file {}", file.display()),
            _ => format!("flag --{long}"),
        },
        (Some(ValueSource::EnvVariable), _) => format!(
            "environment {}",
            arg.get_env()
                .map(|v| v.to_string_lossy().into_owned())
                .unwrap_or_default()
        ),
        (_, Some(var)) => format!("environment {var}"),
        _ => "default".to_string(),
    }
}

/// `--print-config`: every key the subcommand takes, as it resolved (file, then environment,
/// then flags), one `key = value  # where it came from` line each in key order. The text is
/// TOML (the provenance is comments), so it can serve as a configuration file.
pub fn print(matches: &ArgMatches, layering: &Layering) -> anyhow::Result<String> {
    let root = crate::Cli::command();
    let defs = catalog(&root);
    let memo = RefCell::new(Vec::new());
    let mut lines: BTreeMap<&str, String> = BTreeMap::new();
    let mut names = Vec::new();
    let (mut cmd, mut m) = (&root, matches);
    while let Some((name, sub)) = m.subcommand() {
        let Some(next) = cmd.find_subcommand(name) else {
            break;
        };
        (cmd, m) = (next, sub);
        names.push(name);
        for (index, arg) in taken_by(cmd, &defs) {
            let def = &defs[index];
            if def.secret {
                continue;
            }
            let r = Resolved {
                matches: m,
                id: arg.get_id().as_str(),
                memo: &memo,
            };
            let held = clap_value(&r, def.kind);
            let value = match def.key.shown {
                Some(shown) => shown(&r)?,
                None => held.clone(),
            };
            let Some(value) = value else { continue };
            let differs = def.kind == Kind::Switch && held.as_ref() != Some(&value);
            let from = provenance(m, arg, def, layering, differs);
            lines.insert(&def.name, format!("{} = {value}  # {from}\n", def.name));
        }
    }
    let mut out = format!(
        "# berth {}: the effective configuration (the file, then the environment, then flags);\n# after each value, the layer that set it.\n",
        names.join(" ")
    );
    out.extend(lines.into_values());
    Ok(out)
}

/// `--print-config`'s text for a command line as given (no file: every flag is the user's).
#[cfg(test)]
pub(crate) fn printed(args: &[&str]) -> String {
    let layering = Layering::unchanged(args.iter().map(OsString::from).collect());
    let m = crate::Cli::command()
        .try_get_matches_from(layering.argv.clone())
        .expect("clap accepts it");
    print(&m, &layering).expect("printed")
}

#[cfg(test)]
mod tests {
    use super::*;
    use clap::Parser as _;

    /// [`layering`]'s command line.
    fn layer(
        argv: Vec<OsString>,
        read: impl Fn(&Path) -> std::io::Result<String>,
        env_set: impl Fn(&str) -> bool,
    ) -> anyhow::Result<Vec<OsString>> {
        Ok(layering(argv, read, env_set)?.argv)
    }

    fn os(args: &[&str]) -> Vec<OsString> {
        args.iter().map(OsString::from).collect()
    }

    fn strs(argv: &[OsString]) -> Vec<&str> {
        argv.iter().filter_map(|a| a.to_str()).collect()
    }

    /// `layer` with `file` as the content of every configuration file and `env` the variables set.
    fn layered(args: &[&str], file: &str, env: &[&str]) -> anyhow::Result<Vec<OsString>> {
        let file = file.to_string();
        layer(
            os(args),
            move |_| Ok(file.clone()),
            |v: &str| env.contains(&v),
        )
    }

    fn agent(argv: Vec<OsString>) -> crate::agent::Args {
        match crate::Cli::try_parse_from(argv).map(|c| c.command) {
            Ok(crate::Command::Agent(a)) => a,
            other => panic!("not the agent: {other:?}"),
        }
    }

    /// Tests that set process environment variables hold this lock.
    static ENV: std::sync::Mutex<()> = std::sync::Mutex::new(());

    #[test]
    fn file_values_come_before_the_users_flags_which_win() {
        let argv = layered(
            &["berth", "agent", "--cleanup-wait", "30s"],
            "cleanup-wait = \"10m\"\npull-attempts = 3\npull-dependent-upfront = true\n",
            &[],
        )
        .expect("layered");
        assert_eq!(
            strs(&argv),
            [
                "berth",
                "agent",
                "--cleanup-wait=10m",
                "--pull-attempts=3",
                "--pull-dependent-upfront",
                "--cleanup-wait",
                "30s"
            ]
        );
        let a = agent(argv);
        assert_eq!(
            a.cleanup_wait,
            Some(Duration::from_secs(30)),
            "the flag wins"
        );
        assert_eq!(a.pull.pull_attempts, 3, "the file fills in the rest");
        assert!(a.pull.pull_dependent_upfront);
    }

    #[test]
    fn the_introspection_address_layers_and_prints_like_the_other_keys() {
        use crate::agent::introspection::IntrospectionAddr;
        let a = agent(os(&["berth", "agent"]));
        assert_eq!(
            a.introspection_addr,
            IntrospectionAddr::Listen("127.0.0.1:51678".parse().expect("addr")),
            "ECS's port on loopback by default"
        );
        let argv =
            layered(&["berth", "agent"], "introspection-addr = \"off\"\n", &[]).expect("layered");
        assert_eq!(strs(&argv), ["berth", "agent", "--introspection-addr=off"]);
        let a = agent(argv.clone());
        assert_eq!(a.introspection_addr, IntrospectionAddr::Off);
        let printed: toml::Table = printed(&strs(&argv)).parse().expect("TOML");
        assert_eq!(printed["introspection-addr"].as_str(), Some("off"));
        let argv = layered(
            &["berth", "agent"],
            "introspection-addr = \"off\"\n",
            &["BERTH_INTROSPECTION_ADDR"],
        )
        .expect("layered");
        assert_eq!(strs(&argv), ["berth", "agent"], "the environment wins");
        let err =
            crate::Cli::try_parse_from(os(&["berth", "agent", "--introspection-addr", "51678"]))
                .map(|_| ())
                .expect_err("a port alone is refused");
        let text = err.to_string();
        assert!(text.contains("--introspection-addr"), "{text}");
        assert!(
            text.contains("127.0.0.1:51678") && text.contains("off"),
            "{text}"
        );
    }

    #[test]
    fn the_container_metadata_keys_reach_run_and_the_agent() {
        let file = "container-metadata = true\nhost-private-ipv4-address = \"10.0.0.5\"\n";
        for sub in ["run", "agent"] {
            let argv = layered(&["berth", sub], file, &[]).expect("layered");
            assert_eq!(
                strs(&argv),
                [
                    "berth",
                    sub,
                    "--container-metadata",
                    "--host-private-ipv4-address=10.0.0.5"
                ]
            );
            // ECS's variable set: left to the environment.
            let argv = layered(&["berth", sub], file, &["ECS_ENABLE_CONTAINER_METADATA"])
                .expect("layered");
            assert_eq!(
                strs(&argv),
                ["berth", sub, "--host-private-ipv4-address=10.0.0.5"]
            );
        }
        let a = agent(layered(&["berth", "agent"], file, &[]).expect("layered"));
        assert!(a.container_metadata.container_metadata);
        assert_eq!(
            a.container_metadata.host_private_ipv4_address,
            Some(std::net::Ipv4Addr::new(10, 0, 0, 5))
        );
    }

    #[test]
    fn the_environment_beats_the_file() {
        let file = "cleanup-wait = \"10m\"\npull-behavior = \"once\"\n";
        let argv = layered(
            &["berth", "agent"],
            file,
            &["ECS_ENGINE_TASK_CLEANUP_WAIT_DURATION"],
        )
        .expect("layered");
        assert_eq!(
            strs(&argv),
            ["berth", "agent", "--pull-behavior=once"],
            "a key whose variable is set is left to the environment"
        );
        let argv =
            layered(&["berth", "agent"], file, &["BERTH_IMAGE_PULL_BEHAVIOR"]).expect("layered");
        assert_eq!(strs(&argv), ["berth", "agent", "--cleanup-wait=10m"]);
    }

    #[test]
    fn registry_login_keys_layer_like_the_others() {
        let file = "engine-auth-type = \"docker\"\nengine-auth-data = '{\"h:1\": {\"username\": \"u\", \"password\": \"p\"}}'\ndocker-config = \"/etc/berth/docker.json\"\n";
        let argv = layered(&["berth", "run", "t.json"], file, &[]).expect("layered");
        assert_eq!(
            strs(&argv),
            [
                "berth",
                "run",
                "--docker-config=/etc/berth/docker.json",
                "--engine-auth-data={\"h:1\": {\"username\": \"u\", \"password\": \"p\"}}",
                "--engine-auth-type=docker",
                "t.json"
            ]
        );
        crate::Cli::try_parse_from(argv).expect("clap accepts it");
        let argv = layered(
            &["berth", "agent"],
            file,
            &["ECS_ENGINE_AUTH_TYPE", "ECS_ENGINE_AUTH_DATA"],
        )
        .expect("layered");
        assert_eq!(
            strs(&argv),
            ["berth", "agent", "--docker-config=/etc/berth/docker.json"],
            "ECS's variables beat the file"
        );
    }

    #[test]
    fn container_instance_tags_are_a_table_given_as_one_flag_each() {
        let file = "container-instance-tags = { rack = \"r1\", \"os family\" = \"linux\" }\n";
        let argv = layered(&["berth", "agent"], file, &[]).expect("layered");
        assert_eq!(
            strs(&argv),
            [
                "berth",
                "agent",
                "--container-instance-tag=os family=linux",
                "--container-instance-tag=rack=r1"
            ]
        );
        let tags = agent(argv).instance_tags.container_instance_tags;
        assert_eq!(tags.len(), 2);
        // ECS's variable beats the file; `berth run` takes no instance tags from the file.
        let argv =
            layered(&["berth", "agent"], file, &["ECS_CONTAINER_INSTANCE_TAGS"]).expect("layered");
        assert_eq!(strs(&argv), ["berth", "agent"]);
        let argv = layered(&["berth", "run", "t.json"], file, &[]).expect("layered");
        assert_eq!(strs(&argv), ["berth", "run", "t.json"]);
        let err = layered(
            &["berth", "agent"],
            "container-instance-tags = [\"a=b\"]\n",
            &[],
        )
        .expect_err("a list is no table");
        assert!(
            err.to_string().contains("must be a table of strings"),
            "{err}"
        );
        let err = layered(
            &["berth", "agent"],
            "container-instance-tags = { n = 1 }\n",
            &[],
        )
        .expect_err("values are strings");
        assert!(err.to_string().contains("\"n\" must be a string"), "{err}");
    }

    #[test]
    fn a_flag_beats_the_environment() {
        let _env = ENV.lock().unwrap_or_else(|e| e.into_inner());
        // SAFETY: only this module's tests set variables, one at a time under `ENV`; the crate's
        // other unit tests read the environment through std, whose own lock orders them.
        unsafe { std::env::set_var("BERTH_CLEANUP_WAIT", "20m") };
        let from_env = agent(layered(&["berth", "agent"], "", &[]).expect("layered"));
        let from_flag =
            agent(layered(&["berth", "agent", "--cleanup-wait=30s"], "", &[]).expect("layered"));
        // SAFETY: as above.
        unsafe { std::env::remove_var("BERTH_CLEANUP_WAIT") };
        assert_eq!(from_env.cleanup_wait, Some(Duration::from_secs(20 * 60)));
        assert_eq!(from_flag.cleanup_wait, Some(Duration::from_secs(30)));
    }

    #[test]
    fn docker_timeout_keys_layer_for_run_and_the_agent() {
        let file = "docker-timeout = \"45s\"\ndocker-volume-timeout = \"10m\"\n";
        let a = agent(layered(&["berth", "agent"], file, &[]).expect("layered"));
        assert_eq!(a.docker_timeouts.docker_timeout, Duration::from_secs(45));
        assert_eq!(
            a.docker_timeouts.docker_volume_timeout,
            Duration::from_secs(600)
        );
        let argv = layered(&["berth", "run", "t.json"], file, &[]).expect("layered");
        match crate::Cli::try_parse_from(argv).map(|c| c.command) {
            Ok(crate::Command::Run(r)) => {
                assert_eq!(r.docker_timeouts.docker_timeout, Duration::from_secs(45));
                assert_eq!(
                    r.docker_timeouts.docker_volume_timeout,
                    Duration::from_secs(600)
                );
            }
            other => panic!("not run: {other:?}"),
        }
        let argv =
            layered(&["berth", "agent"], file, &["BERTH_DOCKER_VOLUME_TIMEOUT"]).expect("layered");
        assert_eq!(
            strs(&argv),
            ["berth", "agent", "--docker-timeout=45s"],
            "the variable beats the file"
        );
        let d = agent(layered(&["berth", "agent"], "", &[]).expect("layered"));
        assert_eq!(
            (
                d.docker_timeouts.docker_timeout,
                d.docker_timeouts.docker_volume_timeout
            ),
            (Duration::from_secs(30), Duration::from_secs(300)),
            "ECS's defaults"
        );
        let err = crate::Cli::try_parse_from(["berth", "agent", "--docker-timeout", "0s"])
            .expect_err("zero");
        assert!(
            err.to_string().contains("--docker-timeout") && err.to_string().contains("above zero"),
            "{err}"
        );
    }

    #[test]
    fn an_unknown_key_names_the_file_and_the_known_keys() {
        for sub in ["agent", "gc", "validate"] {
            let err = layered(
                &["berth", sub, "--config", "/x/b.toml"],
                "cleanup_wait = 1\n",
                &[],
            )
            .expect_err("unknown key");
            let msg = format!("{err:#}");
            assert!(
                msg.starts_with("/x/b.toml: unknown option \"cleanup_wait\" (known: data-dir, api-socket, docker-host, cleanup-wait,"),
                "{sub}: {msg}"
            );
        }
    }

    #[test]
    fn a_subcommand_without_keys_does_not_read_a_broken_default_file() {
        let argv = layered(&["berth", "completions", "bash"], "cleanup-wait = \n", &[])
            .expect("the default file is not read");
        assert_eq!(strs(&argv), ["berth", "completions", "bash"]);
        let err = layered(
            &["berth", "validate", "--config", "/x/b.toml", "t.json"],
            "cleanup-wait = \n",
            &[],
        )
        .expect_err("a file named with --config is checked");
        assert!(format!("{err:#}").starts_with("/x/b.toml is not valid TOML"));
    }

    #[test]
    fn a_value_of_the_wrong_type_is_an_error_naming_the_key() {
        let err = layered(
            &["berth", "agent"],
            "pull-dependent-upfront = \"yes\"\n",
            &[],
        )
        .expect_err("wrong type");
        assert_eq!(
            format!("{err:#}"),
            "/etc/berth/berth.toml: option \"pull-dependent-upfront\" must be a boolean (true or false), found string"
        );
        let err =
            layered(&["berth", "ps"], "cleanup-wait = [\"1m\"]\n", &[]).expect_err("wrong type");
        assert_eq!(
            format!("{err:#}"),
            "/etc/berth/berth.toml: option \"cleanup-wait\" must be a string or a number, found array"
        );
        let err = layered(&["berth", "agent"], "cleanup-wait = \n", &[]).expect_err("not TOML");
        assert!(format!("{err:#}").starts_with("/etc/berth/berth.toml is not valid TOML"));
    }

    #[test]
    fn each_subcommand_takes_the_keys_that_apply_to_it() {
        let file = "data-dir = \"/d\"\napi-socket = \"/s.sock\"\nmetadata-addr = \"127.0.0.1:1\"\npull-attempts = 2\ndocker-host = \"unix:///d.sock\"\nlog-driver-fallback = \"local\"\n";
        let cases: &[(&[&str], &[&str])] = &[
            (
                &["berth", "run", "t.json"],
                &[
                    "berth",
                    "run",
                    "--data-dir=/d",
                    "--docker-host=unix:///d.sock",
                    "--log-driver-fallback=local",
                    "--pull-attempts=2",
                    "t.json",
                ],
            ),
            (
                &["berth", "gc", "--dry-run"],
                &[
                    "berth",
                    "gc",
                    "--data-dir=/d",
                    "--docker-host=unix:///d.sock",
                    "--dry-run",
                ],
            ),
            (
                &["berth", "ps", "-a"],
                &["berth", "ps", "--agent=/s.sock", "-a"],
            ),
            (
                &["berth", "logs", "T", "c"],
                &[
                    "berth",
                    "logs",
                    "--agent=/s.sock",
                    "--docker-host=unix:///d.sock",
                    "T",
                    "c",
                ],
            ),
            (
                &["berth", "validate", "t.json"],
                &["berth", "validate", "--log-driver-fallback=local", "t.json"],
            ),
            (&["berth", "--version"], &["berth", "--version"]),
        ];
        // In the file's key order (toml sorts the table).
        for (args, want) in cases {
            let argv = layered(args, file, &[]).expect("layered");
            assert_eq!(strs(&argv), *want);
            if args[1] != "--version" {
                crate::Cli::try_parse_from(argv).expect("clap accepts it");
            }
        }
    }

    /// The log options of the subcommands that resolve task definitions.
    fn log_args(argv: Vec<OsString>) -> crate::log_policy::LogArgs {
        match crate::Cli::try_parse_from(argv).map(|c| c.command) {
            Ok(crate::Command::Agent(a)) => a.logs,
            Ok(crate::Command::Run(a)) => a.logs,
            Ok(crate::Command::Validate(a)) => a.logs,
            other => panic!("not a resolving subcommand: {other:?}"),
        }
    }

    #[test]
    fn validate_run_and_the_agent_take_the_same_log_driver_keys() {
        let file = "available-log-drivers = [\"json-file\", \"syslog\"]\nlog-driver-fallback = \"local\"\n";
        for args in [
            &["berth", "validate", "t.json"][..],
            &["berth", "run", "t.json"][..],
            &["berth", "agent"][..],
        ] {
            let argv = layered(args, file, &[]).expect("layered");
            assert!(
                strs(&argv).contains(&r#"--available-log-drivers=["json-file","syslog"]"#),
                "{argv:?}"
            );
            let policy = log_args(argv).policy().expect("policy");
            assert_eq!(
                policy.available().collect::<Vec<_>>(),
                ["json-file", "syslog"]
            );
            assert_eq!(policy.fallback().as_str(), "local");
        }
        // A string is taken as written (ECS's JSON, or commas).
        let argv = layered(
            &["berth", "validate", "t.json"],
            "available-log-drivers = \"json-file,gelf\"\n",
            &[],
        )
        .expect("layered");
        let policy = log_args(argv).policy().expect("policy");
        assert_eq!(
            policy.available().collect::<Vec<_>>(),
            ["gelf", "json-file"]
        );
        // ECS's variable beats the file.
        let argv = layered(
            &["berth", "agent"],
            file,
            &["ECS_AVAILABLE_LOGGING_DRIVERS"],
        )
        .expect("layered");
        assert_eq!(
            strs(&argv),
            ["berth", "agent", "--log-driver-fallback=local"]
        );
        let err = layered(
            &["berth", "run", "t.json"],
            "available-log-drivers = [1]\n",
            &[],
        )
        .expect_err("not strings");
        assert_eq!(
            format!("{err:#}"),
            "/etc/berth/berth.toml: option \"available-log-drivers\" must be a list of strings, found a list holding integer"
        );
        let err =
            layered(&["berth", "gc"], "available-log-drivers = 3\n", &[]).expect_err("not a list");
        assert_eq!(
            format!("{err:#}"),
            "/etc/berth/berth.toml: option \"available-log-drivers\" must be a list of strings (or one string), found integer"
        );
    }

    #[test]
    fn ecs_available_logging_drivers_is_read_unless_a_flag_is_given() {
        let _env = ENV.lock().unwrap_or_else(|e| e.into_inner());
        let with_env = |value: &str, args: &[&str]| {
            // SAFETY: as in a_flag_beats_the_environment.
            unsafe { std::env::set_var("ECS_AVAILABLE_LOGGING_DRIVERS", value) };
            let result = log_args(layered(args, "", &[]).expect("layered")).policy();
            // SAFETY: as above.
            unsafe { std::env::remove_var("ECS_AVAILABLE_LOGGING_DRIVERS") };
            result
        };
        let p = with_env(
            r#"["json-file","awslogs"]"#,
            &["berth", "validate", "t.json"],
        )
        .expect("policy");
        assert_eq!(p.available().collect::<Vec<_>>(), ["awslogs", "json-file"]);
        let p = with_env(
            r#"["awslogs"]"#,
            &["berth", "agent", "--available-log-drivers=syslog"],
        )
        .expect("policy");
        assert_eq!(
            p.available().collect::<Vec<_>>(),
            ["syslog"],
            "the flag wins"
        );
        let err = with_env(r#"["json-file""#, &["berth", "run", "t.json"]).expect_err("bad JSON");
        assert!(
            format!("{err:#}").starts_with(
                "ECS_AVAILABLE_LOGGING_DRIVERS=[\"json-file\": expected a JSON list of log driver names"
            ),
            "{err:#}"
        );
        let p = with_env("", &["berth", "run", "t.json"]).expect("empty is unset");
        assert_eq!(p, berth_model::logging::LogPolicy::default());
    }

    #[test]
    fn config_is_found_before_or_after_the_subcommand() {
        let read = |p: &Path| match p.to_str() {
            Some("/mine.toml") => Ok("api-socket = \"/mine.sock\"\n".to_string()),
            _ => Err(std::io::Error::from(std::io::ErrorKind::NotFound)),
        };
        for args in [
            &["berth", "--config", "/mine.toml", "ps"][..],
            &["berth", "--config=/mine.toml", "ps"][..],
            &["berth", "ps", "--config", "/mine.toml"][..],
        ] {
            let argv = layer(os(args), read, |_| false).expect("layered");
            assert!(strs(&argv).contains(&"--agent=/mine.sock"), "{args:?}");
            crate::Cli::try_parse_from(argv).expect("clap accepts it");
        }
        // Missing at the default path is fine; missing when named is an error.
        let argv = layer(os(&["berth", "ps"]), read, |_| false).expect("no file is fine");
        assert_eq!(strs(&argv), ["berth", "ps"]);
        let err = layer(os(&["berth", "ps", "--config", "/nope.toml"]), read, |_| {
            false
        })
        .expect_err("named file missing");
        assert!(format!("{err:#}").starts_with("cannot read the configuration file /nope.toml"));
    }

    /// The keys and their facts, as the hand-written list before this module derived them: the
    /// derivation from the clap declarations must give the same file.
    #[test]
    fn the_keys_are_derived_from_the_agents_options() {
        let defs = catalog(&crate::Cli::command());
        let got: Vec<(&str, Kind, Vec<&str>)> = defs
            .iter()
            .map(|d| {
                (
                    d.name.as_str(),
                    d.kind,
                    d.env.iter().map(String::as_str).collect(),
                )
            })
            .collect();
        use Kind::*;
        #[allow(unused_mut)] // extended with the cluster keys when built with them
        let mut want: Vec<(&str, Kind, Vec<&str>)> = vec![
            ("data-dir", Value, vec!["BERTH_DATA_DIR"]),
            ("api-socket", Value, vec!["BERTH_API_SOCKET"]),
            ("docker-host", Value, vec!["DOCKER_HOST"]),
            (
                "cleanup-wait",
                Value,
                vec![
                    "BERTH_CLEANUP_WAIT",
                    "ECS_ENGINE_TASK_CLEANUP_WAIT_DURATION",
                ],
            ),
            (
                "store-write-timeout",
                Value,
                vec!["BERTH_STORE_WRITE_TIMEOUT"],
            ),
            ("volume-plugin", Value, vec!["BERTH_VOLUME_PLUGIN"]),
            ("metadata-addr", Value, vec!["BERTH_METADATA_ADDR"]),
            (
                "metadata-advertise",
                Value,
                vec!["BERTH_METADATA_ADVERTISE"],
            ),
            (
                "introspection-addr",
                Value,
                vec!["BERTH_INTROSPECTION_ADDR"],
            ),
            ("cluster", Value, vec!["BERTH_CLUSTER"]),
            ("region", Value, vec!["BERTH_REGION"]),
            ("account-id", Value, vec!["BERTH_ACCOUNT_ID"]),
            ("partition", Value, vec![]),
            ("availability-zone", Value, vec!["BERTH_AVAILABILITY_ZONE"]),
            (
                "container-instance-tags",
                Map,
                vec!["ECS_CONTAINER_INSTANCE_TAGS"],
            ),
            ("metadata-rate-limit", Value, vec![]),
            ("log-format", Value, vec![]),
            (
                "pull-behavior",
                Value,
                vec!["BERTH_IMAGE_PULL_BEHAVIOR", "ECS_IMAGE_PULL_BEHAVIOR"],
            ),
            (
                "pull-dependent-upfront",
                Switch,
                vec![
                    "BERTH_PULL_DEPENDENT_CONTAINERS_UPFRONT",
                    "ECS_PULL_DEPENDENT_CONTAINERS_UPFRONT",
                ],
            ),
            ("pull-timeout", Value, vec![]),
            ("pull-inactivity-timeout", Value, vec![]),
            ("pull-attempts", Value, vec![]),
            ("pause-image", Value, vec!["BERTH_PAUSE_IMAGE"]),
            ("docker-timeout", Value, vec!["BERTH_DOCKER_TIMEOUT"]),
            (
                "docker-volume-timeout",
                Value,
                vec!["BERTH_DOCKER_VOLUME_TIMEOUT"],
            ),
            (
                "engine-unhealthy-after",
                Value,
                vec!["BERTH_ENGINE_UNHEALTHY_AFTER"],
            ),
            (
                "available-log-drivers",
                List,
                vec![
                    "BERTH_AVAILABLE_LOG_DRIVERS",
                    "ECS_AVAILABLE_LOGGING_DRIVERS",
                ],
            ),
            (
                "log-driver-fallback",
                Value,
                vec!["BERTH_LOG_DRIVER_FALLBACK"],
            ),
            ("secrets-dir", Value, vec!["BERTH_SECRETS_DIR"]),
            ("secrets-from-env", Switch, vec!["BERTH_SECRETS_FROM_ENV"]),
            (
                "environment-files-dir",
                Value,
                vec!["BERTH_ENVIRONMENT_FILES_DIR"],
            ),
            (
                "environment-files-allow",
                List,
                vec!["BERTH_ENVIRONMENT_FILES_ALLOW"],
            ),
            (
                "credentials-endpoint",
                Value,
                vec!["BERTH_CREDENTIALS_ENDPOINT"],
            ),
            (
                "credentials-audit-log",
                Value,
                vec!["BERTH_CREDENTIALS_AUDIT_LOG"],
            ),
            ("task-role-dir", Value, vec!["BERTH_TASK_ROLE_DIR"]),
            ("aws", Value, vec!["BERTH_AWS"]),
            ("aws-timeout", Value, vec!["BERTH_AWS_TIMEOUT"]),
            ("aws-role-duration", Value, vec!["BERTH_AWS_ROLE_DURATION"]),
            ("engine-auth-type", Value, vec!["ECS_ENGINE_AUTH_TYPE"]),
            ("engine-auth-data", Value, vec!["ECS_ENGINE_AUTH_DATA"]),
            ("docker-config", Value, vec!["BERTH_DOCKER_CONFIG"]),
            ("credential-helper-timeout", Value, vec![]),
            (
                "container-metadata",
                Switch,
                vec![
                    "BERTH_ENABLE_CONTAINER_METADATA",
                    "ECS_ENABLE_CONTAINER_METADATA",
                ],
            ),
            (
                "host-private-ipv4-address",
                Value,
                vec!["BERTH_HOST_PRIVATE_IPV4_ADDRESS"],
            ),
            (
                "host-public-ipv4-address",
                Value,
                vec!["BERTH_HOST_PUBLIC_IPV4_ADDRESS"],
            ),
            (
                "disable-image-cleanup",
                Switch,
                vec!["BERTH_DISABLE_IMAGE_CLEANUP", "ECS_DISABLE_IMAGE_CLEANUP"],
            ),
            (
                "image-cleanup-interval",
                Value,
                vec!["BERTH_IMAGE_CLEANUP_INTERVAL", "ECS_IMAGE_CLEANUP_INTERVAL"],
            ),
            (
                "image-minimum-cleanup-age",
                Value,
                vec![
                    "BERTH_IMAGE_MINIMUM_CLEANUP_AGE",
                    "ECS_IMAGE_MINIMUM_CLEANUP_AGE",
                ],
            ),
            (
                "images-per-cycle",
                Value,
                vec![
                    "BERTH_NUM_IMAGES_DELETE_PER_CYCLE",
                    "ECS_NUM_IMAGES_DELETE_PER_CYCLE",
                ],
            ),
            (
                "image-cleanup-exclude",
                List,
                vec!["BERTH_IMAGE_CLEANUP_EXCLUDE", "ECS_EXCLUDE_UNTRACKED_IMAGE"],
            ),
            (
                "image-cleanup-untracked",
                Switch,
                vec![
                    "BERTH_IMAGE_CLEANUP_UNTRACKED",
                    "ECS_ENABLE_UNTRACKED_IMAGE_CLEANUP",
                ],
            ),
            (
                "untracked-image-minimum-cleanup-age",
                Value,
                vec!["NON_ECS_IMAGE_MINIMUM_CLEANUP_AGE"],
            ),
            ("image-gc-high-threshold", Value, vec![]),
            ("image-gc-low-threshold", Value, vec![]),
            ("image-gc-check-interval", Value, vec![]),
            ("task-policy", Value, vec!["BERTH_TASK_POLICY"]),
            ("task-policy-allow", List, vec!["BERTH_TASK_POLICY_ALLOW"]),
            (
                "disable-privileged",
                Switch,
                vec!["BERTH_DISABLE_PRIVILEGED", "ECS_DISABLE_PRIVILEGED"],
            ),
            (
                "max-containers-per-task",
                Value,
                vec!["BERTH_MAX_CONTAINERS_PER_TASK"],
            ),
        ];
        #[cfg(feature = "cluster")]
        want.extend([
            ("etcd", Value, vec!["BERTH_ETCD"]),
            ("etcd-cacert", Value, vec!["BERTH_ETCD_CACERT"]),
            ("etcd-cert", Value, vec!["BERTH_ETCD_CERT"]),
            ("etcd-key", Value, vec!["BERTH_ETCD_KEY"]),
            ("etcd-user", Value, vec!["BERTH_ETCD_USER"]),
            (
                "etcd-password-file",
                Value,
                vec!["BERTH_ETCD_PASSWORD_FILE"],
            ),
            ("etcd-insecure", Switch, vec!["BERTH_ETCD_INSECURE"]),
            ("node", Value, vec!["BERTH_NODE"]),
            ("node-lease-ttl", Value, vec![]),
            ("node-cpu", Value, vec![]),
            ("node-memory", Value, vec![]),
            ("node-attributes", Map, vec![]),
            ("node-stop-wait", Value, vec![]),
        ]);
        assert_eq!(got, want);
        let secret: Vec<&str> = defs
            .iter()
            .filter(|d| d.secret)
            .map(|d| d.name.as_str())
            .collect();
        assert_eq!(secret, ["engine-auth-data"], "never printed");
    }

    /// Which subcommand takes which key (and under which flag), as the hand-written lists said
    /// before this module derived it, with `etcd` for the cluster commands and the controller.
    #[test]
    fn each_subcommand_takes_the_keys_it_declares_options_for() {
        let root = crate::Cli::command();
        let defs = catalog(&root);
        let taken = |path: &[&str]| -> BTreeSet<(String, String)> {
            let mut cmd = &root;
            for name in path {
                cmd = cmd.find_subcommand(name).expect("subcommand");
            }
            taken_by(cmd, &defs)
                .into_iter()
                .map(|(d, arg)| {
                    let long = arg.get_long().unwrap_or_default().to_owned();
                    (defs[d].name.clone(), long)
                })
                .collect()
        };
        let same = |keys: &[&str]| -> BTreeSet<(String, String)> {
            keys.iter()
                .map(|k| (k.to_string(), k.to_string()))
                .collect()
        };
        let run = [
            "data-dir",
            "docker-host",
            "docker-timeout",
            "docker-volume-timeout",
            "volume-plugin",
            "pull-behavior",
            "pull-dependent-upfront",
            "pull-timeout",
            "pull-inactivity-timeout",
            "pull-attempts",
            "pause-image",
            "available-log-drivers",
            "log-driver-fallback",
            "secrets-dir",
            "secrets-from-env",
            "environment-files-dir",
            "environment-files-allow",
            "credentials-endpoint",
            "credentials-audit-log",
            "task-role-dir",
            "aws",
            "aws-timeout",
            "aws-role-duration",
            "engine-auth-type",
            "engine-auth-data",
            "docker-config",
            "credential-helper-timeout",
            "container-metadata",
            "host-private-ipv4-address",
            "host-public-ipv4-address",
        ];
        assert_eq!(taken(&["run"]), same(&run));
        // validate says which source would serve a taskRoleArn and the definition's other AWS
        // needs, so it takes the role and AWS keys.
        assert_eq!(
            taken(&["validate"]),
            same(&[
                "available-log-drivers",
                "log-driver-fallback",
                "credentials-endpoint",
                "credentials-audit-log",
                "task-role-dir",
                "aws",
                "aws-timeout",
                "aws-role-duration"
            ])
        );
        assert_eq!(taken(&["gc"]), same(&["data-dir", "docker-host"]));
        assert_eq!(
            taken(&["agent"]).len(),
            defs.len(),
            "the agent takes them all"
        );
        let agent_flag: BTreeSet<(String, String)> =
            [("api-socket".to_string(), "agent".to_string())].into();
        for client in ["submit", "ps", "inspect", "stop", "rm", "events", "images"] {
            assert_eq!(taken(&[client]), agent_flag, "{client}");
        }
        let mut logs = agent_flag.clone();
        logs.insert(("docker-host".into(), "docker-host".into()));
        assert_eq!(taken(&["logs"]), logs);
        #[cfg(feature = "cluster")]
        cluster_commands_take_etcd(&root, taken, same);
    }

    /// `berth controller` and every `berth cluster …` command that connects take the file's
    /// etcd keys alone (`auth-setup` connects to nothing and takes none).
    #[cfg(feature = "cluster")]
    fn cluster_commands_take_etcd(
        root: &Command,
        taken: impl Fn(&[&str]) -> BTreeSet<(String, String)>,
        same: impl Fn(&[&str]) -> BTreeSet<(String, String)>,
    ) {
        let etcd = [
            "etcd",
            "etcd-cacert",
            "etcd-cert",
            "etcd-key",
            "etcd-user",
            "etcd-password-file",
            "etcd-insecure",
        ];
        assert_eq!(taken(&["controller"]), same(&etcd));
        assert!(taken(&["cluster", "auth-setup"]).is_empty());
        let cluster = root.find_subcommand("cluster").expect("cluster");
        assert!(taken(&["cluster"]).is_empty());
        for sub in cluster.get_subcommands() {
            let name = sub.get_name();
            if sub.has_subcommands() {
                for leaf in sub.get_subcommands() {
                    assert_eq!(
                        taken(&["cluster", name, leaf.get_name()]),
                        same(&etcd),
                        "{name} {}",
                        leaf.get_name()
                    );
                }
            } else if name != "auth-setup" {
                assert_eq!(taken(&["cluster", name]), same(&etcd), "{name}");
            }
        }
    }

    #[test]
    fn a_switch_the_file_turns_on_a_flag_turns_off() {
        let file = "pull-dependent-upfront = true\ncontainer-metadata = true\nsecrets-from-env = true\nimage-cleanup-untracked = true\ndisable-image-cleanup = true\n";
        let on = agent(layered(&["berth", "agent"], file, &[]).expect("layered"));
        assert!(on.pull.pull_dependent_upfront && on.container_metadata.container_metadata);
        assert!(on.secrets.secrets_from_env);
        assert!(on.image_gc.image_cleanup_untracked && on.image_gc.disable_image_cleanup);
        let off = agent(
            layered(
                &[
                    "berth",
                    "agent",
                    "--pull-dependent-upfront=false",
                    "--container-metadata=false",
                    "--secrets-from-env=false",
                    "--image-cleanup-untracked=false",
                    "--disable-image-cleanup=false",
                ],
                file,
                &[],
            )
            .expect("layered"),
        );
        assert!(!off.pull.pull_dependent_upfront && !off.container_metadata.container_metadata);
        assert!(!off.secrets.secrets_from_env);
        assert!(!off.image_gc.image_cleanup_untracked && !off.image_gc.disable_image_cleanup);
        // `false` in the file is passed as such; a bare flag and `=true` switch on.
        let argv =
            layered(&["berth", "agent"], "secrets-from-env = false\n", &[]).expect("layered");
        assert_eq!(strs(&argv), ["berth", "agent", "--secrets-from-env=false"]);
        assert!(!agent(argv).secrets.secrets_from_env);
        for flag in ["--secrets-from-env", "--secrets-from-env=true"] {
            assert!(
                agent(os(&["berth", "agent", flag]))
                    .secrets
                    .secrets_from_env
            );
        }
        // The value needs `=`: the word after a switch is still the task definition.
        match crate::Cli::try_parse_from(["berth", "run", "--pull-dependent-upfront", "t.json"])
            .map(|c| c.command)
        {
            Ok(crate::Command::Run(r)) => {
                assert!(r.pull.pull_dependent_upfront);
                assert_eq!(r.file, Some(PathBuf::from("t.json")));
            }
            other => panic!("not run: {other:?}"),
        }
        let err = crate::Cli::try_parse_from(["berth", "agent", "--secrets-from-env=maybe"])
            .expect_err("not a boolean");
        assert!(err.to_string().contains("--secrets-from-env"), "{err}");
    }

    #[test]
    fn every_switch_key_takes_an_explicit_off() {
        let root = crate::Cli::command();
        let agent_cmd = root.find_subcommand("agent").expect("agent");
        let switches: Vec<String> = taken_by(agent_cmd, &catalog(&root))
            .into_iter()
            .filter(|(_, arg)| kind_of(arg, &key_of(arg)) == Kind::Switch)
            .filter_map(|(_, arg)| arg.get_long().map(str::to_owned))
            .collect();
        assert_eq!(
            switches.len(),
            6 + usize::from(cfg!(feature = "cluster")),
            "{switches:?}"
        );
        for long in switches {
            let argv = ["berth".into(), "agent".into(), format!("--{long}=false")];
            crate::Cli::try_parse_from(argv).unwrap_or_else(|e| panic!("--{long}=false: {e}"));
        }
    }

    #[cfg(feature = "cluster")]
    #[test]
    fn cluster_commands_and_the_controller_take_the_files_etcd() {
        let file = "etcd = \"http://file:2379\"\ncleanup-wait = \"1m\"\n";
        let cases: &[(&[&str], &[&str])] = &[
            (
                &["berth", "cluster", "ps"],
                &["berth", "cluster", "ps", "--etcd=http://file:2379"],
            ),
            (
                &[
                    "berth",
                    "cluster",
                    "service",
                    "create",
                    "web",
                    "w.json",
                    "--desired-count",
                    "2",
                ],
                &[
                    "berth",
                    "cluster",
                    "service",
                    "create",
                    "--etcd=http://file:2379",
                    "web",
                    "w.json",
                    "--desired-count",
                    "2",
                ],
            ),
            (
                &["berth", "controller", "--interval", "2s"],
                &[
                    "berth",
                    "controller",
                    "--etcd=http://file:2379",
                    "--interval",
                    "2s",
                ],
            ),
        ];
        for (args, want) in cases {
            let argv = layered(args, file, &[]).expect("layered");
            assert_eq!(strs(&argv), *want);
            crate::Cli::try_parse_from(argv).expect("clap accepts it");
        }
        let etcd = |args: &[&str], env: &[&str]| -> String {
            let argv = layered(args, file, env).expect("layered");
            match crate::Cli::try_parse_from(argv).map(|c| c.command) {
                Ok(crate::Command::Controller(c)) => c.etcd.etcd.unwrap_or_default(),
                Ok(crate::Command::Cluster(c)) => match c.command {
                    crate::cmd_cluster::ClusterCommand::Ps { conn } => {
                        conn.etcd.etcd.unwrap_or_default()
                    }
                    other => panic!("not ps: {other:?}"),
                },
                other => panic!("{other:?}"),
            }
        };
        assert_eq!(etcd(&["berth", "controller"], &[]), "http://file:2379");
        assert_eq!(
            etcd(
                &["berth", "cluster", "ps", "--etcd", "http://flag:2379"],
                &[]
            ),
            "http://flag:2379",
            "the flag beats the file"
        );
        assert_eq!(
            strs(&layered(&["berth", "controller"], file, &["BERTH_ETCD"]).expect("layered")),
            ["berth", "controller"],
            "the environment beats the file (clap reads BERTH_ETCD)"
        );
    }

    #[test]
    fn a_key_goes_to_the_subcommand_that_declares_it_and_the_users_flag_still_wins() {
        let file = "api-socket = \"/file.sock\"\n";
        let argv = layered(
            &["berth", "images", "--agent", "/mine.sock", "prune"],
            file,
            &[],
        )
        .expect("layered");
        assert_eq!(
            strs(&argv),
            [
                "berth",
                "images",
                "--agent=/file.sock",
                "--agent",
                "/mine.sock",
                "prune"
            ]
        );
        match crate::Cli::try_parse_from(argv).map(|c| c.command) {
            Ok(crate::Command::Client(crate::client::ClientCommand::Images { agent, .. })) => {
                assert_eq!(agent.agent, PathBuf::from("/mine.sock"));
            }
            other => panic!("not images: {other:?}"),
        }
        // `volume-plugin` and `completions` take no key, whatever their options are called.
        for sub in ["volume-plugin", "completions"] {
            let cmd = crate::Cli::command();
            let sub = cmd.find_subcommand(sub).expect("subcommand");
            assert!(taken_by(sub, &catalog(&cmd)).is_empty());
        }
    }

    /// `--print-config`'s text for `args`, with `file` as the configuration file and `env` the
    /// variables set (set in the process: hold `ENV`).
    fn print_layered(args: &[&str], file: &str) -> String {
        let file = file.to_string();
        let layering = layering(
            os(args),
            move |_| Ok(file.clone()),
            |v: &str| std::env::var_os(v).is_some_and(|x| !x.is_empty()),
        )
        .expect("layered");
        let m = crate::Cli::command()
            .try_get_matches_from(layering.argv.clone())
            .expect("clap accepts it");
        print(&m, &layering).expect("printed")
    }

    #[test]
    fn print_config_names_the_layer_that_set_each_value() {
        let _env = ENV.lock().unwrap_or_else(|e| e.into_inner());
        let file = "cleanup-wait = \"10m\"\npull-attempts = 3\nregion = \"eu-west-1\"\ncontainer-metadata = true\ncontainer-instance-tags = { zone = \"a\" }\n";
        // SAFETY: as in a_flag_beats_the_environment.
        unsafe {
            std::env::set_var("BERTH_REGION", "us-east-2");
            std::env::set_var("ECS_IMAGE_PULL_BEHAVIOR", "once");
        }
        let text = print_layered(
            &[
                "berth",
                "agent",
                "--print-config",
                "--config",
                "/x/b.toml",
                "--pull-attempts=4",
                "--container-metadata=false",
            ],
            file,
        );
        // SAFETY: as above.
        unsafe {
            std::env::remove_var("BERTH_REGION");
            std::env::remove_var("ECS_IMAGE_PULL_BEHAVIOR");
        }
        for line in [
            "cleanup-wait = \"10m\"  # file /x/b.toml\n",
            "pull-attempts = 4  # flag --pull-attempts\n",
            "region = \"us-east-2\"  # environment BERTH_REGION\n",
            "pull-behavior = \"once\"  # environment ECS_IMAGE_PULL_BEHAVIOR\n",
            "container-metadata = false  # flag --container-metadata\n",
            "container-instance-tags = { zone = \"a\" }  # file /x/b.toml\n",
            "pull-timeout = \"2h\"  # default\n",
            "data-dir = \"",
        ] {
            assert!(text.contains(line), "{line:?} in\n{text}");
        }
        let t: toml::Table = text.parse().expect("TOML");
        assert_eq!(t["pull-attempts"].as_integer(), Some(4));
        assert!(!t.contains_key("engine-auth-data") && !t.contains_key("print-config"));
        // Printed back as a file, it gives the same configuration.
        let again = print_layered(
            &["berth", "agent", "--print-config", "--config", "/x/b.toml"],
            &text,
        );
        let strip = |s: &str| s.parse::<toml::Table>().expect("TOML");
        assert_eq!(strip(&again), t);
    }

    #[test]
    fn run_and_gc_print_the_keys_they_take() {
        let keys = |args: &[&str]| -> Vec<String> {
            let t: toml::Table = printed(args).parse().expect("TOML");
            t.keys().cloned().collect()
        };
        assert_eq!(
            keys(&["berth", "gc", "--print-config"]),
            ["data-dir"],
            "docker-host only when set"
        );
        let run = keys(&[
            "berth",
            "run",
            "--print-config",
            "--metadata-addr",
            "127.0.0.1:1",
            "--engine-auth-data",
            "{}",
        ]);
        for key in [
            "pull-behavior",
            "docker-timeout",
            "container-metadata",
            "data-dir",
        ] {
            assert!(run.contains(&key.to_string()), "{key}: {run:?}");
        }
        for key in [
            "metadata-addr",
            "cluster",
            "engine-auth-data",
            "cleanup-wait",
        ] {
            assert!(!run.contains(&key.to_string()), "{key}: {run:?}");
        }
    }
}
