// The window: sidebar (chats + navigation), the page (chat, models or
// settings) and the status bar; wires replies, events and image drops.
import { api, errorText, events, type Chat, type EngineStatsView, type EngineStatus, type Message, type Outgoing, type ServerStatus } from './api';
import { ChatView } from './chatView';
import { Composer } from './composer';
import { clear, h } from './dom';
import { icon } from './icons';
import { ModelsView } from './modelsView';
import { SettingsPage } from './settingsView';
import { Sidebar } from './sidebar';
import { StatusBar } from './statusBar';
import { Streams } from './streams';

export interface Platform {
  pickFiles(): Promise<string[]>;
  onDrop(handlers: { over(on: boolean): void; drop(paths: string[]): void }): void;
}

type Page = 'chat' | 'models' | 'settings';

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
  private settings: SettingsPage;
  private statusBar = new StatusBar();
  private main: HTMLElement;
  private header: HTMLElement;
  private nav: HTMLElement;
  private toasts = h('div', { class: 'toasts', 'aria-live': 'polite' });
  private dropOverlay = h('div', { class: 'drop-overlay', hidden: true }, h('div', {}, 'Drop images to attach'));

  constructor(private platform: Platform) {
    const toast = (m: string) => this.toast(m);
    this.sidebar = new Sidebar({
      select: (c) => void this.openChat(c),
      selectedId: () => (this.page === 'chat' ? this.chat?.id ?? null : null),
      isRunning: (id) => this.streams.isRunning(id),
      toast,
    });
    this.chatView = new ChatView({ regenerate: () => void this.regenerate(), edit: (m) => this.edit(m) });
    this.composer = new Composer({ send: (m) => this.send(m), stop: () => void this.stop(), pickFiles: () => platform.pickFiles(), toast });
    this.models = new ModelsView(toast);
    this.settings = new SettingsPage(toast);
    this.header = h('header', { class: 'chat-header' });
    this.main = h('main', { class: 'main' });
    this.nav = h('div', { class: 'sidebar-nav' });
    this.el = h('div', { class: 'app' },
      h('aside', { class: 'sidebar' }, this.sidebar.el, this.nav),
      this.main,
      this.statusBar.el,
      this.toasts,
      this.dropOverlay);
    this.streams.subscribe((chatId, live) => {
      if (this.page === 'chat' && this.chat?.id === chatId) {
        if (live.finished) void this.reloadMessages();
        else this.chatView.updateLive(live);
        this.composer.setBusy(this.streams.isRunning(chatId));
      }
    });
  }

  async start(): Promise<void> {
    this.renderNav();
    this.showPage();
    await this.reloadMessages();
    await events.engineStatus((s) => { this.setStatus(s); this.renderStatus(); this.renderHeader(); });
    await events.downloadProgress((p) => this.models.onProgress(p));
    await events.downloadDone((d) => {
      this.models.onDone(d.id);
      if (d.ok) this.toast(`Downloaded ${d.id}`);
      else if (!d.cancelled && d.error) this.toast(`Download failed: ${d.error.message}`);
    });
    await events.serverStatus((s) => { this.server = s; this.settings.setServer(s); this.renderStatus(); });
    await events.chatUpdated(() => void this.sidebar.refresh());
    this.platform.onDrop({
      over: (on) => { this.dropOverlay.hidden = !on; },
      drop: (paths) => { this.dropOverlay.hidden = true; if (this.page !== 'chat') this.go('chat'); void this.composer.addPaths(paths); },
    });
    this.setStatus(await api.engineStatus());
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
  }

  private setStatus(s: EngineStatus): void {
    this.status = s;
    this.models.setStatus(s);
    this.chatView.setModelVision(s.model ? s.model.vision : null);
  }

  private renderNav(): void {
    clear(this.nav);
    const item = (page: Page, glyph: 'chat' | 'models' | 'settings', label: string) => h('button', {
      class: `nav-item${this.page === page ? ' selected' : ''}`, 'data-testid': `nav-${page}`, onclick: () => this.go(page),
    }, icon(glyph), label);
    this.nav.append(item('chat', 'chat', 'Chats'), item('models', 'models', 'Models'), item('settings', 'settings', 'Settings'));
  }

  private go(page: Page): void {
    this.page = page;
    this.renderNav();
    this.showPage();
    if (page === 'models') void this.models.refresh();
    if (page === 'settings') void this.settings.refresh();
    void this.sidebar.refresh();
  }

  private showPage(): void {
    clear(this.main);
    if (this.page === 'chat') {
      this.renderHeader();
      this.main.append(this.header, this.chatView.el, this.composer.el);
    } else if (this.page === 'models') {
      this.main.append(this.models.el);
    } else {
      this.main.append(this.settings.el);
    }
  }

  private renderHeader(): void {
    clear(this.header);
    const model = this.status?.state === 'loading' ? `Loading ${this.status.loading}…` : this.status?.model?.name ?? 'No model loaded';
    this.header.append(
      h('div', { class: 'chat-title-main', 'data-testid': 'chat-title' }, this.chat?.title || 'New chat'),
      h('button', { class: 'model-pill', title: 'Change model', onclick: () => this.go('models') }, model));
  }

  private async openChat(chat: Chat | null): Promise<void> {
    this.page = 'chat';
    this.renderNav();
    if (this.chat && this.chat.id !== chat?.id) this.streams.settle(this.chat.id);
    this.chat = chat;
    this.editing = null;
    this.composer.endEdit();
    this.showPage();
    await this.reloadMessages();
    void this.sidebar.refresh();
    this.composer.focus();
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
    const live = this.streams.get(chat.id);
    if (live?.finished) this.streams.settle(chat.id);
    this.chatView.show(this.messages, live && !live.finished ? live : null);
    this.composer.setBusy(this.streams.isRunning(chat.id));
    const fresh = (await api.listChats()).find((c) => c.id === chat.id);
    if (fresh && this.chat?.id === fresh.id) { this.chat = fresh; this.renderHeader(); }
  }

  /** Sends from the composer: creates the chat first when none is open. */
  private async send(message: Outgoing): Promise<boolean> {
    if (this.status?.state !== 'ready') {
      this.toast(this.status?.state === 'loading' ? 'The model is still loading.' : 'Load a model first (Models).');
      return false;
    }
    let chat = this.chat;
    try {
      if (!chat) {
        chat = await api.createChat();
        this.chat = chat;
      }
      const chatId = chat.id;
      const handler = this.streams.begin(chatId);
      const editing = this.editing;
      this.editing = null;
      try {
        if (editing) await api.editAndResend(chatId, editing.id, message, handler);
        else await api.send(chatId, message, handler);
      } catch (e) {
        this.streams.abandon(chatId);
        throw e;
      }
      await this.reloadMessages();
      void this.sidebar.refresh();
      return true;
    } catch (e) {
      this.toast(errorText(e));
      return false;
    }
  }

  private async stop(): Promise<void> {
    if (this.chat) await api.stop(this.chat.id).catch((e) => this.toast(errorText(e)));
  }

  private async regenerate(): Promise<void> {
    const chat = this.chat;
    if (!chat) return;
    const handler = this.streams.begin(chat.id);
    try {
      await api.regenerate(chat.id, handler);
    } catch (e) {
      this.streams.abandon(chat.id);
      this.toast(errorText(e));
    }
    await this.reloadMessages();
  }

  private edit(m: Message): void {
    this.editing = m;
    this.composer.startEdit(m.content, m.attachments, () => { this.editing = null; });
  }

  private async pollStats(): Promise<void> {
    try {
      this.stats = await api.engineStats();
    } catch {
      this.stats = null;
    }
    this.renderStatus();
  }

  private renderStatus(): void {
    this.statusBar.render(this.status, this.stats, this.server);
  }

  toast(message: string): void {
    const t = h('div', { class: 'toast', role: 'status', 'data-testid': 'toast' }, message);
    this.toasts.append(t);
    window.setTimeout(() => t.remove(), 6000);
  }
}
