//! Every expected manifest and message here is what KubeVirt's virtctl
//! (v1.9.0-beta.0.1264+d923fdb815cd20) printed for the same arguments, with its random name
//! parts replaced by `abcde`, `fghjk`, ... in the order they were drawn.

use clap::Parser;

use super::*;
use crate::cli::{Cli, Command, CreateKind};

/// What `virtctl create vm ARGS` prints: the manifest (or the error) and stderr's warnings.
pub(super) fn run(args: &[&str]) -> (Result<String, String>, String) {
    let argv = ["virtctl", "create", "vm"]
        .into_iter()
        .chain(args.iter().copied());
    let cli = Cli::try_parse_from(argv).expect("parses");
    let Command::Create {
        kind: Some(CreateKind::Vm(vm_args)),
    } = cli.command
    else {
        panic!("not create vm");
    };
    let mut suffixes = ["abcde", "fghjk", "lmnpq"].into_iter().map(String::from);
    let mut random = move || suffixes.next().expect("at most three random names");
    let mut warnings = String::new();
    let result = vm(
        &vm_args,
        cli.namespace.as_deref(),
        &mut random,
        &mut warnings,
    );
    (result, warnings)
}

pub(super) fn ok(args: &[&str]) -> String {
    let (result, warnings) = run(args);
    assert_eq!(warnings, "", "{args:?}");
    result.unwrap_or_else(|e| panic!("{args:?}: {e}"))
}

/// The manifest KubeVirt writes for `--name x` with `spec.template.spec` holding `extra` (its
/// own lines, at that indentation) and `spec` holding `spec` before `runStrategy`.
fn manifest(spec: &str, template: &str) -> String {
    format!(
        "apiVersion: kubevirt.io/v1
kind: VirtualMachine
metadata:
  name: x
spec:
{spec}  runStrategy: Always
  template:
    metadata: {{}}
    spec:
{template}status: {{}}
"
    )
}

/// `domain` with the default memory and no disks, and the default grace period.
const DEFAULT_DOMAIN: &str = "      domain:
        devices: {}
        memory:
          guest: 512Mi
        resources: {}
      terminationGracePeriodSeconds: 180
";

#[test]
fn defaults() {
    // KubeVirt: `virtctl create vm --name x`.
    assert_eq!(ok(&["--name", "x"]), manifest("", DEFAULT_DOMAIN));
    // KubeVirt: `virtctl create vm -n ns`; `--name ""` is also a random name.
    let out = ok(&["-n", "ns"]);
    assert!(
        out.starts_with("apiVersion: kubevirt.io/v1\nkind: VirtualMachine\nmetadata:\n  name: vm-abcde\n  namespace: ns\nspec:\n"),
        "{out}"
    );
    assert_eq!(ok(&["--name", "", "-n", "ns"]), out);
    assert_eq!(ok(&["--name", "x", "-n", ""]), ok(&["--name", "x"]));
}

#[test]
fn run_strategy_and_grace_period() {
    // KubeVirt: `--run-strategy rerunonfailure --termination-grace-period 0x10`.
    let out = ok(&[
        "--name",
        "x",
        "--run-strategy",
        "rerunonfailure",
        "--termination-grace-period",
        "0x10",
    ]);
    let expected = manifest("", DEFAULT_DOMAIN)
        .replace("runStrategy: Always", "runStrategy: RerunOnFailure")
        .replace("Seconds: 180", "Seconds: 16");
    assert_eq!(out, expected);
    // KubeVirt: `--termination-grace-period -5`, `--memory 1.5Gi`.
    let out = ok(&["--name", "x", "--termination-grace-period", "-5"]);
    assert!(
        out.contains("      terminationGracePeriodSeconds: -5\n"),
        "{out}"
    );
    let out = ok(&["--name", "x", "--memory", "1.5Gi"]);
    assert!(out.contains("          guest: 1536Mi\n"), "{out}");
}

