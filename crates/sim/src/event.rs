//! The discrete-event queue.

use std::cmp::Ordering;
use std::collections::BinaryHeap;

use crate::time::Instant;

struct Entry<E> {
    time: Instant,
    seq: u64,
    ev: E,
}

impl<E> PartialEq for Entry<E> {
    fn eq(&self, o: &Self) -> bool {
        self.time == o.time && self.seq == o.seq
    }
}
impl<E> Eq for Entry<E> {}
impl<E> PartialOrd for Entry<E> {
    fn partial_cmp(&self, o: &Self) -> Option<Ordering> {
        Some(self.cmp(o))
    }
}
impl<E> Ord for Entry<E> {
    fn cmp(&self, o: &Self) -> Ordering {
        // Reversed: BinaryHeap is a max-heap and we want the earliest (time, seq) first.
        o.time.cmp(&self.time).then(o.seq.cmp(&self.seq))
    }
}

/// A priority queue of events by time; events at equal times come out in the order they
/// were pushed (a sequence number breaks ties), which keeps runs deterministic.
pub struct EventQueue<E> {
    heap: BinaryHeap<Entry<E>>,
    seq: u64,
}

impl<E> Default for EventQueue<E> {
    fn default() -> Self {
        EventQueue {
            heap: BinaryHeap::new(),
            seq: 0,
        }
    }
}

impl<E> EventQueue<E> {
    /// An empty queue.
    pub fn new() -> Self {
        Self::default()
    }
    /// Schedule `ev` at `time`.
    pub fn push(&mut self, time: Instant, ev: E) {
        self.seq += 1;
        self.heap.push(Entry {
            time,
            seq: self.seq,
            ev,
        });
    }
    /// Time of the earliest event.
    pub fn peek_time(&self) -> Option<Instant> {
        self.heap.peek().map(|e| e.time)
    }
    /// (time, sequence number) of the earliest event: the order events come out in.
    pub fn peek_key(&self) -> Option<(Instant, u64)> {
        self.heap.peek().map(|e| (e.time, e.seq))
    }
    /// Take the sequence number the next push would get, for an event kept outside the
    /// queue that must still be ordered with its events (by comparing with
    /// [`EventQueue::peek_key`]).
    pub fn take_seq(&mut self) -> u64 {
        self.seq += 1;
        self.seq
    }
    /// Remove the earliest event.
    pub fn pop(&mut self) -> Option<(Instant, E)> {
        self.heap.pop().map(|e| (e.time, e.ev))
    }
    /// Number of pending events.
    pub fn len(&self) -> usize {
        self.heap.len()
    }
    /// True when nothing is pending.
    pub fn is_empty(&self) -> bool {
        self.heap.is_empty()
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn equal_times_pop_in_insertion_order() {
        let mut q = EventQueue::new();
        q.push(Instant(5), 'a');
        q.push(Instant(1), 'b');
        q.push(Instant(5), 'c');
        q.push(Instant(1), 'd');
        q.push(Instant(3), 'e');
        let order: Vec<char> = std::iter::from_fn(|| q.pop()).map(|(_, e)| e).collect();
        assert_eq!(order, vec!['b', 'd', 'e', 'a', 'c']);
    }

    /// An event kept outside the queue with a sequence number from `take_seq` sorts among
    /// the queue's events as if it had been pushed at that moment.
    #[test]
    fn taken_sequence_numbers_order_outside_events() {
        let mut q = EventQueue::new();
        q.push(Instant(5), 'a');
        let timer = (Instant(5), q.take_seq());
        q.push(Instant(5), 'b');
        q.push(Instant(4), 'c');
        let mut order = Vec::new();
        let mut pending = Some(timer);
        loop {
            match (pending, q.peek_key()) {
                (Some(k), Some(h)) if k < h => {
                    order.push('T');
                    pending = None;
                }
                (Some(_), None) => {
                    order.push('T');
                    pending = None;
                }
                (_, Some(_)) => order.push(q.pop().unwrap().1),
                (None, None) => break,
            }
        }
        assert_eq!(order, vec!['c', 'a', 'T', 'b']);
    }
}
