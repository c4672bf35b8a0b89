//! Wrapping 32-bit sequence-number arithmetic (RFC 9293 §3.4; Linux `before()`/`after()`).
//!
//! Sequence numbers live in a 2^32 circle; `a` is "before" `b` when the signed distance
//! `a - b` is negative. All TCP sequence, ACK and timestamp comparisons go through these.

/// `a` comes strictly before `b` in sequence space (`(a - b) as i32 < 0`).
#[inline]
pub fn before(a: u32, b: u32) -> bool {
    (a.wrapping_sub(b) as i32) < 0
}

/// `a` comes strictly after `b` in sequence space.
#[inline]
pub fn after(a: u32, b: u32) -> bool {
    before(b, a)
}

/// `a <= b` in sequence space.
#[inline]
pub fn before_eq(a: u32, b: u32) -> bool {
    !after(a, b)
}

/// `a >= b` in sequence space.
#[inline]
pub fn after_eq(a: u32, b: u32) -> bool {
    !before(a, b)
}

/// `lo <= x <= hi` in sequence space (Linux `between()`: computed as `hi - lo >= x - lo`).
#[inline]
pub fn between(x: u32, lo: u32, hi: u32) -> bool {
    hi.wrapping_sub(lo) >= x.wrapping_sub(lo)
}

/// The later of two sequence numbers.
#[inline]
pub fn seq_max(a: u32, b: u32) -> u32 {
    if after(a, b) {
        a
    } else {
        b
    }
}

/// The earlier of two sequence numbers.
#[inline]
pub fn seq_min(a: u32, b: u32) -> u32 {
    if before(a, b) {
        a
    } else {
        b
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn rfc9293_3_4_wraparound() {
        assert!(before(1, 2));
        assert!(!before(2, 2));
        assert!(before(u32::MAX, 0));
        assert!(after(5, u32::MAX - 5));
        assert!(before_eq(7, 7) && after_eq(7, 7));
        assert!(between(0, u32::MAX - 1, 3));
        assert!(!between(4, u32::MAX - 1, 3));
        assert_eq!(seq_max(u32::MAX, 1), 1);
        assert_eq!(seq_min(u32::MAX, 1), u32::MAX);
    }
}