#[test]
fn instancetype_and_preference_with_kinds() {
    // KubeVirt: `--instancetype virtualmachineinstancetype/it --preference
    // VirtualMachineClusterPreference/p --volume-pvc src:p`: no memory, no inference.
    let out = ok(&[
        "--name",
        "x",
        "--instancetype",
        "virtualmachineinstancetype/it",
        "--preference",
        "VirtualMachineClusterPreference/p",
        "--volume-pvc",
        "src:p",
    ]);
    let spec = "  instancetype:
    kind: virtualmachineinstancetype
    name: it
  preference:
    kind: virtualmachineclusterpreference
    name: p
";
    let template = "      domain:
        devices: {}
        resources: {}
      terminationGracePeriodSeconds: 180
      volumes:
      - name: p
        persistentVolumeClaim:
          claimName: p
";
    assert_eq!(out, manifest(spec, template));
    // KubeVirt: `--instancetype /it`: no kind (KubeVirt's webhook defaults it).
    let out = ok(&["--name", "x", "--instancetype", "/it"]);
    assert!(
        out.contains("spec:\n  instancetype:\n    name: it\n  runStrategy"),
        "{out}"
    );
}

#[test]
fn implicit_inference_only_from_volumes_it_works_with() {
    // KubeVirt: `--volume-containerdisk src:my.registry/img:tag --volume-pvc src:mypvc`: the
    // first volume is a containerdisk, so nothing is inferred.
    let out = ok(&[
        "--name",
        "x",
        "--volume-containerdisk",
        "src:my.registry/img:tag",
        "--volume-pvc",
        "src:mypvc",
    ]);
    let volumes = "      volumes:
      - containerDisk:
          image: my.registry/img:tag
        name: x-containerdisk-0
      - name: mypvc
        persistentVolumeClaim:
          claimName: mypvc
";
    assert_eq!(out, manifest("", &format!("{DEFAULT_DOMAIN}{volumes}")));
    // KubeVirt: `--memory 1Gi --volume-pvc src:p`: the preference only.
    let out = ok(&["--name", "x", "--memory", "1Gi", "--volume-pvc", "src:p"]);
    let spec = "  preference:
    inferFromVolume: p
    inferFromVolumeFailurePolicy: Ignore
";
    let template = "      domain:
        devices: {}
        memory:
          guest: 1Gi
        resources: {}
      terminationGracePeriodSeconds: 180
      volumes:
      - name: p
        persistentVolumeClaim:
          claimName: p
";
    assert_eq!(out, manifest(spec, template));
}

#[test]
fn imported_volume_with_random_name_is_inferred_from() {
    // KubeVirt: `--volume-import type:ds,src:myds`.
    let spec = "  dataVolumeTemplates:
  - metadata:
      name: imported-volume-abcde
    spec:
      sourceRef:
        kind: DataSource
        name: myds
      storage:
        resources: {}
  instancetype:
    inferFromVolume: imported-volume-abcde
    inferFromVolumeFailurePolicy: Ignore
  preference:
    inferFromVolume: imported-volume-abcde
    inferFromVolumeFailurePolicy: Ignore
";
    let volumes = "      volumes:
      - dataVolume:
          name: imported-volume-abcde
        name: imported-volume-abcde
";
    assert_eq!(
        ok(&["--name", "x", "--volume-import", "type:ds,src:myds"]),
        manifest(spec, &format!("{DEFAULT_DOMAIN}{volumes}"))
    );
}

#[test]
fn explicit_inference_drops_the_memory_and_the_failure_policy() {
    // KubeVirt: `--volume-import type:ds,src:ns/myds,size:10Gi,name:root --volume-import
    // type:blank,size:1Gi,name:b --infer-instancetype --infer-preference`.
    let out = ok(&[
        "--name",
        "x",
        "--volume-import",
        "type:ds,src:ns/myds,size:10Gi,name:root",
        "--volume-import",
        "type:blank,size:1Gi,name:b",
        "--infer-instancetype",
        "--infer-preference",
    ]);
    let spec = "  dataVolumeTemplates:
  - metadata:
      name: root
    spec:
      sourceRef:
        kind: DataSource
        name: myds
        namespace: ns
      storage:
        resources:
          requests:
            storage: 10Gi
  - metadata:
      name: b
    spec:
      source:
        blank: {}
      storage:
        resources:
          requests:
            storage: 1Gi
  instancetype:
    inferFromVolume: root
  preference:
    inferFromVolume: root
";
    let template = "      domain:
        devices: {}
        resources: {}
      terminationGracePeriodSeconds: 180
      volumes:
      - dataVolume:
          name: root
        name: root
      - dataVolume:
          name: b
        name: b
";
    assert_eq!(out, manifest(spec, template));
    // KubeVirt: `--infer-preference-from p --volume-containerdisk src:i --volume-pvc src:p`.
    let out = ok(&[
        "--name",
        "x",
        "--infer-preference-from",
        "p",
        "--volume-containerdisk",
        "src:i",
        "--volume-pvc",
        "src:p",
    ]);
    assert!(
        out.contains("spec:\n  preference:\n    inferFromVolume: p\n  runStrategy"),
        "{out}"
    );
}

