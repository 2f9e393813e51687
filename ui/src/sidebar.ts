// The chat list: by last message, newest first, search by title or text,
// rename in place, delete after confirmation, a dot on chats that are
// generating. The list is one Tab stop (a roving tabindex: the open chat,
// else the first): arrow keys, Home and End move between chats, Enter opens
// one, F2 renames it and Delete deletes it; the rename and delete buttons
// show on hover and on keyboard focus, for the mouse (each chat used to
// take three Tab stops).
import { api, errorText, type Chat, type Preset } from './api';
import { h } from './dom';
import { KeptNodes, placeChildren, recordKey } from './keptNodes';
import { confirmDialog } from './modal';
import { relativeTime } from './format';
import { icon } from './icons';
import { onMac, shortcutLabel } from './shortcuts';

export interface SidebarHooks {
  select(chat: Chat | null): void;
  selectedId(): number | null;
  isRunning(chatId: number): boolean;
  /** A chat was deleted (its reply, if one was running, went with it). */
  deleted(chatId: number): void;
  /** Asks for an exported chat.json and adds it as a chat. */
  importChat(): void;
  /** Starts a new chat from a preset (its settings and answer format). */
  startFromPreset(presetId: number): void;
  toast(message: string): void;
}

export class Sidebar {
  readonly el: HTMLElement;
  private list: HTMLElement;
  private search: HTMLInputElement;
  private chats: Chat[] = [];
  private presets: HTMLSelectElement;
  private renaming: number | null = null;
  /** The chats' elements, kept while what they show is the same: a chat that
   * starts answering (or a new one at the top) is all a redraw builds. */
  private kept = new KeptNodes();
  /** The presets the menu lists (it is built again only when they change). */
  private presetsShown = '';

  constructor(private hooks: SidebarHooks) {
    this.search = h('input', { type: 'search', placeholder: `Search chats (${shortcutLabel('search', onMac())})`, title: 'Finds chats by their title or any word said in them', 'aria-label': 'Search chats', 'data-testid': 'chat-search' });
    let timer: number | undefined;
    this.search.addEventListener('input', () => { clearTimeout(timer); timer = window.setTimeout(() => void this.refresh(), 150); });
    this.list = h('nav', { class: 'chat-list', 'aria-label': 'Chats', 'data-testid': 'chat-list' });
    this.presets = h('select', { class: 'new-from-preset', 'aria-label': 'New chat from a preset', 'data-testid': 'new-from-preset', hidden: true });
    this.presets.addEventListener('change', () => {
      const id = Number(this.presets.value);
      this.presets.value = '';
      if (id) this.hooks.startFromPreset(id);
    });
    this.el = h('div', { class: 'sidebar-chats' },
      h('button', { class: 'new-chat primary', 'data-testid': 'new-chat', title: `New chat (${shortcutLabel('new-chat', onMac())})`, onclick: () => this.hooks.select(null) }, icon('plus'), 'New chat'),
      this.presets,
      this.search,
      this.list,
      h('button', { class: 'link import-chat', 'data-testid': 'import-chat', title: 'Add a chat exported from this app (its chat.json)', onclick: () => this.hooks.importChat() }, 'Import a chat…'));
  }

  async refresh(): Promise<void> {
    try {
      this.chats = await api.listChats(this.search.value);
      this.renderPresets((await api.listPresets()) ?? []);
    } catch (e) {
      this.hooks.toast(errorText(e));
    }
    this.render();
  }

  private renderPresets(presets: Preset[]): void {
    const shown = JSON.stringify(presets);
    if (shown === this.presetsShown) return;
    this.presetsShown = shown;
    this.presets.replaceChildren(h('option', { value: '' }, 'New chat from a preset…'),
      ...presets.map((p) => h('option', { value: p.id }, p.name)));
    this.presets.hidden = presets.length === 0;
  }

  /** Puts a chat just made (by its first message) at the top of the list,
   * from its record: the list is not read again for it, so the sidebar shows
   * it at Send without a read of every chat while the prompt is being read.
   * It is drawn with the next redraw (the reply's start redraws the list). */
  add(chat: Chat): void {
    if (this.search.value) return; // a search shows what matches, read again later
    this.chats = [chat, ...this.chats.filter((c) => c.id !== chat.id)];
  }

  /** Redraws the list as it is (a chat started or stopped answering). */
  redraw(): void {
    if (this.renaming === null) this.render();
  }

  focusSearch(): void {
    this.search.focus();
    this.search.select();
  }

  /** How many chat elements were built, not kept, so far (tests count them). */
  get built(): number {
    return this.kept.built;
  }

  private render(): void {
    if (this.chats.length === 0) {
      this.kept.sweep();
      placeChildren(this.list, [h('p', { class: 'empty-list' }, this.search.value ? 'No chat matches.' : 'No chats yet.')]);
      return;
    }
    placeChildren(this.list, this.chats.map((chat) => this.item(chat)));
    this.kept.sweep();
    // one Tab stop for the list: the open chat, else the first
    const opens = [...this.list.querySelectorAll<HTMLButtonElement>('.chat-open')];
    const current = opens.find((b) => b.getAttribute('aria-current') === 'page') ?? opens[0];
    // written only where it changes (a button's tabIndex reads 0 before any is written)
    for (const b of opens) {
      const tab = b === current ? '0' : '-1';
      if (b.getAttribute('tabindex') !== tab) b.setAttribute('tabindex', tab);
    }
  }

