//! Text specifications of links and qdiscs, for the command line.
//!
//! Link: `"rate=1gbit,delay=50ms,jitter=1ms,loss=0.5%,reorder=1%,dup=0.1%,corrupt=0.01%,queue=1000p"`.
//! Keys: `rate` (bit, kbit, mbit, gbit, tbit; decimal multiples as `tc`), `delay`, `jitter`,
//! `reorder_delay` (s, ms, us, ns), `loss`, `reorder`, `dup`, `corrupt` (a percentage `0.5%`
//! or a fraction `0.005`), `ge=p/r/h/k` (Gilbert–Elliott: P(good→bad), P(bad→good),
//! P(deliver | bad), P(deliver | good); h and k may be left out: `ge=1%/10%` means h = 0,
//! k = 1), `queue` (`1000p` packets, or bytes: `150000`, `64k`, `1m`, with k = 1024 as `tc`).
//!
//! Qdisc: `pfifo_fast` | `fq[:limit=..,flow_limit=..,quantum=..,initial_quantum=..,maxrate=..]`
//! | `tbf:rate=..,burst=..,limit=..` | `pfifo[:limit=..]` | `bfifo[:limit=..]`.

use std::fmt;
use std::str::FromStr;
use std::time::Duration;

use thiserror::Error;

use crate::packet::Skb;
use crate::qdisc::{Fifo, Fq, FqConfig, PfifoFast, Qdisc, Tbf};
use crate::time::Rate;

