// While the engine reads a prompt, the window draws as little as it can
// (issue 29: on two cores, its drawing took the CPU from the first token):
// Send in a chat with answers keeps every element already drawn, the
// answers' Markdown included, adds only the new message and the reply's
// bubble, and changes only what a reply under way changes (no Edit, no
// Regenerate, the chat's "answering" mark in the sidebar, where the other
// chats stay as drawn). Once the answer is stored, the chat is as a full
// redraw would draw it. On a mocked backend whose reply's events the test sends.
import { afterEach, describe, expect, it } from 'vitest';
import { clearMocks, mockIPC } from '@tauri-apps/api/mocks';
import type { Channel } from '@tauri-apps/api/core';
import { App } from './app';
import { ChatView } from './chatView';
import type { Chat, EngineStatus, Message, StreamEvent } from './api';

afterEach(() => {
  clearMocks();
  document.body.innerHTML = '';
  localStorage.clear();
});

const tick = () => new Promise((r) => setTimeout(r, 0));
const settle = async () => { for (let i = 0; i < 8; i++) await tick(); };

const ready: EngineStatus = {
  state: 'ready', loading: null, knobs: null, error: null, idle_unloaded: null,
  model: { id: 'dir:tiny', name: 'Tiny', path: '', architecture: 'llama', quantization: null, quantization_words: null, max_context: 2048, vision: false, thinking: false, tools: false },
};
const chat = (id: number, title: string, updated: number): Chat => ({ id, title, model: null, created_at: 1, updated_at: updated, settings: null, answer_format: null });
const msg = (over: Partial<Message>): Message => ({
  id: 1, chat_id: 7, parent_id: null, siblings: [], role: 'user', content: '', reasoning: null, attachments: [], stats: null, model: 'Tiny',
  status: 'complete', error: null, error_code: null, created_at: 0, updated_at: 0, tool_calls: [], tool_result: null, ...over,
});
const question = msg({ id: 70, siblings: [70], content: 'What is a hash map?' });
const answer = msg({ id: 71, parent_id: 70, siblings: [71], role: 'assistant', content: 'A **table** of keys.\n\n- fast lookups', stats: { completion_tokens: 9 } });
const next = msg({ id: 72, parent_id: 71, siblings: [72], content: 'And a tree?' });
const nextAnswer = msg({ id: 73, parent_id: 72, siblings: [73], role: 'assistant', content: 'Ordered keys.', stats: { completion_tokens: 3 } });

/** The app with chat 7 (a question and its answer) open, beside chat 8;
 * Send's command ends when the test says. */
async function appInChat() {
  const calls: string[] = [];
  let reply: Channel<StreamEvent> | null = null;
  let endSend: () => void = () => {};
  mockIPC((cmd, args) => {
    calls.push(cmd);
    switch (cmd) {
      case 'engine_status': return ready;
      case 'server_status': return { running: false, url: null, error: null };
      case 'get_settings': return { settings: { thinking: true }, restart_needed: false, notes: [] };
      case 'list_chats': return [chat(7, 'Hash maps', 2000), chat(8, 'Other', 1000)];
      case 'list_messages': return (args as { chatId: number }).chatId === 7 ? [question, answer] : [];
      case 'send_message':
        reply = (args as { onEvent: Channel<StreamEvent> }).onEvent;
        return new Promise((resolve) => { endSend = () => resolve({ user: next, reply: { reply_id: 73, model: 'Tiny' } }); });
      case 'regenerate':
        reply = (args as { onEvent: Channel<StreamEvent> }).onEvent;
        return new Promise((resolve) => { endSend = () => resolve({ reply_id: 74, model: 'Tiny' }); });
      case 'list_models': return { catalog: [], local: [], models_dir: '/m', hf_cache_dir: '/hf', disk_bytes: 0 };
      case 'active_replies': case 'list_presets': case 'take_opened_files': case 'list_bulk_jobs': return [];
      default: return null;
    }
  }, { shouldMockEvents: true });
  const app = new App({ pickFiles: async () => [], pickChatFile: async () => null, pickExportFolder: async () => null, pickModel: async () => null, onDrop: () => {} });
  document.body.append(app.el);
  await app.start();
  app.el.querySelector<HTMLButtonElement>('[data-chat-id="7"] [data-testid=chat-open]')!.click();
  await settle();
  let index = 0;
  const internals = (window as unknown as { __TAURI_INTERNALS__: { runCallback(id: number, data: unknown): void } }).__TAURI_INTERNALS__;
  const event = (e: StreamEvent) => internals.runCallback(reply!.id, { index: index++, message: e });
  const count = (cmd: string) => calls.filter((c) => c === cmd).length;
  return { app, event, count, endSend: () => endSend() };
}

