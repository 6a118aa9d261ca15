//! The reference under `docs/` is checked against the code, so it cannot drift silently:
//!
//! - every flag, argument and environment variable that `--help` shows, for every command found
//!   by walking the help's Commands sections, has a row in `docs/commands.md`, with the same
//!   variable and the default the help states;
//! - every key of `Config::default()` has a row in `docs/configuration.md` whose default, read
//!   back through `Config::from_toml_str`, is the code's (and `config/collector.toml`, which says
//!   it shows every key at its default, parses to the defaults too);
//! - relative links in README.md and `docs/*.md` lead to files and headings that exist.
//!
//! Doc tables are plain Markdown a test can read: the first code span of a row's first cell
//! names the flag or key; `—` means none.

use std::collections::{BTreeMap, BTreeSet};
use std::path::{Path, PathBuf};
use std::process::Command;

use retry_spend_collector::config::Config;

const BIN: &str = env!("CARGO_BIN_EXE_retry-spend-collector");
const NONE: &str = "—";

fn root() -> &'static Path {
    Path::new(env!("CARGO_MANIFEST_DIR"))
}

fn read(relative: &str) -> String {
    let path = root().join(relative);
    std::fs::read_to_string(&path).unwrap_or_else(|e| panic!("{}: {e}", path.display()))
}

// ---------------------------------------------------------------------------------------------
// `--help`, read into commands and their options.

/// One flag (`--grpc-addr`) or positional argument (`<FILE>...`, `[DIR]`) of a command.
#[derive(Debug, Clone)]
struct HelpOption {
    name: String,
    env: Option<String>,
    default: Option<String>,
}

#[derive(Debug)]
struct HelpCommand {
    /// `retry-spend-collector pricing check`.
    path: String,
    options: Vec<HelpOption>,
}

/// `--help` output, with no `RETRY_SPEND_*` variable set: clap shows a set variable's value in
/// `[env: X=value]`, which would make the output depend on the caller's environment.
fn help(args: &[&str]) -> String {
    let mut command = Command::new(BIN);
    command.args(args).arg("--help");
    for (name, _) in std::env::vars_os() {
        if name.to_string_lossy().starts_with("RETRY_SPEND_") {
            command.env_remove(&name);
        }
    }
    let out = command.output().expect("run the binary");
    assert!(
        out.status.success(),
        "{args:?} --help failed: {}",
        String::from_utf8_lossy(&out.stderr)
    );
    String::from_utf8(out.stdout).expect("help is UTF-8")
}

/// The lines of a help section (`Commands:`, `Arguments:`, `Options:`), continuation lines
/// joined to the entry they continue (clap indents them further).
fn section(help: &str, title: &str) -> Vec<String> {
    let mut entries: Vec<String> = Vec::new();
    let mut inside = false;
    for line in help.lines() {
        if !line.starts_with(' ') {
            inside = line.trim_end() == title;
            continue;
        }
        if !inside || line.trim().is_empty() {
            continue;
        }
        let indent = line.len() - line.trim_start().len();
        match entries.last_mut() {
            Some(last) if indent > 6 && !line.trim_start().starts_with('-') => {
                last.push(' ');
                last.push_str(line.trim());
            }
            _ => entries.push(line.trim().to_owned()),
        }
    }
    entries
}

/// The text of `[label: …]` in an entry, if it has one.
fn bracketed(entry: &str, label: &str) -> Option<String> {
    let start = entry.find(&format!("[{label}: "))? + label.len() + 3;
    let len = entry[start..].find(']')?;
    Some(entry[start..start + len].to_owned())
}

fn help_option(entry: &str) -> HelpOption {
    // `-h, --help  Print help` → `--help`; `<FILE>...  The saved feed` → `<FILE>...`: the first
    // word that is not a short flag.
    let name = entry
        .split_whitespace()
        .find(|word| !word.starts_with('-') || word.starts_with("--"))
        .unwrap_or_default()
        .trim_end_matches(',')
        .to_owned();
    HelpOption {
        name,
        env: bracketed(entry, "env").map(|env| env.trim_end_matches('=').to_owned()),
        default: bracketed(entry, "default"),
    }
}