  /** Arrow keys, Home and End move the focus (and the list's Tab stop) between chats. */
  private moveFocus(from: HTMLButtonElement, key: string): boolean {
    const opens = [...this.list.querySelectorAll<HTMLButtonElement>('.chat-open')];
    const at = opens.indexOf(from);
    const to = key === 'ArrowDown' ? opens[Math.min(at + 1, opens.length - 1)]
      : key === 'ArrowUp' ? opens[Math.max(at - 1, 0)]
        : key === 'Home' ? opens[0] : key === 'End' ? opens[opens.length - 1] : undefined;
    if (!to) return false;
    for (const b of opens) b.tabIndex = b === to ? 0 : -1;
    to.focus();
    return true;
  }

  /** A chat's element: kept while the chat, its being open or answering, and its time as words are the same. */
  private item(chat: Chat): HTMLElement {
    const selected = chat.id === this.hooks.selectedId();
    const running = this.hooks.isRunning(chat.id);
    // the field being typed in is drawn anew with each redraw, as it always was
    if (this.renaming === chat.id) return this.buildItem(chat, selected, running);
    const key = `${recordKey(chat)}|${selected}|${running}|${running ? '' : relativeTime(chat.updated_at)}`;
    return this.kept.get(`c${chat.id}`, key, () => this.buildItem(chat, selected, running));
  }

  private buildItem(chat: Chat, selected: boolean, running: boolean): HTMLElement {
    const title = chat.title || 'New chat';
    if (this.renaming === chat.id) {
      const input = h('input', { class: 'rename', value: title, 'aria-label': 'Chat title', 'data-testid': 'rename-input' });
      const finish = async (save: boolean, refocus: boolean) => {
        if (this.renaming !== chat.id) return;
        this.renaming = null;
        const next = input.value.trim();
        if (save && next && next !== chat.title) {
          try { await api.renameChat(chat.id, next); } catch (e) { this.hooks.toast(errorText(e)); }
        }
        await this.refresh();
        // keyboard users stay where they were
        if (refocus) this.list.querySelector<HTMLButtonElement>(`[data-chat-id="${chat.id}"] .chat-open`)?.focus();
      };
      input.addEventListener('keydown', (e) => {
        if (e.key === 'Enter') void finish(true, true);
        if (e.key === 'Escape') void finish(false, true);
      });
      input.addEventListener('blur', () => void finish(true, false));
      queueMicrotask(() => { input.focus(); input.select(); });
      return h('div', { class: 'chat-item selected' }, input);
    }
    const startRename = (e: Event) => { e.stopPropagation(); this.renaming = chat.id; this.render(); };
    return h('div', { class: `chat-item${selected ? ' selected' : ''}${running ? ' running' : ''}`, 'data-chat-id': chat.id, 'data-testid': 'chat-item' },
      h('button', {
        class: 'chat-open', 'data-testid': 'chat-open', 'aria-current': selected ? 'page' : undefined,
        title: `${title} (F2 renames, Delete deletes)`, 'aria-keyshortcuts': 'F2 Delete',
        onclick: () => this.hooks.select(chat),
        ondblclick: startRename,
        onkeydown: (e: Event) => {
          const k = (e as KeyboardEvent).key;
          if (k === 'F2') startRename(e);
          if (k === 'Delete') { e.stopPropagation(); void this.remove(chat); }
          if (this.moveFocus(e.currentTarget as HTMLButtonElement, k)) e.preventDefault();
        },
      },
      h('span', { class: 'chat-title' }, title),
      h('span', { class: 'chat-time', 'data-testid': 'chat-time' }, running ? 'answering…' : relativeTime(chat.updated_at))),
      running ? h('span', { class: 'busy-dot', title: 'Answering', 'aria-hidden': 'true' }) : null,
      h('div', { class: 'chat-actions' },
        // not Tab stops: F2 and Delete on the chat do the same from the keyboard
        h('button', { class: 'icon', tabindex: -1, title: 'Rename (F2)', 'aria-label': `Rename “${title}”`, 'data-testid': 'rename-chat', onclick: startRename }, icon('pencil', 14)),
        h('button', { class: 'icon', tabindex: -1, title: 'Delete (Delete key)', 'aria-label': `Delete “${title}”`, 'data-testid': 'delete-chat',
          onclick: (e: Event) => { e.stopPropagation(); void this.remove(chat); } }, icon('trash', 14))));
  }

  private async remove(chat: Chat): Promise<void> {
    const ok = await confirmDialog('Delete this chat?', `“${chat.title || 'New chat'}” and its images will be deleted. This cannot be undone.`, 'Delete');
    if (!ok) return;
    try {
      await api.deleteChat(chat.id);
      this.hooks.deleted(chat.id);
    } catch (e) {
      this.hooks.toast(errorText(e));
    }
    await this.refresh();
  }
}
