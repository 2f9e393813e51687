//! The running MCP servers. Each configured server has a slot: its state
//! (stopped, starting, ready with its tools, failed with why), the end of
//! its stderr, and while it runs the rmcp peer that calls go through. A
//! task per start connects, lists the tools and then waits on the
//! connection, so a server that exits or drops the connection shows failed
//! at once, not at the next call. A restart bumps the slot's run number:
//! whatever an older run's task finds later is dropped.
use std::collections::{BTreeMap, HashMap, VecDeque};
use std::sync::{Arc, Mutex};
use std::time::Duration;

use rmcp::model::{CallToolRequestParams, Tool};
use rmcp::service::{Peer, RunningService, RunningServiceCancellationToken};
use rmcp::transport::streamable_http_client::StreamableHttpClientTransportConfig;
use rmcp::transport::{StreamableHttpClientTransport, TokioChildProcess};
use rmcp::{RoleClient, ServiceExt};
use serde::Serialize;
use store::ToolOutcome;
use tokio::io::AsyncBufReadExt;
use tokio_util::sync::CancellationToken;
use ts_rs::TS;

use super::config::{McpServerConfig, McpTransport};
use super::result::ToolAnswer;

/// How long a server may take to start and answer `initialize` and
/// `tools/list` (an `npx` command may download its package first).
pub const START_TIMEOUT: Duration = Duration::from_secs(60);
/// Lines of a server's stderr kept for the failed state.
const STDERR_LINES: usize = 40;
/// Characters of one stderr line kept.
const STDERR_LINE_CHARS: usize = 500;

/// Where a server is in its life.
#[derive(Debug, Clone, PartialEq, Eq, Serialize, TS)]
#[serde(tag = "state", rename_all = "snake_case")]
pub enum McpStatus {
    /// Configured but switched off.
    Stopped,
    Starting,
    Ready,
    /// Could not start, or stopped answering: why, in words.
    Failed {
        reason: String,
    },
}

/// A tool as Settings and the chat settings list it.
#[derive(Debug, Clone, PartialEq, Serialize, TS)]
pub struct McpToolView {
    pub name: String,
    pub description: Option<String>,
    /// The JSON Schema of its arguments, as the server gave it.
    #[ts(type = "unknown")]
    pub input_schema: serde_json::Value,
}

/// One server as Settings → Tools shows it.
#[derive(Debug, Clone, PartialEq, Serialize, TS)]
pub struct McpServerView {
    /// Its settings, header and environment values masked.
    pub config: McpServerConfig,
    pub status: McpStatus,
    /// Its tools while ready.
    pub tools: Vec<McpToolView>,
    /// The last lines the server wrote to stderr (stdio servers).
    pub stderr_tail: String,
    /// The server's process id, while a stdio server runs.
    pub pid: Option<u32>,
}

/// A tool offered to a chat's model: the name the model calls it by (the
/// tool's own, or `server__tool` where two servers share a name) and where
/// it lives.
#[derive(Debug, Clone, PartialEq)]
pub struct OfferedTool {
    pub offered_name: String,
    pub server: String,
    pub tool: String,
    /// OpenAI-shaped: `{"type": "function", "function": {name, description, parameters}}`.
    pub schema: serde_json::Value,
}

#[derive(Default)]
struct Tail(VecDeque<String>);

impl Tail {
    fn push(&mut self, line: &str) {
        if self.0.len() == STDERR_LINES {
            self.0.pop_front();
        }
        self.0.push_back(line.chars().take(STDERR_LINE_CHARS).collect());
    }

    fn text(&self) -> String {
        self.0.iter().cloned().collect::<Vec<_>>().join("\n")
    }
}

struct SlotState {
    status: McpStatus,
    tools: Vec<Tool>,
    peer: Option<Peer<RoleClient>>,
    stop: Option<RunningServiceCancellationToken>,
    pid: Option<u32>,
    /// Which start the fields above belong to.
    run: u64,
}