/// Every command, from the top level down, as its help lists them: a new subcommand is covered
/// without this test changing.
fn commands() -> Vec<HelpCommand> {
    fn walk(args: Vec<&str>, found: &mut Vec<HelpCommand>) {
        let text = help(&args);
        let options = section(&text, "Arguments:")
            .iter()
            .chain(section(&text, "Options:").iter())
            .map(|entry| help_option(entry))
            .collect();
        let path = std::iter::once("retry-spend-collector")
            .chain(args.iter().copied())
            .collect::<Vec<_>>()
            .join(" ");
        found.push(HelpCommand { path, options });
        for entry in section(&text, "Commands:") {
            let name = entry.split_whitespace().next().unwrap_or_default();
            if name != "help" {
                let mut sub = args.clone();
                sub.push(name);
                walk(sub, found);
            }
        }
    }
    let mut found = Vec::new();
    walk(Vec::new(), &mut found);
    found
}

// ---------------------------------------------------------------------------------------------
// Markdown tables, read by section.

/// The code spans of a piece of Markdown, in order.
fn code_spans(text: &str) -> Vec<&str> {
    text.split('`').skip(1).step_by(2).collect()
}

/// The cells of a table row, `\|` kept as a literal `|`.
fn cells(row: &str) -> Vec<String> {
    let row = row.trim().trim_start_matches('|').trim_end_matches('|');
    let mut out = vec![String::new()];
    let mut chars = row.chars().peekable();
    while let Some(c) = chars.next() {
        match c {
            '\\' if chars.peek() == Some(&'|') => {
                out.last_mut().unwrap().push('|');
                chars.next();
            }
            '|' => out.push(String::new()),
            _ => out.last_mut().unwrap().push(c),
        }
    }
    out.iter().map(|cell| cell.trim().to_owned()).collect()
}

/// A table row, cells by their column's header.
type Row = BTreeMap<String, String>;

/// One heading of a page and the rows of the tables below it, up to the next heading.
#[derive(Debug, Default)]
struct Section {
    heading: String,
    rows: Vec<Row>,
}

/// The page's sections; fenced code blocks are skipped.
fn sections(page: &str) -> Vec<Section> {
    let mut out = vec![Section::default()];
    let mut header: Option<Vec<String>> = None;
    let mut fenced = false;
    for line in page.lines() {
        if line.trim_start().starts_with("```") {
            fenced = !fenced;
            continue;
        }
        if fenced {
            continue;
        }
        if line.starts_with('#') {
            out.push(Section {
                heading: line.trim_start_matches('#').trim().to_owned(),
                rows: Vec::new(),
            });
            header = None;
        } else if !line.starts_with('|') {
            header = None;
        } else if let Some(columns) = &header {
            let row = cells(line);
            if !row.iter().all(|c| c.chars().all(|c| c == '-' || c == ':')) {
                let row = columns.iter().cloned().zip(row).collect();
                out.last_mut().unwrap().rows.push(row);
            }
        } else {
            header = Some(cells(line));
        }
    }
    out
}

/// The first code span of a cell, or the whole cell.
fn first_code(cell: &str) -> &str {
    code_spans(cell).first().copied().unwrap_or(cell)
}

/// A default cell's value: a code span is a value; anything else is prose, taken as written.
fn cell_value(cell: &str) -> (&str, bool) {
    let spans = code_spans(cell);
    if spans.len() == 1 && cell.starts_with('`') && cell.ends_with('`') {
        (spans[0], true)
    } else {
        (cell, false)
    }
}

// ---------------------------------------------------------------------------------------------
// The code's config defaults.

/// Every key of `Config::default()` (dotted, `receivers.otlp.grpc_addr`), with its value as
/// `{:#?}` shows it. Read from the derived `Debug`, so a key added to any section is found
/// without this test knowing it; serde uses the field names unchanged (no renames).
fn config_keys() -> BTreeMap<String, String> {
    let debug = format!("{:#?}", Config::default());
    let mut keys = BTreeMap::new();
    let mut stack: Vec<(usize, String)> = Vec::new();
    for line in debug.lines() {
        let indent = line.len() - line.trim_start().len();
        let Some((name, value)) = line.trim().split_once(": ") else {
            continue;
        };
        if !name
            .chars()
            .all(|c| c.is_ascii_lowercase() || c == '_' || c.is_ascii_digit())
        {
            continue; // a map entry such as `"key": "value"`
        }
        while stack.last().is_some_and(|(i, _)| *i >= indent) {
            stack.pop();
        }
        let path: Vec<&str> = stack
            .iter()
            .map(|(_, n)| n.as_str())
            .chain([name])
            .collect();
        let value = value.trim_end_matches(',');
        if value.ends_with(" {") && value.starts_with(|c: char| c.is_ascii_uppercase()) {
            stack.push((indent, name.to_owned()));
        } else {
            keys.insert(path.join("."), value.to_owned());
        }
    }
    assert!(
        keys.contains_key("receivers.otlp.grpc_addr") && keys.len() > 20,
        "Config's Debug output did not read as expected: {keys:?}"
    );
    keys
}

