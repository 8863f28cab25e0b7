//! `virtctl create vm`'s flags. Values are kept as given and read (with KubeVirt's messages)
//! by [`crate::create_vm::vm`]: a flag left out is `None` (or empty), as pflag's `Changed`.

use clap::Args;

pub(super) const VM_ABOUT: &str = "Create a VirtualMachine manifest.

If no boot order was specified volumes have the following fixed boot order:
Containerdisk > PVC > DataSource > Clone PVC > Blank > Imported volumes";

pub(super) const VM_EXAMPLES: &str = "Examples:
  # Create a manifest for a VirtualMachine with a random name:
  virtctl create vm

  # Create a manifest for a VirtualMachine with a specified name and RunStrategy Halted
  virtctl create vm --name=my-vm --run-strategy=Halted

  # Create a manifest for a VirtualMachine with a VirtualMachineInstancetype (namespaced)
  virtctl create vm --instancetype=virtualmachineinstancetype/my-instancetype

  # Create a manifest for a VirtualMachine with a VirtualMachineClusterPreference
  virtctl create vm --preference=my-preference

  # Create a manifest for a VirtualMachine with memory and an ephemeral containerdisk volume
  virtctl create vm --memory=1Gi --volume-containerdisk=src:my.registry/my-image:my-tag

  # Create a manifest for a VirtualMachine cloning a DataSource of another namespace, with a size
  virtctl create vm --volume-import=type:ds,src:my-ns/my-ds,size:50Gi

  # Create a manifest for a VirtualMachine with two volumes and a boot order
  virtctl create vm --volume-containerdisk=src:my.registry/my-image:my-tag --volume-import=type:ds,src:my-ds,bootorder:1

  # Create a manifest for a VirtualMachine using a PVC without cloning it
  virtctl create vm --volume-pvc=src:my-pvc

  # Create a manifest for a VirtualMachine with a cloud-init user and SSH authorized key
  virtctl create vm --user cloud-user --ssh-key=\"ssh-ed25519 AAAA....\"

  # Create a manifest for a VirtualMachine with SSH keys from the secret my-keys, added by the guest agent
  virtctl create vm --user cloud-user --access-cred=type:ssh,src:my-keys";

