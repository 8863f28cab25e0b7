//! Boot: direct kernel boot. With `firmware.kernelBoot` the kernel (and initrd) come from the
//! kernel-boot container the Pod mounts, with its `kernelArgs`; without it the launcher's
//! bundled kernel boots with the first disk (the boot disk) as root, as Kata and Firecracker do.

use std::path::PathBuf;

use api::VirtualMachineInstanceSpec;
use vmm::config::{DiskConfig, PayloadConfig};

use super::{FieldProblem, HostFacts};

/// Command line of the bundled kernel before the root disk: the serial console is ttyS0.
pub const DEFAULT_CMDLINE: &str = "console=ttyS0";

/// What the VM boots.
pub fn payload(
    spec: &VirtualMachineInstanceSpec,
    facts: &HostFacts,
    disks: &[DiskConfig],
) -> Result<PayloadConfig, FieldProblem> {
    let kernel_boot = spec
        .domain
        .firmware
        .as_ref()
        .and_then(|f| f.kernel_boot.as_ref());
    let Some(kernel_boot) = kernel_boot else {
        let mut cmdline = DEFAULT_CMDLINE.to_string();
        if let Some(root) = disks.first() {
            let mode = if root.readonly { "ro" } else { "rw" };
            cmdline.push_str(&format!(" root=/dev/vda {mode}"));
        }
        return Ok(PayloadConfig {
            kernel: facts.default_kernel.clone(),
            initramfs: facts.default_initramfs.clone(),
            cmdline,
        });
    };
    const PATH: &str = "spec.domain.firmware.kernelBoot";
    let container = kernel_boot.container.as_ref().ok_or_else(|| {
        FieldProblem::new(
            format!("{PATH}.container"),
            "is required: ferrovirt boots the kernel of a container image",
        )
    })?;
    let in_image = |field: &str, path: &str| -> Result<PathBuf, FieldProblem> {
        let relative = path.trim_start_matches('/');
        if relative.is_empty() || relative.split('/').any(|c| c == "..") {
            return Err(FieldProblem::new(
                format!("{PATH}.container.{field}"),
                format!("{path:?} is not a path inside the image"),
            ));
        }
        Ok(facts.kernel_boot_dir.join(relative))
    };
    let kernel_path = container
        .kernel_path
        .as_deref()
        .ok_or_else(|| FieldProblem::new(format!("{PATH}.container.kernelPath"), "is required"))?;
    let kernel = in_image("kernelPath", kernel_path)?;
    let initramfs = container
        .initrd_path
        .as_deref()
        .map(|p| in_image("initrdPath", p))
        .transpose()?;
    let cmdline = kernel_boot
        .kernel_args
        .clone()
        .unwrap_or_else(|| DEFAULT_CMDLINE.to_string());
    Ok(PayloadConfig {
        kernel,
        initramfs,
        cmdline,
    })
}

#[cfg(test)]
mod tests {
    use api::domain::{Firmware, KernelBoot, KernelBootContainer};

    use super::*;
    use crate::converter::host::test_facts;

    fn spec(kernel_boot: Option<KernelBoot>) -> VirtualMachineInstanceSpec {
        let mut spec = VirtualMachineInstanceSpec::default();
        spec.domain.firmware = kernel_boot.map(|kb| Firmware {
            kernel_boot: Some(kb),
            ..Default::default()
        });
        spec
    }

    fn kernel_boot(kernel: Option<&str>, initrd: Option<&str>, args: Option<&str>) -> KernelBoot {
        KernelBoot {
            kernel_args: args.map(Into::into),
            container: Some(KernelBootContainer {
                image: "img".into(),
                kernel_path: kernel.map(Into::into),
                initrd_path: initrd.map(Into::into),
                ..Default::default()
            }),
            ..Default::default()
        }
    }

    fn disk(readonly: bool) -> DiskConfig {
        DiskConfig {
            id: "root".into(),
            path: "/d/root.img".into(),
            readonly,
        }
    }

    #[test]
    fn payloads() {
        let facts = test_facts();
        let cases = [
            (
                spec(None),
                vec![disk(false)],
                PayloadConfig {
                    kernel: facts.default_kernel.clone(),
                    initramfs: facts.default_initramfs.clone(),
                    cmdline: "console=ttyS0 root=/dev/vda rw".into(),
                },
            ),
            (
                spec(None),
                vec![disk(true)],
                PayloadConfig {
                    kernel: facts.default_kernel.clone(),
                    initramfs: facts.default_initramfs.clone(),
                    cmdline: "console=ttyS0 root=/dev/vda ro".into(),
                },
            ),
            (
                spec(None),
                vec![],
                PayloadConfig {
                    kernel: facts.default_kernel.clone(),
                    initramfs: facts.default_initramfs.clone(),
                    cmdline: "console=ttyS0".into(),
                },
            ),
            (
                spec(Some(kernel_boot(
                    Some("/boot/vmlinuz"),
                    Some("/boot/initrd"),
                    Some("console=ttyS0 quiet"),
                ))),
                vec![disk(false)],
                PayloadConfig {
                    kernel: facts.kernel_boot_dir.join("boot/vmlinuz"),
                    initramfs: Some(facts.kernel_boot_dir.join("boot/initrd")),
                    cmdline: "console=ttyS0 quiet".into(),
                },
            ),
            (
                spec(Some(kernel_boot(Some("vmlinuz"), None, None))),
                vec![],
                PayloadConfig {
                    kernel: facts.kernel_boot_dir.join("vmlinuz"),
                    initramfs: None,
                    cmdline: "console=ttyS0".into(),
                },
            ),
        ];
        for (spec, disks, want) in cases {
            assert_eq!(payload(&spec, &facts, &disks).unwrap(), want);
        }
    }

    #[test]
    fn bad_kernel_boot_names_the_field() {
        let facts = test_facts();
        let no_container = KernelBoot::default();
        let cases = [
            (no_container, "spec.domain.firmware.kernelBoot.container"),
            (
                kernel_boot(None, None, None),
                "spec.domain.firmware.kernelBoot.container.kernelPath",
            ),
            (
                kernel_boot(Some("/../etc/k"), None, None),
                "spec.domain.firmware.kernelBoot.container.kernelPath",
            ),
            (
                kernel_boot(Some("/k"), Some("/"), None),
                "spec.domain.firmware.kernelBoot.container.initrdPath",
            ),
        ];
        for (kb, path) in cases {
            assert_eq!(
                payload(&spec(Some(kb)), &facts, &[]).unwrap_err().path,
                path
            );
        }
    }
}