/// Whether `value`, written for `key` in a config file, gives the built-in default. Tried as a
/// TOML value first (`0`, `"10s"`, `{}`), then as a string (`127.0.0.1:4317`, `config/pricing`),
/// as a flag's value is written.
fn is_config_default(key: &str, value: &str) -> Result<(), String> {
    let (section, name) = key.rsplit_once('.').expect("a key inside a section");
    let mut errors = Vec::new();
    for literal in [value.to_owned(), format!("{value:?}")] {
        let text = format!("[{section}]\n{name} = {literal}\n");
        match Config::from_toml_str(&text, "docs") {
            Ok(config) if config == Config::default() => return Ok(()),
            Ok(_) => return Err(format!("`{name} = {literal}` is not the built-in default")),
            Err(e) => errors.push(e.to_string()),
        }
    }
    Err(format!("not a value of {key}: {}", errors.join("; ")))
}

// ---------------------------------------------------------------------------------------------
// The checks.

/// Every command has a section in `docs/commands.md` whose heading names it in a code span
/// (one heading may name several commands that share their options); every option it has
/// besides `--help` and `--version` is a row there, with the same environment variable and the
/// same default as its help. A row with a config key states that key's default.
#[test]
fn every_flag_of_help_is_in_the_commands_reference_with_its_env_and_default() {
    let page = read("docs/commands.md");
    let sections = sections(&page);
    let config_keys = config_keys();
    let mut problems: BTreeMap<String, Vec<String>> = BTreeMap::new();
    let commands = commands();
    let options: usize = commands.iter().map(|c| c.options.len()).sum();
    assert!(
        commands.len() >= 8 && options > 40,
        "the help did not read as expected: {commands:?}"
    );
    for command in &commands {
        let mut say = |p: String| problems.entry(command.path.clone()).or_default().push(p);
        let Some(section) = sections
            .iter()
            .find(|s| code_spans(&s.heading).contains(&command.path.as_str()))
        else {
            say(format!("no heading naming `{}`", command.path));
            continue;
        };
        let documented: BTreeMap<&str, &Row> = section
            .rows
            .iter()
            .filter_map(|row| Some((first_code(row.get("option")?).split(' ').next()?, row)))
            .collect();
        for option in &command.options {
            if option.name == "--help" || option.name == "--version" {
                continue;
            }
            let Some(row) = documented.get(option.name.as_str()) else {
                say(format!("{} is not documented", option.name));
                continue;
            };
            let cell = |column: &str| row.get(column).map_or(NONE, |c| c.as_str());
            let env = cell("env");
            let doc_env = if env == NONE {
                None
            } else {
                Some(first_code(env))
            };
            if doc_env != option.env.as_deref() {
                say(format!(
                    "{}: env is {:?} in the docs, {:?} in --help",
                    option.name, doc_env, option.env
                ));
            }
            let (default, is_code) = cell_value(cell("default"));
            let key = cell("config key");
            match &option.default {
                Some(help) if help != default => say(format!(
                    "{}: default is {default:?} in the docs, {help:?} in --help",
                    option.name
                )),
                None if default != NONE && !(is_code && key != NONE) => say(format!(
                    "{}: --help states no default, so the docs may only state a config key's",
                    option.name
                )),
                _ => {}
            }
            if key != NONE {
                let key = first_code(key);
                if !config_keys.contains_key(key) {
                    say(format!("{}: config key {key} does not exist", option.name));
                } else if is_code {
                    if let Err(e) = is_config_default(key, default) {
                        say(format!("{}: default {default:?}: {e}", option.name));
                    }
                }
            }
        }
        let names: BTreeSet<&str> = command.options.iter().map(|o| o.name.as_str()).collect();
        for name in documented.keys() {
            if !names.contains(name) {
                say(format!("{name} is documented but not in --help"));
            }
        }
    }
    for flag in ["--help", "--version"] {
        if !page.contains(&format!("`{flag}`")) {
            problems
                .entry("docs/commands.md".into())
                .or_default()
                .push(format!("{flag} is not mentioned"));
        }
    }
    assert!(
        problems.is_empty(),
        "docs/commands.md disagrees with --help:\n{}",
        render(&problems)
    );
}

