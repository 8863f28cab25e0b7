//! virtio-rng tests against `virtio_queue::mock` chains.

use virtio_queue::mock::MockSplitQueue;
use vm_memory::{Bytes, GuestAddress};

use super::*;
use crate::devices::virtio::test_utils::*;

#[test]
fn fills_every_writable_buffer() {
    let mem = mem();
    let mock = MockSplitQueue::new(&mem, 16);
    let chain = mock
        .build_desc_chain(&[desc(BUF, 16, WRITE, 0), desc(BUF + 0x100, 8, WRITE, 0)])
        .unwrap();
    let mut source = std::io::repeat(0x5a);
    assert_eq!(fill_chain(&mem, chain, &mut source).unwrap(), 24);
    let mut a = [0u8; 16];
    mem.read_slice(&mut a, GuestAddress(BUF)).unwrap();
    assert_eq!(a, [0x5a; 16]);
}

#[test]
fn a_chain_gets_at_most_64k() {
    let mem = mem();
    let mock = MockSplitQueue::new(&mem, 16);
    let chain = mock
        .build_desc_chain(&[desc(BUF, 0x18000, WRITE, 0)])
        .unwrap();
    let mut source = std::io::repeat(1);
    assert_eq!(
        fill_chain(&mem, chain, &mut source).unwrap(),
        MAX_CHAIN_BYTES as u32
    );
}

#[test]
fn malformed_chains_are_errors() {
    let mem = mem();
    let cases: Vec<(&str, Vec<_>)> = vec![
        (
            "loop",
            vec![
                desc(BUF, 16, NEXT | WRITE, 1),
                desc(BUF, 16, NEXT | WRITE, 0),
            ],
        ),
        ("read-only", vec![desc(BUF, 16, 0, 0)]),
        ("zero length", vec![desc(BUF, 0, WRITE, 0)]),
        ("outside memory", vec![desc(MEM_SIZE - 4, 16, WRITE, 0)]),
        ("address wraps", vec![desc(u64::MAX - 2, 16, WRITE, 0)]),
    ];
    for (what, descs) in cases {
        let mock = MockSplitQueue::new(&mem, 16);
        let chain = mock.build_multiple_desc_chains(&descs).unwrap();
        let err = fill_chain(&mem, chain, &mut std::io::repeat(1)).unwrap_err();
        let ok = match what {
            "loop" => matches!(err, FillError::Chain(ChainError::Unterminated)),
            "read-only" => matches!(err, FillError::Direction(0)),
            "zero length" => matches!(err, FillError::Chain(ChainError::ZeroLength(0))),
            _ => matches!(err, FillError::GuestMemory(..)),
        };
        assert!(ok, "{what}: {err:?}");
    }
}

#[test]
fn a_failing_source_is_an_error() {
    struct Broken;
    impl Read for Broken {
        fn read(&mut self, _: &mut [u8]) -> std::io::Result<usize> {
            Err(std::io::Error::other("no entropy"))
        }
    }
    let mem = mem();
    let mock = MockSplitQueue::new(&mem, 16);
    let chain = mock.build_desc_chain(&[desc(BUF, 16, WRITE, 0)]).unwrap();
    assert!(matches!(
        fill_chain(&mem, chain, &mut Broken),
        Err(FillError::Source(_))
    ));
}
