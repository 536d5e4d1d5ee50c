//! Generates the gRPC server and client for Envoy's rate limit service from the vendored protos.

fn main() -> Result<(), Box<dyn std::error::Error>> {
    println!("cargo:rerun-if-changed=proto");
    tonic_prost_build::configure()
        .compile_protos(&["proto/envoy/service/ratelimit/v3/rls.proto"], &["proto"])?;
    Ok(())
}