/// Every config key is a row of `docs/configuration.md` under the heading naming its section
/// (`[receivers.otlp]`), and every row's default is the code's: a code span is the TOML value
/// that, written in a file, gives the default; `unset` is an optional key left out.
#[test]
fn every_config_key_is_in_the_configuration_reference_with_its_default() {
    let page = read("docs/configuration.md");
    let code = config_keys();
    let mut documented = BTreeSet::new();
    let mut problems: BTreeMap<String, Vec<String>> = BTreeMap::new();
    for section in sections(&page) {
        let Some(table) = code_spans(&section.heading)
            .into_iter()
            .find(|s| s.starts_with('[') && s.ends_with(']'))
        else {
            continue;
        };
        let table = table.trim_matches(['[', ']']);
        for row in &section.rows {
            let Some(name) = row.get("key").map(|k| first_code(k)) else {
                continue;
            };
            let key = format!("{table}.{name}");
            let mut say = |p: String| problems.entry(key.clone()).or_default().push(p);
            documented.insert(key.clone());
            let Some(code_value) = code.get(&key) else {
                say("is not a key of Config".into());
                continue;
            };
            match cell_value(row.get("default").map_or("", String::as_str)) {
                ("unset", false) if code_value == "None" => {}
                ("unset", false) => say(format!("is documented unset, but is {code_value}")),
                (value, true) => {
                    if let Err(e) = is_config_default(&key, value) {
                        say(format!("default {value:?}: {e}"));
                    }
                }
                (value, false) => say(format!(
                    "default {value:?} is neither a `code` TOML value nor unset"
                )),
            }
        }
    }
    for key in code.keys() {
        if !documented.contains(key) {
            problems
                .entry(key.clone())
                .or_default()
                .push("is not documented".into());
        }
    }
    assert!(
        problems.is_empty(),
        "docs/configuration.md disagrees with Config::default():\n{}",
        render(&problems)
    );
}

/// `config/collector.toml` says every key is shown at its default.
#[test]
fn the_shipped_config_file_is_the_defaults() {
    let config = Config::load(&root().join("config/collector.toml")).expect("it loads");
    assert_eq!(config, Config::default());
}

fn render(problems: &BTreeMap<String, Vec<String>>) -> String {
    problems
        .iter()
        .map(|(what, list)| format!("  {what}:\n    {}", list.join("\n    ")))
        .collect::<Vec<_>>()
        .join("\n")
}

// ---------------------------------------------------------------------------------------------
// Links.

/// Heading anchors as GitHub makes them: lowercase, punctuation dropped, spaces to hyphens,
/// `-1`, `-2` … appended to repeats; plus explicit `<a id="…">` anchors.
fn anchors(page: &str) -> BTreeSet<String> {
    let mut seen: BTreeMap<String, usize> = BTreeMap::new();
    let mut out = BTreeSet::new();
    let mut fenced = false;
    for line in page.lines() {
        if line.trim_start().starts_with("```") {
            fenced = !fenced;
        }
        if let Some(rest) = line.split("<a id=\"").nth(1) {
            out.insert(rest.split('"').next().unwrap_or_default().to_owned());
        }
        if fenced || !line.starts_with('#') {
            continue;
        }
        let text = link_texts(line.trim_start_matches('#').trim());
        let slug: String = text
            .to_lowercase()
            .chars()
            .filter(|c| c.is_alphanumeric() || matches!(c, ' ' | '-' | '_'))
            .map(|c| if c == ' ' { '-' } else { c })
            .collect();
        let n = seen.entry(slug.clone()).or_insert(0);
        out.insert(if *n == 0 { slug } else { format!("{slug}-{n}") });
        *n += 1;
    }
    out
}