const one = (app: App, selector: string) => app.el.querySelector<HTMLElement>(selector);
const all = (app: App, selector: string) => [...app.el.querySelectorAll<HTMLElement>(selector)];

describe('Send while the engine reads the prompt', () => {
  it('keeps what the chat and the sidebar drew, adds the message and the bubble, and ends as a full redraw would', async () => {
    const { app, event, count, endSend } = await appInChat();
    const asked = one(app, '[data-testid=msg-user][data-id="70"]')!;
    const answered = one(app, '[data-testid=msg-assistant][data-id="71"]')!;
    const markdown = answered.querySelector('[data-testid=answer]')!;
    const other = one(app, '[data-chat-id="8"]')!;
    expect(all(app, '[data-testid=edit-message]').length).toBe(1);
    expect(answered.querySelector('[data-testid=regenerate]')).not.toBeNull();
    const reads = count('list_messages');

    app.el.querySelector<HTMLTextAreaElement>('[data-testid=composer-input]')!.value = 'And a tree?';
    one(app, '[data-testid=send]')!.click();
    await settle();
    event({ kind: 'started', chat_id: 7, reply_id: 73, model: 'Tiny' });
    await settle();
    endSend();
    await settle();
    const bubble = one(app, '[data-testid=msg-live]')!;
    expect(bubble).not.toBeNull();

    // what was drawn stays drawn; what a reply under way changes, changed
    expect(one(app, '[data-testid=msg-user][data-id="70"]')).toBe(asked);
    expect(one(app, '[data-testid=msg-assistant][data-id="71"]')).toBe(answered);
    expect(answered.querySelector('[data-testid=answer]')).toBe(markdown);
    expect(one(app, '[data-testid=msg-live]')).toBe(bubble);
    expect(all(app, '[data-testid=messages] > *').map((e) => e.dataset.id)).toEqual(['70', '71', '72', '73']);
    expect(all(app, '[data-testid=edit-message]')).toEqual([]);
    expect(one(app, '[data-testid=regenerate]')).toBeNull();
    expect(all(app, '.msg.last').map((e) => e.dataset.id)).toEqual(['72']);
    expect(count('list_messages')).toBe(reads);
    expect(one(app, '[data-chat-id="8"]')).toBe(other);
    expect(one(app, '[data-chat-id="7"] .busy-dot')).not.toBeNull();

    event({ kind: 'content', text: 'Ordered' });
    expect(one(app, '[data-testid=msg-live] [data-testid=answer]')?.textContent?.trim()).toBe('Ordered');
    expect(one(app, '[data-testid=msg-live]')).toBe(bubble);
    event({ kind: 'finished', message: nextAnswer });
    await settle();

    // the stored answer in the bubble's place, the chat as a full redraw draws it
    expect(one(app, '[data-testid=msg-live]')).toBeNull();
    expect(answered.querySelector('[data-testid=answer]')).toBe(markdown);
    const drawn = all(app, '[data-testid=messages] > *').map((e) => e.outerHTML);
    const fresh = new ChatView({ regenerate: () => {}, edit: () => {}, continueReply: () => {}, sendStarter: () => {}, openModels: () => {}, switchBranch: () => {}, deleteBranch: () => {} });
    fresh.show([question, answer, next, nextAnswer], null);
    expect(drawn).toEqual([...fresh.el.querySelectorAll<HTMLElement>('[data-testid=messages] > *')].map((e) => e.outerHTML));
    expect(all(app, '[data-testid=edit-message]').length).toBe(2);
    expect(one(app, '[data-testid=msg-assistant][data-id="73"] [data-testid=regenerate]')).not.toBeNull();
    expect(one(app, '[data-chat-id="7"] .busy-dot')).toBeNull();
  });
});

