//! A tiny evaluator for the python snippets (`%{ ... }%`) of packetdrill scripts.
//!
//! packetdrill snapshots `TCP_INFO` at each snippet and runs the snippets with python3,
//! with `tcpi_*` fields and constants such as `TCP_CA_Open` as variables. The Linux suite's
//! snippets are small: `assert a == b, msg`, `assert lo <= x <= hi, msg`, assignments
//! (`cwnd = 58`, `cwnd += 1`) that carry over to later snippets, `print(x)`, `#` comments,
//! `;` and `\` continuations. This module covers that subset with Python's semantics for
//! integers (floor division and modulo, chained comparisons, short-circuit `and`/`or`).
//! Anything outside it is a [`PyError::Unsupported`] so the runner can skip the script.

use std::collections::{BTreeMap, BTreeSet};

/// Why a snippet did not run to completion.
#[derive(Debug, Clone, PartialEq, Eq, thiserror::Error)]
pub enum PyError {
    /// The snippet is not valid in the supported subset's grammar.
    #[error("line {line}:{col}: syntax error: {message}")]
    Syntax {
        /// 1-based line within the snippet.
        line: u32,
        /// 1-based column within the snippet.
        col: u32,
        /// What is wrong.
        message: String,
    },
    /// Valid python this evaluator does not implement (the runner should skip).
    #[error("unsupported python: {0}")]
    Unsupported(String),
    /// A name that is neither assigned, provided by the lookup, nor a known constant.
    #[error("name `{0}` is not defined")]
    Name(String),
    /// An operation on values of the wrong type, or division by zero.
    #[error("{0}")]
    Type(String),
    /// An `assert` whose condition was false.
    #[error("assertion failed at line {line}: {condition}{}", message.as_ref().map(|m| format!(" ({m})")).unwrap_or_default())]
    AssertionFailed {
        /// 1-based line within the snippet.
        line: u32,
        /// The condition's source text.
        condition: String,
        /// The assertion message's value, if one was given.
        message: Option<String>,
    },
}

/// A python value of the supported subset.
#[derive(Debug, Clone, PartialEq, Eq)]
pub enum Value {
    /// An integer (i64; overflow is reported as unsupported).
    Int(i64),
    /// `True` / `False` (also the result of comparisons).
    Bool(bool),
    /// A string.
    Str(String),
    /// A tuple (only as the right operand of string `%` formatting, or printed).
    Tuple(Vec<Value>),
    /// `None` (the result of `print`).
    None,
}

impl Value {
    fn truthy(&self) -> bool {
        match self {
            Value::Int(v) => *v != 0,
            Value::Bool(b) => *b,
            Value::Str(s) => !s.is_empty(),
            Value::Tuple(t) => !t.is_empty(),
            Value::None => false,
        }
    }

    fn as_int(&self) -> Option<i64> {
        match self {
            Value::Int(v) => Some(*v),
            Value::Bool(b) => Some(*b as i64),
            _ => None,
        }
    }

    fn type_name(&self) -> &'static str {
        match self {
            Value::Int(_) => "int",
            Value::Bool(_) => "bool",
            Value::Str(_) => "str",
            Value::Tuple(_) => "tuple",
            Value::None => "NoneType",
        }
    }
}

impl std::fmt::Display for Value {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        match self {
            Value::Int(v) => write!(f, "{v}"),
            Value::Bool(true) => write!(f, "True"),
            Value::Bool(false) => write!(f, "False"),
            Value::Str(s) => write!(f, "{s}"),
            Value::None => write!(f, "None"),
            Value::Tuple(t) => {
                write!(f, "(")?;
                for (i, v) in t.iter().enumerate() {
                    if i > 0 {
                        write!(f, ", ")?;
                    }
                    match v {
                        Value::Str(s) => write!(f, "'{s}'")?,
                        other => write!(f, "{other}")?,
                    }
                }
                if t.len() == 1 {
                    write!(f, ",")?;
                }
                write!(f, ")")
            }
        }
    }
}

// ---- lexer ------------------------------------------------------------------------------

