// The window: sidebar (chats + navigation, can be hidden), the page (chat,
// models or settings) and the status bar; wires replies, events, image
// drops, keyboard shortcuts, the native menu's actions, files opened with
// the app and the screen-reader announcements.
import { api, errorText, events, type Chat, type ChatSettings, type EngineStatsView, type EngineStatus, type Message, type Outgoing, type ServerStatus, type Settings, type StreamEvent, type ToolDecision } from './api';
import { chatSettingsDialog } from './chatSettingsView';
import { BulkView } from './bulkView';
import { ChatView } from './chatView';
import { Composer } from './composer';
import type { AnswerFormat } from './answerFormat';
import { clear, h } from './dom';
import { bytes } from './format';
import { confirmDialog } from './modal';
import { icon } from './icons';
import { menuAction, type MenuAction } from './menuActions';
import { modelLabel } from './modelNames';
import { exportName } from './exportName';
import { answeringModel, chatModelState, headerLabel, modelView } from './modelState';
import { ModelsView } from './modelsView';
import { SettingsPage } from './settingsView';
import { onMac, shortcutFor, shortcutLabel } from './shortcuts';
import { Sidebar } from './sidebar';
import { StatusBar } from './statusBar';
import { SendDraw } from './sendDraw';
import { answerPending, Streams, type LiveReply } from './streams';
import { recordKey } from './keptNodes';
import { mark } from './timeline';

export interface Platform {
  pickFiles(): Promise<string[]>;
  /** An exported chat.json to import; null when cancelled. */
  pickChatFile(): Promise<string | null>;
  /** Where to export a chat (a save dialog: the path of a new folder, `name` offered); null when cancelled. */
  pickExportFolder(name: string): Promise<string | null>;
  /** A model to add ("Add model…"): a folder, or a `.gguf` file; null when cancelled. */
  pickModel(kind: 'folder' | 'gguf'): Promise<string | null>;
  onDrop(handlers: { over(on: boolean): void; drop(paths: string[]): void }): void;
}

type Page = 'chat' | 'bulk' | 'models' | 'settings';

const SIDEBAR_KEY = 'vlm-sidebar-hidden';

/** Below this width the sidebar folds away by itself (see styles.css's .narrow). */
export const NARROW_WIDTH = 900;

/** Which turn of a chat's reply the chat shows: its stored tool turns and the call shown. */
function turnOf(chatId: number, live: LiveReply): string {
  return `${chatId}:${live.stored.map((m) => m.id).join(',')}:${live.toolCall?.call.id ?? ''}`;
}

export class App {
  readonly el: HTMLElement;
  private page: Page = 'chat';
  private chat: Chat | null = null;
  private messages: Message[] = [];
  private editing: Message | null = null;
  private streams = new Streams();
  private status: EngineStatus | null = null;
  private stats: EngineStatsView | null = null;
  private server: ServerStatus | null = null;
  private sidebar: Sidebar;
  private chatView: ChatView;
  private composer: Composer;
  private models: ModelsView;
  private bulk: BulkView;
  private settings: SettingsPage;
  private statusBar = new StatusBar();
  private main: HTMLElement;
  private header: HTMLElement;
  /** The app's Settings, for what a chat's own settings fall back to. */
  private globalSettings: Settings | null = null;
  private nav: HTMLElement;
  private mac = onMac();
  private toasts = h('div', { class: 'toasts', 'aria-live': 'polite' });
  /** Finished replies are read out from here (a polite live region, visually hidden). */
  private announcer = h('div', { class: 'sr-only', role: 'status', 'aria-live': 'polite', 'data-testid': 'announcer' });
  private dropOverlay = h('div', { class: 'drop-overlay', hidden: true }, h('div', {}, 'Drop images to attach'));
  /** What the chat not created yet (the empty "New chat") sets for itself:
   * it is created by its first message, so settings alone add no empty chat
   * to the sidebar. */
  private unsavedSettings: ChatSettings | null = null;
  private narrow = typeof window.matchMedia === 'function' ? window.matchMedia(`(max-width: ${NARROW_WIDTH}px)`) : null;
  /** Gallery names by model id: a model is never shown by its internal id. */
  private modelNames = new Map<string, string>();
  /** Chats answering at the last stream event, to redraw the sidebar only when that changes. */
  private answering = '';
  /** The last reply started here, its start drawn once (sendDraw.ts); done, it holds nothing. */
  private sendDraw: SendDraw | null = null;
  /** What of the open chat's turn (stored tool turns, the call shown) was drawn last. */
  private turnDrawn = '';
  /** Work waiting for a chat's reply to show its first piece (or to end), by chat. */
  private afterFirstPiece = new Map<number, () => void>();

