//! The bytes of a send buffer and of the packets that share them: [`SkbData`] (a write- or
//! retransmit-queue skb's payload, Linux's linear area and `skb_shinfo(skb)->frags`) and
//! [`Frags`] (a transmitted packet's payload pieces, what a device with scatter-gather
//! gathers behind the headers).
//!
//! A buffer is one contiguous run of bytes, except when a zero-copy send (zerocopy.rs) puts
//! the application's buffer beside bytes that are already there: then the buffer keeps the
//! pieces apart ([`SkbData::Frags`]), as Linux keeps each user page as its own fragment, and
//! the packets cut from it carry the pieces ([`Frags`]) instead of a copy.

use bytes::{Buf, Bytes, BytesMut};

/// The payload of a transmitted packet, as pieces in order (`Transmit::frags`): one piece for
/// almost every packet, more when the packet's bytes come from several buffers of
/// zero-copy sends. A device with scatter-gather sends the pieces behind the headers as they
/// are (a `writev`, a NIC's gather list); [`Frags::join`] makes one buffer of them.
#[derive(Clone, Debug, Default, PartialEq, Eq)]
pub struct Frags {
    first: Bytes,
    rest: Vec<Bytes>,
}

impl Frags {
    /// Bytes in all pieces.
    pub fn len(&self) -> usize {
        self.first.len() + self.rest.iter().map(Bytes::len).sum::<usize>()
    }
    /// No bytes (no piece, or empty ones).
    pub fn is_empty(&self) -> bool {
        self.len() == 0
    }
    /// The pieces in order (empty ones skipped).
    pub fn iter(&self) -> impl Iterator<Item = &Bytes> {
        std::iter::once(&self.first)
            .chain(self.rest.iter())
            .filter(|b| !b.is_empty())
    }
    /// How many non-empty pieces.
    pub fn pieces(&self) -> usize {
        self.iter().count()
    }
    /// The only piece, when there is at most one.
    pub fn as_single(&self) -> Option<&Bytes> {
        self.rest.is_empty().then_some(&self.first)
    }
    /// Append a piece.
    pub fn push(&mut self, b: Bytes) {
        if b.is_empty() {
            return;
        }
        if self.first.is_empty() && self.rest.is_empty() {
            self.first = b;
        } else {
            self.rest.push(b);
        }
    }
    /// One buffer of all the bytes: the single piece itself, or the pieces copied into one.
    pub fn join(self) -> Bytes {
        if self.rest.is_empty() {
            return self.first;
        }
        let mut m = BytesMut::with_capacity(self.len());
        for p in self.iter() {
            m.extend_from_slice(p);
        }
        m.freeze()
    }
    /// Append the bytes to `out` (Linux `skb_linearize`'s copy).
    pub fn copy_to(&self, out: &mut Vec<u8>) {
        out.reserve(self.len());
        for p in self.iter() {
            out.extend_from_slice(p);
        }
    }
    /// The bytes as one vector (a copy).
    pub fn to_vec(&self) -> Vec<u8> {
        let mut v = Vec::new();
        self.copy_to(&mut v);
        v
    }
}

impl From<Bytes> for Frags {
    fn from(b: Bytes) -> Frags {
        Frags {
            first: b,
            rest: Vec::new(),
        }
    }
}

/// A segment's payload as the packet builder reads it (`SegOut::payload`): contiguous bytes,
/// or the pieces of a multi-piece buffer followed by its unshared tail.
#[derive(Clone, Copy, Debug)]
pub(crate) enum Payload<'a> {
    /// One run of bytes.
    Flat(&'a [u8]),
    /// Pieces, then bytes not yet made a piece.
    Pieces(&'a [Bytes], &'a [u8]),
}

