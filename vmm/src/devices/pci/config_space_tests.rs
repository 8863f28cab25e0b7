//! Configuration space tests: masks, BAR sizing and relocation, the capability list, restore.

use super::*;

fn header() -> PciHeader {
    PciHeader {
        vendor_id: 0x1af4,
        device_id: 0x1042,
        revision_id: 1,
        class: (0x01, 0x00, 0x00),
        subsystem_vendor_id: 0x1af4,
        subsystem_id: 0x40,
        interrupt_pin: Some(1),
    }
}

fn write32(space: &mut ConfigSpace, offset: usize, value: u32) {
    space.write(offset, &value.to_le_bytes());
}

#[test]
fn identity_is_read_only_and_reads_back_as_built() {
    let mut space = ConfigSpace::new(&header());
    assert_eq!(space.u32_at(VENDOR_ID), 0x1042_1af4);
    assert_eq!(
        space.u32_at(REVISION_ID),
        0x0100_0001,
        "class 01.00.00, revision 1"
    );
    assert_eq!(space.u32_at(SUBSYSTEM_VENDOR_ID), 0x0040_1af4);
    assert_eq!(space.u8_at(INTERRUPT_PIN), 1);
    write32(&mut space, VENDOR_ID, 0xdead_beef);
    write32(&mut space, REVISION_ID, 0xffff_ffff);
    space.write(INTERRUPT_PIN, &[4]);
    space.write(HEADER_TYPE, &[0x80]);
    assert_eq!(space.u32_at(VENDOR_ID), 0x1042_1af4);
    assert_eq!(space.u32_at(REVISION_ID), 0x0100_0001);
    assert_eq!(space.u8_at(INTERRUPT_PIN), 1);
    assert_eq!(space.u8_at(HEADER_TYPE), 0, "single-function type 0 header");
    // The interrupt line, cache line size and latency timer are the guest's.
    space.write(INTERRUPT_LINE, &[17]);
    space.write(CACHE_LINE_SIZE, &[0x10, 0x40]);
    assert_eq!(space.u8_at(INTERRUPT_LINE), 17);
    assert_eq!(space.u16_at(CACHE_LINE_SIZE), 0x4010);
}

#[test]
fn command_bits_are_masked_and_status_errors_are_write_1_to_clear() {
    let mut space = ConfigSpace::new(&header());
    assert_eq!(
        space.command(),
        COMMAND_MEMORY,
        "firmware enabled memory decoding"
    );
    space.write(COMMAND, &0xffffu16.to_le_bytes());
    assert_eq!(
        space.command(),
        COMMAND_MEMORY | COMMAND_BUS_MASTER | COMMAND_PARITY | COMMAND_SERR | COMMAND_INTX_DISABLE,
        "no I/O decoding, reserved bits stay clear"
    );
    space.write(COMMAND, &0u16.to_le_bytes());
    assert_eq!(space.command(), 0);

    // The device latches errors; the guest clears them by writing ones.
    space.set_u16(STATUS, 0xf900 | STATUS_CAP_LIST);
    space.write(STATUS, &0x1000u16.to_le_bytes());
    assert_eq!(space.u16_at(STATUS), 0xe900 | STATUS_CAP_LIST);
    space.write(STATUS, &0u16.to_le_bytes());
    assert_eq!(
        space.u16_at(STATUS),
        0xe900 | STATUS_CAP_LIST,
        "writing 0 keeps them"
    );
    space.write(STATUS, &0xffffu16.to_le_bytes());
    assert_eq!(
        space.u16_at(STATUS),
        STATUS_CAP_LIST,
        "read-only bits survive an all-ones write"
    );
    // A byte write into the middle of a register touches only that byte.
    space.write(COMMAND + 1, &[0x04]);
    assert_eq!(space.command(), COMMAND_INTX_DISABLE);
}

