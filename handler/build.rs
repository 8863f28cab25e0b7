//! Compiles the kubelet's device-plugin API with the pure-Rust protox (no `protoc` needed).

fn main() -> Result<(), Box<dyn std::error::Error>> {
    let proto = "proto/deviceplugin.proto";
    println!("cargo:rerun-if-changed={proto}");
    let descriptors = protox::compile([proto], ["proto"])?;
    tonic_prost_build::configure()
        .build_server(true)
        .build_client(true)
        .compile_fds(descriptors)?;
    Ok(())
}
