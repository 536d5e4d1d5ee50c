//! Fuzzes the node's Envoy rate limit service (`ShouldRateLimit`) in-process: the service
//! `--grpc-port` serves, called with whole requests, on a server state of its own that loads
//! every Envoy config of `tests/fixtures/envoy/` whose domain is unique.
//!
//! # Input
//! Steps of one call each. A call's request is either protobuf bytes, decoded as tonic decodes
//! them (most fail to decode, as they would on the wire; those that decode are called), or a
//! structured request: a domain and descriptor keys and values drawn from the configs' own names
//! (so calls reach limits) or random text up to and past the bounds, overrides with every unit
//! and counts at the edges, `hits_addend` at the edges. Its `authorization` metadata is right,
//! wrong, malformed or absent, on one of two services:
//! - **open**: no password anywhere;
//! - **locked**: `default` is off, and the ACL user `gw` (password `gw-secret`) may check keys
//!   under `envoy:mongo_cps*` only.
//!
//! # Invariants
//! - No call panics the server.
//! - An answer is `OK` with one status per descriptor, overall `OVER_LIMIT` exactly when one of
//!   them is, and `limit_remaining` never above its limit's `requests_per_unit`; or an error of
//!   the statuses the service documents (`INVALID_ARGUMENT`, `UNAVAILABLE`, `UNAUTHENTICATED`,
//!   `PERMISSION_DENIED`).
//! - Past a bound (a domain, key or value over 256 bytes, a descriptor with no entries or more
//!   than 32, more than 64 descriptors) the answer is `INVALID_ARGUMENT`.
//! - On the locked service, a call without `gw`'s right password is `UNAUTHENTICATED`.
//! - No call stores a key outside the `envoy:` namespace: after a call on the open service, its
//!   domain (unless it is itself under `envoy:`) is not a key of the store (an empty descriptor
//!   once made the domain itself the key).

#![no_main]

use std::sync::OnceLock;

use arbitrary::Arbitrary;
use libfuzzer_sys::fuzz_target;
use prost::Message;
use sluice_envoy::pb::rate_limit_descriptor::{Entry, RateLimitOverride};
use sluice_envoy::pb::rate_limit_response::Code;
use sluice_envoy::pb::{RateLimitDescriptor, RateLimitRequest, RateLimitService};
use sluice_grpc::{EnvoyConfig, Service};
use sluice_node::grpc::Front;
use sluice_node::{Config, Executor};
use tonic::Code as Status;

#[path = "common/locked.rs"]
mod locked;

/// Domains, keys and values of the fixture configs, and a few near them.
const WORDS: &[&str] = &[
    "mongo_cps",
    "database",
    "users",
    "default",
    "edge_proxy_per_ip",
    "remote_address",
    "10.0.0.1",
    "messaging",
    "message_type",
    "marketing",
    "to_number",
    "2061234567",
    "internal",
    "example4",
    "example6",
    "example7",
    "example8",
    "key",
    "value",
    "",
    " ",
    "api",
    "bob",
    "api:bob",
    "envoy:",
    "a\nb",
    "\u{0}",
];

/// Numbers at the edges.
const COUNTS: &[u32] = &[0, 1, 2, 100, 1000, 65535, u32::MAX];

#[derive(Arbitrary, Debug)]
enum Text {
    Word(u8),
    /// A word repeated to a length around the 256-byte bound.
    Long(u8, u16),
    Raw(String),
}

impl Text {
    fn text(&self) -> String {
        match self {
            Text::Word(i) => WORDS[usize::from(*i) % WORDS.len()].to_owned(),
            Text::Long(i, n) => {
                let w = WORDS[usize::from(*i) % WORDS.len()];
                let w = if w.is_empty() { "x" } else { w };
                let len = 240 + usize::from(*n % 40);
                w.repeat(len / w.len() + 1)[..len].to_owned()
            }
            Text::Raw(s) => s.clone(),
        }
    }
}

