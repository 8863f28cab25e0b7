//! `virtctl create vm`'s refusals: each message is what KubeVirt's virtctl
//! (v1.9.0-beta.0.1264+d923fdb815cd20) printed (its last stderr line) for `virtctl create vm
//! --name x ARGS`.

use super::tests::run;

/// The error for `--name x ARGS`.
fn err(args: &[&str]) -> String {
    let argv: Vec<&str> = ["--name", "x"]
        .into_iter()
        .chain(args.iter().copied())
        .collect();
    run(&argv).0.expect_err("refused")
}

#[test]
fn refusals_in_kubevirts_words() {
    let cases: &[(&[&str], &str)] = &[
        (&["foo"], "unknown command \"foo\" for \"virtctl create vm\""),
        (&["--run-strategy", "foo"], "failed to parse \"--run-strategy\" flag: invalid run strategy \"foo\", supported values are: Always, Manual, Halted, Once, RerunOnFailure"),
        (&["--termination-grace-period", "abc"], "invalid argument \"abc\" for \"--termination-grace-period\" flag: strconv.ParseInt: parsing \"abc\": invalid syntax"),
        (&["--termination-grace-period", "9223372036854775808"], "invalid argument \"9223372036854775808\" for \"--termination-grace-period\" flag: strconv.ParseInt: parsing \"9223372036854775808\": value out of range"),
        (&["--infer-instancetype=maybe"], "invalid argument \"maybe\" for \"--infer-instancetype\" flag: strconv.ParseBool: parsing \"maybe\": invalid syntax"),
        (&["--ssh-key", "a\"b"], "invalid argument \"a\\\"b\" for \"--ssh-key\" flag: parse error on line 1, column 2: bare \" in non-quoted-field"),
        (&["--memory", "abc"], "failed to parse \"--memory\" flag: quantities must match the regular expression '^([+-]?[0-9.]+)([eEinumkKMGTP]*[-+]?[0-9]*)$'"),
        (&["--memory", "1Gi", "--instancetype", "foo"], "if any flags in the group [memory instancetype infer-instancetype infer-instancetype-from] are set none of the others can be; [instancetype memory] were all set"),
        (&["--preference", "p", "--infer-preference=false"], "if any flags in the group [preference infer-preference infer-preference-from] are set none of the others can be; [infer-preference preference] were all set"),
        (&["--cloud-init-user-data", "a", "--ga-manage-ssh"], "if any flags in the group [cloud-init-user-data ga-manage-ssh] are set none of the others can be; [cloud-init-user-data ga-manage-ssh] were all set"),
        (&["--instancetype", "foo/it"], "failed to parse \"--instancetype\" flag: invalid instancetype kind \"foo\", supported values are: virtualmachineinstancetype, virtualmachineclusterinstancetype"),
        (&["--preference", "a/b/c"], "failed to parse \"--preference\" flag: invalid count 2 of slashes in prefix/name"),
        (&["--volume-containerdisk", "src:img,foo:bar"], "failed to parse \"--volume-containerdisk\" flag: unknown param(s): foo:bar"),
        (&["--volume-containerdisk", "src:img,bootorder:0"], "failed to parse \"--volume-containerdisk\" flag: bootorder must be greater than 0"),
        (&["--volume-containerdisk", "src:img,bootorder:-1"], "failed to parse \"--volume-containerdisk\" flag: failed to parse param \"bootorder\": strconv.ParseUint: parsing \"-1\": invalid syntax"),
        (&["--volume-containerdisk", "src:img,bootorder:1", "--volume-pvc", "src:p,bootorder:1"], "failed to parse \"--volume-pvc\" flag: bootorder 1 was specified multiple times"),
        (&["--volume-containerdisk", "src:img,name:a", "--volume-pvc", "src:p,name:a"], "failed to parse \"--volume-pvc\" flag: there is already a volume with name \"a\""),
        (&["--name", "X_y", "--volume-containerdisk", "src:img"], "failed to parse \"--volume-containerdisk\" flag: invalid name \"X_y-containerdisk-0\": a lowercase RFC 1123 label must consist of lower case alphanumeric characters or '-', and must start and end with an alphanumeric character (e.g. 'my-name',  or '123-abc', regex used for validation is '[a-z0-9]([-a-z0-9]*[a-z0-9])?')"),
        (&["--volume-containerdisk", ""], "failed to parse \"--volume-containerdisk\" flag: params may not be empty"),
        (&["--volume-containerdisk", "foo"], "failed to parse \"--volume-containerdisk\" flag: params need to have at least one colon: foo"),
        (&["--volume-pvc", "name:foo"], "failed to parse \"--volume-pvc\" flag: src must be specified"),
        (&["--volume-pvc", "src:ns/p"], "failed to parse \"--volume-pvc\" flag: not allowed to specify namespace of pvc \"p\""),
        (&["--volume-import", "type:blank,size:1Gi,name:a.b"], "failed to parse \"--volume-import\" flag: invalid name \"a.b\": must not contain dots"),
        (&["--volume-import", "size:1Gi"], "failed to parse \"--volume-import\" flag: type must be specified"),
        (&["--volume-import", "type:foo"], "failed to parse \"--volume-import\" flag: invalid volume import type \"foo\", see help for supported values"),
        (&["--volume-import", "type:blank"], "failed to parse \"--volume-import\" flag: size must be specified"),
        (&["--volume-import", "type:blank,size:x"], "failed to parse \"--volume-import\" flag: failed to parse param \"size\": quantities must match the regular expression '^([+-]?[0-9.]+)([eEinumkKMGTP]*[-+]?[0-9]*)$'"),
        (&["--volume-import", "type:gcs,size:1Gi"], "failed to parse \"--volume-import\" flag: url is required with gcs volume source"),
        (&["--volume-import", "type:imageio,size:1Gi,url:u"], "failed to parse \"--volume-import\" flag: url and diskid are both required with imageio volume source"),
        (&["--volume-import", "type:pvc,src:p"], "failed to parse \"--volume-import\" flag: namespace of pvc \"p\" must be specified"),
        (&["--volume-import", "type:registry,size:1Gi,url:u,imagestream:i"], "failed to parse \"--volume-import\" flag: exactly one of url or imagestream must be defined"),
        (&["--volume-import", "type:registry,size:1Gi,url:u,pullmethod:x"], "failed to parse \"--volume-import\" flag: pullmethod must be set to pod or node"),
        (&["--volume-import", "type:vddk,size:1Gi,url:u,uuid:u,thumbprint:t"], "failed to parse \"--volume-import\" flag: secretref is required with vddk volume source"),
        (&["--volume-sysprep", "src:s,type:foo"], "failed to parse \"--volume-sysprep\" flag: invalid sysprep source type \"foo\", supported values are: configmap, secret"),
        (&["--volume-sysprep", "src:ns/s"], "failed to parse \"--volume-sysprep\" flag: not allowed to specify namespace of configmap or secret \"s\""),
        (&["--volume-containerdisk", "src:i,name:sysprepdisk", "--volume-sysprep", "src:cm"], "failed to parse \"--volume-sysprep\" flag: there is already a volume with name \"sysprepdisk\""),
        (&["--volume-containerdisk", "src:i,name:cloudinitdisk", "--user", "u"], "there is already a volume with name \"cloudinitdisk\""),
        (&["--cloud-init", "bogus"], "failed to parse \"--cloud-init\" flag: invalid cloud-init data source type \"bogus\", supported values are: nocloud, configdrive, none"),
        (&["--access-cred", "type:ssh,src:my-keys"], "failed to parse \"--access-cred\" flag: user must be specified with access credential ssh method ga (\"--user\" flag or param \"user\")"),
        (&["--access-cred", "src:my-keys,method:configdrive", "--access-cred", "src:k2,method:nocloud"], "failed to parse \"--access-cred\" flag: method param and value passed to --cloud-init have to match: nocloud vs configdrive"),
        (&["--access-cred", "src:my-keys,method:nocloud,user:u"], "failed to parse \"--access-cred\" flag: user cannot be specified with selected access credential type and method"),
        (&["--access-cred", "type:password,src:pw,method:nocloud"], "failed to parse \"--access-cred\" flag: invalid access credentials password method \"nocloud\", supported values are: ga"),
        (&["--access-cred", "type:foo,src:pw"], "failed to parse \"--access-cred\" flag: invalid access credential type \"foo\", supported values are: ssh, password"),
        (&["--access-cred", "src:ns/pw"], "failed to parse \"--access-cred\" flag: not allowed to specify namespace of secret \"pw\""),
        (&["--access-cred", "src:pw,method:bad"], "failed to parse \"--access-cred\" flag: invalid access credentials ssh method \"bad\", supported values are: ga, nocloud, configdrive"),
        (&["--infer-instancetype"], "at least one volume is needed to infer an instance type or preference"),
        (&["--infer-preference-from", "foo", "--volume-pvc", "src:p"], "there is no volume with name \"foo\""),
        (&["--infer-instancetype", "--volume-containerdisk", "src:i"], "inference of instancetype or preference works only with datasources, datavolumes or pvcs"),
        (&["--infer-preference", "--volume-import", "type:blank,size:1Gi,name:b"], "this datavolume is not valid to infer an instancetype or preference from (source needs to be PVC, Registry or Snapshot, sourceRef needs to be DataSource)"),
        (&["--password-file", "/nonexist"], "failed to parse \"--password-file\" flag: open /nonexist: no such file or directory"),
        (&["--volume-blank", ""], "failed to parse \"--volume-import\" flag: params may not be empty"),
    ];
    for (args, message) in cases {
        assert_eq!(err(args), *message, "{args:?}");
    }
}

