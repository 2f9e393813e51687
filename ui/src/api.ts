// Typed wrappers over the app's Tauri commands and events (src-tauri/src/commands).
import type { AnswerFormat } from './bindings/AnswerFormat';
import type { AppError } from './bindings/AppError';
import type { Attachment } from './bindings/Attachment';
import type { BulkEvent } from './bindings/BulkEvent';
import type { BulkJob } from './bindings/BulkJob';
import type { BulkRow } from './bindings/BulkRow';
import type { Chat } from './bindings/Chat';
import type { ChatSettings } from './bindings/ChatSettings';
import type { ChatUpdated } from './bindings/ChatUpdated';
import type { ClusterStatus } from './bindings/ClusterStatus';
import type { DownloadDone } from './bindings/DownloadDone';
import type { EngineKnobs } from './bindings/EngineKnobs';
import type { DownloadEvent } from './bindings/DownloadEvent';
import type { EngineStatus } from './bindings/EngineStatus';
import type { ExportedChat } from './bindings/ExportedChat';
import type { FitCheck } from './bindings/FitCheck';
import type { FitTarget } from './bindings/FitTarget';
import type { Gallery } from './bindings/Gallery';
import type { HubTokenView } from './bindings/HubTokenView';
import type { Message } from './bindings/Message';
import type { ModelLoadSettings } from './bindings/ModelLoadSettings';
import type { ModelLoadSettingsView } from './bindings/ModelLoadSettingsView';
import type { Outgoing } from './bindings/Outgoing';
import type { Preset } from './bindings/Preset';
import type { Sent } from './bindings/Sent';
import type { ServerKeyView } from './bindings/ServerKeyView';
import type { ServerStatus } from './bindings/ServerStatus';
import type { Settings } from './bindings/Settings';
import type { SettingsView } from './bindings/SettingsView';
import type { ModelDetails } from './bindings/ModelDetails';
import type { SearchPage } from './bindings/SearchPage';
import type { SearchQuery } from './bindings/SearchQuery';
import type { StartedReply } from './bindings/StartedReply';
import type { StreamEvent } from './bindings/StreamEvent';
import { Channel, invoke } from '@tauri-apps/api/core';
import { listen, type UnlistenFn } from '@tauri-apps/api/event';

// The shapes commands and events send are generated from the Rust types
// (ts-rs, src-tauri/tests/app_tests/ts_bindings.rs keeps ui/src/bindings current);
// the rest of the UI keeps importing them from here.
export type {
  AnswerFormat, AppError, Attachment, BulkEvent, BulkJob, BulkRow, Chat, ChatSettings, DownloadDone, EngineKnobs, ExportedChat, HubTokenView,
  Message, Outgoing, Preset, Sent, ServerKeyView, ServerStatus, Settings, SettingsView, StartedReply, StreamEvent,
};
export type { ContextPolicy } from './bindings/ContextPolicy';
export type { FitCheck, FitTarget, ModelDetails, ModelLoadSettings, ModelLoadSettingsView, SearchPage, SearchQuery };
export type { LoadedModel } from './bindings/LoadedModel';
export type { ClusterStatus, EngineStatus, Gallery };
/** A catalog model as the gallery shows it (on disk? downloading?). */
export type { GalleryEntry as CatalogEntry } from './bindings/GalleryEntry';
/** A model found on disk, with what it can do. */
export type { LocalEntry as LocalModel } from './bindings/LocalEntry';
/** The `download-progress` event. */
export type DownloadProgress = DownloadEvent;
export type { MessageStats } from './bindings/MessageStats';
export type { MessageStatus } from './bindings/MessageStatus';
export type { Role } from './bindings/Role';
export type { ToolCallRecord } from './bindings/ToolCallRecord';
export type { McpServerView } from './bindings/McpServerView';
export type { McpServerConfig } from './bindings/McpServerConfig';
export type { ChatTools } from './bindings/ChatTools';
/** The user's answer to a tool call shown in a chat. */
export type ToolDecision = 'approve' | 'deny' | 'always_allow';

