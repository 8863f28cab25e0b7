//! With the `grpc` feature: compiles `proto/launcher.proto` with the pure-Rust protox (no `protoc`
//! on the build host) and generates the tonic server and client code from its descriptors.
//! Without it there is nothing to build.

fn main() -> Result<(), Box<dyn std::error::Error>> {
    #[cfg(feature = "grpc")]
    {
        let proto = "proto/launcher.proto";
        println!("cargo:rerun-if-changed={proto}");
        let descriptors = protox::compile([proto], ["proto"])?;
        tonic_prost_build::configure()
            .build_server(true)
            .build_client(true)
            .compile_fds(descriptors)?;
    }
    Ok(())
}
