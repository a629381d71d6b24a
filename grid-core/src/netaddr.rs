//! Which IP addresses count as public, and for those that do not, the row of
//! the special-purpose address table they fall in. Captures refuse
//! non-public addresses by default (`capture/guard.rs`, `browser/hosts.rs`),
//! sessions under `public-web-only/v1` always do (`egress.rs`); all of them
//! ask [`special_purpose`] and name the row it answers in their refusals.
//!
//! The table ([`IPV4`], [`IPV6`]) follows the IANA IPv4 and IPv6
//! Special-Purpose Address Registries, plus, for IPv6, every block of the
//! IPv6 address space outside global unicast (`2000::/3`), which is
//! reserved by the IETF. An address falls in the row of its longest
//! matching prefix. A few blocks the registries call globally reachable
//! (AS112, AMT, the anycast addresses inside `192.0.0.0/24` and
//! `2001::/23`) are refused all the same: none serves web pages, and
//! "public" here means a destination a browser or a fetch may open.
//!
//! IPv6 forms that carry an IPv4 address are judged by it, so no spelling of
//! a private IPv4 address passes as public IPv6:
//! - IPv4-mapped `::ffff:0:0/96` (how dual-stack sockets spell IPv4), the
//!   NAT64 well-known prefix `64:ff9b::/96` (RFC 6052 forbids it to carry a
//!   non-global IPv4 address) and 6to4 `2002::/16` (IPv4 in bits 16..47)
//!   stand for their IPv4 address: public exactly when it is.
//! - IPv4-compatible `::/96` (deprecated by RFC 4291; a kernel with a
//!   `sit` tunnel still sends it to its IPv4 address), IPv4-translated
//!   `::ffff:0:0:0/96` (RFC 2765, dropped by RFC 6145) and Teredo
//!   `2001::/32` (server IPv4 in bits 32..63, client IPv4 in the last 32
//!   bits XORed with `0xffffffff`) are never public, whatever they carry:
//!   they lie outside global unicast or need a tunnel relay no destination
//!   of a web fetch uses. The answer still names the carried address (for
//!   Teredo the first of server and client that is not public).
//! - The local-use NAT64 prefix `64:ff9b:1::/48` (RFC 8215) is never
//!   public: it translates to whatever its operator chose.
//!
//! Pure: no I/O, no name resolution; callers resolve and ask per address.

use std::fmt;
use std::net::{IpAddr, Ipv4Addr, Ipv6Addr};

/// An address prefix of the table: network address, length, and how the
/// RFCs write it.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct Prefix {
    pub addr: IpAddr,
    pub bits: u8,
    pub text: &'static str,
}

impl Prefix {
    /// Whether `ip` (of the same family) is inside the prefix.
    pub fn contains(&self, ip: IpAddr) -> bool {
        match (self.addr, ip) {
            (IpAddr::V4(net), IpAddr::V4(ip)) => {
                let mask = u32::MAX.checked_shl(32u32.saturating_sub(u32::from(self.bits))).unwrap_or(0);
                u32::from(ip) & mask == u32::from(net)
            }
            (IpAddr::V6(net), IpAddr::V6(ip)) => {
                let mask = u128::MAX.checked_shl(128u32.saturating_sub(u32::from(self.bits))).unwrap_or(0);
                u128::from(ip) & mask == u128::from(net)
            }
            _ => false,
        }
    }
}

impl fmt::Display for Prefix {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.write_str(self.text)
    }
}

/// Where an IPv6 form carries an IPv4 address.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum Carrier {
    /// The last 32 bits (IPv4-mapped, IPv4-compatible, IPv4-translated, NAT64).
    Last32,
    /// Bits 16..47 (6to4).
    SixToFour,
    /// Server in bits 32..63, client in the last 32 bits XORed with
    /// `0xffffffff` (Teredo).
    Teredo,
}

/// How a row's addresses relate to IPv4.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum Embedding {
    /// An ordinary row: never public.
    None,
    /// The form stands for the IPv4 address it carries: public exactly when
    /// that address is.
    Judged(Carrier),
    /// Never public; the answer names the carried address.
    Named(Carrier),
}

