// One chat: the messages of its shown branch (Markdown answers, a
// collapsible "Thinking" block, images, stats, errors shown plainly), the
// live reply as it streams (rendered block by block, at most 10 times a
// second), the ‹ 2/3 › switcher on messages with other versions, Edit on
// every message you sent (a new branch), the actions on the last turn
// (regenerate, continue a reply cut at the token limit), a "jump to latest"
// button when scrolled up, and an empty chat that says what to do. Drawn
// again, it keeps the elements of messages that did not change (keptNodes.ts).
import { copyWithFeedback } from './copyFeedback';
import { openImageViewer } from './imageViewer';
import { attachmentUrl, type LoadedModel, type Message, type MessageStats, type ToolCallRecord, type ToolDecision } from './api';
import { documentChip, isDocument } from './documentChip';
import { h } from './dom';
import { bytes } from './format';
import { branchSwitcher } from './branches';
import { formattedJsonAnswer } from './answerFormat';
import { MarkdownBlocks, setMarkdown } from './markdown';
import { startersFor } from './starters';
import type { LiveReply } from './streams';
import { KeptNodes, placeChildren, recordKey } from './keptNodes';
import { mark, timed } from './timeline';
import type { DocumentPages } from './bindings/DocumentPages';

export interface ChatViewHooks {
  regenerate(): void;
  /** Edits any message you sent: sending the edit starts a new branch beside it. */
  edit(message: Message): void;
  /** Shows the branch through this message (a sibling of one shown). */
  switchBranch(messageId: number): void;
  /** Deletes this message's branch (it and everything after it). */
  deleteBranch(message: Message): void;
  /** Asks the model to go on with a reply cut at the token limit. */
  continueReply(): void;
  /** Sends a starter prompt of the empty chat. */
  sendStarter(text: string): void;
  /** Approve / Deny / Always allow the tool call waiting in this chat. */
  answerToolCall?(callId: string, decision: ToolDecision): void;
  openModels(): void;
}

/** What the chat knows about the engine: nothing loaded, loading, or the model. */
/** A model to suggest: its name, a detail ("fits, ≈ 3.0 GB download") and
 * its button ("Download", "Load"). */
export interface Suggestion { name: string; detail: string; action: string; use: () => void }

export type ModelState = { state: 'unloaded' } | { state: 'loading'; name: string } | { state: 'ready'; model: LoadedModel };

/** A streaming reply is redrawn at most this often (ms): 10 times a second.
 * Each redraw is a frame of the whole window, which a machine without a GPU
 * composites in software (~25 ms of CPU a frame under Xvfb): a model faster
 * than 10 tokens a second shows a few tokens a frame, and keeps the CPU. */
export const LIVE_REDRAW_MS = 100;

/** How long a live reply's next redraw waits (ms): LIVE_REDRAW_MS after the
 * last one, except the first text of the answer (or its thinking), which is
 * drawn at once: the throttle would otherwise add up to LIVE_REDRAW_MS to
 * the time to first token, as the "started" event's draw comes just before it. */
export function liveRedrawDelay(lastDraw: number, now: number, firstText: boolean): number {
  return firstText ? 0 : Math.max(0, lastDraw + LIVE_REDRAW_MS - now);
}

/** Whether a live reply has text to show (answer or thinking). */
const hasText = (live: LiveReply) => !!(live.content || live.reasoning);

/** "42 tokens · 31.5 tok/s · TTFT 120 ms" for the hover card. */
export function statsLine(stats: MessageStats | null | undefined): string {
  if (!stats) return '';
  const parts: string[] = [];
  if (stats.completion_tokens != null) parts.push(`${stats.completion_tokens} tokens`);
  if (stats.tokens_per_second != null) parts.push(`${stats.tokens_per_second.toFixed(1)} tok/s`);
  if (stats.ttft_ms != null) parts.push(`TTFT ${Math.round(stats.ttft_ms)} ms`);
  if (stats.prompt_tokens != null) {
    const fromDisk = stats.cached_from_disk_tokens ? `, reused ${stats.cached_from_disk_tokens} tokens from disk` : '';
    const cached = stats.cached_prompt_tokens ? ` (${stats.cached_prompt_tokens} cached${fromDisk})` : '';
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
      return `The conversation is longer than this model's context. Start a new chat, raise Max context in Settings, or let this chat leave out older messages (Chat settings). (${message})`;
    case 'ENGINE_STOPPED':
      return 'The model was unloaded or restarted before the answer was finished.';
    default:
      return message;
  }
}

