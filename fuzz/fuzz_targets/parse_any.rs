//! Parses arbitrary bytes as virtio-net header, IPv4/IPv6, TCP (with options), ICMPv4 and
//! ICMPv6 through every parser and accessor of `shallow-wire`; re-emits whatever parses into a
//! `Repr`. A panic (including a failed round-trip assertion) is a finding.
#![no_main]

use libfuzzer_sys::fuzz_target;

#[path = "../../crates/wire/tests/common/exercise.rs"]
mod exercise;

fuzz_target!(|data: &[u8]| {
    exercise::exercise(data);
});
