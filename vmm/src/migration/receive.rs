//! The target's side: checks the source's HELLO against its own machine, takes memory, disk
//! blocks and state, and restores the VM paused until it has replied ready.

use super::*;

impl Vmm {
    /// Builds a VM from `config` (the same devices and memory as the source's) and receives
    /// the migration at the other end of `stream` into it. Returns the VM running (or paused,
    /// if the source was paused). On error the source is told why (best effort) and no VM runs.
    pub fn restore_from<S: Read + Write>(
        config: &VmConfig,
        stream: &mut S,
    ) -> Result<Vmm, ReceiveError> {
        let mut preamble_sent = false;
        let result = receive(config, stream, &mut preamble_sent);
        match result {
            Ok((vmm, paused)) => {
                if let Err(e) = write_reply(stream, &mut preamble_sent, REPLY_READY, "ready") {
                    let mut vmm = vmm;
                    vmm.stop();
                    return Err(e.into());
                }
                if !paused {
                    if let Err(e) = vmm.resume() {
                        warn!("migration target: resume: {e}");
                    }
                }
                Ok(vmm)
            }
            Err(e) => {
                let message = error_chain(&e);
                if let Err(reply) = write_reply(stream, &mut preamble_sent, REPLY_REFUSED, &message)
                {
                    warn!("migration target: could not tell the source why it failed: {reply}");
                }
                Err(e)
            }
        }
    }
}

/// The target's side up to a restored, paused VM; returns it and whether the source was paused.
pub(super) fn receive<S: Read + Write>(
    config: &VmConfig,
    stream: &mut S,
    preamble_sent: &mut bool,
) -> Result<(Vmm, bool), ReceiveError> {
    let machine = build_machine(config).map_err(ReceiveError::Build)?;
    wire::read_preamble(stream)?;
    let hello = read_hello(stream)?;
    check_hello(&machine, &hello)?;
    let disks = target_disks(&machine, &hello)?;
    write_reply(stream, preamble_sent, REPLY_ACCEPTED, "accepted")?;

    let state = receive_sections(stream, &machine.mem, &disks)?;
    for (slot, disk) in &disks {
        disk.flush().map_err(|source| ReceiveError::WriteDisk {
            slot: *slot,
            offset: 0,
            source,
        })?;
    }
    let vmm = restore_machine(machine, &state)?;
    Ok((vmm, hello.paused))
}

/// What the target reads of a stream before it has a VM to check it against: the preamble,
/// the HELLO (decoded, not compared with a machine), then the sections up to END, memory
/// written into `mem` and disk sections refused (there are no disks); returns the STATE
/// payload. Every byte of the stream is the source's and untrusted: vmm/fuzz's
/// `migration_stream` target runs this on arbitrary input.
pub fn parse_stream<R: Read>(
    stream: &mut R,
    mem: &GuestMemoryMmap,
) -> Result<Vec<u8>, ReceiveError> {
    wire::read_preamble(stream)?;
    read_hello(stream)?;
    receive_sections(stream, mem, &[])
}

fn read_hello<R: Read>(stream: &mut R) -> Result<Hello, ReceiveError> {
    let (tag, len) = wire::read_section_header(stream)?;
    if tag != wire::TAG_HELLO {
        return Err(WireError::UnexpectedSection {
            expected: "HELLO",
            got: tag,
        }
        .into());
    }
    Ok(Hello::decode(&wire::read_payload(
        stream,
        tag,
        len,
        HELLO_LIMIT,
    )?)?)
}

/// The sections after HELLO up to END: memory into `mem`, disk blocks into `disks`; the STATE
/// payload (there must be one).
fn receive_sections<R: Read>(
    stream: &mut R,
    mem: &GuestMemoryMmap,
    disks: &[(u32, DiskHandle)],
) -> Result<Vec<u8>, ReceiveError> {
    let memory_limit = MEMORY_SECTION_BYTES as u64 + DIRTY_BLOCK + 64;
    let mut state = None;
    loop {
        let (tag, len) = wire::read_section_header(stream)?;
        match tag {
            wire::TAG_MEMORY => {
                let payload = wire::read_payload(stream, tag, len, memory_limit)?;
                apply_memory(mem, &payload)?;
            }
            wire::TAG_DISK => {
                let payload = wire::read_payload(stream, tag, len, memory_limit)?;
                apply_disk(disks, &payload)?;
            }
            wire::TAG_STATE => state = Some(wire::read_payload(stream, tag, len, STATE_LIMIT)?),
            wire::TAG_END => break,
            other => {
                return Err(WireError::UnexpectedSection {
                    expected: "MEMORY, STATE or END",
                    got: other,
                }
                .into())
            }
        }
    }
    state.ok_or(ReceiveError::NoState)
}

