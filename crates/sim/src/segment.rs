//! IPv4/IPv6 + TCP header work for the NIC's TSO and the receiver's GRO: re-exported from
//! `shallow_wire::segment`, the one implementation of header parsing, checksums and
//! segmentation in the project (see there for the rules each function follows).

pub use shallow_wire::segment::*;
