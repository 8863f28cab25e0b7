//! Walking a descriptor chain safely.
//!
//! `virtio_queue`'s chain iterator stops by itself after `queue size` descriptors, on a next
//! index outside the table and on an unreadable descriptor; it just ends early. [`collect`] turns
//! "ended while the last descriptor still says NEXT" into an error (a loop, or a chain the guest
//! broke), and rejects zero-length descriptors, so device code only sees well-formed chains.
//! Addresses inside descriptors are still untrusted: they are checked by guest memory accesses.

use crate::guest_memory::GuestMemoryMmap;
use virtio_queue::desc::split::Descriptor;
use virtio_queue::DescriptorChain;

/// A malformed descriptor chain.
#[derive(Debug, thiserror::Error, PartialEq, Eq)]
pub enum ChainError {
    #[error("descriptor chain loops, is longer than the queue or points outside the table")]
    Unterminated,
    #[error("descriptor {0} of the chain has length 0")]
    ZeroLength(usize),
    #[error("descriptor chain is empty")]
    Empty,
}

/// The descriptors of `chain`, in order.
pub fn collect(chain: DescriptorChain<&GuestMemoryMmap>) -> Result<Vec<Descriptor>, ChainError> {
    let descriptors: Vec<Descriptor> = chain.collect();
    let last = descriptors.last().ok_or(ChainError::Empty)?;
    if last.has_next() {
        return Err(ChainError::Unterminated);
    }
    if let Some(index) = descriptors.iter().position(|d| d.len() == 0) {
        return Err(ChainError::ZeroLength(index));
    }
    Ok(descriptors)
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::devices::virtio::test_utils::*;
    use virtio_queue::mock::MockSplitQueue;

    #[test]
    fn well_formed_chain() {
        let mem = mem();
        let mock = MockSplitQueue::new(&mem, 16);
        let chain = mock
            .build_desc_chain(&[desc(BUF, 16, 0, 0), desc(BUF + 16, 1, WRITE, 0)])
            .unwrap();
        let descs = collect(chain).unwrap();
        assert_eq!(descs.len(), 2);
        assert!(descs[1].is_write_only());
    }

    #[test]
    fn loops_and_bad_next_are_unterminated() {
        let mem = mem();
        let mock = MockSplitQueue::new(&mem, 16);
        // 0 -> 1 -> 0 -> ...
        let chain = mock
            .build_multiple_desc_chains(&[desc(BUF, 16, NEXT, 1), desc(BUF + 16, 16, NEXT, 0)])
            .unwrap();
        assert_eq!(collect(chain).unwrap_err(), ChainError::Unterminated);
        // Self loop.
        let mock = MockSplitQueue::new(&mem, 16);
        let chain = mock
            .build_multiple_desc_chains(&[desc(BUF, 16, NEXT, 0)])
            .unwrap();
        assert_eq!(collect(chain).unwrap_err(), ChainError::Unterminated);
        // Next index outside the table.
        let mock = MockSplitQueue::new(&mem, 16);
        let chain = mock
            .build_multiple_desc_chains(&[desc(BUF, 16, NEXT, 200)])
            .unwrap();
        assert_eq!(collect(chain).unwrap_err(), ChainError::Unterminated);
    }

    #[test]
    fn zero_length_descriptor_is_an_error() {
        let mem = mem();
        let mock = MockSplitQueue::new(&mem, 16);
        let chain = mock
            .build_desc_chain(&[desc(BUF, 16, 0, 0), desc(BUF + 16, 0, WRITE, 0)])
            .unwrap();
        assert_eq!(collect(chain).unwrap_err(), ChainError::ZeroLength(1));
    }
}