#[test]
fn boot_orders_add_disks_and_choose_the_volume_to_infer_from() {
    // KubeVirt: `--volume-containerdisk src:img,bootorder:2 --volume-pvc
    // src:p,bootorder:1,name:disk2 --volume-containerdisk src:img2`.
    let out = ok(&[
        "--name",
        "x",
        "--volume-containerdisk",
        "src:img,bootorder:2",
        "--volume-pvc",
        "src:p,bootorder:1,name:disk2",
        "--volume-containerdisk",
        "src:img2",
    ]);
    let spec = "  instancetype:
    inferFromVolume: disk2
    inferFromVolumeFailurePolicy: Ignore
  preference:
    inferFromVolume: disk2
    inferFromVolumeFailurePolicy: Ignore
";
    let template = "      domain:
        devices:
          disks:
          - bootOrder: 2
            name: x-containerdisk-0
          - bootOrder: 1
            name: disk2
        memory:
          guest: 512Mi
        resources: {}
      terminationGracePeriodSeconds: 180
      volumes:
      - containerDisk:
          image: img
        name: x-containerdisk-0
      - containerDisk:
          image: img2
        name: x-containerdisk-1
      - name: disk2
        persistentVolumeClaim:
          claimName: p
";
    assert_eq!(out, manifest(spec, template));
}

#[test]
fn every_import_type() {
    // KubeVirt, each with `--name x --volume-import VALUE`: the source of the template.
    for (value, source) in [
        ("type:blank,size:1Gi,name:a", "      source:\n        blank: {}\n"),
        (
            "type:gcs,url:http://u,secretref:s,size:1Gi,name:a",
            "      source:\n        gcs:\n          secretRef: s\n          url: http://u\n",
        ),
        (
            "type:http,url:http://u,secretref:s,certconfigmap:c,extraheaders:a=1;b=2,secretextraheaders:x,size:1Gi,name:a",
            "      source:\n        http:\n          certConfigMap: c\n          extraHeaders:\n          - a=1\n          - b=2\n          secretExtraHeaders:\n          - x\n          secretRef: s\n          url: http://u\n",
        ),
        (
            "type:imageio,url:http://u,diskid:d,size:1Gi,name:a",
            "      source:\n        imageio:\n          diskId: d\n          url: http://u\n",
        ),
        (
            "type:registry,url:docker://u,secretref:s,certconfigmap:c,pullmethod:node,size:1Gi,name:a",
            "      source:\n        registry:\n          certConfigMap: c\n          pullMethod: node\n          secretRef: s\n          url: docker://u\n",
        ),
        (
            "type:registry,imagestream:is,size:1Gi,name:a",
            "      source:\n        registry:\n          imageStream: is\n",
        ),
        (
            "type:s3,url:http://u,certconfigmap:c,size:1Gi,name:a",
            "      source:\n        s3:\n          certConfigMap: c\n          url: http://u\n",
        ),
        (
            "type:vddk,url:http://u,uuid:u,thumbprint:t,secretref:s,backingfile:b,initimageurl:i,size:1Gi,name:a",
            "      source:\n        vddk:\n          backingFile: b\n          initImageURL: i\n          secretRef: s\n          thumbprint: t\n          url: http://u\n          uuid: u\n",
        ),
    ] {
        let out = ok(&["--name", "x", "--volume-import", value]);
        let expected = format!(
            "  dataVolumeTemplates:\n  - metadata:\n      name: a\n    spec:\n{source}      storage:\n        resources:\n          requests:\n            storage: 1Gi\n"
        );
        assert!(out.contains(&expected), "{value}: {out}");
    }
    // KubeVirt: `type:pvc,src:ns/p,name:a` (size optional) and `type:snapshot,src:ns/s,size:2G`.
    let out = ok(&["--name", "x", "--volume-import", "type:pvc,src:ns/p,name:a"]);
    assert!(out.contains("      source:\n        pvc:\n          name: p\n          namespace: ns\n      storage:\n        resources: {}\n"), "{out}");
    let out = ok(&[
        "--name",
        "x",
        "--volume-import",
        "type:snapshot,src:ns/s,size:2G",
    ]);
    assert!(out.contains("  - metadata:\n      name: imported-volume-abcde\n    spec:\n      source:\n        snapshot:\n          name: s\n          namespace: ns\n      storage:\n        resources:\n          requests:\n            storage: 2G\n"), "{out}");
}

