//! The byte-class kernels behind the scanner's string handling: find the
//! next octet inside a JSON string that needs attention.
//!
//! Three implementations give identical answers (tests hold them to it):
//! a portable SWAR one (8 octets per step), SSE2 (16; every x86-64 CPU has
//! it) and AVX2 (32; chosen at run time). The scanner is generic over
//! [`Kernel`] and monomorphised per implementation, so the kernels inline into
//! its string loop.

/// Finds string octets that end the fast path.
pub(crate) trait Kernel {
    /// First index `>= from` whose octet is `"`, `\`, a control character
    /// (< 0x20) or non-ASCII (>= 0x80); `buf.len()` if none.
    fn find_special(buf: &[u8], from: usize) -> usize;

    /// First index `>= from` whose octet is `"`, `\` or a control character;
    /// non-ASCII octets are passed over. `buf.len()` if none.
    fn find_delimiter(buf: &[u8], from: usize) -> usize;
}

const ONES: u64 = 0x0101_0101_0101_0101;
const HIGHS: u64 = 0x8080_8080_8080_8080;

/// High bit set in every byte of `x` that is zero (exact for the lowest one;
/// later bytes may be false positives, which `trailing_zeros` never reaches).
#[inline(always)]
const fn zero_bytes(x: u64) -> u64 {
    x.wrapping_sub(ONES) & !x & HIGHS
}

/// High bit set in every byte of `x` below 0x20 (same caveat).
#[inline(always)]
const fn control_bytes(x: u64) -> u64 {
    x.wrapping_sub(ONES * 0x20) & !x & HIGHS
}

#[inline(always)]
fn scalar_special(b: u8) -> bool {
    b == b'"' || b == b'\\' || !(0x20..0x80).contains(&b)
}

#[inline(always)]
fn scalar_delimiter(b: u8) -> bool {
    b == b'"' || b == b'\\' || b < 0x20
}

/// The `find_special` hits in the eight octets at `buf[i..i + 8]` (one bit
/// per octet, at its high bit); `None` if fewer than eight remain.
#[inline(always)]
fn special_word(buf: &[u8], i: usize) -> Option<u64> {
    let chunk: [u8; 8] = buf.get(i..i + 8)?.try_into().ok()?;
    let x = u64::from_le_bytes(chunk);
    Some(
        zero_bytes(x ^ (ONES * u64::from(b'"')))
            | zero_bytes(x ^ (ONES * u64::from(b'\\')))
            | control_bytes(x)
            | (x & HIGHS),
    )
}

/// SWAR: eight octets per step with plain 64-bit arithmetic.
pub(crate) struct Portable;

impl Kernel for Portable {
    #[inline(always)]
    fn find_special(buf: &[u8], mut i: usize) -> usize {
        while let Some(hits) = special_word(buf, i) {
            if hits != 0 {
                return i + (hits.trailing_zeros() / 8) as usize;
            }
            i += 8;
        }
        while i < buf.len() && !scalar_special(buf[i]) {
            i += 1;
        }
        i
    }

    #[inline(always)]
    fn find_delimiter(buf: &[u8], mut i: usize) -> usize {
        while let Some(chunk) = buf.get(i..i + 8) {
            let x = u64::from_le_bytes(chunk.try_into().unwrap_or([0; 8]));
            // Octets >= 0x80 cannot be false "control" hits: `!x` clears their high bit.
            let hits = zero_bytes(x ^ (ONES * u64::from(b'"')))
                | zero_bytes(x ^ (ONES * u64::from(b'\\')))
                | control_bytes(x);
            if hits != 0 {
                return i + (hits.trailing_zeros() / 8) as usize;
            }
            i += 8;
        }
        while i < buf.len() && !scalar_delimiter(buf[i]) {
            i += 1;
        }
        i
    }
}

#[cfg(target_arch = "x86_64")]
pub(crate) use x86::{Avx2, Sse2};

#[cfg(target_arch = "x86_64")]
mod x86 {
    use std::arch::x86_64::*;

    use super::{Kernel, Portable, special_word};

