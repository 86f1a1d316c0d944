//! SafetyLabel effect classes per method (NPAMP-BRIDGE §7, CC-JSONRPC §9):
//! the MCP table (`60_map_mcp.md` §6), the A2A table (`61_map_a2a.md`), a
//! configurable table for any other JSON-RPC API, MCP `tools/call` from tool
//! annotations, and the receiving side's policy.

use std::collections::HashMap;

use serde_json::Value;

use crate::bridge::{Effect, ProtocolId, TransportError};

/// Method → effect class for one protocol. A method the table does not know
/// gets the table's default, which is `destructive` unless configured: the
/// fail-safe of NPAMP-BRIDGE §7.
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct EffectTable {
    methods: HashMap<String, Effect>,
    default: Effect,
}

impl EffectTable {
    /// An empty table whose every method is `default`.
    pub fn new(default: Effect) -> Self {
        Self {
            methods: HashMap::new(),
            default,
        }
    }

    /// Adds or replaces a method's effect.
    pub fn with(mut self, method: &str, effect: Effect) -> Self {
        self.methods.insert(method.to_owned(), effect);
        self
    }

    /// MCP, `60_map_mcp.md` §6.1. `tools/call` is per tool (§6.2, see
    /// [`ToolEffects`]); here it is `destructive`, the value for a tool whose
    /// annotations are unknown.
    pub fn mcp() -> Self {
        let mut t = Self::new(Effect::Destructive);
        for m in [
            "initialize",
            "ping",
            "tools/list",
            "resources/list",
            "resources/templates/list",
            "resources/read",
            "prompts/list",
            "prompts/get",
            "completion/complete",
            "roots/list",
            "tasks/get",
            "tasks/result",
            "tasks/list",
        ] {
            t = t.with(m, Effect::ReadOnly);
        }
        for m in [
            "resources/subscribe",
            "resources/unsubscribe",
            "logging/setLevel",
            "tasks/cancel",
        ] {
            t = t.with(m, Effect::IdempotentWrite);
        }
        for m in ["sampling/createMessage", "elicitation/create"] {
            t = t.with(m, Effect::NonIdempotentWrite);
        }
        t
    }

    /// A2A, `61_map_a2a.md` §5.
    pub fn a2a() -> Self {
        Self::new(Effect::Destructive)
            .with("message/send", Effect::NonIdempotentWrite)
            .with("message/stream", Effect::NonIdempotentWrite)
            .with("tasks/get", Effect::ReadOnly)
            .with("tasks/cancel", Effect::NonIdempotentWrite)
            .with("tasks/resubscribe", Effect::ReadOnly)
            .with("tasks/pushNotificationConfig/set", Effect::IdempotentWrite)
            .with("tasks/pushNotificationConfig/get", Effect::ReadOnly)
            .with("tasks/pushNotificationConfig/list", Effect::ReadOnly)
            .with("tasks/pushNotificationConfig/delete", Effect::Destructive)
            .with("agent/getAuthenticatedExtendedCard", Effect::ReadOnly)
    }

    /// The Language Server Protocol's requests, both ways (LSP 3.17;
    /// `docs/lsp.md` gives the reasons). A query that computes edits
    /// without applying them (`rename`, `formatting`, `codeAction`) is
    /// read-only: the editor applies them, or asks the server to with
    /// `workspace/executeCommand`, which like `workspace/applyEdit` is
    /// destructive. Unknown methods are destructive (fail-safe).
    pub fn lsp() -> Self {
        let classes = [
            (LSP_READ_ONLY, Effect::ReadOnly),
            (LSP_IDEMPOTENT, Effect::IdempotentWrite),
            (LSP_NON_IDEMPOTENT, Effect::NonIdempotentWrite),
            (LSP_DESTRUCTIVE, Effect::Destructive),
        ];
        classes
            .into_iter()
            .flat_map(|(methods, effect)| methods.iter().map(move |m| (*m, effect)))
            .fold(Self::new(Effect::Destructive), |t, (m, effect)| {
                t.with(m, effect)
            })
    }

    /// The table for a protocol: MCP, A2A and LSP have theirs; any other
    /// gets an empty table (every method destructive until configured).
    pub fn for_protocol(protocol: ProtocolId) -> Self {
        match protocol {
            ProtocolId::MCP => Self::mcp(),
            ProtocolId::A2A => Self::a2a(),
            ProtocolId::LSP_EXPERIMENTAL => Self::lsp(),
            _ => Self::new(Effect::Destructive),
        }
    }

    pub fn effect(&self, method: &str) -> Effect {
        self.methods.get(method).copied().unwrap_or(self.default)
    }

