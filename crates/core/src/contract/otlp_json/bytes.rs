//! Byte-level helpers of the JSON readers: where a string's plain run stops, and hex ids.
//! On x86_64 both take sixteen bytes at a time with SSE2, part of that target's baseline;
//! elsewhere they fall back to words and a table, with the same results (the tests compare
//! both ways on every byte).

/// The high bit of each byte of `word` (little-endian) that is `"`, `\` or below 0x20, exact
/// for the lowest such byte (a borrow may flag bytes above it).
pub(super) fn stops(word: u64) -> u64 {
    const ONES: u64 = 0x0101_0101_0101_0101;
    const HIGH: u64 = 0x8080_8080_8080_8080;
    let quote = word ^ (ONES * u64::from(b'"'));
    let slash = word ^ (ONES * u64::from(b'\\'));
    ((quote.wrapping_sub(ONES) & !quote)
        | (slash.wrapping_sub(ONES) & !slash)
        | (word.wrapping_sub(ONES * 0x20) & !word))
        & HIGH
}

/// Sixteen bytes in one SSE2 register, byte `i` in lane `i`: compiled to one unaligned load,
/// without the raw pointer `_mm_loadu_si128` takes.
#[cfg(target_arch = "x86_64")]
#[target_feature(enable = "sse2")]
fn load16(bytes: &[u8; 16]) -> std::arch::x86_64::__m128i {
    let word = |half: &[u8]| half.try_into().map_or(0, i64::from_le_bytes);
    std::arch::x86_64::_mm_set_epi64x(word(&bytes[8..]), word(&bytes[..8]))
}

/// Bit `i` set when byte `i` of `chunk` is `"`, `\\` or below 0x20, exact for the lowest set bit
/// (the scan needs no more).
#[cfg(target_arch = "x86_64")]
#[inline(always)]
pub(super) fn stops16(chunk: &[u8; 16]) -> u32 {
    // Three byte-wise compares of all sixteen bytes: 2% fewer instructions in `replay` than two
    // words of `stops` (BENCHMARKS.md, issue 18, twenty-third pass).
    #[target_feature(enable = "sse2")]
    fn sse2(chunk: &[u8; 16]) -> u32 {
        use std::arch::x86_64::{
            _mm_cmpeq_epi8, _mm_cmplt_epi8, _mm_movemask_epi8, _mm_or_si128, _mm_set1_epi8,
            _mm_xor_si128,
        };
        let v = load16(chunk);
        let quote = _mm_cmpeq_epi8(v, _mm_set1_epi8(b'"' as i8));
        let slash = _mm_cmpeq_epi8(v, _mm_set1_epi8(b'\\' as i8));
        // `byte < 0x20` unsigned, by SSE2's signed compare with both sides shifted by 0x80.
        let control = _mm_cmplt_epi8(
            _mm_xor_si128(v, _mm_set1_epi8(i8::MIN)),
            _mm_set1_epi8((0x20 ^ 0x80) as u8 as i8),
        );
        _mm_movemask_epi8(_mm_or_si128(_mm_or_si128(quote, slash), control)) as u32
    }
    // SAFETY: SSE2 is part of the x86_64 baseline, so every processor this runs on has it.
    unsafe { sse2(chunk) }
}

/// As the x86_64 `stops16`, from two words of [`stops`].
#[cfg(not(target_arch = "x86_64"))]
#[inline(always)]
pub(super) fn stops16(chunk: &[u8; 16]) -> u32 {
    let word = |half: &[u8]| half.try_into().map_or(0, u64::from_le_bytes);
    match (stops(word(&chunk[..8])), stops(word(&chunk[8..]))) {
        (0, 0) => 0,
        (0, high) => 1 << (8 + high.trailing_zeros() / 8),
        (low, _) => 1 << (low.trailing_zeros() / 8),
    }
}