export class ChatView {
  readonly el: HTMLElement;
  private scroller: HTMLElement;
  private list: HTMLElement;
  private jump: HTMLButtonElement;
  private messages: Message[] = [];
  private live: LiveReply | null = null;
  private liveBubble: LiveBubble | null = null;
  private timer = 0;
  private lastDraw = 0;
  /** The live bubble shows text already (the next text is not its first). */
  private drewText = false;
  private busy = false;
  private model: ModelState = { state: 'unloaded' };
  /** The elements drawn for the messages, kept while what they show is the same. */
  private kept = new KeptNodes();
  /** Which live reply the live bubble shows, and which of its turn's answers (its stored count). */
  private bubbleFor: { live: LiveReply; answer: number } | null = null;
  private bubblesBuilt = 0;

  constructor(private hooks: ChatViewHooks) {
    this.list = h('div', { class: 'messages', 'data-testid': 'messages' });
    this.scroller = h('div', { class: 'chat-scroll', 'data-testid': 'chat-scroll' }, this.list);
    this.jump = h('button', { class: 'jump-latest', hidden: true, 'data-testid': 'jump-latest', onclick: () => this.scrollToEnd(true) }, 'Jump to latest ↓');
    this.scroller.addEventListener('scroll', () => this.updateJump());
    this.el = h('div', { class: 'chat-pane' }, this.scroller, this.jump);
  }

  /** The open chat sets its own answer length (Chat settings), so a cut
   * answer names that setting, not the global one. */
  ownMaxTokens = false;

  show(messages: Message[], live: LiveReply | null): void {
    this.messages = messages;
    this.live = live;
    this.busy = !!live && !live.finished;
    timed('render', () => {
      this.place();
      this.scrollToEnd();
    });
  }

  /** How many message elements (and live bubbles) were built, not kept, so far (tests count them). */
  get built(): number {
    return this.kept.built + this.bubblesBuilt;
  }

  /** The model a first launch with none loaded suggests (the best fit of
   * the catalog, see recommend.ts), with what its button does. */
  private suggestion: Suggestion | null = null;

  setSuggestion(s: Suggestion | null): void {
    const changed = JSON.stringify(s) !== JSON.stringify(this.suggestion) || s?.use !== this.suggestion?.use;
    this.suggestion = s;
    if (changed && this.model.state === 'unloaded') this.render();
  }

  /** The engine's model changed: the empty chat, the note on images and
   * failed replies are explained with it. */
  setModel(model: ModelState): void {
    const before = JSON.stringify(this.model);
    this.model = model;
    if (JSON.stringify(model) !== before) this.render();
  }

  private get modelSeesImages(): boolean | null {
    return this.model.state === 'ready' ? this.model.model.vision : null;
  }

  /** A live reply changed: redraw its bubble, at most every LIVE_REDRAW_MS.
   * Text that is due is drawn at once, in the event's own task: a timer
   * would let whatever the page queued meanwhile (a command's answer, the
   * chat list) go first, and the first text would wait for it. */
  updateLive(live: LiveReply): void {
    this.live = live;
    const firstText = hasText(live) && !(this.drewText && this.liveBubble?.el.isConnected);
    if (this.timer && !firstText) return;
    window.clearTimeout(this.timer);
    this.timer = 0;
    const wait = liveRedrawDelay(this.lastDraw, performance.now(), firstText);
    if (wait === 0 && hasText(live)) this.redrawLive();
    // no text yet (the "writing" dots): drawn after the command that started the reply is sent
    else this.timer = window.setTimeout(() => { this.timer = 0; this.redrawLive(); }, wait);
  }

  private redrawLive(): void {
    this.lastDraw = performance.now();
    if (!this.live || this.live.finished) return;
    if (this.live.stored.some((m) => m.id === this.live!.replyId)) return; // between a turn's answers
    timed('draw', () => this.drawLive(this.live!));
  }

  /** Redraws the live bubble with `live`'s text so far. */
  private drawLive(live: LiveReply): void {
    this.drewText = hasText(live);
    const nearEnd = this.isNearEnd();
    if (!this.liveBubble?.el.isConnected) {
      this.liveBubble = new LiveBubble();
      this.bubblesBuilt++;
      this.bubbleFor = { live, answer: live.stored.length };
      this.list.append(this.liveBubble.el);
    }
    this.liveBubble.update(live);
    if (this.drewText) mark('first-draw');
    if (nearEnd) this.scrollToEnd();
    else this.updateJump();
  }

