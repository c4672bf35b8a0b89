//! The environment commands of packetdrill scripts, turned into structured actions.
//!
//! Scripts run shell commands in backticks to configure the kernel under test (sysctls,
//! qdisc, offloads, routes, module parameters) and to check MIB counters with `nstat`.
//! An in-process runner cannot run them; instead [`parse_command`] recognises the forms the
//! Linux suite uses and returns [`EnvAction`]s for the runner to apply to its stack.
//! Anything else becomes [`EnvAction::Unsupported`] with a reason, so the runner can skip
//! the script and say why.

/// What one shell command asks of the environment.
#[derive(Debug, Clone, PartialEq, Eq)]
pub enum EnvAction {
    /// The suite's `defaults.sh` (any `../common/defaults.sh` path): apply [`defaults`].
    Defaults,
    /// Write a sysctl. `name` is dotted (`net.ipv4.tcp_wmem`) whatever form was written
    /// (`sysctl -q a.b=c`, `sysctl a/b=c`, `echo c > /proc/sys/a/b`,
    /// `set_sysctls.py /proc/sys/a/b=c`); `value` is unquoted (`4096 50000 4194304`).
    Sysctl {
        /// Dotted sysctl name.
        name: String,
        /// Value as text.
        value: String,
    },
    /// `/tmp/sysctl_restore_${PPID}.sh`: restores what `set_sysctls.py` changed. An
    /// in-process runner starts every script from a fresh stack, so this is a no-op.
    SysctlRestore,
    /// `tc qdisc add|replace dev DEV root KIND [limit N] [PARAM [VALUE]]...`.
    Qdisc {
        /// Device (`tun0`).
        dev: String,
        /// Queue discipline.
        kind: QdiscKind,
        /// `limit N` (packets; bytes for bfifo), if written.
        limit: Option<u32>,
        /// fq's other parameters as written, in order: `(name, value)` (`("maxrate",
        /// "1mbit")`), a flag with an empty value (`("nopacing", "")`).
        params: Vec<(String, String)>,
    },
    /// `tc qdisc delete|del dev DEV root`: back to the device's default qdisc.
    QdiscDelete {
        /// Device.
        dev: String,
    },
    /// `ethtool -K DEV feature on|off ...` (e.g. `tso off gso off`).
    Offload {
        /// Device.
        dev: String,
        /// `(feature, enabled)` in the order written.
        features: Vec<(String, bool)>,
    },
    /// `ip [-6] route change DST [via GW] [dev DEV] [advmss N] [mtu [lock] N]
    /// [initcwnd N] [quickack 0|1]`: per-route metrics (Linux `RTAX_*`).
    Route(RouteChange),
    /// `echo V > /sys/module/MODULE/parameters/PARAM` (e.g. tcp_cubic `hystart_detect`).
    ModuleParam {
        /// Module (`tcp_cubic`).
        module: String,
        /// Parameter (`hystart_detect`).
        param: String,
        /// Value as text.
        value: String,
    },
    /// `ip tcp_metrics flush all`: forget cached per-destination metrics.
    MetricsFlush,
    /// `ip link set [dev] DEV mtu N`: the device's MTU.
    LinkMtu {
        /// Device name (`tun0`).
        dev: String,
        /// New MTU in bytes.
        mtu: u32,
    },
    /// `nstat` with its output discarded: nstat prints the counters that changed since
    /// its previous run and remembers the current values, so this sets the baseline for
    /// the next [`EnvAction::CounterCheck`].
    NstatReset,
    /// A check of a MIB counter's change since the last `nstat` run (nstat prints only
    /// counters whose delta is non-zero, so `nstat | grep NAME` succeeds iff delta != 0).
    CounterCheck(CounterCheck),
    /// `dd if=/dev/zero of=PATH bs=B count=N`: a file of `len` zero bytes (the scripts'
    /// source for sendfile; packetdrill's payloads are zeros).
    FileZeros {
        /// The file's path.
        path: String,
        /// Its length.
        len: u64,
    },
    /// `rm -f PATH`.
    FileRemove {
        /// The file's path.
        path: String,
    },
    /// `grep " ST " /proc/net/tcp /proc/net/tcp6 | grep ":PORT"`: some socket is in state
    /// `ST` (Linux's number, hex: `0A` is LISTEN) with `PORT` (hex) as its local or remote
    /// port; the command fails otherwise.
    ProcNetTcp {
        /// The state's number (`TCP_LISTEN` = 10).
        state: u8,
        /// The port.
        port: u16,
    },
    /// `a || b`: apply `first`; if any of it is rejected (e.g. an unknown sysctl), apply
    /// `otherwise` instead.
    Fallback {
        /// Tried first.
        first: Vec<EnvAction>,
        /// Applied if `first` fails.
        otherwise: Vec<EnvAction>,
    },
    /// Something an in-process runner cannot do; the reason says what.
    Unsupported(String),
}

/// Queue disciplines the scripts install.
#[derive(Debug, Clone, PartialEq, Eq)]
pub enum QdiscKind {
    /// `pfifo`: a packet FIFO (the defaults' choice, "to avoid FQ pacing").
    Pfifo,
    /// `bfifo`: a byte-limited FIFO.
    Bfifo,
    /// `fq`: the fair-queue qdisc that enforces pacing (earliest departure time).
    Fq,
    /// Any other qdisc, by name.
    Other(String),
}

