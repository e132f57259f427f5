//! A network lab whose wire is a program: hosts in network namespaces, each with a tap
//! device as its `eth0`, joined by an Ethernet hub in this process that holds every frame
//! for a fixed one-way delay and can cut the hosts into two groups.
//!
//! It does what `tc qdisc … netem delay` and a firewall rule would do, for kernels without
//! `sch_netem` (this machine's has none). Traffic between hosts is real — their own kernels'
//! TCP, UDP and ARP — only the wire between them is emulated. Every host has only the hub:
//! the test reaches a host's loopback-bound API from a thread that joined the host's
//! namespace ([`HubLab::spawn_in`]), never across the hub, so observing adds no traffic.
//!
//! Needs root. [`HubLab::new`] returns `Err(reason)` where namespaces or taps cannot be
//! made, so a test can skip with that reason printed. Everything is removed on drop.

use std::fs::{File, OpenOptions};
use std::io::{Read, Write};
use std::os::fd::AsFd;
use std::process::Command;
use std::sync::atomic::{AtomicBool, AtomicU8, AtomicU64, Ordering};
use std::sync::mpsc::{Receiver, RecvTimeoutError, SyncSender, TrySendError, sync_channel};
use std::sync::{Arc, Mutex};
use std::thread::JoinHandle;
use std::time::{Duration, Instant};

use nix::libc;
use nix::poll::{PollFd, PollFlags, poll};
use nix::sched::{CloneFlags, setns};

/// Frames held for one host at most; beyond that the hub drops, as a full link would.
const QUEUE_FRAMES: usize = 8_192;
/// Largest frame read off a tap (a tap's MTU is 1,500; this leaves room for any offload).
const FRAME_MAX: usize = 65_536;
/// How often a blocked hub thread looks at the stop flag.
const WAKE: Duration = Duration::from_millis(50);

nix::ioctl_write_ptr_bad!(
    tun_set_iff,
    nix::request_code_write!(b'T', 202, std::mem::size_of::<libc::c_int>()),
    libc::ifreq
);

fn run(args: &[&str]) -> Result<(), String> {
    let out = Command::new(args[0]).args(&args[1..]).output().map_err(|e| format!("{}: {e}", args[0]))?;
    if out.status.success() {
        Ok(())
    } else {
        Err(format!("`{}` failed: {}", args.join(" "), String::from_utf8_lossy(&out.stderr).trim()))
    }
}

/// Opens `/dev/net/tun` as a new tap device named `name` (frames without packet info).
/// The one `ioctl` is the only way to make a tap this process holds.
#[allow(unsafe_code)]
fn open_tap(name: &str) -> Result<File, String> {
    let file = OpenOptions::new()
        .read(true)
        .write(true)
        .open("/dev/net/tun")
        .map_err(|e| format!("cannot open /dev/net/tun: {e}"))?;
    let mut ifr_name = [0 as libc::c_char; libc::IFNAMSIZ];
    for (slot, byte) in ifr_name.iter_mut().zip(name.bytes().take(libc::IFNAMSIZ - 1)) {
        *slot = byte as libc::c_char;
    }
    let flags = (libc::IFF_TAP | libc::IFF_NO_PI) as libc::c_short;
    let request = libc::ifreq { ifr_name, ifr_ifru: libc::__c_anonymous_ifr_ifru { ifru_flags: flags } };
    use std::os::fd::AsRawFd;
    // SAFETY: TUNSETIFF reads one ifreq through the pointer, which lives across the call.
    unsafe { tun_set_iff(file.as_raw_fd(), &raw const request) }
        .map_err(|e| format!("TUNSETIFF {name}: {e} (is this root, with tap devices allowed?)"))?;
    Ok(file)
}

/// What the hub threads share.
struct Wire {
    stop: AtomicBool,
    /// Each host's group: frames pass only between hosts of the same group.
    group: Vec<AtomicU8>,
    /// Frames dropped because a host's queue was full.
    dropped: AtomicU64,
    /// Frames delivered.
    delivered: AtomicU64,
}