#[derive(Arbitrary, Debug)]
struct Descriptor {
    entries: Vec<(Text, Text)>,
    /// A count of entries past the bound, made by repeating the first.
    many: Option<u8>,
    limit: Option<(u8, i32)>,
    hits_addend: Option<u64>,
}

#[derive(Arbitrary, Debug)]
enum Credentials {
    None,
    Right,
    Wrong,
    Raw(String),
}

#[derive(Arbitrary, Debug)]
enum Input {
    Bytes(Vec<u8>),
    Request {
        domain: Text,
        descriptors: Vec<Descriptor>,
        /// A count of descriptors past the bound, made by repeating the first.
        many: Option<u8>,
        hits_addend: u32,
    },
}

#[derive(Arbitrary, Debug)]
struct Step {
    locked: bool,
    credentials: Credentials,
    input: Input,
}

struct Services {
    runtime: tokio::runtime::Runtime,
    open: Service<Front>,
    locked: Service<Front>,
    open_exec: std::sync::Mutex<Executor>,
}

fn config() -> Option<EnvoyConfig> {
    let dir = std::env::temp_dir().join(format!("sluice-fuzz-envoy-{}", std::process::id()));
    std::fs::create_dir_all(&dir).ok()?;
    let fixtures = concat!(env!("CARGO_MANIFEST_DIR"), "/../tests/fixtures/envoy");
    let mut seen = std::collections::HashSet::new();
    let mut names: Vec<_> = std::fs::read_dir(fixtures).ok()?.flatten().collect();
    names.sort_by_key(|e| e.file_name());
    for entry in names {
        let text = std::fs::read_to_string(entry.path()).ok()?;
        let Some(domain) = text.lines().find_map(|l| l.strip_prefix("domain:")) else {
            continue;
        };
        if seen.insert(domain.trim().to_owned()) {
            std::fs::write(dir.join(entry.file_name()), text).ok()?;
        }
    }
    let config = EnvoyConfig::open(&dir);
    let _ = std::fs::remove_dir_all(&dir);
    Some(config.unwrap_or_else(|e| panic!("the fixture configs load: {e}")))
}

fn services() -> &'static Services {
    static SERVICES: OnceLock<Services> = OnceLock::new();
    SERVICES.get_or_init(|| {
        let open = Executor::new(Config::default_for_tests());
        let locked = locked::locked_node(&["~envoy:mongo_cps*", "+@ratelimit"], &[]);
        let config = config().expect("the fixture configs load");
        let locked_config = self::config().expect("the fixture configs load");
        Services {
            runtime: locked::runtime(),
            open: sluice_node::grpc::service(open.shared.clone(), Some(config)),
            locked: sluice_node::grpc::service(locked.shared.clone(), Some(locked_config)),
            open_exec: std::sync::Mutex::new(open),
        }
    })
}

fn request(input: &Input) -> Option<RateLimitRequest> {
    match input {
        Input::Bytes(b) => RateLimitRequest::decode(&b[..]).ok(),
        Input::Request {
            domain,
            descriptors,
            many,
            hits_addend,
        } => {
            let mut out: Vec<RateLimitDescriptor> = descriptors
                .iter()
                .take(8)
                .map(|d| {
                    let mut entries: Vec<Entry> = d
                        .entries
                        .iter()
                        .take(4)
                        .map(|(k, v)| Entry {
                            key: k.text(),
                            value: v.text(),
                        })
                        .collect();
                    if let (Some(n), Some(first)) = (d.many, entries.first().cloned()) {
                        entries.resize(usize::from(n % 40) + 1, first);
                    }
                    RateLimitDescriptor {
                        entries,
                        limit: d.limit.map(|(n, unit)| RateLimitOverride {
                            requests_per_unit: COUNTS[usize::from(n) % COUNTS.len()],
                            unit,
                        }),
                        hits_addend: d.hits_addend,
                    }
                })
                .collect();
            if let (Some(n), Some(first)) = (many, out.first().cloned()) {
                out.resize(usize::from(*n % 72) + 1, first);
            }
            Some(RateLimitRequest {
                domain: domain.text(),
                descriptors: out,
                hits_addend: *hits_addend,
            })
        }
    }
}