    /// SSE2, part of the x86-64 baseline: 16 octets per step.
    pub(crate) struct Sse2;

    impl Kernel for Sse2 {
        #[inline(always)]
        fn find_special(buf: &[u8], mut i: usize) -> usize {
            // Most JSON strings are short: one 8-octet word answers them.
            match special_word(buf, i) {
                Some(0) => i += 8,
                Some(hits) => return i + (hits.trailing_zeros() / 8) as usize,
                None => return Portable::find_special(buf, i),
            }
            // SAFETY: SSE2 is part of the x86-64 baseline; every load reads
            // 16 octets inside `buf` (checked by the loop condition).
            unsafe {
                let quote = _mm_set1_epi8(b'"' as i8);
                let backslash = _mm_set1_epi8(b'\\' as i8);
                let space = _mm_set1_epi8(0x20);
                while i + 16 <= buf.len() {
                    let v = _mm_loadu_si128(buf.as_ptr().add(i).cast());
                    // Signed compare: 0x00..0x1F and 0x80..0xFF are both "< 0x20".
                    let m = _mm_or_si128(
                        _mm_or_si128(_mm_cmpeq_epi8(v, quote), _mm_cmpeq_epi8(v, backslash)),
                        _mm_cmplt_epi8(v, space),
                    );
                    let mask = _mm_movemask_epi8(m) as u32;
                    if mask != 0 {
                        return i + mask.trailing_zeros() as usize;
                    }
                    i += 16;
                }
            }
            Portable::find_special(buf, i)
        }

        #[inline(always)]
        fn find_delimiter(buf: &[u8], mut i: usize) -> usize {
            // SAFETY: as above.
            unsafe {
                let quote = _mm_set1_epi8(b'"' as i8);
                let backslash = _mm_set1_epi8(b'\\' as i8);
                let max_control = _mm_set1_epi8(0x1F);
                while i + 16 <= buf.len() {
                    let v = _mm_loadu_si128(buf.as_ptr().add(i).cast());
                    // Unsigned v <= 0x1F  <=>  max(v, 0x1F) == 0x1F.
                    let control = _mm_cmpeq_epi8(_mm_max_epu8(v, max_control), max_control);
                    let m = _mm_or_si128(
                        _mm_or_si128(_mm_cmpeq_epi8(v, quote), _mm_cmpeq_epi8(v, backslash)),
                        control,
                    );
                    let mask = _mm_movemask_epi8(m) as u32;
                    if mask != 0 {
                        return i + mask.trailing_zeros() as usize;
                    }
                    i += 16;
                }
            }
            Portable::find_delimiter(buf, i)
        }
    }

    /// AVX2: the first 16 octets inline with SSE2 (most JSON strings are
    /// short), then 32 octets per step out of line. Only instantiated after
    /// run-time detection of AVX2 (`scan::scan`, `scan::scan_using`).
    pub(crate) struct Avx2;

    impl Kernel for Avx2 {
        #[inline(always)]
        fn find_special(buf: &[u8], i: usize) -> usize {
            // Up to 24 octets inline (one SWAR word, one SSE2 vector).
            let inline_end = (i + 24).min(buf.len());
            let first = Sse2::find_special(&buf[..inline_end], i);
            if first < inline_end || inline_end == buf.len() {
                return first;
            }
            // SAFETY: this kernel is only used where AVX2 was detected.
            unsafe { avx2_find_special(buf, inline_end) }
        }

        #[inline(always)]
        fn find_delimiter(buf: &[u8], i: usize) -> usize {
            if i + 16 > buf.len() {
                return Portable::find_delimiter(buf, i);
            }
            let first = Sse2::find_delimiter(&buf[..i + 16], i);
            if first < i + 16 {
                return first;
            }
            // SAFETY: this kernel is only used where AVX2 was detected.
            unsafe { avx2_find_delimiter(buf, i + 16) }
        }
    }

