//! The source's side: pre-copy rounds, the pause, the last dirty pages and the VM's state.

use super::*;

impl Vmm {
    /// Live-migrates this VM to the target at the other end of `stream` (see the module docs
    /// for the protocol). On success the VM here is stopped and the stats say what was sent; on
    /// failure it is running again (or still paused, if it was paused) and nothing is lost.
    pub fn send_migration<S: Read + Write>(
        &self,
        stream: &mut S,
        options: &MigrationOptions,
    ) -> Result<MigrationStats, SendError> {
        let started = Instant::now();
        if self.migrating.swap(true, Ordering::SeqCst) {
            return Err(SendError::AlreadyMigrating);
        }
        // A reset in place that began before stays out of the copied state.
        self.control.wait_for_reset();
        let was_paused = match self.state() {
            VmState::Stopped(exit) => {
                self.migrating.store(false, Ordering::SeqCst);
                return Err(SendError::NotRunning(exit));
            }
            VmState::Paused => true,
            VmState::Running => false,
        };
        let result = self.migrate_out(stream, options, was_paused, started);
        if let Err(e) = set_dirty_logging(&self.vm.fd, self.guest_memory(), false) {
            warn!("migration: turn dirty-page logging off: {e}");
        }
        match result {
            Ok(stats) => {
                // The vCPU threads leave their parking at once; `stop`, `wait` or drop joins them.
                self.control.request_exit(crate::lifecycle::VmExit::Stopped);
                self.migrating.store(false, Ordering::SeqCst);
                Ok(stats)
            }
            Err(e) => {
                for transport in &self.devices.virtio {
                    transport
                        .lock()
                        .unwrap_or_else(crate::poison::fatal)
                        .resume_device();
                }
                if !was_paused && self.state() == VmState::Paused {
                    if let Err(resume) = self.resume_vcpus() {
                        warn!("migration failed and the VM cannot resume: {resume}");
                    }
                }
                self.migrating.store(false, Ordering::SeqCst);
                Err(e)
            }
        }
    }

    fn migrate_out<S: Read + Write>(
        &self,
        stream: &mut S,
        options: &MigrationOptions,
        was_paused: bool,
        started: Instant,
    ) -> Result<MigrationStats, SendError> {
        let mem = self.guest_memory().clone();
        let hello = Hello {
            ranges: ranges(&mem),
            vcpus: self.vcpu_fds.len() as u32,
            devices: device_types(&self.devices.virtio),
            paused: was_paused,
            disks: Vec::new(),
            pci: self.devices.pci.is_some(),
        };
        let mut disks: Vec<CopiedDisk> = Vec::new();
        for (slot, transport) in self.devices.virtio.iter().enumerate() {
            let Some(handle) = transport.lock().unwrap_or_else(crate::poison::fatal).disk() else {
                continue;
            };
            if handle.readonly() || options.shared_disks.iter().any(|id| id == handle.id()) {
                continue;
            }
            let size = handle.size_bytes();
            let words = size.div_ceil(DIRTY_BLOCK).div_ceil(64) as usize;
            disks.push(CopiedDisk {
                slot: slot as u32,
                handle,
                size,
                pending: vec![0; words],
            });
        }
        let hello = Hello {
            disks: disks.iter().map(|d| (d.slot, d.size)).collect(),
            ..hello
        };
        wire::write_preamble(stream)?;
        wire::write_section(stream, wire::TAG_HELLO, &hello.encode())?;
        flush(stream)?;
        wire::read_preamble(stream)?;
        match read_reply(stream)? {
            (REPLY_ACCEPTED, _) => {}
            (_, message) => return Err(SendError::Refused(message)),
        }

        let mut stats = MigrationStats::default();
        set_dirty_logging(&self.vm.fd, &mem, true).map_err(SendError::DirtyLogging)?;
        for disk in &mut disks {
            disk.handle.take_written();
        }
        let round0 = send_pages(
            stream,
            &mem,
            0,
            all_pages(&mem).into_iter(),
            true,
            &mut stats,
        )?;
        stats.pages_per_round.push(round0);
        for disk in &mut disks {
            disk.send(stream, 0, true, &mut stats)?;
        }
        let mut round = 1u32;
        let mut pending = take_dirty_pages(&self.vm.fd, &mem).map_err(SendError::DirtyLog)?;
        for disk in &mut disks {
            disk.take_written();
        }
        while !was_paused && round <= options.max_rounds {
            let gpas = dirty_gpas(&mem, &pending);
            let disk_blocks: u64 = disks
                .iter()
                .map(|d| set_bits(&d.pending, d.blocks()).len() as u64)
                .sum();
            if gpas.len() as u64 + disk_blocks * (DIRTY_BLOCK / PAGE_SIZE)
                <= options.stop_copy_pages
            {
                break;
            }
            let sent = send_pages(stream, &mem, round, gpas.into_iter(), false, &mut stats)?;
            stats.pages_per_round.push(sent);
            for disk in &mut disks {
                disk.send(stream, round, false, &mut stats)?;
            }
            round += 1;
            pending = take_dirty_pages(&self.vm.fd, &mem).map_err(SendError::DirtyLog)?;
            for disk in &mut disks {
                disk.take_written();
            }
        }

        // Stop and copy.
        let paused_at = Instant::now();
        if !was_paused {
            self.pause_vcpus().map_err(|e| match e {
                crate::vmm::LifecycleError::NotRunning(exit) => SendError::NotRunning(exit),
                crate::vmm::LifecycleError::Migrating => SendError::AlreadyMigrating,
            })?;
        }
        for transport in &self.devices.virtio {
            transport
                .lock()
                .unwrap_or_else(crate::poison::fatal)
                .pause_device();
        }
        merge(
            &mut pending,
            take_dirty_pages(&self.vm.fd, &mem).map_err(SendError::DirtyLog)?,
        );
        let gpas = dirty_gpas(&mem, &pending);
        let sent = send_pages(stream, &mem, round, gpas.into_iter(), false, &mut stats)?;
        stats.pages_per_round.push(sent);
        for disk in &mut disks {
            disk.take_written();
            disk.send(stream, round, false, &mut stats)?;
        }

        let state = self.save_state().map_err(SendError::SaveState)?;
        wire::write_section(stream, wire::TAG_STATE, &state)?;
        wire::write_section(stream, wire::TAG_END, &[])?;
        stats.bytes_sent += state.len() as u64 + 24;
        flush(stream)?;
        match read_reply(stream)? {
            (REPLY_READY, _) => {}
            (_, message) => return Err(SendError::Refused(message)),
        }
        stats.downtime = paused_at.elapsed();
        stats.total = started.elapsed();
        Ok(stats)
    }