/// A malformed link or qdisc specification.
#[derive(Debug, Clone, PartialEq, Eq, Error)]
pub enum SpecError {
    /// An item is not `key=value`.
    #[error("`{0}` is not key=value")]
    NotKeyValue(String),
    /// A key this spec does not have.
    #[error("unknown key `{key}` (expected one of: {expected})")]
    UnknownKey {
        /// The key.
        key: String,
        /// Keys that are accepted.
        expected: &'static str,
    },
    /// A key given twice.
    #[error("key `{0}` given twice")]
    Duplicate(String),
    /// A value that does not parse.
    #[error("bad value `{value}` for `{key}`: {why}")]
    BadValue {
        /// The key.
        key: String,
        /// The value.
        value: String,
        /// What was expected.
        why: &'static str,
    },
    /// A required key is missing.
    #[error("missing `{0}`")]
    Missing(&'static str),
    /// An unknown qdisc kind.
    #[error("unknown qdisc `{0}` (expected pfifo_fast, fq, tbf, pfifo or bfifo)")]
    UnknownQdisc(String),
}

fn bad(key: &str, value: &str, why: &'static str) -> SpecError {
    SpecError::BadValue {
        key: key.to_string(),
        value: value.to_string(),
        why,
    }
}

fn split_num(s: &str) -> (&str, &str) {
    let i = s
        .find(|c: char| !(c.is_ascii_digit() || c == '.'))
        .unwrap_or(s.len());
    (&s[..i], &s[i..])
}

fn parse_f64(key: &str, v: &str, why: &'static str) -> Result<f64, SpecError> {
    let x: f64 = v.parse().map_err(|_| bad(key, v, why))?;
    if !x.is_finite() || x < 0.0 {
        return Err(bad(key, v, why));
    }
    Ok(x)
}

/// Parse a rate: a number followed by `bit`, `kbit`, `mbit`, `gbit` or `tbit`.
pub fn parse_rate(key: &str, v: &str) -> Result<Rate, SpecError> {
    const WHY: &str = "a rate such as 100mbit (units bit, kbit, mbit, gbit, tbit)";
    let (n, unit) = split_num(v.trim());
    let mult = match unit.to_ascii_lowercase().as_str() {
        "bit" => 1.0,
        "kbit" => 1e3,
        "mbit" => 1e6,
        "gbit" => 1e9,
        "tbit" => 1e12,
        _ => return Err(bad(key, v, WHY)),
    };
    let x = parse_f64(key, n, WHY)? * mult;
    if !(1.0..=1e15).contains(&x) {
        return Err(bad(key, v, WHY));
    }
    Ok(Rate::bps(x.round() as u64))
}

/// Parse a duration: a number followed by `s`, `ms`, `us` or `ns`.
pub fn parse_time(key: &str, v: &str) -> Result<Duration, SpecError> {
    const WHY: &str = "a time such as 50ms (units s, ms, us, ns)";
    let (n, unit) = split_num(v.trim());
    let mult = match unit.to_ascii_lowercase().as_str() {
        "s" => 1e9,
        "ms" => 1e6,
        "us" => 1e3,
        "ns" => 1.0,
        _ => return Err(bad(key, v, WHY)),
    };
    let x = parse_f64(key, n, WHY)? * mult;
    if x > 1e18 {
        return Err(bad(key, v, WHY));
    }
    Ok(Duration::from_nanos(x.round() as u64))
}

/// Parse a probability: `0.5%` or `0.005`, within [0, 1].
pub fn parse_prob(key: &str, v: &str) -> Result<f64, SpecError> {
    const WHY: &str = "a probability such as 0.5% or 0.005";
    let v = v.trim();
    let x = match v.strip_suffix('%') {
        Some(n) => parse_f64(key, n, WHY)? / 100.0,
        None => parse_f64(key, v, WHY)?,
    };
    if x > 1.0 {
        return Err(bad(key, v, WHY));
    }
    Ok(x)
}

/// Parse a byte size: a number with an optional `k`/`kb`, `m`/`mb` or `g`/`gb` suffix
/// (powers of 1024, as `tc` sizes), or a plain `b`.
pub fn parse_bytes(key: &str, v: &str) -> Result<u64, SpecError> {
    const WHY: &str = "a size in bytes such as 1500, 64k or 4m";
    let (n, unit) = split_num(v.trim());
    let mult = match unit.to_ascii_lowercase().as_str() {
        "" | "b" => 1.0,
        "k" | "kb" => 1024.0,
        "m" | "mb" => 1024.0 * 1024.0,
        "g" | "gb" => 1024.0 * 1024.0 * 1024.0,
        _ => return Err(bad(key, v, WHY)),
    };
    let x = parse_f64(key, n, WHY)? * mult;
    if x > 1e15 {
        return Err(bad(key, v, WHY));
    }
    Ok(x.round() as u64)
}

fn parse_count(key: &str, v: &str) -> Result<u64, SpecError> {
    v.trim().parse().map_err(|_| bad(key, v, "a whole number"))
}

/// Iterate over `key=value` items separated by commas, rejecting duplicates.
fn items(s: &str) -> Result<Vec<(&str, &str)>, SpecError> {
    let mut out: Vec<(&str, &str)> = Vec::new();
    for item in s.split(',').map(str::trim).filter(|i| !i.is_empty()) {
        let (k, v) = item
            .split_once('=')
            .ok_or_else(|| SpecError::NotKeyValue(item.to_string()))?;
        let k = k.trim();
        if out.iter().any(|(q, _)| *q == k) {
            return Err(SpecError::Duplicate(k.to_string()));
        }
        out.push((k, v.trim()));
    }
    Ok(out)
}

/// Limit of a drop-tail queue.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum QueueLimit {
    /// At most this many packets.
    Packets(usize),
    /// At most this many bytes.
    Bytes(usize),
}

/// A Gilbert–Elliott two-state loss model. Each packet first moves the chain (good→bad with
/// probability `p`, bad→good with `r`), then is lost with probability `1 - k` in the good
/// state or `1 - h` in the bad state. Stationary loss rate:
/// `(r·(1-k) + p·(1-h)) / (p + r)`.
#[derive(Clone, Copy, Debug, PartialEq)]
pub struct GilbertElliott {
    /// P(good → bad) per packet.
    pub p: f64,
    /// P(bad → good) per packet.
    pub r: f64,
    /// P(deliver | bad).
    pub h: f64,
    /// P(deliver | good).
    pub k: f64,
}

impl GilbertElliott {
    /// The long-run fraction of packets lost.
    pub fn stationary_loss(&self) -> f64 {
        if self.p + self.r == 0.0 {
            return 1.0 - self.k;
        }
        (self.r * (1.0 - self.k) + self.p * (1.0 - self.h)) / (self.p + self.r)
    }
}