  constructor(private platform: Platform) {
    const toast = (m: string) => this.toast(m);
    this.sidebar = new Sidebar({
      select: (c) => void this.openChat(c),
      selectedId: () => (this.page === 'chat' ? this.chat?.id ?? null : null),
      isRunning: (id) => this.streams.isRunning(id),
      deleted: (id) => this.chatDeleted(id),
      importChat: () => void this.importChat(),
      startFromPreset: (id) => void (async () => {
        try { await this.openChat(await api.createChat(id)); } catch (e) { this.toast(errorText(e)); }
      })(),
      toast,
    });
    this.chatView = new ChatView({
      regenerate: () => void this.regenerate(),
      edit: (m) => this.edit(m),
      switchBranch: (id) => void this.switchBranch(id),
      deleteBranch: (m) => void this.deleteBranch(m),
      continueReply: () => void this.continueReply(),
      sendStarter: (text) => void this.composer.sendText(text),
      answerToolCall: (callId, decision) => void this.answerToolCall(callId, decision),
      openModels: () => this.go('models'),
    });
    this.composer = new Composer({
      send: (m, shown) => this.send(m, shown),
      stop: () => void this.stop(),
      pickFiles: () => platform.pickFiles(),
      toast,
      visionModels: () => this.models.visionModelsOnDisk(),
      switchModel: async (id) => { try { await api.loadModel(id); } catch (e) { this.toast(errorText(e)); } },
      openModels: () => this.go('models'),
      setAnswerFormat: (format) => this.setAnswerFormat(format),
      setThinking: (on) => this.updateChatSettings((own) => ({ ...own, thinking: on })),
    });
    this.models = new ModelsView(toast, (kind) => platform.pickModel(kind));
    this.bulk = new BulkView({ pickFiles: () => platform.pickFiles(), toast });
    this.settings = new SettingsPage(toast);
    this.header = h('header', { class: 'chat-header' });
    this.main = h('main', { class: 'main' });
    this.nav = h('nav', { class: 'sidebar-nav', 'aria-label': 'Pages' });
    this.el = h('div', { class: 'app' },
      h('aside', { class: 'sidebar', 'aria-label': 'Chats' }, this.sidebar.el, this.nav),
      this.main,
      this.statusBar.el,
      this.toasts,
      this.announcer,
      this.dropOverlay);
    this.setSidebarHidden(localStorage.getItem(SIDEBAR_KEY) === '1');
    // a narrow window (800 px) folds the sidebar away: the chat keeps its width
    this.narrow?.addEventListener('change', () => this.fitWidth());
    this.fitWidth();
    this.streams.subscribe((chatId, live) => {
      if (!this.sendDraw?.holds(chatId, live)) this.onStream(chatId, live);
    });
    document.addEventListener('keydown', (e) => this.onKey(e));
  }

  /** A reply changed: the chat list, the status bar and, for the open chat, its view follow. */
  private onStream(chatId: number, live: LiveReply): void {
    this.redrawAnswering();
    if (live.finished) {
      this.announce(live.finished);
      void this.pollStats();
    }
    if (this.page === 'chat' && this.chat?.id === chatId) {
      const turn = turnOf(chatId, live);
      if (live.finished) this.replyFinished(live.finished);
      else if (turn !== this.turnDrawn) {
        // an answer called a tool, a result came, or a call waits: the turn's
        // stored messages join the branch and the approval block shows
        this.turnDrawn = turn;
        this.mergeStored(live.stored);
        this.showMessages();
      } else this.chatView.updateLive(live);
      this.composer.setBusy(this.streams.isRunning(chatId));
    }
    // what waited for the answer's first piece (the title, the chat list)
    // runs in a task of its own: the piece's task ends with its draw, and
    // their commands are not on the way to the text
    const waiting = this.afterFirstPiece.get(chatId);
    if (waiting && !answerPending(live, this.streams.isRunning(chatId))) {
      this.afterFirstPiece.delete(chatId);
      window.setTimeout(waiting, 0);
    }
  }

  /** What a reply's start changes, drawn at once: the chat list and the
   * status bar, and the chat if it is open (its messages with the bubble). */
  private drawReplyStart(chatId: number | null): void {
    this.redrawAnswering();
    const live = chatId === null ? undefined : this.streams.get(chatId);
    if (this.page === 'chat' && chatId !== null && this.chat?.id === chatId) {
      if (live) this.turnDrawn = turnOf(chatId, live);
      this.showMessages();
    }
  }

