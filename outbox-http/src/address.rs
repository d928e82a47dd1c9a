//! The address classification of the egress policy: which kind of non-public address an IP
//! is, the cloud metadata addresses, and the refusals. Pure and allow-list free; kept apart
//! from the policy (`egress`) and the error mapping (`error`), which both use it.

use std::fmt;
use std::net::{IpAddr, Ipv4Addr, Ipv6Addr};

/// Why an address is refused.
#[derive(Clone, Copy, Debug, PartialEq, Eq, Hash)]
#[non_exhaustive]
pub enum AddressKind {
    /// `127.0.0.0/8`, `::1`.
    Loopback,
    /// RFC 1918 (`10/8`, `172.16/12`, `192.168/16`) and deprecated IPv6 site-local.
    Private,
    /// `169.254/16`, `fe80::/10`.
    LinkLocal,
    /// Carrier-grade NAT, `100.64/10`.
    SharedAddressSpace,
    /// `fc00::/7`.
    UniqueLocal,
    /// `224/4`, `ff00::/8`.
    Multicast,
    /// `0.0.0.0`, `::`.
    Unspecified,
    /// `255.255.255.255`.
    Broadcast,
    /// `192.0.2/24`, `198.51.100/24`, `203.0.113/24`, `2001:db8::/32`, `3fff::/20`.
    Documentation,
    /// `198.18/15`, `2001:2::/48`.
    Benchmarking,
    /// The well-known cloud metadata and credential addresses ([`METADATA_ADDRESSES`]):
    /// refused in every mode, whatever the allow-lists say.
    Metadata,
    /// `0.0.0.0/8` ("this network").
    ThisNetwork,
    /// Other special-purpose space: `192.0.0/24`, `192.88.99/24`, `240/4`, IPv6 outside
    /// global unicast (`2000::/3`), deprecated IPv4-compatible IPv6.
    Reserved,
}

impl AddressKind {
    /// A stable name (`loopback`, `private`, `link-local`, ...).
    pub fn as_str(self) -> &'static str {
        match self {
            AddressKind::Loopback => "loopback",
            AddressKind::Private => "private",
            AddressKind::LinkLocal => "link-local",
            AddressKind::SharedAddressSpace => "shared-address-space",
            AddressKind::UniqueLocal => "unique-local",
            AddressKind::Multicast => "multicast",
            AddressKind::Unspecified => "unspecified",
            AddressKind::Broadcast => "broadcast",
            AddressKind::Documentation => "documentation",
            AddressKind::Benchmarking => "benchmarking",
            AddressKind::Metadata => "cloud-metadata",
            AddressKind::ThisNetwork => "this-network",
            AddressKind::Reserved => "reserved",
        }
    }

    /// The kind of a non-public address; `None` for a public one. Pure: no allow-list.
    /// IPv4-mapped, IPv4-compatible, NAT64, 6to4 and Teredo IPv6 forms are judged by the
    /// IPv4 addresses they carry.
    pub fn of(ip: IpAddr) -> Option<AddressKind> {
        match ip {
            IpAddr::V4(v4) => v4_kind(v4),
            IpAddr::V6(v6) => v6_kind(v6),
        }
    }
}

impl fmt::Display for AddressKind {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.write_str(self.as_str())
    }
}

fn in4(ip: Ipv4Addr, net: [u8; 4], prefix: u32) -> bool {
    let mask = if prefix == 0 {
        0
    } else {
        u32::MAX << (32 - prefix)
    };
    u32::from(ip) & mask == u32::from(Ipv4Addr::from(net)) & mask
}

fn in6(ip: Ipv6Addr, net: Ipv6Addr, prefix: u32) -> bool {
    let mask = if prefix == 0 {
        0
    } else {
        u128::MAX << (128 - prefix)
    };
    u128::from(ip) & mask == u128::from(net) & mask
}

