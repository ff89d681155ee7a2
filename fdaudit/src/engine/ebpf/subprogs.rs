//! Which of the object's programs call a subprogram (a bpf-to-bpf call: compiler_builtins'
//! memset or memmove, or a function the compiler kept out of line). An older verifier (5.10's
//! among them) cannot backtrack scalar precision through such a call: it marks every scalar
//! precise and prunes almost no state, so a program with loops and many branches that calls
//! one is not verified in minutes there (docs/kernels.md, `trace --origin` on 5.10).

#[cfg(test)]
mod tests {
    use object::{
        Object as _, ObjectSection as _, ObjectSymbol as _, RelocationTarget, SectionKind,
        SymbolKind, SymbolSection,
    };

    use crate::engine::ebpf::mode_programs;

    /// The subprograms (by symbol name) program `name` of the ELF object `elf` calls.
    fn calls_of(elf: &[u8], name: &str) -> Vec<String> {
        let file = object::File::parse(elf).expect("the eBPF object parses");
        let prog = file
            .symbols()
            .find(|s| s.name() == Ok(name) && s.kind() == SymbolKind::Text)
            .unwrap_or_else(|| panic!("no program {name} in the object"));
        let SymbolSection::Section(index) = prog.section() else {
            panic!("{name} is in no section");
        };
        let section = file.section_by_index(index).expect("its section");
        let range = prog.address()..prog.address() + prog.size();
        let mut calls = Vec::new();
        for (offset, reloc) in section.relocations() {
            let RelocationTarget::Symbol(target) = reloc.target() else {
                continue;
            };
            if !range.contains(&offset) {
                continue;
            }
            let target = file.symbol_by_index(target).expect("relocation target");
            let SymbolSection::Section(at) = target.section() else {
                continue;
            };
            // A map or global is in a data section; a call's target is in a text one.
            if file.section_by_index(at).map(|s| s.kind()) == Ok(SectionKind::Text) {
                calls.push(target.name().unwrap_or("?").to_string());
            }
        }
        calls
    }

    #[test]
    fn the_origin_and_unclosed_programs_call_no_subprogram() {
        if crate::EBPF_OBJECT.is_empty() {
            panic!("built without the eBPF object (FDAUDIT_SKIP_EBPF=1): this test needs it");
        }
        for spec in mode_programs(true, true) {
            let calls = calls_of(crate::EBPF_OBJECT, spec.name);
            assert!(
                calls.is_empty(),
                "{} calls {calls:?}: 5.10's verifier then does not finish with it",
                spec.name
            );
        }
        // The check sees calls where there are some: sys_exit calls memset.
        assert!(
            !calls_of(crate::EBPF_OBJECT, "sys_exit").is_empty(),
            "sys_exit calls no subprogram: the check finds none anywhere"
        );
    }
}