  /** Starts a new answer in the open chat with `command` (Regenerate,
   * Continue), its start drawn once (sendDraw.ts): `keep` gives the chat's
   * messages the bubble goes after. */
  private async restartReply(command: (onEvent: (e: StreamEvent) => void) => Promise<unknown>, keep: (messages: Message[]) => Message[]): Promise<void> {
    const chat = this.chat;
    if (!chat) return;
    const draw = new SendDraw(chat.id, () => this.drawReplyStart(chat.id));
    this.sendDraw = draw;
    try {
      await command(draw.follow(this.streams.begin(chat.id)));
    } catch (e) {
      draw.cancel();
      this.streams.abandon(chat.id);
      this.toast(errorText(e));
      return;
    }
    if (this.chat?.id === chat.id && !this.streams.isRunning(chat.id)) {
      draw.now();
      return void this.reloadMessages(); // it already ended
    }
    if (this.chat?.id === chat.id) this.messages = keep(this.messages);
    draw.onAnswered();
  }

  /** The chat list and the status bar, when which chats answer changed. */
  private redrawAnswering(): void {
    const answering = this.streams.runningChats().sort().join(',');
    if (answering !== this.answering) {
      this.answering = answering;
      this.sidebar.redraw();
      this.renderStatus(); // "starting an answer" before the engine runs it
    }
  }

  async start(): Promise<void> {
    this.renderNav();
    this.showPage();
    await this.reloadMessages();
    await events.engineStatus((s) => this.setStatus(s));
    await events.downloadProgress((p) => this.models.onProgress(p));
    await events.downloadDone((d) => {
      this.models.onDone(d);
      // a model that sees images may be on disk now: the composer's offer names it
      void this.composer.refreshOffer();
      void this.loadModelNames();
      if (d.ok) this.toast(`Downloaded ${d.id}`);
    });
    await events.serverStatus((s) => { this.server = s; this.settings.setServer(s); this.renderStatus(); });
    await events.mcpChanged((s) => this.settings.mcp.update(s));
    await events.chatUpdated(() => void this.sidebar.refresh());
    await events.menuAction((payload) => {
      const action = menuAction(payload);
      if (action) this.run(action);
    });
    await events.filesOpened(() => void this.openFiles());
    this.platform.onDrop({
      over: (on) => {
        this.dropOverlay.hidden = !on;
        (this.dropOverlay.firstChild as HTMLElement).textContent = this.page === 'models'
          ? 'Drop a model folder or a .gguf file to add it' : 'Drop images to attach';
      },
      drop: (paths) => {
        this.dropOverlay.hidden = true;
        // on the Bulk page a drop is the job's images (a folder: its images)
        if (this.page === 'bulk') return this.bulk.addPaths(paths);
        void this.dropped(paths);
      },
    });
    this.setStatus(await api.engineStatus());
    await this.loadGlobalSettings();
    void this.loadModelNames();
    this.server = await api.serverStatus();
    // replies that kept running while the page reloaded
    for (const chatId of await api.activeReplies()) {
      const handler = this.streams.begin(chatId);
      if (!(await api.attachReply(chatId, handler))) this.streams.abandon(chatId);
    }
    await this.sidebar.refresh();
    this.renderStatus();
    window.setInterval(() => void this.pollStats(), 1000);
    this.composer.focus();
    // the app was started to open images (`vlm-chat photo.png`, Finder, the Dock)
    await this.openFiles();
  }

  /** Images the app was asked to open start a new chat with them attached,
   * waiting for the question. */
  private async openFiles(): Promise<void> {
    let paths: string[];
    try { paths = await api.takeOpenedFiles(); } catch (e) { this.toast(errorText(e)); return; }
    if (paths.length === 0) return;
    await this.openChat(null);
    await this.composer.addPaths(paths);
  }

  /** Paths dropped outside the Bulk page: model folders and `.gguf` files
   * are added on the Models page (never attached to the chat: a folder there
   * failed as "Is a directory"); images go to the chat's composer. */
  private async dropped(paths: string[]): Promise<void> {
    let models: string[] = [];
    try { models = await api.modelCandidates(paths); } catch (e) { this.toast(errorText(e)); }
    const images = paths.filter((p) => !models.includes(p));
    if (models.length > 0) {
      if (this.page !== 'models') this.go('models');
      await this.models.addPaths(models);
    }
    if (images.length > 0 && this.page !== 'models') {
      if (this.page !== 'chat') this.go('chat');
      await this.composer.addPaths(images);
    } else if (images.length > 0) {
      this.toast(`Not a model: ${images.map((p) => p.split(/[\\/]/).pop()).join(', ')}. Drop images on a chat; here, a model folder or a .gguf file.`);
    }
  }