    /// The STATE payload: VM, vCPUs, COM1, i8042, virtio transports (the VM must be paused).
    fn save_state(&self) -> Result<Vec<u8>, KvmStateError> {
        let mut e = Encoder::default();
        e.bytes(&state::save_vm(&self.vm.fd)?);
        e.u32(self.vcpu_fds.len() as u32);
        let mut msrs = None;
        for (id, fd) in self.vcpu_fds.iter().enumerate() {
            let fd = lock_vcpu(fd);
            if msrs.is_none() {
                msrs = Some(state::migratable_msrs(&self.vm.kvm, &fd)?);
            }
            let indices = msrs.as_deref().unwrap_or_default();
            e.bytes(&state::save_vcpu(&fd, id, indices)?);
        }
        let serial = self
            .devices
            .serial
            .lock()
            .unwrap_or_else(crate::poison::fatal)
            .state();
        e.bytes(&state::encode_serial(&serial));
        let i8042 = self
            .devices
            .i8042
            .lock()
            .unwrap_or_else(crate::poison::fatal)
            .state();
        e.bytes(&state::encode_i8042(&i8042));
        e.u32(self.devices.virtio.len() as u32);
        for transport in &self.devices.virtio {
            let snapshot = transport
                .lock()
                .unwrap_or_else(crate::poison::fatal)
                .snapshot();
            match snapshot {
                TransportSnapshot::Mmio(t) => e.bytes(&state::encode_transport(&t)),
                TransportSnapshot::Pci(t) => e.bytes(&pci_state::encode_pci_transport(&t)),
            };
        }
        if let Some(pci) = &self.devices.pci {
            let host_bridge = pci.root().host_bridge_state();
            let pm = pci.acpi_pm().state();
            e.bytes(&pci_state::encode_platform(&host_bridge, &pm));
        }
        Ok(e.0)
    }
}

pub(super) fn flush<S: Write>(stream: &mut S) -> Result<(), WireError> {
    stream.flush().map_err(|source| WireError::Io {
        what: "flush".into(),
        source,
    })
}
