//! Control messages of an error-queue `recvmsg` as packetdrill receives and checks them: the
//! control buffer is as large as the messages the script expects (the sum of their
//! `CMSG_SPACE`), Linux fills it in its own order and truncates what does not fit
//! (`put_cmsg`: a message cut to the space left, `MSG_CTRUNC`, nothing for a message
//! whose header does not fit), and the two lists are compared position by position
//! (level, type, `cmsg_len`, then the data by type). `SCM_TIMESTAMPING_OPT_STATS` data is
//! compared attribute by attribute with packetdrill's rules: the busy, rwnd-limited and
//! sndbuf-limited times within the script's tolerance (an expected 0 exactly), the other
//! attributes exactly, and `...` (its ignore value, `0xffffffff` cut to the attribute's
//! size) matches anything. Used only for entries that carry statistics
//! (`SOF_TIMESTAMPING_OPT_STATS`), whose blob (248 or 256 bytes on 6.18) is larger than any
//! list of attributes packetdrill can write, so the buffer size decides what is compared.

use shallow_tcp::tstamp::tcp_nla;

/// `sizeof(struct cmsghdr)` on x86-64.
pub(crate) const CMSG_HDR: usize = 16;

/// `CMSG_ALIGN`: 8 bytes on x86-64.
fn cmsg_align(n: usize) -> usize {
    (n + 7) & !7
}

/// `CMSG_SPACE(len)`.
pub(crate) fn cmsg_space(len: usize) -> usize {
    CMSG_HDR + cmsg_align(len)
}

/// One control message Linux puts: level, type, data.
#[derive(Debug, Clone)]
pub(crate) struct Cmsg {
    pub level: i64,
    pub ty: i64,
    pub data: Vec<u8>,
}

/// What a control buffer of `controllen` bytes receives of `cmsgs` (Linux's `put_cmsg`, in
/// order): each message with its `cmsg_len` (cut to the space left when it does not fit),
/// and whether anything was cut or left out (`MSG_CTRUNC`).
pub(crate) fn put_cmsgs(controllen: usize, cmsgs: &[Cmsg]) -> (Vec<(Cmsg, usize)>, bool) {
    let mut left = controllen;
    let mut out = Vec::new();
    let mut ctrunc = false;
    for c in cmsgs {
        if left < CMSG_HDR {
            ctrunc = true;
            continue;
        }
        let mut cmlen = CMSG_HDR + c.data.len();
        if left < cmlen {
            ctrunc = true;
            cmlen = left;
        }
        let data = c.data[..cmlen - CMSG_HDR].to_vec();
        out.push((
            Cmsg {
                level: c.level,
                ty: c.ty,
                data,
            },
            cmlen,
        ));
        left -= cmsg_space(c.data.len()).min(left);
    }
    (out, ctrunc)
}

/// An attribute's value size as packetdrill's table has it (`tcp_nla[]`: `TCP_NLA_PAD` to
/// `TCP_NLA_SRTT`; packetdrill knows no later attribute), by type.
pub(crate) fn pd_nla_size(ty: u16) -> Option<usize> {
    use tcp_nla::*;
    Some(match ty {
        PAD => 4,
        BUSY | RWND_LIMITED | SNDBUF_LIMITED | DATA_SEGS_OUT | TOTAL_RETRANS | PACING_RATE
        | DELIVERY_RATE | BYTES_SENT | BYTES_RETRANS => 8,
        SND_CWND | REORDERING | MIN_RTT | SNDQ_SIZE | SND_SSTHRESH | DELIVERED | DELIVERED_CE
        | DSACK_DUPS | REORD_SEEN | SRTT => 4,
        RECUR_RETRANS | DELIVERY_RATE_APP_LMT | CA_STATE => 1,
        _ => return None,
    })
}

/// packetdrill's value for `...` in an attribute list (`OPT_NLA_IGNORE_VAL`, `~0U`).
pub(crate) const NLA_IGNORE: u64 = 0xffff_ffff;