impl<'a> Payload<'a> {
    /// No payload.
    pub const EMPTY: Payload<'static> = Payload::Flat(&[]);
    /// Bytes in all parts.
    pub fn len(&self) -> usize {
        match self {
            Payload::Flat(b) => b.len(),
            Payload::Pieces(p, t) => p.iter().map(Bytes::len).sum::<usize>() + t.len(),
        }
    }
    /// The parts in order.
    pub fn parts(&self) -> impl Iterator<Item = &'a [u8]> {
        let (pieces, tail): (&'a [Bytes], &'a [u8]) = match *self {
            Payload::Flat(b) => (&[], b),
            Payload::Pieces(p, t) => (p, t),
        };
        pieces
            .iter()
            .map(|b| &b[..])
            .chain(std::iter::once(tail))
            .filter(|s| !s.is_empty())
    }
    /// The bytes when they are one run (`None` for several pieces).
    pub fn flat(&self) -> Option<&'a [u8]> {
        match *self {
            Payload::Flat(b) => Some(b),
            Payload::Pieces(p, t) => match (p, t.is_empty()) {
                ([], _) => Some(t),
                ([one], true) => Some(&one[..]),
                _ => None,
            },
        }
    }
    /// `frags` carries exactly these bytes (the very same memory, piece by piece), so a
    /// packet may send them in their place.
    pub fn is_shared_by(&self, frags: &Frags) -> bool {
        let mut mine = self.parts();
        let mut theirs = frags.iter();
        loop {
            match (mine.next(), theirs.next()) {
                (None, None) => return true,
                (Some(a), Some(b)) if a.as_ptr() == b.as_ptr() && a.len() == b.len() => {}
                _ => return false,
            }
        }
    }
}

/// An skb's payload. Splitting (`tcp_fragment`), trimming acked bytes (`tcp_trim_head`) and
/// moving bytes between neighbours (`tcp_grow_skb`) share the buffer instead of copying it.
/// It is writable (`Open`) while it waits in the write queue; once handed to a device with
/// scatter-gather (`DeviceCaps::sg`) it is `Sent`: shared with the packet, read-only, still
/// split and trimmed without a copy (Linux writes no page of a cloned skb either). A buffer
/// that holds a zero-copy send's bytes beside others is `Frags`.
#[derive(Debug)]
pub(crate) enum SkbData {
    /// Not yet shared: appendable, joinable with the neighbour it was carved next to.
    Open(BytesMut),
    /// Shared with packets a device may still hold.
    Sent(Bytes),
    /// Several pieces, then bytes copied in after the last of them (not yet a piece): the
    /// application's buffers of zero-copy sends kept apart from each other and from copied
    /// bytes (Linux's `skb_shinfo(skb)->frags`: a user page is never copied into a page of
    /// the socket's).
    Frags(Vec<Bytes>, BytesMut),
}

impl Default for SkbData {
    fn default() -> SkbData {
        SkbData::Open(BytesMut::new())
    }
}