/// The well-known cloud metadata, credential and host-agent addresses. The policy refuses
/// them in every mode — `allow_private`, an allowed CIDR or an allowed host name never
/// admits them — because a webhook pointed at one of them would hand the cloud's
/// credentials to whoever controls the endpoint. IPv4-mapped and other IPv6 forms that
/// carry one of the IPv4 addresses are refused too.
pub const METADATA_ADDRESSES: &[IpAddr] = &[
    // AWS, GCP, Azure, OpenStack, Oracle, DigitalOcean, Hetzner, Linode: the instance metadata service.
    IpAddr::V4(Ipv4Addr::new(169, 254, 169, 254)),
    // AWS ECS/Fargate container credentials (AWS_CONTAINER_CREDENTIALS_RELATIVE_URI).
    IpAddr::V4(Ipv4Addr::new(169, 254, 170, 2)),
    // AWS EKS Pod Identity agent.
    IpAddr::V4(Ipv4Addr::new(169, 254, 170, 23)),
    // AWS VPC DNS resolver (Route 53 Resolver).
    IpAddr::V4(Ipv4Addr::new(169, 254, 169, 253)),
    // AWS Time Sync Service.
    IpAddr::V4(Ipv4Addr::new(169, 254, 169, 123)),
    // Alibaba Cloud metadata.
    IpAddr::V4(Ipv4Addr::new(100, 100, 100, 200)),
    // Tencent Cloud metadata.
    IpAddr::V4(Ipv4Addr::new(169, 254, 0, 23)),
    // Scaleway metadata.
    IpAddr::V4(Ipv4Addr::new(169, 254, 42, 42)),
    // Oracle Cloud legacy metadata.
    IpAddr::V4(Ipv4Addr::new(192, 0, 0, 192)),
    // Azure WireServer (host agent; a public address reachable only from inside Azure).
    IpAddr::V4(Ipv4Addr::new(168, 63, 129, 16)),
    // AWS IMDS, DNS resolver, time sync and EKS Pod Identity over IPv6.
    IpAddr::V6(Ipv6Addr::new(0xfd00, 0x0ec2, 0, 0, 0, 0, 0, 0x0254)),
    IpAddr::V6(Ipv6Addr::new(0xfd00, 0x0ec2, 0, 0, 0, 0, 0, 0x0253)),
    IpAddr::V6(Ipv6Addr::new(0xfd00, 0x0ec2, 0, 0, 0, 0, 0, 0x0123)),
    IpAddr::V6(Ipv6Addr::new(0xfd00, 0x0ec2, 0, 0, 0, 0, 0, 0x0023)),
    // GCP metadata over IPv6.
    IpAddr::V6(Ipv6Addr::new(0xfd20, 0x00ce, 0, 0, 0, 0, 0, 0x0254)),
    // Scaleway metadata over IPv6.
    IpAddr::V6(Ipv6Addr::new(0xfd00, 0x0042, 0, 0, 0, 0, 0, 0x0042)),
];

/// Whether `ip` is one of [`METADATA_ADDRESSES`], directly or carried in an IPv6 form.
pub(crate) fn is_metadata(ip: IpAddr) -> bool {
    AddressKind::of(ip) == Some(AddressKind::Metadata)
}

fn v4_kind(ip: Ipv4Addr) -> Option<AddressKind> {
    use AddressKind::*;
    if METADATA_ADDRESSES.contains(&IpAddr::V4(ip)) {
        return Some(Metadata);
    }
    let table: [([u8; 4], u32, AddressKind); 17] = [
        ([255, 255, 255, 255], 32, Broadcast),
        ([0, 0, 0, 0], 32, Unspecified),
        ([0, 0, 0, 0], 8, ThisNetwork),
        ([127, 0, 0, 0], 8, Loopback),
        ([10, 0, 0, 0], 8, Private),
        ([172, 16, 0, 0], 12, Private),
        ([192, 168, 0, 0], 16, Private),
        ([100, 64, 0, 0], 10, SharedAddressSpace),
        ([169, 254, 0, 0], 16, LinkLocal),
        ([192, 0, 0, 0], 24, Reserved),
        ([192, 0, 2, 0], 24, Documentation),
        ([198, 51, 100, 0], 24, Documentation),
        ([203, 0, 113, 0], 24, Documentation),
        ([198, 18, 0, 0], 15, Benchmarking),
        ([192, 88, 99, 0], 24, Reserved),
        ([224, 0, 0, 0], 4, Multicast),
        ([240, 0, 0, 0], 4, Reserved),
    ];
    table
        .iter()
        .find(|(net, prefix, _)| in4(ip, *net, *prefix))
        .map(|(_, _, kind)| *kind)
}

