//! Opt-in time series of a bench run ([`crate::bench::run_series`]), for charts: gauges of
//! both hosts (bytes below TCP, TCP memory) and cumulative counters of the workload (sender
//! wake-ups, ACKs, bytes delivered, autocorking events), sampled every
//! [`SeriesConfig::interval`] of virtual time, plus the full host-queue delay histogram.
//!
//! Off by default: [`crate::bench::run`] and [`crate::bench::run_ext`] record nothing and
//! stop the emulator only at their own sampling points. With a recorder the run also stops at
//! the recorder's points, which only read state; the report is the same as without it.
//!
//! Memory is bounded: at most [`SeriesConfig::max_points`] samples are kept. When the buffer
//! is full every other sample is dropped and the period doubles (the kept samples stay on a
//! regular grid, and cumulative counters lose nothing: a rate over two periods is the
//! difference of their ends). Same seed, same series.

use crate::hist::Histogram;
use std::time::Duration;

use crate::time::{nanos, secs_f64, Instant};

/// How to record a [`Series`].
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub struct SeriesConfig {
    /// Sampling period in virtual time (at least 1 µs is used).
    pub interval: Duration,
    /// Most samples kept (at least 4; rounded up to an even number). Past it the series is
    /// decimated: every other sample dropped, the period doubled.
    pub max_points: usize,
}

impl Default for SeriesConfig {
    fn default() -> Self {
        SeriesConfig {
            interval: Duration::from_millis(1),
            max_points: 4096,
        }
    }
}

/// Gauges of one host at one instant.
#[derive(Clone, Copy, Debug, Default, PartialEq, Eq)]
pub struct HostSample {
    /// Bytes below TCP: in the qdisc, in the NIC ring, or sent and not yet completed, summed
    /// over the host's flows (the emulator's `sk_wmem_alloc`, what TSQ limits).
    pub bytes_below_tcp: u64,
    /// Bytes held by the root qdisc.
    pub qdisc_bytes: u64,
    /// Bytes held by the NIC TX ring (not yet completed).
    pub nic_bytes: u64,
    /// TCP memory in pages, as `/proc/net/sockstat` `mem`: the sum over the host's sockets
    /// of `wmem_queued + rmem_alloc`, each rounded up to 4096-byte pages.
    pub tcp_mem_pages: u64,
}

/// One sample of a run. Counters are cumulative from the start of the run, summed over the
/// workload's flows (the latency probe included when there is one).
#[derive(Clone, Copy, Debug, Default, PartialEq, Eq)]
pub struct Sample {
    /// Virtual time of the sample.
    pub t: Instant,
    /// The data-sending (left) host, then the receiving (right) host.
    pub hosts: [HostSample; 2],
    /// Wake-ups of the data senders' threads from a blocking wait (blocked writers woken
    /// by write space, `sk_stream_write_space`).
    pub sender_wakeups: u64,
    /// `send()` calls of the data senders.
    pub send_calls: u64,
    /// Segments the receivers' sockets sent, mostly ACKs (`tcpi_segs_out`).
    pub acks_sent: u64,
    /// Bytes TCP sent, retransmissions included (`tcpi_bytes_sent` of the data senders).
    pub bytes_sent: u64,
    /// Data segments sent (`tcpi_data_segs_out` of the data senders).
    pub segments_sent: u64,
    /// Bytes the receiving applications have read.
    pub bytes_delivered: u64,
    /// `TcpExtTCPAutoCorking` of the data-sending host (Linux `tcp_should_autocork` taken).
    pub autocork_events: u64,
}

/// The recorded series of one run.
#[derive(Clone, Debug, Default, PartialEq, Eq)]
pub struct Series {
    /// Period between samples now (the configured one, doubled at each decimation); the last
    /// sample may be closer to its predecessor (it is taken when the run ends).
    pub interval: Duration,
    /// Samples in time order; the first at time zero.
    pub samples: Vec<Sample>,
    /// Times the series was decimated.
    pub decimations: u32,
    /// Host-queue delay (qdisc enqueue → last bit out of the NIC, ns) of every packet of the
    /// data-sending host's flows, the distribution the report's percentiles come from.
    pub host_queue_delay: Histogram,
}

/// Collects [`Sample`]s at a regular period with bounded memory (see the module docs).
#[derive(Clone, Debug)]
pub struct Recorder {
    series: Series,
    max: usize,
    next: Instant,
}