/// The expected attributes as packetdrill encodes them (`add_nla`): (type, value cut to
/// the attribute's size; `None` for `...`), into the netlink bytes it compares against.
pub(crate) fn encode_expected(attrs: &[(u16, Option<i64>)]) -> Option<Vec<u8>> {
    let mut b = Vec::new();
    for &(ty, v) in attrs {
        let size = pd_nla_size(ty)?;
        let val = v.map_or(NLA_IGNORE, |v| v as u64);
        b.extend_from_slice(&((4 + size) as u16).to_le_bytes());
        b.extend_from_slice(&ty.to_le_bytes());
        b.extend_from_slice(&val.to_le_bytes()[..size]);
        b.resize((b.len() + 3) & !3, 0);
    }
    Some(b)
}

fn read_le(b: &[u8], at: usize, n: usize) -> u64 {
    let mut v = [0u8; 8];
    let end = (at + n).min(b.len());
    if at < end {
        v[..end - at].copy_from_slice(&b[at..end]);
    }
    u64::from_le_bytes(v)
}

/// `scm_opt_stats_expect_eq`: the expected and actual blobs over `len` bytes (the actual
/// message's data length), attribute by attribute, with packetdrill's rules.
pub(crate) fn stats_expect_eq(
    expected: &[u8],
    actual: &[u8],
    len: usize,
    tolerance_us: u64,
) -> Result<(), String> {
    use tcp_nla::*;
    let name = |t: u16| {
        crate::symbols::SYMBOLS
            .iter()
            .find(|(n, v)| n.starts_with("TCP_NLA_") && *v == i64::from(t))
            .map_or_else(|| format!("TCP_NLA type {t}"), |(n, _)| (*n).to_string())
    };
    let mut off = 0usize;
    while off < len {
        let e_len = read_le(expected, off, 2) as u16;
        let e_ty = read_le(expected, off + 2, 2) as u16;
        let a_len = read_le(actual, off, 2) as u16;
        let a_ty = read_le(actual, off + 2, 2) as u16;
        if e_ty != a_ty {
            return Err(format!("Bad nla_type: expected={e_ty} actual={a_ty}"));
        }
        if e_len != a_len {
            return Err(format!("Bad nla_len: expected={e_len} actual={a_len}"));
        }
        let at = off + 4;
        match e_ty {
            BUSY | RWND_LIMITED | SNDBUF_LIMITED => {
                let (ev, av) = (read_le(expected, at, 8), read_le(actual, at, 8));
                let ok = ev == NLA_IGNORE
                    || (ev != 0
                        && (ev as i64).wrapping_sub(av as i64).unsigned_abs() <= tolerance_us)
                    || (ev == 0 && av == 0);
                if !ok {
                    return Err(format!("Bad {}: expected={ev} actual={av}", name(e_ty)));
                }
            }
            DATA_SEGS_OUT | TOTAL_RETRANS | PACING_RATE | DELIVERY_RATE | BYTES_SENT
            | BYTES_RETRANS => {
                let (ev, av) = (read_le(expected, at, 8), read_le(actual, at, 8));
                if ev != av && ev != NLA_IGNORE {
                    return Err(format!("Bad {}: expected={ev} actual={av}", name(e_ty)));
                }
            }
            SND_CWND | REORDERING | MIN_RTT | SNDQ_SIZE | SND_SSTHRESH | DELIVERED
            | DELIVERED_CE | DSACK_DUPS | REORD_SEEN | SRTT => {
                let (ev, av) = (read_le(expected, at, 4), read_le(actual, at, 4));
                if ev != av && ev != NLA_IGNORE {
                    return Err(format!("Bad {}: expected={ev} actual={av}", name(e_ty)));
                }
            }
            RECUR_RETRANS | DELIVERY_RATE_APP_LMT | CA_STATE => {
                let (ev, av) = (read_le(expected, at, 1), read_le(actual, at, 1));
                if ev != av && ev != 0xff {
                    return Err(format!("Bad {}: expected={ev} actual={av}", name(e_ty)));
                }
            }
            // packetdrill fails any other type without a message.
            _ => {
                return Err(format!(
                    "TCP_NLA type {e_ty} is not compared by packetdrill"
                ))
            }
        }
        off += (usize::from(e_len) + 3) & !3;
        if e_len == 0 {
            break;
        }
    }
    Ok(())
}