describe('Send, drawn once', () => {
  for (const answerFirst of [false, true]) {
    it(`draws the message, the bubble, Stop, the chat's mark and the emptied box in one task, when the reply's start and the command's answer are both in (${answerFirst ? 'the answer first' : 'the start first'})`, async () => {
      const { app, event, endSend } = await appInChat();
      const box = one(app, '[data-testid=composer-input]') as HTMLTextAreaElement;
      box.value = 'And a tree?';
      // each callback gets what one task (and its microtasks) changed
      const tasks: number[] = [];
      const observer = new MutationObserver((records) => tasks.push(records.length));
      observer.observe(app.el, { subtree: true, childList: true, attributes: true, characterData: true });
      one(app, '[data-testid=send]')!.click();
      await settle();
      if (answerFirst) endSend();
      else event({ kind: 'started', chat_id: 7, reply_id: 73, model: 'Tiny' });
      await settle();

      // half-way nothing is drawn: the text still in the box, no bubble, Send (not Stop)
      expect(tasks).toEqual([]);
      expect(box.value).toBe('And a tree?');
      expect(one(app, '[data-testid=msg-live]')).toBeNull();
      expect(one(app, '[data-testid=stop]')!.hidden).toBe(true);
      // a second Send meanwhile sends nothing again
      one(app, '[data-testid=send]')!.click();
      await settle();
      expect(tasks).toEqual([]);

      if (answerFirst) event({ kind: 'started', chat_id: 7, reply_id: 73, model: 'Tiny' });
      else endSend();
      await settle();
      observer.disconnect();
      expect(tasks.length).toBe(1);
      expect(box.value).toBe('');
      expect(all(app, '[data-testid=messages] > *').map((e) => e.dataset.id)).toEqual(['70', '71', '72', '73']);
      expect(one(app, '[data-testid=msg-live]')!.dataset.id).toBe('73');
      expect(one(app, '[data-testid=stop]')!.hidden).toBe(false);
      expect(one(app, '[data-chat-id="7"] .busy-dot')).not.toBeNull();

      // the first piece is drawn at once, in its own event's task
      event({ kind: 'content', text: 'Ordered' });
      expect(one(app, '[data-testid=msg-live] [data-testid=answer]')?.textContent?.trim()).toBe('Ordered');
    });
  }
});

describe('Regenerate, drawn once', () => {
  it('takes the old answer away and draws the new one\'s bubble in one task, once it has started and the command has answered', async () => {
    const { app, event, endSend } = await appInChat();
    const tasks: number[] = [];
    const observer = new MutationObserver((records) => tasks.push(records.length));
    observer.observe(app.el, { subtree: true, childList: true, attributes: true, characterData: true });
    one(app, '[data-testid=regenerate]')!.click();
    await settle();
    event({ kind: 'started', chat_id: 7, reply_id: 74, model: 'Tiny' });
    await settle();
    expect(tasks).toEqual([]);
    expect(one(app, '[data-testid=msg-assistant][data-id="71"]')).not.toBeNull();

    endSend();
    await settle();
    observer.disconnect();
    expect(tasks.length).toBe(1);
    expect(all(app, '[data-testid=messages] > *').map((e) => e.dataset.id)).toEqual(['70', '74']);
    expect(one(app, '[data-chat-id="7"] .busy-dot')).not.toBeNull();
  });
});

describe('ChatView', () => {
  const noHooks = { regenerate: () => {}, edit: () => {}, continueReply: () => {}, sendStarter: () => {}, openModels: () => {}, switchBranch: () => {}, deleteBranch: () => {} };

  it('builds an element only for what changed, and draws the same chat as a view built afresh', () => {
    const view = new ChatView(noHooks);
    view.show([question, answer], null);
    expect(view.built).toBe(2);
    view.show([question, answer], null);
    expect(view.built).toBe(2);
    // a reply starts: its bubble; its message stored: the message
    const live = { chatId: 7, replyId: null, model: '', content: '', reasoning: '', error: null, finished: null, stored: [], toolCall: null };
    view.show([question, answer], live);
    expect(view.built).toBe(3);
    view.show([question, answer, next], live);
    expect(view.built).toBe(4);
    // another version of the answer (the same id, new text) is built again; the rest is kept
    const edited = { ...answer, content: 'Keys in buckets.', siblings: [71, 74] };
    view.show([question, edited], null);
    expect(view.built).toBe(5);
    const fresh = new ChatView(noHooks);
    fresh.show([question, edited], null);
    const html = (v: ChatView) => [...v.el.querySelectorAll('[data-testid=messages] > *')].map((e) => e.outerHTML);
    expect(html(view)).toEqual(html(fresh));
  });
});