    /// Whether the table marks the method read-only (so an absent label
    /// is correctly read as read_only, §6.1).
    pub fn is_read_only(&self, method: &str) -> bool {
        self.effect(method) == Effect::ReadOnly
    }
}

/// LSP requests that change nothing: queries, and those that compute edits
/// for the editor to apply.
const LSP_READ_ONLY: &[&str] = &[
    "initialize",
    "textDocument/hover",
    "textDocument/completion",
    "completionItem/resolve",
    "textDocument/signatureHelp",
    "textDocument/declaration",
    "textDocument/definition",
    "textDocument/typeDefinition",
    "textDocument/implementation",
    "textDocument/references",
    "textDocument/documentHighlight",
    "textDocument/documentSymbol",
    "textDocument/codeAction",
    "codeAction/resolve",
    "textDocument/codeLens",
    "codeLens/resolve",
    "textDocument/documentLink",
    "documentLink/resolve",
    "textDocument/documentColor",
    "textDocument/colorPresentation",
    "textDocument/formatting",
    "textDocument/rangeFormatting",
    "textDocument/rangesFormatting",
    "textDocument/onTypeFormatting",
    "textDocument/prepareRename",
    "textDocument/rename",
    "textDocument/foldingRange",
    "textDocument/selectionRange",
    "textDocument/semanticTokens/full",
    "textDocument/semanticTokens/full/delta",
    "textDocument/semanticTokens/range",
    "textDocument/linkedEditingRange",
    "textDocument/moniker",
    "textDocument/prepareCallHierarchy",
    "callHierarchy/incomingCalls",
    "callHierarchy/outgoingCalls",
    "textDocument/prepareTypeHierarchy",
    "typeHierarchy/supertypes",
    "typeHierarchy/subtypes",
    "textDocument/inlayHint",
    "inlayHint/resolve",
    "textDocument/inlineValue",
    "textDocument/inlineCompletion",
    "textDocument/diagnostic",
    "workspace/diagnostic",
    "workspace/symbol",
    "workspaceSymbol/resolve",
    "workspace/textDocumentContent",
    "workspace/willCreateFiles",
    "workspace/willRenameFiles",
    "workspace/willDeleteFiles",
    "workspace/configuration",
    "workspace/workspaceFolders",
];

/// LSP requests whose repetition changes nothing more: the end of a
/// session, and a server's registrations and refresh requests to its editor.
const LSP_IDEMPOTENT: &[&str] = &[
    "shutdown",
    "client/registerCapability",
    "client/unregisterCapability",
    "window/workDoneProgress/create",
    "workspace/codeLens/refresh",
    "workspace/semanticTokens/refresh",
    "workspace/inlayHint/refresh",
    "workspace/inlineValue/refresh",
    "workspace/diagnostic/refresh",
    "workspace/foldingRange/refresh",
    "workspace/textDocumentContent/refresh",
];

/// LSP requests to the editor's user: each asks again.
const LSP_NON_IDEMPOTENT: &[&str] = &["window/showMessageRequest", "window/showDocument"];

/// LSP requests that change files or run commands.
const LSP_DESTRUCTIVE: &[&str] = &["workspace/executeCommand", "workspace/applyEdit"];

/// MCP tool annotations (`ToolAnnotations` hints) as far as they are known.
#[derive(Clone, Copy, Debug, Default, PartialEq, Eq)]
pub struct ToolAnnotations {
    pub read_only: Option<bool>,
    pub destructive: Option<bool>,
    pub idempotent: Option<bool>,
}

impl ToolAnnotations {
    /// `60_map_mcp.md` §6.2: the effect class of calling the tool. MCP's own
    /// defaults (`readOnlyHint = false`, `destructiveHint = true`) make an
    /// unannotated tool destructive.
    pub fn effect(&self) -> Effect {
        match (self.read_only, self.destructive, self.idempotent) {
            (Some(true), _, _) => Effect::ReadOnly,
            (Some(false), Some(false), Some(true)) => Effect::IdempotentWrite,
            (Some(false), Some(false), _) => Effect::NonIdempotentWrite,
            _ => Effect::Destructive,
        }
    }
}

/// The effect of each MCP tool, learned from `tools/list` results.
#[derive(Clone, Debug, Default, PartialEq, Eq)]
pub struct ToolEffects {
    tools: HashMap<String, Effect>,
}

