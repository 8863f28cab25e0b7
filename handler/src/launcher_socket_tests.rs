use std::time::Duration;

use kube::runtime::reflector::ObjectRef;

use super::*;

fn vmi(name: &str) -> ObjectRef<VirtualMachineInstance> {
    ObjectRef::new(name).within("default")
}

/// The next VMI sent back, within a deadline.
async fn next_wake_up(
    rx: &mut tokio::sync::mpsc::UnboundedReceiver<ObjectRef<VirtualMachineInstance>>,
) -> ObjectRef<VirtualMachineInstance> {
    tokio::time::timeout(Duration::from_secs(10), rx.recv())
        .await
        .expect("no wake-up within 10 s of the socket's creation")
        .expect("the watch stopped")
}

#[tokio::test]
async fn a_socket_that_appears_sends_its_vmi_back_once() {
    let dir = tempfile::tempdir().unwrap();
    // The handler reaches the Pod's socket directory through a symlink.
    let link = dir.path().join("uid-1");
    let pod_dir = dir.path().join("pod-sockets");
    std::fs::create_dir(&pod_dir).unwrap();
    std::os::unix::fs::symlink(&pod_dir, &link).unwrap();
    let socket = link.join("launcher-sock");

    let (tx, mut rx) = tokio::sync::mpsc::unbounded_channel();
    let sockets = LauncherSockets::start(tx).unwrap();
    assert_eq!(sockets.wait_for(&link, &socket, vmi("a")), Wait::Watching);
    assert_eq!(sockets.watched(), 1);
    assert!(rx.try_recv().is_err(), "nothing appeared yet");

    let _listener = std::os::unix::net::UnixListener::bind(&socket).unwrap();
    assert_eq!(next_wake_up(&mut rx).await, vmi("a"));
    assert_eq!(sockets.watched(), 0);

    // The watch is gone: a second entry wakes nobody. The next wake-up (events come in order)
    // is another VMI's.
    std::fs::write(pod_dir.join("other"), b"").unwrap();
    let second = dir.path().join("uid-2");
    std::fs::create_dir(&second).unwrap();
    let socket = second.join("launcher-sock");
    assert_eq!(sockets.wait_for(&second, &socket, vmi("b")), Wait::Watching);
    let _listener = std::os::unix::net::UnixListener::bind(&socket).unwrap();
    assert_eq!(next_wake_up(&mut rx).await, vmi("b"));
}

#[tokio::test]
async fn a_socket_already_there_or_a_missing_directory_is_said_at_once() {
    let dir = tempfile::tempdir().unwrap();
    let socket = dir.path().join("launcher-sock");
    let _listener = std::os::unix::net::UnixListener::bind(&socket).unwrap();
    let (tx, _rx) = tokio::sync::mpsc::unbounded_channel();
    let sockets = LauncherSockets::start(tx).unwrap();
    assert_eq!(
        sockets.wait_for(dir.path(), &socket, vmi("b")),
        Wait::Appeared
    );
    assert_eq!(sockets.watched(), 0);
    let missing = dir.path().join("not-yet");
    assert_eq!(
        sockets.wait_for(&missing, &missing.join("launcher-sock"), vmi("c")),
        Wait::Unwatchable
    );
    assert_eq!(sockets.watched(), 0);
}
