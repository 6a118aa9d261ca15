//! The layering the workspace promises (docs/architecture.md), checked over the source text:
//! no cycle between the modules of either crate (top-level modules, and the children of each
//! directory module), and a core without tokio, I/O or a clock. `use crate::` edges are read
//! from non-test code; a new edge that closes a cycle fails here naming the files that make it.

use std::collections::{BTreeMap, BTreeSet};
use std::fs;
use std::path::{Path, PathBuf};

const ROOT: &str = env!("CARGO_MANIFEST_DIR");

/// Module name → the modules it uses, each with the files that use it.
type Graph = BTreeMap<String, BTreeMap<String, BTreeSet<String>>>;

/// The `.rs` files under `dir` that are not tests, relative to `dir`.
fn sources(dir: &Path) -> Vec<PathBuf> {
    let mut files = Vec::new();
    let mut stack = vec![dir.to_path_buf()];
    while let Some(at) = stack.pop() {
        for entry in fs::read_dir(&at).unwrap() {
            let path = entry.unwrap().path();
            let name = path.file_name().unwrap().to_string_lossy().into_owned();
            if path.is_dir() {
                if name != "tests" {
                    stack.push(path);
                }
            } else if name.ends_with(".rs") && name != "tests.rs" {
                files.push(path.strip_prefix(dir).unwrap().to_path_buf());
            }
        }
    }
    files.sort();
    files
}

/// The code of a file without its unit tests and comments.
fn code(path: &Path) -> String {
    let text = fs::read_to_string(path).unwrap();
    let text = match text.find("#[cfg(test)]\nmod tests") {
        Some(at) => &text[..at],
        None => &text[..],
    };
    text.lines()
        .map(|line| match line.find("//") {
            Some(at) => &line[..at],
            None => line,
        })
        .collect::<Vec<_>>()
        .join("\n")
}

/// The names following `prefix` in `code`: `prefix name` or each first name of
/// `prefix{a::b, c}`.
fn names_after(code: &str, prefix: &str) -> Vec<String> {
    let mut names = Vec::new();
    let mut rest = code;
    while let Some(at) = rest.find(prefix) {
        let before = rest[..at].chars().next_back();
        rest = &rest[at + prefix.len()..];
        if before.is_some_and(|c| c.is_alphanumeric() || c == '_' || c == ':') {
            continue;
        }
        if let Some(group) = rest.strip_prefix('{') {
            let group = &group[..group.find('}').unwrap_or(group.len())];
            for item in group.split(',') {
                names.push(ident(item.trim_start()));
            }
        } else {
            names.push(ident(rest));
        }
    }
    names.retain(|n| !n.is_empty());
    names
}

fn ident(text: &str) -> String {
    text.chars()
        .take_while(|c| c.is_alphanumeric() || *c == '_')
        .collect()
}

/// The module a file belongs to among `modules`, the children of the directory the files are
/// relative to.
fn owner(file: &Path) -> String {
    let first = file
        .components()
        .next()
        .unwrap()
        .as_os_str()
        .to_string_lossy();
    first.trim_end_matches(".rs").to_owned()
}

/// The children of directory `dir` (files and directories), as modules.
fn children(dir: &Path) -> BTreeSet<String> {
    fs::read_dir(dir)
        .unwrap()
        .map(|entry| entry.unwrap().path())
        .filter_map(|path| {
            let name = path.file_name()?.to_string_lossy().into_owned();
            match name.strip_suffix(".rs") {
                Some(_) if ["lib.rs", "main.rs", "mod.rs", "tests.rs"].contains(&name.as_str()) => {
                    None
                }
                Some(stem) => Some(stem.to_owned()),
                None if path.is_dir() && name != "tests" => Some(name),
                None => None,
            }
        })
        .collect()
}

/// The edges among the children of `dir`, a crate's `src` (`path_in_crate` empty) or a
/// directory module in it (`path_in_crate` `"a::b"`). A child names a sibling as
/// `crate::<path>::sibling`, or, from the child's own file, `super::sibling`.
fn graph(dir: &Path, path_in_crate: &str) -> Graph {
    let modules = children(dir);
    let absolute = if path_in_crate.is_empty() {
        "crate::".to_owned()
    } else {
        format!("crate::{path_in_crate}::")
    };
    let mut graph = Graph::new();
    for file in sources(dir) {
        let from = owner(&file);
        if !modules.contains(&from) {
            continue;
        }
        let code = code(&dir.join(&file));
        let mut used = names_after(&code, &absolute);
        if !path_in_crate.is_empty() && file.components().count() == 1 {
            used.extend(names_after(&code, "super::"));
        }
        for to in used {
            if to != from && modules.contains(&to) {
                graph
                    .entry(from.clone())
                    .or_default()
                    .entry(to)
                    .or_default()
                    .insert(file.display().to_string());
            }
        }
    }
    graph
}