#[test]
fn a_32_bit_bar_sizes_and_moves() {
    let mut space = ConfigSpace::new(&header());
    let bar = Bar {
        kind: BarKind::Memory32,
        size: 0x8000,
        prefetchable: false,
    };
    space.add_bar(1, bar, 0xd100_8000).unwrap();
    let reg = BAR0 + 4;
    assert_eq!(space.u32_at(reg), 0xd100_8000);
    write32(&mut space, reg, 0xffff_ffff);
    assert_eq!(space.u32_at(reg), 0xffff_8000, "size mask: 32 KiB");
    assert_eq!(!(space.u32_at(reg) & 0xffff_fff0) + 1, 0x8000);
    // Relocation: the address is masked to the BAR's alignment.
    write32(&mut space, reg, 0xd200_1234);
    assert_eq!(space.bar(1), Some((bar, 0xd200_0000)));
    // Unused BAR registers read as zero whatever is written.
    write32(&mut space, BAR0, 0xffff_ffff);
    assert_eq!(space.u32_at(BAR0), 0);
    assert_eq!(space.bar(0), None);
}

#[test]
fn a_64_bit_bar_sizes_and_moves_across_both_halves() {
    let mut space = ConfigSpace::new(&header());
    let bar = Bar {
        kind: BarKind::Memory64,
        size: 0x8000,
        prefetchable: true,
    };
    space.add_bar(0, bar, 0x1_4000_0000).unwrap();
    assert_eq!(space.u32_at(BAR0), 0x4000_000c, "64-bit, prefetchable");
    assert_eq!(space.u32_at(BAR0 + 4), 1);
    write32(&mut space, BAR0, 0xffff_ffff);
    write32(&mut space, BAR0 + 4, 0xffff_ffff);
    assert_eq!(space.u32_at(BAR0), 0xffff_800c);
    assert_eq!(space.u32_at(BAR0 + 4), 0xffff_ffff);
    let size_mask = u64::from(space.u32_at(BAR0 + 4)) << 32 | u64::from(space.u32_at(BAR0) & !0xf);
    assert_eq!(!size_mask + 1, 0x8000);
    write32(&mut space, BAR0, 0x0001_0000);
    write32(&mut space, BAR0 + 4, 0x2);
    assert_eq!(space.bar(0), Some((bar, 0x2_0001_0000)));
    assert_eq!(
        space.bars().collect::<Vec<_>>(),
        vec![(0, bar, 0x2_0001_0000)]
    );
}

#[test]
fn bars_that_do_not_fit_are_refused() {
    let mut space = ConfigSpace::new(&header());
    let bar = |kind, size| Bar {
        kind,
        size,
        prefetchable: false,
    };
    assert_eq!(
        space.add_bar(0, bar(BarKind::Memory32, 0x3000), 0),
        Err(ConfigSpaceError::BarSize {
            index: 0,
            size: 0x3000
        })
    );
    assert!(space.add_bar(0, bar(BarKind::Memory32, 8), 0).is_err());
    assert_eq!(
        space.add_bar(0, bar(BarKind::Memory32, 0x1000), 0x800),
        Err(ConfigSpaceError::BarAddress {
            index: 0,
            address: 0x800
        })
    );
    assert!(space
        .add_bar(0, bar(BarKind::Memory32, 0x1000), 1 << 32)
        .is_err());
    assert_eq!(
        space.add_bar(5, bar(BarKind::Memory64, 0x1000), 0),
        Err(ConfigSpaceError::BarIndex(5))
    );
    space.add_bar(2, bar(BarKind::Memory64, 0x1000), 0).unwrap();
    assert_eq!(
        space.add_bar(3, bar(BarKind::Memory32, 0x1000), 0),
        Err(ConfigSpaceError::BarIndex(3)),
        "the upper half of BAR 2"
    );
    assert!(space.add_bar(2, bar(BarKind::Memory32, 0x1000), 0).is_err());
    assert!(space.add_bar(1, bar(BarKind::Memory64, 0x1000), 0).is_err());
}