/// The attributes of an `ip route change` command.
#[derive(Debug, Clone, Default, PartialEq, Eq)]
pub struct RouteChange {
    /// `ip -6`.
    pub ipv6: bool,
    /// Destination as written (`192.0.2.1`, `2001:DB8::1`).
    pub dst: String,
    /// Gateway (`via`).
    pub via: Option<String>,
    /// Device (`dev`).
    pub dev: Option<String>,
    /// `advmss N`: MSS advertised to this destination (RTAX_ADVMSS).
    pub advmss: Option<u32>,
    /// `mtu N`: path MTU (RTAX_MTU).
    pub mtu: Option<u32>,
    /// `mtu lock N`: the MTU is locked (no PMTU discovery updates, DF cleared).
    pub mtu_lock: bool,
    /// `initcwnd N`: initial congestion window in packets (RTAX_INITCWND).
    pub initcwnd: Option<u32>,
    /// `quickack 0|1` (RTAX_QUICKACK).
    pub quickack: Option<u32>,
}

/// A counter assertion: `delta(name) op value`.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct CounterCheck {
    /// MIB counter name as nstat prints it (`TcpExtOutOfWindowIcmps`).
    pub name: String,
    /// Comparison.
    pub op: CmpOp,
    /// Right-hand side.
    pub value: u64,
}

/// Comparison operators of counter checks.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum CmpOp {
    /// `==`
    Eq,
    /// `!=`
    Ne,
    /// `>`
    Gt,
    /// `>=`
    Ge,
    /// `<`
    Lt,
    /// `<=`
    Le,
}

impl CmpOp {
    /// Applies the comparison.
    pub fn holds(self, lhs: u64, rhs: u64) -> bool {
        match self {
            CmpOp::Eq => lhs == rhs,
            CmpOp::Ne => lhs != rhs,
            CmpOp::Gt => lhs > rhs,
            CmpOp::Ge => lhs >= rhs,
            CmpOp::Lt => lhs < rhs,
            CmpOp::Le => lhs <= rhs,
        }
    }
}

impl EnvAction {
    /// Whether the runner can carry this out (nothing in it is `Unsupported`).
    pub fn is_supported(&self) -> bool {
        match self {
            EnvAction::Unsupported(_) => false,
            EnvAction::Fallback { first, otherwise } => {
                otherwise.iter().all(EnvAction::is_supported)
                    || first.iter().all(EnvAction::is_supported)
            }
            _ => true,
        }
    }
}

/// The sysctls the suite's `defaults.sh` sets (spec/packetdrill.md, "The Linux sysctls the
/// scripts assume"). The google copy's `tcp_fastopen=0x70403` and Fast Open key are used
/// because the scripts are google's (the key is the one `TFO_COOKIE` is made with);
/// `tcp_ecn_option` (an AccECN sysctl) is left out.
pub const DEFAULT_SYSCTLS: &[(&str, &str)] = &[
    ("net.ipv4.tcp_rmem", "4096 540000 15728640"),
    ("net.ipv4.tcp_wmem", "4096 262144 4194304"),
    ("net.ipv4.tcp_timestamps", "1"),
    ("net.ipv4.tcp_syn_retries", "5"),
    ("net.ipv4.tcp_synack_retries", "5"),
    ("net.ipv4.tcp_frto", "2"),
    ("net.ipv4.tcp_sack", "1"),
    ("net.ipv4.tcp_dsack", "1"),
    ("net.ipv4.tcp_fack", "0"),
    ("net.ipv4.tcp_reordering", "3"),
    ("net.ipv4.tcp_congestion_control", "cubic"),
    ("net.ipv4.tcp_slow_start_after_idle", "0"),
    ("net.ipv4.tcp_early_retrans", "4"),
    ("net.ipv4.tcp_recovery", "1"),
    ("net.ipv4.tcp_tso_win_divisor", "3"),
    ("net.ipv4.tcp_ecn", "0"),
    ("net.ipv4.tcp_pacing_ss_ratio", "200"),
    ("net.ipv4.tcp_pacing_ca_ratio", "120"),
    ("net.ipv4.tcp_notsent_lowat", "4294967295"),
    ("net.ipv4.tcp_fastopen", "0x70403"),
    (
        "net.ipv4.tcp_fastopen_key",
        "a1a1a1a1-b2b2b2b2-c3c3c3c3-d4d4d4d4",
    ),
    ("net.ipv4.tcp_syncookies", "1"),
];

/// What [`EnvAction::Defaults`] stands for, as plain actions: the [`DEFAULT_SYSCTLS`],
/// `ip tcp_metrics flush all` and `tc qdisc add dev tun0 root pfifo`.
pub fn defaults() -> Vec<EnvAction> {
    let mut v: Vec<EnvAction> = DEFAULT_SYSCTLS
        .iter()
        .map(|&(name, value)| EnvAction::Sysctl {
            name: name.to_string(),
            value: value.to_string(),
        })
        .collect();
    v.push(EnvAction::MetricsFlush);
    v.push(EnvAction::Qdisc {
        dev: "tun0".to_string(),
        kind: QdiscKind::Pfifo,
        limit: None,
        params: Vec::new(),
    });
    v
}

/// A shell word or operator.
#[derive(Debug, Clone, PartialEq, Eq)]
enum Tok {
    Word(String),
    /// `|`
    Pipe,
    /// `||`
    OrOr,
    /// `&&`
    AndAnd,
    /// `;` or newline
    Sep,
    /// A redirection: (fd or "&" for both, target). `2>&1` has target "&1".
    Redirect(String, String),
}

