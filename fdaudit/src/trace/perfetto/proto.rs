//! The few messages of Perfetto's trace format that `trace --perfetto` writes, derived with
//! prost (which does the encoding) from the upstream schema: google/perfetto,
//! `protos/perfetto/trace/perfetto_trace.proto` (the merged file; the messages come from
//! `trace.proto`, `trace_packet.proto`, `clock_snapshot.proto`, `ps/process_tree.proto`,
//! `track_event/{track_descriptor,process_descriptor,counter_descriptor,track_event,
//! debug_annotation}.proto` and `common/builtin_clock.proto`). Field numbers and types are
//! upstream's; fields fdaudit does not write are left out (a reader skips nothing: absent
//! fields are simply not on the wire). A `oneof` member is an optional field here: on the
//! wire a oneof is its one field. Enums are their `int32` values, named below.

/// `TracePacket.sequence_flags`: `SEQ_INCREMENTAL_STATE_CLEARED`.
pub const SEQ_INCREMENTAL_STATE_CLEARED: u32 = 1;
/// `BuiltinClock`: `BUILTIN_CLOCK_MONOTONIC` (the clock of the kernel's
/// `bpf_ktime_get_ns()`, every timestamp of the trace).
pub const CLOCK_MONOTONIC: u32 = 3;
/// `BuiltinClock`: `BUILTIN_CLOCK_BOOTTIME` (Perfetto's default trace clock).
pub const CLOCK_BOOTTIME: u32 = 6;
/// `TrackEvent.Type`.
pub const TYPE_SLICE_BEGIN: i32 = 1;
pub const TYPE_SLICE_END: i32 = 2;
pub const TYPE_INSTANT: i32 = 3;
pub const TYPE_COUNTER: i32 = 4;
/// `CounterDescriptor.Unit`: `UNIT_COUNT`.
pub const UNIT_COUNT: i32 = 2;

/// `message Trace { repeated TracePacket packet = 1; }`: a file is a concatenation of
/// these (repeated fields of concatenated messages merge), one packet each.
#[derive(Clone, PartialEq, prost::Message)]
pub struct Trace {
    #[prost(message, repeated, tag = "1")]
    pub packet: Vec<TracePacket>,
}

#[derive(Clone, PartialEq, prost::Message)]
pub struct TracePacket {
    #[prost(uint64, optional, tag = "8")]
    pub timestamp: Option<u64>,
    #[prost(uint32, optional, tag = "58")]
    pub timestamp_clock_id: Option<u32>,
    /// oneof `data`.
    #[prost(message, optional, tag = "2")]
    pub process_tree: Option<ProcessTree>,
    #[prost(message, optional, tag = "6")]
    pub clock_snapshot: Option<ClockSnapshot>,
    #[prost(message, optional, tag = "11")]
    pub track_event: Option<TrackEvent>,
    #[prost(message, optional, tag = "60")]
    pub track_descriptor: Option<TrackDescriptor>,
    /// oneof `optional_trusted_packet_sequence_id`.
    #[prost(uint32, optional, tag = "10")]
    pub trusted_packet_sequence_id: Option<u32>,
    #[prost(uint32, optional, tag = "13")]
    pub sequence_flags: Option<u32>,
    #[prost(bool, optional, tag = "87")]
    pub first_packet_on_sequence: Option<bool>,
}

#[derive(Clone, PartialEq, prost::Message)]
pub struct ClockSnapshot {
    #[prost(message, repeated, tag = "1")]
    pub clocks: Vec<Clock>,
    /// A `BuiltinClock`.
    #[prost(int32, optional, tag = "2")]
    pub primary_trace_clock: Option<i32>,
}

/// `ClockSnapshot.Clock`.
#[derive(Clone, PartialEq, prost::Message)]
pub struct Clock {
    #[prost(uint32, optional, tag = "1")]
    pub clock_id: Option<u32>,
    #[prost(uint64, optional, tag = "2")]
    pub timestamp: Option<u64>,
}

#[derive(Clone, PartialEq, prost::Message)]
pub struct ProcessTree {
    #[prost(message, repeated, tag = "1")]
    pub processes: Vec<Process>,
}

/// `ProcessTree.Process`.
#[derive(Clone, PartialEq, prost::Message)]
pub struct Process {
    #[prost(int32, optional, tag = "1")]
    pub pid: Option<i32>,
    #[prost(int32, optional, tag = "2")]
    pub ppid: Option<i32>,
    #[prost(string, repeated, tag = "3")]
    pub cmdline: Vec<String>,
}

#[derive(Clone, PartialEq, prost::Message)]
pub struct TrackDescriptor {
    #[prost(uint64, optional, tag = "1")]
    pub uuid: Option<u64>,
    #[prost(uint64, optional, tag = "5")]
    pub parent_uuid: Option<u64>,
    /// oneof `static_or_dynamic_name`.
    #[prost(string, optional, tag = "2")]
    pub name: Option<String>,
    #[prost(message, optional, tag = "3")]
    pub process: Option<ProcessDescriptor>,
    #[prost(message, optional, tag = "8")]
    pub counter: Option<CounterDescriptor>,
}

#[derive(Clone, PartialEq, prost::Message)]
pub struct ProcessDescriptor {
    #[prost(int32, optional, tag = "1")]
    pub pid: Option<i32>,
    #[prost(string, repeated, tag = "2")]
    pub cmdline: Vec<String>,
    #[prost(string, optional, tag = "6")]
    pub process_name: Option<String>,
}

#[derive(Clone, PartialEq, prost::Message)]
pub struct CounterDescriptor {
    /// A `CounterDescriptor.Unit`.
    #[prost(int32, optional, tag = "3")]
    pub unit: Option<i32>,
    #[prost(string, optional, tag = "6")]
    pub unit_name: Option<String>,
}

#[derive(Clone, PartialEq, prost::Message)]
pub struct TrackEvent {
    #[prost(string, repeated, tag = "22")]
    pub categories: Vec<String>,
    /// oneof `name_field`.
    #[prost(string, optional, tag = "23")]
    pub name: Option<String>,
    /// A `TrackEvent.Type`.
    #[prost(int32, optional, tag = "9")]
    pub r#type: Option<i32>,
    #[prost(uint64, optional, tag = "11")]
    pub track_uuid: Option<u64>,
    /// oneof `counter_value_field`.
    #[prost(int64, optional, tag = "30")]
    pub counter_value: Option<i64>,
    #[prost(message, repeated, tag = "4")]
    pub debug_annotations: Vec<DebugAnnotation>,
    /// proto2 `repeated fixed64`: not packed.
    #[prost(fixed64, repeated, packed = "false", tag = "47")]
    pub flow_ids: Vec<u64>,
    #[prost(fixed64, repeated, packed = "false", tag = "48")]
    pub terminating_flow_ids: Vec<u64>,
}

/// A named value shown in the event's details. `name` is the oneof `name_field`; the
/// values are the oneof `value` (one set).
#[derive(Clone, PartialEq, prost::Message)]
pub struct DebugAnnotation {
    #[prost(string, optional, tag = "10")]
    pub name: Option<String>,
    #[prost(bool, optional, tag = "2")]
    pub bool_value: Option<bool>,
    #[prost(uint64, optional, tag = "3")]
    pub uint_value: Option<u64>,
    #[prost(int64, optional, tag = "4")]
    pub int_value: Option<i64>,
    #[prost(string, optional, tag = "6")]
    pub string_value: Option<String>,
}
