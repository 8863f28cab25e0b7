//! Boot configuration table tests: BLS order and defaults, grub.cfg as Ubuntu writes it,
//! extlinux variants, grubenv.

use bootdisk::config::bls::{self, BlsEntry};
use bootdisk::config::grub::parse_grub_cfg;
use bootdisk::config::{extlinux::parse_extlinux, grubenv::parse_grubenv, FsRef, Vars};
use bootdisk::Limits;

fn entry(id: &str, text: &str) -> BlsEntry {
    bls::parse_entry(id, text, &Limits::default())
        .expect("parses")
        .expect("has linux")
}

fn fedora(version: &str) -> BlsEntry {
    entry(
        &format!("8f7e-{version}.conf"),
        &format!("title Fedora ({version})\nversion {version}\nlinux /vmlinuz-{version}\ninitrd /initramfs-{version}.img\noptions $kernelopts\n"),
    )
}

#[test]
fn bls_order_newest_first_sort_keys_first() {
    let entries = vec![
        fedora("6.5.6-300.fc39.x86_64"),
        fedora("6.5.12-300.fc39.x86_64"),
        fedora("6.5.6-300.fc39.x86_64+debug"),
        entry(
            "0-rescue-8f7e.conf",
            "title Fedora (0-rescue)\nversion 0-rescue-8f7e\nlinux /vmlinuz-0-rescue\n",
        ),
        entry("zzz.conf", "title Z\nsort-key aaa\nlinux /z\n"),
    ];
    let menu = bls::menu(entries, None, &Vars::new());
    let titles: Vec<&str> = menu.entries.iter().map(|e| e.title.as_str()).collect();
    assert_eq!(
        titles,
        [
            "Z",
            "Fedora (6.5.12-300.fc39.x86_64)",
            "Fedora (6.5.6-300.fc39.x86_64+debug)",
            "Fedora (6.5.6-300.fc39.x86_64)",
            "Fedora (0-rescue)"
        ]
    );
    assert_eq!(menu.default, Some(0));
}

#[test]
fn bls_default_spec_and_kernelopts() {
    let entries = || {
        vec![
            fedora("6.5.6-300.fc39.x86_64"),
            fedora("6.5.12-300.fc39.x86_64"),
        ]
    };
    let vars = Vars::from([(
        "kernelopts".to_string(),
        "root=UUID=abc ro  rhgb quiet".to_string(),
    )]);
    for (spec, want) in [
        (
            Some("8f7e-6.5.6-300.fc39.x86_64"),
            "/vmlinuz-6.5.6-300.fc39.x86_64",
        ),
        (
            Some("8f7e-6.5.6-300.fc39.x86_64.conf"),
            "/vmlinuz-6.5.6-300.fc39.x86_64",
        ),
        (
            Some("Fedora (6.5.6-300.fc39.x86_64)"),
            "/vmlinuz-6.5.6-300.fc39.x86_64",
        ),
        (Some("1"), "/vmlinuz-6.5.6-300.fc39.x86_64"),
        (Some("8f7e-6.5.6*"), "/vmlinuz-6.5.6-300.fc39.x86_64"),
        (Some("no-such-entry"), "/vmlinuz-6.5.12-300.fc39.x86_64"),
        (Some(""), "/vmlinuz-6.5.12-300.fc39.x86_64"),
        (None, "/vmlinuz-6.5.12-300.fc39.x86_64"),
    ] {
        let menu = bls::menu(entries(), spec, &vars);
        let e = menu.default_entry().unwrap();
        assert_eq!(e.kernel, want, "{spec:?}");
        assert_eq!(e.cmdline, "root=UUID=abc ro rhgb quiet");
    }
    assert!(
        bls::parse_entry("x.conf", "title no kernel\n", &Limits::default())
            .unwrap()
            .is_none()
    );
    let e = entry(
        "multi.conf",
        "linux /k\ninitrd /a /b\ninitrd /c\noptions x\noptions y\n# c\nefi /ignored\n",
    );
    assert_eq!(
        (e.initrds.len(), e.options.join(" ")),
        (3, "x y".to_string())
    );
}

const UBUNTU: &str = r#"
if [ -s $prefix/grubenv ]; then
  set have_grubenv=true
  load_env
fi
if [ "${initrdfail}" = 2 ]; then
   set initrdfail=
elif [ "${initrdfail}" = 1 ]; then
   set next_entry="${prev_entry}"
   set prev_entry=
   save_env prev_entry
   if [ "${next_entry}" ]; then
      set initrdfail=2
   fi
fi
if [ "${next_entry}" ] ; then
   set default="${next_entry}"
   set next_entry=
   save_env next_entry
   set boot_once=true
else
   set default="0"