/// Splits shell text into words and operators (quotes, `\` escapes and line continuations,
/// `#` comments, redirections). Good enough for the suite's one-liners, not a full shell.
/// Shell arithmetic expansion `$((EXPR))` starting at `chars[at]` (the `$`): its value and
/// the index after the closing `))`. EXPR is integers (decimal or `0x` hex) with `+ - * / %
/// << >> & | ^`, unary minus and parentheses, in C precedence, as POSIX sh evaluates it.
fn arith_expansion(chars: &[char], at: usize) -> Result<(i64, usize), String> {
    if chars.get(at + 1) != Some(&'(') || chars.get(at + 2) != Some(&'(') {
        return Err("command substitution `$(...)` is not supported".to_string());
    }
    let mut depth = 0usize;
    let mut j = at + 3;
    while j < chars.len() {
        match chars[j] {
            '(' => depth += 1,
            ')' if depth == 0 => {
                if chars.get(j + 1) != Some(&')') {
                    return Err("unbalanced `$((`".to_string());
                }
                let expr: String = chars[at + 3..j].iter().collect();
                return Ok((arith(&expr)?, j + 2));
            }
            ')' => depth -= 1,
            _ => {}
        }
        j += 1;
    }
    Err("unterminated `$((`".to_string())
}

/// Evaluates a shell arithmetic expression (see [`arith_expansion`]).
fn arith(expr: &str) -> Result<i64, String> {
    fn atom(t: &[String], i: &mut usize) -> Result<i64, String> {
        let tok = t.get(*i).ok_or("arithmetic: missing operand")?.clone();
        *i += 1;
        match tok.as_str() {
            "(" => {
                let v = binary(t, i, 0)?;
                if t.get(*i).map(String::as_str) != Some(")") {
                    return Err("arithmetic: missing `)`".into());
                }
                *i += 1;
                Ok(v)
            }
            "-" => Ok(atom(t, i)?.wrapping_neg()),
            "+" => atom(t, i),
            n => {
                let parsed = match n.strip_prefix("0x").or_else(|| n.strip_prefix("0X")) {
                    Some(h) => i64::from_str_radix(h, 16),
                    None => n.parse(),
                };
                parsed.map_err(|_| format!("arithmetic: bad number `{n}`"))
            }
        }
    }
    fn prec(op: &str) -> Option<u8> {
        Some(match op {
            "|" => 1,
            "^" => 2,
            "&" => 3,
            "<<" | ">>" => 4,
            "+" | "-" => 5,
            "*" | "/" | "%" => 6,
            _ => return None,
        })
    }
    fn binary(t: &[String], i: &mut usize, min: u8) -> Result<i64, String> {
        let mut lhs = atom(t, i)?;
        while let Some(p) = t.get(*i).and_then(|op| prec(op)).filter(|&p| p > min) {
            let op = t[*i].clone();
            *i += 1;
            let rhs = binary(t, i, p)?;
            lhs = match op.as_str() {
                "|" => lhs | rhs,
                "^" => lhs ^ rhs,
                "&" => lhs & rhs,
                "<<" => lhs.wrapping_shl(rhs as u32),
                ">>" => lhs.wrapping_shr(rhs as u32),
                "+" => lhs.wrapping_add(rhs),
                "-" => lhs.wrapping_sub(rhs),
                "*" => lhs.wrapping_mul(rhs),
                "/" | "%" if rhs == 0 => return Err("arithmetic: division by zero".into()),
                "/" => lhs.wrapping_div(rhs),
                _ => lhs.wrapping_rem(rhs),
            };
        }
        Ok(lhs)
    }
    let mut toks = Vec::new();
    let cs: Vec<char> = expr.chars().collect();
    let mut k = 0;
    while k < cs.len() {
        let c = cs[k];
        if c.is_whitespace() {
            k += 1;
        } else if c.is_ascii_alphanumeric() {
            let start = k;
            while k < cs.len() && cs[k].is_ascii_alphanumeric() {
                k += 1;
            }
            toks.push(cs[start..k].iter().collect());
        } else if (c == '<' || c == '>') && cs.get(k + 1) == Some(&c) {
            toks.push(format!("{c}{c}"));
            k += 2;
        } else if "+-*/%&|^()".contains(c) {
            toks.push(c.to_string());
            k += 1;
        } else {
            return Err(format!("arithmetic: unsupported `{c}`"));
        }
    }
    let mut i = 0;
    let v = binary(&toks, &mut i, 0)?;
    if i != toks.len() {
        return Err(format!("arithmetic: unexpected `{}`", toks[i]));
    }
    Ok(v)
}

