//! What `GET /v1/auth` believes of a gateway's subrequest: the client's address, taken from
//! `X-Forwarded-For` only as far as trusted proxies wrote it, and the request's path as the
//! gateway routes it.
//!
//! # Invariants
//! - An `X-Forwarded-For` list is read only when the peer itself is a trusted proxy, and then
//!   from the right: each trusted hop vouches for the entry to its left, and the first entry
//!   no trusted proxy wrote is the client. A client may put anything at the list's left end;
//!   it can never reach past the first untrusted entry.
//! - A path names the same resource the gateway serves: escapes decoded, dot segments
//!   resolved, repeated slashes merged, the query dropped, as nginx does before it matches a
//!   `location`. A `ROUTE` prefix is matched against that, never against the raw bytes.

use std::net::{IpAddr, SocketAddr};

use axum::extract::FromRequestParts;
use axum::http::request::Parts;

/// The address of a connection's peer: the gateway, for a subrequest. The server loop (`serve`)
/// puts it on every request; a request that came through no socket (a router called in
/// process, as the fuzz target does) has `0.0.0.0`, which is no trusted proxy.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub struct Peer(pub IpAddr);

impl Peer {
    pub fn of(addr: SocketAddr) -> Peer {
        Peer(canonical(addr.ip()))
    }
}

impl<S: Send + Sync> FromRequestParts<S> for Peer {
    type Rejection = std::convert::Infallible;

    async fn from_request_parts(parts: &mut Parts, _: &S) -> Result<Peer, Self::Rejection> {
        Ok(parts
            .extensions
            .get::<Peer>()
            .copied()
            .unwrap_or(Peer(IpAddr::from([0, 0, 0, 0]))))
    }
}

/// An IPv4-mapped IPv6 address as the IPv4 address it is (a dual-stack socket's view).
fn canonical(ip: IpAddr) -> IpAddr {
    match ip {
        IpAddr::V6(v6) => v6.to_ipv4_mapped().map_or(ip, IpAddr::V4),
        v4 => v4,
    }
}

/// One network: an address and how many of its leading bits are fixed.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub struct Cidr {
    net: IpAddr,
    bits: u8,
}

impl Cidr {
    /// `10.0.0.0/8`, `::1/128`, or a bare address (all its bits).
    pub fn parse(text: &str) -> Result<Cidr, String> {
        let bad = || format!("'{text}' is not an address or a network such as 10.0.0.0/8");
        let (addr, bits) = match text.split_once('/') {
            Some((a, b)) => (a, Some(b.parse::<u8>().map_err(|_| bad())?)),
            None => (text, None),
        };
        let net = canonical(addr.trim().parse::<IpAddr>().map_err(|_| bad())?);
        let max = if net.is_ipv4() { 32 } else { 128 };
        let bits = bits.unwrap_or(max);
        if bits > max {
            return Err(bad());
        }
        Ok(Cidr { net, bits })
    }

    pub fn contains(&self, ip: IpAddr) -> bool {
        match (self.net, canonical(ip)) {
            (IpAddr::V4(n), IpAddr::V4(a)) => prefix_eq(
                u128::from(n.to_bits()) << 96,
                u128::from(a.to_bits()) << 96,
                self.bits,
            ),
            (IpAddr::V6(n), IpAddr::V6(a)) => prefix_eq(n.to_bits(), a.to_bits(), self.bits),
            _ => false,
        }
    }
}

/// Whether `a` and `b` agree on their first `bits` bits.
fn prefix_eq(a: u128, b: u128, bits: u8) -> bool {
    bits == 0 || (a ^ b) >> (128 - u32::from(bits)) == 0
}

/// The client's address: `peer` itself unless it is a trusted proxy; else the rightmost
/// `X-Forwarded-For` entry (over all its lines, in order) that is not a trusted proxy. When
/// every entry is trusted, the leftmost; when an entry is not an address, the trusted hop to
/// its right that wrote it. `None` when a trusted peer sent no list.
pub fn client_ip<'a>(
    peer: IpAddr,
    forwarded_for: impl DoubleEndedIterator<Item = &'a str>,
    trusted: &[Cidr],
) -> Option<IpAddr> {
    let is_trusted = |ip: IpAddr| trusted.iter().any(|c| c.contains(ip));
    if !is_trusted(peer) {
        return Some(peer);
    }
    let mut last = None;
    for entry in forwarded_for.rev() {
        let Some(ip) = parse_entry(entry) else {
            return last;
        };
        if !is_trusted(ip) {
            return Some(ip);
        }
        last = Some(ip);
    }
    last
}

/// One `X-Forwarded-For` entry: an address, maybe with a port (`1.2.3.4:5`, `[::1]:5`).
fn parse_entry(entry: &str) -> Option<IpAddr> {
    let entry = entry.trim();
    if let Ok(ip) = entry.parse::<IpAddr>() {
        return Some(canonical(ip));
    }
    entry.parse::<SocketAddr>().ok().map(|a| canonical(a.ip()))
}

