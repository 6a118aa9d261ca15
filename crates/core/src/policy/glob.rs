//! The glob patterns of `match.service`, `match.task_type` and `match.model`: `*` is any run of
//! characters (none included), `?` exactly one, everything else itself, case-sensitive.

use std::fmt;

/// Characters other glob dialects give a meaning (classes, alternatives, escapes). They are
/// refused rather than taken literally, so `support-[ab]*` fails review instead of matching
/// nothing.
const RESERVED: &[char] = &['[', ']', '{', '}', '\\'];

/// A checked pattern.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct Glob {
    pattern: String,
}

impl Glob {
    pub fn new(pattern: &str) -> Result<Glob, String> {
        if pattern.is_empty() {
            return Err(
                "an empty pattern matches nothing; leave the key out to match any value".into(),
            );
        }
        if let Some(c) = pattern.chars().find(|c| RESERVED.contains(c)) {
            return Err(format!(
                "{pattern:?} uses {c:?}: patterns know only * (any run of characters) and ? (one character)"
            ));
        }
        Ok(Glob {
            pattern: pattern.to_owned(),
        })
    }

    pub fn as_str(&self) -> &str {
        &self.pattern
    }

    /// Whether `text` matches the whole pattern.
    ///
    /// Backtracks only to the latest `*`, which is enough for patterns of `*` and `?`: the time
    /// is bounded by pattern length × text length, never exponential.
    pub fn matches(&self, text: &str) -> bool {
        let pattern: Vec<char> = self.pattern.chars().collect();
        let text: Vec<char> = text.chars().collect();
        let (mut p, mut t) = (0, 0);
        // After the latest `*`: the pattern position behind it and the text position it took up to.
        let mut star: Option<(usize, usize)> = None;
        while t < text.len() {
            match pattern.get(p) {
                Some('*') => {
                    star = Some((p + 1, t));
                    p += 1;
                }
                Some('?') => {
                    p += 1;
                    t += 1;
                }
                Some(c) if *c == text[t] => {
                    p += 1;
                    t += 1;
                }
                _ => match star {
                    // Let the latest `*` take one more character and try again from there.
                    Some((after_star, taken)) => {
                        p = after_star;
                        t = taken + 1;
                        star = Some((after_star, taken + 1));
                    }
                    None => return false,
                },
            }
        }
        pattern[p..].iter().all(|c| *c == '*')
    }
}

impl fmt::Display for Glob {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.write_str(&self.pattern)
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn glob_matches_star_and_question_mark() {
        let cases = [
            ("support-*", "support-bot", true),
            ("support-*", "support-", true),
            ("support-*", "support", false),
            ("support-*", "my-support-bot", false),
            ("*", "", true),
            ("*", "anything at all", true),
            ("deepseek-*", "deepseek-v4-flash", true),
            ("deepseek-*-flash", "deepseek-v4-flash", true),
            ("deepseek-*-flash", "deepseek-v4-pro", false),
            ("glm-?", "glm-5", true),
            ("glm-?", "glm-51", false),
            ("glm-?", "glm-", false),
            ("?", "é", true),
            ("*a*b*c", "xxaxxbxxc", true),
            ("*a*b*c", "xxaxxbxxcx", false),
            (
                "a*a*a*a*b",
                "aaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaa",
                false,
            ),
            ("**", "x", true),
            ("Support-*", "support-bot", false),
            ("exact", "exact", true),
            ("exact", "exactly", false),
        ];
        for (pattern, text, expected) in cases {
            let glob = Glob::new(pattern).unwrap();
            assert_eq!(glob.matches(text), expected, "{pattern:?} vs {text:?}");
        }
    }

    #[test]
    fn glob_refuses_empty_patterns_and_other_dialects() {
        for bad in ["", "support-[ab]*", "{a,b}", "a\\*"] {
            assert!(Glob::new(bad).is_err(), "{bad:?}");
        }
    }
}
