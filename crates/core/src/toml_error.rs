//! Where in a TOML text a toml error points, for errors that name file, key, line and column
//! (config files in the collector, policy files here).

use std::ops::Range;

/// Where in a TOML text a toml error points: the dotted key (array elements as `name[i]`, from
/// 0), its message on one line, and the 1-based (line, column).
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct TomlErrorAt {
    pub key: String,
    pub message: String,
    pub location: Option<(usize, usize)>,
}

impl TomlErrorAt {
    pub fn new(text: &str, e: &toml::de::Error) -> TomlErrorAt {
        let span = e.span();
        TomlErrorAt {
            key: span
                .as_ref()
                .map(|s| key_path_at(text, s.start))
                .unwrap_or_default(),
            message: e.message().trim_end().to_owned(),
            location: span.map(|s| line_column(text, s.start)),
        }
    }
}

/// The dotted path of the deepest key whose name or value covers `offset`; empty when the text
/// does not parse (the error is then a syntax error, located by line and column).
fn key_path_at(text: &str, offset: usize) -> String {
    let Ok(doc) = toml::de::DeTable::parse(text) else {
        return String::new();
    };
    let mut path = Vec::new();
    find_key(doc.get_ref(), offset, &mut path);
    path.join(".")
}

fn find_key(table: &toml::de::DeTable<'_>, offset: usize, path: &mut Vec<String>) -> bool {
    let covers = |span: Range<usize>| span.contains(&offset);
    for (key, value) in table.iter() {
        path.push(key.get_ref().to_string());
        // A table's span can be its whole `[a.b]` header, so the key itself is checked before
        // descending, and the value only after no deeper key matched.
        if covers(key.span()) {
            return true;
        }
        if find_in_value(value.get_ref(), offset, path) || covers(value.span()) {
            return true;
        }
        path.pop();
    }
    false
}

/// Descends into a table, or into an array's elements (`[[policy]]`), naming element `i` of the
/// last key `key[i]`.
fn find_in_value(value: &toml::de::DeValue<'_>, offset: usize, path: &mut Vec<String>) -> bool {
    match value {
        toml::de::DeValue::Table(inner) => find_key(inner, offset, path),
        toml::de::DeValue::Array(items) => {
            let Some(name) = path.pop() else {
                return false;
            };
            for (i, item) in items.iter().enumerate() {
                path.push(format!("{name}[{i}]"));
                if find_in_value(item.get_ref(), offset, path) || item.span().contains(&offset) {
                    return true;
                }
                path.pop();
            }
            path.push(name);
            false
        }
        _ => false,
    }
}

/// 1-based line and column (in characters) of a byte offset.
fn line_column(text: &str, offset: usize) -> (usize, usize) {
    let before = text.get(..offset).unwrap_or(text);
    let line = before.matches('\n').count() + 1;
    let line_start = before.rfind('\n').map_or(0, |i| i + 1);
    let column = before[line_start..].chars().count() + 1;
    (line, column)
}
