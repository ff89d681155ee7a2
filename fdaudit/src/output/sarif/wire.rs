//! SARIF 2.1.0's wire types (its names, camelCase) as fdaudit fills them in, the rules and
//! the CWE taxonomy, and the log built from a [`Run`].

use std::collections::BTreeMap;

use serde::Serialize;

use super::{
    fingerprint, percent, rule_info, Baseline, Finding, Level, Rule, Run, SourceRoot,
    FINGERPRINT_KEY, RULES,
};

/// The schema the file names (the OASIS 2.1.0 errata 01 schema, as GitHub documents).
const SCHEMA: &str = "https://json.schemastore.org/sarif-2.1.0.json";
/// Results kept: GitHub takes at most 25,000 a run and shows 5,000; the rest are counted
/// in a notification.
const MAX_RESULTS: usize = 5000;

#[derive(Serialize)]
pub(super) struct Log {
    #[serde(rename = "$schema")]
    schema: &'static str,
    version: &'static str,
    runs: Vec<RunOut>,
}

#[derive(Serialize)]
#[serde(rename_all = "camelCase")]
struct RunOut {
    tool: Tool,
    invocations: Vec<Invocation>,
    original_uri_base_ids: BTreeMap<&'static str, ArtifactLocation>,
    taxonomies: Vec<Component>,
    results: Vec<ResultOut>,
    automation_details: Automation,
}

#[derive(Serialize)]
struct Automation {
    id: String,
}

#[derive(Serialize)]
struct Tool {
    driver: Component,
}

#[derive(Serialize)]
#[serde(rename_all = "camelCase")]
struct Component {
    name: &'static str,
    #[serde(skip_serializing_if = "Option::is_none")]
    organization: Option<&'static str>,
    #[serde(skip_serializing_if = "Option::is_none")]
    version: Option<&'static str>,
    #[serde(skip_serializing_if = "Option::is_none")]
    information_uri: Option<&'static str>,
    #[serde(skip_serializing_if = "Vec::is_empty")]
    rules: Vec<Descriptor>,
    #[serde(skip_serializing_if = "Vec::is_empty")]
    taxa: Vec<Descriptor>,
}

#[derive(Serialize)]
#[serde(rename_all = "camelCase")]
pub(super) struct Descriptor {
    id: &'static str,
    #[serde(skip_serializing_if = "Option::is_none")]
    name: Option<&'static str>,
    short_description: Message,
    #[serde(skip_serializing_if = "Option::is_none")]
    help: Option<Message>,
    #[serde(skip_serializing_if = "Option::is_none")]
    default_configuration: Option<Configuration>,
    #[serde(skip_serializing_if = "Vec::is_empty")]
    relationships: Vec<Relationship>,
    #[serde(skip_serializing_if = "Option::is_none")]
    properties: Option<serde_json::Value>,
}

#[derive(Serialize)]
struct Configuration {
    level: Level,
}

#[derive(Serialize)]
struct Message {
    text: String,
}