  /** The one place a new engine status arrives: every view that names the
   * model (header, status bar, composer, empty chat, Models, Settings) is
   * told at once, from the same reading of it (modelState.ts). */
  private setStatus(s: EngineStatus): void {
    this.status = s;
    // the figures were the engine's that just went away
    if (!s.model) this.stats = null;
    this.models.setStatus(s);
    this.settings.setStatus(s);
    // a model unloaded after the idle time answers as before: the next
    // message loads it again by itself
    const view = modelView(s);
    this.chatView.setModel(chatModelState(view));
    // a bulk job asks about images: Run is off, saying why, without a model that sees them
    const answering = answeringModel(view);
    this.bulk.setModel(view.kind === 'loading' ? { name: view.name, vision: false, loading: true }
      : answering ? { name: answering.name, vision: answering.vision } : null);
    this.updateComposer();
    if (this.page === 'chat') this.renderHeader();
    this.renderStatus();
    if (view.kind === 'none' || view.kind === 'failed') void this.suggestModel();
  }

  /** With no model, the empty chat suggests the recommended model that
   * fits this machine best: Load when it is on disk, else Download. */
  private async suggestModel(): Promise<void> {
    const best = await this.models.suggestion().catch(() => null);
    if (!best || this.status?.model || this.status?.state === 'loading') return this.chatView.setSuggestion(null);
    const onDisk = best.local_id;
    this.chatView.setSuggestion({
      name: best.display_name,
      detail: onDisk ? 'on this computer, fits' : `fits, ${bytes(best.size_bytes)} download`,
      action: onDisk ? `Load ${best.display_name}` : `Download ${best.display_name}`,
      use: () => void (async () => {
        try {
          if (onDisk) await api.loadModel(onDisk);
          else { await api.downloadModel(best.id); this.go('models'); }
        } catch (e) { this.toast(errorText(e)); }
      })(),
    });
  }

  /** The composer's model line and thinking switch, for the open chat. */
  private updateComposer(): void {
    const s = this.status;
    const own = this.ownSettings() ?? {};
    const answering = answeringModel(modelView(s));
    const chatModel = own.model && own.model !== answering?.id ? modelLabel(own.model, this.modelNames) : null;
    this.composer.setModel(answering ? { name: answering.name, vision: answering.vision } : null, chatModel);
    this.composer.showThinking(!!s?.model?.thinking, own.thinking ?? this.globalSettings?.thinking ?? true);
  }

  /** The open chat's own settings (the unsaved ones of a chat not created yet). */
  private ownSettings(): ChatSettings | null {
    return this.chat ? this.chat.settings : this.unsavedSettings;
  }

  /** Changes the open chat's own settings (kept for the first message when no chat is open). */
  private async updateChatSettings(change: (own: ChatSettings) => ChatSettings): Promise<void> {
    try {
      const chat = this.chat;
      if (!chat) {
        const next = change(this.unsavedSettings ?? {});
        this.unsavedSettings = Object.values(next).some((v) => v !== null && v !== undefined) ? next : null;
        if (this.page === 'chat') this.renderHeader();
        this.updateComposer();
        return;
      }
      const updated = await api.setChatSettings(chat.id, change(chat.settings ?? {}));
      if (!this.chat || this.chat.id === updated.id) this.chat = updated;
      // the header's "Chat settings •" says whether the chat sets anything itself
      if (this.page === 'chat') this.renderHeader();
      this.updateComposer();
      void this.sidebar.refresh();
    } catch (e) {
      this.toast(errorText(e));
    }
  }

  /** The chat settings dialog, for the open chat (a new chat if none is open). */
  private async openChatSettings(): Promise<void> {
    try {
      const [view, gallery, presets, mcp] = await Promise.all([api.getSettings(), api.listModels(), api.listPresets(), api.listMcpServers()]);
      this.globalSettings = view.settings;
      const models = [
        ...gallery.local.filter((m) => m.supported && !m.partial).map((m) => ({ id: m.id, name: m.name })),
      ];
      const chosen = await chatSettingsDialog({
        own: this.ownSettings() ?? {}, global: view.settings, answerFormat: this.chat?.answer_format ?? null, models, presets,
        mcpServers: mcp.map((s) => ({ name: s.config.name, tools: s.tools.length, ready: s.status.state === 'ready', toolNames: s.tools.map((t) => t.name) })),
      }, (m) => this.toast(m));
      // a preset saved in the dialog shows in the sidebar's "New chat from a preset…"
      void this.sidebar.refresh();
      if (chosen) await this.updateChatSettings(() => chosen);
    } catch (e) {
      this.toast(errorText(e));
    }
  }