  private render(): void {
    this.place();
    this.updateJump();
  }

  /** Puts the chat's elements in the list: those whose message (and what
   * else they show) did not change are kept as they are, so a reply that
   * starts or a message stored adds its own elements and lays out and
   * paints little else while the engine reads the prompt. */
  private place(): void {
    const wanted: Node[] = [];
    // between a turn's answers (a call waits or runs) the live reply is a stored one
    const between = !!this.live && this.live.stored.some((m) => m.id === this.live!.replyId);
    const liveId = this.live && !this.live.finished && !between ? this.live.replyId : null;
    const lastUser = [...this.messages].reverse().find((m) => m.role === 'user');
    const lastAssistant = this.messages[this.messages.length - 1]?.role === 'assistant' ? this.messages[this.messages.length - 1] : undefined;
    // said once, after the first message with images, while the model cannot see them
    const firstWithImages = this.modelSeesImages === false ? this.messages.find((m) => m.role === 'user' && m.attachments.some((a) => !isDocument(a))) : undefined;
    for (const m of this.messages) {
      if (m.role === 'user') {
        wanted.push(this.user(m, m === lastUser));
        if (m === firstWithImages) {
          const name = this.model.state === 'ready' ? this.model.model.name : '';
          wanted.push(this.kept.get('images-left-out', name, () => this.imagesLeftOut()));
        }
      } else if (m.role === 'assistant' && m.id !== liveId) {
        wanted.push(this.assistant(m, m === lastAssistant && !this.busy));
      } else if (m.role === 'tool') {
        wanted.push(this.kept.get(`m${m.id}`, recordKey(m), () => toolResult(m)));
      }
    }
    this.kept.sweep();
    const waiting = this.live && !this.live.finished ? this.live.toolCall : null;
    if (waiting?.needsApproval) wanted.push(this.approval(waiting.call));
    else if (waiting) wanted.push(h('div', { class: 'note tool-running', role: 'status', 'data-testid': 'tool-running' }, 'Running ', h('code', {}, waiting.call.name), '…'));
    if (this.live && !this.live.finished && !between) {
      // the same reply's answer keeps its bubble (a new one would draw its text again)
      const same = this.bubbleFor?.live === this.live && this.bubbleFor.answer === this.live.stored.length;
      if (!same || !this.liveBubble) {
        this.liveBubble = new LiveBubble();
        this.bubblesBuilt++;
        this.bubbleFor = { live: this.live, answer: this.live.stored.length };
      }
      this.liveBubble.update(this.live);
      this.drewText = hasText(this.live);
      wanted.push(this.liveBubble.el);
    } else {
      this.liveBubble = null;
      this.bubbleFor = null;
      this.drewText = false;
    }
    if (this.messages.length === 0 && !this.live) wanted.push(this.emptyChat());
    placeChildren(this.list, wanted);
  }

  private emptyChat(): HTMLElement {
    const m = this.model;
    if (m.state === 'unloaded') {
      const s = this.suggestion;
      return h('div', { class: 'empty-chat', 'data-testid': 'empty-chat' },
        h('h1', {}, 'No model is loaded'),
        h('p', {}, 'Load a model to start chatting.'),
        s ? h('p', { 'data-testid': 'suggested-model' }, `Suggested for this computer: ${s.name} (${s.detail}). `,
          h('button', { class: 'primary', 'data-testid': 'use-suggested-model', onclick: () => s.use() }, s.action)) : null,
        h('button', { class: s ? '' : 'primary', 'data-testid': 'empty-open-models', onclick: () => this.hooks.openModels() }, 'Choose a model in Models'));
    }
    if (m.state === 'loading') {
      return h('div', { class: 'empty-chat', 'data-testid': 'empty-chat' },
        h('h1', {}, 'What can I help with?'), h('p', {}, `Loading ${m.name}…`));
    }
    const starters = startersFor(m.model);
    return h('div', { class: 'empty-chat', 'data-testid': 'empty-chat' },
      h('h1', {}, 'What can I help with?'),
      h('p', { 'data-testid': 'empty-hint' }, starters.hint),
      h('div', { class: 'starters' }, ...starters.prompts.map((p) =>
        h('button', { class: 'starter', 'data-testid': 'starter', onclick: () => this.hooks.sendStarter(p) }, p))));
  }