#[test]
fn capabilities_form_a_list_the_guest_can_walk() {
    let mut space = ConfigSpace::new(&header());
    assert!(space.capabilities().is_empty());
    assert_eq!(space.u16_at(STATUS) & STATUS_CAP_LIST, 0);
    let first = space
        .add_capability(0x11, &[0x01, 0x00, 0, 0, 0, 0, 0, 0, 0, 0], &[0, 0xc0])
        .unwrap();
    let second = space
        .add_capability(0x09, &[16, 1, 0, 0, 0, 0], &[])
        .unwrap();
    let third = space.add_capability(0x09, &[3], &[0xff]).unwrap();
    assert_eq!(first, 0x40);
    assert_eq!(second, 0x4c, "after 12 bytes, 4-byte aligned");
    assert_eq!(third, 0x54);
    assert_ne!(space.u16_at(STATUS) & STATUS_CAP_LIST, 0);
    assert_eq!(space.u8_at(CAPABILITIES_POINTER), 0x40);
    assert_eq!(
        space.capabilities(),
        vec![(0x11, 0x40), (0x09, 0x4c), (0x09, 0x54)]
    );
    assert_eq!(space.u8_at(third + 1), 0, "the last one ends the list");
    // Headers are read-only; bodies as the device said.
    space.write(first, &[0xff, 0xff, 0xff, 0xff]);
    assert_eq!(space.u32_at(first), 0xc001_4c11);
    space.write(third + 2, &[0x77]);
    assert_eq!(space.u8_at(third + 2), 0x77);
    space.write(second + 2, &[0x77]);
    assert_eq!(space.u8_at(second + 2), 16);

    // A capability that does not fit is refused.
    assert_eq!(
        space.add_capability(0x09, &[0; 200], &[]),
        Err(ConfigSpaceError::CapabilityTooLarge(202))
    );
}

#[test]
fn walking_stops_at_a_loop() {
    let mut space = ConfigSpace::new(&header());
    let first = space.add_capability(0x09, &[0; 2], &[]).unwrap();
    let second = space.add_capability(0x09, &[0; 2], &[]).unwrap();
    space.set_u8(second + 1, first as u8);
    assert_eq!(space.capabilities(), vec![(0x09, first), (0x09, second)]);
}

#[test]
fn accesses_past_the_end_do_not_panic() {
    let mut space = ConfigSpace::new(&header());
    let mut data = [0xaau8; 4];
    space.read(0xfe, &mut data);
    assert_eq!(data, [0; 4]);
    space.read(0xfff, &mut data);
    space.read(usize::MAX, &mut data);
    assert_eq!(data, [0; 4]);
    space.write(0xfe, &[1, 2, 3, 4]);
    space.write(usize::MAX, &[1, 2]);
    space.set_u32(0xfe, 5);
}

#[test]
fn restore_takes_guest_state_but_refuses_another_device() {
    let mut source = ConfigSpace::new(&header());
    source
        .add_bar(
            0,
            Bar {
                kind: BarKind::Memory32,
                size: 0x1000,
                prefetchable: false,
            },
            0xd100_0000,
        )
        .unwrap();
    let fresh = source.clone();
    write32(&mut source, BAR0, 0xd200_0000);
    source.write(INTERRUPT_LINE, &[20]);
    let mut target = fresh.clone();
    target.restore(&source.save()).unwrap();
    assert_eq!(target.bar(0).map(|(_, a)| a), Some(0xd200_0000));
    assert_eq!(target.u8_at(INTERRUPT_LINE), 20);

    let mut other = ConfigSpace::new(&PciHeader {
        device_id: 0x1041,
        ..header()
    });
    assert_eq!(
        other.restore(&source.save()),
        Err(ConfigSpaceError::SavedReadOnly(DEVICE_ID))
    );
    assert_eq!(
        target.restore(&[0; 10]),
        Err(ConfigSpaceError::SavedLength(10))
    );
}