fn tokenize(text: &str) -> Result<Vec<Tok>, String> {
    let chars: Vec<char> = text.chars().collect();
    let mut toks = Vec::new();
    let mut i = 0;
    let mut cur = String::new();
    let mut in_word = false;
    // A redirect waiting for its target word: (fd, had_space).
    let mut pending_redirect: Option<String> = None;
    macro_rules! flush {
        () => {
            if in_word {
                let w = std::mem::take(&mut cur);
                match pending_redirect.take() {
                    Some(fd) => toks.push(Tok::Redirect(fd, w)),
                    None => toks.push(Tok::Word(w)),
                }
                in_word = false;
            }
        };
    }
    while i < chars.len() {
        let c = chars[i];
        match c {
            '\\' if chars.get(i + 1) == Some(&'\n') => i += 2,
            '\\' => {
                if let Some(&n) = chars.get(i + 1) {
                    cur.push(n);
                    in_word = true;
                }
                i += 2;
            }
            ' ' | '\t' | '\r' => {
                flush!();
                i += 1;
            }
            '$' if chars.get(i + 1) == Some(&'(') => {
                let (v, next) = arith_expansion(&chars, i)?;
                cur.push_str(&v.to_string());
                in_word = true;
                i = next;
            }
            '\n' | ';' => {
                flush!();
                toks.push(Tok::Sep);
                i += 1;
            }
            '#' if !in_word => {
                while i < chars.len() && chars[i] != '\n' {
                    i += 1;
                }
            }
            '\'' | '"' => {
                let q = c;
                i += 1;
                in_word = true;
                loop {
                    match chars.get(i) {
                        None => return Err("unterminated quote".to_string()),
                        Some(&ch) if ch == q => {
                            i += 1;
                            break;
                        }
                        Some('\\') if q == '"' && i + 1 < chars.len() => {
                            cur.push(chars[i + 1]);
                            i += 2;
                        }
                        Some('$') if q == '"' && chars.get(i + 1) == Some(&'(') => {
                            let (v, next) = arith_expansion(&chars, i)?;
                            cur.push_str(&v.to_string());
                            i = next;
                        }
                        Some(&ch) => {
                            cur.push(ch);
                            i += 1;
                        }
                    }
                }
            }
            '|' => {
                flush!();
                if chars.get(i + 1) == Some(&'|') {
                    toks.push(Tok::OrOr);
                    i += 2;
                } else {
                    toks.push(Tok::Pipe);
                    i += 1;
                }
            }
            '&' if chars.get(i + 1) == Some(&'&') => {
                flush!();
                toks.push(Tok::AndAnd);
                i += 2;
            }
            '&' if chars.get(i + 1) == Some(&'>') => {
                flush!();
                pending_redirect = Some("&".to_string());
                i += 2;
            }
            '>' => {
                // A digit word right before `>` is the fd (`2>`).
                let fd = if in_word && cur.chars().all(|d| d.is_ascii_digit()) {
                    in_word = false;
                    std::mem::take(&mut cur)
                } else {
                    flush!();
                    "1".to_string()
                };
                i += 1;
                if chars.get(i) == Some(&'>') {
                    i += 1; // append: same for our purposes
                }
                if chars.get(i) == Some(&'&') {
                    // `2>&1`
                    let mut target = String::from("&");
                    i += 1;
                    while i < chars.len() && chars[i].is_ascii_digit() {
                        target.push(chars[i]);
                        i += 1;
                    }
                    toks.push(Tok::Redirect(fd, target));
                } else {
                    pending_redirect = Some(fd);
                }
            }
            '`' | '$' if c == '`' || chars.get(i + 1) == Some(&'(') => {
                return Err("command substitution is not supported".to_string());
            }
            _ => {
                cur.push(c);
                in_word = true;
                i += 1;
            }
        }
    }
    if in_word {
        match pending_redirect.take() {
            Some(fd) => toks.push(Tok::Redirect(fd, cur)),
            None => toks.push(Tok::Word(cur)),
        }
    }
    if pending_redirect.is_some() {
        return Err("redirection without a target".to_string());
    }
    Ok(toks)
}

/// One simple command: words, and where its stdout goes.
struct Simple {
    words: Vec<String>,
    /// Target of `>` / `&>` for stdout, if redirected.
    stdout: Option<String>,
}

/// Turns one backtick command (possibly several lines) into actions, in order.
///
/// Separators (newline, `;`, `&&`) give a sequence; `a || b` gives
/// [`EnvAction::Fallback`]; pipelines are only understood as `nstat | grep NAME`.
pub fn parse_command(text: &str) -> Vec<EnvAction> {
    let toks = match tokenize(text) {
        Ok(t) => t,
        Err(e) => return vec![EnvAction::Unsupported(format!("{e}: `{}`", text.trim()))],
    };
    // Split into and-or lists on separators.
    let mut out = Vec::new();
    for list in toks.split(|t| *t == Tok::Sep || *t == Tok::AndAnd) {
        if list.is_empty() {
            continue;
        }
        // `a || b || c`: nested fallbacks, right-associative.
        let alternatives: Vec<&[Tok]> = list.split(|t| *t == Tok::OrOr).collect();
        let mut acc: Option<Vec<EnvAction>> = None;
        for alt in alternatives.iter().rev() {
            let actions = pipeline(alt);
            acc = Some(match acc {
                None => actions,
                Some(otherwise) => vec![EnvAction::Fallback {
                    first: actions,
                    otherwise,
                }],
            });
        }
        out.extend(acc.unwrap_or_default());
    }
    out
}

fn simple(toks: &[Tok]) -> Simple {
    let mut s = Simple {
        words: Vec::new(),
        stdout: None,
    };
    for t in toks {
        match t {
            Tok::Word(w) => s.words.push(w.clone()),
            Tok::Redirect(fd, target) if fd == "1" || fd == "&" => {
                s.stdout = Some(target.clone());
            }
            _ => {}
        }
    }
    s
}