/// Settings of one direction of a link (or of the bottleneck).
#[derive(Clone, Debug, PartialEq)]
pub struct LinkSpec {
    /// Bottleneck rate; `None` is infinitely fast (no serialisation, no queue).
    pub rate: Option<Rate>,
    /// One-way propagation delay.
    pub delay: Duration,
    /// Uniform jitter: each packet's delay is `delay ± jitter` (packets stay in order unless
    /// reordered explicitly).
    pub jitter: Duration,
    /// Independent random loss probability.
    pub loss: f64,
    /// Bursty loss (applied in addition to `loss`).
    pub gilbert: Option<GilbertElliott>,
    /// Probability that a packet is held back by `reorder_delay`, letting later ones pass.
    pub reorder: f64,
    /// Extra delay of a reordered packet.
    pub reorder_delay: Duration,
    /// Probability that a packet is delivered twice.
    pub dup: f64,
    /// Probability that one random bit of a packet is flipped.
    pub corrupt: f64,
    /// Router queue in front of the rate limit (drop-tail).
    pub queue: QueueLimit,
}

impl Default for LinkSpec {
    fn default() -> Self {
        LinkSpec {
            rate: None,
            delay: Duration::ZERO,
            jitter: Duration::ZERO,
            loss: 0.0,
            gilbert: None,
            reorder: 0.0,
            reorder_delay: Duration::from_millis(1),
            dup: 0.0,
            corrupt: 0.0,
            queue: QueueLimit::Packets(1000),
        }
    }
}

const LINK_KEYS: &str =
    "rate, delay, jitter, loss, ge, reorder, reorder_delay, dup, corrupt, queue";

impl FromStr for LinkSpec {
    type Err = SpecError;
    fn from_str(s: &str) -> Result<LinkSpec, SpecError> {
        let mut l = LinkSpec::default();
        for (k, v) in items(s)? {
            match k {
                "rate" => l.rate = Some(parse_rate(k, v)?),
                "delay" => l.delay = parse_time(k, v)?,
                "jitter" => l.jitter = parse_time(k, v)?,
                "loss" => l.loss = parse_prob(k, v)?,
                "reorder" => l.reorder = parse_prob(k, v)?,
                "reorder_delay" => l.reorder_delay = parse_time(k, v)?,
                "dup" => l.dup = parse_prob(k, v)?,
                "corrupt" => l.corrupt = parse_prob(k, v)?,
                "ge" => {
                    let parts: Vec<&str> = v.split('/').collect();
                    if parts.len() < 2 || parts.len() > 4 {
                        return Err(bad(k, v, "p/r[/h[/k]] probabilities"));
                    }
                    let g = GilbertElliott {
                        p: parse_prob(k, parts[0])?,
                        r: parse_prob(k, parts[1])?,
                        h: parts.get(2).map_or(Ok(0.0), |x| parse_prob(k, x))?,
                        k: parts.get(3).map_or(Ok(1.0), |x| parse_prob(k, x))?,
                    };
                    l.gilbert = Some(g);
                }
                "queue" => {
                    l.queue = match v.strip_suffix(['p', 'P']) {
                        Some(n) => QueueLimit::Packets(parse_count(k, n)? as usize),
                        None => QueueLimit::Bytes(parse_bytes(k, v)? as usize),
                    }
                }
                _ => {
                    return Err(SpecError::UnknownKey {
                        key: k.to_string(),
                        expected: LINK_KEYS,
                    })
                }
            }
        }
        Ok(l)
    }
}

/// A qdisc choice with its parameters.
#[derive(Clone, Debug, Default, PartialEq, Eq)]
pub enum QdiscSpec {
    /// `pfifo_fast` with the device's txqueuelen (the default).
    #[default]
    PfifoFast,
    /// `fq`; `None` fields take Linux defaults for the device MTU.
    Fq {
        /// Total packet limit.
        limit: Option<usize>,
        /// Per-flow packet limit.
        flow_limit: Option<usize>,
        /// Round-robin quantum in bytes.
        quantum: Option<u32>,
        /// Credit of a new flow in bytes.
        initial_quantum: Option<u32>,
        /// Per-flow rate cap.
        maxrate: Option<Rate>,
    },
    /// `tbf`.
    Tbf {
        /// Token rate.
        rate: Rate,
        /// Bucket size in bytes.
        burst: u64,
        /// Backlog limit in bytes.
        limit: u64,
    },
    /// `pfifo`; `None` = txqueuelen.
    Pfifo {
        /// Packet limit.
        limit: Option<usize>,
    },
    /// `bfifo`; `None` = txqueuelen × MTU.
    Bfifo {
        /// Byte limit.
        limit: Option<usize>,
    },
}