/// Whether `request` is past one of the service's documented bounds.
fn past_bounds(request: &RateLimitRequest) -> bool {
    request.domain.len() > 256
        || request.descriptors.len() > 64
        || request.descriptors.iter().any(|d| {
            d.entries.is_empty()
                || d.entries.len() > 32
                || d.entries
                    .iter()
                    .any(|e| e.key.len() > 256 || e.value.len() > 256)
        })
}

fn exists(exec: &std::sync::Mutex<Executor>, key: &[u8]) -> bool {
    let mut exec = exec.lock().expect("executor");
    exec.exec(&[b"EXISTS", key]).as_ref() == b":1\r\n"
}

fuzz_target!(|steps: Vec<Step>| {
    let services = services();
    for step in steps.iter().take(8) {
        let Some(request) = request(&step.input) else {
            continue;
        };
        let mut call = tonic::Request::new(request.clone());
        let auth = match &step.credentials {
            Credentials::None => None,
            Credentials::Right => Some("Basic Z3c6Z3ctc2VjcmV0".to_owned()),
            Credentials::Wrong => Some("Basic Z3c6bm9wZQ==".to_owned()),
            Credentials::Raw(s) => Some(s.clone()),
        };
        let raw_right =
            matches!(&step.credentials, Credentials::Raw(s) if s == "Basic Z3c6Z3ctc2VjcmV0");
        if let Some(value) = auth.and_then(|a| a.parse().ok()) {
            call.metadata_mut().insert("authorization", value);
        }
        let service = if step.locked {
            &services.locked
        } else {
            &services.open
        };
        let answer = services.runtime.block_on(service.should_rate_limit(call));
        match answer {
            Ok(response) => {
                let response = response.into_inner();
                assert!(
                    !past_bounds(&request),
                    "a request past the bounds was served: {request:?}"
                );
                assert_eq!(
                    response.statuses.len(),
                    request.descriptors.len(),
                    "one status per descriptor: {request:?} -> {response:?}"
                );
                let over = response
                    .statuses
                    .iter()
                    .any(|s| s.code == Code::OverLimit as i32);
                assert_eq!(
                    response.overall_code == Code::OverLimit as i32,
                    over,
                    "overall code: {response:?}"
                );
                for s in &response.statuses {
                    if let Some(limit) = &s.current_limit {
                        assert!(
                            s.limit_remaining <= limit.requests_per_unit,
                            "remaining above the limit: {response:?}"
                        );
                    }
                }
                if step.locked {
                    assert!(
                        matches!(step.credentials, Credentials::Right) || raw_right,
                        "the locked service answered without gw's password: {step:?}"
                    );
                }
            }
            Err(status) => {
                assert!(
                    matches!(
                        status.code(),
                        Status::InvalidArgument
                            | Status::Unavailable
                            | Status::Unauthenticated
                            | Status::PermissionDenied
                    ),
                    "undocumented status {status:?} for {request:?}"
                );
                if step.locked && !matches!(step.credentials, Credentials::Right) && !raw_right {
                    assert_eq!(
                        status.code(),
                        Status::Unauthenticated,
                        "{status:?} for {step:?}"
                    );
                }
            }
        }
        // A call keeps its keys in the `envoy:` namespace: its domain, a name outside it, is
        // never a key (a domain that is itself under `envoy:` may name one an earlier call made).
        if !step.locked && !request.domain.is_empty() && !request.domain.starts_with("envoy:") {
            assert!(
                !exists(&services.open_exec, request.domain.as_bytes()),
                "a gRPC call took the RESP key {:?}",
                request.domain
            );
        }
    }
});