fn v6_kind(ip: Ipv6Addr) -> Option<AddressKind> {
    use AddressKind::*;
    let bits = u128::from(ip);
    let seg = ip.segments();
    if METADATA_ADDRESSES.contains(&IpAddr::V6(ip)) {
        return Some(Metadata);
    }
    if ip.is_unspecified() {
        return Some(Unspecified);
    }
    if ip.is_loopback() {
        return Some(Loopback);
    }
    // Forms that carry an IPv4 address: judge the IPv4 address.
    let low32 = Ipv4Addr::from((bits & 0xffff_ffff) as u32);
    if let Some(v4) = ip.to_ipv4_mapped() {
        return v4_kind(v4);
    }
    if bits >> 32 == 0 {
        // IPv4-compatible (`::a.b.c.d`), deprecated and never routed.
        return Some(v4_kind(low32).unwrap_or(Reserved));
    }
    if in6(ip, Ipv6Addr::new(0x64, 0xff9b, 0, 0, 0, 0, 0, 0), 96) {
        return v4_kind(low32); // NAT64 well-known prefix
    }
    if seg[0] == 0x2002 {
        // 6to4: 2002:AABB:CCDD::/48 carries AA.BB.CC.DD
        let v4 = Ipv4Addr::from(((bits >> 80) & 0xffff_ffff) as u32);
        return v4_kind(v4);
    }
    if seg[0] == 0x2001 && seg[1] == 0 {
        // Teredo: the server's address, and the client's (inverted) in the last 32 bits.
        let server = Ipv4Addr::from(((bits >> 64) & 0xffff_ffff) as u32);
        let client = Ipv4Addr::from(!((bits & 0xffff_ffff) as u32));
        return v4_kind(server).or_else(|| v4_kind(client));
    }
    let table: [(Ipv6Addr, u32, AddressKind); 8] = [
        (Ipv6Addr::new(0xfe80, 0, 0, 0, 0, 0, 0, 0), 10, LinkLocal),
        (Ipv6Addr::new(0xfec0, 0, 0, 0, 0, 0, 0, 0), 10, Private),
        (Ipv6Addr::new(0xfc00, 0, 0, 0, 0, 0, 0, 0), 7, UniqueLocal),
        (Ipv6Addr::new(0xff00, 0, 0, 0, 0, 0, 0, 0), 8, Multicast),
        (
            Ipv6Addr::new(0x2001, 0x0db8, 0, 0, 0, 0, 0, 0),
            32,
            Documentation,
        ),
        (
            Ipv6Addr::new(0x3fff, 0, 0, 0, 0, 0, 0, 0),
            20,
            Documentation,
        ),
        (
            Ipv6Addr::new(0x2001, 0x0002, 0, 0, 0, 0, 0, 0),
            48,
            Benchmarking,
        ),
        (Ipv6Addr::new(0x0100, 0, 0, 0, 0, 0, 0, 0), 64, Reserved),
    ];
    if let Some((_, _, kind)) = table.iter().find(|(net, p, _)| in6(ip, *net, *p)) {
        return Some(*kind);
    }
    // Everything outside global unicast (2000::/3) is special-purpose.
    if seg[0] & 0xe000 != 0x2000 {
        return Some(Reserved);
    }
    None
}

/// Why the egress policy refused a URL or an address. The message names the reason, never
/// the address.
#[derive(Clone, Debug, PartialEq, Eq, thiserror::Error)]
#[non_exhaustive]
pub enum EgressRefusal {
    /// The URL is not `https` (and `http` is not allowed).
    #[error("the egress policy allows only https")]
    Scheme,
    /// The host is, or resolved to, a refused address.
    #[error("the egress policy refuses {0} addresses")]
    Address(AddressKind),
}

/// A failed policy lookup: refused, or the name did not resolve.
#[derive(Clone, Debug, PartialEq, Eq, thiserror::Error)]
#[non_exhaustive]
pub enum EgressError {
    /// The policy refused an address.
    #[error(transparent)]
    Refused(#[from] EgressRefusal),
    /// The host name did not resolve to any address.
    #[error("the host name did not resolve")]
    NotFound,
}
