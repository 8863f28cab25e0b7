//! virtio-net frame tests against `virtio_queue::mock` chains.

use virtio_queue::mock::MockSplitQueue;
use vm_memory::{Bytes, GuestAddress};

use super::frame::{read_tx_frame, write_rx_frame, FrameError, RxOutcome};
use super::*;
use crate::devices::virtio::chain::ChainError;
use crate::devices::virtio::test_utils::*;

#[test]
fn tx_gathers_the_chain() {
    let mem = mem();
    mem.write_slice(&[1u8; 12], GuestAddress(BUF)).unwrap();
    mem.write_slice(&[2u8; 60], GuestAddress(BUF + 0x100))
        .unwrap();
    let mock = MockSplitQueue::new(&mem, 16);
    let chain = mock
        .build_desc_chain(&[desc(BUF, 12, 0, 0), desc(BUF + 0x100, 60, 0, 0)])
        .unwrap();
    let mut frame = Vec::new();
    assert_eq!(read_tx_frame(&mem, chain, &mut frame).unwrap(), 72);
    assert_eq!(&frame[..12], &[1u8; 12]);
    assert_eq!(&frame[12..], &[2u8; 60]);
}

#[test]
fn malformed_tx_chains_are_errors() {
    let mem = mem();
    let cases: Vec<(&str, Vec<_>)> = vec![
        ("loop", vec![desc(BUF, 12, NEXT, 1), desc(BUF, 12, NEXT, 0)]),
        (
            "write-only",
            vec![desc(BUF, 12, NEXT, 1), desc(BUF + 12, 60, WRITE, 0)],
        ),
        ("zero length", vec![desc(BUF, 0, 0, 0)]),
        ("shorter than the header", vec![desc(BUF, 6, 0, 0)]),
        ("outside memory", vec![desc(MEM_SIZE - 6, 64, 0, 0)]),
        (
            "too long",
            vec![desc(BUF, 0x10000, NEXT, 1), desc(BUF, 0x10000, 0, 0)],
        ),
        ("address wraps", vec![desc(u64::MAX - 8, 64, 0, 0)]),
    ];
    for (what, descs) in cases {
        let mock = MockSplitQueue::new(&mem, 16);
        let chain = mock.build_multiple_desc_chains(&descs).unwrap();
        let err = read_tx_frame(&mem, chain, &mut Vec::new()).unwrap_err();
        let ok = match what {
            "loop" => matches!(err, FrameError::Chain(ChainError::Unterminated)),
            "write-only" => matches!(err, FrameError::Direction(1)),
            "zero length" => matches!(err, FrameError::Chain(ChainError::ZeroLength(0))),
            "shorter than the header" => matches!(err, FrameError::TooShort(6)),
            "too long" => matches!(err, FrameError::TooLong(_)),
            _ => matches!(err, FrameError::GuestMemory(..)),
        };
        assert!(ok, "{what}: {err:?}");
    }
}

#[test]
fn rx_scatters_the_frame() {
    let mem = mem();
    let frame: Vec<u8> = (0..100u8).collect();
    let mock = MockSplitQueue::new(&mem, 16);
    let chain = mock
        .build_desc_chain(&[desc(BUF, 40, WRITE, 0), desc(BUF + 0x100, 200, WRITE, 0)])
        .unwrap();
    assert_eq!(
        write_rx_frame(&mem, chain, &frame).unwrap(),
        RxOutcome::Delivered(100)
    );
    let mut a = [0u8; 40];
    let mut b = [0u8; 60];
    mem.read_slice(&mut a, GuestAddress(BUF)).unwrap();
    mem.read_slice(&mut b, GuestAddress(BUF + 0x100)).unwrap();
    assert_eq!(&a[..], &frame[..40]);
    assert_eq!(&b[..], &frame[40..]);
}

#[test]
fn rx_frame_larger_than_the_chain_is_dropped() {
    let mem = mem();
    let mock = MockSplitQueue::new(&mem, 16);
    let chain = mock.build_desc_chain(&[desc(BUF, 40, WRITE, 0)]).unwrap();
    assert_eq!(
        write_rx_frame(&mem, chain, &[7u8; 41]).unwrap(),
        RxOutcome::Dropped
    );
    let mut a = [0u8; 40];
    mem.read_slice(&mut a, GuestAddress(BUF)).unwrap();
    assert_eq!(a, [0u8; 40]);
}

#[test]
fn malformed_rx_chains_are_errors() {
    let mem = mem();
    let cases: Vec<(&str, Vec<_>)> = vec![
        ("loop", vec![desc(BUF, 64, NEXT | WRITE, 0)]),
        ("read-only", vec![desc(BUF, 64, 0, 0)]),
        (
            "zero length",
            vec![desc(BUF, 64, NEXT | WRITE, 1), desc(BUF, 0, WRITE, 0)],
        ),
        (
            "outside memory",
            vec![desc(MEM_SIZE + 0x1000, 64, WRITE, 0)],
        ),
    ];
    for (what, descs) in cases {
        let mock = MockSplitQueue::new(&mem, 16);
        let chain = mock.build_multiple_desc_chains(&descs).unwrap();
        let err = write_rx_frame(&mem, chain, &[1u8; 60]).unwrap_err();
        let ok = match what {
            "loop" => matches!(err, FrameError::Chain(ChainError::Unterminated)),
            "read-only" => matches!(err, FrameError::Direction(0)),
            "zero length" => matches!(err, FrameError::Chain(ChainError::ZeroLength(1))),
            _ => matches!(err, FrameError::GuestMemory(..)),
        };
        assert!(ok, "{what}: {err:?}");
    }
}

#[test]
fn offloads_follow_the_accepted_features() {
    use super::device::tap_offloads;
    use super::tap::{TUN_F_CSUM, TUN_F_TSO4, TUN_F_TSO6};
    assert_eq!(tap_offloads(0), 0);
    // TSO without checksum offload is not applied.
    assert_eq!(tap_offloads(VIRTIO_NET_F_GUEST_TSO4), 0);
    assert_eq!(
        tap_offloads(VIRTIO_NET_F_GUEST_CSUM | VIRTIO_NET_F_GUEST_TSO4 | VIRTIO_NET_F_GUEST_TSO6),
        TUN_F_CSUM | TUN_F_TSO4 | TUN_F_TSO6
    );
}
