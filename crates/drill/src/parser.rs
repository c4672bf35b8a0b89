//! Hand-written recursive-descent parser for the packetdrill script language.
//!
//! The language is context sensitive (flags such as `S.` or `.`, cookies written as bare hex,
//! `+.1...0.200` times), so the parser reads characters directly instead of running a
//! separate tokenizer. Newlines are ordinary whitespace: an event ends where its grammar
//! ends, and every event starts with a time, which keeps lines unambiguous.

use crate::ast::*;
use crate::error::ParseError;

/// Largest number of nested `[`/`{`/`(` in an expression; deeper input is rejected so that
/// hostile input cannot exhaust the stack.
const MAX_DEPTH: u32 = 64;

/// Parses a whole script. `file` is only used in error messages and [`Script::file`].
pub fn parse_script(file: &str, text: &str) -> Result<Script, ParseError> {
    let mut p = Parser::new(file, text);
    p.script()
}

struct Parser<'a> {
    file: &'a str,
    src: &'a [u8],
    pos: usize,
    line_starts: Vec<usize>,
    depth: u32,
}

type PResult<T> = Result<T, ParseError>;

fn is_word_start(b: u8) -> bool {
    b.is_ascii_alphabetic() || b == b'_'
}

fn is_word_char(b: u8) -> bool {
    b.is_ascii_alphanumeric() || b == b'_'
}

impl<'a> Parser<'a> {
    fn new(file: &'a str, text: &'a str) -> Self {
        let src = text.as_bytes();
        let mut line_starts = vec![0];
        line_starts.extend(
            src.iter()
                .enumerate()
                .filter(|(_, &b)| b == b'\n')
                .map(|(i, _)| i + 1),
        );
        Parser {
            file,
            src,
            pos: 0,
            line_starts,
            depth: 0,
        }
    }

    // ---- positions and errors -------------------------------------------------------

    fn loc(&self, pos: usize) -> (u32, u32) {
        let line_idx = match self.line_starts.binary_search(&pos) {
            Ok(i) => i,
            Err(i) => i - 1,
        };
        let start = self.line_starts[line_idx];
        let end = pos.min(self.src.len());
        // Count characters, not bytes: skip UTF-8 continuation bytes.
        let col = self.src[start..end]
            .iter()
            .filter(|&&b| (b & 0xC0) != 0x80)
            .count();
        (line_idx as u32 + 1, col as u32 + 1)
    }

    fn err_at<T>(&self, pos: usize, message: impl Into<String>) -> PResult<T> {
        let (line, col) = self.loc(pos);
        Err(ParseError {
            file: self.file.to_string(),
            line,
            col,
            message: message.into(),
        })
    }

    fn err<T>(&self, message: impl Into<String>) -> PResult<T> {
        self.err_at(self.pos, message)
    }

    /// A short description of what is at the cursor, for messages.
    fn found(&self) -> String {
        match self.peek() {
            None => "end of file".to_string(),
            Some(b'\n') => "end of line".to_string(),
            Some(b) if is_word_start(b) => {
                let end = self.src[self.pos..]
                    .iter()
                    .position(|&c| !is_word_char(c))
                    .map_or(self.src.len(), |n| self.pos + n);
                format!("`{}`", String::from_utf8_lossy(&self.src[self.pos..end]))
            }
            Some(_) => {
                let rest = &self.src[self.pos..];
                let ch = std::str::from_utf8(&rest[..rest.len().min(4)])
                    .ok()
                    .and_then(|s| s.chars().next())
                    .or_else(|| {
                        String::from_utf8_lossy(&rest[..rest.len().min(8)])
                            .chars()
                            .next()
                    })
                    .unwrap_or('?');
                format!("`{ch}`")
            }
        }
    }

    // ---- low-level reading ----------------------------------------------------------

    fn peek(&self) -> Option<u8> {
        self.src.get(self.pos).copied()
    }

    fn peek_at(&self, n: usize) -> Option<u8> {
        self.src.get(self.pos + n).copied()
    }

    fn starts_with(&self, s: &str) -> bool {
        self.src[self.pos.min(self.src.len())..].starts_with(s.as_bytes())
    }

    fn eat(&mut self, b: u8) -> bool {
        if self.peek() == Some(b) {
            self.pos += 1;
            true
        } else {
            false
        }
    }

    fn eat_str(&mut self, s: &str) -> bool {
        if self.starts_with(s) {
            self.pos += s.len();
            true
        } else {
            false
        }
    }

    fn expect(&mut self, b: u8, context: &str) -> PResult<()> {
        if self.eat(b) {
            Ok(())
        } else {
            self.err(format!(
                "expected `{}` {context}, found {}",
                b as char,
                self.found()
            ))
        }
    }

    /// Skips blanks, newlines, `// ...` and `/* ... */` comments.
    fn skip_ws(&mut self) -> PResult<()> {
        loop {
            match self.peek() {
                Some(b' ' | b'\t' | b'\r' | b'\n' | 0x0b | 0x0c) => self.pos += 1,
                Some(b'/') if self.peek_at(1) == Some(b'/') => {
                    while let Some(b) = self.peek() {
                        if b == b'\n' {
                            break;
                        }
                        self.pos += 1;
                    }
                }
                Some(b'/') if self.peek_at(1) == Some(b'*') => {
                    let start = self.pos;
                    self.pos += 2;
                    loop {
                        if self.pos >= self.src.len() {
                            return self.err_at(start, "unterminated `/*` comment");
                        }
                        if self.eat_str("*/") {
                            break;
                        }
                        self.pos += 1;
                    }
                }
                _ => return Ok(()),
            }
        }
    }