fn source(toks: &[Tok]) -> String {
    toks.iter()
        .map(|t| match t {
            Tok::Word(w) if w.is_empty() || w.contains(char::is_whitespace) => format!("\"{w}\""),
            Tok::Word(w) => w.clone(),
            Tok::Pipe => "|".to_string(),
            Tok::OrOr => "||".to_string(),
            Tok::AndAnd => "&&".to_string(),
            Tok::Sep => ";".to_string(),
            Tok::Redirect(fd, t) if t.starts_with('&') => format!("{fd}>{t}"),
            Tok::Redirect(fd, t) => format!("{fd}> {t}"),
        })
        .collect::<Vec<_>>()
        .join(" ")
}

/// `dd if=/dev/zero of=PATH bs=B count=N [status=none]`: a file of B*N zero bytes.
fn dd_cmd(args: &[&str], toks: &[Tok]) -> Vec<EnvAction> {
    let (mut path, mut bs, mut count, mut zero) = (None, 512u64, None, false);
    for a in args {
        match a.split_once('=') {
            Some(("if", "/dev/zero")) => zero = true,
            Some(("of", p)) => path = Some(p.to_string()),
            Some(("bs", v)) => match v.parse() {
                Ok(n) => bs = n,
                Err(_) => return unsupported("unsupported dd block size", toks),
            },
            Some(("count", v)) => count = v.parse::<u64>().ok(),
            Some(("status", _)) => {}
            _ => return unsupported("unsupported dd argument", toks),
        }
    }
    match (zero, path, count) {
        (true, Some(path), Some(n)) => vec![EnvAction::FileZeros {
            path,
            len: bs.saturating_mul(n),
        }],
        _ => unsupported("unsupported dd command", toks),
    }
}

fn unsupported(why: &str, toks: &[Tok]) -> Vec<EnvAction> {
    vec![EnvAction::Unsupported(format!("{why}: `{}`", source(toks)))]
}

fn pipeline(toks: &[Tok]) -> Vec<EnvAction> {
    let stages: Vec<&[Tok]> = toks.split(|t| *t == Tok::Pipe).collect();
    if stages.len() == 1 {
        return command(toks);
    }
    // `nstat [opts] | grep [-q] NAME`: the counter changed since the last nstat run.
    let first = simple(stages[0]);
    if stages.len() == 2 && first.words.first().map(String::as_str) == Some("nstat") {
        let grep = simple(stages[1]);
        let args: Vec<&str> = grep.words.iter().skip(1).map(String::as_str).collect();
        let pattern: Vec<&str> = args
            .iter()
            .copied()
            .filter(|a| !a.starts_with('-'))
            .collect();
        if grep.words.first().map(String::as_str) == Some("grep")
            && pattern.len() == 1
            && is_counter_name(pattern[0])
            && first
                .words
                .iter()
                .skip(1)
                .all(|w| w.starts_with('-') && !w.contains('z'))
        {
            return vec![EnvAction::CounterCheck(CounterCheck {
                name: pattern[0].to_string(),
                op: CmpOp::Ne,
                value: 0,
            })];
        }
    }
    // `grep " 0A " /proc/net/tcp /proc/net/tcp6 | grep ":1F90"`: a socket in that state on
    // that port exists (the rows of /proc/net/tcp: hex addresses and ports, hex state).
    if stages.len() == 2 {
        let (a, b) = (simple(stages[0]), simple(stages[1]));
        let files_ok = a.words.len() >= 3
            && a.words[2..]
                .iter()
                .all(|f| f == "/proc/net/tcp" || f == "/proc/net/tcp6");
        if a.words.first().map(String::as_str) == Some("grep")
            && b.words.first().map(String::as_str) == Some("grep")
            && b.words.len() == 2
            && files_ok
        {
            let st = u8::from_str_radix(a.words[1].trim(), 16).ok();
            let port = b.words[1]
                .strip_prefix(':')
                .and_then(|h| u16::from_str_radix(h, 16).ok());
            if let (Some(state), Some(port)) = (st, port) {
                return vec![EnvAction::ProcNetTcp { state, port }];
            }
        }
    }
    unsupported("unsupported pipeline", toks)
}

fn is_counter_name(s: &str) -> bool {
    !s.is_empty() && s.chars().all(|c| c.is_ascii_alphanumeric())
}

fn basename(path: &str) -> &str {
    path.rsplit('/').next().unwrap_or(path)
}

/// `/proc/sys/net/ipv4/x` or `net/ipv4/x` or `net.ipv4.x` → `net.ipv4.x`.
fn sysctl_name(path: &str) -> Option<String> {
    let p = path.strip_prefix("/proc/sys/").unwrap_or(path);
    if p.is_empty() || p.starts_with('/') {
        return None;
    }
    Some(p.replace('/', "."))
}

fn command(toks: &[Tok]) -> Vec<EnvAction> {
    let s = simple(toks);
    let Some(cmd) = s.words.first() else {
        return Vec::new();
    };
    let args: Vec<&str> = s.words[1..].iter().map(String::as_str).collect();
    let discarded = matches!(s.stdout.as_deref(), None | Some("/dev/null"));
    match basename(cmd) {
        "defaults.sh" if args.is_empty() => vec![EnvAction::Defaults],
        _ if cmd.starts_with("/tmp/sysctl_restore_") && cmd.ends_with(".sh") => {
            vec![EnvAction::SysctlRestore]
        }
        "sysctl" => sysctl_cmd(&args, toks),
        "set_sysctls.py" => {
            let mut v = Vec::new();
            for a in &args {
                match a.split_once('=').and_then(|(p, val)| {
                    p.starts_with("/proc/sys/")
                        .then(|| sysctl_name(p))
                        .flatten()
                        .map(|n| (n, val))
                }) {
                    Some((name, value)) => v.push(EnvAction::Sysctl {
                        name,
                        value: value.to_string(),
                    }),
                    None => return unsupported("unrecognised set_sysctls.py argument", toks),
                }
            }
            v
        }
        "echo" => echo_cmd(&args, s.stdout.as_deref(), toks),
        "tc" => tc_cmd(&args, toks),
        "ethtool" => ethtool_cmd(&args, toks),
        "ip" => ip_cmd(&args, toks),
        "nstat" if discarded && args.iter().all(|a| a.starts_with('-')) => {
            vec![EnvAction::NstatReset]
        }
        "rm" if args.first() == Some(&"-f") && args.len() == 2 => vec![EnvAction::FileRemove {
            path: args[1].to_string(),
        }],
        "dd" => dd_cmd(&args, toks),
        _ => unsupported("unsupported command", toks),
    }
}

