// One chat: its messages (Markdown answers, a collapsible "Thinking" block,
// images, stats on hover, errors shown plainly), the live reply as it
// streams, and the actions on the last turn (regenerate, edit and resend).
import { attachmentUrl, type Message, type MessageStats } from './api';
import { clear, h } from './dom';
import { bytes } from './format';
import { setMarkdown } from './markdown';
import type { LiveReply } from './streams';

export interface ChatViewHooks {
  regenerate(): void;
  edit(message: Message): void;
}

/** "42 tokens · 31.5 tok/s · TTFT 120 ms" for the hover card. */
export function statsLine(stats: MessageStats | null | undefined): string {
  if (!stats) return '';
  const parts: string[] = [];
  if (stats.completion_tokens != null) parts.push(`${stats.completion_tokens} tokens`);
  if (stats.tokens_per_second != null) parts.push(`${stats.tokens_per_second.toFixed(1)} tok/s`);
  if (stats.ttft_ms != null) parts.push(`TTFT ${Math.round(stats.ttft_ms)} ms`);
  if (stats.prompt_tokens != null) {
    const cached = stats.cached_prompt_tokens ? ` (${stats.cached_prompt_tokens} cached)` : '';
    parts.push(`prompt ${stats.prompt_tokens} tokens${cached}`);
  }
  if (stats.kv_cache_bytes) parts.push(`KV ${bytes(stats.kv_cache_bytes)}`);
  if (stats.finish_reason) parts.push(`ended: ${stats.finish_reason}`);
  return parts.join(' · ');
}

/** What the view knows about the conversation when it explains a failure. */
export interface ErrorContext {
  /** The loaded model can see images: true, false, or null when no model is loaded. */
  modelSeesImages: boolean | null;
  /** A user message before the failed reply carries an image. */
  imagesInChat: boolean;
}

/** A failed reply in words people use, chosen by the error's code (the
 * engine's stable code, kept with the reply), never by its wording. */
export function friendlyError(code: string | null | undefined, message: string, ctx: ErrorContext): string {
  switch (code) {
    case 'INVALID_REQUEST':
      // the engine refuses images for a model without a vision tower with a
      // plain INVALID_REQUEST: only the model tells this case from others
      if (ctx.imagesInChat && ctx.modelSeesImages === false) {
        return `This model cannot see images. Pick a vision model in Models, or send text only. (${message})`;
      }
      return message;
    case 'INVALID_IMAGE':
      return `This image could not be read. Try another file (PNG, JPEG, WebP or GIF). (${message})`;
    case 'CONTEXT_LENGTH_EXCEEDED':
      return `The conversation is longer than this model's context. Start a new chat or raise Max context in Settings. (${message})`;
    case 'ENGINE_STOPPED':
      return 'The model was unloaded or restarted before the answer was finished.';
    default:
      return message;
  }
}

export class ChatView {
  readonly el: HTMLElement;
  private list: HTMLElement;
  private messages: Message[] = [];
  private live: LiveReply | null = null;
  private liveEl: HTMLElement | null = null;
  private frame = 0;
  private busy = false;
  private modelSeesImages: boolean | null = null;

  constructor(private hooks: ChatViewHooks) {
    this.list = h('div', { class: 'messages', 'data-testid': 'messages' });
    this.el = h('div', { class: 'chat-scroll' }, this.list);
  }

  show(messages: Message[], live: LiveReply | null): void {
    this.messages = messages;
    this.live = live;
    this.busy = !!live && !live.finished;
    this.render();
    this.scrollToEnd();
  }

  /** The loaded model changed (or its vision is known now): failed replies
   * are explained with it. */
  setModelVision(sees: boolean | null): void {
    if (sees === this.modelSeesImages) return;
    this.modelSeesImages = sees;
    if (this.messages.length) this.render();
  }

  /** A live reply changed: redraw just its bubble, once per frame. */
  updateLive(live: LiveReply): void {
    this.live = live;
    if (this.frame) return;
    this.frame = requestAnimationFrame(() => {
      this.frame = 0;
      if (!this.live) return;
      const nearEnd = this.el.scrollHeight - this.el.scrollTop - this.el.clientHeight < 80;
      const fresh = this.assistant(this.liveMessage(this.live), true);
      if (this.liveEl?.isConnected) this.liveEl.replaceWith(fresh);
      else this.list.append(fresh);
      this.liveEl = fresh;
      if (nearEnd) this.scrollToEnd();
    });
  }