struct Slot {
    /// Fixed for the slot's life but for `always_allow`, which grows
    /// without a restart.
    config: Mutex<McpServerConfig>,
    state: Mutex<SlotState>,
    stderr: Arc<Mutex<Tail>>,
}

impl Slot {
    fn view(&self) -> McpServerView {
        let s = self.state.lock().unwrap();
        McpServerView {
            config: masked(&self.config.lock().unwrap()),
            status: s.status.clone(),
            tools: s
                .tools
                .iter()
                .map(|t| McpToolView {
                    name: t.name.to_string(),
                    description: t.description.as_ref().map(|d| d.to_string()),
                    input_schema: serde_json::Value::Object((*t.input_schema).clone()),
                })
                .collect(),
            stderr_tail: self.stderr.lock().unwrap().text(),
            pid: s.pid,
        }
    }

    /// Sets the state if `run` is still the slot's current start.
    fn settle(&self, run: u64, status: McpStatus) -> bool {
        let mut s = self.state.lock().unwrap();
        if s.run != run {
            return false;
        }
        s.status = status;
        if !matches!(s.status, McpStatus::Ready) {
            s.peer = None;
            s.tools.clear();
            s.pid = None;
            if let Some(stop) = s.stop.take() {
                stop.cancel();
            }
        }
        true
    }
}

/// The config as the page may see it: header and environment values (tokens,
/// API keys) only as their last four characters, like the Hub token.
fn masked(config: &McpServerConfig) -> McpServerConfig {
    let mut config = config.clone();
    let values = match &mut config.transport {
        McpTransport::Stdio { env, .. } => env,
        McpTransport::Http { headers, .. } => headers,
    };
    for value in values.values_mut() {
        *value = hub::keychain::mask(value);
    }
    config
}

/// Told of every change of a server's state (the app emits `mcp-changed`).
pub type OnChange = Arc<dyn Fn(McpServerView) + Send + Sync>;

/// The app's MCP servers.
#[derive(Default)]
pub struct McpManager {
    slots: Mutex<BTreeMap<String, Arc<Slot>>>,
    on_change: Mutex<Option<OnChange>>,
}

impl McpManager {
    pub fn set_on_change(&self, f: OnChange) {
        *self.on_change.lock().unwrap() = Some(f);
    }

    fn changed(&self, slot: &Slot) {
        let f = self.on_change.lock().unwrap().clone();
        if let Some(f) = f {
            f(slot.view());
        }
    }

    /// Every server, by name.
    pub fn list(&self) -> Vec<McpServerView> {
        self.slots.lock().unwrap().values().map(|s| s.view()).collect()
    }

    pub fn get(&self, name: &str) -> Option<McpServerView> {
        self.slots.lock().unwrap().get(name).map(|s| s.view())
    }

    /// A server's settings as the app runs it (values and all: never for the page).
    pub fn config(&self, name: &str) -> Option<McpServerConfig> {
        self.slots.lock().unwrap().get(name).map(|s| s.config.lock().unwrap().clone())
    }

    /// Puts `config` in place (stopping the server's earlier run, if any)
    /// and starts it when enabled. Returns at once: the state moves on
    /// from `starting` by itself.
    pub fn set(self: &Arc<Self>, config: McpServerConfig) {
        self.put(config, None);
    }

    /// Puts `config` in place without starting it: it shows failed with
    /// `reason` (its secrets could not be read from the keychain).
    pub fn set_failed(self: &Arc<Self>, config: McpServerConfig, reason: String) {
        self.put(config, Some(reason));
    }

    fn put(self: &Arc<Self>, config: McpServerConfig, failed: Option<String>) {
        let name = config.name.clone();
        let enabled = config.enabled && failed.is_none();
        let slot = Arc::new(Slot {
            config: Mutex::new(config),
            state: Mutex::new(SlotState {
                status: failed.map_or(McpStatus::Stopped, |reason| McpStatus::Failed { reason }),
                tools: Vec::new(),
                peer: None,
                stop: None,
                pid: None,
                run: 0,
            }),
            stderr: Arc::new(Mutex::new(Tail::default())),
        });
        let old = self.slots.lock().unwrap().insert(name, slot.clone());
        if let Some(old) = old {
            stop_slot(&old);
        }
        if enabled {
            self.start(&slot);
        } else {
            self.changed(&slot);
        }
    }