#[test]
fn refusals_after_warnings() {
    // KubeVirt: `--password-file /nonexist` and `--volume-blank ""`: the warning, then the error.
    let (out, warnings) = run(&["--name", "x", "--password-file", "/nonexist"]);
    assert_eq!(
        out,
        Err(
            "failed to parse \"--password-file\" flag: open /nonexist: no such file or directory"
                .into()
        )
    );
    assert_eq!(
        warnings,
        "WARNING: --password-file: The password is stored in cleartext in the VM definition!\n"
    );
    let dir = std::env::temp_dir();
    let (out, _) = run(&["--name", "x", "--password-file", &dir.to_string_lossy()]);
    assert_eq!(
        out,
        Err(format!(
            "failed to parse \"--password-file\" flag: read {}: is a directory",
            dir.to_string_lossy()
        ))
    );
    let (out, warnings) = run(&["--name", "x", "--volume-blank", ""]);
    assert_eq!(
        out,
        Err("failed to parse \"--volume-import\" flag: params may not be empty".into())
    );
    assert_eq!(
        warnings,
        "Flag --volume-blank has been deprecated, use flag --volume-import instead\n"
    );
}

#[test]
fn flag_values_read_as_pflag_reads_them() {
    // KubeVirt: `--ssh-key $'"a\nb"c'`, `--ssh-key $'\n'`, `--infer-instancetype=`,
    // `--infer-instancetype false` (a bool flag takes no separate value).
    assert_eq!(
        err(&["--ssh-key", "\"a\nb\"c"]),
        "invalid argument \"\\\"a\\nb\\\"c\" for \"--ssh-key\" flag: record on line 1; parse error on line 2, column 2: extraneous or missing \" in quoted-field"
    );
    assert_eq!(
        err(&["--ssh-key", "\n"]),
        "invalid argument \"\\n\" for \"--ssh-key\" flag: EOF"
    );
    assert_eq!(
        err(&["--infer-instancetype="]),
        "invalid argument \"\" for \"--infer-instancetype\" flag: strconv.ParseBool: parsing \"\": invalid syntax"
    );
    assert_eq!(
        err(&["--infer-instancetype", "false"]),
        "unknown command \"false\" for \"virtctl create vm\""
    );
    // KubeVirt: `--termination-grace-period 1_000` is 1000; `-9223372036854775808` is read.
    let out = run(&["--name", "x", "--termination-grace-period", "1_000"]).0;
    assert!(out
        .expect("written")
        .contains("      terminationGracePeriodSeconds: 1000\n"));
    let out = run(&[
        "--name",
        "x",
        "--termination-grace-period",
        "-9223372036854775808",
    ])
    .0;
    assert!(out
        .expect("written")
        .contains("      terminationGracePeriodSeconds: -9223372036854775808\n"));
}