/// One row of the special-purpose address table.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct Row {
    pub prefix: Prefix,
    /// A short human name, e.g. `loopback`, `private-use`.
    pub name: &'static str,
    /// The RFC that set the block aside, e.g. `RFC 1918`.
    pub rfc: &'static str,
    pub embedding: Embedding,
}

const fn v4(a: [u8; 4], bits: u8, text: &'static str) -> Prefix {
    Prefix { addr: IpAddr::V4(Ipv4Addr::new(a[0], a[1], a[2], a[3])), bits, text }
}

const fn v6(s: [u16; 8], bits: u8, text: &'static str) -> Prefix {
    Prefix { addr: IpAddr::V6(Ipv6Addr::new(s[0], s[1], s[2], s[3], s[4], s[5], s[6], s[7])), bits, text }
}

const fn row(prefix: Prefix, name: &'static str, rfc: &'static str) -> Row {
    Row { prefix, name, rfc, embedding: Embedding::None }
}

const fn carrier(prefix: Prefix, name: &'static str, rfc: &'static str, embedding: Embedding) -> Row {
    Row { prefix, name, rfc, embedding }
}

/// The IPv4 special-purpose blocks (IANA IPv4 Special-Purpose Address
/// Registry). Every other IPv4 address is public.
pub const IPV4: &[Row] = &[
    row(v4([0, 0, 0, 0], 8, "0.0.0.0/8"), "this network", "RFC 791"),
    row(v4([0, 0, 0, 0], 32, "0.0.0.0/32"), "this host on this network, unspecified", "RFC 1122"),
    row(v4([10, 0, 0, 0], 8, "10.0.0.0/8"), "private-use", "RFC 1918"),
    row(v4([100, 64, 0, 0], 10, "100.64.0.0/10"), "shared address space, carrier-grade NAT", "RFC 6598"),
    row(v4([127, 0, 0, 0], 8, "127.0.0.0/8"), "loopback", "RFC 1122"),
    row(v4([169, 254, 0, 0], 16, "169.254.0.0/16"), "link-local", "RFC 3927"),
    row(v4([172, 16, 0, 0], 12, "172.16.0.0/12"), "private-use", "RFC 1918"),
    row(v4([192, 0, 0, 0], 24, "192.0.0.0/24"), "IETF protocol assignments", "RFC 6890"),
    row(v4([192, 0, 2, 0], 24, "192.0.2.0/24"), "documentation, TEST-NET-1", "RFC 5737"),
    row(v4([192, 31, 196, 0], 24, "192.31.196.0/24"), "AS112-v4", "RFC 7535"),
    row(v4([192, 52, 193, 0], 24, "192.52.193.0/24"), "AMT", "RFC 7450"),
    row(v4([192, 88, 99, 0], 24, "192.88.99.0/24"), "6to4 relay anycast, deprecated", "RFC 7526"),
    row(v4([192, 168, 0, 0], 16, "192.168.0.0/16"), "private-use", "RFC 1918"),
    row(v4([192, 175, 48, 0], 24, "192.175.48.0/24"), "direct delegation AS112 service", "RFC 7534"),
    row(v4([198, 18, 0, 0], 15, "198.18.0.0/15"), "benchmarking", "RFC 2544"),
    row(v4([198, 51, 100, 0], 24, "198.51.100.0/24"), "documentation, TEST-NET-2", "RFC 5737"),
    row(v4([203, 0, 113, 0], 24, "203.0.113.0/24"), "documentation, TEST-NET-3", "RFC 5737"),
    row(v4([224, 0, 0, 0], 4, "224.0.0.0/4"), "multicast", "RFC 5771"),
    row(v4([240, 0, 0, 0], 4, "240.0.0.0/4"), "reserved", "RFC 1112"),
    row(v4([255, 255, 255, 255], 32, "255.255.255.255/32"), "limited broadcast", "RFC 919"),
];

/// Name of the IPv6 blocks outside global unicast that no other row names.
const RESERVED_V6: &str = "reserved by the IETF (outside global unicast 2000::/3)";

