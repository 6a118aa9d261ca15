use proptest::prelude::*;

use super::{hex16, hex_pairs, stops16};

/// The sixteen-byte step flags exactly the bytes that end a plain run, whatever the byte and
/// wherever it is, and nothing in a chunk of plain bytes (a signed compare would also flag the
/// bytes from 0x80, which UTF-8 text is full of).
#[test]
fn the_sixteen_byte_step_flags_quotes_backslashes_and_control_bytes_only() {
    for at in 0..16 {
        for byte in 0..=u8::MAX {
            let mut chunk = [b'm'; 16];
            chunk[at] = byte;
            let stop = byte == b'"' || byte == b'\\' || byte < 0x20;
            let expected = if stop { 1 << at } else { 0 };
            assert_eq!(stops16(&chunk), expected, "{byte:#04x} at {at}");
        }
    }
    let mut chunk = [b'm'; 16];
    chunk[3] = b'"';
    chunk[9] = 0x01;
    assert_eq!(stops16(&chunk).trailing_zeros(), 3);
}

/// Sixteen digits at once read what the table reads, two by two: any byte at any place, in a
/// chunk of digits of both cases.
#[test]
fn sixteen_hex_digits_at_once_read_as_the_table_reads_them() {
    let digits = *b"0123456789abcDEF";
    for at in 0..16 {
        for byte in 0..=u8::MAX {
            let mut chunk = digits;
            chunk[at] = byte;
            let mut expected = [0u8; 8];
            let expected = hex_pairs(&mut expected, &chunk).map(|()| expected);
            assert_eq!(hex16(&chunk), expected, "{byte:#04x} at {at}");
            assert_eq!(expected.is_some(), byte.is_ascii_hexdigit(), "{byte:#04x}");
        }
    }
    assert_eq!(
        hex16(b"0123456789abcDEF"),
        Some([0x01, 0x23, 0x45, 0x67, 0x89, 0xab, 0xcd, 0xef])
    );
    assert_eq!(hex16(b"ffffffffffffffff"), Some([0xff; 8]));
    assert_eq!(hex16(b"0000000000000000"), Some([0; 8]));
}

proptest! {
    #[test]
    fn hex_digits_read_as_the_table_reads_them(chunk in proptest::array::uniform16(
        prop_oneof![8 => proptest::sample::select(b"0123456789abcdefABCDEF".to_vec()), 1 => any::<u8>()],
    )) {
        let mut expected = [0u8; 8];
        let expected = hex_pairs(&mut expected, &chunk).map(|()| expected);
        prop_assert_eq!(hex16(&chunk), expected);
    }
}