  private renderNav(): void {
    clear(this.nav);
    const item = (page: Page, glyph: 'chat' | 'bulk' | 'models' | 'settings', label: string, keys?: string) => h('button', {
      class: `nav-item${this.page === page ? ' selected' : ''}`, 'data-testid': `nav-${page}`, onclick: () => this.go(page),
      'aria-current': this.page === page ? 'page' : undefined, title: keys ? `${label} (${keys})` : label,
    }, icon(glyph), label);
    this.nav.append(item('chat', 'chat', 'Chats'), item('bulk', 'bulk', 'Bulk'), item('models', 'models', 'Models'), item('settings', 'settings', 'Settings', shortcutLabel('settings', this.mac)));
  }

  private go(page: Page): void {
    if (this.page === 'settings' && page !== 'settings') {
      this.settings.flush();
      void this.loadGlobalSettings();
    }
    this.page = page;
    this.renderNav();
    this.showPage();
    if (page === 'models') void this.models.refresh();
    if (page === 'bulk') void this.bulk.refresh();
    if (page === 'settings') void this.settings.refresh();
    void this.sidebar.refresh();
  }

  private showPage(): void {
    clear(this.main);
    if (this.page === 'chat') {
      this.renderHeader();
      this.main.append(this.header, this.chatView.el, this.composer.el);
    } else if (this.page === 'bulk') {
      this.main.append(this.bulk.el);
    } else if (this.page === 'models') {
      this.main.append(this.models.el);
    } else {
      this.main.append(this.settings.el);
    }
  }

  private renderHeader(): void {
    clear(this.header);
    const model = headerLabel(modelView(this.status));
    const hidden = this.el.classList.contains('sidebar-hidden');
    this.header.append(
      h('button', {
        class: 'icon sidebar-toggle', 'data-testid': 'toggle-sidebar', 'aria-expanded': hidden ? 'false' : 'true',
        'aria-label': hidden ? 'Show the sidebar' : 'Hide the sidebar', title: `${hidden ? 'Show' : 'Hide'} the sidebar (${shortcutLabel('toggle-sidebar', this.mac)})`,
        onclick: () => this.setSidebarHidden(!this.el.classList.contains('sidebar-hidden')),
      }, icon('sidebar', 18)),
      h('h1', { class: 'chat-title-main', 'data-testid': 'chat-title' }, this.chat?.title || 'New chat'),
      h('button', { class: 'chat-settings-button', 'data-testid': 'open-chat-settings', title: 'This chat’s settings: system prompt, model, thinking, sampling, context', onclick: () => void this.openChatSettings() },
        this.ownSettings() ? 'Chat settings •' : 'Chat settings'),
      h('button', { class: 'model-pill', 'data-testid': 'model-pill', title: 'Change model', onclick: () => this.go('models') }, model));
    if (this.chat) {
      this.header.insertBefore(h('button', { class: 'chat-settings-button', 'data-testid': 'export-chat', title: 'Save this chat as Markdown and JSON (every branch), with its images', onclick: () => void this.exportChat() }, 'Export'), this.header.lastChild);
    }
  }

  private setSidebarHidden(hidden: boolean): void {
    this.el.classList.toggle('sidebar-hidden', hidden);
    // what the user chose for a wide window is kept; a narrow one folds it by itself
    if (!this.el.classList.contains('narrow')) localStorage.setItem(SIDEBAR_KEY, hidden ? '1' : '0');
    if (this.page === 'chat') this.renderHeader();
  }

  /** Below NARROW_WIDTH the sidebar is folded away (shown over the chat
   * when asked for); above it, as the user left it. */
  private fitWidth(): void {
    const narrow = !!this.narrow?.matches;
    this.el.classList.toggle('narrow', narrow);
    this.setSidebarHidden(narrow || localStorage.getItem(SIDEBAR_KEY) === '1');
  }

  /** The gallery's names of the models on disk, for what names a model by id. */
  private async loadModelNames(): Promise<void> {
    try {
      const gallery = await api.listModels();
      this.modelNames = new Map(gallery.local.map((m) => [m.id, m.name]));
      this.updateComposer();
    } catch { /* ids are made readable meanwhile (modelLabel) */ }
  }

  private async loadGlobalSettings(): Promise<void> {
    try { this.globalSettings = (await api.getSettings()).settings; } catch { /* the composer keeps its last state */ }
    this.updateComposer();
  }

  private async openChat(chat: Chat | null): Promise<void> {
    if (this.page === 'settings') this.settings.flush();
    // over a narrow window the sidebar folds away once a chat is chosen
    if (this.el.classList.contains('narrow')) this.setSidebarHidden(true);
    this.page = 'chat';
    this.renderNav();
    if (this.chat && this.chat.id !== chat?.id) this.streams.settle(this.chat.id);
    this.chat = chat;
    this.editing = null;
    // each chat keeps its own unsent text and images
    this.composer.switchTo(chat?.id ?? 'new');
    this.composer.showAnswerFormat(chat?.answer_format ?? null);
    this.updateComposer();
    this.showPage();
    await this.reloadMessages();
    void this.sidebar.refresh();
    this.composer.focus();
  }