/// The IPv6 special-purpose blocks (IANA IPv6 Special-Purpose Address
/// Registry), and the rest of the address space outside global unicast
/// `2000::/3` (IANA IPv6 Address Space). Every other IPv6 address is public.
pub const IPV6: &[Row] = &[
    row(v6([0, 0, 0, 0, 0, 0, 0, 0], 128, "::/128"), "unspecified", "RFC 4291"),
    row(v6([0, 0, 0, 0, 0, 0, 0, 1], 128, "::1/128"), "loopback", "RFC 4291"),
    carrier(
        v6([0, 0, 0, 0, 0, 0xffff, 0, 0], 96, "::ffff:0:0/96"),
        "IPv4-mapped",
        "RFC 4291",
        Embedding::Judged(Carrier::Last32),
    ),
    carrier(v6([0; 8], 96, "::/96"), "IPv4-compatible, deprecated", "RFC 4291", Embedding::Named(Carrier::Last32)),
    carrier(
        v6([0, 0, 0, 0, 0xffff, 0, 0, 0], 96, "::ffff:0:0:0/96"),
        "IPv4-translated",
        "RFC 2765",
        Embedding::Named(Carrier::Last32),
    ),
    carrier(
        v6([0x64, 0xff9b, 0, 0, 0, 0, 0, 0], 96, "64:ff9b::/96"),
        "NAT64 well-known prefix",
        "RFC 6052",
        Embedding::Judged(Carrier::Last32),
    ),
    row(v6([0x64, 0xff9b, 1, 0, 0, 0, 0, 0], 48, "64:ff9b:1::/48"), "local-use NAT64", "RFC 8215"),
    row(v6([0x100, 0, 0, 0, 0, 0, 0, 0], 64, "100::/64"), "discard-only", "RFC 6666"),
    row(v6([0x2001, 0, 0, 0, 0, 0, 0, 0], 23, "2001::/23"), "IETF protocol assignments", "RFC 2928"),
    carrier(
        v6([0x2001, 0, 0, 0, 0, 0, 0, 0], 32, "2001::/32"),
        "Teredo",
        "RFC 4380",
        Embedding::Named(Carrier::Teredo),
    ),
    row(v6([0x2001, 0x10, 0, 0, 0, 0, 0, 0], 28, "2001:10::/28"), "ORCHID, deprecated", "RFC 4843"),
    row(v6([0x2001, 0x20, 0, 0, 0, 0, 0, 0], 28, "2001:20::/28"), "ORCHIDv2", "RFC 7343"),
    row(v6([0x2001, 0xdb8, 0, 0, 0, 0, 0, 0], 32, "2001:db8::/32"), "documentation", "RFC 3849"),
    carrier(
        v6([0x2002, 0, 0, 0, 0, 0, 0, 0], 16, "2002::/16"),
        "6to4",
        "RFC 3056",
        Embedding::Judged(Carrier::SixToFour),
    ),
    row(v6([0x3fff, 0, 0, 0, 0, 0, 0, 0], 20, "3fff::/20"), "documentation", "RFC 9637"),
    row(v6([0x5f00, 0, 0, 0, 0, 0, 0, 0], 16, "5f00::/16"), "SRv6 SIDs", "RFC 9602"),
    row(v6([0xfc00, 0, 0, 0, 0, 0, 0, 0], 7, "fc00::/7"), "unique local", "RFC 4193"),
    row(v6([0xfe80, 0, 0, 0, 0, 0, 0, 0], 10, "fe80::/10"), "link-local", "RFC 4291"),
    row(v6([0xfec0, 0, 0, 0, 0, 0, 0, 0], 10, "fec0::/10"), "site-local, deprecated", "RFC 3879"),
    row(v6([0xff00, 0, 0, 0, 0, 0, 0, 0], 8, "ff00::/8"), "multicast", "RFC 4291"),
    // The rest of the space outside 2000::/3.
    row(v6([0; 8], 8, "::/8"), RESERVED_V6, "RFC 4291"),
    row(v6([0x100, 0, 0, 0, 0, 0, 0, 0], 8, "100::/8"), RESERVED_V6, "RFC 4291"),
    row(v6([0x200, 0, 0, 0, 0, 0, 0, 0], 7, "200::/7"), RESERVED_V6, "RFC 4291"),
    row(v6([0x400, 0, 0, 0, 0, 0, 0, 0], 6, "400::/6"), RESERVED_V6, "RFC 4291"),
    row(v6([0x800, 0, 0, 0, 0, 0, 0, 0], 5, "800::/5"), RESERVED_V6, "RFC 4291"),
    row(v6([0x1000, 0, 0, 0, 0, 0, 0, 0], 4, "1000::/4"), RESERVED_V6, "RFC 4291"),
    row(v6([0x4000, 0, 0, 0, 0, 0, 0, 0], 3, "4000::/3"), RESERVED_V6, "RFC 4291"),
    row(v6([0x6000, 0, 0, 0, 0, 0, 0, 0], 3, "6000::/3"), RESERVED_V6, "RFC 4291"),
    row(v6([0x8000, 0, 0, 0, 0, 0, 0, 0], 3, "8000::/3"), RESERVED_V6, "RFC 4291"),
    row(v6([0xa000, 0, 0, 0, 0, 0, 0, 0], 3, "a000::/3"), RESERVED_V6, "RFC 4291"),
    row(v6([0xc000, 0, 0, 0, 0, 0, 0, 0], 3, "c000::/3"), RESERVED_V6, "RFC 4291"),
    row(v6([0xe000, 0, 0, 0, 0, 0, 0, 0], 4, "e000::/4"), RESERVED_V6, "RFC 4291"),
    row(v6([0xf000, 0, 0, 0, 0, 0, 0, 0], 5, "f000::/5"), RESERVED_V6, "RFC 4291"),
    row(v6([0xf800, 0, 0, 0, 0, 0, 0, 0], 6, "f800::/6"), RESERVED_V6, "RFC 4291"),
    row(v6([0xfe00, 0, 0, 0, 0, 0, 0, 0], 9, "fe00::/9"), RESERVED_V6, "RFC 4291"),
];