impl ToolEffects {
    /// Learns every tool of a `tools/list` response (the whole JSON-RPC
    /// response text); returns how many tools it read. Tools without
    /// annotations are recorded as destructive.
    pub fn learn_from_tools_list(&mut self, response: &[u8]) -> Result<usize, serde_json::Error> {
        let v: Value = serde_json::from_slice(response)?;
        let tools = v
            .pointer("/result/tools")
            .and_then(Value::as_array)
            .map_or(&[][..], Vec::as_slice);
        let mut n = 0;
        for tool in tools {
            let Some(name) = tool.get("name").and_then(Value::as_str) else {
                continue;
            };
            let hint = |k: &str| {
                tool.pointer(&format!("/annotations/{k}"))
                    .and_then(Value::as_bool)
            };
            let annotations = ToolAnnotations {
                read_only: hint("readOnlyHint"),
                destructive: hint("destructiveHint"),
                idempotent: hint("idempotentHint"),
            };
            self.tools.insert(name.to_owned(), annotations.effect());
            n += 1;
        }
        Ok(n)
    }

    pub fn insert(&mut self, tool: &str, effect: Effect) {
        self.tools.insert(tool.to_owned(), effect);
    }

    /// The effect of a tool; destructive when unknown.
    pub fn effect(&self, tool: &str) -> Effect {
        self.tools.get(tool).copied().unwrap_or(Effect::Destructive)
    }

    pub fn is_empty(&self) -> bool {
        self.tools.is_empty()
    }
}

/// The name of the tool a `tools/call` request calls (`params.name`), if the
/// request has one. Parses the request; only used for `tools/call` when tool
/// annotations are known.
pub fn tools_call_name(request: &[u8]) -> Option<String> {
    #[derive(serde::Deserialize)]
    struct Call {
        params: Params,
    }
    #[derive(serde::Deserialize)]
    struct Params {
        name: String,
    }
    serde_json::from_slice::<Call>(request)
        .ok()
        .map(|c| c.params.name)
}

/// The label a sender attaches to a request: the effect from the table (per
/// tool for MCP `tools/call`) and, for a tool call, the tool name as scope.
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct Label {
    pub effect: Effect,
    pub scope: String,
}

/// Labels outgoing requests of one protocol.
#[derive(Clone, Debug)]
pub struct Labeler {
    protocol: ProtocolId,
    table: EffectTable,
    tools: ToolEffects,
}

impl Labeler {
    pub fn new(protocol: ProtocolId, table: EffectTable) -> Self {
        Self {
            protocol,
            table,
            tools: ToolEffects::default(),
        }
    }

    pub fn tools_mut(&mut self) -> &mut ToolEffects {
        &mut self.tools
    }

    /// The protocol it labels.
    pub fn protocol(&self) -> ProtocolId {
        self.protocol
    }

    pub fn table(&self) -> &EffectTable {
        &self.table
    }

    /// The label for a request or notification with this method.
    pub fn label(&self, method: &str, request: &[u8]) -> Label {
        if self.protocol == ProtocolId::MCP
            && method == "tools/call"
            && !self.tools.is_empty()
            && let Some(tool) = tools_call_name(request)
        {
            return Label {
                effect: self.tools.effect(&tool),
                scope: tool,
            };
        }
        Label {
            effect: self.table.effect(method),
            scope: String::new(),
        }
    }
}

/// The receiving side's policy: effect classes it refuses with
/// `SafetyPolicy`. An absent label counts as `destructive` unless the table
/// marks the method read-only.
#[derive(Clone, Copy, Debug, Default, PartialEq, Eq)]
pub struct SafetyPolicy {
    refused: [bool; 4],
}

impl SafetyPolicy {
    /// Refuses nothing.
    pub const fn allow_all() -> Self {
        Self {
            refused: [false; 4],
        }
    }

    pub const fn refuse(mut self, effect: Effect) -> Self {
        self.refused[effect as usize] = true;
        self
    }

    pub const fn refuses_anything(&self) -> bool {
        self.refused[0] || self.refused[1] || self.refused[2] || self.refused[3]
    }

    /// The effect the receiver must assume for a request (NPAMP-BRIDGE §7).
    pub fn effective_effect(label: Option<Effect>, method: &str, table: &EffectTable) -> Effect {
        label.unwrap_or(if table.is_read_only(method) {
            Effect::ReadOnly
        } else {
            Effect::Destructive
        })
    }

