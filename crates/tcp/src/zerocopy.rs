//! `MSG_ZEROCOPY` (Linux's `Documentation/networking/msg_zerocopy.rst`): a send whose bytes
//! the stack takes by reference instead of copying them into its send buffer, and a
//! completion on the error queue (`SO_EE_ORIGIN_ZEROCOPY`) once the stack holds them no
//! more — every byte cumulatively acknowledged (or the connection's queues purged) and
//! every transmitted copy of them out of the host's queues (its TX completion).
//!
//! Linux's rules, as 6.18 runs them (`msg_zerocopy_realloc`, `__msg_zerocopy_callback`,
//! `skb_zerocopy_notify_extend`; facts from the kernel's zerocopy scripts and from
//! measurement):
//! - a socket opts in with `SO_ZEROCOPY` (0 or 1, else EINVAL; any state; inherited by
//!   accepted children); `MSG_ZEROCOPY` without it, or with nothing to send, is a plain
//!   send;
//! - each zero-copy send that takes bytes gets the next id (`sk_zckey`, from 0); a send that
//!   takes none (EAGAIN, EPIPE, a Fast Open connect that sent no data) gives its id back
//!   and is never reported;
//! - a send whose bytes join the unsent tail buffer of the previous zero-copy send shares
//!   its completion (its id range grows by one, up to 512 KiB of bytes);
//! - a blocking send is one send however often it sleeps for room: it keeps its id and the
//!   completion it made or extended (held, not reported, until the call ends), and gives
//!   the id back only if it ends having taken nothing (`tcp_sendmsg_locked` keeps its
//!   `uarg` across `sk_stream_wait_memory`);
//! - a completion reports the range of ids `lo..=hi` (`ee_info`, `ee_data`) and
//!   `SO_EE_CODE_ZEROCOPY_COPIED` when the bytes were copied after all (sent through a
//!   device without scatter-gather or one that copies what it takes, as Linux's tun does,
//!   or carried in a Fast Open SYN); a completion contiguous with the newest queued one
//!   extends it (errqueue.rs);
//! - each send's completion is charged 832 bytes of option memory (`sk_omem_alloc`, the
//!   size measured on 6.18 with `ss -m`) from its send until it is read or merged; a send
//!   is refused with ENOBUFS unless the 576 bytes it asks for (`sock_omalloc` of an empty
//!   skb) fit under `net.core.optmem_max` (measured on 6.18: with 1664 bytes charged, a
//!   send passes at `optmem_max` 2240 and fails at 2239);
//! - a buffer holds at most `MAX_SKB_FRAGS` (17) fragments: the application's buffers, each
//!   kept as it is beside whatever else the buffer holds (payload.rs: bytes copied before
//!   or after it, another buffer of the same completion), and bytes copied in behind one of
//!   them take a fragment too; a send of more small buffers starts a new one (with PSH on
//!   the full one), and each page a buffer spans is charged a whole page to `wmem_queued`
//!   (`__zerocopy_sg_from_iter`).
//!
//! Shallow's model of a "page": a buffer of `n` bytes spans `ceil(n / 4096)` pages (the
//! application's alignment is not looked at, so runs replay bit for bit).
//!
//! A packet cut from such a buffer carries its pieces (`Transmit::frags`), which a device
//! with scatter-gather sends as they are; the stack copies no byte of the application's.

use crate::seq::{after, before};
use std::collections::VecDeque;

/// Zero-copy sends the stack no longer holds: a completion from the error queue, what
/// `recvmsg(MSG_ERRQUEUE)` returns as `sock_extended_err` (`ee_origin` =
/// `SO_EE_ORIGIN_ZEROCOPY`, `ee_errno` = 0, `ee_info` = `lo`, `ee_data` = `hi`, `ee_code` =
/// `SO_EE_CODE_ZEROCOPY_COPIED` when `copied`).
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub struct ZcNotice {
    /// The first send's id.
    pub lo: u32,
    /// The last send's id (inclusive).
    pub hi: u32,
    /// The bytes were copied after all (`SO_EE_CODE_ZEROCOPY_COPIED`).
    pub copied: bool,
}

