//! A bounded free-list of byte buffers, so the hot path reuses packet storage.

/// Free-list of `Vec<u8>` buffers.
#[derive(Debug, Default)]
pub struct BufPool {
    free: Vec<Vec<u8>>,
    max: usize,
}

impl BufPool {
    /// A pool keeping at most `max` spare buffers.
    pub fn new(max: usize) -> BufPool {
        BufPool {
            free: Vec::new(),
            max,
        }
    }
    /// An empty buffer, reused if one is spare.
    pub fn get(&mut self) -> Vec<u8> {
        self.free.pop().unwrap_or_default()
    }
    /// Give a buffer back (dropped if the pool is full).
    pub fn put(&mut self, mut b: Vec<u8>) {
        if self.free.len() < self.max && b.capacity() > 0 {
            b.clear();
            self.free.push(b);
        }
    }
    /// Number of spare buffers.
    pub fn spare(&self) -> usize {
        self.free.len()
    }
}

/// A small, fast, deterministic hasher for `u32` flow keys (multiply–rotate, in the style of
/// FxHash). Flow hashes come from our own endpoints, not from the network, so HashDoS
/// resistance is not needed here.
#[derive(Clone, Copy, Debug, Default)]
pub struct FlowHasher(u64);

impl std::hash::Hasher for FlowHasher {
    fn finish(&self) -> u64 {
        self.0
    }
    fn write(&mut self, bytes: &[u8]) {
        for b in bytes {
            self.write_u64(u64::from(*b));
        }
    }
    fn write_u32(&mut self, v: u32) {
        self.write_u64(u64::from(v));
    }
    fn write_u64(&mut self, v: u64) {
        self.0 = (self.0.rotate_left(5) ^ v).wrapping_mul(0x51_7c_c1_b7_27_22_0a_95);
    }
}

/// `BuildHasher` for [`FlowHasher`].
pub type FlowBuildHasher = std::hash::BuildHasherDefault<FlowHasher>;

/// A map keyed by flow hash.
pub type FlowMap<V> = std::collections::HashMap<u32, V, FlowBuildHasher>;