#[test]
fn deprecated_volume_flags_come_first_in_reverse() {
    // KubeVirt: `--volume-datasource src:d1 --volume-datasource src:ns/d2,size:1Gi
    // --volume-blank size:1Gi,name:b1 --volume-blank size:2Gi,name:b2 --volume-clone-pvc
    // src:ns/p,name:c1 --volume-import type:blank,size:3Gi,name:i1`: the names, in order.
    let (out, warnings) = run(&[
        "--name",
        "x",
        "--volume-datasource",
        "src:d1",
        "--volume-datasource",
        "src:ns/d2,size:1Gi",
        "--volume-blank",
        "size:1Gi,name:b1",
        "--volume-blank",
        "size:2Gi,name:b2",
        "--volume-clone-pvc",
        "src:ns/p,name:c1",
        "--volume-import",
        "type:blank,size:3Gi,name:i1",
    ]);
    let out = out.expect("written");
    let names: Vec<&str> = out
        .lines()
        .filter_map(|l| l.strip_prefix("      name: "))
        .collect();
    assert_eq!(
        names,
        [
            "b2",
            "b1",
            "c1",
            "imported-volume-abcde",
            "imported-volume-fghjk",
            "i1"
        ]
    );
    assert!(out.contains("      sourceRef:\n        kind: DataSource\n        name: d2\n        namespace: ns\n      storage:\n        resources:\n          requests:\n            storage: 1Gi\n"), "{out}");
    assert_eq!(
        warnings,
        "Flag --volume-datasource has been deprecated, use flag --volume-import instead
Flag --volume-clone-pvc has been deprecated, use flag --volume-import instead
Flag --volume-blank has been deprecated, use flag --volume-import instead
"
    );
}

#[test]
fn cloud_init_user_password_and_keys() {
    let path = std::env::temp_dir().join(format!("virtctl-vm-pw-{}", std::process::id()));
    std::fs::write(&path, "secret  \n").expect("written");
    let path = path.to_string_lossy().to_string();
    // KubeVirt: `--user cloud-user --ssh-key "ssh-ed25519 AAAA a@b" --ssh-key k2,k3
    // --password-file FILE` (FILE holding "secret  \n").
    let (out, warnings) = run(&[
        "--name",
        "x",
        "--user",
        "cloud-user",
        "--ssh-key",
        "ssh-ed25519 AAAA a@b",
        "--ssh-key",
        "k2,k3",
        "--password-file",
        &path,
    ]);
    let _ = std::fs::remove_file(&path);
    let volumes = "      volumes:
      - cloudInitNoCloud:
          userData: |-
            #cloud-config
            user: cloud-user
            password: secret
            chpasswd: { expire: False }
            ssh_authorized_keys:
              - ssh-ed25519 AAAA a@b
              - k2
              - k3
        name: cloudinitdisk
";
    assert_eq!(out, Ok(manifest("", &format!("{DEFAULT_DOMAIN}{volumes}"))));
    assert_eq!(
        warnings,
        "WARNING: --password-file: The password is stored in cleartext in the VM definition!\n"
    );
    // KubeVirt: `--ssh-key ' a , b '`: lines ending in spaces are double-quoted.
    let out = ok(&["--name", "x", "--ssh-key", " a , b "]);
    assert!(
        out.contains(
            "          userData: \"#cloud-config\\nssh_authorized_keys:\\n  -  a \\n  -  b \"\n"
        ),
        "{out}"
    );
    // KubeVirt: `--ssh-key '"a,b",c'`.
    let out = ok(&["--name", "x", "--ssh-key", "\"a,b\",c"]);
    assert!(
        out.contains("              - a,b\n              - c\n"),
        "{out}"
    );
}