    /// `Err(SafetyPolicy)` when the request's effect is refused.
    pub fn check(
        &self,
        label: Option<Effect>,
        method: &str,
        table: &EffectTable,
    ) -> Result<(), TransportError> {
        let effect = Self::effective_effect(label, method, table);
        if self.refused[effect as usize] {
            Err(TransportError::SAFETY_POLICY)
        } else {
            Ok(())
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    /// `docs/lsp.md` lists every LSP method the table classifies, with
    /// its class, and no other: the table and its documentation agree.
    #[test]
    fn lsp_table_is_the_documented_one() {
        let doc = include_str!("../../docs/lsp.md");
        let section = doc
            .split("\n## ")
            .find(|s| s.starts_with("Effect classes"))
            .expect("docs/lsp.md has its effect classes");
        let mut documented = HashMap::new();
        for row in section.lines().filter(|l| l.starts_with("| `")) {
            let cells: Vec<&str> = row.split('|').map(str::trim).collect();
            let class = match cells[2] {
                "read-only" => Effect::ReadOnly,
                "idempotent-write" => Effect::IdempotentWrite,
                "non-idempotent-write" => Effect::NonIdempotentWrite,
                "destructive" => Effect::Destructive,
                other => panic!("{row}: class {other:?}"),
            };
            for m in cells[1].split(", ") {
                let m = m.trim_matches('`');
                assert!(
                    documented.insert(m.to_owned(), class).is_none(),
                    "{m} twice"
                );
            }
        }
        let table = EffectTable::lsp();
        assert_eq!(table.methods, documented);
        assert_eq!(table.effect("textDocument/hover"), Effect::ReadOnly);
        assert_eq!(table.effect("workspace/applyEdit"), Effect::Destructive);
        assert_eq!(table.effect("$/unknown"), Effect::Destructive);
    }

    #[test]
    fn mcp_table_follows_section_6_1() {
        let t = EffectTable::mcp();
        assert_eq!(t.effect("tools/list"), Effect::ReadOnly);
        assert_eq!(t.effect("logging/setLevel"), Effect::IdempotentWrite);
        assert_eq!(
            t.effect("sampling/createMessage"),
            Effect::NonIdempotentWrite
        );
        assert_eq!(t.effect("tools/call"), Effect::Destructive);
        assert_eq!(t.effect("vendor/unknown"), Effect::Destructive);
    }

    #[test]
    fn tool_annotations_follow_section_6_2() {
        let a = |r, d, i| ToolAnnotations {
            read_only: r,
            destructive: d,
            idempotent: i,
        };
        assert_eq!(a(Some(true), None, None).effect(), Effect::ReadOnly);
        assert_eq!(
            a(Some(false), Some(false), Some(true)).effect(),
            Effect::IdempotentWrite
        );
        assert_eq!(
            a(Some(false), Some(false), Some(false)).effect(),
            Effect::NonIdempotentWrite
        );
        assert_eq!(
            a(Some(false), Some(false), None).effect(),
            Effect::NonIdempotentWrite
        );
        assert_eq!(
            a(Some(false), Some(true), Some(true)).effect(),
            Effect::Destructive
        );
        assert_eq!(
            a(None, Some(false), Some(true)).effect(),
            Effect::Destructive
        );
        assert_eq!(ToolAnnotations::default().effect(), Effect::Destructive);
    }

    #[test]
    fn tools_call_is_labelled_from_learned_annotations() {
        let list = br#"{"jsonrpc":"2.0","id":1,"result":{"tools":[
            {"name":"get_weather","annotations":{"readOnlyHint":true}},
            {"name":"delete_repo","annotations":{"readOnlyHint":false,"destructiveHint":true}},
            {"name":"plain"}]}}"#;
        let mut l = Labeler::new(ProtocolId::MCP, EffectTable::mcp());
        assert_eq!(l.tools_mut().learn_from_tools_list(list).unwrap(), 3);
        let call = |name: &str| {
            format!(
                r#"{{"jsonrpc":"2.0","id":2,"method":"tools/call","params":{{"name":"{name}"}}}}"#
            )
        };
        let label = l.label("tools/call", call("get_weather").as_bytes());
        assert_eq!(
            (label.effect, label.scope.as_str()),
            (Effect::ReadOnly, "get_weather")
        );
        assert_eq!(
            l.label("tools/call", call("delete_repo").as_bytes()).effect,
            Effect::Destructive
        );
        assert_eq!(
            l.label("tools/call", call("plain").as_bytes()).effect,
            Effect::Destructive
        );
        assert_eq!(
            l.label("tools/call", call("never_listed").as_bytes())
                .effect,
            Effect::Destructive
        );
    }

    #[test]
    fn policy_treats_missing_label_on_mutating_method_as_destructive() {
        let t = EffectTable::mcp();
        let p = SafetyPolicy::allow_all().refuse(Effect::Destructive);
        assert_eq!(
            p.check(None, "tools/call", &t),
            Err(TransportError::SAFETY_POLICY)
        );
        assert_eq!(p.check(None, "tools/list", &t), Ok(()));
        assert_eq!(p.check(Some(Effect::ReadOnly), "tools/call", &t), Ok(()));
        assert!(SafetyPolicy::allow_all().check(None, "x", &t).is_ok());
    }
}
