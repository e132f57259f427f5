//! Which of our listen addresses to put in our advert.
//!
//! libp2p reports one address per interface for a wildcard listener. Announcing all of them
//! would send peers to addresses they cannot reach: loopback (unless that is all we have,
//! as in single-machine tests), link-local, and the default Docker bridge (172.17.0.0/16),
//! which exists on many hosts but routes nowhere useful. mDNS itself (libp2p-mdns 0.49)
//! already answers each interface only with that interface's own addresses.

use std::net::IpAddr;

use libp2p::Multiaddr;
use libp2p::multiaddr::Protocol;
use murmur_protocol::limits::ADVERT_ADDRS_MAX;

/// The addresses worth announcing, in a stable order, at most [`ADVERT_ADDRS_MAX`].
pub fn announceable<'a>(listen: impl IntoIterator<Item = &'a Multiaddr>) -> Vec<String> {
    let all: Vec<&Multiaddr> = listen.into_iter().collect();
    let routable: Vec<&&Multiaddr> = all.iter().filter(|a| ip(a).is_some_and(is_routable)).collect();
    let mut chosen: Vec<String> = if routable.is_empty() {
        all.iter().filter(|a| ip(a).is_some_and(|ip| !ip.is_unspecified())).map(ToString::to_string).collect()
    } else {
        routable.iter().map(ToString::to_string).collect()
    };
    chosen.sort();
    chosen.dedup();
    chosen.truncate(ADVERT_ADDRS_MAX);
    chosen
}

fn ip(addr: &Multiaddr) -> Option<IpAddr> {
    match addr.iter().next()? {
        Protocol::Ip4(ip) => Some(IpAddr::V4(ip)),
        Protocol::Ip6(ip) => Some(IpAddr::V6(ip)),
        _ => None,
    }
}

fn is_routable(ip: IpAddr) -> bool {
    match ip {
        IpAddr::V4(v4) => {
            let docker_bridge = v4.octets()[0] == 172 && v4.octets()[1] == 17;
            !(v4.is_loopback() || v4.is_link_local() || v4.is_unspecified() || docker_bridge)
        }
        IpAddr::V6(v6) => !(v6.is_loopback() || v6.is_unspecified() || v6.is_unicast_link_local()),
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    fn addrs(list: &[&str]) -> Vec<Multiaddr> {
        list.iter().map(|a| a.parse().unwrap()).collect()
    }

    #[test]
    fn loopback_docker_and_link_local_are_not_announced() {
        let listen = addrs(&[
            "/ip4/127.0.0.1/tcp/7421",
            "/ip4/172.17.0.1/tcp/7421",
            "/ip4/169.254.3.4/tcp/7421",
            "/ip4/192.168.1.5/tcp/7421",
            "/ip4/192.168.1.5/udp/7421/quic-v1",
        ]);
        assert_eq!(announceable(&listen), ["/ip4/192.168.1.5/tcp/7421", "/ip4/192.168.1.5/udp/7421/quic-v1"]);
    }

    #[test]
    fn loopback_only_hosts_announce_loopback() {
        let listen = addrs(&["/ip4/127.0.0.1/tcp/7421", "/ip4/0.0.0.0/tcp/1"]);
        assert_eq!(announceable(&listen), ["/ip4/127.0.0.1/tcp/7421"]);
    }
}