#[test]
fn cloud_init_data_sources() {
    // KubeVirt: `--cloud-init configdrive`: the header alone, as asked for.
    let out = ok(&["--name", "x", "--cloud-init", "configdrive"]);
    assert!(out.contains("      volumes:\n      - cloudInitConfigDrive:\n          userData: '#cloud-config'\n        name: cloudinitdisk\n"), "{out}");
    // KubeVirt: `--user ""`, `--ssh-key ""`, `--ga-manage-ssh=false`: nothing asked for.
    for flag in ["--user=", "--ssh-key=", "--ga-manage-ssh=false"] {
        assert_eq!(ok(&["--name", "x", flag]), manifest("", DEFAULT_DOMAIN));
    }
    // KubeVirt: `--volume-sysprep src:s,type:Secret --cloud-init-user-data dXNlcg==
    // --cloud-init-network-data bmV0 --cloud-init configdrive`.
    let out = ok(&[
        "--name",
        "x",
        "--volume-sysprep",
        "src:s,type:Secret",
        "--cloud-init-user-data",
        "dXNlcg==",
        "--cloud-init-network-data",
        "bmV0",
        "--cloud-init",
        "configdrive",
    ]);
    let volumes = "      volumes:
      - name: sysprepdisk
        sysprep:
          secret:
            name: s
      - cloudInitConfigDrive:
          networkDataBase64: bmV0
          userDataBase64: dXNlcg==
        name: cloudinitdisk
";
    assert_eq!(out, manifest("", &format!("{DEFAULT_DOMAIN}{volumes}")));
    // KubeVirt: `--cloud-init none --ssh-key k`: a warning without a newline.
    let (out, warnings) = run(&["--name", "x", "--cloud-init", "none", "--ssh-key", "k"]);
    assert_eq!(out, Ok(manifest("", DEFAULT_DOMAIN)));
    assert_eq!(
        warnings,
        "WARNING: --cloud-init: was set to none, not creating a data source although other cloud-init options were set"
    );
    // KubeVirt: `--cloud-init none --user u`: no warning.
    assert_eq!(
        ok(&["--name", "x", "--cloud-init", "none", "--user", "u"]),
        manifest("", DEFAULT_DOMAIN)
    );
}

#[test]
fn access_credentials() {
    // KubeVirt: `--user cloud-user --access-cred type:ssh,src:my-keys`: the guest agent may
    // manage SSH.
    let out = ok(&[
        "--name",
        "x",
        "--user",
        "cloud-user",
        "--access-cred",
        "type:ssh,src:my-keys",
    ]);
    let template = "      accessCredentials:
      - sshPublicKey:
          propagationMethod:
            qemuGuestAgent:
              users:
              - cloud-user
          source:
            secret:
              secretName: my-keys
";
    let volumes = "      volumes:
      - cloudInitNoCloud:
          userData: |-
            #cloud-config
            user: cloud-user
            runcmd:
              - [ setsebool, -P, 'virt_qemu_ga_manage_ssh', 'on' ]
        name: cloudinitdisk
";
    assert_eq!(
        out,
        manifest("", &format!("{template}{DEFAULT_DOMAIN}{volumes}"))
    );
    // KubeVirt: `--access-cred src:my-keys,method:configdrive --access-cred
    // type:password,src:pw`: the method sets the data source.
    let out = ok(&[
        "--name",
        "x",
        "--access-cred",
        "src:my-keys,method:configdrive",
        "--access-cred",
        "type:password,src:pw",
    ]);
    let template = "      accessCredentials:
      - sshPublicKey:
          propagationMethod:
            configDrive: {}
          source:
            secret:
              secretName: my-keys
      - userPassword:
          propagationMethod:
            qemuGuestAgent: {}
          source:
            secret:
              secretName: pw
";
    let volumes = "      volumes:
      - cloudInitConfigDrive:
          userData: '#cloud-config'
        name: cloudinitdisk
";
    assert_eq!(
        out,
        manifest("", &format!("{template}{DEFAULT_DOMAIN}{volumes}"))
    );
}

#[test]
fn repeated_flags_keep_the_last_value() {
    // KubeVirt: `--name x --name y --memory 1Gi --memory 2Gi`.
    let out = ok(&[
        "--name", "x", "--name", "y", "--memory", "1Gi", "--memory", "2Gi",
    ]);
    assert!(out.contains("  name: \"y\"\n"), "{out}");
    assert!(out.contains("          guest: 2Gi\n"), "{out}");
    // KubeVirt: `--volume-sysprep src:a,src:b --volume-sysprep src:c`.
    let out = ok(&[
        "--name",
        "x",
        "--volume-sysprep",
        "src:a,src:b",
        "--volume-sysprep",
        "src:c",
    ]);
    assert!(
        out.contains("          configMap:\n            name: c\n"),
        "{out}"
    );
}