  private imagesLeftOut(): HTMLElement {
    const name = this.model.state === 'ready' ? this.model.model.name : 'This model';
    return h('div', { class: 'chat-note', role: 'note', 'data-testid': 'images-left-out' },
      `${name} cannot see images: the images in this chat are sent to it as “[image]”. `,
      h('button', { class: 'link inline', onclick: () => this.hooks.openModels() }, 'Load a model that sees images'),
      ' to ask about them.');
  }

  /** A message you sent: built again only when the message (or the pages
   * its documents gave) changed; its actions (Edit, the versions) follow
   * whether a reply is being written. */
  private user(m: Message, last: boolean): HTMLElement {
    const docs = m.attachments.filter(isDocument).map((a) => this.pagesUsed(a.sha256) ?? null);
    const el = this.kept.get(`m${m.id}`, `${recordKey(m)}${docs.length ? JSON.stringify(docs) : ''}`, () => h('div', { class: 'msg user', 'data-testid': 'msg-user', 'data-id': m.id },
      m.attachments.length ? h('div', { class: 'msg-images' },
        // each opens larger on a click (Enter or Space from the keyboard)
        ...m.attachments.map((a, i) => isDocument(a) ? documentChip(a, { used: this.pagesUsed(a.sha256) }) : h('button', {
          class: 'msg-image-open', 'aria-label': `Show image ${i + 1} larger`, 'data-testid': 'msg-image-open',
          onclick: () => openImageViewer(attachmentUrl(a.sha256), `Image ${i + 1} you sent`),
        }, h('img', { src: attachmentUrl(a.sha256), alt: 'Image you sent', 'data-testid': 'msg-image' })))) : null,
      m.content ? h('div', { class: 'bubble' }, m.content) : null));
    el.classList.toggle('last', last);
    // the actions row is always there, so the layout does not jump when a reply ends
    return withTail(el, String(this.busy), () => [h('div', { class: 'msg-actions' },
      branchSwitcher(m, (id) => this.hooks.switchBranch(id), this.busy),
      this.busy ? null : h('button', { class: 'link', 'data-testid': 'edit-message', title: 'Edit and send as a new branch (this one is kept)', onclick: () => this.hooks.edit(m) }, 'Edit'),
      this.deleteBranchButton(m))]);
  }

  /** The pages of document `sha256` that the latest answer shown was given (its stats). */
  private pagesUsed(sha256: string): DocumentPages | undefined {
    for (let i = this.messages.length - 1; i >= 0; i--) {
      const used = this.messages[i].stats?.documents?.find((d) => d.sha256 === sha256);
      if (used) return used;
    }
    return undefined;
  }

  /** Only where there is another version to fall back on. */
  private deleteBranchButton(m: Message): HTMLElement | null {
    if (this.busy || m.siblings.length < 2) return null;
    const what = m.role === 'user' ? 'this version' : 'this answer';
    return h('button', { class: 'link', 'data-testid': 'delete-branch', title: `Delete ${what} and what follows it`, onclick: () => this.hooks.deleteBranch(m) }, 'Delete');
  }

