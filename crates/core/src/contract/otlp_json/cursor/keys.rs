//! An object's field names in the order the input gave them last.
//!
//! An exporter prints every span of a line with its fields in one order, so the key after
//! `"kind":3,` is nearly always the one that followed `kind` in the span before. The cursor
//! checks for that key first, a few word compares of `"name":` in place, and only scans and
//! matches the key as a string when the guess is wrong (the first span, a field added or
//! dropped). Both ways read the same key: the guess is taken only when the input holds
//! exactly its quoted name and the colon.

/// `"name":` packed into little-endian words, with a mask of the bytes it covers.
pub(super) struct QuotedKey {
    pub(super) name: &'static str,
    /// Bytes of `"name":`.
    pub(super) len: usize,
    words: [u64; WORDS],
    masks: [u64; WORDS],
}

const WORDS: usize = 4;
/// The bytes a quoted key is compared in: the longest OTLP span key, `"droppedAttributesCount":`,
/// is 25.
pub(super) const SPAN: usize = WORDS * 8;

impl QuotedKey {
    pub(super) const fn new(name: &'static str) -> QuotedKey {
        let bytes = name.as_bytes();
        let len = bytes.len() + 3;
        assert!(len <= SPAN, "a key longer than the compare");
        let mut words = [0u64; WORDS];
        let mut masks = [0u64; WORDS];
        let mut i = 0;
        while i < len {
            let byte = if i == 0 || i == len - 2 {
                b'"'
            } else if i == len - 1 {
                b':'
            } else {
                bytes[i - 1]
            };
            words[i / 8] |= (byte as u64) << (8 * (i % 8));
            masks[i / 8] |= 0xff << (8 * (i % 8));
            i += 1;
        }
        QuotedKey {
            name,
            len,
            words,
            masks,
        }
    }

    /// Whether `next`, the input from the key's opening quote on, starts with `"name":`.
    #[inline]
    pub(super) fn starts(&self, next: &[u8; SPAN]) -> bool {
        // Inline and unrolled: a loop over the words, called, was 15 instructions a key.
        const { assert!(WORDS == 4) };
        let word = |i: usize| {
            let mut bytes = [0u8; 8];
            bytes.copy_from_slice(&next[i * 8..i * 8 + 8]);
            (u64::from_le_bytes(bytes) ^ self.words[i]) & self.masks[i]
        };
        word(0) | word(1) | word(2) | word(3) == 0
    }
}

/// The keys one kind of object may have, and what followed each last time.
#[derive(Clone, Copy)]
pub(super) struct KeyOrder<const K: usize> {
    keys: &'static [QuotedKey; K],
    /// A key's index in `keys`: a `match`, which the compiler makes a few compares.
    index: fn(&str) -> Option<usize>,
    /// `next[i]`: the index of the key that followed key `i` last; `K` when none is known.
    next: [u8; K],
    first: u8,
}

impl<const K: usize> KeyOrder<K> {
    pub(super) const fn new(
        keys: &'static [QuotedKey; K],
        index: fn(&str) -> Option<usize>,
    ) -> KeyOrder<K> {
        const { assert!(K < u8::MAX as usize) };
        KeyOrder {
            keys,
            index,
            next: [K as u8; K],
            first: K as u8,
        }
    }

    /// The key expected after key `previous` (`None`: the object's first), and its index.
    pub(super) fn guess(&self, previous: Option<usize>) -> Option<(usize, &'static QuotedKey)> {
        let next = usize::from(match previous {
            None => self.first,
            Some(i) => *self.next.get(i)?,
        });
        Some((next, self.keys.get(next)?))
    }

    /// Notes that `key` followed `previous`; returns the state after it: its index, or `K` when
    /// it is none of the keys. After such a key nothing is guessed or learnt until the object
    /// ends: taking it for the object's start made the key after it the next object's first
    /// guess.
    pub(super) fn learn(&mut self, previous: Option<usize>, key: &str) -> usize {
        let index = (self.index)(key).filter(|&i| i < K).unwrap_or(K);
        let slot = match previous {
            None => Some(&mut self.first),
            Some(i) => self.next.get_mut(i),
        };
        if let Some(slot) = slot {
            *slot = index as u8;
        }
        index
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    /// A quoted key is found exactly: any byte of `"name":` changed, to any value, and it is
    /// not; whatever follows it does not matter.
    #[test]
    fn a_quoted_key_matches_its_own_bytes_and_no_others() {
        for name in [
            "a",
            "kind",
            "startTimeUnixNano",
            "droppedAttributesCount",
            "x".repeat(29).leak(),
        ] {
            let key = QuotedKey::new(name);
            let quoted = format!("\"{name}\":");
            assert_eq!(key.len, quoted.len());
            for tail in [0u8, b'"', b'x', 0xff] {
                let mut next = [tail; SPAN];
                next[..quoted.len()].copy_from_slice(quoted.as_bytes());
                assert!(key.starts(&next), "{name}");
                for place in 0..quoted.len() {
                    for byte in 0..=u8::MAX {
                        let mut changed = next;
                        changed[place] = byte;
                        assert_eq!(
                            key.starts(&changed),
                            byte == next[place],
                            "{name} {place} {byte}"
                        );
                    }
                }
            }
        }
    }

    fn index(key: &str) -> Option<usize> {
        ["a", "b", "c"].iter().position(|k| *k == key)
    }

    static KEYS: [QuotedKey; 3] = [
        QuotedKey::new("a"),
        QuotedKey::new("b"),
        QuotedKey::new("c"),
    ];

    #[test]
    fn the_order_guesses_what_followed_last_and_forgets_unknown_keys() {
        let mut order = KeyOrder::new(&KEYS, index);
        assert!(order.guess(None).is_none());
        assert_eq!(order.learn(None, "b"), 1);
        assert_eq!(order.learn(Some(1), "a"), 0);
        assert_eq!(order.learn(Some(0), "zz"), 3);
        // After a key that is none of them, nothing is learnt: the object's first guess stays.
        assert_eq!(order.learn(Some(3), "a"), 0);
        assert_eq!(order.guess(None).map(|(i, k)| (i, k.name)), Some((1, "b")));
        assert_eq!(
            order.guess(Some(1)).map(|(i, k)| (i, k.name)),
            Some((0, "a"))
        );
        assert!(order.guess(Some(0)).is_none());
        assert!(order.guess(Some(7)).is_none());
        assert!(order.guess(Some(3)).is_none());
        assert_eq!(order.learn(Some(7), "c"), 2);
    }
}
