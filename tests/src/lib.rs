//! Shared helpers for fdaudit's integration tests.
