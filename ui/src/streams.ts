// Replies under way, per chat, so several chats can generate at once and a
// chat shows its own progress when you switch back to it.
import type { AppError, Chat, Message, StreamEvent, ToolCallRecord } from './api';
import { mark, timed } from './timeline';

/** A tool call of the turn waiting for the user (or running, when always allowed). */
export interface PendingToolCall {
  messageId: number;
  call: ToolCallRecord;
  needsApproval: boolean;
}

export interface LiveReply {
  chatId: number;
  replyId: number | null;
  model: string;
  content: string;
  reasoning: string;
  error: AppError | null;
  /** Set when the reply has ended: the stored message. */
  finished: Message | null;
  /** Messages of this turn already stored: answers that called tools and
   * the tools' results, in order (the model's next answer streams after them). */
  stored: Message[];
  /** The tool call being shown, until its result comes. */
  toolCall: PendingToolCall | null;
}

/** An answer that ended in tool calls is not the end of its turn: the
 * calls run and the model answers again. */
export function endsTurn(m: Message): boolean {
  return !(m.role === 'assistant' && m.status === 'complete' && m.tool_calls.length > 0);
}

/** A reply still running (`running`: its chat's reply under way) with
 * nothing to show yet: the engine is reading its prompt. */
export function answerPending(live: LiveReply, running: boolean): boolean {
  return running && !live.finished && !live.content && !live.reasoning && !live.error;
}

type Listener = (chatId: number, reply: LiveReply) => void;

export class Streams {
  private live = new Map<number, LiveReply>();
  private listeners = new Set<Listener>();

  get(chatId: number): LiveReply | undefined {
    return this.live.get(chatId);
  }

  isRunning(chatId: number): boolean {
    const r = this.live.get(chatId);
    return !!r && !r.finished;
  }

  runningChats(): number[] {
    return [...this.live.values()].filter((r) => !r.finished).map((r) => r.chatId);
  }

  subscribe(f: Listener): () => void {
    this.listeners.add(f);
    return () => this.listeners.delete(f);
  }

  /** Begins tracking a reply in `chatId`; returns the handler for its channel.
   * The listeners hear of it once the caller's code has run on (a microtask):
   * the command that starts the reply is sent first, and what they redraw
   * (the chat list, the status bar) is not on the way to the first token. */
  begin(chatId: number): (e: StreamEvent) => void {
    const reply: LiveReply = { chatId, replyId: null, model: '', content: '', reasoning: '', error: null, finished: null, stored: [], toolCall: null };
    this.live.set(chatId, reply);
    queueMicrotask(() => {
      if (this.live.get(chatId) === reply) this.emit(chatId, reply);
    });
    return (e) => this.apply(chatId, reply, e);
  }

  /** Begins tracking the reply of a chat that Send makes (its first
   * message): the chat has no id until the channel names it
   * (`chat_created`, before anything else). `onChat` hears of it first, then
   * the reply is tracked as `begin` tracks one; nothing comes before it. */
  beginNew(onChat: (chat: Chat) => void): (e: StreamEvent) => void {
    let handler: ((e: StreamEvent) => void) | null = null;
    return (e) => {
      if (e.kind === 'chat_created') {
        onChat(e.chat);
        handler = this.begin(e.chat.id);
      } else handler?.(e);
    };
  }

  /** Forgets a reply that never started (the command failed). */
  abandon(chatId: number): void {
    const r = this.live.get(chatId);
    if (r && !r.finished) {
      this.live.delete(chatId);
      this.emit(chatId, { ...r, finished: null });
    }
  }

  /** Drops finished replies of a chat once its stored messages are shown. */
  settle(chatId: number): void {
    if (this.live.get(chatId)?.finished) this.live.delete(chatId);
  }

  private apply(chatId: number, reply: LiveReply, e: StreamEvent): void {
    if (this.live.get(chatId) !== reply) return; // a newer reply replaced this one
    timed('event', () => this.applyNow(chatId, reply, e));
  }

  private applyNow(chatId: number, reply: LiveReply, e: StreamEvent): void {
    mark(e.kind === 'content' || e.kind === 'reasoning' ? 'first-piece' : e.kind);
    switch (e.kind) {
      case 'started':
        // the turn's next answer (after tool results) starts afresh
        if (reply.replyId !== null && reply.replyId !== e.reply_id) { reply.content = ''; reply.reasoning = ''; reply.error = null; }
        reply.replyId = e.reply_id; reply.model = e.model; break;
      case 'snapshot': reply.content = e.content; reply.reasoning = e.reasoning; break;
      case 'content': reply.content += e.text; break;
      case 'reasoning': reply.reasoning += e.text; break;
      case 'error': reply.error = e.error; break;
      case 'finished':
        if (endsTurn(e.message)) reply.finished = e.message;
        else { reply.stored.push(e.message); reply.content = ''; reply.reasoning = ''; }
        break;
      case 'tool_call': reply.toolCall = { messageId: e.message_id, call: e.call, needsApproval: e.needs_approval }; break;
      case 'tool_result': reply.stored.push(e.message); reply.toolCall = null; break;
    }
    this.emit(chatId, reply);
  }

  private emit(chatId: number, reply: LiveReply): void {
    for (const f of this.listeners) f(chatId, reply);
  }
}
