//! Transparent termination with the blocking API: accept every TCP connection that arrives
//! on the TUN of `shallow netns up`, for any destination, and relay it there through this
//! host's kernel — a minimal TUN proxy (`shallow proxy` is the full one, on tokio).
//!
//! ```text
//! shallow netns up
//! ip -n shallow-peer route add 10.216.0.0/24 dev shallow0   # these destinations go to the TUN
//! cargo run --release -p shallow-os --example forward
//! ip netns exec shallow-peer curl http://10.216.0.2:8080/  # relayed to 10.216.0.2:8080
//! ```

use std::io::{Read, Write};
use std::net::Shutdown;

use shallow_os::{Family, ForwardVerdict, Host, TcpListener};

fn main() -> Result<(), Box<dyn std::error::Error>> {
    let host = Host::attach_default()?;
    // Refuse SMTP, accept the rest.
    host.set_forward_filter(Some(std::sync::Arc::new(
        |_src, dst: std::net::SocketAddr| {
            if dst.port() == 25 {
                ForwardVerdict::Reset
            } else {
                ForwardVerdict::Accept
            }
        },
    )));
    let listener = TcpListener::bind_any(&host, Family::V6, 1024)?; // IPv6 and IPv4
    for conn in listener.incoming() {
        let client = conn?;
        let dst = client.original_dst()?;
        std::thread::spawn(move || {
            let dst = shallow_tcp::dualstack::unmapped(dst);
            let Ok(upstream) = std::net::TcpStream::connect(dst) else {
                return; // the client's connection closes (the full proxy resets it)
            };
            let (mut c_r, mut c_w) = (client.try_clone().unwrap(), client);
            let (mut u_r, mut u_w) = (upstream.try_clone().unwrap(), upstream);
            let up = std::thread::spawn(move || {
                let mut buf = vec![0u8; 64 * 1024];
                while let Ok(n @ 1..) = c_r.read(&mut buf) {
                    if u_w.write_all(&buf[..n]).is_err() {
                        break;
                    }
                }
                let _ = u_w.shutdown(Shutdown::Write);
            });
            let mut buf = vec![0u8; 64 * 1024];
            while let Ok(n @ 1..) = u_r.read(&mut buf) {
                if c_w.write_all(&buf[..n]).is_err() {
                    break;
                }
            }
            let _ = c_w.shutdown(Shutdown::Write);
            let _ = up.join();
        });
    }
    Ok(())
}
