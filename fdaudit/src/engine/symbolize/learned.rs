//! Modules learned from the build ids the kernel sends at a process's first call: they
//! stand in for the maps of a process gone before its /proc/PID/maps was read.

use fdaudit_common::OriginModulesRecord;

use super::{same_image, Symbolizer, MAX_MAPPINGS_PER_PID};

impl Symbolizer {
    /// Learns the modules of `rec`'s process from the build ids and offsets the kernel gave
    /// at its call: they stand in for the /proc/PID/maps lines of a process gone before
    /// they were read (the mappings read from maps, where there are, are kept).
    pub fn learn_modules(&mut self, rec: &OriginModulesRecord) {
        let found = self.build_ids.mappings(rec);
        if found.is_empty() {
            return;
        }
        // The image of the process's last origin record: the one that sent these modules.
        let image = self.code.get(&rec.pid).copied();
        let mut list = self
            .maps
            .get(&rec.pid)
            .filter(|m| same_image(image, m.image))
            .map(|m| m.list.clone())
            .unwrap_or_default();
        for m in found {
            if !list.iter().any(|k| k.start < m.end && m.start < k.end) {
                list.push(m);
            }
        }
        list.truncate(MAX_MAPPINGS_PER_PID);
        self.keep_maps(rec.pid, list, image);
    }
}