/// Hosts in namespaces on a delaying hub; host `i` is `10.78.<k>.<10 + i>`.
pub struct HubLab {
    prefix: String,
    subnet: u8,
    hosts: usize,
    delay: Duration,
    wire: Arc<Wire>,
    threads: Mutex<Vec<JoinHandle<()>>>,
}

impl std::fmt::Debug for HubLab {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("HubLab")
            .field("prefix", &self.prefix)
            .field("hosts", &self.hosts)
            .finish_non_exhaustive()
    }
}

impl HubLab {
    /// Creates `hosts` namespaces whose traffic to each other waits `delay` on the hub.
    pub fn new(hosts: usize, delay: Duration) -> Result<Self, String> {
        let pid = std::process::id();
        let wire = Arc::new(Wire {
            stop: AtomicBool::new(false),
            group: (0..hosts).map(|_| AtomicU8::new(0)).collect(),
            dropped: AtomicU64::new(0),
            delivered: AtomicU64::new(0),
        });
        let mut lab = Self {
            prefix: format!("mh{}", pid % 100_000),
            subnet: (pid % 200) as u8 + 20,
            hosts: 0,
            delay,
            wire,
            threads: Mutex::new(Vec::new()),
        };
        let mut taps = Vec::new();
        for i in 0..hosts {
            let ns = lab.namespace(i);
            run(&["ip", "netns", "add", &ns])?;
            lab.hosts = i + 1;
            let tap_name = format!("{}t{i}", lab.prefix);
            let tap = open_tap(&tap_name)?;
            run(&["ip", "link", "set", &tap_name, "netns", &ns])?;
            run(&["ip", "-n", &ns, "link", "set", &tap_name, "name", "eth0"])?;
            run(&["ip", "-n", &ns, "addr", "add", &format!("{}/24", lab.ip(i)), "dev", "eth0"])?;
            run(&["ip", "-n", &ns, "link", "set", "eth0", "up"])?;
            run(&["ip", "-n", &ns, "link", "set", "lo", "up"])?;
            taps.push(tap);
        }
        lab.start_hub(taps)?;
        Ok(lab)
    }

    fn start_hub(&self, taps: Vec<File>) -> Result<(), String> {
        let mut senders: Vec<SyncSender<(Instant, Vec<u8>)>> = Vec::new();
        let mut threads = self.threads.lock().expect("hub threads");
        for tap in &taps {
            let (tx, rx) = sync_channel(QUEUE_FRAMES);
            senders.push(tx);
            let out = tap.try_clone().map_err(|e| format!("dup tap: {e}"))?;
            let wire = Arc::clone(&self.wire);
            threads.push(std::thread::spawn(move || deliver(&wire, &rx, out)));
        }
        let senders = Arc::new(senders);
        for (i, tap) in taps.into_iter().enumerate() {
            let wire = Arc::clone(&self.wire);
            let senders = Arc::clone(&senders);
            let delay = self.delay;
            threads.push(std::thread::spawn(move || carry(&wire, i, tap, &senders, delay)));
        }
        Ok(())
    }

    /// Name of host `i`'s namespace.
    #[must_use]
    pub fn namespace(&self, i: usize) -> String {
        format!("{}n{i}", self.prefix)
    }

    /// Host `i`'s address.
    #[must_use]
    pub fn ip(&self, i: usize) -> String {
        format!("10.78.{}.{}", self.subnet, 10 + i)
    }

    /// The command prefix that runs a program on host `i`.
    #[must_use]
    pub fn launcher(&self, i: usize) -> Vec<String> {
        vec!["ip".into(), "netns".into(), "exec".into(), self.namespace(i)]
    }

    /// Cuts the hosts in `side_a` off from every other host, both ways, until [`HubLab::heal`].
    pub fn split(&self, side_a: &[usize]) {
        for (i, group) in self.wire.group.iter().enumerate() {
            group.store(u8::from(side_a.contains(&i)), Ordering::SeqCst);
        }
    }