    #[target_feature(enable = "avx2")]
    unsafe fn avx2_find_special(buf: &[u8], mut i: usize) -> usize {
        let quote = _mm256_set1_epi8(b'"' as i8);
        let backslash = _mm256_set1_epi8(b'\\' as i8);
        let space = _mm256_set1_epi8(0x20);
        while i + 32 <= buf.len() {
            // SAFETY: the load reads 32 octets inside `buf`.
            let v = unsafe { _mm256_loadu_si256(buf.as_ptr().add(i).cast()) };
            let m = _mm256_or_si256(
                _mm256_or_si256(_mm256_cmpeq_epi8(v, quote), _mm256_cmpeq_epi8(v, backslash)),
                _mm256_cmpgt_epi8(space, v),
            );
            let mask = _mm256_movemask_epi8(m) as u32;
            if mask != 0 {
                return i + mask.trailing_zeros() as usize;
            }
            i += 32;
        }
        Sse2::find_special(buf, i)
    }

    #[target_feature(enable = "avx2")]
    unsafe fn avx2_find_delimiter(buf: &[u8], mut i: usize) -> usize {
        let quote = _mm256_set1_epi8(b'"' as i8);
        let backslash = _mm256_set1_epi8(b'\\' as i8);
        let max_control = _mm256_set1_epi8(0x1F);
        while i + 32 <= buf.len() {
            // SAFETY: the load reads 32 octets inside `buf`.
            let v = unsafe { _mm256_loadu_si256(buf.as_ptr().add(i).cast()) };
            let control = _mm256_cmpeq_epi8(_mm256_max_epu8(v, max_control), max_control);
            let m = _mm256_or_si256(
                _mm256_or_si256(_mm256_cmpeq_epi8(v, quote), _mm256_cmpeq_epi8(v, backslash)),
                control,
            );
            let mask = _mm256_movemask_epi8(m) as u32;
            if mask != 0 {
                return i + mask.trailing_zeros() as usize;
            }
            i += 32;
        }
        Sse2::find_delimiter(buf, i)
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    fn reference_special(buf: &[u8], from: usize) -> usize {
        (from..buf.len())
            .find(|&i| scalar_special(buf[i]))
            .unwrap_or(buf.len())
    }

    fn reference_delimiter(buf: &[u8], from: usize) -> usize {
        (from..buf.len())
            .find(|&i| scalar_delimiter(buf[i]))
            .unwrap_or(buf.len())
    }

    fn check_all(buf: &[u8]) {
        for from in 0..=buf.len() {
            let want_s = reference_special(buf, from);
            let want_d = reference_delimiter(buf, from);
            assert_eq!(
                Portable::find_special(buf, from),
                want_s,
                "portable {buf:?} {from}"
            );
            assert_eq!(
                Portable::find_delimiter(buf, from),
                want_d,
                "portable {buf:?} {from}"
            );
            #[cfg(target_arch = "x86_64")]
            {
                assert_eq!(Sse2::find_special(buf, from), want_s, "sse2 {buf:?} {from}");
                assert_eq!(
                    Sse2::find_delimiter(buf, from),
                    want_d,
                    "sse2 {buf:?} {from}"
                );
                if std::is_x86_feature_detected!("avx2") {
                    assert_eq!(Avx2::find_special(buf, from), want_s, "avx2 {buf:?} {from}");
                    assert_eq!(
                        Avx2::find_delimiter(buf, from),
                        want_d,
                        "avx2 {buf:?} {from}"
                    );
                }
            }
        }
    }

    #[test]
    fn kernels_agree_on_every_octet_at_every_position() {
        for special in 0u8..=255 {
            for pos in [0usize, 7, 8, 15, 16, 31, 32, 40, 63, 70] {
                let mut buf = [b'a'; 72];
                buf[pos] = special;
                check_all(&buf[..]);
            }
        }
    }

    #[test]
    fn kernels_agree_on_mixed_text() {
        let text = "plain ascii, \"quoted\", back\\slash, \u{e9}t\u{e9}, \u{4e2d}\u{6587}, \t tab and \u{1F600} emoji".repeat(3);
        check_all(text.as_bytes());
        check_all(b"");
        check_all(&[0xFF; 50]);
    }
}