  /** An answer: its text (Markdown) is built again only when the message
   * changed; what follows it (how it ended, its actions) follows whether it
   * is the last answer, whether a reply is being written, and the model. */
  private assistant(m: Message, last: boolean): HTMLElement {
    const el = this.kept.get(`m${m.id}`, recordKey(m), () => {
      const body = h('div', { class: 'answer markdown', 'data-testid': 'answer' });
      setMarkdown(body, formattedJsonAnswer(m.content));
      const thinking = m.reasoning ? h('details', { class: 'thinking', 'data-testid': 'thinking' },
        h('summary', {}, 'Thought'), h('div', { class: 'thinking-text' }, m.reasoning)) : null;
      const leftOut = m.stats?.left_out_messages;
      const leftOutNote = leftOut ? h('div', { class: 'note left-out-note', 'data-testid': 'left-out-note' },
        `${leftOut} earlier message${leftOut === 1 ? ' was' : 's were'} left out to fit the model’s context (this chat’s setting).`) : null;
      return h('div', { class: 'msg assistant', 'data-testid': 'msg-assistant', 'data-id': m.id },
        h('div', { class: 'msg-model' }, m.model ?? ''),
        thinking,
        leftOutNote,
        body,
        ...m.tool_calls.map(toolCallLine));
    });
    el.classList.toggle('last', last);
    const cut = m.status === 'complete' && m.stats?.finish_reason === 'length';
    const context = m.status === 'error' ? this.errorContext(m) : null;
    // a reply under way changes an answer's actions only where it has versions
    // (their switcher and Delete); `last` says the rest (Regenerate, Continue)
    const tail = JSON.stringify([last, this.busy && m.siblings.length > 1, cut && this.ownMaxTokens, context]);
    return withTail(el, tail, () => {
      const status = m.status === 'interrupted' ? h('div', { class: 'note' }, 'Stopped before the end.')
        : m.status === 'error' ? h('div', { class: 'error-note', 'data-testid': 'reply-error', 'data-code': m.error_code ?? '' },
          friendlyError(m.error_code, m.error ?? 'The reply failed.', context!))
          : cut ? h('div', { class: 'note cut-note', 'data-testid': 'cut-note' },
            `Cut at the limit of ${m.stats?.completion_tokens ?? 'its'} tokens (Max tokens per answer, in ${this.ownMaxTokens ? 'this chat’s settings' : 'Settings'}). `,
            last ? h('button', { class: 'link inline', 'data-testid': 'continue', onclick: () => this.hooks.continueReply() }, 'Continue') : null)
            : null;
      const stats = statsLine(m.stats);
      const copy: HTMLButtonElement = h('button', { class: 'link', 'data-testid': 'copy-reply', 'aria-live': 'polite', onclick: () => void copyWithFeedback(copy, m.content) }, 'Copy');
      return [status,
        h('div', { class: 'msg-actions' },
          branchSwitcher(m, (id) => this.hooks.switchBranch(id), this.busy),
          copy,
          last ? h('button', { class: 'link', 'data-testid': 'regenerate', title: 'A new answer (this one is kept: ‹ › switches)', onclick: () => this.hooks.regenerate() }, 'Regenerate') : null,
          this.deleteBranchButton(m),
          stats ? h('span', { class: 'stats', 'data-testid': 'stats' }, stats) : null)];
    });
  }

  /** The call waiting for the user: what it runs, with what, and the three answers. */
  private approval(call: ToolCallRecord): HTMLElement {
    const answer = (d: ToolDecision) => () => {
      for (const b of buttons) b.disabled = true;
      this.hooks.answerToolCall?.(call.id, d);
    };
    const buttons = [
      h('button', { class: 'primary', 'data-testid': 'tool-approve', onclick: answer('approve') }, 'Approve'),
      h('button', { 'data-testid': 'tool-deny', onclick: answer('deny') }, 'Deny'),
      h('button', { class: 'link', 'data-testid': 'tool-always-allow', title: `Run ${call.name} without asking from now on`, onclick: answer('always_allow') }, 'Always allow this tool'),
    ];
    return h('div', { class: 'tool-approval', role: 'group', 'aria-label': `Tool call ${call.name}`, 'data-testid': 'tool-approval' },
      h('div', {}, 'The model wants to call ', h('code', {}, call.name), call.server ? ` (${call.server})` : ''),
      h('pre', { class: 'tool-args', 'data-testid': 'tool-args' }, prettyArguments(call.arguments)),
      h('div', { class: 'tool-actions' }, ...buttons));
  }

  private errorContext(reply: Message): ErrorContext {
    const end = this.messages.findIndex((m) => m.id === reply.id);
    const before = end < 0 ? this.messages : this.messages.slice(0, end);
    return {
      modelSeesImages: this.modelSeesImages,
      imagesInChat: before.some((m) => m.role === 'user' && m.attachments.some((a) => !isDocument(a))),
    };
  }

  private isNearEnd(): boolean {
    const s = this.scroller;
    return s.scrollHeight - s.scrollTop - s.clientHeight < 80;
  }

  private updateJump(): void {
    const hidden = this.isNearEnd();
    if (this.jump.hidden !== hidden) this.jump.hidden = hidden;
  }

