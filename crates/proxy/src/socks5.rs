//! A SOCKS5 client: method negotiation and `CONNECT` (RFC 1928), with username/password
//! authentication (RFC 1929). Addresses are sent as IPv4 or IPv6 (`ATYP` 1 or 4): the
//! proxy always knows the original destination's address.

use std::io;
use std::net::{IpAddr, SocketAddr};

use tokio::io::{AsyncRead, AsyncReadExt, AsyncWrite, AsyncWriteExt};

use crate::ProxyError;

/// Protocol version 5 (RFC 1928 §3).
const VER: u8 = 5;
/// Method "no authentication required".
const NO_AUTH: u8 = 0;
/// Method "username/password" (RFC 1929).
const USER_PASS: u8 = 2;
/// Method "no acceptable methods".
const NO_ACCEPTABLE: u8 = 0xff;
/// Command CONNECT.
const CMD_CONNECT: u8 = 1;

/// The `io::Error` a SOCKS5 reply code stands for (RFC 1928 §6), as the kernel would have
/// reported the same failure of a direct connection.
pub fn reply_error(rep: u8) -> io::Error {
    // Linux errno numbers (asm-generic/errno.h).
    let errno = match rep {
        2 => 13,     // not allowed by the ruleset: EACCES
        3 => 101,    // network unreachable: ENETUNREACH
        4 => 113,    // host unreachable: EHOSTUNREACH
        5 => 111,    // connection refused: ECONNREFUSED
        6 => 110,    // TTL expired: ETIMEDOUT
        7 | 8 => 95, // command or address type not supported: EOPNOTSUPP
        _ => 5,      // general failure: EIO
    };
    io::Error::from_raw_os_error(errno)
}

/// Asks the SOCKS5 server on `s` to connect to `dst`: negotiates a method (no
/// authentication, and username/password when `auth` is given), authenticates, sends
/// `CONNECT` and reads the reply, leaving `s` ready to carry the connection's bytes.
pub async fn connect<S>(
    s: &mut S,
    dst: SocketAddr,
    auth: Option<(&str, &str)>,
) -> Result<(), ProxyError>
where
    S: AsyncRead + AsyncWrite + Unpin,
{
    // Greeting: the methods we can do.
    if auth.is_some() {
        s.write_all(&[VER, 2, NO_AUTH, USER_PASS]).await?;
    } else {
        s.write_all(&[VER, 1, NO_AUTH]).await?;
    }
    let mut r = [0u8; 2];
    s.read_exact(&mut r).await?;
    if r[0] != VER {
        return Err(ProxyError::Protocol("not version 5"));
    }
    match (r[1], auth) {
        (NO_AUTH, _) => {}
        (USER_PASS, Some((user, pass))) => {
            if user.is_empty() || user.len() > 255 || pass.is_empty() || pass.len() > 255 {
                return Err(ProxyError::Protocol(
                    "username and password must be 1-255 bytes",
                ));
            }
            let mut m = Vec::with_capacity(3 + user.len() + pass.len());
            m.push(1); // RFC 1929 sub-negotiation version
            m.push(user.len() as u8);
            m.extend_from_slice(user.as_bytes());
            m.push(pass.len() as u8);
            m.extend_from_slice(pass.as_bytes());
            s.write_all(&m).await?;
            s.read_exact(&mut r).await?;
            if r[1] != 0 {
                return Err(ProxyError::AuthFailed);
            }
        }
        (NO_ACCEPTABLE, _) => return Err(ProxyError::NoMethod),
        _ => {
            return Err(ProxyError::Protocol(
                "server chose a method we did not offer",
            ))
        }
    }
    // CONNECT request.
    let mut m = vec![VER, CMD_CONNECT, 0];
    let dst = shallow_tcp::dualstack::unmapped(dst);
    match dst.ip() {
        IpAddr::V4(a) => {
            m.push(1);
            m.extend_from_slice(&a.octets());
        }
        IpAddr::V6(a) => {
            m.push(4);
            m.extend_from_slice(&a.octets());
        }
    }
    m.extend_from_slice(&dst.port().to_be_bytes());
    s.write_all(&m).await?;
    // Reply: VER REP RSV ATYP BND.ADDR BND.PORT.
    let mut h = [0u8; 4];
    s.read_exact(&mut h).await?;
    if h[0] != VER {
        return Err(ProxyError::Protocol("reply not version 5"));
    }
    if h[1] != 0 {
        return Err(ProxyError::Reply(h[1]));
    }
    let addr_len = match h[3] {
        1 => 4,
        4 => 16,
        3 => {
            let mut n = [0u8; 1];
            s.read_exact(&mut n).await?;
            usize::from(n[0])
        }
        _ => return Err(ProxyError::Protocol("unknown address type in reply")),
    };
    let mut rest = [0u8; 255 + 2];
    s.read_exact(&mut rest[..addr_len + 2]).await?;
    Ok(())
}

#[cfg(test)]
mod tests {
    use super::*;
    use tokio::io::duplex;