/// A heading's text as rendered: `[text](target)` becomes `text`.
fn link_texts(heading: &str) -> String {
    let mut out = String::new();
    let mut rest = heading;
    while let Some(start) = rest.find('[') {
        out.push_str(&rest[..start]);
        let after = &rest[start + 1..];
        match after
            .find("](")
            .and_then(|mid| Some((mid, after[mid..].find(')')?)))
        {
            Some((mid, close)) => {
                out.push_str(&after[..mid]);
                rest = &after[mid + close + 1..];
            }
            None => {
                out.push('[');
                rest = after;
            }
        }
    }
    out.push_str(rest);
    out
}

/// The targets of the Markdown links of a page, outside code.
fn link_targets(page: &str) -> Vec<String> {
    let mut out = Vec::new();
    let mut fenced = false;
    for line in page.lines() {
        if line.trim_start().starts_with("```") {
            fenced = !fenced;
            continue;
        }
        if fenced {
            continue;
        }
        // Inline code (`[DIR](x)` in a usage line) is not a link.
        let prose: String = line.split('`').step_by(2).collect::<Vec<_>>().join("");
        for piece in prose.split("](").skip(1) {
            if let Some(end) = piece.find(')') {
                out.push(piece[..end].to_owned());
            }
        }
    }
    out
}

fn pages() -> Vec<PathBuf> {
    let mut pages = vec![root().join("README.md")];
    let mut docs: Vec<PathBuf> = std::fs::read_dir(root().join("docs"))
        .expect("docs/")
        .map(|e| e.expect("docs/ entry").path())
        .filter(|p| p.extension().is_some_and(|e| e == "md"))
        .collect();
    docs.sort();
    pages.extend(docs);
    pages
}

#[test]
fn relative_links_lead_to_files_and_headings_that_exist() {
    let mut broken = Vec::new();
    let mut checked = 0;
    for page in pages() {
        let text = std::fs::read_to_string(&page).expect("read page");
        let name = page
            .strip_prefix(root())
            .unwrap_or(&page)
            .display()
            .to_string();
        for target in link_targets(&text) {
            if target.contains("://") || target.starts_with("mailto:") {
                continue;
            }
            checked += 1;
            let (file, anchor) = target.split_once('#').unwrap_or((&target, ""));
            let path = if file.is_empty() {
                page.clone()
            } else {
                page.parent().unwrap().join(file)
            };
            if !path.exists() {
                broken.push(format!("{name}: {target}: no such file"));
            } else if !anchor.is_empty() {
                let linked = std::fs::read_to_string(&path).unwrap_or_default();
                if !anchors(&linked).contains(anchor) {
                    broken.push(format!("{name}: {target}: no such heading"));
                }
            }
        }
    }
    assert!(
        checked > 50,
        "only {checked} links found: the reader is broken"
    );
    assert!(
        broken.is_empty(),
        "broken links:\n  {}",
        broken.join("\n  ")
    );
}

/// README's contents line lists every `##` section, and docs/README.md every page of docs/.
#[test]
fn the_contents_name_every_section_and_page() {
    let readme = read("README.md");
    let contents = readme
        .split("\n\n")
        .find(|p| p.starts_with("Contents:"))
        .expect("README has a Contents: paragraph");
    let listed: BTreeSet<String> = link_targets(contents).into_iter().collect();
    let sections = anchors(&readme_sections(&readme));
    assert!(sections.len() > 5, "README's sections: {sections:?}");
    let mut missing: Vec<String> = sections
        .into_iter()
        .map(|a| format!("#{a}"))
        .filter(|a| !listed.contains(a))
        .collect();
    let index: BTreeSet<String> = link_targets(&read("docs/README.md")).into_iter().collect();
    for page in pages().iter().skip(1) {
        let file = page.file_name().unwrap().to_string_lossy().to_string();
        if file != "README.md" && !index.contains(&file) {
            missing.push(format!("docs/README.md: {file}"));
        }
    }
    assert!(missing.is_empty(), "not in the contents: {missing:?}");
}

/// README's `##` headings only.
fn readme_sections(readme: &str) -> String {
    let mut fenced = false;
    readme
        .lines()
        .filter(|line| {
            if line.trim_start().starts_with("```") {
                fenced = !fenced;
            }
            !fenced && line.starts_with("## ")
        })
        .collect::<Vec<_>>()
        .join("\n")
}