/// The eight bytes sixteen hex digits (either case) spell, or `None` when one is not a hex
/// digit.
#[cfg(target_arch = "x86_64")]
#[inline(always)]
pub(super) fn hex16(digits: &[u8; 16]) -> Option<[u8; 8]> {
    #[target_feature(enable = "sse2")]
    fn sse2(digits: &[u8; 16]) -> (i32, i64) {
        use std::arch::x86_64::{
            _mm_and_si128, _mm_andnot_si128, _mm_cmpgt_epi8, _mm_cmplt_epi8, _mm_cvtsi128_si64,
            _mm_movemask_epi8, _mm_or_si128, _mm_packus_epi16, _mm_set1_epi16, _mm_set1_epi8,
            _mm_setzero_si128, _mm_slli_epi16, _mm_srli_epi16, _mm_sub_epi8,
        };
        let v = load16(digits);
        // Signed compares: bytes from 0x80 are negative, so neither digits nor letters.
        let within = |v, low: u8, high: u8| {
            _mm_and_si128(
                _mm_cmpgt_epi8(v, _mm_set1_epi8(low as i8 - 1)),
                _mm_cmplt_epi8(v, _mm_set1_epi8(high as i8 + 1)),
            )
        };
        let digit = within(v, b'0', b'9');
        // Setting 0x20 lowers `A`–`F` and maps nothing else onto `a`–`f`.
        let lower = _mm_or_si128(v, _mm_set1_epi8(0x20));
        let letter = within(lower, b'a', b'f');
        let valid = _mm_movemask_epi8(_mm_or_si128(digit, letter));
        let nibbles = _mm_or_si128(
            _mm_and_si128(digit, _mm_sub_epi8(v, _mm_set1_epi8(b'0' as i8))),
            _mm_andnot_si128(digit, _mm_sub_epi8(lower, _mm_set1_epi8((b'a' - 10) as i8))),
        );
        // Each pair of digits is a 16-bit lane, the first digit in its low byte.
        let high = _mm_slli_epi16::<4>(_mm_and_si128(nibbles, _mm_set1_epi16(0x00ff)));
        let low = _mm_srli_epi16::<8>(nibbles);
        let bytes = _mm_packus_epi16(_mm_or_si128(high, low), _mm_setzero_si128());
        (valid, _mm_cvtsi128_si64(bytes))
    }
    // SAFETY: SSE2 is part of the x86_64 baseline, so every processor this runs on has it.
    let (valid, bytes) = unsafe { sse2(digits) };
    (valid == 0xffff).then(|| bytes.to_le_bytes())
}

/// As the x86_64 `hex16`, by [`hex_pairs`].
#[cfg(not(target_arch = "x86_64"))]
#[inline(always)]
pub(super) fn hex16(digits: &[u8; 16]) -> Option<[u8; 8]> {
    let mut bytes = [0u8; 8];
    hex_pairs(&mut bytes, digits)?;
    Some(bytes)
}

/// Fills `out` from twice as many hex digits (either case), by table; `None` when one is not
/// a hex digit.
pub(super) fn hex_pairs(out: &mut [u8], digits: &[u8]) -> Option<()> {
    for (byte, pair) in out.iter_mut().zip(digits.chunks_exact(2)) {
        let (high, low) = (HEX[usize::from(pair[0])], HEX[usize::from(pair[1])]);
        if (high | low) & 0xf0 != 0 {
            return None;
        }
        *byte = high << 4 | low;
    }
    Some(())
}

/// Each byte's value as a hex digit, or 0xff.
const HEX: [u8; 256] = {
    let mut table = [0xff; 256];
    let mut i = 0;
    while i < 10 {
        table[b'0' as usize + i] = i as u8;
        i += 1;
    }
    let mut i = 0;
    while i < 6 {
        table[b'a' as usize + i] = 10 + i as u8;
        table[b'A' as usize + i] = 10 + i as u8;
        i += 1;
    }
    table
};

#[cfg(test)]
mod tests;