pub(super) fn check_hello(machine: &Machine, hello: &Hello) -> Result<(), ReceiveError> {
    let here = ranges(&machine.mem);
    if hello.ranges != here {
        return Err(ReceiveError::MemoryMismatch {
            source_ranges: hello.ranges.clone(),
            target_ranges: here,
        });
    }
    if hello.vcpus != u32::from(machine.vcpu_count) {
        return Err(ReceiveError::VcpuMismatch {
            source_vcpus: hello.vcpus,
            target_vcpus: u32::from(machine.vcpu_count),
        });
    }
    let pci = machine.pci.is_some();
    if hello.pci != pci {
        return Err(ReceiveError::TransportMismatch {
            source_transport: transport_name(hello.pci),
            target_transport: transport_name(pci),
        });
    }
    let devices = device_types(&machine.virtio);
    if hello.devices != devices {
        return Err(ReceiveError::DeviceMismatch {
            source_devices: hello.devices.clone(),
            target_devices: devices,
        });
    }
    Ok(())
}

/// Restores the STATE payload into `machine` and starts its vCPUs parked (paused).
pub(super) fn restore_machine(machine: Machine, state: &[u8]) -> Result<Vmm, ReceiveError> {
    let mut d = Decoder::new(state, "STATE");
    state::restore_vm(&machine.vm.fd, d.bytes()?)?;
    let count = d.u32()?;
    if count != u32::from(machine.vcpu_count) {
        return Err(ReceiveError::VcpuMismatch {
            source_vcpus: count,
            target_vcpus: u32::from(machine.vcpu_count),
        });
    }
    let mut vcpus = Vec::new();
    for id in 0..machine.vcpu_count {
        let vcpu = Vcpu::create(
            &machine.vm,
            id,
            machine.vcpu_count,
            machine.buses.clone(),
            machine.control.clone(),
        )
        .map_err(ReceiveError::CreateVcpu)?;
        state::restore_vcpu(&lock_vcpu(&vcpu.fd()), usize::from(id), d.bytes()?)?;
        vcpus.push(vcpu);
    }
    let serial = state::decode_serial(d.bytes()?)?;
    machine
        .serial
        .lock()
        .unwrap_or_else(crate::poison::fatal)
        .restore(&serial)
        .map_err(ReceiveError::RestoreSerial)?;
    let i8042 = state::decode_i8042(d.bytes()?)?;
    machine
        .i8042
        .lock()
        .unwrap_or_else(crate::poison::fatal)
        .restore(&i8042);
    let devices = d.u32()? as usize;
    if devices != machine.virtio.len() {
        return Err(d
            .malformed(format!(
                "{devices} virtio devices where this VM has {}",
                machine.virtio.len()
            ))
            .into());
    }
    for (i, transport) in machine.virtio.iter().enumerate() {
        let snapshot = match machine.pci {
            None => TransportSnapshot::Mmio(state::decode_transport(d.bytes()?, i)?),
            Some(_) => {
                TransportSnapshot::Pci(Box::new(pci_state::decode_pci_transport(d.bytes()?, i)?))
            }
        };
        transport
            .lock()
            .unwrap_or_else(crate::poison::fatal)
            .restore(&snapshot)
            .map_err(|e| ReceiveError::RestoreDevice(i, e))?;
    }
    if let Some(pci) = &machine.pci {
        let (host_bridge, pm) = pci_state::decode_platform(d.bytes()?)?;
        let mut root = pci.root();
        root.restore_host_bridge(&host_bridge)
            .map_err(ReceiveError::RestoreHostBridge)?;
        root.sync_all();
        drop(root);
        pci.acpi_pm().restore(&pm);
        pci.resampler.raise_pending();
    }
    d.finish()?;
    machine.control.lock().requested = Requested::Pause;
    machine.start(vcpus).map_err(ReceiveError::Start)
}