/// Option memory one send's completion is charged (`sk_omem_alloc`, measured on 6.18).
pub(crate) const ZC_OMEM: u32 = 832;
/// What a send asks of the option memory before it is charged [`ZC_OMEM`].
pub(crate) const ZC_OMEM_ASK: u32 = 576;
/// A send extends the previous send's completion only while their bytes stay under this.
pub(crate) const UBUF_BYTE_LIMIT: u32 = 1 << 19;
/// The page size zero-copy bytes are charged by.
pub(crate) const ZC_PAGE: u32 = 4096;

/// Pages a zero-copy buffer of `len` bytes is charged for.
pub(crate) fn pages(len: u32) -> u32 {
    len.div_ceil(ZC_PAGE)
}

/// One completion in the making (`ubuf_info_msgzc`): the sends it covers and the bytes
/// that must be released before it is reported.
#[derive(Debug)]
struct Ubuf {
    /// Identifies it for transmissions that hold it (monotonic per socket).
    serial: u32,
    /// Its first send's id.
    id: u32,
    /// Sends covered (`len`).
    len: u32,
    /// Bytes of those sends (`bytelen`).
    bytelen: u32,
    /// Sequence range of its bytes.
    start: u32,
    end: u32,
    /// Transmitted copies still in the host's queues.
    refs: u32,
    /// No byte was copied (`zerocopy`).
    zerocopy: bool,
    /// A blocking send took part of its bytes and will come back with the rest (one Linux
    /// `sendmsg` that slept holds its completion).
    open: bool,
    /// The open send extended this completion (its id is the last of `id..id + len`) and
    /// has taken none of its bytes yet: Linux's `sendmsg` keeps the extended `uarg` (and
    /// the id) while it sleeps for room, and gives both back (`msg_zerocopy_put_abort`)
    /// only if it ends having taken nothing.
    reserved: bool,
}

/// The send a zero-copy call is adding to ([`SockZc::begin`]).
#[derive(Clone, Copy, Debug)]
pub(crate) struct ZcSend {
    /// The ubuf's serial.
    pub serial: u32,
    /// It was made for this call (given back if the call takes nothing).
    fresh: bool,
    /// It was extended by this call (shrunk back if the call takes nothing).
    extended: bool,
}

/// A socket's zero-copy state: the next id, the completions in the making, the option
/// memory they are charged.
#[derive(Debug, Default)]
pub(crate) struct SockZc {
    /// `sk_zckey`: the next send's id.
    next_id: u32,
    next_serial: u32,
    ubufs: VecDeque<Ubuf>,
    /// `sk_omem_alloc`: option memory charged to completions not yet read.
    pub omem: u32,
}

impl SockZc {
    /// `msg_zerocopy_realloc`: the completion a zero-copy send of `size` bytes adds to. A
    /// blocking send that came back with the rest of its bytes continues its own; a send
    /// whose bytes join the unsent tail buffer holding the newest completion's bytes
    /// (`tail` is that buffer's serial) extends it; else a new one is charged, or None
    /// when the socket's option memory is at `optmem_max` (ENOBUFS).
    pub fn begin(&mut self, size: u32, tail: Option<u32>, optmem_max: u32) -> Option<ZcSend> {
        if let Some(b) = self.ubufs.back_mut() {
            if b.open {
                b.open = false;
                return Some(ZcSend {
                    serial: b.serial,
                    fresh: false,
                    extended: false,
                });
            }
            let bytelen = u64::from(b.bytelen) + u64::from(size);
            if tail == Some(b.serial)
                && b.id.wrapping_add(b.len) == self.next_id
                && b.len < u32::from(u16::MAX) - 1
                && bytelen <= u64::from(UBUF_BYTE_LIMIT)
            {
                b.len += 1;
                self.next_id = self.next_id.wrapping_add(1);
                return Some(ZcSend {
                    serial: b.serial,
                    fresh: false,
                    extended: true,
                });
            }
        }
        if self.omem.saturating_add(ZC_OMEM_ASK) > optmem_max {
            return None;
        }
        self.omem += ZC_OMEM;
        let serial = self.next_serial;
        self.next_serial = self.next_serial.wrapping_add(1);
        self.ubufs.push_back(Ubuf {
            serial,
            id: self.next_id,
            len: 1,
            bytelen: 0,
            start: 0,
            end: 0,
            refs: 0,
            zerocopy: true,
            open: false,
            reserved: false,
        });
        self.next_id = self.next_id.wrapping_add(1);
        Some(ZcSend {
            serial,
            fresh: true,
            extended: false,
        })
    }

