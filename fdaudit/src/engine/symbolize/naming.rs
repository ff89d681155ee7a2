//! Frames named from their modules' symbols, each module read once and kept within
//! [`SYMBOLS_BUDGET`], and within a record's time ([`LOAD_TIME_PER_RECORD`]).

use std::sync::Arc;

use super::{bounds::thread_cpu, Frame, Mapping, Symbolizer, LOAD_TIME_PER_RECORD, SYMBOLS_BUDGET};
use crate::{engine::symbols::Symbols, untrusted::FileId};

/// Why a frame whose module was left for a later record is unnamed (until it is named).
pub const LEFT_FOR_LATER: &str =
    "its module was not read in this record's time for reading modules (read for a later one)";

/// A module's symbols: read (now or before), not readable, or not read in this record's time.
enum Loaded {
    Yes(Arc<Symbols>),
    No,
    Later,
}

impl Symbolizer {
    /// Names each frame from its module's symbols (read once, kept within
    /// [`SYMBOLS_BUDGET`]); true when a module was left unread for this record's
    /// [`LOAD_TIME_PER_RECORD`] (its frames are unnamed now, [`LEFT_FOR_LATER`], not for
    /// good: naming them again in a later record reads it). A native frame already named is
    /// left as it is (its module may since have left the budget).
    pub fn name_frames(&mut self, stack: &mut [Frame]) -> bool {
        let mut deferred = false;
        for f in stack.iter_mut() {
            if f.jit_pid.is_some() {
                self.name_jit_frame(f);
                continue;
            }
            if f.symbol.is_some() {
                continue;
            }
            let (Some(id), Some(module), Some(offset)) = (f.module_id, &f.module, f.offset) else {
                continue;
            };
            let s = match self.symbols_of(id, module) {
                Loaded::Yes(s) => s,
                Loaded::No => continue,
                Loaded::Later => {
                    deferred = true;
                    f.unnamed = Some(LEFT_FOR_LATER.into());
                    continue;
                }
            };
            f.unnamed = None;
            f.symbol = s.name(offset);
            f.build_id.clone_from(&s.build_id);
            if let Some((file, line)) = s.line(offset) {
                (f.file, f.line) = (Some(file), line);
            }
        }
        deferred
    }

    fn symbols_of(&mut self, id: FileId, path: &str) -> Loaded {
        self.tick += 1;
        let tick = self.tick;
        if let Some(e) = self.symbols.get_mut(&id) {
            e.1 = tick;
            return e.0.clone().map_or(Loaded::No, Loaded::Yes);
        }
        let spent = self.record_start.map(|t| thread_cpu().saturating_sub(t));
        if self.loads_now > 0 && spent.is_some_and(|d| d > LOAD_TIME_PER_RECORD) {
            return Loaded::Later;
        }
        self.loads_now += 1;
        let m = Mapping {
            start: 0,
            end: 0,
            offset: 0,
            path: path.into(),
            id: Some(id),
        };
        let loaded = self
            .module_file(&m, None)
            .and_then(|(f, len, _)| Symbols::load(&f, len))
            .map(Arc::new);
        let cost = loaded.as_ref().map_or(64, |s| s.cost);
        while self.symbols_cost + cost > SYMBOLS_BUDGET {
            let Some(oldest) = self
                .symbols
                .iter()
                .min_by_key(|(_, e)| e.1)
                .map(|(&k, _)| k)
            else {
                break;
            };
            if let Some((s, _)) = self.symbols.remove(&oldest) {
                self.symbols_cost -= s.map_or(64, |s| s.cost);
            }
        }
        self.symbols_cost += cost;
        self.symbols.insert(id, (loaded.clone(), tick));
        loaded.map_or(Loaded::No, Loaded::Yes)
    }
}
