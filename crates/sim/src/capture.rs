//! pcap capture (classic pcap, nanosecond timestamps, LINKTYPE_RAW: packets start at the IP
//! header). Bytes depend only on the packets and their virtual times, so runs with the same
//! seed write identical files.

use std::io::{self, Write};

use pcap_file::pcap::{PcapHeader, PcapPacket, PcapWriter};
use pcap_file::{DataLink, Endianness, TsResolution};

use crate::time::Instant;

/// Where on the sending host packets are captured.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum CapturePoint {
    /// As the packet leaves the qdisc for the NIC, where `tcpdump` on a Linux sender sees it:
    /// TSO super-segments appear whole.
    HostTx,
    /// Each wire segment as its last bit leaves the NIC (after TSO).
    Wire,
}

/// Destination of a capture.
pub enum CaptureOut {
    /// In memory; take the bytes with `Sim::finish_capture`.
    Memory(Vec<u8>),
    /// Any writer (a file, a pipe).
    Writer(Box<dyn Write>),
}

impl Write for CaptureOut {
    fn write(&mut self, buf: &[u8]) -> io::Result<usize> {
        match self {
            CaptureOut::Memory(v) => v.write(buf),
            CaptureOut::Writer(w) => w.write(buf),
        }
    }
    fn flush(&mut self) -> io::Result<()> {
        match self {
            CaptureOut::Memory(_) => Ok(()),
            CaptureOut::Writer(w) => w.flush(),
        }
    }
}

/// Snap length: whole packets, including 64 KiB super-segments.
pub const SNAPLEN: u32 = 262_144;

/// A pcap writer at one capture point.
pub struct Capture {
    writer: Option<PcapWriter<CaptureOut>>,
    /// Where packets are taken.
    pub point: CapturePoint,
    /// Packets written.
    pub packets: u64,
    /// The first write error, after which capture stops.
    pub error: Option<String>,
}

impl Capture {
    /// Start a capture into `out` (writes the file header now).
    pub fn new(out: CaptureOut, point: CapturePoint) -> Capture {
        let header = PcapHeader {
            version_major: 2,
            version_minor: 4,
            ts_correction: 0,
            ts_accuracy: 0,
            snaplen: SNAPLEN,
            datalink: DataLink::RAW,
            ts_resolution: TsResolution::NanoSecond,
            endianness: Endianness::Little,
        };
        match PcapWriter::with_header(out, header) {
            Ok(w) => Capture {
                writer: Some(w),
                point,
                packets: 0,
                error: None,
            },
            Err(e) => Capture {
                writer: None,
                point,
                packets: 0,
                error: Some(e.to_string()),
            },
        }
    }

    /// [`Capture::write`] for a packet in two parts (`data` then `frag`, a paged packet).
    pub fn write_parts(&mut self, t: Instant, data: &[u8], frag: &[u8]) {
        if frag.is_empty() {
            return self.write(t, data);
        }
        if self.writer.is_none() {
            return;
        }
        let mut whole = Vec::with_capacity(data.len() + frag.len());
        whole.extend_from_slice(data);
        whole.extend_from_slice(frag);
        self.write(t, &whole);
    }

    /// Record `data` at virtual time `t`.
    pub fn write(&mut self, t: Instant, data: &[u8]) {
        let Some(w) = self.writer.as_mut() else {
            return;
        };
        let len = u32::try_from(data.len()).unwrap_or(u32::MAX);
        let cap = &data[..data.len().min(SNAPLEN as usize)];
        let pkt = PcapPacket::new(t.since_epoch(), len, cap);
        match w.write_packet(&pkt) {
            Ok(_) => self.packets += 1,
            Err(e) => {
                self.error = Some(e.to_string());
                self.writer = None;
            }
        }
    }

    /// Finish and return the output (flushed).
    pub fn finish(self) -> Option<CaptureOut> {
        let mut out = self.writer?.into_writer();
        let _ = out.flush();
        Some(out)
    }
}