    /// Stops and forgets the server `name`.
    pub fn remove(&self, name: &str) -> bool {
        let old = self.slots.lock().unwrap().remove(name);
        old.map(|slot| stop_slot(&slot)).is_some()
    }

    /// Starts the server `name` again (its process too); `false` if there is none.
    pub fn restart(self: &Arc<Self>, name: &str) -> bool {
        let slot = self.slots.lock().unwrap().get(name).cloned();
        match slot {
            Some(slot) => {
                self.start(&slot);
                true
            }
            None => false,
        }
    }

    /// Stops every server (the app is quitting).
    pub fn stop_all(&self) {
        for slot in self.slots.lock().unwrap().values() {
            stop_slot(slot);
        }
    }

    fn start(self: &Arc<Self>, slot: &Arc<Slot>) {
        let run = {
            let mut s = slot.state.lock().unwrap();
            s.run += 1;
            s.status = McpStatus::Starting;
            s.tools.clear();
            s.peer = None;
            s.pid = None;
            if let Some(stop) = s.stop.take() {
                stop.cancel();
            }
            s.run
        };
        *slot.stderr.lock().unwrap() = Tail::default();
        self.changed(slot);
        let (manager, slot) = (self.clone(), slot.clone());
        tauri::async_runtime::spawn(async move {
            let started = tokio::time::timeout(START_TIMEOUT, connect(&slot)).await;
            let (service, pid, tools) = match started {
                Ok(Ok(running)) => running,
                Ok(Err(why)) => {
                    if slot.settle(run, McpStatus::Failed { reason: why }) {
                        manager.changed(&slot);
                    }
                    return;
                }
                Err(_) => {
                    let reason = format!(
                        "the server did not answer within {} s of starting",
                        START_TIMEOUT.as_secs()
                    );
                    if slot.settle(run, McpStatus::Failed { reason }) {
                        manager.changed(&slot);
                    }
                    return;
                }
            };
            {
                let mut s = slot.state.lock().unwrap();
                if s.run != run {
                    service.cancellation_token().cancel();
                    return;
                }
                s.status = McpStatus::Ready;
                s.tools = tools;
                s.peer = Some(service.peer().clone());
                s.stop = Some(service.cancellation_token());
                s.pid = pid;
            }
            manager.changed(&slot);
            // the connection ends: the server exited, crashed or hung up,
            // or was stopped (then the run has moved on and this is dropped)
            let _ = service.waiting().await;
            let transport = slot.config.lock().unwrap().transport.clone();
            let reason = match transport {
                McpTransport::Stdio { .. } => "the server exited".to_string(),
                McpTransport::Http { .. } => "the server closed the connection".to_string(),
            };
            if slot.settle(run, McpStatus::Failed { reason }) {
                manager.changed(&slot);
            }
        });
    }

    /// The tools of `servers` (those ready) under the names the model is
    /// given, leaving out `disabled` (`server/tool`).
    pub fn offered_tools(&self, servers: &[String], disabled: &[String]) -> Vec<OfferedTool> {
        let slots = self.slots.lock().unwrap();
        let mut found: Vec<(String, Tool)> = Vec::new();
        for name in servers {
            let Some(slot) = slots.get(name) else { continue };
            let s = slot.state.lock().unwrap();
            if s.status != McpStatus::Ready {
                continue;
            }
            for tool in &s.tools {
                if !disabled.contains(&format!("{name}/{}", tool.name)) {
                    found.push((name.clone(), tool.clone()));
                }
            }
        }
        let mut count: HashMap<String, usize> = HashMap::new();
        for (_, t) in &found {
            *count.entry(t.name.to_string()).or_default() += 1;
        }
        found
            .into_iter()
            .map(|(server, tool)| {
                let offered_name = if count[tool.name.as_ref()] > 1 {
                    format!("{server}__{}", tool.name)
                } else {
                    tool.name.to_string()
                };
                let mut function = serde_json::Map::new();
                function.insert("name".into(), offered_name.clone().into());
                if let Some(d) = &tool.description {
                    function.insert("description".into(), d.to_string().into());
                }
                function.insert("parameters".into(), declared_arguments_only(&tool.input_schema));
                OfferedTool {
                    offered_name,
                    server,
                    tool: tool.name.to_string(),
                    schema: serde_json::json!({"type": "function", "function": function}),
                }
            })
            .collect()
    }

