//! An error and its causes on one line, each said once.
//!
//! anyhow's `{:#}` joins every error of the chain with `: `. Many of our errors (and those of
//! our dependencies) already end their message with their source's, as a `thiserror` message
//! with `{source}` does, so the same OS error came out twice:
//! `cannot read nope.jsonl: No such file or directory (os error 2): No such file or directory
//! (os error 2)`. A cause whose text the line already holds adds nothing and is left out.

/// `error: cause: cause…`, with every cause already in the text before it left out.
pub fn one_line(error: &anyhow::Error) -> String {
    let mut line = String::new();
    for cause in error.chain() {
        let text = cause.to_string();
        if line.is_empty() {
            line = text;
        } else if !line.contains(&text) {
            line.push_str(": ");
            line.push_str(&text);
        }
    }
    line
}

#[cfg(test)]
mod tests {
    use super::*;

    #[derive(Debug, thiserror::Error)]
    #[error("cannot read {file}: {source}")]
    struct Read {
        file: String,
        source: std::io::Error,
    }

    fn not_found() -> std::io::Error {
        std::io::Error::from(std::io::ErrorKind::NotFound)
    }

    #[test]
    fn a_source_the_message_already_holds_is_said_once() {
        let error = anyhow::Error::new(Read {
            file: "nope.jsonl".into(),
            source: not_found(),
        });
        let os = not_found().to_string();
        assert_eq!(one_line(&error), format!("cannot read nope.jsonl: {os}"));
        assert_eq!(format!("{error:#}").matches(&os).count(), 2);
    }

    #[test]
    fn context_and_causes_the_message_lacks_are_kept() {
        let error = anyhow::Error::new(not_found()).context("cannot load pricing snapshots");
        assert_eq!(
            one_line(&error),
            format!("cannot load pricing snapshots: {}", not_found())
        );
        let nested = anyhow::Error::new(Read {
            file: "a".into(),
            source: not_found(),
        })
        .context("replay");
        assert_eq!(
            one_line(&nested),
            format!("replay: cannot read a: {}", not_found())
        );
    }
}
