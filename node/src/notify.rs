//! Readiness for service managers: the `sd_notify` protocol, with only the standard library.
//!
//! A unit with `Type=notify` (see `deploy/systemd/murnode.service`) is "started" only when
//! the daemon says so: systemd sets `$NOTIFY_SOCKET` to a unix datagram socket and waits
//! for a datagram holding `READY=1`. So `murnode run` calls [`ready`] once its API and
//! every libp2p listener are up, the moment it prints its ready line, and units ordered
//! after it start against a node that answers.
//!
//! The message is newline-separated `KEY=VALUE` assignments (`READY=1`, `STATUS=…`,
//! `STOPPING=1`, `RELOADING=1`), sent as one datagram. `$NOTIFY_SOCKET` is an absolute
//! path, or a name in Linux's abstract namespace written with a leading `@`. Without the
//! variable (started by hand, in a container, in tests) nothing is sent and nothing fails.
//!
//! ```no_run
//! # use murmur_node::notify;
//! // After the ready line is printed:
//! if let Err(err) = notify::ready("listening on 127.0.0.1:7420") {
//!     eprintln!("cannot tell the service manager we are ready: {err}");
//! }
//! ```

use std::ffi::OsStr;
use std::io;
use std::os::unix::ffi::OsStrExt;
use std::os::unix::net::UnixDatagram;
use std::path::Path;

/// The environment variable naming the service manager's socket.
pub const NOTIFY_SOCKET_ENV: &str = "NOTIFY_SOCKET";

/// Longest message sent. systemd reads a notification into a buffer of `PIPE_BUF` (4096
/// bytes on Linux) and drops what does not fit, so a longer message is refused here,
/// where the caller can still see why, rather than lost there.
pub const STATE_BYTES_MAX: usize = 4096;

/// Longest status text [`ready`] sends: what is left of [`STATE_BYTES_MAX`] after
/// `READY=1\nSTATUS=`. Longer text is cut at a character boundary.
pub const STATUS_BYTES_MAX: usize = STATE_BYTES_MAX - READY_PREFIX.len();

const READY_PREFIX: &str = "READY=1\nSTATUS=";

const _: () = assert!(READY_PREFIX.len() < STATE_BYTES_MAX);

/// Sends `state` to the socket named by `$NOTIFY_SOCKET`.
///
/// Returns `Ok(false)` when the variable is unset or empty (no service manager is
/// listening), `Ok(true)` once the datagram is sent. Errors: a variable that is neither an
/// absolute path nor `@name`, a `state` over [`STATE_BYTES_MAX`], or the socket refusing
/// the datagram (a manager that went away).
pub fn notify(state: &str) -> io::Result<bool> {
    notify_env(std::env::var_os(NOTIFY_SOCKET_ENV).as_deref(), state)
}

/// Tells the service manager the node is ready, with `status` as its one-line status
/// (`systemctl status` shows it). Newlines in `status` become spaces, so it cannot add
/// assignments of its own. Returns what [`notify`] returns.
pub fn ready(status: &str) -> io::Result<bool> {
    notify(&ready_state(status))
}

/// Sends `state` as one datagram to `socket`: an absolute path, or `@name` for a socket in
/// the abstract namespace (Linux only).
///
/// The core of [`notify`], taking the socket as a parameter so that callers and tests need
/// not touch the process environment.
pub fn notify_to(socket: impl AsRef<OsStr>, state: &str) -> io::Result<()> {
    let socket = socket.as_ref();
    if state.len() > STATE_BYTES_MAX {
        return Err(io::Error::new(
            io::ErrorKind::InvalidInput,
            format!("notification is {} bytes, more than {STATE_BYTES_MAX}", state.len()),
        ));
    }
    let bytes = socket.as_bytes();
    let sender = UnixDatagram::unbound()?;
    let sent = match bytes.first() {
        Some(b'@') => send_abstract(&sender, &bytes[1..], state.as_bytes())?,
        Some(b'/') => sender.send_to(state.as_bytes(), Path::new(socket))?,
        _ => {
            return Err(io::Error::new(
                io::ErrorKind::InvalidInput,
                format!(
                    "${NOTIFY_SOCKET_ENV} is `{}`: neither an absolute path nor an @abstract name",
                    socket.to_string_lossy()
                ),
            ));
        }
    };
    // A datagram is sent whole or not at all; anything else would be a truncated message.
    if sent != state.len() {
        return Err(io::Error::new(
            io::ErrorKind::WriteZero,
            format!("sent {sent} of {} bytes of the notification", state.len()),
        ));
    }
    Ok(())
}

/// [`notify`] with the variable's value given: `None` or empty means no manager.
fn notify_env(socket: Option<&OsStr>, state: &str) -> io::Result<bool> {
    match socket {
        Some(socket) if !socket.is_empty() => notify_to(socket, state).map(|()| true),
        _ => Ok(false),
    }
}

/// `READY=1` and a one-line, bounded `STATUS=`.
fn ready_state(status: &str) -> String {
    let mut end = status.len().min(STATUS_BYTES_MAX);
    while !status.is_char_boundary(end) {
        end -= 1;
    }
    let line: String = status[..end].chars().map(|c| if c == '\n' || c == '\r' { ' ' } else { c }).collect();
    format!("{READY_PREFIX}{line}")
}