/// An IPv4 address an IPv6 form carries, as an answer names it.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct Embedded {
    /// `server` or `client` for Teredo, else empty.
    pub role: &'static str,
    pub addr: Ipv4Addr,
    /// The IPv4 row it falls in; `None`: it is public.
    pub row: Option<&'static Row>,
}

/// Why an address is not public: the row it falls in and, for an IPv6 form
/// carrying an IPv4 address, that address and its row. Its `Display` is
/// what refusals print, e.g. `loopback (127.0.0.0/8, RFC 1122)` or
/// `6to4 (2002::/16, RFC 3056) embedding 127.0.0.1: loopback (127.0.0.0/8, RFC 1122)`.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct Special {
    pub row: &'static Row,
    pub embedded: Option<Embedded>,
}

impl Special {
    /// The row's short name (`loopback`, `6to4`, ...).
    pub fn name(&self) -> &'static str {
        self.row.name
    }

    /// The row's RFC.
    pub fn rfc(&self) -> &'static str {
        self.row.rfc
    }
}

impl fmt::Display for Row {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        write!(f, "{} ({}, {})", self.name, self.prefix, self.rfc)
    }
}

impl fmt::Display for Special {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        write!(f, "{}", self.row)?;
        if let Some(e) = &self.embedded {
            f.write_str(" embedding ")?;
            if !e.role.is_empty() {
                write!(f, "{} ", e.role)?;
            }
            write!(f, "{}", e.addr)?;
            if let Some(row) = e.row {
                write!(f, ": {row}")?;
            }
        }
        Ok(())
    }
}

/// Whether an address is on the public internet: in no row of the
/// special-purpose table, or an IPv4-carrying form whose IPv4 address is
/// public (see the module's doc).
pub fn is_public(ip: IpAddr) -> bool {
    special_purpose(ip).is_none()
}

/// The row an address falls in when it is not public; `None` when it is.
pub fn special_purpose(ip: IpAddr) -> Option<Special> {
    match ip {
        IpAddr::V4(v4) => special_v4(v4).map(|row| Special { row, embedded: None }),
        IpAddr::V6(v6) => special_v6(v6),
    }
}

/// The most specific row of `table` holding `ip`.
fn longest(table: &'static [Row], ip: IpAddr) -> Option<&'static Row> {
    table.iter().filter(|r| r.prefix.contains(ip)).max_by_key(|r| r.prefix.bits)
}

fn special_v4(ip: Ipv4Addr) -> Option<&'static Row> {
    longest(IPV4, ip.into())
}