impl QdiscSpec {
    /// Default `fq`.
    pub fn fq() -> QdiscSpec {
        QdiscSpec::Fq {
            limit: None,
            flow_limit: None,
            quantum: None,
            initial_quantum: None,
            maxrate: None,
        }
    }

    /// Build the qdisc for a device with `mtu` and `txqueuelen`.
    pub fn build(&self, mtu: u32, txqueuelen: usize) -> Box<dyn Qdisc<Skb> + Send> {
        match self {
            QdiscSpec::PfifoFast => Box::new(PfifoFast::new(txqueuelen)),
            QdiscSpec::Fq {
                limit,
                flow_limit,
                quantum,
                initial_quantum,
                maxrate,
            } => {
                let mut c = FqConfig::new(mtu);
                c.limit = limit.unwrap_or(c.limit);
                c.flow_limit = flow_limit.unwrap_or(c.flow_limit);
                c.quantum = quantum.unwrap_or(c.quantum);
                c.initial_quantum = initial_quantum.unwrap_or(c.initial_quantum);
                c.maxrate = *maxrate;
                Box::new(Fq::new(c))
            }
            QdiscSpec::Tbf { rate, burst, limit } => Box::new(Tbf::new(
                *rate,
                *burst,
                usize::try_from(*limit).unwrap_or(usize::MAX),
            )),
            QdiscSpec::Pfifo { limit } => Box::new(Fifo::pfifo(limit.unwrap_or(txqueuelen))),
            QdiscSpec::Bfifo { limit } => Box::new(Fifo::bfifo(
                limit.unwrap_or(txqueuelen.saturating_mul(mtu as usize)),
            )),
        }
    }
}

impl FromStr for QdiscSpec {
    type Err = SpecError;
    fn from_str(s: &str) -> Result<QdiscSpec, SpecError> {
        let s = s.trim();
        let (kind, args) = s.split_once(':').unwrap_or((s, ""));
        let kv = items(args)?;
        let unknown = |k: &str, expected: &'static str| SpecError::UnknownKey {
            key: k.to_string(),
            expected,
        };
        match kind {
            "pfifo_fast" => match kv.first() {
                Some((k, _)) => Err(unknown(k, "(none)")),
                None => Ok(QdiscSpec::PfifoFast),
            },
            "fq" => {
                let mut q = QdiscSpec::fq();
                if let QdiscSpec::Fq {
                    limit,
                    flow_limit,
                    quantum,
                    initial_quantum,
                    maxrate,
                } = &mut q
                {
                    for (k, v) in kv {
                        match k {
                            "limit" => *limit = Some(parse_count(k, v)? as usize),
                            "flow_limit" => *flow_limit = Some(parse_count(k, v)? as usize),
                            "quantum" => *quantum = Some(parse_bytes(k, v)?.min(1 << 30) as u32),
                            "initial_quantum" => {
                                *initial_quantum = Some(parse_bytes(k, v)?.min(1 << 30) as u32)
                            }
                            "maxrate" => *maxrate = Some(parse_rate(k, v)?),
                            _ => {
                                return Err(unknown(
                                    k,
                                    "limit, flow_limit, quantum, initial_quantum, maxrate",
                                ))
                            }
                        }
                    }
                }
                Ok(q)
            }
            "tbf" => {
                let (mut rate, mut burst, mut limit) = (None, None, None);
                for (k, v) in kv {
                    match k {
                        "rate" => rate = Some(parse_rate(k, v)?),
                        "burst" => burst = Some(parse_bytes(k, v)?),
                        "limit" => limit = Some(parse_bytes(k, v)?),
                        _ => return Err(unknown(k, "rate, burst, limit")),
                    }
                }
                Ok(QdiscSpec::Tbf {
                    rate: rate.ok_or(SpecError::Missing("tbf rate"))?,
                    burst: burst.ok_or(SpecError::Missing("tbf burst"))?,
                    limit: limit.ok_or(SpecError::Missing("tbf limit"))?,
                })
            }
            "pfifo" | "bfifo" => {
                let mut limit = None;
                for (k, v) in kv {
                    match k {
                        "limit" if kind == "pfifo" => limit = Some(parse_count(k, v)? as usize),
                        "limit" => limit = Some(parse_bytes(k, v)? as usize),
                        _ => return Err(unknown(k, "limit")),
                    }
                }
                Ok(if kind == "pfifo" {
                    QdiscSpec::Pfifo { limit }
                } else {
                    QdiscSpec::Bfifo { limit }
                })
            }
            other => Err(SpecError::UnknownQdisc(other.to_string())),
        }
    }
}

