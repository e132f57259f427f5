//! A network lab on one Linux machine: hosts in network namespaces joined by a bridge, so
//! tests can exercise what crosses a real network (multicast DNS, non-loopback addresses).
//!
//! Needs root (CI runs as root). [`Lab::new`] returns `Err(reason)` where namespaces cannot
//! be made, so a test can skip with that reason printed. Everything is removed on drop.

use std::process::Command;

/// Hosts joined by a bridge on `10.77.<k>.0/24`; the root namespace is `10.77.<k>.1`.
#[derive(Debug)]
pub struct Lab {
    prefix: String,
    subnet: u8,
    hosts: usize,
}

fn run(args: &[&str]) -> Result<(), String> {
    let out = Command::new(args[0]).args(&args[1..]).output().map_err(|e| format!("{}: {e}", args[0]))?;
    if out.status.success() {
        Ok(())
    } else {
        Err(format!("`{}` failed: {}", args.join(" "), String::from_utf8_lossy(&out.stderr).trim()))
    }
}

/// Why bridged traffic between the lab's namespaces would be dropped, if it would: with
/// `net.bridge.bridge-nf-call-iptables = 1`, frames crossing a bridge pass the iptables
/// FORWARD chain, and Docker's daemon (run with iptables on) sets its policy to DROP.
#[must_use]
pub fn firewall_drops_bridged_traffic() -> Option<String> {
    let through_iptables = std::fs::read_to_string("/proc/sys/net/bridge/bridge-nf-call-iptables")
        .is_ok_and(|v| v.trim() == "1");
    if !through_iptables {
        return None;
    }
    ["iptables", "iptables-legacy"].into_iter().find_map(|program| {
        let out = Command::new(program).args(["-S", "FORWARD"]).output().ok()?;
        let rules = String::from_utf8_lossy(&out.stdout);
        rules.lines().any(|l| l.trim() == "-P FORWARD DROP").then(|| {
            format!(
                "the host's firewall drops traffic between the lab's namespaces: `{program}` FORWARD policy is DROP \
                 and net.bridge.bridge-nf-call-iptables = 1 (Docker's daemon does this when it runs with iptables). \
                 Restore it with `{program} -P FORWARD ACCEPT`, and start dockerd with --iptables=false \
                 (what .ci/run does)"
            )
        })
    })
}

impl Lab {
    /// Creates `hosts` namespaces on a fresh bridge.
    pub fn new(hosts: usize) -> Result<Self, String> {
        let pid = std::process::id();
        let lab = Self { prefix: format!("mu{}", pid % 100_000), subnet: (pid % 200) as u8 + 20, hosts: 0 };
        let mut lab = lab;
        let bridge = lab.bridge();
        run(&["ip", "link", "add", &bridge, "type", "bridge", "mcast_snooping", "0"])?;
        run(&["ip", "link", "set", &bridge, "up"])?;
        run(&["ip", "addr", "add", &format!("10.77.{}.1/24", lab.subnet), "dev", &bridge])?;
        for i in 0..hosts {
            let ns = lab.namespace(i);
            let outside = format!("{}v{i}", lab.prefix);
            let inside = format!("{}w{i}", lab.prefix);
            run(&["ip", "netns", "add", &ns])?;
            lab.hosts = i + 1;
            run(&["ip", "link", "add", &outside, "type", "veth", "peer", "name", &inside])?;
            run(&["ip", "link", "set", &inside, "netns", &ns])?;
            run(&["ip", "link", "set", &outside, "master", &bridge, "up"])?;
            run(&["ip", "-n", &ns, "link", "set", &inside, "name", "eth0"])?;
            run(&["ip", "-n", &ns, "addr", "add", &format!("{}/24", lab.ip(i)), "dev", "eth0"])?;
            run(&["ip", "-n", &ns, "link", "set", "eth0", "up"])?;
            run(&["ip", "-n", &ns, "link", "set", "lo", "up"])?;
            run(&["ip", "-n", &ns, "route", "add", "224.0.0.0/4", "dev", "eth0"])?;
        }
        if let Some(reason) = firewall_drops_bridged_traffic() {
            // The lab exists but nothing would cross it: say so instead of timing out.
            panic!("{reason}");
        }
        Ok(lab)
    }

    fn bridge(&self) -> String {
        format!("{}br", self.prefix)
    }

    /// Name of host `i`'s namespace.
    pub fn namespace(&self, i: usize) -> String {
        format!("{}n{i}", self.prefix)
    }

    /// Host `i`'s address.
    pub fn ip(&self, i: usize) -> String {
        format!("10.77.{}.{}", self.subnet, 10 + i)
    }

    /// The command prefix that runs a program on host `i`.
    pub fn launcher(&self, i: usize) -> Vec<String> {
        vec!["ip".into(), "netns".into(), "exec".into(), self.namespace(i)]
    }
}

impl Drop for Lab {
    fn drop(&mut self) {
        for i in 0..self.hosts {
            let _ = run(&["ip", "netns", "del", &self.namespace(i)]);
        }
        let _ = run(&["ip", "link", "del", &self.bridge()]);
    }
}
