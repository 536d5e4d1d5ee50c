//! Generates the etcd KV and Watch clients from the vendored protos.
//!
//! `protoc` comes from the `protoc-bin-vendored` crate, not from `PATH`, so the build needs
//! nothing but cargo.

fn main() -> Result<(), Box<dyn std::error::Error>> {
    println!("cargo:rerun-if-changed=proto");
    let mut config = prost_build::Config::new();
    config.protoc_executable(protoc_bin_vendored::protoc_bin_path()?);
    tonic_prost_build::configure()
        .build_server(false)
        .compile_with_config(
            config,
            &["proto/etcd/api/etcdserverpb/rpc.proto"],
            &["proto"],
        )?;
    Ok(())
}
