//! The Prometheus text exposition format, version 0.0.4, written by hand.
//!
//! The format is a few lines of rules (HELP, TYPE, `name{label="value"} number`); writing it here
//! keeps a client library and its global registry out of the dependency tree.

use super::names::Family;

/// A `/metrics` body being written, one family at a time.
#[derive(Debug, Default)]
pub(super) struct Exposition {
    text: String,
}

impl Exposition {
    /// Starts a family with its `# HELP` and `# TYPE` lines. Written even when the family has no
    /// series yet, so an operator can discover every metric on a fresh collector.
    pub(super) fn family(&mut self, family: &Family) {
        self.text.push_str("# HELP ");
        self.text.push_str(family.name);
        self.text.push(' ');
        escape_into(&mut self.text, family.help, false);
        self.text.push_str("\n# TYPE ");
        self.text.push_str(family.name);
        self.text.push(' ');
        self.text.push_str(family.kind.as_str());
        self.text.push('\n');
    }

    /// Writes one series of `family`. `value` must already be a valid Prometheus number.
    pub(super) fn sample(&mut self, family: &Family, labels: &[(&str, &str)], value: &str) {
        self.text.push_str(family.name);
        if !labels.is_empty() {
            self.text.push('{');
            for (i, (name, value)) in labels.iter().enumerate() {
                if i > 0 {
                    self.text.push(',');
                }
                self.text.push_str(name);
                self.text.push_str("=\"");
                escape_into(&mut self.text, value, true);
                self.text.push('"');
            }
            self.text.push('}');
        }
        self.text.push(' ');
        self.text.push_str(value);
        self.text.push('\n');
    }

    /// A family without labels: its HELP and TYPE lines and its single series.
    pub(super) fn single(&mut self, family: &Family, value: &str) {
        self.family(family);
        self.sample(family, &[], value);
    }

    pub(super) fn finish(self) -> String {
        self.text
    }
}

/// Escapes backslash and newline (and, in a label value, the double quote), as the format
/// requires: task types and billing groups come from client spans and may contain anything.
fn escape_into(out: &mut String, text: &str, in_label_value: bool) {
    for c in text.chars() {
        match c {
            '\\' => out.push_str("\\\\"),
            '\n' => out.push_str("\\n"),
            '"' if in_label_value => out.push_str("\\\""),
            other => out.push(other),
        }
    }
}