    /// A scripted server: checks what the client sends, answers as given.
    async fn server(
        mut s: tokio::io::DuplexStream,
        expect_greeting: &[u8],
        method: u8,
        auth_ok: Option<bool>,
        rep: u8,
    ) -> Vec<u8> {
        let mut g = vec![0u8; expect_greeting.len()];
        s.read_exact(&mut g).await.unwrap();
        assert_eq!(g, expect_greeting);
        s.write_all(&[5, method]).await.unwrap();
        if let Some(ok) = auth_ok {
            let mut v = [0u8; 2];
            s.read_exact(&mut v).await.unwrap();
            let mut user = vec![0u8; usize::from(v[1])];
            s.read_exact(&mut user).await.unwrap();
            let mut pl = [0u8; 1];
            s.read_exact(&mut pl).await.unwrap();
            let mut pass = vec![0u8; usize::from(pl[0])];
            s.read_exact(&mut pass).await.unwrap();
            assert_eq!((&user[..], &pass[..]), (&b"alice"[..], &b"s3cret"[..]));
            s.write_all(&[1, if ok { 0 } else { 1 }]).await.unwrap();
            if !ok {
                return Vec::new();
            }
        }
        let mut req = [0u8; 4];
        s.read_exact(&mut req).await.unwrap();
        let n = if req[3] == 1 { 4 } else { 16 };
        let mut rest = vec![0u8; n + 2];
        s.read_exact(&mut rest).await.unwrap();
        // BND as a domain name, to exercise that form of the reply.
        s.write_all(&[5, rep, 0, 3, 4, b'h', b'o', b's', b't', 0x04, 0x38])
            .await
            .unwrap();
        let mut all = req.to_vec();
        all.extend_from_slice(&rest);
        all
    }

    #[tokio::test]
    async fn connect_without_auth_sends_ipv4_and_ipv6() {
        for (dst, want) in [
            ("192.0.2.7:443", vec![5, 1, 0, 1, 192, 0, 2, 7, 1, 187]),
            (
                "[2001:db8::1]:80",
                [
                    vec![5, 1, 0, 4, 0x20, 1, 0xd, 0xb8],
                    vec![0; 11],
                    vec![1, 0, 80],
                ]
                .concat(),
            ),
            (
                "[::ffff:192.0.2.9]:22",
                vec![5, 1, 0, 1, 192, 0, 2, 9, 0, 22],
            ),
        ] {
            let (mut c, s) = duplex(1024);
            let srv = tokio::spawn(server(s, &[5, 1, 0], 0, None, 0));
            connect(&mut c, dst.parse().unwrap(), None).await.unwrap();
            assert_eq!(srv.await.unwrap(), want, "{dst}");
        }
    }

    #[tokio::test]
    async fn username_password_and_failures() {
        let (mut c, s) = duplex(1024);
        let srv = tokio::spawn(server(s, &[5, 2, 0, 2], 2, Some(true), 0));
        connect(
            &mut c,
            "10.0.0.1:80".parse().unwrap(),
            Some(("alice", "s3cret")),
        )
        .await
        .unwrap();
        srv.await.unwrap();

        let (mut c, s) = duplex(1024);
        let srv = tokio::spawn(server(s, &[5, 2, 0, 2], 2, Some(false), 0));
        let e = connect(
            &mut c,
            "10.0.0.1:80".parse().unwrap(),
            Some(("alice", "s3cret")),
        )
        .await;
        assert!(matches!(e, Err(ProxyError::AuthFailed)), "{e:?}");
        srv.await.unwrap();

        let (mut c, s) = duplex(1024);
        let srv = tokio::spawn(server(s, &[5, 1, 0], 0, None, 5));
        let e = connect(&mut c, "10.0.0.1:80".parse().unwrap(), None).await;
        assert!(matches!(e, Err(ProxyError::Reply(5))), "{e:?}");
        let io: io::Error = e.unwrap_err().into();
        assert_eq!(io.kind(), io::ErrorKind::ConnectionRefused);
        srv.await.unwrap();

        // A server that accepts none of our methods.
        let (mut c, mut s) = duplex(1024);
        let srv = tokio::spawn(async move {
            let mut g = [0u8; 3];
            s.read_exact(&mut g).await.unwrap();
            s.write_all(&[5, 0xff]).await.unwrap();
        });
        let e = connect(&mut c, "10.0.0.1:80".parse().unwrap(), None).await;
        assert!(matches!(e, Err(ProxyError::NoMethod)), "{e:?}");
        srv.await.unwrap();

        // Not SOCKS5 at all.
        let (mut c, mut s) = duplex(1024);
        let srv = tokio::spawn(async move {
            let mut g = [0u8; 3];
            s.read_exact(&mut g).await.unwrap();
            s.write_all(b"HTTP/1.1 400").await.unwrap();
        });
        let e = connect(&mut c, "10.0.0.1:80".parse().unwrap(), None).await;
        assert!(matches!(e, Err(ProxyError::Protocol(_))), "{e:?}");
        srv.await.unwrap();
    }
}