    /// Skips spaces and tabs only (not newlines or comments).
    fn skip_blanks(&mut self) {
        while matches!(self.peek(), Some(b' ' | b'\t')) {
            self.pos += 1;
        }
    }

    fn peek_word(&self) -> Option<&'a str> {
        let b = self.peek()?;
        if !is_word_start(b) {
            return None;
        }
        let end = self.src[self.pos..]
            .iter()
            .position(|&c| !is_word_char(c))
            .map_or(self.src.len(), |n| self.pos + n);
        std::str::from_utf8(&self.src[self.pos..end]).ok()
    }

    fn word(&mut self) -> Option<&'a str> {
        let w = self.peek_word()?;
        self.pos += w.len();
        Some(w)
    }

    fn expect_word(&mut self, what: &str) -> PResult<&'a str> {
        match self.word() {
            Some(w) => Ok(w),
            None => self.err(format!("expected {what}, found {}", self.found())),
        }
    }

    fn expect_keyword(&mut self, kw: &str, context: &str) -> PResult<()> {
        if self.peek_word() == Some(kw) {
            self.pos += kw.len();
            Ok(())
        } else {
            self.err(format!("expected `{kw}` {context}, found {}", self.found()))
        }
    }

    /// Reads an unsigned integer: decimal or `0x` hex.
    fn unsigned(&mut self, what: &str) -> PResult<u64> {
        let start = self.pos;
        let (radix, digits_start) = if self.starts_with("0x") || self.starts_with("0X") {
            (16, self.pos + 2)
        } else {
            (10, self.pos)
        };
        let mut end = digits_start;
        while end < self.src.len() && (self.src[end] as char).is_digit(radix) {
            end += 1;
        }
        if end == digits_start {
            return self.err(format!("expected {what}, found {}", self.found()));
        }
        if end < self.src.len() && is_word_char(self.src[end]) {
            return self.err_at(start, format!("malformed number for {what}"));
        }
        let digits = std::str::from_utf8(&self.src[digits_start..end]).unwrap_or("");
        match u64::from_str_radix(digits, radix) {
            Ok(v) => {
                self.pos = end;
                Ok(v)
            }
            Err(_) => self.err_at(start, format!("number too large for {what}")),
        }
    }

    fn bounded(&mut self, what: &str, max: u64) -> PResult<u64> {
        let start = self.pos;
        let v = self.unsigned(what)?;
        if v > max {
            return self.err_at(start, format!("{what} {v} is out of range (max {max})"));
        }
        Ok(v)
    }

    fn u32(&mut self, what: &str) -> PResult<u32> {
        Ok(self.bounded(what, u32::MAX as u64)? as u32)
    }

    /// Reads seconds written as `N`, `N.F` or `.F` and returns nanoseconds.
    fn seconds(&mut self, what: &str) -> PResult<Nanos> {
        let start = self.pos;
        let mut int_end = self.pos;
        while int_end < self.src.len() && self.src[int_end].is_ascii_digit() {
            int_end += 1;
        }
        let mut frac = "";
        let mut end = int_end;
        if self.src.get(int_end) == Some(&b'.')
            && self
                .src
                .get(int_end + 1)
                .is_some_and(|b| b.is_ascii_digit())
        {
            let fstart = int_end + 1;
            end = fstart;
            while end < self.src.len() && self.src[end].is_ascii_digit() {
                end += 1;
            }
            frac = std::str::from_utf8(&self.src[fstart..end]).unwrap_or("");
        }
        if end == start {
            return self.err(format!("expected {what}, found {}", self.found()));
        }
        if end < self.src.len() && is_word_char(self.src[end]) {
            return self.err_at(start, format!("malformed {what}"));
        }
        if frac.len() > 9 {
            return self.err_at(start, format!("{what} has more than 9 decimal places"));
        }
        let int_part = std::str::from_utf8(&self.src[start..int_end]).unwrap_or("");
        let secs: u64 = if int_part.is_empty() {
            0
        } else {
            match int_part.parse() {
                Ok(v) => v,
                Err(_) => return self.err_at(start, format!("{what} is too large")),
            }
        };
        let mut frac_ns: u64 = 0;
        for (i, d) in frac.bytes().enumerate() {
            frac_ns += (d - b'0') as u64 * 10u64.pow(8 - i as u32);
        }
        let ns = secs
            .checked_mul(1_000_000_000)
            .and_then(|v| v.checked_add(frac_ns));
        match ns {
            Some(v) => {
                self.pos = end;
                Ok(v)
            }
            None => self.err_at(start, format!("{what} is too large")),
        }
    }

    // ---- script structure -----------------------------------------------------------

    fn script(&mut self) -> PResult<Script> {
        let mut script = Script {
            file: self.file.to_string(),
            options: Vec::new(),
            init_command: None,
            events: Vec::new(),
            cleanup_command: None,
        };
        loop {
            self.skip_ws()?;
            let Some(b) = self.peek() else { break };
            let start = self.pos;
            if let Some(cleanup) = &script.cleanup_command {
                let (line, col) = (cleanup.line, cleanup.col);
                return self.err(format!(
                    "found {} after the untimed command at line {line} column {col}; a \
                     command without a time must come before the first event or after the last",
                    self.found()
                ));
            }
            if b == b'-' && (self.peek_at(1) == Some(b'-') || self.peek_at(1) == Some(b'D')) {
                if !script.events.is_empty() {
                    return self.err("options must come before the first event");
                }
                let opt = self.option_line()?;
                script.options.push(opt);
                continue;
            }
            if b == b'`' {
                let text = self.backtick()?;
                let (line, col) = self.loc(start);
                let cmd = Command { line, col, text };
                if script.events.is_empty() && script.init_command.is_none() {
                    script.init_command = Some(cmd);
                } else {
                    script.cleanup_command = Some(cmd);
                }
                continue;
            }
            let ev = self.event()?;
            script.events.push(ev);
        }
        Ok(script)
    }

    fn option_line(&mut self) -> PResult<(String, Option<String>)> {
        let start = self.pos;
        if self.eat_str("--") {
            let token = self.raw_token();
            if token.is_empty() {
                return self.err_at(start, "expected an option name after `--`");
            }
            match token.split_once('=') {
                Some((n, v)) => Ok((n.to_string(), Some(v.to_string()))),
                None => Ok((token, None)),
            }
        } else {
            // `-D NAME=value`
            self.pos += 2;
            self.skip_blanks();
            let token = self.raw_token();
            if token.is_empty() || !token.contains('=') {
                return self.err_at(start, "expected `-D NAME=value`");
            }
            Ok(("define".to_string(), Some(token)))
        }
    }

    /// Reads up to the next whitespace.
    fn raw_token(&mut self) -> String {
        let start = self.pos;
        while let Some(b) = self.peek() {
            if b.is_ascii_whitespace() {
                break;
            }
            self.pos += 1;
        }
        String::from_utf8_lossy(&self.src[start..self.pos]).into_owned()
    }

    fn backtick(&mut self) -> PResult<String> {
        let start = self.pos;
        self.pos += 1;
        match self.src[self.pos..].iter().position(|&b| b == b'`') {
            Some(n) => {
                let text = String::from_utf8_lossy(&self.src[self.pos..self.pos + n]).into_owned();
                self.pos += n + 1;
                Ok(text)
            }
            None => self.err_at(start, "unterminated backtick command"),
        }
    }

    fn code_block(&mut self) -> PResult<String> {
        let start = self.pos;
        self.pos += 2;
        match self.src[self.pos..].windows(2).position(|w| w == b"}%") {
            Some(n) => {
                let text = String::from_utf8_lossy(&self.src[self.pos..self.pos + n]).into_owned();
                self.pos += n + 2;
                Ok(text)
            }
            None => self.err_at(start, "unterminated `%{` block (missing `}%`)"),
        }
    }

    fn event(&mut self) -> PResult<Event> {
        let start = self.pos;
        let (line, col) = self.loc(start);
        let time = self.event_time()?;
        self.skip_ws()?;
        let mut end_time = None;
        let ellipsis_pos = self.pos;
        if self.eat_str("...") {
            self.skip_ws()?;
            self.eat(b'+');
            end_time = Some(self.seconds("the end time of a blocking call")?);
            self.skip_ws()?;
        }
        let kind = match self.peek() {
            Some(b'<' | b'>') => EventKind::Packet(self.packet()?),
            Some(b'`') => EventKind::Command(self.backtick()?),
            Some(b'%') if self.peek_at(1) == Some(b'{') => EventKind::Code(self.code_block()?),
            Some(b) if is_word_start(b) => EventKind::Syscall(self.syscall()?),
            _ => {
                return self.err(format!(
                    "expected a packet (`<` or `>`), a system call, a `command` or %{{ code }}%, \
                     found {}",
                    self.found()
                ))
            }
        };
        if end_time.is_some() && !matches!(kind, EventKind::Syscall(_)) {
            return self.err_at(
                ellipsis_pos,
                "a `start...end` time is only allowed for system calls",
            );
        }
        Ok(Event {
            line,
            col,
            time,
            end_time,
            kind,
        })
    }

    fn event_time(&mut self) -> PResult<EventTime> {
        if self.eat(b'*') {
            return Ok(EventTime::Any);
        }
        let lo_relative = self.eat(b'+');
        let lo = self.seconds("an event time")?;
        let save = self.pos;
        self.skip_ws()?;
        if self.eat(b'~') {
            self.skip_ws()?;
            let hi_relative = self.eat(b'+');
            let hi_pos = self.pos;
            let hi = self.seconds("the end of a time range")?;
            if lo_relative == hi_relative && hi < lo {
                return self.err_at(hi_pos, "time range ends before it starts");
            }
            return Ok(EventTime::Range {
                lo,
                lo_relative,
                hi,
                hi_relative,
            });
        }
        self.pos = save;
        Ok(if lo_relative {
            EventTime::Relative(lo)
        } else {
            EventTime::Absolute(lo)
        })
    }

    // ---- packets ----------------------------------------------------------------------

    fn packet(&mut self) -> PResult<PacketSpec> {
        let direction = if self.eat(b'<') {
            Direction::Inbound
        } else {
            self.pos += 1;
            Direction::Outbound
        };
        self.skip_ws()?;
        let ip = match self.peek() {
            Some(b'[') => self.ip_info(b']')?,
            Some(b'(') => self.ip_info(b')')?,
            _ => IpInfo::default(),
        };
        self.skip_ws()?;
        let body = match self.peek_word() {
            Some("udp") => {
                self.word();
                self.skip_ws()?;
                self.expect(b'(', "after `udp`")?;
                self.skip_ws()?;
                let len = self.u32("a UDP payload length")?;
                self.skip_ws()?;
                self.expect(b')', "after the UDP payload length")?;
                PacketBody::Udp { len }
            }
            Some("icmp") => {
                self.word();
                PacketBody::Icmp(self.icmp()?)
            }
            _ => PacketBody::Tcp(self.tcp()?),
        };
        Ok(PacketSpec {
            direction,
            ip,
            body,
        })
    }

    fn ip_info(&mut self, close: u8) -> PResult<IpInfo> {
        self.pos += 1;
        let mut info = IpInfo::default();
        loop {
            self.skip_ws()?;
            if self.eat(close) {
                return Ok(info);
            }
            if self.eat(b',') {
                continue;
            }
            let wpos = self.pos;
            let w = self.expect_word("an IP attribute (ecn codepoint, tos, ttl, flowlabel)")?;
            match w {
                "noecn" => info.ecn = Some(Ecn::NotEct),
                "ect0" => info.ecn = Some(Ecn::Ect0),
                "ect1" => info.ecn = Some(Ecn::Ect1),
                "ce" => info.ecn = Some(Ecn::Ce),
                "ect01" => info.ecn = Some(Ecn::Ect01),
                "tos" | "class" => {
                    self.skip_ws()?;
                    info.tos = Some(self.bounded("a TOS byte", 0xff)? as u8);
                }
                "ttl" | "hlim" => {
                    self.skip_ws()?;
                    info.ttl = Some(self.bounded("a TTL", 0xff)? as u8);
                }
                "flowlabel" | "flow_label" => {
                    self.skip_ws()?;
                    info.flowlabel = Some(self.bounded("a flow label", 0xfffff)? as u32);
                }
                other => {
                    return self.err_at(wpos, format!("unknown IP attribute `{other}`"));
                }
            }
        }
    }

    /// `start:end(len)`
    fn seq_range(&mut self) -> PResult<(u32, u32, u32)> {
        let start = self.u32("a start sequence number")?;
        self.expect(b':', "between sequence numbers")?;
        let end = self.u32("an end sequence number")?;
        self.expect(b'(', "before the payload length")?;
        let len = self.u32("a payload length")?;
        self.expect(b')', "after the payload length")?;
        Ok((start, end, len))
    }

    fn tcp(&mut self) -> PResult<TcpSpec> {
        let flags_pos = self.pos;
        let mut flags = TcpFlags::empty();
        let mut none = false;
        let mut count = 0;
        while let Some(b) = self.peek() {
            let bit = match b {
                b'S' => TcpFlags::SYN,
                b'F' => TcpFlags::FIN,
                b'R' => TcpFlags::RST,
                b'P' => TcpFlags::PSH,
                b'.' => TcpFlags::ACK,
                b'U' => TcpFlags::URG,
                b'E' => TcpFlags::ECE,
                b'W' => TcpFlags::CWR,
                b'A' => TcpFlags::AE,
                b'-' => {
                    none = true;
                    TcpFlags::empty()
                }
                _ => break,
            };
            if flags.intersects(bit) {
                return self.err(format!("TCP flag `{}` written twice", b as char));
            }
            flags |= bit;
            count += 1;
            self.pos += 1;
        }
        if count == 0 {
            return self.err(format!(
                "expected TCP flags (S F R P . U E W A or -), `udp` or `icmp`, found {}",
                self.found()
            ));
        }
        if none && count > 1 {
            return self.err_at(
                flags_pos,
                "`-` (no flags) cannot be combined with other flags",
            );
        }
        if self.peek().is_some_and(is_word_char) {
            return self.err(format!("unknown TCP flag {}", self.found()));
        }
        self.skip_ws()?;
        let range_pos = self.pos;
        let (seq_start, seq_end, len) = self.seq_range()?;
        if seq_end.wrapping_sub(seq_start) != len {
            return self.err_at(
                range_pos,
                format!("sequence range {seq_start}:{seq_end} does not match length {len}"),
            );
        }
        let mut spec = TcpSpec {
            flags,
            seq_start,
            seq_end,
            len,
            ack: None,
            win: None,
            urg: None,
            options: TcpOptions::List(Vec::new()),
        };
        loop {
            let save = self.pos;
            self.skip_ws()?;
            let kw_pos = self.pos;
            match self.peek_word() {
                Some(kw @ ("ack" | "win" | "urg")) => {
                    self.word();
                    self.skip_ws()?;
                    let slot = match kw {
                        "ack" => &mut spec.ack,
                        "win" => &mut spec.win,
                        _ => &mut spec.urg,
                    };
                    if slot.is_some() {
                        return self.err_at(kw_pos, format!("`{kw}` written twice"));
                    }
                    let what = match kw {
                        "ack" => "an ACK number",
                        "win" => "a window",
                        _ => "an urgent pointer",
                    };
                    let v = self.u32(what)?;
                    let slot = match kw {
                        "ack" => &mut spec.ack,
                        "win" => &mut spec.win,
                        _ => &mut spec.urg,
                    };
                    *slot = Some(v);
                }
                _ if self.peek() == Some(b'<') => {
                    spec.options = self.tcp_options()?;
                    return Ok(spec);
                }
                _ => {
                    self.pos = save;
                    return Ok(spec);
                }
            }
        }
    }

    fn tcp_options(&mut self) -> PResult<TcpOptions> {
        self.pos += 1; // '<'
        self.skip_ws()?;
        if self.eat_str("...") {
            self.skip_ws()?;
            self.expect(b'>', "after `<...`")?;
            return Ok(TcpOptions::Unchecked);
        }
        let mut opts = Vec::new();
        loop {
            self.skip_ws()?;
            opts.push(self.tcp_option()?);
            self.skip_ws()?;
            if self.eat(b',') {
                continue;
            }
            if self.eat(b'>') {
                return Ok(TcpOptions::List(opts));
            }
            return self.err(format!(
                "expected `,` or `>` in TCP option list, found {}",
                self.found()
            ));
        }
    }

    /// A run of alphanumerics on the same line (cookie, digest), or `None`.
    fn same_line_token(&mut self) -> Option<String> {
        self.skip_blanks();
        let start = self.pos;
        while self.peek().is_some_and(is_word_char) {
            self.pos += 1;
        }
        (self.pos > start).then(|| String::from_utf8_lossy(&self.src[start..self.pos]).into_owned())
    }

    fn tcp_option(&mut self) -> PResult<TcpOption> {
        if self.peek().is_some_and(|b| b.is_ascii_digit()) {
            let kind = self.bounded("a TCP option kind", 0xff)? as u8;
            let mut data = Vec::new();
            self.skip_blanks();
            let dpos = self.pos;
            if let Some(tok) = self.same_line_token() {
                let hex = tok.strip_prefix("0x").unwrap_or(&tok);
                match cookie_bytes(hex) {
                    Some(bytes) => data = bytes,
                    None => return self.err_at(dpos, "option payload must be hex bytes"),
                }
            }
            return Ok(TcpOption::Unknown { kind, data });
        }
        let wpos = self.pos;
        let w = self.expect_word("a TCP option")?;
        let opt = match w {
            "nop" => TcpOption::Nop,
            "eol" => TcpOption::Eol,
            "sackOK" => TcpOption::SackPermitted,
            "mss" => {
                self.skip_ws()?;
                TcpOption::Mss(self.bounded("an MSS", 0xffff)? as u16)
            }
            "wscale" => {
                self.skip_ws()?;
                TcpOption::WindowScale(self.bounded("a window scale", 0xff)? as u8)
            }
            "sack" => {
                let mut blocks = Vec::new();
                loop {
                    self.skip_ws()?;
                    if !self.peek().is_some_and(|b| b.is_ascii_digit()) {
                        break;
                    }
                    let l = self.u32("a SACK block start")?;
                    self.expect(b':', "in a SACK block")?;
                    let r = self.u32("a SACK block end")?;
                    blocks.push((l, r));
                }
                if blocks.is_empty() {
                    return self.err("expected SACK blocks `L:R` after `sack`");
                }
                TcpOption::Sack(blocks)
            }
            "TS" => {
                self.skip_ws()?;
                self.expect_keyword("val", "in a TS option")?;
                self.skip_ws()?;
                let val = self.u32("a TSval")?;
                self.skip_ws()?;
                self.expect_keyword("ecr", "in a TS option")?;
                self.skip_ws()?;
                let ecr = self.u32("a TSecr")?;
                TcpOption::Timestamp { val, ecr }
            }
            "FO" => TcpOption::FastOpen(self.same_line_token()),
            "FOEXP" => TcpOption::FastOpenExp(self.same_line_token()),
            "md5" => match self.same_line_token() {
                Some(t) => TcpOption::Md5(t),
                None => return self.err("expected a hex digest after `md5`"),
            },
            other => return self.err_at(wpos, format!("unknown TCP option `{other}`")),
        };
        Ok(opt)
    }

    fn icmp(&mut self) -> PResult<IcmpSpec> {
        self.skip_ws()?;
        let icmp_type = self.expect_word("an ICMP type")?.to_string();
        let mut spec = IcmpSpec {
            icmp_type,
            code: None,
            mtu: None,
            echoed: None,
        };
        let save = self.pos;
        self.skip_ws()?;
        match self.peek_word() {
            Some("mtu") | None => self.pos = save,
            Some(w) => {
                self.word();
                spec.code = Some(w.to_string());
            }
        }
        let save = self.pos;
        self.skip_ws()?;
        if self.peek_word() == Some("mtu") {
            self.word();
            self.skip_ws()?;
            spec.mtu = Some(self.u32("an MTU")?);
        } else {
            self.pos = save;
        }
        let save = self.pos;
        self.skip_ws()?;
        if self.eat(b'[') {
            self.skip_ws()?;
            spec.echoed = Some(self.seq_range()?);
            self.skip_ws()?;
            self.expect(b']', "after the echoed sequence range")?;
        } else {
            self.pos = save;
        }
        Ok(spec)
    }

    // ---- system calls -----------------------------------------------------------------

    fn syscall(&mut self) -> PResult<SyscallSpec> {
        let name = self.expect_word("a system call name")?.to_string();
        self.skip_ws()?;
        self.expect(b'(', &format!("after system call name `{name}`"))?;
        let args = self.expr_list(b')', "system call arguments")?;
        self.skip_ws()?;
        self.expect(b'=', "before the expected result of the system call")?;
        self.skip_ws()?;
        let result = self.expr()?;
        let save = self.pos;
        self.skip_ws()?;
        let errno = match self.word() {
            Some(w) => Some(w.to_string()),
            None => {
                self.pos = save;
                None
            }
        };
        let save = self.pos;
        self.skip_ws()?;
        let note = if self.peek() == Some(b'(') {
            Some(self.paren_text()?)
        } else {
            self.pos = save;
            None
        };
        Ok(SyscallSpec {
            name,
            args,
            result,
            errno,
            note,
        })
    }

    /// A balanced `( ... )` comment; returns the text inside.
    fn paren_text(&mut self) -> PResult<String> {
        let start = self.pos;
        let mut depth = 0usize;
        while let Some(b) = self.peek() {
            self.pos += 1;
            match b {
                b'(' => depth += 1,
                b')' => {
                    depth -= 1;
                    if depth == 0 {
                        let text = &self.src[start + 1..self.pos - 1];
                        return Ok(String::from_utf8_lossy(text).trim().to_string());
                    }
                }
                _ => {}
            }
        }
        self.err_at(start, "unterminated `(` comment after the result")
    }

    /// Comma-separated expressions up to `close` (the opening bracket is already read).
    fn expr_list(&mut self, close: u8, what: &str) -> PResult<Vec<Expr>> {
        self.enter()?;
        let mut items = Vec::new();
        self.skip_ws()?;
        if self.eat(close) {
            self.depth -= 1;
            return Ok(items);
        }
        loop {
            self.skip_ws()?;
            items.push(self.expr()?);
            self.skip_ws()?;
            if self.eat(b',') {
                continue;
            }
            if self.eat(close) {
                self.depth -= 1;
                return Ok(items);
            }
            return self.err(format!(
                "expected `,` or `{}` in {what}, found {}",
                close as char,
                self.found()
            ));
        }
    }

    fn enter(&mut self) -> PResult<()> {
        self.depth += 1;
        if self.depth > MAX_DEPTH {
            return self.err("expression nested too deeply");
        }
        Ok(())
    }

    fn expr(&mut self) -> PResult<Expr> {
        let first = self.primary()?;
        let mut parts = vec![first];
        loop {
            let save = self.pos;
            self.skip_ws()?;
            if self.eat(b'|') {
                self.skip_ws()?;
                parts.push(self.primary()?);
            } else {
                self.pos = save;
                break;
            }
        }
        Ok(if parts.len() == 1 {
            parts.pop().unwrap_or(Expr::Ellipsis)
        } else {
            Expr::BitOr(parts)
        })
    }

    fn int_literal(&mut self, negative: bool) -> PResult<Expr> {
        let start = self.pos;
        let is_hex = self.starts_with("0x") || self.starts_with("0X");
        let v = self.unsigned("an integer")?;
        let v = if is_hex {
            v as i64
        } else if negative {
            if v > i64::MAX as u64 + 1 {
                return self.err_at(start, "integer too small");
            }
            (v as i128).wrapping_neg() as i64
        } else {
            match i64::try_from(v) {
                Ok(v) => v,
                Err(_) => return self.err_at(start, "integer too large"),
            }
        };
        Ok(Expr::Int(if is_hex && negative {
            v.wrapping_neg()
        } else {
            v
        }))
    }

    fn primary(&mut self) -> PResult<Expr> {
        match self.peek() {
            Some(b'.') if self.starts_with("...") => {
                self.pos += 3;
                Ok(Expr::Ellipsis)
            }
            Some(b'-') if self.peek_at(1).is_some_and(|b| b.is_ascii_digit()) => {
                self.pos += 1;
                self.int_literal(true)
            }
            Some(b) if b.is_ascii_digit() => self.int_literal(false),
            Some(b'"') => self.string_literal(),
            Some(b'[') => {
                self.pos += 1;
                Ok(Expr::List(self.expr_list(b']', "a list")?))
            }
            Some(b'{') => {
                self.pos += 1;
                self.struct_literal()
            }
            Some(b) if is_word_start(b) => {
                let name = self.word().unwrap_or_default().to_string();
                if name == "NULL" {
                    return Ok(Expr::Null);
                }
                let save = self.pos;
                self.skip_ws()?;
                if self.eat(b'(') {
                    let args = self.expr_list(b')', "function arguments")?;
                    return Ok(Expr::Call { name, args });
                }
                self.pos = save;
                Ok(Expr::Symbol(name))
            }
            _ => self.err(format!("expected an expression, found {}", self.found())),
        }
    }

    fn struct_literal(&mut self) -> PResult<Expr> {
        self.enter()?;
        let mut fields = Vec::new();
        self.skip_ws()?;
        if self.eat(b'}') {
            self.depth -= 1;
            return Ok(Expr::Struct(fields));
        }
        loop {
            self.skip_ws()?;
            fields.push(self.struct_field()?);
            self.skip_ws()?;
            if self.eat(b',') {
                continue;
            }
            if self.eat(b'}') {
                self.depth -= 1;
                return Ok(Expr::Struct(fields));
            }
            return self.err(format!(
                "expected `,` or `}}` in a struct, found {}",
                self.found()
            ));
        }
    }

    fn struct_field(&mut self) -> PResult<StructField> {
        let start = self.pos;
        if let Some(name) = self.word() {
            self.skip_ws()?;
            if self.eat(b'=') {
                self.skip_ws()?;
                let value = self.expr()?;
                return Ok(StructField {
                    name: Some(name.to_string()),
                    qualifier: None,
                    value,
                });
            }
            if self.eat(b'(') {
                let mut args = self.expr_list(b')', "a field qualifier")?;
                let save = self.pos;
                self.skip_ws()?;
                if self.eat(b'=') {
                    if args.len() != 1 {
                        return self.err_at(start, "a field qualifier takes one value");
                    }
                    self.skip_ws()?;
                    let value = self.expr()?;
                    return Ok(StructField {
                        name: Some(name.to_string()),
                        qualifier: args.pop(),
                        value,
                    });
                }
                self.pos = save;
            }
        }
        // Positional member: re-read as an expression.
        self.pos = start;
        let value = self.expr()?;
        Ok(StructField {
            name: None,
            qualifier: None,
            value,
        })
    }

    fn string_literal(&mut self) -> PResult<Expr> {
        let start = self.pos;
        self.pos += 1;
        let mut out = Vec::new();
        loop {
            let Some(b) = self.peek() else {
                return self.err_at(start, "unterminated string");
            };
            self.pos += 1;
            match b {
                b'"' => return Ok(Expr::Str(out)),
                b'\n' => return self.err_at(start, "unterminated string"),
                b'\\' => {
                    let esc_pos = self.pos - 1;
                    let Some(e) = self.peek() else {
                        return self.err_at(start, "unterminated string");
                    };
                    self.pos += 1;
                    match e {
                        b'n' => out.push(b'\n'),
                        b't' => out.push(b'\t'),
                        b'r' => out.push(b'\r'),
                        b'0'..=b'7' => {
                            let mut v: u32 = (e - b'0') as u32;
                            for _ in 0..2 {
                                match self.peek() {
                                    Some(d @ b'0'..=b'7') => {
                                        v = v * 8 + (d - b'0') as u32;
                                        self.pos += 1;
                                    }
                                    _ => break,
                                }
                            }
                            out.push((v & 0xff) as u8);
                        }
                        b'x' => {
                            let mut v: u32 = 0;
                            let mut n = 0;
                            while n < 2 {
                                match self.peek().and_then(|d| (d as char).to_digit(16)) {
                                    Some(d) => {
                                        v = v * 16 + d;
                                        self.pos += 1;
                                        n += 1;
                                    }
                                    None => break,
                                }
                            }
                            if n == 0 {
                                return self.err_at(esc_pos, "`\\x` needs hex digits");
                            }
                            out.push(v as u8);
                        }
                        b'\n' => {} // line continuation
                        other => out.push(other),
                    }
                }
                other => out.push(other),
            }
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    fn one(line: &str) -> Event {
        let s = parse_script("t", line).unwrap_or_else(|e| panic!("{e}"));
        assert_eq!(s.events.len(), 1, "{line}");
        s.events.into_iter().next().unwrap()
    }

    fn syscall(line: &str) -> SyscallSpec {
        match one(line).kind {
            EventKind::Syscall(c) => c,
            k => panic!("{k:?}"),
        }
    }

    fn tcp(line: &str) -> (PacketSpec, TcpSpec) {
        match one(line).kind {
            EventKind::Packet(p) => match p.body.clone() {
                PacketBody::Tcp(t) => (p, t),
                b => panic!("{b:?}"),
            },
            k => panic!("{k:?}"),
        }
    }

    #[test]
    fn times_are_exact_nanoseconds() {
        assert_eq!(
            one("1.25 close(3) = 0").time,
            EventTime::Absolute(1_250_000_000)
        );
        assert_eq!(
            one("+.000001 close(3) = 0").time,
            EventTime::Relative(1_000)
        );
        assert_eq!(one("* > . 1:1(0) ack 1").time, EventTime::Any);
        assert_eq!(
            one("0.3 ~ +.5 > . 1:1(0) ack 1").time,
            EventTime::Range {
                lo: 300_000_000,
                lo_relative: false,
                hi: 500_000_000,
                hi_relative: true
            }
        );
        let blocking = one("+0 ... .02 read(4, ..., 10) = 10");
        assert_eq!(blocking.time, EventTime::Relative(0));
        assert_eq!(blocking.end_time, Some(20_000_000));
    }

    #[test]
    fn results_errnos_and_notes() {
        let c = syscall(
            "0 setsockopt(3, SOL_TCP, TCP_FASTOPEN_KEY, \"\\x01a\\n\", 0) = -1 (Invalid Argument)",
        );
        assert_eq!(c.result, Expr::Int(-1));
        assert_eq!(c.errno, None);
        assert_eq!(c.note.as_deref(), Some("Invalid Argument"));
        assert_eq!(c.args[3], Expr::Str(vec![1, b'a', b'\n']));
        let c = syscall("0 connect(3, ..., ...) = -1 EINPROGRESS (Operation (now) in progress)");
        assert_eq!(c.errno.as_deref(), Some("EINPROGRESS"));
        assert_eq!(c.note.as_deref(), Some("Operation (now) in progress"));
        let c = syscall("0 fcntl(3, F_GETFL) = 0x802 (flags O_RDWR|O_NONBLOCK)");
        assert_eq!(c.result, Expr::Int(0x802));
        let c = syscall("0 f() = 0xffffffffffffffff");
        assert_eq!((c.args.len(), c.result), (0, Expr::Int(-1)));
    }

    #[test]
    fn expressions() {
        let c = syscall(
            "0 bind(3, {sa_family=AF_INET, sin_port=htons(8080), sin_addr=inet_addr(\"192.0.2.1\")}, 16) = 0",
        );
        let sa = &c.args[1];
        assert_eq!(
            sa.field("sin_port").unwrap().value,
            Expr::Call {
                name: "htons".into(),
                args: vec![Expr::Int(8080)]
            }
        );
        assert_eq!(
            sa.field("sin_addr").unwrap().value,
            Expr::Call {
                name: "inet_addr".into(),
                args: vec![Expr::Str(b"192.0.2.1".to_vec())]
            }
        );
        let c = syscall("0 poll([{fd=4, events=POLLIN|POLLOUT, revents=0}, {fd=-1}], 2, NULL) = 0");
        let Expr::List(fds) = &c.args[0] else {
            panic!()
        };
        assert_eq!(fds[0].field("events").unwrap().value.int_value(), Some(5));
        assert_eq!(fds[1].field("fd").unwrap().value, Expr::Int(-1));
        assert_eq!(c.args[2], Expr::Null);
        let c = syscall("0 sendmsg(4, {msg_name(...)=..., msg_iov(2)=[{..., 1}, {...,2}], msg_control=[]}, 0) = 3");
        let m = &c.args[1];
        assert_eq!(m.field("msg_name").unwrap().qualifier, Some(Expr::Ellipsis));
        let Expr::List(iov) = &m.field("msg_iov").unwrap().value else {
            panic!()
        };
        let Expr::Struct(f) = &iov[1] else { panic!() };
        assert_eq!((f[0].name.as_ref(), &f[1].value), (None, &Expr::Int(2)));
        assert_eq!(m.field("msg_control").unwrap().value, Expr::List(vec![]));
        assert_eq!(Expr::Symbol("NOPE".into()).int_value(), None);
    }

    #[test]
    fn packets() {
        let (p, t) = tcp("0 < [ce] SEWA 5:15(10) win 100 urg 3 ack 9 <TS val 7 ecr 8,eol>");
        assert_eq!(p.direction, Direction::Inbound);
        assert_eq!(p.ip.ecn, Some(Ecn::Ce));
        assert_eq!(
            t.flags,
            TcpFlags::SYN | TcpFlags::ECE | TcpFlags::CWR | TcpFlags::AE
        );
        assert_eq!((t.ack, t.win, t.urg), (Some(9), Some(100), Some(3)));
        assert_eq!(
            t.options,
            TcpOptions::List(vec![
                TcpOption::Timestamp { val: 7, ecr: 8 },
                TcpOption::Eol
            ])
        );
        let (p, t) = tcp("0 > (tos 0x10, ttl 64, flowlabel 0x12345) - 0:0(0) <...>");
        assert_eq!(
            (p.ip.tos, p.ip.ttl, p.ip.flowlabel),
            (Some(0x10), Some(64), Some(0x12345))
        );
        assert_eq!(
            (t.flags, t.options),
            (TcpFlags::empty(), TcpOptions::Unchecked)
        );
        let (_, t) = tcp("0 > S 0:0(0) <FO 0011aabb,FOEXP,nop,md5 00ff,254 f989,FO TFO_COOKIE>");
        let TcpOptions::List(o) = t.options else {
            panic!()
        };
        assert_eq!(o[0], TcpOption::FastOpen(Some("0011aabb".into())));
        assert_eq!(o[1], TcpOption::FastOpenExp(None));
        assert_eq!(o[3], TcpOption::Md5("00ff".into()));
        assert_eq!(
            o[4],
            TcpOption::Unknown {
                kind: 254,
                data: vec![0xf9, 0x89]
            }
        );
        assert_eq!(o[5], TcpOption::FastOpen(Some("TFO_COOKIE".into())));
        assert_eq!(cookie_bytes("0011aabb"), Some(vec![0, 0x11, 0xaa, 0xbb]));
        assert_eq!(cookie_bytes("TFO_COOKIE"), None);
        assert_eq!(cookie_bytes("abc"), None);
        match one("0 < udp (1472)").kind {
            EventKind::Packet(PacketSpec {
                body: PacketBody::Udp { len },
                ..
            }) => {
                assert_eq!(len, 1472)
            }
            k => panic!("{k:?}"),
        }
        match one("0 < icmp unreachable CODE").kind {
            EventKind::Packet(PacketSpec {
                body: PacketBody::Icmp(i),
                ..
            }) => {
                assert_eq!(i.code.as_deref(), Some("CODE"));
                assert_eq!((i.mtu, i.echoed), (None, None));
            }
            k => panic!("{k:?}"),
        }
    }

    #[test]
    fn events_are_not_line_bound() {
        let s = parse_script(
            "t",
            "0 setsockopt(3, SOL_SOCKET, SO_TIMESTAMPING,\n   [A |\n B], 4) = 0 +0 close(3) = 0\n\
             +0 < . 1:1(0) ack 1 win 5 +0 %{ x = 1 }%",
        )
        .unwrap();
        assert_eq!(s.events.len(), 4);
        assert_eq!((s.events[1].line, s.events[1].col), (3, 13));
        assert_eq!(s.events[3].kind, EventKind::Code(" x = 1 ".into()));
    }
}