fn sysctl_cmd(args: &[&str], toks: &[Tok]) -> Vec<EnvAction> {
    let mut v = Vec::new();
    for a in args {
        if a.starts_with('-') {
            // -q quiet, -e ignore unknown keys, -w write: no effect on the outcome here.
            if a.chars().skip(1).all(|c| matches!(c, 'q' | 'e' | 'w')) {
                continue;
            }
            return unsupported("unsupported sysctl flag", toks);
        }
        match a.split_once('=') {
            Some((n, val)) => match sysctl_name(n) {
                Some(name) => v.push(EnvAction::Sysctl {
                    name,
                    value: val.to_string(),
                }),
                None => return unsupported("bad sysctl name", toks),
            },
            None => return unsupported("sysctl read (no `=`)", toks),
        }
    }
    if v.is_empty() {
        return unsupported("sysctl without assignments", toks);
    }
    v
}

fn echo_cmd(args: &[&str], stdout: Option<&str>, toks: &[Tok]) -> Vec<EnvAction> {
    let Some(target) = stdout else {
        return unsupported("echo without redirection", toks);
    };
    let value = args.join(" ");
    if target.starts_with("/proc/sys/") {
        if let Some(name) = sysctl_name(target) {
            return vec![EnvAction::Sysctl { name, value }];
        }
    }
    if let Some(rest) = target.strip_prefix("/sys/module/") {
        let parts: Vec<&str> = rest.split('/').collect();
        if parts.len() == 3 && parts[1] == "parameters" && !parts[0].is_empty() {
            return vec![EnvAction::ModuleParam {
                module: parts[0].to_string(),
                param: parts[2].to_string(),
                value,
            }];
        }
    }
    unsupported("echo into an unsupported file", toks)
}

/// `tc ... fq` parameters that take a value (tc-fq(8)).
const FQ_PARAMS: &[&str] = &[
    "flow_limit",
    "quantum",
    "initial_quantum",
    "maxrate",
    "buckets",
    "orphanmask",
    "low_rate_threshold",
    "refill_delay",
    "horizon",
    "ce_threshold",
    "timer_slack",
    "weights",
    "priomap",
];

/// `tc ... fq` flags (tc-fq(8)).
const FQ_FLAGS: &[&str] = &["pacing", "nopacing", "horizon_drop", "horizon_cap"];

fn tc_cmd(args: &[&str], toks: &[Tok]) -> Vec<EnvAction> {
    if args.first() != Some(&"qdisc") || args.len() < 2 {
        return unsupported("unsupported tc command", toks);
    }
    let verb = args[1];
    let mut dev = None;
    let mut root = false;
    let mut i = 2;
    while i < args.len() {
        match args[i] {
            "dev" if i + 1 < args.len() => {
                dev = Some(args[i + 1].to_string());
                i += 2;
            }
            "root" => {
                root = true;
                i += 1;
            }
            _ => break,
        }
    }
    let (Some(dev), true) = (dev, root) else {
        return unsupported("tc qdisc without `dev DEV root`", toks);
    };
    match verb {
        "delete" | "del" if i == args.len() => vec![EnvAction::QdiscDelete { dev }],
        "add" | "replace" | "change" if i < args.len() => {
            let kind = match args[i] {
                "pfifo" => QdiscKind::Pfifo,
                "bfifo" => QdiscKind::Bfifo,
                "fq" => QdiscKind::Fq,
                other => QdiscKind::Other(other.to_string()),
            };
            let mut limit = None;
            let mut params = Vec::new();
            let mut j = i + 1;
            while j < args.len() {
                let value = args.get(j + 1).copied();
                match (args[j], value.and_then(|v| v.parse::<u32>().ok())) {
                    ("limit", Some(n)) => {
                        limit = Some(n);
                        j += 2;
                    }
                    (flag, _) if kind == QdiscKind::Fq && FQ_FLAGS.contains(&flag) => {
                        params.push((flag.to_string(), String::new()));
                        j += 1;
                    }
                    (name, _) if kind == QdiscKind::Fq && FQ_PARAMS.contains(&name) => {
                        let Some(v) = value else {
                            return unsupported("qdisc parameter without a value", toks);
                        };
                        params.push((name.to_string(), v.to_string()));
                        j += 2;
                    }
                    _ => return unsupported("unsupported qdisc parameter", toks),
                }
            }
            vec![EnvAction::Qdisc {
                dev,
                kind,
                limit,
                params,
            }]
        }
        _ => unsupported("unsupported tc qdisc command", toks),
    }
}