impl super::Runner<'_> {
    /// An error-queue `recvmsg` of a timestamp with statistics, checked as packetdrill
    /// checks it on Linux: the messages Linux puts (`SCM_TIMESTAMPING` and
    /// `SCM_TIMESTAMPING_OPT_STATS` when the socket asks for software stamps,
    /// `__sock_recv_timestamp`; then `IP_RECVERR`/`IPV6_RECVERR`, `ip_recv_error`) into a
    /// buffer the size of the script's messages, `msg_flags` (MSG_ERRQUEUE, MSG_TRUNC when
    /// the blob did not fit the data buffer, MSG_CTRUNC when a message was cut), and the
    /// messages compared in order.
    pub(super) fn check_errqueue_cmsgs(
        &mut self,
        msg: &crate::ast::Expr,
        t: &shallow_tcp::TxTimestamp,
        sof: u32,
        data_trunc: bool,
        new: bool,
    ) -> super::R<()> {
        use crate::outcome::FailKind;
        use shallow_tcp::tstamp::sof as f;
        let v6 = self.family() == shallow_tcp::Family::V6;
        let (ip_level, recverr) = if v6 { (41, 25) } else { (0, 11) };
        // What Linux puts, in its order.
        let mut linux = Vec::new();
        let blob = t.payload();
        if sof & f::SOFTWARE != 0 {
            let ns = t.time.as_nanos();
            let mut d = vec![0u8; 48];
            d[..8].copy_from_slice(&(ns / 1_000_000_000).to_le_bytes());
            d[8..16].copy_from_slice(&(ns % 1_000_000_000).to_le_bytes());
            linux.push(Cmsg {
                level: 1,
                // SCM_TIMESTAMPING_NEW after SO_TIMESTAMPING_NEW (the same layout on 64-bit).
                ty: if new { 65 } else { 37 },
                data: d,
            });
            linux.push(Cmsg {
                level: 1,
                ty: 54,
                data: blob,
            });
        }
        let mut ee = vec![0u8; 16 + if v6 { 28 } else { 16 }];
        ee[..4].copy_from_slice(&42u32.to_le_bytes());
        ee[4] = 4;
        ee[8..12].copy_from_slice(&t.kind.scm().to_le_bytes());
        ee[12..16].copy_from_slice(&t.key.to_le_bytes());
        linux.push(Cmsg {
            level: ip_level,
            ty: recverr,
            data: ee,
        });
        // What the script expects, and so the buffer's size.
        let mut expected = Vec::new();
        for (level, ty, c) in self.cmsgs(msg) {
            let (Some(level), Some(ty)) = (level, ty) else {
                return self.skip("recvmsg control message without level or type");
            };
            let Some(data) = c.field("cmsg_data").map(|f| &f.value) else {
                return self.skip("recvmsg control message without data");
            };
            let e = match data {
                crate::ast::Expr::Struct(_) if data.field("scm_sec").is_some() => {
                    let num = |n: &str| data.field(n).and_then(|f| self.int_of(&f.value));
                    let (Some(sec), Some(nsec)) = (num("scm_sec"), num("scm_nsec")) else {
                        return self.skip("SCM_TIMESTAMPING data not understood");
                    };
                    Want::Stamp((sec * 1_000_000_000 + nsec).max(0) as u64)
                }
                crate::ast::Expr::Struct(_) if data.field("ee_errno").is_some() => {
                    let num = |n: &str| data.field(n).and_then(|f| self.int_of(&f.value));
                    Want::Err(
                        [
                            "ee_errno",
                            "ee_origin",
                            "ee_type",
                            "ee_code",
                            "ee_info",
                            "ee_data",
                        ]
                        .map(num),
                        level,
                    )
                }
                crate::ast::Expr::Struct(fields) => {
                    let mut attrs = Vec::new();
                    for fl in fields {
                        let Some(ty) = fl
                            .name
                            .as_deref()
                            .filter(|n| n.starts_with("TCP_NLA_"))
                            .and_then(crate::symbols::lookup)
                        else {
                            return self.skip("recvmsg control data not understood");
                        };
                        let v = match &fl.value {
                            crate::ast::Expr::Ellipsis => None,
                            other => match self.int_of(other) {
                                Some(v) => Some(v),
                                None => return self.skip("TCP_NLA value not understood"),
                            },
                        };
                        attrs.push((ty as u16, v));
                    }
                    let Some(b) = encode_expected(&attrs) else {
                        return self.skip("TCP_NLA attribute packetdrill does not know");
                    };
                    Want::Stats(b)
                }
                other => match self.int_of(other) {
                    Some(_) => Want::Int,
                    None => return self.skip("recvmsg control data not understood"),
                },
            };
            expected.push((level, ty, e));
        }
        let controllen: usize = expected.iter().map(|(_, _, e)| cmsg_space(e.len())).sum();
        let (got, ctrunc) = put_cmsgs(controllen, &linux);
        let got_flags = 0x2000 | if data_trunc { 0x20 } else { 0 } | if ctrunc { 0x8 } else { 0 };
        if let Some(want) = msg.field("msg_flags").and_then(|f| self.int_of(&f.value)) {
            if want != got_flags {
                return self.fail(
                    FailKind::Syscall,
                    format!("recvmsg msg_flags {got_flags:#x}, script expects {want:#x}"),
                );
            }
        }
        for (i, ((level, ty, want), (c, cmlen))) in expected.iter().zip(&got).enumerate() {
            let bad = |what: &str, e: i64, a: i64| {
                format!("Bad {what} in cmsg {i}: expected={e} actual={a}")
            };
            if c.level != *level {
                return self.fail(FailKind::Syscall, bad("level", *level, c.level));
            }
            if c.ty != *ty {
                return self.fail(FailKind::Syscall, bad("type", *ty, c.ty));
            }
            let wlen = CMSG_HDR + want.len();
            if *cmlen != wlen {
                return self.fail(FailKind::Syscall, bad("len", wlen as i64, *cmlen as i64));
            }
            let r = match (c.level, c.ty, want) {
                (1, 37, Want::Stamp(w)) => {
                    let got = t.time.as_nanos();
                    if got.abs_diff(*w) > self.tol_ns {
                        Err(format!(
                            "SCM_TIMESTAMPING is {}, script expects {} (tolerance {} us)",
                            super::secs(got),
                            super::secs(*w),
                            self.tol_ns / 1000
                        ))
                    } else {
                        Ok(())
                    }
                }
                (1, 54, Want::Stats(e)) => {
                    stats_expect_eq(e, &c.data, c.data.len(), self.tol_ns / 1000)
                }
                (0, 11, Want::Err(fields, _)) | (41, 25, Want::Err(fields, _)) => {
                    let got = [42, 4, 0, 0, i64::from(t.kind.scm()), i64::from(t.key)];
                    let names = [
                        "ee_errno",
                        "ee_origin",
                        "ee_type",
                        "ee_code",
                        "ee_info",
                        "ee_data",
                    ];
                    fields
                        .iter()
                        .zip(got)
                        .zip(names)
                        .find(|((w, g), _)| w.is_some_and(|w| w != *g))
                        .map_or(Ok(()), |((w, g), n)| {
                            Err(format!(
                                "recvmsg {n} is {g}, script expects {}",
                                w.unwrap_or(0)
                            ))
                        })
                }
                _ => return self.skip("recvmsg control message not modelled"),
            };
            if let Err(e) = r {
                return self.fail(FailKind::Syscall, e);
            }
        }
        if got.len() > expected.len() {
            return self.fail(
                FailKind::Syscall,
                format!("received more than {} cmsgs", expected.len()),
            );
        }
        if got.len() < expected.len() {
            return self.fail(
                FailKind::Syscall,
                format!("received only {} cmsgs", got.len()),
            );
        }
        Ok(())
    }
}