fi
function recordfail {
  set recordfail=1
  if [ -n "${have_grubenv}" ]; then if [ -z "${boot_once}" ]; then save_env recordfail; fi; fi
}
set linux_gfx_mode=keep
export linux_gfx_mode
menuentry 'Ubuntu' --class ubuntu --class gnu-linux --class gnu --class os $menuentry_id_option 'gnulinux-simple-1a2b' {
	recordfail
	load_video
	gfxmode $linux_gfx_mode
	insmod gzio
	if [ x$grub_platform = xxen ]; then insmod xzio; insmod lzopio; fi
	insmod part_gpt
	insmod ext2
	search --no-floppy --fs-uuid --set=root 1a2b
	if [ "${initrdfail}" = 1 ]; then
	  linux	/boot/vmlinuz-6.8.0-45-generic root=LABEL=cloudimg-rootfs ro  console=tty1 console=ttyS0 panic=-1
	  initrd	/boot/initrd.img-6.8.0-45-generic
	else
	  linux	/boot/vmlinuz-6.8.0-45-generic root=LABEL=cloudimg-rootfs ro  console=tty1 console=ttyS0 $vt_handoff
	  if [ "${initrdfail}" = 1 ]; then
	    initrd	/boot/initrd.img-6.8.0-45-generic
	  else
	    initrd	/boot/initrd.img-6.8.0-45-generic
	  fi
	fi
	initrdfail
}
"#;

#[test]
fn ubuntu_grub_cfg() {
    let env = Vars::from([("vt_handoff".to_string(), "vt.handoff=7".to_string())]);
    let c = parse_grub_cfg(UBUNTU, &env, &Limits::default()).unwrap();
    let e = c.menu.default_entry().unwrap();
    assert_eq!(e.title, "Ubuntu");
    assert_eq!(e.kernel, "/boot/vmlinuz-6.8.0-45-generic");
    assert_eq!(e.initrds, ["/boot/initrd.img-6.8.0-45-generic"]);
    assert_eq!(
        e.cmdline,
        "root=LABEL=cloudimg-rootfs ro console=tty1 console=ttyS0 vt.handoff=7"
    );
    assert_eq!(e.fs, Some(FsRef::Uuid("1a2b".into())));
    // After a failed initrd, grubenv's prev_entry becomes the default and initrdfail 2.
    let env = Vars::from([
        ("initrdfail".to_string(), "1".to_string()),
        ("prev_entry".to_string(), "gnulinux-simple-1a2b".to_string()),
    ]);
    let c = parse_grub_cfg(UBUNTU, &env, &Limits::default()).unwrap();
    assert_eq!(
        (c.default_spec.as_str(), c.vars["initrdfail"].as_str()),
        ("gnulinux-simple-1a2b", "2")
    );
    assert!(c
        .menu
        .default_entry()
        .unwrap()
        .cmdline
        .ends_with("console=ttyS0"));
    // initrdfail=1 with no previous entry: the entry's own `if` takes the panic=-1 branch.
    let env = Vars::from([("initrdfail".to_string(), "1".to_string())]);
    let c = parse_grub_cfg(UBUNTU, &env, &Limits::default()).unwrap();
    assert!(c
        .menu
        .default_entry()
        .unwrap()
        .cmdline
        .ends_with("panic=-1"));
}

#[test]
fn grub_line_limit() {
    let text = "set a=1\n".repeat(50);
    let r = parse_grub_cfg(
        &text,
        &Vars::new(),
        &Limits {
            max_config_lines: 10,
            ..Limits::default()
        },
    );
    assert!(r.is_err());
}

#[test]
fn extlinux_variants() {
    let l = Limits::default();
    // Plain syslinux: DEFAULT names a label; MENU DEFAULT is for menus only.
    let m = parse_extlinux(
        "DEFAULT a\nLABEL a\nKERNEL /a\nLABEL b\nMENU DEFAULT\nKERNEL /b\n",
        "/",
        &l,
    )
    .unwrap();
    assert_eq!(m.default_entry().unwrap().kernel, "/a");
    // With a UI, MENU DEFAULT wins.
    let m = parse_extlinux(
        "UI menu.c32\nDEFAULT a\nLABEL a\nKERNEL /a\nLABEL b\nMENU DEFAULT\nKERNEL /b\n",
        "/",
        &l,
    )
    .unwrap();
    assert_eq!(m.default_entry().unwrap().kernel, "/b");
    // Lower case, LOCALBOOT and .c32 entries skipped, APPEND - means none.
    let m = parse_extlinux(
        "label hd\n localboot 0\nlabel menu\n kernel vesamenu.c32\nlabel linux\n linux vmlinuz\n append -\n",
        "/boot/syslinux",
        &l,
    )
    .unwrap();
    assert_eq!(m.entries.len(), 1);
    let e = m.default_entry().unwrap();
    assert_eq!(
        (e.kernel.as_str(), e.cmdline.as_str()),
        ("/boot/syslinux/vmlinuz", "")
    );
    assert!(parse_extlinux("PROMPT 0\n", "/", &l)
        .unwrap()
        .default
        .is_none());
}

#[test]
fn grubenv_escapes() {
    let v = parse_grubenv("# GRUB Environment Block\na=x\\\\y\nb=1\\\n2\nnot a var\n=x\n####");
    assert_eq!(v["a"], "x\\y");
    assert_eq!(v["b"], "1\n2");
    assert_eq!(v.len(), 2);
}