fn ethtool_cmd(args: &[&str], toks: &[Tok]) -> Vec<EnvAction> {
    if !matches!(
        args.first(),
        Some(&"-K") | Some(&"--features") | Some(&"--offload")
    ) || args.len() < 4
        || args.len() % 2 != 0
    {
        return unsupported("unsupported ethtool command", toks);
    }
    let dev = args[1].to_string();
    let mut features = Vec::new();
    for pair in args[2..].chunks(2) {
        let on = match pair[1] {
            "on" => true,
            "off" => false,
            _ => return unsupported("ethtool feature must be on or off", toks),
        };
        features.push((pair[0].to_string(), on));
    }
    vec![EnvAction::Offload { dev, features }]
}

fn ip_cmd(args: &[&str], toks: &[Tok]) -> Vec<EnvAction> {
    let (ipv6, rest) = match args.first() {
        Some(&"-6") => (true, &args[1..]),
        Some(&"-4") => (false, &args[1..]),
        _ => (false, args),
    };
    match rest {
        ["tcp_metrics" | "tcpmetrics", "flush", "all"] => vec![EnvAction::MetricsFlush],
        ["link" | "l", "set", "dev", dev, "mtu", n] | ["link" | "l", "set", dev, "mtu", n] => {
            match n.parse::<u32>() {
                Ok(mtu) => vec![EnvAction::LinkMtu {
                    dev: dev.to_string(),
                    mtu,
                }],
                Err(_) => unsupported("bad MTU", toks),
            }
        }
        ["route" | "r" | "ro", "change" | "replace", dst, attrs @ ..] => {
            let mut r = RouteChange {
                ipv6,
                dst: dst.to_string(),
                ..RouteChange::default()
            };
            let mut i = 0;
            let num = |i: usize| attrs.get(i).and_then(|v| v.parse::<u32>().ok());
            while i < attrs.len() {
                match attrs[i] {
                    "via" if i + 1 < attrs.len() => r.via = Some(attrs[i + 1].to_string()),
                    "dev" if i + 1 < attrs.len() => r.dev = Some(attrs[i + 1].to_string()),
                    "advmss" if num(i + 1).is_some() => r.advmss = num(i + 1),
                    "initcwnd" if num(i + 1).is_some() => r.initcwnd = num(i + 1),
                    "quickack" if num(i + 1).is_some() => r.quickack = num(i + 1),
                    "mtu" if attrs.get(i + 1) == Some(&"lock") && num(i + 2).is_some() => {
                        r.mtu_lock = true;
                        r.mtu = num(i + 2);
                        i += 1;
                    }
                    "mtu" if num(i + 1).is_some() => r.mtu = num(i + 1),
                    _ => return unsupported("unsupported route attribute", toks),
                }
                i += 2;
            }
            vec![EnvAction::Route(r)]
        }
        _ => unsupported("unsupported ip command", toks),
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    fn sysctl(name: &str, value: &str) -> EnvAction {
        EnvAction::Sysctl {
            name: name.into(),
            value: value.into(),
        }
    }

    #[test]
    fn link_mtu_is_a_device_setting() {
        let want = vec![EnvAction::LinkMtu {
            dev: "tun0".into(),
            mtu: 1400,
        }];
        assert_eq!(parse_command("ip link set dev tun0 mtu 1400"), want);
        assert_eq!(parse_command("ip link set tun0 mtu $((1500 - 100))"), want);
        assert!(matches!(
            parse_command("ip link set dev tun0 mtu big")[..],
            [EnvAction::Unsupported(_)]
        ));
    }

    #[test]
    fn shell_arithmetic_expands_in_words_and_double_quotes() {
        assert_eq!(
            parse_command("sysctl -q net.ipv4.tcp_rmem=\"4096 540000 $((15*1024*1024))\""),
            vec![sysctl("net.ipv4.tcp_rmem", "4096 540000 15728640")]
        );
        assert_eq!(
            parse_command("sysctl -q net.ipv4.tcp_notsent_lowat=$(( (1 << 16) + 0x10 - -2 ))"),
            vec![sysctl("net.ipv4.tcp_notsent_lowat", "65554")]
        );
        assert_eq!(arith("2 + 3 * 4 % 5 - 6 / 4"), Ok(3));
        assert_eq!(arith("7 & 3 | 8 ^ 1"), Ok(11)); // (7 & 3) | (8 ^ 1)
        assert!(arith("1 / 0").is_err());
        assert!(arith("1 +").is_err());
        assert!(matches!(
            parse_command("sysctl -q a.b=$((1+)")[..],
            [EnvAction::Unsupported(_)]
        ));
        assert!(matches!(
            parse_command("echo $(date)")[..],
            [EnvAction::Unsupported(_)]
        ));
    }

    #[test]
    fn sysctl_forms_normalise_to_dotted_names() {
        assert_eq!(
            parse_command("sysctl -q net.ipv4.tcp_sack=0"),
            vec![sysctl("net.ipv4.tcp_sack", "0")]
        );
        assert_eq!(
            parse_command("sysctl -e -q net/ipv4/tcp_pacing_ss_ratio=150"),
            vec![sysctl("net.ipv4.tcp_pacing_ss_ratio", "150")]
        );
        assert_eq!(
            parse_command("echo 7 > /proc/sys/net/ipv4/tcp_reordering"),
            vec![sysctl("net.ipv4.tcp_reordering", "7")]
        );
        assert_eq!(
            parse_command(
                "x/set_sysctls.py /proc/sys/net/ipv4/tcp_rmem=\"1 2 3\" \\\n  /proc/sys/net/core/somaxconn=9"
            ),
            vec![
                sysctl("net.ipv4.tcp_rmem", "1 2 3"),
                sysctl("net.core.somaxconn", "9")
            ]
        );
        assert!(!parse_command("sysctl net.ipv4.tcp_sack")[0].is_supported());
    }

    #[test]
    fn multi_line_blocks_and_comments() {
        let acts = parse_command(
            "../../common/defaults.sh\n# a comment: sysctl -q x=1\nsysctl -q a.b=1 # trailing\n\n",
        );
        assert_eq!(acts, vec![EnvAction::Defaults, sysctl("a.b", "1")]);
        assert_eq!(
            parse_command("/tmp/sysctl_restore_${PPID}.sh"),
            vec![EnvAction::SysctlRestore]
        );
    }

    #[test]
    fn qdisc_offload_route_module() {
        assert_eq!(
            parse_command("tc qdisc delete dev tun0 root 2>/dev/null ; tc qdisc add dev tun0 root pfifo limit 0"),
            vec![
                EnvAction::QdiscDelete { dev: "tun0".into() },
                EnvAction::Qdisc {
                    dev: "tun0".into(),
                    kind: QdiscKind::Pfifo,
                    limit: Some(0),
                    params: Vec::new(),
                }
            ]
        );
        assert_eq!(
            parse_command("ethtool -K tun0 gso off tso on"),
            vec![EnvAction::Offload {
                dev: "tun0".into(),
                features: vec![("gso".into(), false), ("tso".into(), true)]
            }]
        );
        let r = parse_command(
            "ip -6 route change 2001:DB8::1 via fd3d::0 dev tun0 advmss 600 mtu lock 660 initcwnd 11 quickack 1",
        );
        assert_eq!(
            r,
            vec![EnvAction::Route(RouteChange {
                ipv6: true,
                dst: "2001:DB8::1".into(),
                via: Some("fd3d::0".into()),
                dev: Some("tun0".into()),
                advmss: Some(600),
                mtu: Some(660),
                mtu_lock: true,
                initcwnd: Some(11),
                quickack: Some(1),
            })]
        );
        assert_eq!(
            parse_command("echo 3 > /sys/module/tcp_cubic/parameters/hystart_detect"),
            vec![EnvAction::ModuleParam {
                module: "tcp_cubic".into(),
                param: "hystart_detect".into(),
                value: "3".into()
            }]
        );
        assert!(!parse_command("tc qdisc add dev tun0 root netem delay 10ms")[0].is_supported());
    }

    #[test]
    fn nstat_reset_and_checks() {
        assert_eq!(
            parse_command("nstat > /dev/null"),
            vec![EnvAction::NstatReset]
        );
        assert_eq!(
            parse_command("nstat | grep TcpExtTCPRcvQDrop > /dev/null"),
            vec![EnvAction::CounterCheck(CounterCheck {
                name: "TcpExtTCPRcvQDrop".into(),
                op: CmpOp::Ne,
                value: 0
            })]
        );
        // With -z nstat also prints zero counters, so grep proves nothing we model.
        assert!(!parse_command("nstat -az | grep TcpExtX")[0].is_supported());
        assert!(CmpOp::Ne.holds(1, 0) && !CmpOp::Ne.holds(0, 0));
        assert!(CmpOp::Ge.holds(2, 2) && CmpOp::Lt.holds(1, 2) && !CmpOp::Gt.holds(2, 2));
    }

    #[test]
    fn or_gives_a_fallback() {
        let acts = parse_command("sysctl -q a.b=1 &> /dev/null || ip tcp_metrics flush all");
        assert_eq!(
            acts,
            vec![EnvAction::Fallback {
                first: vec![sysctl("a.b", "1")],
                otherwise: vec![EnvAction::MetricsFlush]
            }]
        );
    }

    #[test]
    fn anything_else_is_unsupported_with_the_command_text() {
        let a = parse_command("grep \" 0A \" /proc/net/tcp");
        match &a[0] {
            EnvAction::Unsupported(r) => assert!(r.contains("\" 0A \""), "{r}"),
            other => panic!("{other:?}"),
        }
        assert!(!parse_command("echo $(date) > /tmp/x")[0].is_supported());
        assert!(!parse_command("echo 'open")[0].is_supported());
    }

    #[test]
    fn defaults_expand() {
        let d = defaults();
        assert!(d.contains(&sysctl("net.ipv4.tcp_notsent_lowat", "4294967295")));
        assert!(d.contains(&sysctl("net.ipv4.tcp_wmem", "4096 262144 4194304")));
        assert!(d.contains(&EnvAction::MetricsFlush));
        assert_eq!(
            d.last(),
            Some(&EnvAction::Qdisc {
                dev: "tun0".into(),
                kind: QdiscKind::Pfifo,
                limit: None,
                params: Vec::new(),
            })
        );
    }

    #[test]
    fn proc_net_tcp_grep_is_a_socket_check() {
        assert_eq!(
            parse_command(r#"grep " 0A " /proc/net/tcp /proc/net/tcp6 | grep ":1F90""#),
            vec![EnvAction::ProcNetTcp {
                state: 10,
                port: 8080
            }]
        );
        assert!(matches!(
            parse_command(r#"grep " 0A " /etc/passwd | grep ":1F90""#)[0],
            EnvAction::Unsupported(_)
        ));
    }
}
