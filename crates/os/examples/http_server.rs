//! A small HTTP/1.1 server on Shallow's `TcpListener` (one thread per connection, keep-alive,
//! `Content-Length` bodies), for trying Shallow with `curl` or a browser:
//!
//! ```sh
//! shallow netns up                     # the kernel peer: namespace shallow-peer, TUN shallow0
//! cargo run -p shallow-os --example http_server -- 8080 &
//! ip netns exec shallow-peer curl http://10.213.0.2:8080/
//! ```
//!
//! Routes: `GET /` (a greeting), `GET /bytes/N` (N bytes of `abc…z` repeated), `POST /echo`
//! (the request body back). Anything else is 404; a malformed request is 400 and closes.
//! `tests/interop_tools.rs` runs this same code against curl.

use std::io::{self, BufRead, BufReader, Read, Write};
use std::net::{IpAddr, SocketAddr};

use shallow_os::{Host, TcpListener, TcpStream};

/// Longest request head accepted (request line + headers).
pub const MAX_HEAD: usize = 16 * 1024;
/// Largest body accepted by `/echo`.
pub const MAX_BODY: u64 = 64 << 20;
/// Largest `/bytes/N`.
pub const MAX_BYTES: u64 = 1 << 32;

/// Serves connections from `listener` until it fails (each on its own thread).
pub fn serve(listener: &TcpListener) -> io::Result<()> {
    loop {
        let (s, _) = listener.accept()?;
        std::thread::spawn(move || {
            let _ = handle(s);
        });
    }
}

/// One request's head.
struct Head {
    method: String,
    path: String,
    content_length: u64,
    close: bool,
}

/// Reads one request head; `Ok(None)` at a clean EOF between requests.
fn read_head(r: &mut impl BufRead) -> io::Result<Option<Head>> {
    let bad = |m: &str| io::Error::new(io::ErrorKind::InvalidData, m.to_string());
    let mut line = String::new();
    let mut total = 0;
    if r.read_line(&mut line)? == 0 {
        return Ok(None);
    }
    total += line.len();
    let mut parts = line.split_whitespace();
    let (Some(method), Some(path), Some(version)) = (parts.next(), parts.next(), parts.next())
    else {
        return Err(bad("bad request line"));
    };
    let mut head = Head {
        method: method.to_string(),
        path: path.to_string(),
        content_length: 0,
        close: version == "HTTP/1.0",
    };
    loop {
        let mut h = String::new();
        if r.read_line(&mut h)? == 0 {
            return Err(bad("EOF in headers"));
        }
        total += h.len();
        if total > MAX_HEAD {
            return Err(bad("request head too long"));
        }
        let h = h.trim_end();
        if h.is_empty() {
            return Ok(Some(head));
        }
        let Some((name, value)) = h.split_once(':') else {
            return Err(bad("bad header"));
        };
        let value = value.trim();
        if name.eq_ignore_ascii_case("content-length") {
            head.content_length = value.parse().map_err(|_| bad("bad Content-Length"))?;
        } else if name.eq_ignore_ascii_case("connection") {
            head.close = value.eq_ignore_ascii_case("close");
        } else if name.eq_ignore_ascii_case("transfer-encoding") {
            return Err(bad("chunked bodies are not supported"));
        }
    }
}

fn respond(w: &mut impl Write, status: &str, len: u64, close: bool) -> io::Result<()> {
    write!(
        w,
        "HTTP/1.1 {status}\r\nServer: shallow\r\nContent-Length: {len}\r\nContent-Type: application/octet-stream\r\n{}\r\n",
        if close { "Connection: close\r\n" } else { "" }
    )
}

/// Serves one connection: requests until the client closes or asks to.
pub fn handle(stream: TcpStream) -> io::Result<()> {
    let mut r = BufReader::new(&stream);
    let mut w = &stream;
    while let Some(head) = match read_head(&mut r) {
        Ok(h) => h,
        Err(e) if e.kind() == io::ErrorKind::InvalidData => {
            respond(&mut w, "400 Bad Request", 0, true)?;
            return stream.shutdown(std::net::Shutdown::Write);
        }
        Err(e) => return Err(e),
    } {
        match (head.method.as_str(), head.path.as_str()) {
            ("GET", "/") => {
                let body = b"hello from Shallow\n";
                respond(&mut w, "200 OK", body.len() as u64, head.close)?;
                w.write_all(body)?;
            }
            ("GET", p) if p.starts_with("/bytes/") => {
                match p["/bytes/".len()..].parse::<u64>() {
                    Ok(n) if n <= MAX_BYTES => {
                        respond(&mut w, "200 OK", n, head.close)?;
                        // `abc…z` repeated, continuous across writes: each write starts at
                        // offset `sent % 26` of a pattern 25 bytes longer than a write.
                        let pat: Vec<u8> =
                            (0..64 * 1024 + 25).map(|i| b'a' + (i % 26) as u8).collect();
                        let mut sent = 0u64;
                        while sent < n {
                            let k = (n - sent).min(64 * 1024) as usize;
                            let off = (sent % 26) as usize;
                            w.write_all(&pat[off..off + k])?;
                            sent += k as u64;
                        }
                    }
                    _ => {
                        respond(&mut w, "404 Not Found", 0, head.close)?;
                    }
                }
            }
            ("POST", "/echo") if head.content_length <= MAX_BODY => {
                respond(&mut w, "200 OK", head.content_length, head.close)?;
                let copied = io::copy(&mut (&mut r).take(head.content_length), &mut w)?;
                if copied < head.content_length {
                    return Ok(());
                }
            }
            _ => {
                // Skip an unused body so the next request parses.
                io::copy(&mut (&mut r).take(head.content_length), &mut io::sink())?;
                respond(&mut w, "404 Not Found", 0, head.close)?;
            }
        }
        if head.close {
            return stream.shutdown(std::net::Shutdown::Write);
        }
    }
    Ok(())
}

#[allow(dead_code)]
fn main() -> Result<(), Box<dyn std::error::Error>> {
    let port: u16 = std::env::args()
        .nth(1)
        .map(|p| p.parse())
        .transpose()?
        .unwrap_or(8080);
    let host = Host::attach_default()?;
    let mut listeners = Vec::new();
    for ip in ["10.213.0.2", "fd00:213::2"] {
        let addr = SocketAddr::new(ip.parse::<IpAddr>()?, port);
        listeners.push(TcpListener::bind(&host, addr)?);
        println!("listening on http://{addr}/");
    }
    let v6 = listeners.pop().ok_or("no listener")?;
    std::thread::spawn(move || serve(&v6));
    serve(&listeners[0])?;
    Ok(())
}