#[derive(Serialize)]
struct Relationship {
    target: Reference,
    kinds: [&'static str; 1],
}

#[derive(Serialize)]
#[serde(rename_all = "camelCase")]
struct Reference {
    id: &'static str,
    #[serde(skip_serializing_if = "Option::is_none")]
    index: Option<usize>,
    #[serde(skip_serializing_if = "Option::is_none")]
    tool_component: Option<ComponentRef>,
}

#[derive(Serialize)]
struct ComponentRef {
    name: &'static str,
}

#[derive(Serialize)]
#[serde(rename_all = "camelCase")]
struct Invocation {
    execution_successful: bool,
    exit_code: i32,
    tool_execution_notifications: Vec<Notification>,
}

#[derive(Serialize)]
#[serde(rename_all = "camelCase")]
struct Notification {
    level: Level,
    message: Message,
    #[serde(skip_serializing_if = "Option::is_none")]
    associated_rule: Option<Reference>,
}

#[derive(Serialize)]
#[serde(rename_all = "camelCase")]
struct ResultOut {
    rule_id: &'static str,
    rule_index: usize,
    level: Level,
    message: Message,
    locations: Vec<Location>,
    partial_fingerprints: BTreeMap<&'static str, String>,
    #[serde(skip_serializing_if = "Option::is_none")]
    baseline_state: Option<Baseline>,
}

#[derive(Serialize)]
#[serde(rename_all = "camelCase")]
pub(super) struct Location {
    physical_location: Physical,
}

#[derive(Serialize)]
#[serde(rename_all = "camelCase")]
struct Physical {
    artifact_location: ArtifactLocation,
    region: Region,
}

#[derive(Serialize)]
#[serde(rename_all = "camelCase")]
struct ArtifactLocation {
    uri: String,
    #[serde(skip_serializing_if = "Option::is_none")]
    uri_base_id: Option<&'static str>,
}

#[derive(Serialize)]
#[serde(rename_all = "camelCase")]
struct Region {
    start_line: u32,
}

/// The base every result's location is relative to.
const SRCROOT: &str = "%SRCROOT%";
const CWE: &str = "CWE";
const CWE_403: &str = "403";

pub(super) fn rules() -> Vec<Descriptor> {
    RULES
        .iter()
        .map(|&(rule, id, short, help, cwe, severity)| {
            let mut tags = vec!["reliability"];
            if cwe {
                tags = vec!["security", "external/cwe/cwe-403"];
            }
            let mut props = serde_json::json!({ "tags": tags, "precision": "high" });
            if !severity.is_empty() {
                props["security-severity"] = severity.into();
            }
            Descriptor {
                id,
                name: Some(id),
                short_description: Message { text: short.into() },
                help: Some(Message { text: help.into() }),
                default_configuration: Some(Configuration {
                    level: default_level(rule),
                }),
                relationships: if cwe {
                    vec![Relationship {
                        target: Reference {
                            id: CWE_403,
                            index: Some(0),
                            tool_component: Some(ComponentRef { name: CWE }),
                        },
                        kinds: ["superset"],
                    }]
                } else {
                    Vec::new()
                },
                properties: Some(props),
            }
        })
        .collect()
}

/// A rule's level when a result does not say: the gate rules only report a gate that
/// failed.
fn default_level(r: Rule) -> Level {
    match r {
        Rule::LeakAcrossBoundary | Rule::OutsideRoot => Level::Error,
        Rule::StrategyOverGate | Rule::ClosesOverGate => Level::Error,
        Rule::LeakedFd | Rule::InheritableFd | Rule::SharedDescription => Level::Warning,
        Rule::NofileLimit => Level::Note,
    }
}

fn cwe_taxonomy() -> Component {
    Component {
        name: CWE,
        organization: Some("MITRE"),
        version: Some("4.14"),
        information_uri: Some("https://cwe.mitre.org/"),
        rules: Vec::new(),
        taxa: vec![Descriptor {
            id: CWE_403,
            name: Some("ExposureOfFileDescriptorToUnintendedControlSphere"),
            short_description: Message {
                text: "Exposure of File Descriptor to Unintended Control Sphere ('File Descriptor Leak')".into(),
            },
            help: None,
            default_configuration: None,
            relationships: Vec::new(),
            properties: None,
        }],
    }
}

/// Where a finding points: the first frame under the root, else its executable under it.
pub(super) fn location(f: &Finding, root: &SourceRoot) -> Option<Location> {
    let frame = f.frames.iter().find_map(|(file, line)| {
        root.relative(file)
            .map(|rel| (rel, line.filter(|&l| l > 0)))
    });
    let (rel, line) = frame.or_else(|| {
        let modules = f.modules.iter().map(String::as_str);
        (modules.chain(f.executable.as_deref()))
            .find_map(|m| root.relative(m))
            .map(|rel| (rel, None))
    })?;
    Some(Location {
        physical_location: Physical {
            artifact_location: ArtifactLocation {
                uri: percent(&rel),
                uri_base_id: Some(SRCROOT),
            },
            // GitHub shows a result at a line and its checker (sarif-sdk's GH1003) wants
            // one: a file without a line (a binary, a frame without one) is at line 1.
            region: Region {
                start_line: line.unwrap_or(1),
            },
        },
    })
}

/// A finding as a result, or as a notification when it has no location under the root.
fn result_of(f: &Finding, root: &SourceRoot) -> Result<ResultOut, Notification> {
    let (index, _) = rule_info(f.rule);
    let Some(loc) = location(f, root) else {
        return Err(Notification {
            level: f.level,
            message: Message {
                text: format!(
                    "{} (neither a source line of it nor its executable is under the source root {}: a notification, not a result)",
                    f.message,
                    root.root.display()
                ),
            },
            associated_rule: Some(Reference {
                id: f.rule.id(),
                index: Some(index),
                tool_component: None,
            }),
        });
    };
    Ok(ResultOut {
        rule_id: f.rule.id(),
        rule_index: index,
        level: f.level,
        message: Message {
            text: f.message.clone(),
        },
        locations: vec![loc],
        partial_fingerprints: BTreeMap::from([(FINGERPRINT_KEY, fingerprint(f.rule, &f.identity))]),
        baseline_state: f.baseline,
    })
}

fn note(text: String) -> Notification {
    Notification {
        level: Level::Warning,
        message: Message { text },
        associated_rule: None,
    }
}

pub(super) fn log(run: &Run, root: &SourceRoot) -> Log {
    let mut results = Vec::new();
    let mut notes: Vec<Notification> = run.notes.iter().cloned().map(note).collect();
    let mut left_out = 0usize;
    for f in &run.findings {
        match result_of(f, root) {
            Ok(_) if results.len() >= MAX_RESULTS => left_out += 1,
            Ok(r) => results.push(r),
            Err(n) => notes.push(n),
        }
    }
    if left_out > 0 {
        notes.push(note(format!(
            "{left_out} more results left out (at most {MAX_RESULTS} a run)"
        )));
    }
    let driver = Component {
        name: "fdaudit",
        organization: None,
        version: Some(env!("CARGO_PKG_VERSION")),
        information_uri: None,
        rules: rules(),
        taxa: Vec::new(),
    };
    Log {
        schema: SCHEMA,
        version: "2.1.0",
        runs: vec![RunOut {
            tool: Tool { driver },
            invocations: vec![Invocation {
                execution_successful: true,
                exit_code: i32::from(run.exit_code),
                tool_execution_notifications: notes,
            }],
            original_uri_base_ids: BTreeMap::from([(
                SRCROOT,
                ArtifactLocation {
                    uri: root.uri(),
                    uri_base_id: None,
                },
            )]),
            taxonomies: vec![cwe_taxonomy()],
            results,
            automation_details: Automation {
                id: format!("fdaudit/{}/", run.command),
            },
        }],
    }
}
