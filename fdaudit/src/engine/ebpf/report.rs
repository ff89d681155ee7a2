//! Load and verifier errors in one line, for the CLI's `error:` and `-v` lines.

use aya::programs::ProgramError;

use super::LoadError;

/// A load error in one line: its message and its causes', or the verifier's own line.
pub fn one_line(e: &(dyn std::error::Error + 'static)) -> String {
    if let Some(v @ LoadError::Verifier { .. }) = e.downcast_ref::<LoadError>() {
        return v.to_string(); // already carries the verifier's own line
    }
    let mut parts: Vec<String> = Vec::new();
    let mut cur = Some(e);
    while let Some(c) = cur {
        // aya ends a refusal with "Verifier output:" even when the log is empty.
        let text = c.to_string();
        let text = text.lines().next().unwrap_or_default().trim_end();
        let text = text.trim_end_matches("Verifier output:").trim_end();
        let text = text.trim_end_matches('.').to_string();
        if !parts.iter().any(|p| p.contains(&text)) {
            parts.push(text);
        }
        cur = c.source();
    }
    parts.join(": ")
}

/// One line out of a verifier log: the last line that says what went wrong.
pub fn verifier_summary(e: &ProgramError) -> String {
    match e {
        ProgramError::LoadError {
            io_error,
            verifier_log,
        } => {
            let log = verifier_log.to_string();
            if let Some(path) = std::env::var_os("FDAUDIT_VERIFIER_LOG") {
                // Debugging aid: the whole log, where the user asked for it.
                let _ = std::fs::write(path, &log);
            }
            let line = log
                .lines()
                .rev()
                .map(str::trim)
                .find(|l| {
                    !l.is_empty()
                        && !l.starts_with("processed ")
                        && !l.starts_with("verification time")
                        && !l.starts_with("stack depth")
                })
                .unwrap_or("");
            if line.is_empty() {
                io_error.to_string()
            } else {
                format!("{line} ({io_error})")
            }
        }
        other => other.to_string(),
    }
}