/// `path` as the gateway routes it: the query dropped, every `%XX` escape decoded, dot
/// segments resolved (never above the root), repeated slashes merged. Bytes that are not
/// UTF-8 after decoding become U+FFFD.
pub fn normalize_path(path: &str) -> String {
    let path = path.split(['?', '#']).next().unwrap_or("");
    let decoded = percent_decode(path.as_bytes());
    let decoded = String::from_utf8_lossy(&decoded);
    let mut segments: Vec<&str> = Vec::new();
    for segment in decoded.split('/') {
        match segment {
            "" | "." => {}
            ".." => {
                segments.pop();
            }
            s => segments.push(s),
        }
    }
    let mut out = String::with_capacity(decoded.len() + 1);
    for s in &segments {
        out.push('/');
        out.push_str(s);
    }
    // A trailing slash (or dot segment) names a directory: keep it, as nginx does.
    let ends_in_dir = decoded.ends_with('/') || decoded.ends_with("/.") || decoded.ends_with("/..");
    if out.is_empty() || ends_in_dir {
        out.push('/');
    }
    out
}

/// `%XX` escapes decoded; a `%` not followed by two hex digits stays as it is.
fn percent_decode(bytes: &[u8]) -> Vec<u8> {
    let hex = |b: u8| (b as char).to_digit(16).map(|d| d as u8);
    let mut out = Vec::with_capacity(bytes.len());
    let mut i = 0;
    while i < bytes.len() {
        if bytes[i] == b'%'
            && let (Some(hi), Some(lo)) = (
                bytes.get(i + 1).copied().and_then(hex),
                bytes.get(i + 2).copied().and_then(hex),
            )
        {
            out.push(hi << 4 | lo);
            i += 3;
            continue;
        }
        out.push(bytes[i]);
        i += 1;
    }
    out
}

#[cfg(test)]
mod tests {
    use super::*;

    fn ip(s: &str) -> IpAddr {
        s.parse().unwrap()
    }

    #[test]
    fn paths_are_normalized_as_nginx_routes_them() {
        for (raw, want) in [
            ("/api/search", "/api/search"),
            ("//api/search", "/api/search"),
            ("///api//search", "/api/search"),
            ("/%61pi/search", "/api/search"),
            ("/%2Fapi/search", "/api/search"),
            ("/%2fapi%2Fsearch", "/api/search"),
            ("/x/../api/search", "/api/search"),
            ("/./api/./search", "/api/search"),
            ("/../../api", "/api"),
            ("/%2e%2e/api", "/api"),
            ("/api/search?page=2", "/api/search"),
            ("/api/?q=/x", "/api/"),
            ("/api/x/..", "/api/"),
            ("/%zz/%4", "/%zz/%4"),
            ("", "/"),
            ("/", "/"),
            ("/%FF", "/\u{FFFD}"),
        ] {
            assert_eq!(normalize_path(raw), want, "{raw}");
        }
    }

    #[test]
    fn networks_hold_their_addresses() {
        let c = Cidr::parse("10.0.0.0/8").unwrap();
        assert!(c.contains(ip("10.255.0.1")) && !c.contains(ip("11.0.0.1")));
        assert!(c.contains(ip("::ffff:10.1.2.3")), "an IPv4-mapped address");
        let c = Cidr::parse("::1").unwrap();
        assert!(c.contains(ip("::1")) && !c.contains(ip("::2")));
        let c = Cidr::parse("2001:db8::/32").unwrap();
        assert!(c.contains(ip("2001:db8:1::5")) && !c.contains(ip("2001:db9::")));
        assert!(Cidr::parse("0.0.0.0/0").unwrap().contains(ip("8.8.8.8")));
        assert!(!Cidr::parse("0.0.0.0/0").unwrap().contains(ip("::1")));
        for bad in ["10.0.0.0/33", "::/129", "10.0.0/8", "x", "10.0.0.0/"] {
            assert!(Cidr::parse(bad).is_err(), "{bad}");
        }
    }

    #[test]
    fn the_client_is_the_rightmost_entry_no_trusted_proxy_wrote() {
        let trusted = [
            Cidr::parse("127.0.0.0/8").unwrap(),
            Cidr::parse("10.0.0.0/8").unwrap(),
        ];
        let peer = ip("127.0.0.1");
        let walk = |list: &[&str]| client_ip(peer, list.iter().copied(), &trusted);
        assert_eq!(walk(&["1.1.1.1", "2.2.2.2"]), Some(ip("2.2.2.2")));
        assert_eq!(
            walk(&["1.1.1.1", "2.2.2.2", "10.0.0.1"]),
            Some(ip("2.2.2.2"))
        );
        assert_eq!(walk(&["10.0.0.2", "10.0.0.1"]), Some(ip("10.0.0.2")));
        assert_eq!(walk(&["1.1.1.1", "junk", "10.0.0.1"]), Some(ip("10.0.0.1")));
        assert_eq!(walk(&["junk"]), None);
        assert_eq!(walk(&["[2001:db8::1]:443"]), Some(ip("2001:db8::1")));
        assert_eq!(walk(&["3.3.3.3:8080"]), Some(ip("3.3.3.3")));
        assert_eq!(walk(&[]), None);
        // An untrusted peer is the client, whatever its list says.
        let outside = client_ip(ip("4.4.4.4"), ["1.1.1.1"].into_iter(), &trusted);
        assert_eq!(outside, Some(ip("4.4.4.4")));
    }
}