  /** The sidebar deleted a chat: its reply (if any) is gone with it. */
  private chatDeleted(chatId: number): void {
    this.streams.abandon(chatId);
    this.composer.forget(chatId);
    if (this.chat?.id === chatId) void this.openChat(null);
  }

  private async reloadMessages(): Promise<void> {
    const chat = this.chat;
    if (!chat) {
      this.messages = [];
      this.chatView.show([], null);
      this.composer.setBusy(false);
      return;
    }
    try {
      this.messages = await api.listMessages(chat.id);
    } catch (e) {
      this.toast(errorText(e));
    }
    if (this.chat?.id !== chat.id) return;
    if (this.streams.get(chat.id)?.finished) this.streams.settle(chat.id);
    this.showMessages();
    await this.refreshChat();
  }

  /** The composer's answer format for the open chat (a new chat if none is open). */
  private async setAnswerFormat(format: AnswerFormat | null): Promise<boolean> {
    try {
      const chat = this.chat ?? await api.createChat();
      const updated = await api.setAnswerFormat(chat.id, format);
      if (!this.chat) this.composer.adopt(updated.id);
      if (!this.chat || this.chat.id === updated.id) this.chat = updated;
      this.composer.showAnswerFormat(updated.answer_format);
      void this.sidebar.refresh();
      return true;
    } catch (e) {
      this.toast(errorText(e));
      return false;
    }
  }

  /** Sends from the composer; with no chat open, the send command makes the
   * chat. A chat set to a model that is not loaded loads it first, then sends.
   * `shown` empties the composer's box: called as the message is drawn in
   * the chat, not if sending fails. */
  private async send(message: Outgoing, shown: () => void, loadedForChat = false): Promise<boolean> {
    if (this.status?.state !== 'ready' && !(this.status?.state === 'unloaded' && this.status.idle_unloaded)) {
      this.toast(this.status?.state === 'loading' ? 'The model is still loading.' : 'Load a model first (Models).');
      return false;
    }
    const chat = this.chat;
    // a first message makes its chat in the same command (one round trip):
    // with the settings chosen for it so far, and only if the message passes
    const settings = chat ? null : this.unsavedSettings;
    let chatId = chat?.id ?? null;
    // the message, its reply's start, the chat list and the box, drawn in one task (sendDraw.ts)
    const draw = new SendDraw(chatId, () => {
      shown();
      this.drawReplyStart(chatId);
      mark('sent-shown');
    });
    this.sendDraw = draw;
    try {
      const begun = chat ? this.streams.begin(chat.id) : this.streams.beginNew((made) => {
        chatId = made.id;
        draw.named(made.id);
        this.unsavedSettings = null;
        // the page opens it, unless another chat was opened meanwhile
        if (!this.chat) {
          this.chat = made;
          this.composer.adopt(made.id);
        }
        // in the sidebar at Send (drawn as the reply starts), not at the answer's first piece
        this.sidebar.add(made);
        mark('chat-created');
      });
      const handler = draw.follow(begun);
      const editing = this.editing;
      let sent;
      try {
        mark('invoke');
        sent = editing && chat ? await api.editAndResend(chat.id, editing.id, message, handler)
          : chat ? await api.send(chat.id, message, handler) : await api.sendInNewChat(settings, message, handler);
      } catch (e) {
        draw.cancel();
        if (chatId !== null) this.streams.abandon(chatId);
        throw e;
      }
      mark('sent');
      const sentIn = sent.user.chat_id;
      this.editing = null;
      if (this.chat?.id === sentIn && !this.streams.isRunning(sentIn)) {
        draw.now();
        void this.reloadMessages(); // a reply so quick it ended before this call did
      } else {
        if (this.chat?.id === sentIn) {
          // the stored message, shown without reading the chat again: after
          // the shown branch, or in place of the message it edits (a new branch)
          const at = editing ? this.messages.findIndex((m) => m.id === editing.id) : -1;
          this.messages = [...(at >= 0 ? this.messages.slice(0, at) : this.messages), sent.user];
        }
        draw.onAnswered();
      }
      // the new title and the chat list wait for the first piece of the
      // answer: read now, they would take the CPU from the prompt's reading
      const titled = !!chat?.title;
      this.whenAnswering(sentIn, () => {
        if (!titled && this.chat?.id === sentIn) void this.refreshChat();
        void this.sidebar.refresh();
      });
      return true;
    } catch (e) {
      const wanted = (chat ? chat.settings : settings)?.model;
      if (!loadedForChat && wanted && (e as { code?: string })?.code === 'CHAT_MODEL_NOT_LOADED') {
        this.toast(`Loading ${modelLabel(wanted, this.modelNames)} for this chat…`);
        try {
          const status = await api.loadModel(wanted);
          this.setStatus(status);
          return await this.send(message, shown, true);
        } catch (err) {
          this.toast(errorText(err));
          return false;
        }
      }
      this.toast(errorText(e));
      return false;
    }
  }