#[cfg(target_os = "linux")]
fn send_abstract(sender: &UnixDatagram, name: &[u8], state: &[u8]) -> io::Result<usize> {
    use std::os::linux::net::SocketAddrExt;
    let addr = std::os::unix::net::SocketAddr::from_abstract_name(name)?;
    sender.send_to_addr(state, &addr)
}

#[cfg(not(target_os = "linux"))]
fn send_abstract(_sender: &UnixDatagram, _name: &[u8], _state: &[u8]) -> io::Result<usize> {
    Err(io::Error::new(io::ErrorKind::Unsupported, "abstract unix sockets exist on Linux only"))
}

#[cfg(test)]
mod tests {
    use std::path::PathBuf;
    use std::sync::atomic::{AtomicUsize, Ordering};
    use std::time::Duration;

    use super::*;

    /// A directory of this test's own, removed on drop (std only: no tempfile crate here).
    struct TempDir(PathBuf);

    impl TempDir {
        fn new() -> Self {
            static NEXT: AtomicUsize = AtomicUsize::new(0);
            let n = NEXT.fetch_add(1, Ordering::Relaxed);
            let dir = std::env::temp_dir().join(format!("murmur-notify-{}-{n}", std::process::id()));
            std::fs::create_dir_all(&dir).unwrap();
            Self(dir)
        }
    }

    impl Drop for TempDir {
        fn drop(&mut self) {
            let _ = std::fs::remove_dir_all(&self.0);
        }
    }

    /// The next datagram on `socket`, waiting at most 5 s.
    fn receive(socket: &UnixDatagram) -> String {
        socket.set_read_timeout(Some(Duration::from_secs(5))).unwrap();
        let mut buf = vec![0; STATE_BYTES_MAX + 1];
        let n = socket.recv(&mut buf).unwrap();
        String::from_utf8(buf[..n].to_vec()).unwrap()
    }

    #[test]
    fn a_path_socket_receives_the_state_as_one_datagram() {
        let dir = TempDir::new();
        let path = dir.0.join("notify.sock");
        let listener = UnixDatagram::bind(&path).unwrap();
        notify_to(&path, "READY=1\nSTATUS=up").unwrap();
        assert_eq!(receive(&listener), "READY=1\nSTATUS=up");
    }

    #[test]
    fn the_variable_routes_the_message_and_its_absence_sends_nothing() {
        let dir = TempDir::new();
        let path = dir.0.join("env.sock");
        let listener = UnixDatagram::bind(&path).unwrap();
        assert!(notify_env(Some(path.as_os_str()), "READY=1").unwrap());
        assert_eq!(receive(&listener), "READY=1");
        assert!(!notify_env(None, "READY=1").unwrap());
        assert!(!notify_env(Some(OsStr::new("")), "READY=1").unwrap());
    }

    #[cfg(target_os = "linux")]
    #[test]
    fn an_abstract_socket_is_reached_by_its_at_name() {
        use std::os::linux::net::SocketAddrExt;
        static NEXT: AtomicUsize = AtomicUsize::new(0);
        let name =
            format!("murmur-notify-test-{}-{}", std::process::id(), NEXT.fetch_add(1, Ordering::Relaxed));
        let addr = std::os::unix::net::SocketAddr::from_abstract_name(name.as_bytes()).unwrap();
        let listener = UnixDatagram::bind_addr(&addr).unwrap();
        notify_to(format!("@{name}"), "READY=1\nSTATUS=abstract").unwrap();
        assert_eq!(receive(&listener), "READY=1\nSTATUS=abstract");
    }

    #[test]
    fn ready_sends_one_status_line() {
        let dir = TempDir::new();
        let path = dir.0.join("ready.sock");
        let listener = UnixDatagram::bind(&path).unwrap();
        notify_to(&path, &ready_state("api 127.0.0.1:7420\nREADY=0")).unwrap();
        assert_eq!(receive(&listener), "READY=1\nSTATUS=api 127.0.0.1:7420 READY=0");
    }

    #[test]
    fn a_long_status_is_cut_to_fit_at_a_character_boundary() {
        let state = ready_state(&"é".repeat(STATE_BYTES_MAX));
        assert!(state.len() <= STATE_BYTES_MAX, "{}", state.len());
        assert!(state.len() > STATE_BYTES_MAX - 2, "{}", state.len());
        assert!(state.ends_with('é'));
    }

    #[test]
    fn a_relative_socket_or_an_oversized_state_is_refused() {
        let err = notify_to("relative.sock", "READY=1").unwrap_err();
        assert_eq!(err.kind(), io::ErrorKind::InvalidInput);
        assert!(err.to_string().contains("relative.sock"), "{err}");
        let dir = TempDir::new();
        let path = dir.0.join("big.sock");
        let _listener = UnixDatagram::bind(&path).unwrap();
        let err = notify_to(&path, &"x".repeat(STATE_BYTES_MAX + 1)).unwrap_err();
        assert_eq!(err.kind(), io::ErrorKind::InvalidInput);
    }

    #[test]
    fn a_socket_nobody_listens_on_is_an_error() {
        let dir = TempDir::new();
        let err = notify_to(dir.0.join("nobody.sock"), "READY=1").unwrap_err();
        assert_eq!(err.kind(), io::ErrorKind::NotFound, "{err}");
    }
}
