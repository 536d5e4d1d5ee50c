//! Generates the gRPC server and client for Envoy's rate limit service from the vendored protos.
//!
//! `protoc` comes from the `protoc-bin-vendored` crate, not from `PATH`, so the build needs
//! nothing but cargo.

fn main() -> Result<(), Box<dyn std::error::Error>> {
    println!("cargo:rerun-if-changed=proto");
    let mut config = prost_build::Config::new();
    config.protoc_executable(protoc_bin_vendored::protoc_bin_path()?);
    let proto = std::path::PathBuf::from("proto");
    let well_known = protoc_bin_vendored::include_path()?;
    tonic_prost_build::configure().compile_with_config(
        config,
        &[proto.join("envoy/service/ratelimit/v3/rls.proto")],
        &[proto, well_known],
    )?;
    Ok(())
}