    /// Joins every host again.
    pub fn heal(&self) {
        for group in &self.wire.group {
            group.store(0, Ordering::SeqCst);
        }
    }

    /// Frames the hub has delivered, and dropped because a host's queue was full.
    #[must_use]
    pub fn frames(&self) -> (u64, u64) {
        (self.wire.delivered.load(Ordering::Relaxed), self.wire.dropped.load(Ordering::Relaxed))
    }

    /// Runs `work` on a new thread inside host `i`'s network namespace: sockets it opens,
    /// and threads it starts, belong to that host (its `127.0.0.1` is the host's own).
    pub fn spawn_in<T: Send + 'static>(
        &self,
        i: usize,
        work: impl FnOnce() -> T + Send + 'static,
    ) -> Result<JoinHandle<T>, String> {
        let path = format!("/run/netns/{}", self.namespace(i));
        let ns = File::open(&path).map_err(|e| format!("{path}: {e}"))?;
        let (ready_tx, ready_rx) = sync_channel(1);
        let handle = std::thread::spawn(move || {
            let joined =
                setns(ns.as_fd(), CloneFlags::CLONE_NEWNET).map_err(|e| format!("setns {path}: {e}"));
            let failed = joined.is_err();
            let _ = ready_tx.send(joined);
            assert!(!failed, "this thread did not join its namespace");
            work()
        });
        ready_rx.recv().map_err(|_| "the namespace thread died".to_owned())??;
        Ok(handle)
    }
}

/// Reads host `from`'s frames and queues each, due `delay` from now, for every host in
/// its group: a hub, so every frame goes to every other port and their kernels drop what
/// is not theirs.
fn carry(wire: &Wire, from: usize, mut tap: File, to: &[SyncSender<(Instant, Vec<u8>)>], delay: Duration) {
    let mut buf = vec![0u8; FRAME_MAX];
    while !wire.stop.load(Ordering::Relaxed) {
        let mut fds = [PollFd::new(tap.as_fd(), PollFlags::POLLIN)];
        match poll(&mut fds, 50u16) {
            Ok(0) => continue,
            Ok(_) => {}
            Err(nix::errno::Errno::EINTR) => continue,
            Err(_) => return,
        }
        let n = match tap.read(&mut buf) {
            Ok(n) => n,
            Err(e) if e.kind() == std::io::ErrorKind::Interrupted => continue,
            // The device went with its namespace.
            Err(_) => return,
        };
        let due = Instant::now() + delay;
        let group = wire.group[from].load(Ordering::SeqCst);
        for (host, sender) in to.iter().enumerate() {
            if host == from || wire.group[host].load(Ordering::SeqCst) != group {
                continue;
            }
            match sender.try_send((due, buf[..n].to_vec())) {
                Ok(()) => {}
                Err(TrySendError::Full(_)) => {
                    wire.dropped.fetch_add(1, Ordering::Relaxed);
                }
                Err(TrySendError::Disconnected(_)) => return,
            }
        }
    }
}

/// Writes the frames queued for one host when they fall due. Every frame waits the same
/// delay, so first queued is first due.
fn deliver(wire: &Wire, queue: &Receiver<(Instant, Vec<u8>)>, mut tap: File) {
    while !wire.stop.load(Ordering::Relaxed) {
        let (due, frame) = match queue.recv_timeout(WAKE) {
            Ok(item) => item,
            Err(RecvTimeoutError::Timeout) => continue,
            Err(RecvTimeoutError::Disconnected) => return,
        };
        let now = Instant::now();
        if due > now {
            std::thread::sleep(due - now);
        }
        if tap.write(&frame).is_ok() {
            wire.delivered.fetch_add(1, Ordering::Relaxed);
        }
    }
}

impl Drop for HubLab {
    fn drop(&mut self) {
        self.wire.stop.store(true, Ordering::SeqCst);
        for thread in self.threads.get_mut().expect("hub threads").drain(..) {
            let _ = thread.join();
        }
        for i in 0..self.hosts {
            let _ = run(&["ip", "netns", "del", &self.namespace(i)]);
        }
    }
}
