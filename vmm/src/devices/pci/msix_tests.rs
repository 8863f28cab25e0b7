//! MSI-X tests: table writes, routes, masking with pending bits, the PBA, snapshots.

use super::*;
use crate::devices::irq::RouteSink;

#[derive(Clone, Default)]
struct Routes(Arc<Mutex<Vec<(u32, MsiMessage)>>>);

impl RouteSink for Routes {
    fn set_routes(&self, routes: &[(u32, MsiMessage)]) -> std::io::Result<()> {
        *self.0.lock().unwrap() = routes.to_vec();
        Ok(())
    }
}

fn vectors(count: u32) -> (MsixVectors, Vec<EventFd>, Routes) {
    let routes = Routes::default();
    let irqfds: Vec<EventFd> = (0..count)
        .map(|_| EventFd::new(libc::EFD_NONBLOCK).unwrap())
        .collect();
    let ours = irqfds.iter().map(|e| e.try_clone().unwrap()).collect();
    let msix = MsixVectors::new(
        (0..count).map(|i| 24 + i).collect(),
        ours,
        Arc::new(GsiRouting::new(Box::new(routes.clone()))),
    )
    .unwrap();
    (msix, irqfds, routes)
}

fn write_entry(msix: &MsixVectors, vector: u64, address: u64, data: u32, masked: bool) {
    let base = vector * ENTRY_SIZE;
    msix.write_table(base, &(address as u32).to_le_bytes());
    msix.write_table(base + 4, &((address >> 32) as u32).to_le_bytes());
    msix.write_table(base + 8, &data.to_le_bytes());
    msix.write_table(base + 12, &u32::from(masked).to_le_bytes());
}

fn fired(irqfd: &EventFd) -> bool {
    irqfd.read().is_ok()
}

fn pba(msix: &MsixVectors) -> u64 {
    let mut bytes = [0u8; 8];
    msix.read_pba(0, &mut bytes);
    u64::from_le_bytes(bytes)
}

#[test]
fn the_capability_describes_table_and_pba() {
    let (msix, _, _) = vectors(3);
    let (body, writable) = msix.capability(0, 0x4000, 0x5000);
    assert_eq!(u16::from_le_bytes([body[0], body[1]]), 2, "table size - 1");
    assert_eq!(u32::from_le_bytes(body[2..6].try_into().unwrap()), 0x4000);
    assert_eq!(u32::from_le_bytes(body[6..10].try_into().unwrap()), 0x5000);
    assert_eq!(u16::from_le_bytes([writable[0], writable[1]]), 0xc000);
    assert_eq!(writable[2..], [0; 8]);
    assert_eq!((msix.table_size(), msix.pba_size()), (48, 8));
    assert!(MsixVectors::new(vec![], vec![], vectors(1).0.routing.clone()).is_err());
}

#[test]
fn vectors_start_masked_and_the_table_reads_back() {
    let (msix, _, _) = vectors(2);
    let mut control = [0u8; 4];
    msix.read_table(12, &mut control);
    assert_eq!(u32::from_le_bytes(control), 1, "masked at power-on");
    write_entry(&msix, 1, 0xfee0_1000, 0x4031, true);
    let mut entry = [0u8; 16];
    msix.read_table(16, &mut entry);
    assert_eq!(&entry[0..4], &0xfee0_1000u32.to_le_bytes());
    assert_eq!(&entry[8..12], &0x4031u32.to_le_bytes());
    // A 64-bit access covering address low and high, and reserved control bits read 0.
    msix.write_table(16, &0x0000_0001_fee0_2000u64.to_le_bytes());
    msix.write_table(28, &0xffff_fffeu32.to_le_bytes());
    let mut both = [0u8; 8];
    msix.read_table(16, &mut both);
    assert_eq!(u64::from_le_bytes(both), 0x0000_0001_fee0_2000);
    msix.read_table(28, &mut control);
    assert_eq!(u32::from_le_bytes(control), 0);
    // Past the table: zeros and a warning.
    msix.read_table(32, &mut control);
    assert_eq!(control, [0; 4]);
    msix.write_table(32, &[1, 2, 3, 4]);
}