/// The strongly connected components of more than one module (Tarjan).
fn cycles(graph: &Graph) -> Vec<Vec<String>> {
    struct Search<'a> {
        graph: &'a Graph,
        index: BTreeMap<&'a str, usize>,
        low: BTreeMap<&'a str, usize>,
        stack: Vec<&'a str>,
        found: Vec<Vec<String>>,
    }
    impl<'a> Search<'a> {
        fn visit(&mut self, v: &'a str) {
            let n = self.index.len();
            self.index.insert(v, n);
            self.low.insert(v, n);
            self.stack.push(v);
            for w in self.graph.get(v).into_iter().flat_map(|e| e.keys()) {
                let w = w.as_str();
                if !self.index.contains_key(w) {
                    self.visit(w);
                    let low = self.low[v].min(self.low[w]);
                    self.low.insert(v, low);
                } else if self.stack.contains(&w) {
                    let low = self.low[v].min(self.index[w]);
                    self.low.insert(v, low);
                }
            }
            if self.low[v] == self.index[v] {
                let at = self.stack.iter().rposition(|m| *m == v).unwrap();
                let component: Vec<String> = self.stack.drain(at..).map(str::to_owned).collect();
                if component.len() > 1 {
                    self.found.push(component);
                }
            }
        }
    }
    let mut search = Search {
        graph,
        index: BTreeMap::new(),
        low: BTreeMap::new(),
        stack: Vec::new(),
        found: Vec::new(),
    };
    for v in graph.keys() {
        if !search.index.contains_key(v.as_str()) {
            search.visit(v);
        }
    }
    search.found
}

/// Every cycle of `graph`, with the edges inside it and the files that make them.
fn describe(scope: &str, graph: &Graph) -> Vec<String> {
    cycles(graph)
        .into_iter()
        .map(|component| {
            let mut text = format!("{scope}: modules {} form a cycle:", component.join(", "));
            for from in &component {
                for (to, files) in graph.get(from).into_iter().flatten() {
                    if component.contains(to) {
                        let files: Vec<&str> = files.iter().map(String::as_str).collect();
                        text.push_str(&format!("\n  {from} -> {to} ({})", files.join(", ")));
                    }
                }
            }
            text
        })
        .collect()
}

/// Every scope to check: each crate's top level and each directory module, recursively.
fn scopes(src: &Path) -> Vec<(PathBuf, String)> {
    let mut scopes = vec![(src.to_path_buf(), String::new())];
    let mut at = 0;
    while at < scopes.len() {
        let (dir, path) = scopes[at].clone();
        for child in children(&dir) {
            let sub = dir.join(&child);
            if sub.is_dir() {
                let path = if path.is_empty() {
                    child
                } else {
                    format!("{path}::{child}")
                };
                scopes.push((sub, path));
            }
        }
        at += 1;
    }
    scopes
}

#[test]
fn no_module_of_either_crate_is_in_a_cycle() {
    let mut problems = Vec::new();
    let mut edges = 0;
    for (krate, src) in [("collector", "src"), ("core", "crates/core/src")] {
        for (dir, path) in scopes(&Path::new(ROOT).join(src)) {
            let graph = graph(&dir, &path);
            edges += graph.values().map(BTreeMap::len).sum::<usize>();
            let scope = if path.is_empty() {
                format!("{krate} crate")
            } else {
                format!("{krate} {path}")
            };
            problems.extend(describe(&scope, &graph));
        }
    }
    // A reader that found no edges would pass everything.
    assert!(
        edges > 50,
        "only {edges} module edges found: the reader is broken"
    );
    assert!(problems.is_empty(), "{}", problems.join("\n"));
}

#[test]
fn the_cycle_check_finds_a_cycle_and_names_its_files() {
    let mut graph = Graph::new();
    let mut edge = |from: &str, to: &str, file: &str| {
        graph
            .entry(from.to_owned())
            .or_default()
            .entry(to.to_owned())
            .or_default()
            .insert(file.to_owned());
    };
    edge("config", "sinks", "config.rs");
    edge("sinks", "kernel", "sinks/mod.rs");
    edge("sinks", "config", "sinks/forward/config.rs");
    let found = describe("test", &graph);
    assert_eq!(found.len(), 1, "{found:?}");
    assert!(
        found[0].contains("sinks -> config (sinks/forward/config.rs)"),
        "{}",
        found[0]
    );
    assert_eq!(
        names_after("use crate::{a::b, c};\nuse crate::d::e;", "crate::"),
        ["a", "c", "d"]
    );
}

#[test]
fn the_core_has_no_tokio_no_io_and_no_clock() {
    let manifest = fs::read_to_string(Path::new(ROOT).join("crates/core/Cargo.toml")).unwrap();
    let dependencies = manifest
        .split("[dependencies]")
        .nth(1)
        .and_then(|rest| rest.split("\n[").next())
        .unwrap_or_default();
    let mut problems = Vec::new();
    for crate_name in ["tokio", "reqwest", "object_store", "tonic", "axum", "hyper"] {
        if dependencies
            .lines()
            .any(|line| line.trim_start().starts_with(&format!("{crate_name} ")))
        {
            problems.push(format!("crates/core/Cargo.toml depends on {crate_name}"));
        }
    }
    let src = Path::new(ROOT).join("crates/core/src");
    for file in sources(&src) {
        let code = code(&src.join(&file));
        for forbidden in [
            "std::fs",
            "std::net",
            "std::env",
            "std::thread",
            "std::process",
            "Instant::now",
            "SystemTime::now",
            "Utc::now",
            "tokio::",
        ] {
            // The core's test helpers read the shipped snapshots; they are `#[cfg(test)]`.
            let outside_tests = code.split("#[cfg(test)]").enumerate().any(|(i, part)| {
                let part = if i == 0 {
                    part
                } else {
                    part.split_once("\n}\n").map_or("", |(_, after)| after)
                };
                part.contains(forbidden)
            });
            if outside_tests {
                problems.push(format!("crates/core/src/{}: {forbidden}", file.display()));
            }
        }
        if code.contains("retry_spend_collector") {
            problems.push(format!(
                "crates/core/src/{} names the collector crate",
                file.display()
            ));
        }
    }
    assert!(problems.is_empty(), "{}", problems.join("\n"));
}