export interface EngineStatsView {
  engine: Record<string, unknown> & {
    running: number; waiting: number; kv_cache_bytes: number; active_memory_bytes: number;
    decode_steps: number; kv_quantization: string;
    prefix_cache?: {
      hits: number; misses: number; bytes: number; reused_tokens: number;
      /** The cache's files on disk, when on (its hits are among `hits` too). */
      disk?: { hits: number; reused_tokens: number; entries: number; bytes: number; capacity_bytes: number; rejected_files: number } | null;
    };
    vision_cache?: { hits: number; misses: number; bytes: number; entries: number };
  };
  decode_tps: number;
  app_replies: number;
}

function channel(onEvent: (e: StreamEvent) => void): Channel<StreamEvent> {
  const ch = new Channel<StreamEvent>();
  ch.onmessage = onEvent;
  return ch;
}

export const api = {
  listChats: (query?: string) => invoke<Chat[]>('list_chats', { query: query ?? null }),
  /** A new chat; from a preset, with its settings and answer format. */
  createChat: (presetId?: number) => invoke<Chat>('create_chat', { presetId: presetId ?? null }),
  /** Writes the chat (chat.json with every branch, chat.md with the shown one, images beside) to a new folder at `destination`. */
  exportChat: (chatId: number, destination: string) => invoke<ExportedChat>('export_chat', { chatId, destination }),
  /** Adds the chat in an exported chat.json as a new chat. */
  importChat: (path: string) => invoke<Chat>('import_chat', { path }),
  setChatSettings: (chatId: number, settings: ChatSettings) => invoke<Chat>('set_chat_settings', { chatId, settings }),
  listPresets: () => invoke<Preset[]>('list_presets'),
  savePreset: (name: string, settings: ChatSettings, answerFormat: AnswerFormat | null) =>
    invoke<Preset>('save_preset', { name, settings, answerFormat }),
  deletePreset: (id: number) => invoke<boolean>('delete_preset', { id }),
  renameChat: (chatId: number, title: string) => invoke<Chat>('rename_chat', { chatId, title }),
  setAnswerFormat: (chatId: number, format: AnswerFormat | null) => invoke<Chat>('set_answer_format', { chatId, format }),
  deleteChat: (chatId: number) => invoke<void>('delete_chat', { chatId }),
  listMessages: (chatId: number) => invoke<Message[]>('list_messages', { chatId }),

  send: (chatId: number, message: Outgoing, onEvent: (e: StreamEvent) => void) =>
    invoke<Sent>('send_message', { chatId, newChat: null, message, onEvent: channel(onEvent) }),
  /** The first message of a chat this call makes, with `settings` (those chosen before it existed):
   * one round trip; the channel names the chat first (`chat_created`), and a refused message makes none. */
  sendInNewChat: (settings: ChatSettings | null, message: Outgoing, onEvent: (e: StreamEvent) => void) =>
    invoke<Sent>('send_message', { chatId: null, newChat: settings, message, onEvent: channel(onEvent) }),
  stop: (chatId: number) => invoke<boolean>('stop_reply', { chatId }),
  /** A new answer beside `messageId` (a reply), or beside the shown branch's last answer when null. */
  regenerate: (chatId: number, messageId: number | null, onEvent: (e: StreamEvent) => void) =>
    invoke<StartedReply>('regenerate', { chatId, messageId, onEvent: channel(onEvent) }),
  /** Extends `messageId`, an answer cut at its token limit, in place: the model goes on from where it stopped. */
  continueReply: (chatId: number, messageId: number, onEvent: (e: StreamEvent) => void) =>
    invoke<StartedReply>('continue_reply', { chatId, messageId, onEvent: channel(onEvent) }),
  editAndResend: (chatId: number, messageId: number, message: Outgoing, onEvent: (e: StreamEvent) => void) =>
    invoke<Sent>('edit_and_resend', { chatId, messageId, message, onEvent: channel(onEvent) }),
  /** Shows the branch through `messageId`; returns the chat's shown messages. */
  chooseBranch: (chatId: number, messageId: number) => invoke<Message[]>('choose_branch', { chatId, messageId }),
  /** Deletes `messageId` and everything under it; returns the chat's shown messages. */
  deleteBranch: (chatId: number, messageId: number) => invoke<Message[]>('delete_branch', { chatId, messageId }),
  activeReplies: () => invoke<number[]>('active_replies'),
  attachReply: (chatId: number, onEvent: (e: StreamEvent) => void) =>
    invoke<boolean>('attach_reply', { chatId, onEvent: channel(onEvent) }),
  /** Approve / Deny / Always allow a tool call waiting in the chat; false when none waits under that id. */
  answerToolCall: (chatId: number, callId: string, decision: 'approve' | 'deny' | 'always_allow') =>
    invoke<boolean>('answer_tool_call', { chatId, callId, decision }),
  /** Settings → Tools (MCP): the servers with their state and tools. */
  listMcpServers: () => invoke<import('./bindings/McpServerView').McpServerView[]>('list_mcp_servers'),
  saveMcpServer: (config: import('./bindings/McpServerConfig').McpServerConfig) =>
    invoke<import('./bindings/McpServerView').McpServerView>('save_mcp_server', { config }),
  removeMcpServer: (name: string) => invoke<boolean>('remove_mcp_server', { name }),
  restartMcpServer: (name: string) => invoke<import('./bindings/McpServerView').McpServerView>('restart_mcp_server', { name }),
  /** Adds the servers of an mcp.json (`{"mcpServers": {…}}`). */
  importMcpServers: (json: string) => invoke<import('./bindings/McpServerView').McpServerView[]>('import_mcp_servers', { json }),

  addAttachmentPath: (path: string) => invoke<Attachment>('add_attachment_path', { path }),
  addAttachmentBytes: (bytes: Uint8Array) => invoke<Attachment>('add_attachment_bytes', bytes),
  /** The image on the system clipboard, stored as an attachment; null when the clipboard holds none. */
  pasteClipboardImage: () => invoke<Attachment | null>('paste_clipboard_image'),
  /** Images the app was asked to open (command line, Finder, Dock icon), each handed out once. */
  takeOpenedFiles: () => invoke<string[]>('take_opened_files'),
  /** Opens a link from a reply in the browser; refused (LINK_REFUSED) unless http, https or mailto. */
  openLink: (href: string) => invoke<void>('open_link', { href }),

  listModels: () => invoke<Gallery>('list_models'),
  loadModel: (id: string) => invoke<EngineStatus>('load_model', { id }),
  unloadModel: () => invoke<EngineStatus>('unload_model'),
  /** A catalog id, or `hf:<repo>` for a search result; `files` keeps one quantization's. */
  downloadModel: (id: string, files: string[] | null = null) => invoke<void>('download_model', { id, files }),
  searchHub: (query: SearchQuery) => invoke<SearchPage>('search_hub', { query }),
  hubModelDetails: (repo: string) => invoke<ModelDetails>('hub_model_details', { repo }),
  /** Context, KV bits and running sequences default to the model's load settings (its own, else Settings'). */
  fitCheck: (target: FitTarget, context: number | null = null, kvBits: number | null = null, maxRunning: number | null = null) =>
    invoke<FitCheck>('fit_check', { target, context, kvBits, maxRunning }),
  /** What a model on disk loads with: its own remembered settings, else Settings'. */
  getModelLoadSettings: (id: string) => invoke<ModelLoadSettingsView>('get_model_load_settings', { id }),
  saveModelLoadSettings: (id: string, settings: ModelLoadSettings) =>
    invoke<ModelLoadSettingsView>('save_model_load_settings', { id, settings }),
  /** The model follows Settings again. */
  forgetModelLoadSettings: (id: string) => invoke<ModelLoadSettingsView>('forget_model_load_settings', { id }),
  cancelDownload: (id: string) => invoke<boolean>('cancel_download', { id }),
  deleteModel: (id: string) => invoke<number>('delete_model', { id }),
  /** Adds a model folder or `.gguf` file from anywhere on disk (checked first); returns its gallery id. */
  addModel: (path: string) => invoke<string>('add_model', { path }),
  /** Takes an added model off the gallery; its files stay. */
  removeAddedModel: (id: string) => invoke<void>('remove_added_model', { id }),
  /** Of dropped paths, the folders and `.gguf` files: models to add, not images for the chat. */
  modelCandidates: (paths: string[]) => invoke<string[]>('model_candidates', { paths }),

  engineStatus: () => invoke<EngineStatus>('engine_status'),
  engineStats: () => invoke<EngineStatsView | null>('engine_stats'),

  getSettings: () => invoke<SettingsView>('get_settings'),
  saveSettings: (settings: Settings) => invoke<SettingsView>('save_settings', { settings }),
  restartEngine: () => invoke<SettingsView>('restart_engine'),
  /** Settings' "Split models across machines": a line per rank, as this Mac (rank 0) knows them. */
  clusterStatus: () => invoke<ClusterStatus>('cluster_status'),
  serverStatus: () => invoke<ServerStatus>('server_status'),
  serverApiKeyStatus: () => invoke<ServerKeyView>('server_api_key_status'),
  saveServerApiKey: (key: string) => invoke<ServerKeyView>('save_server_api_key', { key }),
  removeServerApiKey: () => invoke<ServerKeyView>('remove_server_api_key'),
  hubTokenStatus: () => invoke<HubTokenView>('hub_token_status'),
  saveHubToken: (token: string) => invoke<HubTokenView>('save_hub_token', { token }),
  removeHubToken: () => invoke<HubTokenView>('remove_hub_token'),

  listBulkJobs: () => invoke<BulkJob[]>('list_bulk_jobs'),
  createBulkJob: (prompt: string, format: AnswerFormat | null, maxTokens: number | null, paths: string[]) =>
    invoke<BulkJob>('create_bulk_job', { prompt, format, maxTokens, paths }),
  bulkJobRows: (jobId: number) => invoke<BulkRow[]>('bulk_job_rows', { jobId }),
  runBulkJob: (jobId: number, pass: 'unfinished' | 'failed', onEvent: (e: BulkEvent) => void) => {
    const ch = new Channel<BulkEvent>();
    ch.onmessage = onEvent;
    return invoke<BulkJob>('run_bulk_job', { jobId, pass, onEvent: ch });
  },
  cancelBulkJob: (jobId: number) => invoke<boolean>('cancel_bulk_job', { jobId }),
  exportBulkJob: (jobId: number, format: 'csv' | 'jsonl') => invoke<string>('export_bulk_job', { jobId, format }),
  deleteBulkJob: (jobId: number) => invoke<void>('delete_bulk_job', { jobId }),
};