#[test]
fn an_unmasked_vector_is_routed_and_fires_its_irqfd() {
    let (msix, irqfds, routes) = vectors(2);
    assert!(!msix.trigger(0), "MSI-X off: the caller uses INTx");
    write_entry(&msix, 0, 0xfee0_0000, 0x41, false);
    assert!(
        routes.0.lock().unwrap().is_empty(),
        "no route while MSI-X is off"
    );
    msix.set_control(CONTROL_ENABLE);
    assert_eq!(
        *routes.0.lock().unwrap(),
        vec![(
            24,
            MsiMessage {
                address: 0xfee0_0000,
                data: 0x41
            }
        )]
    );
    assert!(msix.trigger(0));
    assert!(fired(&irqfds[0]));
    assert!(!fired(&irqfds[1]));
    // Reprogramming an unmasked vector moves its route.
    msix.write_table(8, &0x42u32.to_le_bytes());
    assert_eq!(routes.0.lock().unwrap()[0].1.data, 0x42);
    // A vector past the table is dropped (still "handled": no INTx).
    assert!(msix.trigger(7));
}

#[test]
fn a_masked_vector_sets_its_pending_bit_and_fires_on_unmask() {
    let (msix, irqfds, routes) = vectors(2);
    write_entry(&msix, 1, 0xfee0_0000, 0x51, true);
    msix.set_control(CONTROL_ENABLE);
    assert!(msix.trigger(1));
    assert!(!fired(&irqfds[1]), "masked: nothing delivered");
    assert_eq!(pba(&msix), 0b10);
    assert!(routes.0.lock().unwrap().is_empty());
    // Unmasking routes it first, then delivers the pending interrupt and clears the bit.
    msix.write_table(16 + 12, &0u32.to_le_bytes());
    assert_eq!(routes.0.lock().unwrap()[0].0, 25);
    assert!(fired(&irqfds[1]));
    assert_eq!(pba(&msix), 0);
    // The PBA is read-only: nothing there to write (writes go to the table region only).
    assert!(msix.trigger(1));
    assert!(fired(&irqfds[1]));
}

#[test]
fn the_function_mask_holds_every_vector() {
    let (msix, irqfds, _) = vectors(2);
    write_entry(&msix, 0, 0xfee0_0000, 0x41, false);
    write_entry(&msix, 1, 0xfee0_0000, 0x42, false);
    msix.set_control(CONTROL_ENABLE | CONTROL_FUNCTION_MASK);
    assert!(msix.trigger(0));
    assert!(msix.trigger(1));
    assert!(!fired(&irqfds[0]) && !fired(&irqfds[1]));
    assert_eq!(pba(&msix), 0b11);
    msix.set_control(CONTROL_ENABLE);
    assert!(fired(&irqfds[0]) && fired(&irqfds[1]));
    assert_eq!(pba(&msix), 0);
    msix.set_control(0);
    assert!(!msix.enabled());
    assert!(!msix.trigger(0));
}

#[test]
fn snapshot_restore_and_reset() {
    let (source, _, _) = vectors(3);
    write_entry(&source, 0, 0xfee0_0000, 0x41, false);
    write_entry(&source, 2, 0xfee0_3000, 0x43, true);
    source.set_control(CONTROL_ENABLE);
    source.trigger(2);
    let snapshot = source.snapshot();
    assert_eq!(snapshot.pending, vec![0b100]);

    let (target, irqfds, routes) = vectors(3);
    target.restore(&snapshot, CONTROL_ENABLE).unwrap();
    assert_eq!(target.snapshot(), snapshot);
    assert!(target.enabled());
    assert_eq!(
        *routes.0.lock().unwrap(),
        vec![(
            24,
            MsiMessage {
                address: 0xfee0_0000,
                data: 0x41
            }
        )],
        "only unmasked vectors are routed"
    );
    target.write_table(2 * 16 + 12, &0u32.to_le_bytes());
    assert!(
        fired(&irqfds[2]),
        "the source's pending interrupt arrives on unmask"
    );

    let (other, _, _) = vectors(2);
    assert_eq!(
        other.restore(&snapshot, 0),
        Err(MsixError::Snapshot {
            expected: 2,
            got: 3
        })
    );
    target.reset();
    assert!(!target.enabled());
    assert_eq!(target.snapshot().entries, vec![MsixEntry::default(); 3]);
}
