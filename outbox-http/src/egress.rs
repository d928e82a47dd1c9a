//! The egress policy: which webhook URLs and addresses the transport may connect to.
//!
//! On by default: `https` only, and no address that leads into a private network, the
//! machine itself or a cloud metadata service. Names are resolved at every delivery and
//! every address is checked; the transport then connects only to the checked addresses
//! (its DNS resolver is [`PolicyResolver`], so nothing re-resolves between check and
//! connect).

use std::fmt;
use std::net::{IpAddr, Ipv4Addr, Ipv6Addr, SocketAddr};
use std::sync::Arc;

use ipnet::IpNet;
use outboxkit_core::EndpointUrl;

use crate::error::HttpError;

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
fn is_metadata(ip: IpAddr) -> bool {
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

/// Which webhook destinations are allowed. `EgressPolicy::default()` is the safe setting:
/// `https` only, public addresses only, no allow-list.
///
/// ```
/// use std::net::IpAddr;
/// use outboxkit_http::EgressPolicy;
///
/// let policy = EgressPolicy::default();
/// assert!(policy.check_ip("10.1.2.3".parse::<IpAddr>()?).is_err());
/// assert!(policy.check_ip("93.184.215.14".parse::<IpAddr>()?).is_ok());
///
/// // a local test receiver
/// let local = EgressPolicy::default().allow_http(true).allow_cidr("127.0.0.0/8")?;
/// assert!(local.check_ip("127.0.0.1".parse::<IpAddr>()?).is_ok());
/// # Ok::<(), Box<dyn std::error::Error>>(())
/// ```
#[derive(Clone, Debug, Default, PartialEq, Eq)]
pub struct EgressPolicy {
    allow_http: bool,
    allow_private: bool,
    cidrs: Vec<IpNet>,
    hosts: Vec<String>,
}

/// A name without its trailing dot, lowercase.
fn normalize_host(host: &str) -> String {
    host.trim_end_matches('.').to_ascii_lowercase()
}

fn is_localhost(host: &str) -> bool {
    host == "localhost" || host.ends_with(".localhost")
}

fn is_invalid(host: &str) -> bool {
    host == "invalid" || host.ends_with(".invalid")
}

impl EgressPolicy {
    /// Allow plain `http` URLs (off by default; for local receivers in tests and demos).
    pub fn allow_http(mut self, allow: bool) -> Self {
        self.allow_http = allow;
        self
    }

    /// Admit addresses in this CIDR (`127.0.0.0/8`, `fd00::/8`) or this single address,
    /// whatever their kind.
    pub fn allow_cidr(mut self, cidr: &str) -> outboxkit_core::Result<Self> {
        let text = cidr.trim();
        let net = text
            .parse::<IpNet>()
            .or_else(|_| text.parse::<IpAddr>().map(IpNet::from))
            .map_err(|_| HttpError::InvalidCidr)?;
        self.cidrs.push(net.trunc());
        Ok(self)
    }

    /// Admit (`true`) the private kinds of address internal receivers live on: loopback,
    /// RFC 1918, link-local, CGNAT and IPv6 unique-local. Cloud metadata addresses stay
    /// refused.
    pub fn allow_private(mut self, allow: bool) -> Self {
        self.allow_private = allow;
        self
    }

    /// Admit this host name (exact match, case-insensitive): its addresses are not checked.
    pub fn allow_host(mut self, host: &str) -> Self {
        self.hosts
            .push(normalize_host(host.trim().trim_matches(['[', ']'])));
        self
    }

    /// Whether plain `http` is allowed.
    pub fn allows_http(&self) -> bool {
        self.allow_http
    }

    /// Whether `host` is on the allow-list of names.
    pub fn is_allowed_host(&self, host: &str) -> bool {
        let host = normalize_host(host);
        self.hosts.contains(&host)
    }

    fn in_allowed_cidr(&self, ip: IpAddr) -> bool {
        let mapped = match ip {
            IpAddr::V6(v6) => v6.to_ipv4_mapped().map(IpAddr::V4),
            IpAddr::V4(_) => None,
        };
        self.cidrs
            .iter()
            .any(|net| net.contains(&ip) || mapped.is_some_and(|m| net.contains(&m)))
    }

    /// Check one address: allowed when it is in an allowed CIDR or public, and never when it
    /// is a cloud metadata address ([`METADATA_ADDRESSES`]).
    pub fn check_ip(&self, ip: IpAddr) -> Result<(), EgressRefusal> {
        if is_metadata(ip) {
            return Err(EgressRefusal::Address(AddressKind::Metadata));
        }
        if self.in_allowed_cidr(ip) {
            return Ok(());
        }
        match AddressKind::of(ip) {
            Some(
                AddressKind::Loopback
                | AddressKind::Private
                | AddressKind::LinkLocal
                | AddressKind::SharedAddressSpace
                | AddressKind::UniqueLocal,
            ) if self.allow_private => Ok(()),
            Some(kind) => Err(EgressRefusal::Address(kind)),
            None => Ok(()),
        }
    }

    /// Check what can be checked without the network: the scheme and an IP-literal host.
    /// A host name is checked by [`EgressPolicy::resolve`] (at delivery time, through the
    /// transport's resolver; a caller vetting a new endpoint may call it too).
    pub fn check_url(&self, url: &EndpointUrl) -> Result<(), EgressRefusal> {
        match url.scheme() {
            "https" => {}
            "http" if self.allow_http => {}
            _ => return Err(EgressRefusal::Scheme),
        }
        let ip = match url.url().host() {
            Some(url::Host::Ipv4(v4)) => Some(IpAddr::V4(v4)),
            Some(url::Host::Ipv6(v6)) => Some(IpAddr::V6(v6)),
            _ => None,
        };
        match ip {
            Some(ip) if is_metadata(ip) => Err(EgressRefusal::Address(AddressKind::Metadata)),
            _ if self.is_allowed_host(&url.host()) => Ok(()),
            Some(ip) => self.check_ip(ip),
            None => Ok(()),
        }
    }

    /// Resolve `host` and check every address: all of them must pass (a name with one
    /// refused address is refused whole). An allowed host name is resolved and checked only
    /// against the cloud metadata addresses, which are refused in every mode.
    /// `localhost` names resolve to loopback and `.invalid` names to nothing without a
    /// lookup (RFC 6761). The returned addresses carry port 0.
    pub async fn resolve(&self, host: &str) -> Result<Vec<SocketAddr>, EgressError> {
        let name = normalize_host(host);
        if let Ok(ip) = name.trim_matches(['[', ']']).parse::<IpAddr>() {
            if !self.is_allowed_host(&name) || is_metadata(ip) {
                self.check_ip(ip)?;
            }
            return Ok(vec![SocketAddr::new(ip, 0)]);
        }
        let addrs: Vec<SocketAddr> = if is_invalid(&name) {
            Vec::new()
        } else if is_localhost(&name) {
            vec![
                SocketAddr::new(IpAddr::V4(Ipv4Addr::LOCALHOST), 0),
                SocketAddr::new(IpAddr::V6(Ipv6Addr::LOCALHOST), 0),
            ]
        } else {
            match tokio::net::lookup_host((name.as_str(), 0)).await {
                Ok(found) => found.collect(),
                Err(_) => Vec::new(),
            }
        };
        if addrs.is_empty() {
            return Err(EgressError::NotFound);
        }
        let allowed = self.is_allowed_host(&name);
        for a in &addrs {
            if !allowed || is_metadata(a.ip()) {
                self.check_ip(a.ip())?;
            }
        }
        Ok(addrs)
    }
}

/// The transport's DNS resolver: [`EgressPolicy::resolve`], so the connection goes only to
/// the addresses that were checked.
#[derive(Clone, Debug)]
pub struct PolicyResolver {
    policy: Arc<EgressPolicy>,
}

impl PolicyResolver {
    /// A resolver applying `policy`.
    pub fn new(policy: Arc<EgressPolicy>) -> Self {
        PolicyResolver { policy }
    }
}

impl reqwest::dns::Resolve for PolicyResolver {
    fn resolve(&self, name: reqwest::dns::Name) -> reqwest::dns::Resolving {
        let policy = self.policy.clone();
        let host = name.as_str().to_owned();
        Box::pin(async move {
            let addrs = policy.resolve(&host).await?;
            Ok(Box::new(addrs.into_iter()) as reqwest::dns::Addrs)
        })
    }
}

#[cfg(test)]
mod allow_private_tests {
    use super::*;

    #[test]
    fn allow_private_admits_internal_ranges_but_never_metadata() {
        let p = EgressPolicy::default().allow_private(true);
        for ok in [
            "127.0.0.1",
            "10.1.2.3",
            "192.168.1.1",
            "172.16.0.9",
            "100.64.0.1",
            "::1",
            "fd12::1",
            "fe80::1",
        ] {
            assert!(p.check_ip(ok.parse().unwrap()).is_ok(), "{ok}");
        }
        for refused in [
            "169.254.169.254",
            "fd00:ec2::254",
            "100.100.100.200",
            "224.0.0.1",
            "0.0.0.0",
            "192.0.2.1",
        ] {
            assert!(p.check_ip(refused.parse().unwrap()).is_err(), "{refused}");
        }
        let strict = EgressPolicy::default();
        assert!(strict.check_ip("10.1.2.3".parse().unwrap()).is_err());
    }
}

/// The egress policy as an endpoint-creation check: the scheme, then every address the host
/// resolves to, so `EndpointAdmin` refuses what deliveries would refuse, before writing.
#[async_trait::async_trait]
impl outboxkit_core::UrlPolicy for EgressPolicy {
    async fn check(&self, url: &EndpointUrl) -> outboxkit_core::Result<()> {
        let refused = |why: String| {
            outboxkit_core::Error::invalid_input(
                "url",
                format!("refused by the egress policy: {why}"),
            )
        };
        self.check_url(url).map_err(|e| refused(e.to_string()))?;
        self.resolve(&url.host())
            .await
            .map_err(|e| refused(e.to_string()))?;
        Ok(())
    }
}

#[cfg(test)]
mod url_policy_tests {
    use super::*;
    use outboxkit_core::UrlPolicy;

    #[tokio::test]
    async fn the_policy_refuses_at_creation_what_it_refuses_at_delivery() {
        let strict = EgressPolicy::default();
        let private = EgressPolicy::default().allow_http(true).allow_private(true);
        let cases = [
            ("http://93.184.215.14/x", false, true),
            ("https://127.0.0.1/x", false, true),
            ("https://[::1]/x", false, true),
            ("https://[::ffff:10.0.0.1]/x", false, true),
            ("https://localhost/x", false, true),
            ("https://169.254.169.254/latest", false, false),
            ("https://nonexistent.invalid/x", false, false),
            ("https://93.184.215.14/x", true, true),
        ];
        for (url, strict_ok, private_ok) in cases {
            let u = EndpointUrl::parse(url).unwrap();
            let r = strict.check(&u).await;
            assert_eq!(r.is_ok(), strict_ok, "{url} strict");
            if let Err(e) = r {
                assert_eq!(
                    (e.kind(), e.field()),
                    (outboxkit_core::ErrorKind::InvalidInput, Some("url"))
                );
                assert!(!e.to_string().contains(url), "the url is not echoed");
            }
            assert_eq!(private.check(&u).await.is_ok(), private_ok, "{url} private");
        }
    }
}