    /// The send queued `n` more bytes, the last before `end_seq`.
    pub fn grow(&mut self, serial: u32, n: u32, end_seq: u32) {
        let Some(i) = self.find(serial) else {
            return;
        };
        let b = &mut self.ubufs[i];
        if b.bytelen == 0 {
            b.start = end_seq.wrapping_sub(n);
        }
        b.bytelen = b.bytelen.saturating_add(n);
        b.end = end_seq;
    }

    /// The call ends having taken `taken` bytes ([`SockZc::grow`]), `open` if a blocking
    /// writer will come back with the rest. A call that took nothing and will not come back
    /// gives back what [`SockZc::begin`] gave it (`msg_zerocopy_put_abort`): its id, and the
    /// completion if it was made for it. One that took nothing yet but will come back keeps
    /// an extension of the previous send's completion (its id stays taken, as Linux's
    /// sleeping `sendmsg` keeps the extended `uarg`): the rest of its bytes join that
    /// completion when it comes back.
    pub fn end(&mut self, z: ZcSend, taken: u32, open: bool) {
        let Some(i) = self.find(z.serial) else {
            return;
        };
        if taken == 0 {
            if z.fresh {
                self.ubufs.remove(i);
                self.omem = self.omem.saturating_sub(ZC_OMEM);
                self.next_id = self.next_id.wrapping_sub(1);
                return;
            }
            let b = &mut self.ubufs[i];
            if z.extended && open {
                b.open = true;
                b.reserved = true;
                return;
            }
            if z.extended || (b.reserved && !open) {
                self.give_back_extension(i);
            }
            let b = &mut self.ubufs[i];
            b.open = open && b.bytelen > 0;
            return;
        }
        let b = &mut self.ubufs[i];
        b.reserved = false;
        b.open = open;
    }

    /// The blocking send that left its completion open ([`SockZc::end`]) returns to its
    /// caller without coming back (a send timeout, the host stopping): its completion is
    /// closed, and an id it held without taking a byte is given back
    /// (`msg_zerocopy_put_abort`). True if one was open.
    pub fn close_open(&mut self) -> bool {
        let Some(i) = self
            .ubufs
            .len()
            .checked_sub(1)
            .filter(|&i| self.ubufs[i].open)
        else {
            return false;
        };
        if self.ubufs[i].reserved {
            self.give_back_extension(i);
        }
        self.ubufs[i].open = false;
        true
    }

    /// The send that extended completion `i` took none of its bytes and is over: its id,
    /// the last of the completion's range and the last given, goes back
    /// (`msg_zerocopy_put_abort`).
    fn give_back_extension(&mut self, i: usize) {
        let b = &mut self.ubufs[i];
        b.len -= 1;
        b.reserved = false;
        self.next_id = self.next_id.wrapping_sub(1);
    }

    /// The bytes `seq..end` of the completions they belong to were copied.
    pub fn mark_copied(&mut self, seq: u32, end: u32) {
        for b in self.overlapping(seq, end) {
            b.zerocopy = false;
        }
    }

    /// The completion made by `serial` was copied (its bytes went another way).
    pub fn mark_copied_serial(&mut self, serial: u32) {
        if let Some(i) = self.find(serial) {
            self.ubufs[i].zerocopy = false;
        }
    }

    /// A transmitted copy of the bytes `seq..end` went into the host's queues: the
    /// completions those bytes belong to wait for its TX completion. Returns the serials
    /// to release then (for the packet's token), None if no zero-copy byte went.
    pub fn hold_tx(&mut self, seq: u32, end: u32) -> Option<(u32, u32)> {
        let mut range: Option<(u32, u32)> = None;
        for b in self.overlapping(seq, end) {
            b.refs += 1;
            range = Some(match range {
                None => (b.serial, b.serial),
                Some((lo, _)) => (lo, b.serial),
            });
        }
        range
    }

    /// The TX completion of a copy [`SockZc::hold_tx`] held.
    pub fn put_tx(&mut self, (lo, hi): (u32, u32)) {
        for b in self.ubufs.iter_mut() {
            if !before(b.serial, lo) && !after(b.serial, hi) {
                b.refs = b.refs.saturating_sub(1);
            }
        }
    }

