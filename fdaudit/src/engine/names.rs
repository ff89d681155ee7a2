//! The one spelling of an engine enum's values ([`super::strategy::Strategy`],
//! [`super::ebpf::Backend`]): clap's, derived from the variants by `ValueEnum` (kebab-case),
//! which `as_str`, the text output and `trace`'s JSON then use too. A new variant is one
//! line in its enum.

use std::sync::OnceLock;

/// Each value's name, in the order of `E::value_variants()` (declaration order, which the
/// enums' tests check is their discriminants' order), made once per enum and kept for the
/// process.
pub fn value_names<E: clap::ValueEnum>(
    names: &'static OnceLock<Vec<&'static str>>,
) -> &'static [&'static str] {
    names.get_or_init(|| {
        E::value_variants()
            .iter()
            .map(|v| {
                let name = v.to_possible_value().map(|p| p.get_name().to_owned());
                let name = name.unwrap_or_default();
                &*Box::leak(name.into_boxed_str())
            })
            .collect()
    })
}

#[cfg(test)]
mod tests {
    use super::super::{ebpf::Backend, strategy::Strategy};
    use clap::ValueEnum;

    #[test]
    fn each_value_is_named_at_its_discriminant() {
        for (i, s) in Strategy::value_variants().iter().enumerate() {
            assert_eq!(*s as usize, i, "{s:?}");
        }
        for (i, b) in Backend::value_variants().iter().enumerate() {
            assert_eq!(*b as usize, i, "{b:?}");
        }
        assert_eq!(Strategy::CloseRange.as_str(), "close-range");
        assert_eq!(Strategy::Unknown.as_str(), "unknown");
        assert_eq!(Backend::RawTp.as_str(), "raw-tp");
        assert_eq!(Backend::Fentry.as_str(), "fentry");
    }
}
