//! What every label set of `watch`'s metrics shares: no empty label, and the value that
//! takes what exceeds a cap.

use prometheus_client::encoding::{EncodeLabelSet as _, LabelSetEncoder};

/// Value of every label of the label set that takes what exceeds the cap.
pub const OVERFLOW: &str = "_overflow";

/// Encodes the labels whose value is not empty: a host process has no `container_id`, a
/// spawn counted without syscalls (`--syscalls` off) no `strategy` (node_exporter's rule: no
/// constant or empty labels).
pub fn non_empty(pairs: &[(&str, &str)], encoder: &mut LabelSetEncoder) -> std::fmt::Result {
    let kept: Vec<(&str, &str)> = pairs
        .iter()
        .copied()
        .filter(|(_, v)| !v.is_empty())
        .collect();
    kept.as_slice().encode(encoder)
}
