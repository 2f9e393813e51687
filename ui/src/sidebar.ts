// The chat list: newest first, search by title or text, rename in place,
// delete after confirmation, a dot on chats that are generating.
import { api, errorText, type Chat } from './api';
import { clear, h } from './dom';
import { confirmDialog } from './modal';
import { relativeTime } from './format';
import { icon } from './icons';

export interface SidebarHooks {
  select(chat: Chat | null): void;
  selectedId(): number | null;
  isRunning(chatId: number): boolean;
  toast(message: string): void;
}

export class Sidebar {
  readonly el: HTMLElement;
  private list: HTMLElement;
  private search: HTMLInputElement;
  private chats: Chat[] = [];
  private renaming: number | null = null;

  constructor(private hooks: SidebarHooks) {
    this.search = h('input', { type: 'search', placeholder: 'Search chats', 'aria-label': 'Search chats', 'data-testid': 'chat-search' });
    let timer: number | undefined;
    this.search.addEventListener('input', () => { clearTimeout(timer); timer = window.setTimeout(() => void this.refresh(), 150); });
    this.list = h('nav', { class: 'chat-list', 'data-testid': 'chat-list' });
    this.el = h('div', { class: 'sidebar-chats' },
      h('button', { class: 'new-chat primary', 'data-testid': 'new-chat', onclick: () => this.hooks.select(null) }, icon('plus'), 'New chat'),
      this.search,
      this.list);
  }

  async refresh(): Promise<void> {
    try {
      this.chats = await api.listChats(this.search.value);
    } catch (e) {
      this.hooks.toast(errorText(e));
    }
    this.render();
  }

  private render(): void {
    clear(this.list);
    if (this.chats.length === 0) {
      this.list.append(h('p', { class: 'empty-list' }, this.search.value ? 'No chat matches.' : 'No chats yet.'));
      return;
    }
    for (const chat of this.chats) this.list.append(this.item(chat));
  }

  private item(chat: Chat): HTMLElement {
    const selected = chat.id === this.hooks.selectedId();
    const title = chat.title || 'New chat';
    if (this.renaming === chat.id) {
      const input = h('input', { class: 'rename', value: title, 'aria-label': 'Chat title', 'data-testid': 'rename-input' });
      const finish = async (save: boolean) => {
        if (this.renaming !== chat.id) return;
        this.renaming = null;
        const next = input.value.trim();
        if (save && next && next !== chat.title) {
          try { await api.renameChat(chat.id, next); } catch (e) { this.hooks.toast(errorText(e)); }
        }
        await this.refresh();
      };
      input.addEventListener('keydown', (e) => {
        if (e.key === 'Enter') void finish(true);
        if (e.key === 'Escape') void finish(false);
      });
      input.addEventListener('blur', () => void finish(true));
      queueMicrotask(() => { input.focus(); input.select(); });
      return h('div', { class: 'chat-item selected' }, input);
    }
    const running = this.hooks.isRunning(chat.id);
    return h('div', {
      class: `chat-item${selected ? ' selected' : ''}`, 'data-chat-id': chat.id, 'data-testid': 'chat-item',
      onclick: () => this.hooks.select(chat),
      ondblclick: () => { this.renaming = chat.id; this.render(); },
    },
      h('div', { class: 'chat-item-main' },
        h('span', { class: 'chat-title' }, title),
        h('span', { class: 'chat-time' }, running ? 'answering…' : relativeTime(chat.updated_at))),
      running ? h('span', { class: 'busy-dot', title: 'Answering' }) : null,
      h('div', { class: 'chat-actions' },
        h('button', { class: 'icon', title: 'Rename', 'aria-label': 'Rename', 'data-testid': 'rename-chat',
          onclick: (e: Event) => { e.stopPropagation(); this.renaming = chat.id; this.render(); } }, icon('pencil', 14)),
        h('button', { class: 'icon', title: 'Delete', 'aria-label': 'Delete', 'data-testid': 'delete-chat',
          onclick: (e: Event) => { e.stopPropagation(); void this.remove(chat); } }, icon('trash', 14))));
  }

  private async remove(chat: Chat): Promise<void> {
    const ok = await confirmDialog('Delete this chat?', `“${chat.title || 'New chat'}” and its images will be deleted. This cannot be undone.`, 'Delete');
    if (!ok) return;
    try {
      await api.deleteChat(chat.id);
      if (this.hooks.selectedId() === chat.id) this.hooks.select(null);
    } catch (e) {
      this.hooks.toast(errorText(e));
    }
    await this.refresh();
  }
}