  private async stop(): Promise<void> {
    if (this.chat) await api.stop(this.chat.id).catch((e) => this.toast(errorText(e)));
    this.composer.focus();
  }

  /** A new answer to the shown branch's last question; the old one stays as its sibling. */
  private async regenerate(): Promise<void> {
    const chatId = this.chat?.id;
    if (chatId === undefined) return;
    await this.restartReply((onEvent) => api.regenerate(chatId, null, onEvent), (messages) => {
      // the new answer takes the old one's place once it is stored
      const question = messages.map((m) => m.role).lastIndexOf('user');
      return messages.slice(0, question + 1);
    });
  }

  /** Continue on the last answer, cut at its token limit: the same answer
   * grows in place (the model goes on from where it stopped). */
  private async continueReply(): Promise<void> {
    const chat = this.chat;
    const answer = this.messages[this.messages.length - 1];
    if (!chat || answer?.role !== 'assistant' || this.streams.isRunning(chat.id)) return;
    // the live reply (from the answer's text so far) takes the answer's place
    await this.restartReply((onEvent) => api.continueReply(chat.id, answer.id, onEvent),
      (messages) => messages.filter((m) => m.id !== answer.id));
  }

  private edit(m: Message): void {
    this.editing = m;
    const last = [...this.messages].reverse().find((x) => x.role === 'user');
    this.composer.startEdit(m.content, m.attachments, () => { this.editing = null; }, m !== last);
  }

  /** Shows another version (‹ ›): the chat's shown messages come back from the store. */
  private async switchBranch(messageId: number): Promise<void> {
    const chat = this.chat;
    if (!chat) return;
    try {
      const messages = await api.chooseBranch(chat.id, messageId);
      if (this.chat?.id !== chat.id) return;
      this.messages = messages;
      this.showMessages();
    } catch (e) {
      this.toast(errorText(e));
    }
  }

  private async deleteBranch(m: Message): Promise<void> {
    const chat = this.chat;
    if (!chat) return;
    const what = m.role === 'user' ? 'this version of your message' : 'this answer';
    if (!(await confirmDialog(`Delete ${what}?`, 'It and everything after it in this branch will be deleted. The other versions stay.', 'Delete'))) return;
    try {
      const messages = await api.deleteBranch(chat.id, m.id);
      if (this.chat?.id !== chat.id) return;
      this.messages = messages;
      this.showMessages();
      void this.sidebar.refresh();
    } catch (e) {
      this.toast(errorText(e));
    }
  }

  /** Messages a running turn stored (answers with tool calls, tool
   * results) join the shown branch in order, each under the one before. */
  private mergeStored(stored: Message[]): void {
    for (const m of stored) {
      const at = this.messages.findIndex((x) => x.id === m.id);
      if (at >= 0) this.messages[at] = m;
      else if (this.messages[this.messages.length - 1]?.id === m.parent_id) this.messages.push(m);
    }
  }

  /** The user answered the tool call waiting in the open chat. */
  private async answerToolCall(callId: string, decision: ToolDecision): Promise<void> {
    const chat = this.chat;
    if (!chat) return;
    try {
      if (!(await api.answerToolCall(chat.id, callId, decision))) this.toast('That tool call is no longer waiting.');
    } catch (e) {
      this.toast(errorText(e));
    }
  }

  /** A reply ended: its stored message (from the finished event) joins the
   * shown branch, or replaces its row; the chat is not read again. */
  private replyFinished(message: Message): void {
    const at = this.messages.findIndex((m) => m.id === message.id);
    if (at >= 0) this.messages[at] = message;
    else if (this.messages[this.messages.length - 1]?.id === message.parent_id) this.messages.push(message);
    else return void this.reloadMessages(); // the shown branch moved meanwhile
    this.streams.settle(message.chat_id);
    this.showMessages();
  }

  /** Runs `work` once the chat's reply shows its first piece or ends (at once if it has). */
  private whenAnswering(chatId: number, work: () => void): void {
    const live = this.streams.get(chatId);
    if (live && answerPending(live, this.streams.isRunning(chatId))) this.afterFirstPiece.set(chatId, work);
    else work();
  }

