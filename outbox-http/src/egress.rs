//! The egress policy: which webhook URLs and addresses the transport may connect to.
//!
//! On by default: `https` only, and no address that leads into a private network, the
//! machine itself or a cloud metadata service. Names are resolved at every delivery and
//! every address is checked; the transport then connects only to the checked addresses
//! (its DNS resolver is [`PolicyResolver`], so nothing re-resolves between check and
//! connect).

use std::net::{IpAddr, Ipv4Addr, Ipv6Addr, SocketAddr};
use std::sync::Arc;

use ipnet::IpNet;
use outboxkit_core::EndpointUrl;

use crate::error::HttpError;

use crate::address::is_metadata;
pub use crate::address::{AddressKind, EgressError, EgressRefusal, METADATA_ADDRESSES};

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
            // (The host's text is written only when there is an allow-list to look it up in.)
            _ if !self.hosts.is_empty() && self.is_allowed_host(&url.host()) => Ok(()),
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

/// The same resolver for hyper-util's connector (the webhook transport's).
impl tower_service::Service<hyper_util::client::legacy::connect::dns::Name> for PolicyResolver {
    type Response = std::vec::IntoIter<SocketAddr>;
    type Error = EgressError;
    type Future = std::pin::Pin<
        Box<dyn std::future::Future<Output = Result<Self::Response, EgressError>> + Send>,
    >;

    fn poll_ready(
        &mut self,
        _: &mut std::task::Context<'_>,
    ) -> std::task::Poll<Result<(), EgressError>> {
        std::task::Poll::Ready(Ok(()))
    }

    fn call(&mut self, name: hyper_util::client::legacy::connect::dns::Name) -> Self::Future {
        let policy = self.policy.clone();
        Box::pin(async move { Ok(policy.resolve(name.as_str()).await?.into_iter()) })
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
