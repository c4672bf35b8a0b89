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

/// The flow-keyed hasher and map, shared with the qdiscs (one of each in the workspace).
pub use shallow_qdisc::{FlowBuildHasher, FlowHasher, FlowMap};