  /** Shows `this.messages` with the open chat's live reply, if any. */
  private showMessages(): void {
    const chat = this.chat;
    const live = chat ? this.streams.get(chat.id) : undefined;
    this.chatView.ownMaxTokens = this.ownSettings()?.max_tokens != null;
    this.chatView.show(this.messages, live && !live.finished ? live : null);
    this.composer.setBusy(!!chat && this.streams.isRunning(chat.id));
  }

  /** The open chat's record again (its title comes from the first message). */
  private async refreshChat(): Promise<void> {
    const chat = this.chat;
    if (!chat) return;
    const fresh = (await api.listChats()).find((c) => c.id === chat.id);
    if (!fresh || this.chat?.id !== fresh.id) return;
    // the same record draws the same header: a reply's first piece is often all that changed
    const changed = recordKey(fresh) !== recordKey(this.chat);
    this.chat = fresh;
    if (changed) { this.renderHeader(); this.updateComposer(); }
  }

  private onKey(e: KeyboardEvent): void {
    const action = shortcutFor(e, this.mac);
    if (!action) return;
    // Esc belongs to dialogs and the rename field first
    if (action === 'stop' && e.key === 'Escape' && (document.querySelector('.modal-overlay') || (e.target as Element | null)?.closest?.('input.rename'))) return;
    if (action === 'stop' && e.key === 'Escape' && !(this.chat && this.streams.isRunning(this.chat.id))) return;
    e.preventDefault();
    this.run(action);
  }

  /** What a shortcut, a native menu item or a button does: one implementation each. */
  run(action: MenuAction): void {
    switch (action) {
      case 'new-chat': void this.openChat(null); break;
      case 'import-chat': void this.importChat(); break;
      case 'export-chat':
        if (this.chat) void this.exportChat();
        else this.toast('Open a chat to export it.');
        break;
      case 'settings': this.go('settings'); break;
      case 'search':
        this.setSidebarHidden(false);
        this.sidebar.focusSearch();
        break;
      case 'stop': void this.stop(); break;
      case 'regenerate':
        if (this.page === 'chat' && this.chat && !this.streams.isRunning(this.chat.id) && this.messages.some((m) => m.role === 'user')) void this.regenerate();
        break;
      case 'copy-last': {
        const last = [...this.messages].reverse().find((m) => m.role === 'assistant' && m.content);
        if (last) void navigator.clipboard?.writeText(last.content).then(() => this.toast('Copied the last answer.'), () => this.toast('Copying failed.'));
        break;
      }
      case 'toggle-sidebar': this.setSidebarHidden(!this.el.classList.contains('sidebar-hidden')); break;
    }
  }

  private async exportChat(): Promise<void> {
    if (!this.chat) return;
    try {
      const destination = await this.platform.pickExportFolder(exportName(this.chat.title));
      if (!destination) return;
      const done = await api.exportChat(this.chat.id, destination);
      this.toast(`Exported to ${done.folder} (chat.md, chat.json and the images).`);
    } catch (e) {
      this.toast(errorText(e));
    }
  }

  private async importChat(): Promise<void> {
    try {
      const path = await this.platform.pickChatFile();
      if (!path) return;
      const chat = await api.importChat(path);
      await this.openChat(chat);
      this.toast(`Imported “${chat.title || 'New chat'}”.`);
    } catch (e) {
      this.toast(errorText(e));
    }
  }

  /** Reads a finished reply out to screen readers (once, not token by token). */
  private announce(m: Message): void {
    const text = m.status === 'error' ? `The reply failed: ${m.error ?? ''}` : m.content;
    const short = text.length > 300 ? `${text.slice(0, 300)}…` : text;
    this.announcer.textContent = `${m.model ?? 'The model'} answered: ${short}`;
  }

  private async pollStats(): Promise<void> {
    // not while a reply's prompt is read (the bar says "starting" meanwhile):
    // the engine would answer between its steps and the bar be drawn again,
    // on the CPU the first token needs (a turn's tools, which may run long, are polled)
    if (this.streams.runningChats().some((id) => {
      const live = this.streams.get(id)!;
      return answerPending(live, true) && live.stored.length === 0 && !live.toolCall;
    })) return;
    try {
      this.stats = await api.engineStats();
    } catch {
      this.stats = null;
    }
    this.renderStatus();
  }

  private renderStatus(): void {
    this.statusBar.render(this.status, this.stats, this.server, this.streams.runningChats().length);
  }

  toast(message: string): void {
    const t = h('div', { class: 'toast', role: 'status', 'data-testid': 'toast' }, message);
    this.toasts.append(t);
    window.setTimeout(() => t.remove(), 6000);
  }
}