  private scrollToEnd(smooth = false): void {
    if (smooth) this.scroller.scrollTo({ top: this.scroller.scrollHeight, behavior: 'smooth' });
    else this.scroller.scrollTop = this.scroller.scrollHeight;
    if (!smooth) this.updateJump();
    else window.setTimeout(() => this.updateJump(), 400);
  }
}

const tails = new WeakMap<HTMLElement, { key: string; nodes: ChildNode[] }>();

/** `el` ending in `build`'s nodes, built again (in place of the ones before)
 * only when `key` changed: a kept message's actions follow the chat's state. */
function withTail(el: HTMLElement, key: string, build: () => (ChildNode | null)[]): HTMLElement {
  const was = tails.get(el);
  if (was?.key === key) return el;
  for (const n of was?.nodes ?? []) n.remove();
  const nodes = build().filter((n): n is ChildNode => n !== null);
  el.append(...nodes);
  tails.set(el, { key, nodes });
  return el;
}

/** The arguments as the model wrote them, indented when they are JSON. */
export function prettyArguments(args: string): string {
  try {
    return JSON.stringify(JSON.parse(args), null, 2);
  } catch {
    return args;
  }
}

/** "Calls read_file { path: … }" under an answer that called a tool. */
function toolCallLine(call: ToolCallRecord): HTMLElement {
  return h('details', { class: 'tool-call', 'data-testid': 'tool-call' },
    h('summary', {}, 'Calls ', h('code', {}, call.name), call.server ? ` (${call.server})` : ''),
    h('pre', { class: 'tool-args' }, prettyArguments(call.arguments)));
}

const OUTCOME_WORDS: Record<string, string> = { ok: 'Result of', error: 'Failed:', denied: 'Denied:', cancelled: 'Stopped:' };

/** A tool's result as plain text (never HTML: it comes from outside). */
export function toolResult(m: Message): HTMLElement {
  const info = m.tool_result;
  const outcome = info?.outcome ?? 'ok';
  return h('details', { class: `msg tool tool-${outcome}`, 'data-testid': 'msg-tool', 'data-outcome': outcome, 'data-id': m.id, open: outcome !== 'ok' },
    h('summary', {}, `${OUTCOME_WORDS[outcome] ?? 'Result of'} `, h('code', {}, info?.name ?? 'tool')),
    h('pre', { class: 'tool-output', 'data-testid': 'tool-output' }, m.content));
}

/** The reply being written: its answer grows block by block (finished
 * Markdown blocks keep their DOM), its thinking as plain text. */
class LiveBubble {
  readonly el: HTMLElement;
  private model = h('div', { class: 'msg-model' });
  private thinking: HTMLDetailsElement | null = null;
  private thinkingSummary = h('summary', {}, 'Thinking…');
  private thinkingText = h('div', { class: 'thinking-text' });
  private body = h('div', { class: 'answer markdown', 'data-testid': 'answer' });
  private markdown = new MarkdownBlocks(this.body);
  private typing = h('div', { class: 'typing', 'data-testid': 'typing', 'aria-label': 'Writing' }, h('span'), h('span'), h('span'));
  private error = h('div', { class: 'error-note', 'data-testid': 'reply-error', hidden: true });

  constructor() {
    this.el = h('div', { class: 'msg assistant streaming', 'data-testid': 'msg-live' }, this.model, this.body, this.typing, this.error);
  }

  update(live: LiveReply): void {
    // only what changed is written: a text written again, even the same,
    // is laid out and painted again on every redraw of the reply
    const id = String(live.replyId ?? -1);
    if (this.el.dataset.id !== id) this.el.dataset.id = id;
    if (this.model.textContent !== live.model) this.model.textContent = live.model;
    if (live.reasoning) {
      if (!this.thinking) {
        this.thinking = h('details', { class: 'thinking', 'data-testid': 'thinking', open: true }, this.thinkingSummary, this.thinkingText);
        this.model.after(this.thinking);
      }
      if (this.thinkingText.textContent !== live.reasoning) this.thinkingText.textContent = live.reasoning;
      if (live.content && this.thinkingSummary.textContent !== 'Thought') {
        this.thinkingSummary.textContent = 'Thought';
        this.thinking.open = false;
      }
    }
    this.markdown.update(live.content);
    this.typing.hidden = !!(live.content || live.reasoning || live.error);
    this.error.hidden = !live.error;
    if (live.error) {
      this.error.textContent = live.error.message;
      this.error.dataset.code = live.error.code;
    }
  }
}