fn special_v6(ip: Ipv6Addr) -> Option<Special> {
    let row = longest(IPV6, ip.into())?;
    let (judged, carrier) = match row.embedding {
        Embedding::None => return Some(Special { row, embedded: None }),
        Embedding::Judged(c) => (true, c),
        Embedding::Named(c) => (false, c),
    };
    let bits = u128::from(ip);
    let carried: Vec<(&'static str, Ipv4Addr)> = match carrier {
        Carrier::Last32 => vec![("", Ipv4Addr::from(bits as u32))],
        Carrier::SixToFour => vec![("", Ipv4Addr::from((bits >> 80) as u32))],
        Carrier::Teredo => {
            vec![("server", Ipv4Addr::from((bits >> 64) as u32)), ("client", Ipv4Addr::from(!(bits as u32)))]
        }
    };
    let judged_v4: Vec<Embedded> =
        carried.into_iter().map(|(role, addr)| Embedded { role, addr, row: special_v4(addr) }).collect();
    match judged_v4.iter().find(|e| e.row.is_some()) {
        Some(e) => Some(Special { row, embedded: Some(*e) }),
        None if judged => None,
        // Both Teredo addresses public: nothing worth naming.
        None if carrier == Carrier::Teredo => Some(Special { row, embedded: None }),
        None => Some(Special { row, embedded: judged_v4.first().copied() }),
    }
}

/// Sorts `addrs` (addresses, or socket addresses: `ip_of` reads the address)
/// into those `refuse` lets through, in their order, and those it refuses,
/// each address once with its row: what [`not_public`] words.
pub fn sort_out<A: Copy>(
    addrs: &[A],
    ip_of: impl Fn(A) -> IpAddr,
    refuse: impl Fn(IpAddr) -> Option<Special>,
) -> (Vec<A>, Vec<(IpAddr, Special)>) {
    let (mut allowed, mut refused): (Vec<A>, Vec<(IpAddr, Special)>) = (vec![], vec![]);
    for &a in addrs {
        let ip = ip_of(a);
        match refuse(ip) {
            None => allowed.push(a),
            Some(special) if !refused.iter().any(|(seen, _)| *seen == ip) => refused.push((ip, special)),
            Some(_) => {}
        }
    }
    (allowed, refused)
}