/// Prints the spec in the form [`LinkSpec::from_str`] reads (non-default keys only).
impl fmt::Display for LinkSpec {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        let d = LinkSpec::default();
        let mut parts: Vec<String> = Vec::new();
        if let Some(r) = self.rate {
            parts.push(format!("rate={}bit", r.as_bps()));
        }
        let t = |x: Duration| format!("{}ns", x.as_nanos());
        let p = |x: f64| format!("{x}");
        if self.delay != d.delay {
            parts.push(format!("delay={}", t(self.delay)));
        }
        if self.jitter != d.jitter {
            parts.push(format!("jitter={}", t(self.jitter)));
        }
        if self.loss != d.loss {
            parts.push(format!("loss={}", p(self.loss)));
        }
        if let Some(g) = self.gilbert {
            parts.push(format!("ge={}/{}/{}/{}", p(g.p), p(g.r), p(g.h), p(g.k)));
        }
        if self.reorder != d.reorder {
            parts.push(format!("reorder={}", p(self.reorder)));
        }
        if self.reorder_delay != d.reorder_delay {
            parts.push(format!("reorder_delay={}", t(self.reorder_delay)));
        }
        if self.dup != d.dup {
            parts.push(format!("dup={}", p(self.dup)));
        }
        if self.corrupt != d.corrupt {
            parts.push(format!("corrupt={}", p(self.corrupt)));
        }
        if self.queue != d.queue {
            parts.push(format!("queue={}", self.queue));
        }
        write!(f, "{}", parts.join(","))
    }
}

impl fmt::Display for QueueLimit {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        match self {
            QueueLimit::Packets(n) => write!(f, "{n}p"),
            QueueLimit::Bytes(n) => write!(f, "{n}"),
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn full_link_spec_parses() {
        let l: LinkSpec =
            "rate=1gbit,delay=50ms,jitter=1ms,loss=0.5%,reorder=1%,dup=0.1%,corrupt=0.01%,queue=1000p"
                .parse()
                .unwrap();
        assert_eq!(l.rate, Some(Rate::gbps(1)));
        assert_eq!(l.delay, Duration::from_millis(50));
        assert_eq!(l.jitter, Duration::from_millis(1));
        assert!((l.loss - 0.005).abs() < 1e-12);
        assert!((l.reorder - 0.01).abs() < 1e-12);
        assert!((l.dup - 0.001).abs() < 1e-12);
        assert!((l.corrupt - 0.0001).abs() < 1e-12);
        assert_eq!(l.queue, QueueLimit::Packets(1000));
    }

    #[test]
    fn display_round_trips() {
        for s in [
            "rate=1gbit,delay=50ms,jitter=1ms,loss=0.5%,reorder=1%,dup=0.1%,corrupt=0.01%,queue=1000p",
            "ge=1%/10%/20%/99%,queue=64k,reorder_delay=3us",
            "",
        ] {
            let l: LinkSpec = s.parse().unwrap();
            let again: LinkSpec = l.to_string().parse().unwrap();
            assert_eq!(l, again, "{s} -> {l}");
        }
    }

    #[test]
    fn units() {
        assert_eq!(parse_rate("r", "2.5mbit").unwrap(), Rate::bps(2_500_000));
        assert_eq!(parse_rate("r", "100kbit").unwrap(), Rate::bps(100_000));
        assert_eq!(parse_rate("r", "800bit").unwrap(), Rate::bps(800));
        assert_eq!(
            parse_time("d", "1.5s").unwrap(),
            Duration::from_millis(1500)
        );
        assert_eq!(parse_time("d", "20us").unwrap(), Duration::from_micros(20));
        assert_eq!(parse_time("d", "7ns").unwrap(), Duration::from_nanos(7));
        assert!((parse_prob("l", "0.02").unwrap() - 0.02).abs() < 1e-12);
        assert_eq!(parse_bytes("q", "64k").unwrap(), 65536);
        assert_eq!(parse_bytes("q", "1m").unwrap(), 1 << 20);
        let l: LinkSpec = "queue=150000".parse().unwrap();
        assert_eq!(l.queue, QueueLimit::Bytes(150_000));
        let l: LinkSpec = "ge=1%/10%".parse().unwrap();
        assert_eq!(
            l.gilbert,
            Some(GilbertElliott {
                p: 0.01,
                r: 0.1,
                h: 0.0,
                k: 1.0
            })
        );
    }