export const events = {
  engineStatus: (f: (s: EngineStatus) => void): Promise<UnlistenFn> => listen<EngineStatus>('engine-status', (e) => f(e.payload)),
  downloadProgress: (f: (p: DownloadProgress) => void) => listen<DownloadProgress>('download-progress', (e) => f(e.payload)),
  downloadDone: (f: (d: DownloadDone) => void) => listen<DownloadDone>('download-done', (e) => f(e.payload)),
  serverStatus: (f: (s: ServerStatus) => void) => listen<ServerStatus>('server-status', (e) => f(e.payload)),
  chatUpdated: (f: (chatId: number) => void) => listen<ChatUpdated>('chat-updated', (e) => f(e.payload.chat_id)),
  /** A native menu item was chosen; the payload names the action (see menuActions.ts). */
  menuAction: (f: (payload: unknown) => void) => listen<unknown>('menu-action', (e) => f(e.payload)),
  /** An MCP server's state changed (starting, ready, failed). */
  mcpChanged: (f: (server: import('./bindings/McpServerView').McpServerView) => void) =>
    listen<import('./bindings/McpServerView').McpServerView>('mcp-changed', (e) => f(e.payload)),
  /** Files were opened with the app while it runs: take them with api.takeOpenedFiles. */
  filesOpened: (f: () => void) => listen<null>('files-opened', () => f()),
};

/** The message of anything a command rejected with. */
export function errorText(e: unknown): string {
  if (e && typeof e === 'object' && 'message' in e) return String((e as AppError).message);
  return String(e);
}

/** The URL the web view shows a stored image by (served by the app's att:// protocol). */
export function attachmentUrl(sha256: string): string {
  // WebKit (Linux, macOS) uses the custom scheme directly; WebView2 maps it to http://<scheme>.localhost.
  return navigator.userAgent.includes('Windows') ? `http://att.localhost/${sha256}` : `att://localhost/${sha256}`;
}