    /// Whether the user said calls of `tool` on `server` run without asking.
    pub fn always_allowed(&self, server: &str, tool: &str) -> bool {
        let slots = self.slots.lock().unwrap();
        slots
            .get(server)
            .is_some_and(|s| s.config.lock().unwrap().always_allow.iter().any(|t| t == tool))
    }

    /// Lets `tool` of `server` run without asking from now on; returns the
    /// server's config to store (`None`: no such server).
    pub fn allow_always(&self, server: &str, tool: &str) -> Option<McpServerConfig> {
        let slots = self.slots.lock().unwrap();
        let slot = slots.get(server)?;
        let mut config = slot.config.lock().unwrap();
        if !config.always_allow.iter().any(|t| t == tool) {
            config.always_allow.push(tool.to_owned());
        }
        Some(config.clone())
    }

    /// Calls `tool` on `server` with `arguments` (a JSON object's text, as
    /// the model wrote it). Never fails: a server that is not ready, hangs
    /// past `timeout`, drops the connection or answers garbage gives an
    /// answer with outcome `Error` saying so; `cancel` gives `Cancelled`
    /// (the server is told to drop the request).
    pub async fn call(
        &self,
        server: &str,
        tool: &str,
        arguments: &str,
        timeout: Duration,
        cancel: &CancellationToken,
    ) -> ToolAnswer {
        let peer = {
            let slots = self.slots.lock().unwrap();
            match slots.get(server) {
                None => None,
                Some(slot) => slot.state.lock().unwrap().peer.clone(),
            }
        };
        let Some(peer) = peer else {
            return ToolAnswer::failed(
                ToolOutcome::Error,
                format!("The tool server {server} is not running, so {tool} could not be called."),
            );
        };
        let arguments = match serde_json::from_str::<serde_json::Value>(arguments) {
            Ok(serde_json::Value::Object(map)) => Some(map),
            Ok(serde_json::Value::Null) => None,
            _ if arguments.trim().is_empty() => None,
            _ => {
                return ToolAnswer::failed(
                    ToolOutcome::Error,
                    format!("The arguments for {tool} are not a JSON object: {arguments}"),
                )
            }
        };
        let mut params = CallToolRequestParams::new(tool.to_owned());
        params.arguments = arguments;
        // dropping the call (timeout, cancel) tells the server to drop it too
        tokio::select! {
            result = tokio::time::timeout(timeout, peer.call_tool(params)) => match result {
                Ok(Ok(result)) => ToolAnswer::from_result(result),
                Ok(Err(e)) => ToolAnswer::failed(ToolOutcome::Error, format!("The call of {tool} failed: {e}")),
                Err(_) => ToolAnswer::failed(
                    ToolOutcome::Error,
                    format!("{tool} did not answer within {} s; the call was cancelled.", timeout.as_secs()),
                ),
            },
            _ = cancel.cancelled() => ToolAnswer::failed(ToolOutcome::Cancelled, format!("The call of {tool} was stopped.")),
        }
    }
}

/// A tool's input schema as offered to the model, its arguments closed to
/// the ones it declares (`additionalProperties: false` where the server left
/// it open, as OpenAI's strict function schemas are). A server gets nothing
/// from a key it did not declare, and when a chat requires a call the
/// grammar built from an open schema lets the model write made-up keys until
/// the answer's token limit cuts the call off, and no call happens.
fn declared_arguments_only(
    input_schema: &serde_json::Map<String, serde_json::Value>,
) -> serde_json::Value {
    let mut schema = input_schema.clone();
    let is_object = schema.get("type").and_then(serde_json::Value::as_str) == Some("object");
    if is_object && !schema.contains_key("additionalProperties") {
        schema.insert("additionalProperties".into(), false.into());
    }
    serde_json::Value::Object(schema)
}