    #[test]
    fn bad_specs_have_clear_errors() {
        let e = "rate=1gbps".parse::<LinkSpec>().unwrap_err();
        assert!(
            e.to_string().contains("bad value `1gbps` for `rate`"),
            "{e}"
        );
        let e = "delay=5".parse::<LinkSpec>().unwrap_err();
        assert!(e.to_string().contains("units s, ms, us, ns"), "{e}");
        let e = "loss=150%".parse::<LinkSpec>().unwrap_err();
        assert!(matches!(e, SpecError::BadValue { .. }));
        let e = "bogus=1".parse::<LinkSpec>().unwrap_err();
        assert!(e.to_string().starts_with("unknown key `bogus`"), "{e}");
        let e = "delay".parse::<LinkSpec>().unwrap_err();
        assert_eq!(e, SpecError::NotKeyValue("delay".into()));
        let e = "delay=1ms,delay=2ms".parse::<LinkSpec>().unwrap_err();
        assert_eq!(e, SpecError::Duplicate("delay".into()));
        let e = "loss=-1%".parse::<LinkSpec>().unwrap_err();
        assert!(matches!(e, SpecError::BadValue { .. }));
    }

    #[test]
    fn qdisc_specs() {
        assert_eq!(
            "pfifo_fast".parse::<QdiscSpec>().unwrap(),
            QdiscSpec::PfifoFast
        );
        assert_eq!("fq".parse::<QdiscSpec>().unwrap(), QdiscSpec::fq());
        assert_eq!(
            "tbf:rate=200mbit,burst=32k,limit=8m"
                .parse::<QdiscSpec>()
                .unwrap(),
            QdiscSpec::Tbf {
                rate: Rate::mbps(200),
                burst: 32768,
                limit: 8 << 20
            }
        );
        assert_eq!(
            "pfifo:limit=0".parse::<QdiscSpec>().unwrap(),
            QdiscSpec::Pfifo { limit: Some(0) }
        );
        assert_eq!(
            "bfifo:limit=64k".parse::<QdiscSpec>().unwrap(),
            QdiscSpec::Bfifo { limit: Some(65536) }
        );
        match "fq:maxrate=10mbit,flow_limit=5"
            .parse::<QdiscSpec>()
            .unwrap()
        {
            QdiscSpec::Fq {
                maxrate,
                flow_limit,
                ..
            } => {
                assert_eq!(maxrate, Some(Rate::mbps(10)));
                assert_eq!(flow_limit, Some(5));
            }
            other => panic!("{other:?}"),
        }
        assert_eq!(
            "tbf:rate=1mbit,burst=10k".parse::<QdiscSpec>().unwrap_err(),
            SpecError::Missing("tbf limit")
        );
        assert!(matches!(
            "codel".parse::<QdiscSpec>().unwrap_err(),
            SpecError::UnknownQdisc(_)
        ));
        assert!(matches!(
            "pfifo:burst=1".parse::<QdiscSpec>().unwrap_err(),
            SpecError::UnknownKey { .. }
        ));
        for s in [
            "pfifo_fast",
            "fq",
            "tbf:rate=1mbit,burst=10k,limit=100k",
            "pfifo",
            "bfifo",
        ] {
            let q = s.parse::<QdiscSpec>().unwrap().build(1500, 1000);
            assert_eq!(q.kind(), s.split(':').next().unwrap());
        }
    }

    #[test]
    fn ge_stationary_formula() {
        let g = GilbertElliott {
            p: 0.01,
            r: 0.1,
            h: 0.0,
            k: 1.0,
        };
        assert!((g.stationary_loss() - 0.01 / 0.11).abs() < 1e-12);
    }
}