impl SkbData {
    /// Bytes held.
    pub fn len(&self) -> usize {
        match self {
            SkbData::Open(b) => b.len(),
            SkbData::Sent(b) => b.len(),
            SkbData::Frags(p, t) => p.iter().map(Bytes::len).sum::<usize>() + t.len(),
        }
    }
    /// No bytes.
    pub fn is_empty(&self) -> bool {
        self.len() == 0
    }
    /// The bytes as the packet builder reads them.
    pub fn view(&self) -> Payload<'_> {
        match self {
            SkbData::Open(b) => Payload::Flat(b),
            SkbData::Sent(b) => Payload::Flat(b),
            SkbData::Frags(p, t) => Payload::Pieces(p, t),
        }
    }
    /// The bytes as one vector (a copy; for tests and the rare reader of several pieces).
    #[cfg(test)]
    pub fn to_vec(&self) -> Vec<u8> {
        self.view().parts().flatten().copied().collect()
    }
    /// The pieces this buffer would be if it were made of them (its own bytes frozen).
    fn into_pieces(self) -> (Vec<Bytes>, BytesMut) {
        match self {
            SkbData::Open(b) => (Vec::new(), b),
            SkbData::Sent(b) => (vec![b], BytesMut::new()),
            SkbData::Frags(p, t) => (p, t),
        }
    }
    /// Back to the simplest form that holds `pieces` then `tail`.
    fn from_pieces(mut pieces: Vec<Bytes>, tail: BytesMut) -> SkbData {
        pieces.retain(|b| !b.is_empty());
        match (pieces.len(), tail.is_empty()) {
            (0, _) => SkbData::Open(tail),
            (1, true) => SkbData::Sent(pieces.pop().expect("one piece")),
            _ => SkbData::Frags(pieces, tail),
        }
    }
    /// Split off the bytes from `at` on (`at` at most the length).
    pub fn split_off(&mut self, at: usize) -> SkbData {
        match self {
            SkbData::Open(b) => SkbData::Open(b.split_off(at)),
            SkbData::Sent(b) => SkbData::Sent(b.split_off(at)),
            SkbData::Frags(..) => {
                let (mut pieces, mut tail) = std::mem::take(self).into_pieces();
                let mut off = at;
                let mut i = 0;
                while i < pieces.len() && off >= pieces[i].len() {
                    off -= pieces[i].len();
                    i += 1;
                }
                let (back, back_tail) = if i < pieces.len() {
                    let mut back = pieces.split_off(i);
                    let head_part = back[0].split_to(off);
                    pieces.push(head_part);
                    (back, std::mem::take(&mut tail))
                } else {
                    (Vec::new(), tail.split_off(off.min(tail.len())))
                };
                *self = SkbData::from_pieces(pieces, tail);
                SkbData::from_pieces(back, back_tail)
            }
        }
    }
    /// Split off the first `at` bytes (`at` at most the length).
    pub fn split_to(&mut self, at: usize) -> SkbData {
        match self {
            SkbData::Open(b) => SkbData::Open(b.split_to(at)),
            SkbData::Sent(b) => SkbData::Sent(b.split_to(at)),
            SkbData::Frags(..) => {
                let back = self.split_off(at);
                std::mem::replace(self, back)
            }
        }
    }
    /// Drop the first `n` bytes (at most the length).
    pub fn advance(&mut self, n: usize) {
        match self {
            SkbData::Open(b) => Buf::advance(b, n),
            SkbData::Sent(b) => Buf::advance(b, n),
            SkbData::Frags(..) => {
                let n = n.min(self.len());
                drop(self.split_to(n));
            }
        }
    }
    /// Append copied bytes `d` (to a copy of the bytes if they were one shared piece; behind
    /// the pieces, without touching them, if there are several).
    pub fn extend_from_slice(&mut self, d: &[u8]) {
        match self {
            SkbData::Open(b) => b.extend_from_slice(d),
            SkbData::Sent(b) => {
                let mut m = BytesMut::with_capacity(b.len() + d.len());
                m.extend_from_slice(b);
                m.extend_from_slice(d);
                *self = SkbData::Open(m);
            }
            SkbData::Frags(_, t) => t.extend_from_slice(d),
        }
    }
    /// Append copied bytes `d` to a buffer holding a zero-copy send's bytes: they go behind
    /// its pieces, which stay as they are (Linux copies into a page of the socket's, and the
    /// user's pages stay fragments of their own).
    pub fn append_copy(&mut self, d: &[u8]) {
        if let SkbData::Sent(_) = self {
            let (p, _) = std::mem::take(self).into_pieces();
            *self = SkbData::Frags(p, BytesMut::new());
        }
        self.extend_from_slice(d);
    }
    /// Append the application's buffer `b` as a piece of its own, without a copy.
    pub fn append_shared(&mut self, b: Bytes) {
        if self.is_empty() {
            *self = SkbData::Sent(b);
            return;
        }
        let (mut pieces, tail) = std::mem::take(self).into_pieces();
        if !tail.is_empty() {
            pieces.push(tail.freeze());
        }
        pieces.push(b);
        *self = SkbData::Frags(pieces, BytesMut::new());
    }
    /// Bytes copied in after the last piece would start a fragment of their own (the last
    /// thing appended was an application's buffer).
    pub fn copy_starts_frag(&self) -> bool {
        match self {
            SkbData::Open(_) => false,
            SkbData::Sent(b) => !b.is_empty(),
            SkbData::Frags(_, t) => t.is_empty(),
        }
    }
    /// Append `other`: free when both were carved next to each other from one buffer and
    /// neither was sent, else a copy.
    pub fn unsplit(&mut self, other: SkbData) {
        match (&mut *self, other) {
            (SkbData::Open(b), SkbData::Open(o)) => b.unsplit(o),
            (SkbData::Frags(..), o) | (_, o @ SkbData::Frags(..)) => {
                let (mut pieces, tail) = std::mem::take(self).into_pieces();
                if !tail.is_empty() {
                    pieces.push(tail.freeze());
                }
                let (more, more_tail) = o.into_pieces();
                pieces.extend(more);
                *self = SkbData::from_pieces(pieces, more_tail);
            }
            (_, o) => {
                let d = o.view();
                if let Some(flat) = d.flat() {
                    self.extend_from_slice(flat);
                }
            }
        }
    }
    /// The unused room after the bytes, split off as a new buffer if it holds `want` bytes
    /// (see `Connection::carve_skb_buffer`); never from sent bytes.
    pub fn spare(&mut self, want: usize) -> Option<BytesMut> {
        match self {
            SkbData::Open(b) if b.capacity() - b.len() >= want => Some(b.split_off(b.len())),
            _ => None,
        }
    }
    /// The bytes as shares for a packet; from now on they are read-only.
    pub fn share(&mut self) -> Frags {
        match std::mem::take(self) {
            SkbData::Open(b) => {
                let b = b.freeze();
                *self = SkbData::Sent(b.clone());
                Frags::from(b)
            }
            SkbData::Sent(b) => {
                *self = SkbData::Sent(b.clone());
                Frags::from(b)
            }
            SkbData::Frags(mut pieces, tail) => {
                if !tail.is_empty() {
                    pieces.push(tail.freeze());
                }
                let mut f = Frags::default();
                for p in &pieces {
                    f.push(p.clone());
                }
                *self = SkbData::from_pieces(pieces, BytesMut::new());
                f
            }
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn shared_bytes_are_copied_on_write() {
        let mut chunk = BytesMut::with_capacity(64);
        chunk.extend_from_slice(b"abcdef");
        let rest = chunk.split_off(6);
        let mut a = SkbData::Open(chunk);
        let mut b = SkbData::Open(rest);
        b.extend_from_slice(b"ghij");
        let b_ptr = b.view().flat().unwrap().as_ptr();
        a.unsplit(b);
        assert_eq!(a.to_vec(), b"abcdefghij");
        assert_eq!(
            a.view().flat().unwrap().as_ptr().wrapping_add(6),
            b_ptr,
            "joined in place"
        );
        assert!(a.spare(16).is_some());
        let shared = a.share().join();
        assert_eq!(&shared[..], b"abcdefghij");
        assert!(
            a.spare(1).is_none(),
            "room after shared bytes is not handed out"
        );
        a.extend_from_slice(b"k");
        a.unsplit(SkbData::Open(BytesMut::from(&b"lm"[..])));
        assert_eq!(a.to_vec(), b"abcdefghijklm");
        assert_eq!(
            &shared[..],
            b"abcdefghij",
            "the packet's bytes are unchanged"
        );
        // Splitting and trimming shared bytes share them still.
        let mut c = SkbData::Sent(shared.clone());
        let tail = c.split_off(4);
        c.advance(1);
        assert_eq!(
            (c.to_vec(), tail.to_vec()),
            (b"bcd".to_vec(), b"efghij".to_vec())
        );
        assert_eq!(tail.view().flat().unwrap().as_ptr(), shared[4..].as_ptr());
        let mut d = SkbData::Sent(shared.clone());
        let head = d.split_to(3);
        assert_eq!(
            (head.to_vec(), d.to_vec()),
            (b"abc".to_vec(), b"defghij".to_vec())
        );
    }

    #[test]
    fn pieces_stay_apart_through_split_trim_and_share() {
        let user1 = Bytes::from_static(b"0123456789");
        let user2 = Bytes::from_static(b"ABCDEFGHIJ");
        let mut s = SkbData::Open(BytesMut::from(&b"xyz"[..]));
        assert!(!s.copy_starts_frag());
        s.append_shared(user1.clone());
        assert!(s.copy_starts_frag());
        s.append_copy(b"--");
        assert!(!s.copy_starts_frag());
        s.append_shared(user2.clone());
        assert_eq!(s.len(), 3 + 10 + 2 + 10);
        assert_eq!(s.to_vec(), b"xyz0123456789--ABCDEFGHIJ");
        // The user's bytes are never copied: the pieces point into them.
        let f = s.share();
        assert_eq!(f.pieces(), 4);
        let ptrs: Vec<_> = f.iter().map(|p| p.as_ptr()).collect();
        assert_eq!(ptrs[1], user1.as_ptr());
        assert_eq!(ptrs[3], user2.as_ptr());
        assert!(s.view().is_shared_by(&f));
        assert_eq!(
            f.clone().join(),
            Bytes::from_static(b"xyz0123456789--ABCDEFGHIJ")
        );
        // Split inside a piece: both halves keep pointing into the user's buffers.
        let back = s.split_off(8);
        assert_eq!(s.to_vec(), b"xyz01234");
        assert_eq!(back.to_vec(), b"56789--ABCDEFGHIJ");
        let bf = {
            let mut b = back;
            b.share()
        };
        assert_eq!(bf.iter().next().unwrap().as_ptr(), user1[5..].as_ptr());
        // Trim across pieces.
        let mut t = SkbData::Frags(
            vec![user1.clone(), user2.clone()],
            BytesMut::from(&b"!"[..]),
        );
        t.advance(12);
        assert_eq!(t.to_vec(), b"CDEFGHIJ!");
        t.advance(8);
        assert_eq!(t.to_vec(), b"!");
        let mut u = SkbData::Frags(vec![user1.clone(), user2.clone()], BytesMut::new());
        let head = u.split_to(10);
        assert!(matches!(head, SkbData::Sent(_)));
        assert!(matches!(u, SkbData::Sent(_)));
        assert_eq!(u.view().flat().unwrap().as_ptr(), user2.as_ptr());
        // Split at the end of the pieces, inside the copied tail.
        let mut w = SkbData::Frags(vec![user1.clone()], BytesMut::from(&b"abc"[..]));
        let back = w.split_off(11);
        assert_eq!(
            (w.to_vec(), back.to_vec()),
            (b"0123456789a".to_vec(), b"bc".to_vec())
        );
    }

    #[test]
    fn frags_join_and_compare() {
        let mut f = Frags::default();
        assert!(f.is_empty() && f.as_single().is_some());
        f.push(Bytes::from_static(b"ab"));
        f.push(Bytes::new());
        f.push(Bytes::from_static(b"cd"));
        assert_eq!((f.len(), f.pieces()), (4, 2));
        assert!(f.as_single().is_none());
        let mut v = vec![1u8];
        f.copy_to(&mut v);
        assert_eq!(v, [1, b'a', b'b', b'c', b'd']);
        let other = Payload::Flat(b"abcd");
        assert!(
            !other.is_shared_by(&f),
            "equal bytes elsewhere are not the same memory"
        );
    }
}