fn stop_slot(slot: &Slot) {
    let mut s = slot.state.lock().unwrap();
    s.run += 1;
    s.status = McpStatus::Stopped;
    s.peer = None;
    s.tools.clear();
    s.pid = None;
    if let Some(stop) = s.stop.take() {
        stop.cancel();
    }
}

type Connected = (RunningService<RoleClient, ()>, Option<u32>, Vec<Tool>);

/// Starts or reaches the server, runs the handshake and lists its tools.
async fn connect(slot: &Slot) -> Result<Connected, String> {
    let transport = slot.config.lock().unwrap().transport.clone();
    let (service, pid) = match &transport {
        McpTransport::Stdio { command, args, env } => {
            let mut cmd = tokio::process::Command::new(command);
            cmd.args(args).envs(env);
            let (transport, stderr) = TokioChildProcess::builder(cmd)
                .stderr(std::process::Stdio::piped())
                .spawn()
                .map_err(|e| format!("could not start {command}: {e}"))?;
            let pid = transport.id();
            if let Some(stderr) = stderr {
                let tail = slot.stderr.clone();
                tauri::async_runtime::spawn(async move {
                    let mut lines = tokio::io::BufReader::new(stderr).lines();
                    while let Ok(Some(line)) = lines.next_line().await {
                        tail.lock().unwrap().push(&line);
                    }
                });
            }
            let service = ()
                .serve(transport)
                .await
                .map_err(|e| format!("the server did not complete the MCP handshake: {e}"))?;
            (service, pid)
        }
        McpTransport::Http { url, headers } => {
            let mut config = StreamableHttpClientTransportConfig::with_uri(url.as_str());
            let mut custom = HashMap::new();
            for (name, value) in headers {
                if name.eq_ignore_ascii_case("authorization") {
                    let token = value.strip_prefix("Bearer ").unwrap_or(value);
                    config = config.auth_header(token);
                    continue;
                }
                let name = http::HeaderName::try_from(name.as_str())
                    .map_err(|e| format!("header {name:?}: {e}"))?;
                let value = http::HeaderValue::try_from(value.as_str())
                    .map_err(|e| format!("header {name}: {e}"))?;
                custom.insert(name, value);
            }
            let transport =
                StreamableHttpClientTransport::from_config(config.custom_headers(custom));
            let service = ()
                .serve(transport)
                .await
                .map_err(|e| format!("{url} did not complete the MCP handshake: {e}"))?;
            (service, None)
        }
    };
    let tools = service
        .peer()
        .list_all_tools()
        .await
        .map_err(|e| format!("the server did not list its tools: {e}"))?;
    Ok((service, pid, tools))
}

#[cfg(test)]
mod tests {
    use serde_json::json;

    use super::declared_arguments_only;

    fn map(v: serde_json::Value) -> serde_json::Map<String, serde_json::Value> {
        v.as_object().unwrap().clone()
    }

    #[test]
    fn an_open_object_schema_is_closed_to_its_declared_arguments() {
        let open = map(json!({"type": "object", "properties": {"path": {"type": "string"}}}));
        assert_eq!(
            declared_arguments_only(&open),
            json!({"type": "object", "properties": {"path": {"type": "string"}}, "additionalProperties": false})
        );
    }

    #[test]
    fn a_schema_that_says_what_it_allows_is_kept() {
        let extra = map(json!({"type": "object", "additionalProperties": {"type": "string"}}));
        assert_eq!(declared_arguments_only(&extra), serde_json::Value::Object(extra.clone()));
        let any = map(json!({"anyOf": [{"type": "object"}, {"type": "string"}]}));
        assert_eq!(declared_arguments_only(&any), serde_json::Value::Object(any.clone()));
    }
}