    /// Take the completions whose bytes are all acknowledged (below `una`), or gone with the
    /// connection's queues (`purged`), with no transmitted copy left in the host, in order.
    pub fn take_done(&mut self, una: u32, purged: bool, mut f: impl FnMut(ZcNotice)) {
        let mut i = 0;
        while i < self.ubufs.len() {
            let b = &self.ubufs[i];
            let released = b.bytelen > 0 && (purged || !before(una, b.end));
            if !released {
                // Completions are in sequence order: none after this one is acked either.
                if !purged && b.bytelen > 0 {
                    break;
                }
                i += 1;
                continue;
            }
            if b.refs > 0 || b.open {
                i += 1;
                continue;
            }
            let b = self.ubufs.remove(i).expect("in range");
            f(ZcNotice {
                lo: b.id,
                hi: b.id.wrapping_add(b.len - 1),
                copied: !b.zerocopy,
            });
        }
    }

    /// The id the next zero-copy send gets (`sk_zckey`).
    pub fn next_id(&self) -> u32 {
        self.next_id
    }

    /// Nothing waits to be released (the common case: one cheap test per ACK).
    pub fn is_idle(&self) -> bool {
        self.ubufs.is_empty()
    }

    /// A completion's option memory is freed (read from the queue, or merged into the
    /// entry before it).
    pub fn free_omem(&mut self) {
        self.omem = self.omem.saturating_sub(ZC_OMEM);
    }

    fn find(&self, serial: u32) -> Option<usize> {
        self.ubufs.iter().position(|b| b.serial == serial)
    }

    fn overlapping(&mut self, seq: u32, end: u32) -> impl Iterator<Item = &mut Ubuf> {
        self.ubufs
            .iter_mut()
            .filter(move |b| b.bytelen > 0 && before(b.start, end) && after(b.end, seq))
    }
}