impl Recorder {
    /// A recorder whose first sample is due at time zero.
    pub fn new(cfg: SeriesConfig) -> Recorder {
        let max = cfg.max_points.max(4).next_multiple_of(2);
        Recorder {
            series: Series {
                interval: cfg.interval.max(Duration::from_micros(1)),
                samples: Vec::with_capacity(max.min(1024)),
                decimations: 0,
                host_queue_delay: Histogram::new(),
            },
            max,
            next: Instant::ZERO,
        }
    }

    /// When the next sample is due.
    pub fn next_due(&self) -> Instant {
        self.next
    }

    /// Time of the last sample taken, if any.
    pub fn last_time(&self) -> Option<Instant> {
        self.series.samples.last().map(|s| s.t)
    }

    /// Add a sample (taken at `s.t`) and schedule the next one a period later. A full buffer
    /// is decimated first.
    pub fn push(&mut self, s: Sample) {
        if self.series.samples.len() >= self.max {
            let mut i = 0;
            self.series.samples.retain(|_| {
                i += 1;
                i % 2 == 1
            });
            self.series.interval =
                Duration::from_nanos(nanos(self.series.interval).saturating_mul(2));
            self.series.decimations += 1;
        }
        self.next = s.t + self.series.interval;
        self.series.samples.push(s);
    }

    /// The series, with the run's host-queue delay histogram.
    pub fn finish(mut self, host_queue_delay: Histogram) -> Series {
        self.series.host_queue_delay = host_queue_delay;
        self.series
    }
}

impl Series {
    /// Per-interval rates of a cumulative counter: for each pair of consecutive samples,
    /// (end time in seconds, increase per second). Empty with fewer than two samples.
    pub fn rate(&self, counter: impl Fn(&Sample) -> u64) -> Vec<(f64, f64)> {
        self.samples
            .windows(2)
            .filter(|w| w[1].t > w[0].t)
            .map(|w| {
                let dt = secs_f64(w[1].t - w[0].t);
                let d = counter(&w[1]).saturating_sub(counter(&w[0]));
                (w[1].t.as_secs_f64(), d as f64 / dt)
            })
            .collect()
    }

    /// A gauge over time: (time in seconds, value) for every sample.
    pub fn gauge(&self, value: impl Fn(&Sample) -> f64) -> Vec<(f64, f64)> {
        self.samples
            .iter()
            .map(|s| (s.t.as_secs_f64(), value(s)))
            .collect()
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    fn at(t: u64, n: u64) -> Sample {
        Sample {
            t: Instant(t),
            acks_sent: n,
            ..Sample::default()
        }
    }

    #[test]
    fn decimation_keeps_a_regular_grid_and_bounds_memory() {
        let mut r = Recorder::new(SeriesConfig {
            interval: Duration::from_micros(10),
            max_points: 8,
        });
        let mut k = 0;
        while k < 1_000_000 {
            let t = r.next_due();
            assert!(t.0 >= k, "due times rise");
            r.push(at(t.0, t.0));
            k = t.0 + 1;
            assert!(r.series.samples.len() <= 8);
        }
        let s = r.finish(Histogram::new());
        assert!(s.decimations >= 3, "{}", s.decimations);
        assert_eq!(s.samples[0].t, Instant(0));
        // Regular grid at the final period.
        for w in s.samples.windows(2) {
            assert_eq!(w[1].t - w[0].t, s.interval, "{:?}", s.samples);
        }
        assert_eq!(s.interval, Duration::from_micros(10 << s.decimations));
        // A counter rising by 1 per ns has rate 1e9/s in every interval.
        for (_, v) in s.rate(|x| x.acks_sent) {
            assert!((v - 1e9).abs() < 1e-3, "{v}");
        }
    }

    #[test]
    fn rate_times_interval_sums_to_the_total() {
        let mut r = Recorder::new(SeriesConfig {
            interval: Duration::from_nanos(1000),
            max_points: 6,
        });
        let counts = [0u64, 5, 5, 17, 30, 31, 40, 52, 60, 61, 99];
        for (i, c) in counts.iter().enumerate() {
            r.push(at(i as u64 * 1000, *c));
        }
        // An extra, off-grid final sample.
        r.push(at(10_500, 120));
        let s = r.finish(Histogram::new());
        assert!(s.samples.len() <= 6);
        let mut sum = 0.0;
        let mut prev = 0.0;
        for (t, v) in s.rate(|x| x.acks_sent) {
            sum += v * (t - prev);
            prev = t;
        }
        assert!((sum - 120.0).abs() < 1e-6, "{sum}");
    }
}
