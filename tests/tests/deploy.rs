//! Deployment hooks with real processes: a node run by a service manager (systemd's
//! `Type=notify`) tells it `READY=1` once its API and mesh listen, and `STOPPING=1` when
//! it shuts down, on the socket `$NOTIFY_SOCKET` names — here one the test binds.

use std::os::unix::net::UnixDatagram;
use std::time::Duration;

use murmur_tests::{LOOPBACK, TestNode};

fn next(socket: &UnixDatagram) -> String {
    let mut buf = [0u8; 4096];
    let n = socket.recv(&mut buf).expect("a notification within the timeout");
    String::from_utf8_lossy(&buf[..n]).into_owned()
}

#[test]
fn a_node_tells_its_service_manager_when_it_is_ready_and_when_it_stops() {
    let dir = tempfile::tempdir().unwrap();
    let path = dir.path().join("notify.sock");
    let socket = UnixDatagram::bind(&path).unwrap();
    socket.set_read_timeout(Some(Duration::from_secs(30))).unwrap();
    let data = murmur_tests::init_data_dir();
    let mut node =
        TestNode::start_in_env(data.path(), LOOPBACK, &[("NOTIFY_SOCKET", path.to_str().unwrap())])
            .expect("node starts");
    let ready = next(&socket);
    assert!(ready.starts_with("READY=1\nSTATUS="), "{ready:?}");
    assert!(
        ready.contains(node.peer_id()) && ready.contains(&node.api),
        "the status names the node: {ready:?}"
    );
    // Ready means ready: the API answers now.
    assert_eq!(node.get("/healthz").unwrap()["status"], "ok");
    assert!(node.terminate(Duration::from_secs(20)).unwrap().success());
    // Stopping is announced when the signal arrives, with what the node is doing.
    let stopping = next(&socket);
    assert!(stopping.starts_with("STOPPING=1\nSTATUS=draining"), "{stopping:?}");
}

#[test]
fn a_node_without_a_service_manager_starts_as_before_and_a_bad_socket_is_only_a_warning() {
    let data = murmur_tests::init_data_dir();
    let node =
        TestNode::start_in_env(data.path(), LOOPBACK, &[("NOTIFY_SOCKET", "/nonexistent/notify.sock")])
            .expect("node starts even when its notification fails");
    assert_eq!(node.get("/healthz").unwrap()["status"], "ok");
    assert!(node.stderr().contains("cannot tell the service manager"), "{}", node.stderr());
}