  private liveMessage(live: LiveReply): Message {
    return {
      id: live.replyId ?? -1, chat_id: live.chatId, role: 'assistant', content: live.content,
      reasoning: live.reasoning || null, attachments: [], stats: null, model: live.model,
      status: live.error ? 'error' : 'streaming', error: live.error?.message ?? null, error_code: live.error?.code ?? null, created_at: Date.now(), updated_at: Date.now(),
    };
  }

  private render(): void {
    clear(this.list);
    this.liveEl = null;
    const liveId = this.live && !this.live.finished ? this.live.replyId : null;
    const lastUser = [...this.messages].reverse().find((m) => m.role === 'user');
    const lastAssistant = this.messages[this.messages.length - 1]?.role === 'assistant' ? this.messages[this.messages.length - 1] : undefined;
    for (const m of this.messages) {
      if (m.role === 'user') this.list.append(this.user(m, m === lastUser && !this.busy));
      else if (m.role === 'assistant' && m.id !== liveId) this.list.append(this.assistant(m, false, m === lastAssistant && !this.busy));
    }
    if (this.live && !this.live.finished) {
      this.liveEl = this.assistant(this.liveMessage(this.live), true);
      this.list.append(this.liveEl);
    }
    if (this.messages.length === 0 && !this.live) {
      this.list.append(h('div', { class: 'empty-chat' },
        h('h1', {}, 'What can I help with?'),
        h('p', {}, 'Drop images anywhere on the window, paste them, or use the picture button.')));
    }
  }

  private user(m: Message, editable: boolean): HTMLElement {
    return h('div', { class: 'msg user', 'data-testid': 'msg-user', 'data-id': m.id },
      m.attachments.length ? h('div', { class: 'msg-images' },
        ...m.attachments.map((a) => h('img', { src: attachmentUrl(a.sha256), alt: 'Image', 'data-testid': 'msg-image' }))) : null,
      m.content ? h('div', { class: 'bubble' }, m.content) : null,
      // the actions row is always there, so the layout does not jump when a reply ends
      h('div', { class: 'msg-actions' },
        editable ? h('button', { class: 'link', 'data-testid': 'edit-message', onclick: () => this.hooks.edit(m) }, 'Edit') : null));
  }

  private assistant(m: Message, streaming: boolean, last = false): HTMLElement {
    const body = h('div', { class: 'answer markdown', 'data-testid': 'answer' });
    setMarkdown(body, m.content);
    let thinking: HTMLElement | null = null;
    if (m.reasoning) {
      const thinkingNow = streaming && !m.content;
      const text = h('div', { class: 'thinking-text' }, m.reasoning);
      thinking = h('details', { class: 'thinking', 'data-testid': 'thinking', open: thinkingNow },
        h('summary', {}, thinkingNow ? 'Thinking…' : 'Thought'), text);
    }
    const status = m.status === 'interrupted' ? h('div', { class: 'note' }, 'Stopped before the end.')
      : m.status === 'error' ? h('div', { class: 'error-note', 'data-testid': 'reply-error', 'data-code': m.error_code ?? '' },
        friendlyError(m.error_code, m.error ?? 'The reply failed.', this.errorContext(m)))
        : null;
    const stats = statsLine(m.stats);
    const copy = h('button', { class: 'link', onclick: () => void navigator.clipboard?.writeText(m.content) }, 'Copy');
    return h('div', { class: `msg assistant${streaming ? ' streaming' : ''}`, 'data-testid': streaming ? 'msg-live' : 'msg-assistant', 'data-id': m.id },
      h('div', { class: 'msg-model' }, m.model ?? ''),
      thinking,
      body,
      streaming && !m.content && !m.reasoning && !m.error ? h('div', { class: 'typing', 'data-testid': 'typing' }, h('span'), h('span'), h('span')) : null,
      status,
      !streaming ? h('div', { class: 'msg-actions' },
        copy,
        last ? h('button', { class: 'link', 'data-testid': 'regenerate', onclick: () => this.hooks.regenerate() }, 'Regenerate') : null,
        stats ? h('span', { class: 'stats', 'data-testid': 'stats' }, stats) : null) : null);
  }

  private errorContext(reply: Message): ErrorContext {
    // a live reply is not in the list yet: every message before it counts
    const end = this.messages.findIndex((m) => m.id === reply.id);
    const before = end < 0 ? this.messages : this.messages.slice(0, end);
    return {
      modelSeesImages: this.modelSeesImages,
      imagesInChat: before.some((m) => m.role === 'user' && m.attachments.length > 0),
    };
  }

  private scrollToEnd(): void {
    this.el.scrollTop = this.el.scrollHeight;
  }
}