/// `virtctl create vm`'s flags, in KubeVirt's order.
#[derive(Args, Clone, Debug, Default, PartialEq, Eq)]
pub struct VmArgs {
    /// Specify the name of the VM.
    #[arg(long, value_name = "string", allow_hyphen_values = true)]
    pub name: Option<String>,
    /// Specify the RunStrategy of the VM. (default "Always")
    #[arg(long, value_name = "string", allow_hyphen_values = true)]
    pub run_strategy: Option<String>,
    /// Specify the termination grace period of the VM. (default 180)
    #[arg(long, value_name = "int", allow_hyphen_values = true)]
    pub termination_grace_period: Option<String>,
    /// Specify the memory of the VM. (default "512Mi")
    #[arg(long, value_name = "string", allow_hyphen_values = true)]
    pub memory: Option<String>,
    /// Specify the Instance Type of the VM. Mutually exclusive with instancetype inference flags.
    #[arg(long, value_name = "string", allow_hyphen_values = true)]
    pub instancetype: Option<String>,
    /// Specify if the Instance Type of the VM should be inferred from the first boot disk. Mutually exclusive with --infer-instancetype-from. (default true)
    #[arg(long, value_name = "bool", num_args = 0..=1, require_equals = true, default_missing_value = "true")]
    pub infer_instancetype: Option<String>,
    /// Specify the volume to infer the Instance Type of the VM from. Mutually exclusive with --infer-instancetype.
    #[arg(long, value_name = "string", allow_hyphen_values = true)]
    pub infer_instancetype_from: Option<String>,
    /// Specify the Preference of the VM. Mutually exclusive with preference inference flags.
    #[arg(long, value_name = "string", allow_hyphen_values = true)]
    pub preference: Option<String>,
    /// Specify if the Preference of the VM should be inferred from the first boot disk. Mutually exclusive with --infer-preference-from. (default true)
    #[arg(long, value_name = "bool", num_args = 0..=1, require_equals = true, default_missing_value = "true")]
    pub infer_preference: Option<String>,
    /// Specify the volume to infer the Preference of the VM from. Mutually exclusive with --infer-preference.
    #[arg(long, value_name = "string", allow_hyphen_values = true)]
    pub infer_preference_from: Option<String>,
    /// Specify a containerdisk to be used by the VM. Can be provided multiple times.
    /// Supported parameters: name:string,src:string,bootorder:uint
    #[arg(
        long,
        value_name = "stringArray",
        allow_hyphen_values = true,
        verbatim_doc_comment
    )]
    pub volume_containerdisk: Vec<String>,
    /// Specify a PVCs to be used by the VM. Can be provided multiple times.
    /// Supported parameters: name:string,src:string,bootorder:uint
    #[arg(
        long,
        value_name = "stringArray",
        allow_hyphen_values = true,
        verbatim_doc_comment
    )]
    pub volume_pvc: Vec<String>,
    /// Specify the source for DataVolume. Can be provided multiple times.
    /// Supported parameters:
    ///   type blank - size:resource.Quantity,type:string,name:string,bootorder:uint
    ///   type gcs - secretref:string,url:string,size:resource.Quantity,type:string,name:string,bootorder:uint
    ///   type http - certconfigmap:string,extraheaders:[]string,secretextraheaders:[]string,secretref:string,url:string,size:resource.Quantity,type:string,name:string,bootorder:uint
    ///   type imageio - certconfigmap:string,diskid:string,secretref:string,url:string,size:resource.Quantity,type:string,name:string,bootorder:uint
    ///   type pvc - name:string,src:string,size:resource.Quantity,type:string,bootorder:uint
    ///   type registry - certconfigmap:string,imagestream:string,pullmethod:string,secretref:string,url:string,size:resource.Quantity,type:string,name:string,bootorder:uint
    ///   type s3 - certconfigmap:string,secretref:string,url:string,size:resource.Quantity,type:string,name:string,bootorder:uint
    ///   type vddk - backingfile:string,initimageurl:string,secretref:string,thumbprint:string,url:string,uuid:string,size:resource.Quantity,type:string,name:string,bootorder:uint
    ///   type snapshot - name:string,src:string,size:resource.Quantity,type:string,bootorder:uint
    ///   type ds - name:string,src:string,size:resource.Quantity,type:string,bootorder:uint
    #[arg(
        long,
        value_name = "stringArray",
        allow_hyphen_values = true,
        verbatim_doc_comment
    )]
    pub volume_import: Vec<String>,
    /// Specify a ConfigMap or Secret to be used as sysprep volume by the VM.
    /// Supported parameters: src:string,type:string
    #[arg(
        long,
        value_name = "string",
        allow_hyphen_values = true,
        verbatim_doc_comment
    )]
    pub volume_sysprep: Option<String>,
    /// Specify the user in the cloud-init user data that is added to the VM.
    #[arg(long, value_name = "string", allow_hyphen_values = true)]
    pub user: Option<String>,
    /// Specify a file to read the password from for the cloud-init user data that is added to the VM.
    #[arg(long, value_name = "string", allow_hyphen_values = true)]
    pub password_file: Option<String>,
    /// Specify one or more SSH authorized keys in the cloud-init user data that is added to the VM.
    #[arg(long, value_name = "strings", allow_hyphen_values = true)]
    pub ssh_key: Vec<String>,
    /// Specify if the qemu-guest-agent should be able to manage SSH in the cloud-init user data that is added to the VM.
    /// This is useful in combination with the "credentials add-ssh-key" command or when using the --access-cred flag.
    #[arg(long, value_name = "bool", num_args = 0..=1, require_equals = true, default_missing_value = "true", verbatim_doc_comment)]
    pub ga_manage_ssh: Option<String>,
    /// Specify an access credential to be injected into the VM. Can be provided multiple times.
    /// Supported parameters: type:string,src:string,method:string,user:string
    #[arg(
        long,
        value_name = "stringArray",
        allow_hyphen_values = true,
        verbatim_doc_comment
    )]
    pub access_cred: Vec<String>,
    /// Specify the type of the generated cloud-init data source.
    /// Supported values: nocloud, configdrive, none (default "nocloud")
    #[arg(
        long,
        value_name = "string",
        allow_hyphen_values = true,
        verbatim_doc_comment
    )]
    pub cloud_init: Option<String>,
    /// Specify the base64 encoded cloud-init user data of the VM.
    #[arg(long, value_name = "string", allow_hyphen_values = true)]
    pub cloud_init_user_data: Option<String>,
    /// Specify the base64 encoded cloud-init network data of the VM.
    #[arg(long, value_name = "string", allow_hyphen_values = true)]
    pub cloud_init_network_data: Option<String>,
    /// Specify a DataSource to be cloned by the VM. Can be provided multiple times.
    /// Supported parameters: name:string,src:string,bootorder:uint,size:resource.Quantity
    /// DEPRECATED: Use --volume-import with type:ds and same params instead.
    #[arg(
        long,
        value_name = "stringArray",
        allow_hyphen_values = true,
        verbatim_doc_comment
    )]
    pub volume_datasource: Vec<String>,
    /// Specify a PVC to be cloned by the VM. Can be provided multiple times.
    /// Supported parameters: name:string,src:string,bootorder:uint,size:resource.Quantity
    /// DEPRECATED: Use --volume-import with type:pvc and same params instead.
    #[arg(
        long,
        value_name = "stringArray",
        allow_hyphen_values = true,
        verbatim_doc_comment
    )]
    pub volume_clone_pvc: Vec<String>,
    /// Specify a blank volume to be used by the VM. Can be provided multiple times.
    /// Supported parameters: name:string,size:resource.Quantity
    /// DEPRECATED: Use --volume-import with type:blank and same params instead.
    #[arg(
        long,
        value_name = "stringArray",
        allow_hyphen_values = true,
        verbatim_doc_comment
    )]
    pub volume_blank: Vec<String>,
    /// Arguments, which KubeVirt's virtctl refuses (`unknown command`).
    #[arg(hide = true)]
    pub args: Vec<String>,
}