/// One control message a script expects, by its data.
enum Want {
    /// `SCM_TIMESTAMPING`: the software time, ns from the script's start.
    Stamp(u64),
    /// `sock_extended_err` fields (`None`: not given) and the message's level (its
    /// sockaddr's size: `sockaddr_in` for SOL_IP, `sockaddr_in6` otherwise).
    Err([Option<i64>; 6], i64),
    /// `SCM_TIMESTAMPING_OPT_STATS` attributes as packetdrill encodes them.
    Stats(Vec<u8>),
    /// An integer (Linux puts none with a timestamp: compared by level and type only).
    Int,
}

impl Want {
    /// The data's size packetdrill gives the message (`cmsg_new`).
    fn len(&self) -> usize {
        match self {
            Want::Stamp(_) => 48,
            Want::Err(_, level) => 16 + if *level == 0 { 16 } else { 28 },
            Want::Stats(b) => b.len(),
            Want::Int => 4,
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn a_cmsg_that_does_not_fit_is_cut_to_the_space_left() {
        let c = |ty, n| Cmsg {
            level: 1,
            ty,
            data: vec![7u8; n],
        };
        // 64 + 192: the 48-byte stamp fits, the 248-byte blob is cut to 176 bytes of data,
        // the error record is left out.
        let (out, trunc) = put_cmsgs(64 + 192, &[c(37, 48), c(54, 248), c(11, 32)]);
        assert!(trunc);
        assert_eq!(out.len(), 2);
        assert_eq!((out[0].1, out[1].1, out[1].0.data.len()), (64, 192, 176));
        let (out, trunc) = put_cmsgs(64 + 264 + 48, &[c(37, 48), c(54, 248), c(11, 32)]);
        assert!(!trunc);
        assert_eq!(out.iter().map(|o| o.1).collect::<Vec<_>>(), [64, 264, 48]);
    }

    #[test]
    fn stats_compare_with_packetdrills_rules() {
        use tcp_nla::*;
        let exp =
            encode_expected(&[(BUSY, Some(1000)), (SND_CWND, Some(10)), (MIN_RTT, None)]).unwrap();
        assert_eq!(exp.len(), 12 + 8 + 8);
        let act = |busy: u64, cwnd: u32, rtt: u32| shallow_tcp::OptStats {
            busy,
            snd_cwnd: cwnd,
            min_rtt: rtt,
            ..Default::default()
        };
        // Build the actual blob in the expected order from the engine's encoding pieces.
        let pick = |s: shallow_tcp::OptStats| {
            let b = s.encode();
            let a = shallow_tcp::tstamp::nla_attrs(&b);
            let mut out = Vec::new();
            for t in [BUSY, SND_CWND, MIN_RTT] {
                let (ty, len, v) = a.iter().find(|x| x.0 == t).copied().unwrap();
                out.extend_from_slice(&len.to_le_bytes());
                out.extend_from_slice(&ty.to_le_bytes());
                out.extend_from_slice(v);
                out.resize((out.len() + 3) & !3, 0);
            }
            out
        };
        let n = exp.len();
        assert!(stats_expect_eq(&exp, &pick(act(1003, 10, 77)), n, 4).is_ok());
        assert!(stats_expect_eq(&exp, &pick(act(1005, 10, 77)), n, 4).is_err());
        assert!(stats_expect_eq(&exp, &pick(act(1000, 11, 77)), n, 4).is_err());
        let zero = encode_expected(&[(BUSY, Some(0))]).unwrap();
        assert!(stats_expect_eq(&zero, &pick(act(1, 10, 7))[..12], 12, 4).is_err());
        assert!(encode_expected(&[(tcp_nla::EDT, Some(0))]).is_none());
    }
}