/// Zero-copy completions on a connection.
impl crate::socket::Connection {
    /// Queue the completions now due (`__msg_zerocopy_callback`): bytes acknowledged, or
    /// purged with the connection's queues in CLOSE, and no copy left in the host. A
    /// completion merged into the queue's newest entry frees its option memory at once.
    /// Wakes error readers (POLLERR).
    pub(crate) fn zc_complete(&mut self, env: &mut crate::env::Env) {
        if self.zc.is_idle() {
            return;
        }
        let purged = self.state == crate::socket::TcpState::Close;
        let (errq, zc) = (&mut self.errq, &mut self.zc);
        let mut merged = 0;
        let mut any = false;
        zc.take_done(self.snd.una, purged, |n| {
            any = true;
            if !errq.push_zc(n) {
                merged += 1;
            }
        });
        for _ in 0..merged {
            self.zc.free_omem();
        }
        if any {
            env.out.wake(self.id, crate::socket::pollbits::POLLERR);
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn ids_extend_abort_and_complete_in_order() {
        let mut z = SockZc::default();
        let a = z.begin(100, None, 131_072).unwrap();
        z.grow(a.serial, 100, 1101);
        z.end(a, 100, false);
        // Joins the unsent tail holding a's bytes: the same completion, ids 0..=1.
        let b = z.begin(100, Some(a.serial), 131_072).unwrap();
        assert_eq!(b.serial, a.serial);
        z.grow(b.serial, 100, 1201);
        z.end(b, 100, false);
        // A send that takes nothing gives its id back.
        let c = z.begin(100, None, 131_072).unwrap();
        z.end(c, 0, false);
        assert_eq!(z.omem, ZC_OMEM);
        let d = z.begin(50, None, 131_072).unwrap();
        z.grow(d.serial, 50, 1251);
        z.end(d, 50, false);
        let held = z.hold_tx(1201, 1251).unwrap();
        let mut out = Vec::new();
        z.take_done(1251, false, |n| out.push(n));
        assert_eq!(
            out,
            vec![ZcNotice {
                lo: 0,
                hi: 1,
                copied: false
            }]
        );
        // d is acked but a copy is still in the host.
        z.put_tx(held);
        z.mark_copied(1201, 1202);
        z.take_done(1251, false, |n| out.push(n));
        assert_eq!(
            out[1],
            ZcNotice {
                lo: 2,
                hi: 2,
                copied: true
            }
        );
        assert!(z.is_idle());
    }

    #[test]
    fn a_blocking_send_that_extended_and_waits_for_room_keeps_its_id() {
        let mut z = SockZc::default();
        let a = z.begin(100, None, 131_072).unwrap();
        z.grow(a.serial, 100, 1101);
        z.end(a, 100, false);
        // The next send joins a's unsent tail, finds no room and sleeps: one sendmsg, so
        // its id (1) stays taken and a's completion waits for it.
        let b = z.begin(100, Some(a.serial), 131_072).unwrap();
        assert_eq!(b.serial, a.serial);
        z.end(b, 0, true);
        assert_eq!(z.next_id(), 2);
        let mut out = Vec::new();
        z.take_done(1101, false, |n| out.push(n));
        assert!(out.is_empty(), "held by the sleeping send");
        // Woken, it finds room at last (still nothing the first time round).
        let b2 = z.begin(100, None, 131_072).unwrap();
        assert_eq!(b2.serial, a.serial);
        z.end(b2, 0, true);
        let b3 = z.begin(100, None, 131_072).unwrap();
        z.grow(b3.serial, 100, 1201);
        z.end(b3, 100, false);
        // A later send is id 2.
        let c = z.begin(10, None, 131_072).unwrap();
        z.grow(c.serial, 10, 1211);
        z.end(c, 10, false);
        z.take_done(1211, false, |n| out.push(n));
        let ids: Vec<(u32, u32)> = out.iter().map(|n| (n.lo, n.hi)).collect();
        assert_eq!(ids, vec![(0, 1), (2, 2)]);
        assert!(z.is_idle());
    }

    #[test]
    fn a_blocking_send_that_extended_and_gives_up_returns_its_id() {
        let mut z = SockZc::default();
        let a = z.begin(100, None, 131_072).unwrap();
        z.grow(a.serial, 100, 1101);
        z.end(a, 100, false);
        let b = z.begin(100, Some(a.serial), 131_072).unwrap();
        z.end(b, 0, true);
        // Back after its sleep, it fails with nothing taken (an error, a timeout).
        let b2 = z.begin(100, None, 131_072).unwrap();
        z.end(b2, 0, false);
        assert_eq!(z.next_id(), 1);
        let mut out = Vec::new();
        z.take_done(1101, false, |n| out.push(n));
        assert_eq!(
            out.iter().map(|n| (n.lo, n.hi)).collect::<Vec<_>>(),
            vec![(0, 0)]
        );
    }

    #[test]
    fn a_blocking_send_whose_caller_gives_up_is_closed() {
        let mut z = SockZc::default();
        let a = z.begin(100, None, 131_072).unwrap();
        z.grow(a.serial, 60, 1061);
        z.end(a, 60, true);
        let mut out = Vec::new();
        z.take_done(1061, false, |n| out.push(n));
        assert!(out.is_empty(), "open: its caller comes back with the rest");
        assert!(z.close_open());
        assert!(!z.close_open());
        z.take_done(1061, false, |n| out.push(n));
        assert_eq!(
            out.iter().map(|n| (n.lo, n.hi)).collect::<Vec<_>>(),
            vec![(0, 0)]
        );
        // One that extended the completion before it and took nothing gives its id back.
        let b = z.begin(100, None, 131_072).unwrap();
        z.grow(b.serial, 100, 1161);
        z.end(b, 100, false);
        let c = z.begin(100, Some(b.serial), 131_072).unwrap();
        z.end(c, 0, true);
        assert_eq!(z.next_id(), 3);
        assert!(z.close_open());
        assert_eq!(z.next_id(), 2);
        z.take_done(1161, false, |n| out.push(n));
        assert_eq!(out.last().map(|n| (n.lo, n.hi)), Some((1, 1)));
    }

    #[test]
    fn option_memory_bounds_outstanding_sends() {
        let mut z = SockZc::default();
        // 2000 bytes: a send passes while its 576 bytes fit on top of what is charged
        // (0 and 832 do, 1664 does not).
        for i in 0..2 {
            let s = z.begin(10, None, 2000).unwrap();
            z.grow(s.serial, 10, 11 + 10 * i);
            z.end(s, 10, false);
        }
        assert!(z.begin(10, None, 2000).is_none());
        assert_eq!(pages(1), 1);
        assert_eq!(pages(4097), 2);
    }
}