/// How refusals word a destination that is not public: `host` (a literal
/// address, IPv6 with or without brackets, or a name) and the non-public
/// addresses it is or resolves to, each with its row:
/// `127.0.0.1 is not a public address: loopback (127.0.0.0/8, RFC 1122)`,
/// `localhost is not a public address: 127.0.0.1 is loopback (…), ::1 is loopback (…)`.
pub fn not_public(host: &str, found: &[(IpAddr, Special)]) -> String {
    let literal = host.trim_start_matches('[').trim_end_matches(']').parse::<IpAddr>().ok();
    match found {
        [(ip, special)] if literal == Some(*ip) => format!("{ip} is not a public address: {special}"),
        [] => format!("{host} is not a public address"),
        _ => {
            let each: Vec<String> = found.iter().map(|(ip, special)| format!("{ip} is {special}")).collect();
            format!("{host} is not a public address: {}", each.join(", "))
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    fn ip(s: &str) -> IpAddr {
        s.parse().unwrap_or_else(|e| panic!("{s}: {e}"))
    }

    fn public(s: &str) -> bool {
        is_public(ip(s))
    }

    #[test]
    fn sorting_out_keeps_the_allowed_in_order_and_names_each_refused_address_once() {
        let addrs = [ip("8.8.8.8"), ip("127.0.0.1"), ip("1.1.1.1"), ip("10.0.0.1"), ip("127.0.0.1")];
        let (allowed, refused) = sort_out(&addrs, |a| a, special_purpose);
        assert_eq!(allowed, [ip("8.8.8.8"), ip("1.1.1.1")]);
        let refused: Vec<(IpAddr, &str)> = refused.iter().map(|(a, s)| (*a, s.name())).collect();
        assert_eq!(refused, [(ip("127.0.0.1"), "loopback"), (ip("10.0.0.1"), "private-use")]);
        // A policy of its own decides: here, nothing is refused.
        assert_eq!(sort_out(&addrs, |a| a, |_| None), (addrs.to_vec(), vec![]));
    }

    fn special(s: &str) -> Special {
        special_purpose(ip(s)).unwrap_or_else(|| panic!("{s} should not be public"))
    }

    /// One address per row, and the row (by prefix) it must fall in.
    const EVERY_ROW: &[(&str, &str)] = &[
        ("0.1.2.3", "0.0.0.0/8"),
        ("0.0.0.0", "0.0.0.0/32"),
        ("10.1.2.3", "10.0.0.0/8"),
        ("100.64.0.1", "100.64.0.0/10"),
        ("100.127.255.255", "100.64.0.0/10"),
        ("127.0.0.1", "127.0.0.0/8"),
        ("127.255.255.254", "127.0.0.0/8"),
        ("169.254.169.254", "169.254.0.0/16"),
        ("172.16.0.1", "172.16.0.0/12"),
        ("172.31.255.255", "172.16.0.0/12"),
        ("192.0.0.8", "192.0.0.0/24"),
        ("192.0.2.1", "192.0.2.0/24"),
        ("192.31.196.1", "192.31.196.0/24"),
        ("192.52.193.1", "192.52.193.0/24"),
        ("192.88.99.1", "192.88.99.0/24"),
        ("192.168.1.1", "192.168.0.0/16"),
        ("192.175.48.1", "192.175.48.0/24"),
        ("198.18.0.1", "198.18.0.0/15"),
        ("198.19.255.255", "198.18.0.0/15"),
        ("198.51.100.7", "198.51.100.0/24"),
        ("203.0.113.9", "203.0.113.0/24"),
        ("224.0.0.1", "224.0.0.0/4"),
        ("239.255.255.250", "224.0.0.0/4"),
        ("240.0.0.1", "240.0.0.0/4"),
        ("255.255.255.254", "240.0.0.0/4"),
        ("255.255.255.255", "255.255.255.255/32"),
        ("::", "::/128"),
        ("::1", "::1/128"),
        ("::ffff:10.0.0.1", "::ffff:0:0/96"),
        ("::7f00:1", "::/96"),
        ("::ffff:0:7f00:1", "::ffff:0:0:0/96"),
        ("64:ff9b::a00:1", "64:ff9b::/96"),
        ("64:ff9b:1::1", "64:ff9b:1::/48"),
        ("100::1", "100::/64"),
        ("2001:1::1", "2001::/23"),
        ("2001:1ff::1", "2001::/23"),
        ("2001:0:4136:e378:8000:63bf:80ff:fffe", "2001::/32"),
        ("2001:10::1", "2001:10::/28"),
        ("2001:20::1", "2001:20::/28"),
        ("2001:db8::1", "2001:db8::/32"),
        ("2002:7f00:1::", "2002::/16"),
        ("3fff::1", "3fff::/20"),
        ("3fff:fff::1", "3fff::/20"),
        ("5f00::1", "5f00::/16"),
        ("fc00::1", "fc00::/7"),
        ("fd12:3456::1", "fc00::/7"),
        ("fe80::1", "fe80::/10"),
        ("febf::1", "fe80::/10"),
        ("fec0::1", "fec0::/10"),
        ("ff02::1", "ff00::/8"),
        ("1::1", "::/8"),
        ("100:1::1", "100::/8"),
        ("200::1", "200::/7"),
        ("400::1", "400::/6"),
        ("800::1", "800::/5"),
        ("1000::1", "1000::/4"),
        ("4000::1", "4000::/3"),
        ("6000::1", "6000::/3"),
        ("8000::1", "8000::/3"),
        ("a000::1", "a000::/3"),
        ("c000::1", "c000::/3"),
        ("e000::1", "e000::/4"),
        ("f000::1", "f000::/5"),
        ("f800::1", "f800::/6"),
        ("fe00::1", "fe00::/9"),
    ];

    #[test]
    fn every_row_is_found_for_an_address_inside_it() {
        for (addr, prefix) in EVERY_ROW {
            assert_eq!(special(addr).row.prefix.text, *prefix, "{addr}");
        }
        for r in IPV4.iter().chain(IPV6) {
            assert!(EVERY_ROW.iter().any(|(_, p)| *p == r.prefix.text), "no address tests {}", r.prefix);
        }
    }

    #[test]
    fn prefixes_are_written_as_they_are_stored_with_no_host_bits_and_no_duplicates() {
        for r in IPV4.iter().chain(IPV6) {
            let (addr, bits) = r.prefix.text.split_once('/').unwrap();
            assert_eq!(ip(addr), r.prefix.addr, "{}", r.prefix);
            assert_eq!(bits.parse::<u8>().unwrap(), r.prefix.bits, "{}", r.prefix);
            assert!(r.prefix.contains(r.prefix.addr), "{} has host bits", r.prefix);
            let host_bits = match r.prefix.addr {
                IpAddr::V4(a) => u128::from(u32::from(a)) & (u128::from(u32::MAX) >> r.prefix.bits),
                IpAddr::V6(a) => u128::from(a) & u128::MAX.checked_shr(u32::from(r.prefix.bits)).unwrap_or(0),
            };
            assert_eq!(host_bits, 0, "{} has host bits", r.prefix);
            let same =
                IPV4.iter().chain(IPV6).filter(|o| o.prefix.addr == r.prefix.addr && o.prefix.bits == r.prefix.bits);
            assert_eq!(same.count(), 1, "{} twice", r.prefix);
            assert!(r.rfc.starts_with("RFC ") && !r.name.is_empty(), "{r}");
        }
    }

    #[test]
    fn nothing_outside_global_unicast_is_public_but_nat64_and_mapped_forms_of_public_ipv4() {
        for first in 0..=u16::MAX {
            for rest in [[0u16; 7], [1, 2, 3, 4, 5, 6, 7], [0xffff; 7]] {
                let a = Ipv6Addr::new(first, rest[0], rest[1], rest[2], rest[3], rest[4], rest[5], rest[6]);
                if !(0x2000..=0x3fff).contains(&first) {
                    assert!(!is_public(a.into()), "{a}");
                }
            }
        }
        assert!(public("64:ff9b::808:808"));
        assert!(public("::ffff:8.8.8.8"));
    }

    #[test]
    fn ipv4_carried_in_ipv6_is_judged_by_the_ipv4_address() {
        // Loopback, however it is spelled.
        for s in ["::ffff:127.0.0.1", "::ffff:7f00:1", "::ffff:0:7f00:1", "::7f00:1", "2002:7f00:1::"] {
            let sp = special(s);
            let e = sp.embedded.unwrap_or_else(|| panic!("{s}: {sp}"));
            assert_eq!((e.addr, e.row.map(|r| r.name)), (Ipv4Addr::LOCALHOST, Some("loopback")), "{s}: {sp}");
        }
        assert_eq!(
            special("2002:7f00:1::").to_string(),
            "6to4 (2002::/16, RFC 3056) embedding 127.0.0.1: loopback (127.0.0.0/8, RFC 1122)"
        );
        assert_eq!(
            special("::ffff:7f00:1").to_string(),
            "IPv4-mapped (::ffff:0:0/96, RFC 4291) embedding 127.0.0.1: loopback (127.0.0.0/8, RFC 1122)"
        );
        assert_eq!(
            special("::ffff:0:7f00:1").to_string(),
            "IPv4-translated (::ffff:0:0:0/96, RFC 2765) embedding 127.0.0.1: loopback (127.0.0.0/8, RFC 1122)"
        );
        assert_eq!(special("2002:a00:1::1").embedded.and_then(|e| e.row).map(|r| r.name), Some("private-use"));
        assert_eq!(
            special("64:ff9b::a00:1").to_string(),
            "NAT64 well-known prefix (64:ff9b::/96, RFC 6052) embedding 10.0.0.1: private-use (10.0.0.0/8, RFC 1918)"
        );
        assert_eq!(special("64:ff9b:1::1").to_string(), "local-use NAT64 (64:ff9b:1::/48, RFC 8215)");
        assert_eq!(special("64:ff9b:1::808:808").name(), "local-use NAT64");
        // Forms that stand for their IPv4 address pass when it is public.
        for s in ["64:ff9b::808:808", "::ffff:8.8.8.8", "2002:808:808::1"] {
            assert!(public(s), "{s}: {}", special(s));
        }
        // Deprecated IPv4-compatible and IPv4-translated forms never do.
        assert_eq!(special("::808:808").to_string(), "IPv4-compatible, deprecated (::/96, RFC 4291) embedding 8.8.8.8");
        assert_eq!(special("::ffff:0:808:808").name(), "IPv4-translated");
    }

    #[test]
    fn teredo_is_never_public_and_names_a_private_server_or_client() {
        // Server 65.54.227.120, client 127.0.0.1 (0x7f000001 ^ 0xffffffff).
        let loopback_client = special("2001:0:4136:e378:8000:63bf:80ff:fffe");
        assert_eq!(
            loopback_client.to_string(),
            "Teredo (2001::/32, RFC 4380) embedding client 127.0.0.1: loopback (127.0.0.0/8, RFC 1122)"
        );
        // Client 10.0.0.1.
        let private_client = special("2001:0:4136:e378:8000:63bf:f5ff:fffe");
        assert_eq!(private_client.embedded.map(|e| (e.role, e.addr)), Some(("client", Ipv4Addr::new(10, 0, 0, 1))));
        // Server 10.0.0.1, client 8.8.8.8.
        let private_server = special("2001:0:a00:1:8000:63bf:f7f7:f7f7");
        assert_eq!(
            private_server.to_string(),
            "Teredo (2001::/32, RFC 4380) embedding server 10.0.0.1: private-use (10.0.0.0/8, RFC 1918)"
        );
        // Both public: refused all the same.
        let both_public = special("2001:0:4136:e378:8000:63bf:f7f7:f7f7");
        assert_eq!(both_public.to_string(), "Teredo (2001::/32, RFC 4380)");
    }

    #[test]
    fn plain_rows_print_name_prefix_and_rfc() {
        assert_eq!(special("10.0.0.5").to_string(), "private-use (10.0.0.0/8, RFC 1918)");
        assert_eq!((special("127.0.0.1").name(), special("127.0.0.1").rfc()), ("loopback", "RFC 1122"));
        assert_eq!(special("::1").to_string(), "loopback (::1/128, RFC 4291)");
        assert_eq!(special("255.255.255.255").name(), "limited broadcast");
        assert_eq!(special("0.0.0.0").rfc(), "RFC 1122");
    }

    #[test]
    fn ordinary_addresses_are_public() {
        for s in [
            "1.1.1.1",
            "8.8.8.8",
            "93.184.216.34",
            "172.32.0.1",
            "100.128.0.1",
            "192.0.1.1",
            "198.20.0.1",
            "223.255.255.255",
            "2606:4700::1111",
            "2a00:1450:4001::1",
            "2001:200::1",
            "2001:db9::1",
            "2002:808:808::1",
            "::ffff:8.8.8.8",
            "64:ff9b::808:808",
            "3fff:1000::1",
        ] {
            assert!(public(s), "{s} should be public: {:?}", special_purpose(ip(s)));
        }
    }

    #[test]
    fn refusal_wording_names_the_address_and_its_row() {
        let l4 = (ip("127.0.0.1"), special("127.0.0.1"));
        let l6 = (ip("::1"), special("::1"));
        assert_eq!(
            not_public("127.0.0.1", &[l4]),
            "127.0.0.1 is not a public address: loopback (127.0.0.0/8, RFC 1122)"
        );
        assert_eq!(not_public("[::1]", &[l6]), "::1 is not a public address: loopback (::1/128, RFC 4291)");
        assert_eq!(
            not_public("localhost", &[l4, l6]),
            "localhost is not a public address: 127.0.0.1 is loopback (127.0.0.0/8, RFC 1122), \
             ::1 is loopback (::1/128, RFC 4291)"
        );
        assert_eq!(
            not_public("one.example", &[l4]),
            "one.example is not a public address: 127.0.0.1 is loopback (127.0.0.0/8, RFC 1122)"
        );
    }
}