#[derive(Debug, Clone, PartialEq, Eq)]
enum Tok {
    Int(i64),
    Str(String),
    Name(String),
    Op(&'static str),
    Newline,
    Eof,
}

#[derive(Debug, Clone)]
struct Token {
    tok: Tok,
    start: usize,
    end: usize,
}

const OPS: &[&str] = &[
    "**=", "//=", ">>=", "<<=", "**", "//", "<<", ">>", "<=", ">=", "==", "!=", "+=", "-=", "*=",
    "%=", "&=", "|=", "^=", "+", "-", "*", "/", "%", "<", ">", "(", ")", ",", "=", "&", "|", "^",
    "~", ":", "[", "]", "{", "}", ".",
];

fn line_col(src: &str, pos: usize) -> (u32, u32) {
    let before = &src[..pos.min(src.len())];
    let line = before.matches('\n').count() as u32 + 1;
    let col = before.rsplit('\n').next().map_or(0, |l| l.chars().count()) as u32 + 1;
    (line, col)
}

fn syntax<T>(src: &str, pos: usize, message: impl Into<String>) -> Result<T, PyError> {
    let (line, col) = line_col(src, pos);
    Err(PyError::Syntax {
        line,
        col,
        message: message.into(),
    })
}

fn lex(src: &str) -> Result<Vec<Token>, PyError> {
    let b = src.as_bytes();
    let mut toks = Vec::new();
    let mut i = 0;
    let mut paren = 0i32;
    while i < b.len() {
        let c = b[i];
        match c {
            b' ' | b'\t' | b'\r' | 0x0c => i += 1,
            b'\\' if b.get(i + 1) == Some(&b'\n') => i += 2,
            b'\\' if b.get(i + 1) == Some(&b'\r') && b.get(i + 2) == Some(&b'\n') => i += 3,
            b'#' => {
                while i < b.len() && b[i] != b'\n' {
                    i += 1;
                }
            }
            b'\n' | b';' => {
                if paren == 0 || c == b';' {
                    toks.push(Token {
                        tok: Tok::Newline,
                        start: i,
                        end: i + 1,
                    });
                }
                i += 1;
            }
            b'0'..=b'9' => {
                let start = i;
                while i < b.len() && (b[i].is_ascii_alphanumeric() || b[i] == b'_') {
                    i += 1;
                }
                let text: String = src[start..i].chars().filter(|&c| c != '_').collect();
                let lower = text.to_ascii_lowercase();
                let parsed = if let Some(h) = lower.strip_prefix("0x") {
                    u64::from_str_radix(h, 16).ok()
                } else if let Some(o) = lower.strip_prefix("0o") {
                    u64::from_str_radix(o, 8).ok()
                } else if let Some(bin) = lower.strip_prefix("0b") {
                    u64::from_str_radix(bin, 2).ok()
                } else if text.len() > 1 && text.starts_with('0') {
                    // python3 rejects 0777-style literals (except all-zero)
                    text.bytes().all(|d| d == b'0').then_some(0)
                } else {
                    text.parse::<u64>().ok()
                };
                if i < b.len() && b[i] == b'.' {
                    return Err(PyError::Unsupported("floating-point numbers".into()));
                }
                match parsed.and_then(|v| i64::try_from(v).ok()) {
                    Some(v) => toks.push(Token {
                        tok: Tok::Int(v),
                        start,
                        end: i,
                    }),
                    None => return syntax(src, start, format!("bad integer `{}`", &src[start..i])),
                }
            }
            b'\'' | b'"' => {
                let start = i;
                let q = c;
                if b.get(i + 1) == Some(&q) && b.get(i + 2) == Some(&q) {
                    return Err(PyError::Unsupported("triple-quoted strings".into()));
                }
                i += 1;
                let mut s = String::new();
                loop {
                    let Some(&ch) = b.get(i) else {
                        return syntax(src, start, "unterminated string");
                    };
                    if ch == b'\n' {
                        return syntax(src, start, "unterminated string");
                    }
                    if ch == q {
                        i += 1;
                        break;
                    }
                    if ch == b'\\' {
                        match b.get(i + 1) {
                            Some(b'n') => s.push('\n'),
                            Some(b't') => s.push('\t'),
                            Some(b'\\') => s.push('\\'),
                            Some(b'\'') => s.push('\''),
                            Some(b'"') => s.push('"'),
                            Some(b'\n') => {}
                            _ => return Err(PyError::Unsupported("string escape".into())),
                        }
                        i += 2;
                        continue;
                    }
                    // Copy one UTF-8 character.
                    let ch_len = src[i..].chars().next().map_or(1, char::len_utf8);
                    s.push_str(&src[i..i + ch_len]);
                    i += ch_len;
                }
                toks.push(Token {
                    tok: Tok::Str(s),
                    start,
                    end: i,
                });
            }
            c if c.is_ascii_alphabetic() || c == b'_' => {
                let start = i;
                while i < b.len() && (b[i].is_ascii_alphanumeric() || b[i] == b'_') {
                    i += 1;
                }
                if i < b.len() && (b[i] == b'\'' || b[i] == b'"') {
                    return Err(PyError::Unsupported(format!(
                        "string prefix `{}`",
                        &src[start..i]
                    )));
                }
                toks.push(Token {
                    tok: Tok::Name(src[start..i].to_string()),
                    start,
                    end: i,
                });
            }
            _ => {
                let Some(op) = OPS.iter().find(|op| src[i..].starts_with(**op)) else {
                    let ch = src[i..].chars().next().unwrap_or('?');
                    return syntax(src, i, format!("unexpected character `{ch}`"));
                };
                match *op {
                    "(" | "[" | "{" => paren += 1,
                    ")" | "]" | "}" => paren -= 1,
                    _ => {}
                }
                toks.push(Token {
                    tok: Tok::Op(op),
                    start: i,
                    end: i + op.len(),
                });
                i += op.len();
            }
        }
    }
    toks.push(Token {
        tok: Tok::Newline,
        start: b.len(),
        end: b.len(),
    });
    toks.push(Token {
        tok: Tok::Eof,
        start: b.len(),
        end: b.len(),
    });
    Ok(toks)
}

// ---- syntax tree --------------------------------------------------------------------------

/// A parsed snippet: its statements, ready to run any number of times.
#[derive(Debug, Clone)]
pub struct Program {
    stmts: Vec<Stmt>,
}

#[derive(Debug, Clone)]
enum Stmt {
    Assert {
        line: u32,
        cond: PyExpr,
        cond_src: String,
        msg: Option<PyExpr>,
    },
    Assign {
        name: String,
        op: Option<&'static str>,
        value: PyExpr,
    },
    Expr(PyExpr),
    Pass,
}

#[derive(Debug, Clone)]
enum PyExpr {
    Const(Value),
    Name(String),
    Unary(&'static str, Box<PyExpr>),
    Binary(&'static str, Box<PyExpr>, Box<PyExpr>),
    Compare(Box<PyExpr>, Vec<(&'static str, PyExpr)>),
    And(Vec<PyExpr>),
    Or(Vec<PyExpr>),
    Not(Box<PyExpr>),
    Call(String, Vec<PyExpr>),
    Tuple(Vec<PyExpr>),
}

const MAX_DEPTH: u32 = 100;

struct P<'a> {
    src: &'a str,
    toks: Vec<Token>,
    i: usize,
    depth: u32,
}

const UNSUPPORTED_KEYWORDS: &[&str] = &[
    "if", "elif", "else", "for", "while", "def", "class", "import", "from", "return", "with",
    "try", "except", "finally", "raise", "lambda", "global", "nonlocal", "del", "yield", "in",
    "is", "async", "await", "break", "continue",
];

impl<'a> P<'a> {
    fn peek(&self) -> &Tok {
        &self.toks[self.i.min(self.toks.len() - 1)].tok
    }

    fn pos(&self) -> usize {
        self.toks[self.i.min(self.toks.len() - 1)].start
    }

    fn bump(&mut self) -> Tok {
        let t = self.peek().clone();
        if self.i < self.toks.len() - 1 {
            self.i += 1;
        }
        t
    }

    fn is_op(&self, op: &str) -> bool {
        matches!(self.peek(), Tok::Op(o) if *o == op)
    }

    fn is_name(&self, n: &str) -> bool {
        matches!(self.peek(), Tok::Name(s) if s == n)
    }

    fn eat_op(&mut self, op: &str) -> bool {
        if self.is_op(op) {
            self.bump();
            true
        } else {
            false
        }
    }

    fn fail<T>(&self, message: impl Into<String>) -> Result<T, PyError> {
        syntax(self.src, self.pos(), message)
    }

    fn describe(&self) -> String {
        match self.peek() {
            Tok::Int(v) => format!("`{v}`"),
            Tok::Str(_) => "a string".into(),
            Tok::Name(n) => format!("`{n}`"),
            Tok::Op(o) => format!("`{o}`"),
            Tok::Newline => "end of statement".into(),
            Tok::Eof => "end of snippet".into(),
        }
    }

    fn program(&mut self) -> Result<Vec<Stmt>, PyError> {
        let mut stmts = Vec::new();
        loop {
            while *self.peek() == Tok::Newline {
                self.bump();
            }
            if *self.peek() == Tok::Eof {
                return Ok(stmts);
            }
            stmts.push(self.statement()?);
            match self.peek() {
                Tok::Newline | Tok::Eof => {}
                _ => {
                    return self.fail(format!(
                        "expected end of statement, found {}",
                        self.describe()
                    ))
                }
            }
        }
    }

    fn statement(&mut self) -> Result<Stmt, PyError> {
        if let Tok::Name(n) = self.peek().clone() {
            if UNSUPPORTED_KEYWORDS.contains(&n.as_str()) {
                return Err(PyError::Unsupported(format!("`{n}` statements")));
            }
            if n == "pass" {
                self.bump();
                return Ok(Stmt::Pass);
            }
            if n == "assert" {
                let (line, _) = line_col(self.src, self.pos());
                self.bump();
                let start = self.pos();
                let cond = self.test()?;
                let end = self.toks[self.i.saturating_sub(1)].end;
                let cond_src = self.src[start..end.max(start)].trim().to_string();
                let msg = if self.eat_op(",") {
                    Some(self.test()?)
                } else {
                    None
                };
                return Ok(Stmt::Assert {
                    line,
                    cond,
                    cond_src,
                    msg,
                });
            }
            // Assignment: NAME = expr / NAME op= expr
            if let Some(Tok::Op(op)) = self.toks.get(self.i + 1).map(|t| &t.tok) {
                let aug = match *op {
                    "=" => Some(None),
                    "+=" => Some(Some("+")),
                    "-=" => Some(Some("-")),
                    "*=" => Some(Some("*")),
                    "//=" => Some(Some("//")),
                    "%=" => Some(Some("%")),
                    "&=" => Some(Some("&")),
                    "|=" => Some(Some("|")),
                    "^=" => Some(Some("^")),
                    "<<=" => Some(Some("<<")),
                    ">>=" => Some(Some(">>")),
                    "**=" => Some(Some("**")),
                    _ => None,
                };
                if let Some(op) = aug {
                    self.bump();
                    self.bump();
                    let value = self.test()?;
                    if self.is_op("=") {
                        return Err(PyError::Unsupported("chained assignment".into()));
                    }
                    return Ok(Stmt::Assign { name: n, op, value });
                }
            }
        }
        let e = self.test()?;
        if self.is_op("=") || self.is_op(",") {
            return Err(PyError::Unsupported(
                "assignment to a non-name target".into(),
            ));
        }
        Ok(Stmt::Expr(e))
    }

    fn enter(&mut self) -> Result<(), PyError> {
        self.depth += 1;
        if self.depth > MAX_DEPTH {
            return self.fail("expression nested too deeply");
        }
        Ok(())
    }

    fn test(&mut self) -> Result<PyExpr, PyError> {
        self.enter()?;
        let r = self.or_test();
        self.depth -= 1;
        let e = r?;
        if self.is_name("if") {
            return Err(PyError::Unsupported("conditional expressions".into()));
        }
        Ok(e)
    }

    fn or_test(&mut self) -> Result<PyExpr, PyError> {
        let mut parts = vec![self.and_test()?];
        while self.is_name("or") {
            self.bump();
            parts.push(self.and_test()?);
        }
        Ok(if parts.len() == 1 {
            parts.remove(0)
        } else {
            PyExpr::Or(parts)
        })
    }

    fn and_test(&mut self) -> Result<PyExpr, PyError> {
        let mut parts = vec![self.not_test()?];
        while self.is_name("and") {
            self.bump();
            parts.push(self.not_test()?);
        }
        Ok(if parts.len() == 1 {
            parts.remove(0)
        } else {
            PyExpr::And(parts)
        })
    }

    fn not_test(&mut self) -> Result<PyExpr, PyError> {
        if self.is_name("not") {
            self.bump();
            self.enter()?;
            let inner = self.not_test();
            self.depth -= 1;
            return Ok(PyExpr::Not(Box::new(inner?)));
        }
        self.comparison()
    }

    fn comparison(&mut self) -> Result<PyExpr, PyError> {
        let first = self.binary(0)?;
        let mut rest = Vec::new();
        loop {
            let op = match self.peek() {
                Tok::Op(o @ ("<" | ">" | "<=" | ">=" | "==" | "!=")) => *o,
                Tok::Name(n) if n == "in" || n == "is" => {
                    return Err(PyError::Unsupported(format!("`{n}` comparisons")))
                }
                _ => break,
            };
            self.bump();
            rest.push((op, self.binary(0)?));
        }
        Ok(if rest.is_empty() {
            first
        } else {
            PyExpr::Compare(Box::new(first), rest)
        })
    }

    /// Binary operators by python precedence level: | ^ & (<< >>) (+ -) (* / // %).
    fn binary(&mut self, level: usize) -> Result<PyExpr, PyError> {
        const LEVELS: &[&[&str]] = &[
            &["|"],
            &["^"],
            &["&"],
            &["<<", ">>"],
            &["+", "-"],
            &["*", "/", "//", "%"],
        ];
        if level == LEVELS.len() {
            return self.factor();
        }
        let mut lhs = self.binary(level + 1)?;
        loop {
            let op = match self.peek() {
                Tok::Op(o) if LEVELS[level].contains(o) => *o,
                _ => return Ok(lhs),
            };
            self.bump();
            let rhs = self.binary(level + 1)?;
            lhs = PyExpr::Binary(op, Box::new(lhs), Box::new(rhs));
        }
    }

    fn factor(&mut self) -> Result<PyExpr, PyError> {
        if let Tok::Op(o @ ("-" | "+" | "~")) = self.peek() {
            let o = *o;
            self.bump();
            self.enter()?;
            let inner = self.factor();
            self.depth -= 1;
            return Ok(PyExpr::Unary(o, Box::new(inner?)));
        }
        let base = self.atom()?;
        if self.eat_op("**") {
            self.enter()?;
            let exp = self.factor();
            self.depth -= 1;
            return Ok(PyExpr::Binary("**", Box::new(base), Box::new(exp?)));
        }
        Ok(base)
    }

    fn atom(&mut self) -> Result<PyExpr, PyError> {
        let e = match self.bump() {
            Tok::Int(v) => PyExpr::Const(Value::Int(v)),
            Tok::Str(mut s) => {
                // Adjacent string literals concatenate.
                while let Tok::Str(more) = self.peek().clone() {
                    self.bump();
                    s.push_str(&more);
                }
                PyExpr::Const(Value::Str(s))
            }
            Tok::Name(n) => match n.as_str() {
                "True" => PyExpr::Const(Value::Bool(true)),
                "False" => PyExpr::Const(Value::Bool(false)),
                "None" => PyExpr::Const(Value::None),
                kw if UNSUPPORTED_KEYWORDS.contains(&kw) => {
                    return Err(PyError::Unsupported(format!("`{kw}` expressions")))
                }
                "and" | "or" | "not" | "assert" | "pass" => {
                    self.i -= 1;
                    return self.fail(format!("expected an expression, found `{n}`"));
                }
                _ => {
                    if self.eat_op("(") {
                        let mut args = Vec::new();
                        if !self.eat_op(")") {
                            loop {
                                if matches!(
                                    self.toks.get(self.i + 1).map(|t| &t.tok),
                                    Some(Tok::Op("="))
                                ) {
                                    return Err(PyError::Unsupported("keyword arguments".into()));
                                }
                                args.push(self.test()?);
                                if self.eat_op(")") {
                                    break;
                                }
                                if !self.eat_op(",") {
                                    return self.fail(format!(
                                        "expected `,` or `)`, found {}",
                                        self.describe()
                                    ));
                                }
                                if self.eat_op(")") {
                                    break;
                                }
                            }
                        }
                        PyExpr::Call(n, args)
                    } else {
                        PyExpr::Name(n)
                    }
                }
            },
            Tok::Op("(") => {
                if self.eat_op(")") {
                    PyExpr::Tuple(Vec::new())
                } else {
                    let first = self.test()?;
                    if self.eat_op(")") {
                        first
                    } else if self.is_op(",") {
                        let mut items = vec![first];
                        while self.eat_op(",") {
                            if self.is_op(")") {
                                break;
                            }
                            items.push(self.test()?);
                        }
                        if !self.eat_op(")") {
                            return self.fail(format!("expected `)`, found {}", self.describe()));
                        }
                        PyExpr::Tuple(items)
                    } else {
                        return self.fail(format!("expected `)`, found {}", self.describe()));
                    }
                }
            }
            Tok::Op(o @ ("[" | "{")) => {
                return Err(PyError::Unsupported(format!("`{o}` literals")));
            }
            _ => {
                self.i = self.i.saturating_sub(1);
                return self.fail(format!("expected an expression, found {}", self.describe()));
            }
        };
        if self.is_op(".") || self.is_op("[") {
            return Err(PyError::Unsupported(
                "attribute access and subscripts".into(),
            ));
        }
        Ok(e)
    }
}

/// Parses a snippet. Errors: [`PyError::Syntax`] or [`PyError::Unsupported`].
pub fn parse(code: &str) -> Result<Program, PyError> {
    let toks = lex(code)?;
    let mut p = P {
        src: code,
        toks,
        i: 0,
        depth: 0,
    };
    let stmts = p.program()?;
    Ok(Program { stmts })
}

impl Program {
    /// The names the snippet reads that it does not assign first (e.g. `tcpi_snd_cwnd`),
    /// sorted: what the runner must provide through the lookup (or what the symbol table
    /// provides). Function names are not included.
    pub fn free_names(&self) -> Vec<String> {
        fn walk(e: &PyExpr, bound: &BTreeSet<String>, out: &mut BTreeSet<String>) {
            match e {
                PyExpr::Const(_) => {}
                PyExpr::Name(n) => {
                    if !bound.contains(n) {
                        out.insert(n.clone());
                    }
                }
                PyExpr::Unary(_, x) | PyExpr::Not(x) => walk(x, bound, out),
                PyExpr::Binary(_, a, b) => {
                    walk(a, bound, out);
                    walk(b, bound, out);
                }
                PyExpr::Compare(a, rest) => {
                    walk(a, bound, out);
                    rest.iter().for_each(|(_, x)| walk(x, bound, out));
                }
                PyExpr::And(v) | PyExpr::Or(v) | PyExpr::Tuple(v) | PyExpr::Call(_, v) => {
                    v.iter().for_each(|x| walk(x, bound, out))
                }
            }
        }
        let mut bound = BTreeSet::new();
        let mut out = BTreeSet::new();
        for s in &self.stmts {
            match s {
                Stmt::Assert { cond, msg, .. } => {
                    walk(cond, &bound, &mut out);
                    if let Some(m) = msg {
                        walk(m, &bound, &mut out);
                    }
                }
                Stmt::Assign { name, op, value } => {
                    walk(value, &bound, &mut out);
                    if op.is_some() && !bound.contains(name) {
                        out.insert(name.clone());
                    }
                    bound.insert(name.clone());
                }
                Stmt::Expr(e) => walk(e, &bound, &mut out),
                Stmt::Pass => {}
            }
        }
        out.into_iter().collect()
    }
}

// ---- evaluation ---------------------------------------------------------------------------

/// The interpreter state shared by all snippets of one script (packetdrill runs them in
/// one python process, so a variable assigned in one snippet is visible in later ones).
#[derive(Debug, Clone, Default)]
pub struct PyEnv {
    vars: BTreeMap<String, Value>,
    /// What `print(...)` calls wrote, one entry per call.
    pub output: Vec<String>,
}

/// Variable lookup supplied by the runner (e.g. `tcpi_snd_cwnd` from a TCP_INFO snapshot).
pub type Lookup<'a> = &'a dyn Fn(&str) -> Option<i64>;

fn overflow() -> PyError {
    PyError::Unsupported("integer overflow beyond 64 bits".into())
}

impl PyEnv {
    /// A fresh interpreter with no variables.
    pub fn new() -> Self {
        Self::default()
    }

    /// A variable assigned by an earlier snippet.
    pub fn var(&self, name: &str) -> Option<&Value> {
        self.vars.get(name)
    }

    /// Parses and runs `code`. Names resolve to variables assigned by earlier statements,
    /// then `lookup`, then the Linux constants of [`crate::symbols`] (`TCP_CA_Open` ...).
    pub fn exec(&mut self, code: &str, lookup: Lookup<'_>) -> Result<(), PyError> {
        let program = parse(code)?;
        self.run(&program, lookup)
    }

    /// Runs an already parsed snippet.
    pub fn run(&mut self, program: &Program, lookup: Lookup<'_>) -> Result<(), PyError> {
        for stmt in &program.stmts {
            match stmt {
                Stmt::Pass => {}
                Stmt::Expr(e) => {
                    self.eval(e, lookup)?;
                }
                Stmt::Assign { name, op, value } => {
                    let v = self.eval(value, lookup)?;
                    let v = match op {
                        None => v,
                        Some(op) => {
                            let cur = self.name(name, lookup)?;
                            binop(op, cur, v)?
                        }
                    };
                    self.vars.insert(name.clone(), v);
                }
                Stmt::Assert {
                    line,
                    cond,
                    cond_src,
                    msg,
                } => {
                    if !self.eval(cond, lookup)?.truthy() {
                        let message = msg.as_ref().map(|m| match self.eval(m, lookup) {
                            Ok(v) => v.to_string(),
                            Err(e) => format!("<message not evaluated: {e}>"),
                        });
                        return Err(PyError::AssertionFailed {
                            line: *line,
                            condition: cond_src.clone(),
                            message,
                        });
                    }
                }
            }
        }
        Ok(())
    }

    fn name(&self, n: &str, lookup: Lookup<'_>) -> Result<Value, PyError> {
        if let Some(v) = self.vars.get(n) {
            return Ok(v.clone());
        }
        if let Some(v) = lookup(n) {
            return Ok(Value::Int(v));
        }
        match crate::symbols::lookup(n) {
            Some(v) => Ok(Value::Int(v)),
            None => Err(PyError::Name(n.to_string())),
        }
    }

    fn eval(&mut self, e: &PyExpr, lookup: Lookup<'_>) -> Result<Value, PyError> {
        Ok(match e {
            PyExpr::Const(v) => v.clone(),
            PyExpr::Name(n) => self.name(n, lookup)?,
            PyExpr::Tuple(items) => Value::Tuple(
                items
                    .iter()
                    .map(|i| self.eval(i, lookup))
                    .collect::<Result<_, _>>()?,
            ),
            PyExpr::Not(inner) => Value::Bool(!self.eval(inner, lookup)?.truthy()),
            PyExpr::And(parts) => {
                let mut last = Value::Bool(true);
                for p in parts {
                    last = self.eval(p, lookup)?;
                    if !last.truthy() {
                        break;
                    }
                }
                last
            }
            PyExpr::Or(parts) => {
                let mut last = Value::Bool(false);
                for p in parts {
                    last = self.eval(p, lookup)?;
                    if last.truthy() {
                        break;
                    }
                }
                last
            }
            PyExpr::Compare(first, rest) => {
                let mut lhs = self.eval(first, lookup)?;
                for (op, rhs_e) in rest {
                    let rhs = self.eval(rhs_e, lookup)?;
                    if !compare(op, &lhs, &rhs)? {
                        return Ok(Value::Bool(false));
                    }
                    lhs = rhs;
                }
                Value::Bool(true)
            }
            PyExpr::Unary(op, inner) => {
                let v = self.eval(inner, lookup)?;
                let Some(i) = v.as_int() else {
                    return Err(PyError::Type(format!(
                        "bad operand type for unary {op}: '{}'",
                        v.type_name()
                    )));
                };
                Value::Int(match *op {
                    "-" => i.checked_neg().ok_or_else(overflow)?,
                    "~" => !i,
                    _ => i,
                })
            }
            PyExpr::Binary(op, l, r) => {
                let l = self.eval(l, lookup)?;
                let r = self.eval(r, lookup)?;
                binop(op, l, r)?
            }
            PyExpr::Call(name, args) => {
                let vals: Vec<Value> = args
                    .iter()
                    .map(|a| self.eval(a, lookup))
                    .collect::<Result<_, _>>()?;
                self.call(name, vals)?
            }
        })
    }

    fn call(&mut self, name: &str, args: Vec<Value>) -> Result<Value, PyError> {
        let ints = || -> Result<Vec<i64>, PyError> {
            args.iter()
                .map(|a| {
                    a.as_int().ok_or_else(|| {
                        PyError::Type(format!("{name}() needs integers, got '{}'", a.type_name()))
                    })
                })
                .collect()
        };
        match name {
            "print" => {
                let line = args
                    .iter()
                    .map(ToString::to_string)
                    .collect::<Vec<_>>()
                    .join(" ");
                self.output.push(line);
                Ok(Value::None)
            }
            "min" | "max" if !args.is_empty() => {
                let v = ints()?;
                let r = if name == "min" {
                    v.iter().min()
                } else {
                    v.iter().max()
                };
                Ok(Value::Int(r.copied().unwrap_or(0)))
            }
            "abs" if args.len() == 1 => {
                let v = ints()?;
                Ok(Value::Int(v[0].checked_abs().ok_or_else(overflow)?))
            }
            "int" | "bool" | "str" if args.len() == 1 => {
                match name {
                    "int" => match &args[0] {
                        Value::Str(s) => s.trim().parse().map(Value::Int).map_err(|_| {
                            PyError::Type(format!("invalid literal for int(): '{s}'"))
                        }),
                        _ => Ok(Value::Int(ints()?[0])),
                    },
                    "bool" => Ok(Value::Bool(args[0].truthy())),
                    _ => Ok(Value::Str(args[0].to_string())),
                }
            }
            _ => Err(PyError::Unsupported(format!("function `{name}`"))),
        }
    }
}

fn compare(op: &str, l: &Value, r: &Value) -> Result<bool, PyError> {
    if let (Some(a), Some(b)) = (l.as_int(), r.as_int()) {
        return Ok(match op {
            "<" => a < b,
            ">" => a > b,
            "<=" => a <= b,
            ">=" => a >= b,
            "==" => a == b,
            _ => a != b,
        });
    }
    match (op, l, r) {
        ("==", _, _) => Ok(l == r),
        ("!=", _, _) => Ok(l != r),
        (_, Value::Str(a), Value::Str(b)) => Ok(match op {
            "<" => a < b,
            ">" => a > b,
            "<=" => a <= b,
            _ => a >= b,
        }),
        _ => Err(PyError::Type(format!(
            "'{op}' not supported between '{}' and '{}'",
            l.type_name(),
            r.type_name()
        ))),
    }
}

/// Python's `%` string formatting for the conversions the scripts use (`%d %i %u %s %x %%`).
fn format_percent(fmt: &str, arg: Value) -> Result<Value, PyError> {
    let args = match arg {
        Value::Tuple(t) => t,
        other => vec![other],
    };
    let mut out = String::new();
    let mut it = args.into_iter();
    let mut chars = fmt.chars();
    while let Some(c) = chars.next() {
        if c != '%' {
            out.push(c);
            continue;
        }
        match chars.next() {
            Some('%') => out.push('%'),
            Some(conv @ ('d' | 'i' | 'u' | 's' | 'x' | 'r')) => {
                let v = it.next().ok_or_else(|| {
                    PyError::Type("not enough arguments for format string".into())
                })?;
                match conv {
                    'x' => match v.as_int() {
                        Some(i) => out.push_str(&format!("{i:x}")),
                        None => {
                            return Err(PyError::Type("%x format: an integer is required".into()))
                        }
                    },
                    's' | 'r' => out.push_str(&v.to_string()),
                    _ => match v.as_int() {
                        Some(i) => out.push_str(&i.to_string()),
                        None => {
                            return Err(PyError::Type(format!(
                                "%{conv} format: a number is required, not {}",
                                v.type_name()
                            )))
                        }
                    },
                }
            }
            other => {
                return Err(PyError::Unsupported(format!(
                    "format conversion `%{}`",
                    other.map(String::from).unwrap_or_default()
                )))
            }
        }
    }
    if it.next().is_some() {
        return Err(PyError::Type(
            "not all arguments converted during string formatting".into(),
        ));
    }
    Ok(Value::Str(out))
}

fn binop(op: &str, l: Value, r: Value) -> Result<Value, PyError> {
    if let (Value::Str(s), "%") = (&l, op) {
        return format_percent(s, r);
    }
    if let (Value::Str(a), Value::Str(b), "+") = (&l, &r, op) {
        return Ok(Value::Str(format!("{a}{b}")));
    }
    let (Some(a), Some(b)) = (l.as_int(), r.as_int()) else {
        return Err(PyError::Type(format!(
            "unsupported operand type(s) for {op}: '{}' and '{}'",
            l.type_name(),
            r.type_name()
        )));
    };
    let zero = || PyError::Type("division by zero".into());
    let v = match op {
        "+" => a.checked_add(b),
        "-" => a.checked_sub(b),
        "*" => a.checked_mul(b),
        "//" => {
            if b == 0 {
                return Err(zero());
            }
            // Python floors toward negative infinity.
            let q = a.checked_div(b).ok_or_else(overflow)?;
            Some(if a % b != 0 && ((a < 0) != (b < 0)) {
                q - 1
            } else {
                q
            })
        }
        "%" => {
            if b == 0 {
                return Err(zero());
            }
            let m = a.checked_rem(b).ok_or_else(overflow)?;
            Some(if m != 0 && ((m < 0) != (b < 0)) {
                m + b
            } else {
                m
            })
        }
        "/" => {
            if b == 0 {
                return Err(zero());
            }
            if a % b != 0 {
                return Err(PyError::Unsupported(
                    "true division with a fractional result".into(),
                ));
            }
            a.checked_div(b)
        }
        "&" => Some(a & b),
        "|" => Some(a | b),
        "^" => Some(a ^ b),
        "<<" => {
            if b < 0 {
                return Err(PyError::Type("negative shift count".into()));
            }
            u32::try_from(b)
                .ok()
                .filter(|&s| s < 64)
                .and_then(|s| i64::try_from((a as i128) << s).ok())
        }
        ">>" => {
            if b < 0 {
                return Err(PyError::Type("negative shift count".into()));
            }
            Some(a >> b.min(63))
        }
        "**" => {
            if b < 0 {
                return Err(PyError::Unsupported("negative exponent".into()));
            }
            u32::try_from(b).ok().and_then(|e| a.checked_pow(e))
        }
        _ => return Err(PyError::Unsupported(format!("operator `{op}`"))),
    };
    v.map(Value::Int).ok_or_else(overflow)
}

/// Runs `code` in a fresh interpreter (convenience for one snippet).
pub fn check(code: &str, lookup: Lookup<'_>) -> Result<(), PyError> {
    PyEnv::new().exec(code, lookup)
}

#[cfg(test)]
mod tests {
    use super::*;

    fn vars(n: &str) -> Option<i64> {
        match n {
            "tcpi_snd_cwnd" => Some(10),
            "tcpi_rtt" => Some(15000),
            "tcpi_options" => Some(0x21),
            _ => None,
        }
    }

    fn ok(code: &str) {
        check(code, &vars).unwrap_or_else(|e| panic!("{code}: {e}"));
    }

    fn fails(code: &str) -> PyError {
        check(code, &vars).expect_err(code)
    }

    #[test]
    fn comparisons_chain_like_python() {
        ok("assert 5000 <= tcpi_rtt <= 20000, 'srtt=%d us' % tcpi_rtt");
        ok("assert 1 < 2 < 3 != 4");
        assert!(matches!(
            fails("assert 1 < 3 < 2"),
            PyError::AssertionFailed { .. }
        ));
        // chained comparison evaluates pairwise, not ((1 < 3) < 2) which would be True
        ok("assert not (1 < 3 < 2)");
    }

    #[test]
    fn boolean_and_bit_operators() {
        ok("assert (tcpi_options & TCPI_OPT_SYN_DATA) != 0, tcpi_options");
        ok("assert tcpi_snd_cwnd == 10 and not tcpi_snd_cwnd == 11 or 1 // 0");
        ok("assert 0 or 3");
        ok("assert (1 | 2) ^ 1 == 2 and 1 << 4 == 16 and -16 >> 2 == -4 and ~0 == -1");
    }

    #[test]
    fn integer_arithmetic_follows_python() {
        ok("assert -7 // 2 == -4 and 7 // -2 == -4 and 7 // 2 == 3");
        ok("assert -7 % 3 == 2 and 7 % -3 == -2 and 2 ** 10 == 1024");
        ok("assert 3 + 4 * 2 - 6 / 3 == 9");
        assert!(matches!(fails("x = 7 / 2"), PyError::Unsupported(_)));
        assert!(matches!(fails("x = 1 // 0"), PyError::Type(_)));
        assert!(matches!(
            fails("x = 9223372036854775807 + 1"),
            PyError::Unsupported(_)
        ));
    }

    #[test]
    fn statements_continuations_and_state() {
        let mut env = PyEnv::new();
        env.exec(
            "TCP_INFINITE_SSTHRESH = 0x7fffffff\ncwnd = 58 # start\nprint(tcpi_snd_cwnd); cwnd += 1; \\\n  assert cwnd == 59, cwnd",
            &vars,
        )
        .unwrap();
        env.exec("cwnd -= 49; assert tcpi_snd_cwnd == cwnd, cwnd", &vars)
            .unwrap();
        assert_eq!(env.var("cwnd"), Some(&Value::Int(10)));
        assert_eq!(env.output, vec!["10".to_string()]);
        // Unknown names are errors, not silently zero.
        assert_eq!(
            fails("assert tcpi_nope == 0"),
            PyError::Name("tcpi_nope".into())
        );
        assert!(matches!(fails("y += 1"), PyError::Name(_)));
    }

    #[test]
    fn assertion_messages() {
        match fails("\n\nassert tcpi_snd_cwnd == 12, 'cwnd=%d' % tcpi_snd_cwnd") {
            PyError::AssertionFailed {
                line,
                condition,
                message,
            } => {
                assert_eq!(line, 3);
                assert_eq!(condition, "tcpi_snd_cwnd == 12");
                assert_eq!(message.as_deref(), Some("cwnd=10"));
            }
            e => panic!("{e:?}"),
        }
        let e = fails("assert 0");
        assert_eq!(e.to_string(), "assertion failed at line 1: 0");
    }

    #[test]
    fn constants_come_from_the_symbol_table() {
        ok("assert TCP_CA_Open == 0 and TCP_CA_Loss == 4 and TCP_CLOSE_WAIT == 8");
        // A runner-provided value takes precedence over a constant of the same name.
        let shadow = |n: &str| (n == "TCP_CA_Open").then_some(9);
        check("assert TCP_CA_Open == 9", &shadow).unwrap();
    }

    #[test]
    fn unsupported_python_is_reported() {
        for code in [
            "if x: pass",
            "import os",
            "assert x in [1]",
            "assert 1.5 > 1",
            "assert foo(1)",
            "x = [1]",
            "assert a.b",
            "x = 1 if 2 else 3",
            "assert f'x'",
        ] {
            assert!(matches!(fails(code), PyError::Unsupported(_)), "{code}");
        }
    }

    #[test]
    fn syntax_errors_have_positions() {
        match fails("x = 1\nassert (1 == 1, 'a'") {
            PyError::Syntax { line, col, .. } => assert_eq!((line, col), (2, 20)),
            e => panic!("{e:?}"),
        }
        assert!(matches!(fails("assert 1 == "), PyError::Syntax { .. }));
        assert!(matches!(fails("assert 'abc"), PyError::Syntax { .. }));
        assert!(matches!(fails("assert 1 $ 2"), PyError::Syntax { .. }));
    }

    #[test]
    fn free_names_are_what_the_runner_must_provide() {
        let p = parse("x = 1; print(tcpi_a); cwnd += x; assert tcpi_b == x, TCP_CA_Open").unwrap();
        assert_eq!(p.free_names(), ["TCP_CA_Open", "cwnd", "tcpi_a", "tcpi_b"]);
    }

    #[test]
    fn string_formatting() {
        ok("assert '%d/%s %%' % (1, 'a') == '1/a %'");
        ok("assert 'a' 'b' == 'ab' and 'x' + 'y' == 'xy'");
        assert!(matches!(fails("x = '%d %d' % 1"), PyError::Type(_)));
    }
}
